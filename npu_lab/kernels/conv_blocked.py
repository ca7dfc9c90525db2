"""Blocked im2col: convolution products that never build the whole patch matrix.

:mod:`npu_lab.kernels.conv` unfolds the whole batch into one patch matrix of
``C*kd*kh*kw`` rows and ``N*positions`` columns (``kd*kh*kw`` times larger than
the input: 9.5 MB for a 4x8x16x16x16 input and a 3x3x3 kernel), then one BLAS
product reads it back. Both passes stream that matrix through main memory, and
the unfold and fold took as long as the products themselves.

Here the columns are cut into *blocks* of whole output rows of one sample
(``rows_per_block`` rows of ``ow`` positions). Each thread unfolds one block into
its own small buffer (a few hundred KB, sized to stay in the core's L2 cache),
multiplies it at once, and goes on with the next block: the patches are written
and read in cache, never in memory, and the whole product keeps the layout BLAS
wants (row ``(c, tap)``, column position, contiguous along the positions).

Two drivers, one per direction of the picture:

* :func:`unfold_products` unfolds ``x`` block by block and, for each group ``g``,
  (a) writes ``a_out[n, rows of g, block] = a_g @ cols_g`` (a plain convolution's
  output, or a transposed one's input gradient), and/or (b) accumulates
  ``partial[t] += left[n, rows of g, block] @ cols_g^T`` (a weight gradient, one
  partial sum per thread, added up by the caller).
* :func:`fold_products` is the adjoint: per block it forms the patch-shaped
  ``a_g^T @ src[n, rows of g, block]`` and folds (scatter-adds) it into ``out``
  (a plain convolution's input gradient, or a transposed convolution's output).
  Neighbouring blocks add into overlapping input values, so the work is split by
  *sample and output channel* instead (each thread owns whole channels of ``out``
  and walks all of that sample's blocks): no two threads ever write the same value.

**The wide layout.** With ``ow`` outputs per row (14 for a 16-wide input and a
3-wide kernel), a tap's patch row is a string of short copies, one per output
row, and those ran well below copy speed (1.4 ms against 0.87 ms for the
benchmark's patches). When the width stride and the height stride are 1 and the
width is not padded, output row ``oy`` of a tap reads input row ``oy + const``
from a fixed column on, so the block gives every output row ``W`` columns (the
input's width): its ``ow`` outputs, then ``W - ow`` *junk* columns. Consecutive
rows of one depth plane are then one contiguous copy of the input
(:func:`unfold_rows_wide`, :func:`fold_rows_wide`), at memory-copy speed. The
junk costs ``W/ow`` more multiply-adds and is kept out of the results: the junk
columns of patches and gradients are zeros (so they add nothing to a weight
gradient or a fold), and the products' junk outputs are never copied out.

Threads take contiguous ranges of blocks (or units) statically, so each one owns
one buffer slot and the weight gradient's partial sums come out in a fixed order
(deterministic results). Each thread calls the BLAS library (PyTorch's ``?gemm``,
found by :mod:`npu_lab.kernels.blas`) with a thread count of one, for the reason
given there: the library must not start an OpenMP team of its own next to numba's.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange
from numba import uint64 as U

from .blas import _N, _T, _call_int, call_gemm

_opts = dict(cache=True, nogil=True, error_model="numpy")

#: Bytes of one thread's patch block: a quarter of a 1 MB L2 cache, leaving room for the product's other operands.
BLOCK_BYTES = 256 * 1024


def rows_per_block(rows: int, ow: int, patch_rows: int, itemsize: int, samples: int, workers: int) -> int:
    """Output rows per block: about :data:`BLOCK_BYTES` of patches (at least one row), the sample's rows cut
    into equal blocks, and enough blocks for every worker to have some."""
    target = max(1, BLOCK_BYTES // max(1, patch_rows * ow * itemsize))
    # enough blocks in the batch for each worker to get two (better balance when samples are few)
    per_sample = -(-2 * workers // max(1, samples))
    target = min(target, max(1, -(-rows // per_sample)))
    blocks = -(-rows // target)
    return -(-rows // blocks)  # equal blocks: no short last block when the rows allow it


@numba.njit(**_opts)
def _span(off, s, size, count):
    """The outputs ``o`` in ``[0, count)`` whose input ``o * s + off`` lies in ``[0, size)``: ``(lo, hi)``."""
    lo = 0 if off >= 0 else (-off + s - 1) // s
    last = size - 1 - off  # o * s <= last
    hi = last // s + 1 if last >= 0 else 0
    lo = min(lo, count)
    hi = min(max(hi, lo), count)
    return lo, hi


@numba.njit(**_opts)
def _spans(kw, sw, pw, dw, w_, ow):
    """Per width tap ``j``: its offset ``j*dw - pw`` and the valid ``ox`` range of :func:`_span`, as (kw, 3)."""
    spans = np.empty((kw, 3), np.int64)
    for j in range(kw):
        off = j * dw - pw
        lo, hi = _span(off, sw, w_, ow)
        spans[j, 0] = off
        spans[j, 1] = lo
        spans[j, 2] = hi
    return spans


@numba.njit(**_opts)
def unfold_rows(x, n, r0, r1, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, oh, ow, buf):
    """Patches of output rows ``[r0, r1)`` (row ``r`` is ``(oz, oy) = divmod(r, oh)``) of sample ``n`` of ``x``
    (N, C, D, H, W): ``buf[c*kk + tap, (r - r0)*ow + ox]`` is the input value that tap sees (0 in the padding).

    Per width tap the valid ``ox`` are one range (:func:`_spans`), so the innermost loops are a plain copy
    (contiguous for stride 1, which LLVM vectorises) between two runs of zeros, with no test per value; the
    width taps are the loop just outside it, so the input row's position and bounds are worked out once for
    all of them. The arrays are indexed flat with unsigned indices: numba adds a negative-index check to
    every signed index, and that check alone kept the copy from being vectorised (2.3x slower)."""
    c_, d_, h_, w_ = x.shape[1], x.shape[2], x.shape[3], x.shape[4]
    kk = kd * kh * kw
    xf = x.reshape(-1)
    bf = buf.reshape(-1)
    ld = buf.shape[1]
    spans = _spans(kw, sw, pw, dw, w_, ow)
    for c in range(c_):
        plane = (n * c_ + c) * d_
        for a in range(kd):
            for i in range(kh):
                first = c * kk + (a * kh + i) * kw  # the patch row of width tap 0
                oz = r0 // oh  # (oz, oy) stepped along: no division per row
                oy = r0 - oz * oh
                for r in range(r0, r1):
                    iz = oz * sd - pd + a * dd
                    iy = oy * sh - ph + i * dh
                    col = (r - r0) * ow
                    oy += 1
                    if oy == oh:
                        oy = 0
                        oz += 1
                    if iz < 0 or iz >= d_ or iy < 0 or iy >= h_:
                        for j in range(kw):
                            dst = (first + j) * ld + col
                            for ox in range(ow):
                                bf[U(dst + ox)] = 0
                        continue
                    line = ((plane + iz) * h_ + iy) * w_
                    for j in range(kw):
                        src = line + spans[j, 0]
                        lo, hi = spans[j, 1], spans[j, 2]
                        dst = (first + j) * ld + col
                        for ox in range(lo):
                            bf[U(dst + ox)] = 0
                        if sw == 1:
                            for ox in range(lo, hi):
                                bf[U(dst + ox)] = xf[U(src + ox)]
                        else:
                            for ox in range(lo, hi):
                                bf[U(dst + ox)] = xf[U(src + ox * sw)]
                        for ox in range(hi, ow):
                            bf[U(dst + ox)] = 0


@numba.njit(**_opts)
def unfold_rows_wide(x, n, r0, r1, kd, kh, kw, sd, pd, ph, dd, dh, dw, oh, ow, buf):
    """:func:`unfold_rows` in the *wide* layout, for width stride 1, no width padding and height stride 1:
    each output row takes ``W`` (the input's width) columns, its ``ow`` outputs then ``W - ow`` junk columns,
    set to zero. A tap then reads consecutive output rows of one depth plane from consecutive stretches of
    ``W`` input values, so its patch row is one long contiguous copy (hundreds of values, fully vectorised)
    instead of one short copy per output row."""
    c_, d_, h_, w_ = x.shape[1], x.shape[2], x.shape[3], x.shape[4]
    kk = kd * kh * kw
    xf = x.reshape(-1)
    bf = buf.reshape(-1)
    ld = buf.shape[1]
    for c in range(c_):
        plane = (n * c_ + c) * d_
        for a in range(kd):
            for i in range(kh):
                for j in range(kw):
                    base = (c * kk + (a * kh + i) * kw + j) * ld
                    r = r0
                    while r < r1:  # one run of output rows of one depth plane at a time
                        oz = r // oh
                        oy = r - oz * oh
                        end = min(r1, (oz + 1) * oh)
                        col = base + (r - r0) * w_
                        count = (end - r) * w_
                        iz = oz * sd - pd + a * dd
                        # the rows whose input row iy = oy - ph + i*dh exists: [ya, yb)
                        ya = max(oy, ph - i * dh)
                        yb = min(oy + end - r, h_ + ph - i * dh)
                        if iz < 0 or iz >= d_ or ya >= yb:
                            for q in range(count):
                                bf[U(col + q)] = 0
                            r = end
                            continue
                        head = (ya - oy) * w_
                        for q in range(head):
                            bf[U(col + q)] = 0
                        dst = col + head
                        src = ((plane + iz) * h_ + ya - ph + i * dh) * w_ + j * dw
                        for q in range((yb - ya - 1) * w_ + ow):  # stops at the last row's last output
                            bf[U(dst + q)] = xf[U(src + q)]
                        for y in range(yb - ya):  # the junk columns: zeros, so they add nothing anywhere
                            for q in range(ow, w_):
                                bf[U(dst + y * w_ + q)] = 0
                        for q in range((yb - oy) * w_, count):
                            bf[U(col + q)] = 0
                        r = end


@numba.njit(**_opts)
def fold_rows(buf, n, c0, c1, r0, r1, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, oh, ow, out):
    """Adjoint of :func:`unfold_rows` for channels ``[c0, c1)`` of ``out`` (N, C, D, H, W):
    ``out[n, c, ...] += buf[(c - c0)*kk + tap, (r - r0)*ow + ox]`` at the input value each entry came from
    (the same loop order and flat unsigned indices)."""
    c_, d_, h_, w_ = out.shape[1], out.shape[2], out.shape[3], out.shape[4]
    kk = kd * kh * kw
    of = out.reshape(-1)
    bf = buf.reshape(-1)
    ld = buf.shape[1]
    spans = _spans(kw, sw, pw, dw, w_, ow)
    for c in range(c0, c1):
        plane = (n * c_ + c) * d_
        for a in range(kd):
            for i in range(kh):
                first = (c - c0) * kk + (a * kh + i) * kw
                oz = r0 // oh
                oy = r0 - oz * oh
                for r in range(r0, r1):
                    iz = oz * sd - pd + a * dd
                    iy = oy * sh - ph + i * dh
                    col = (r - r0) * ow
                    oy += 1
                    if oy == oh:
                        oy = 0
                        oz += 1
                    if iz < 0 or iz >= d_ or iy < 0 or iy >= h_:
                        continue
                    line = ((plane + iz) * h_ + iy) * w_
                    for j in range(kw):
                        dst = line + spans[j, 0]
                        lo, hi = spans[j, 1], spans[j, 2]
                        src = (first + j) * ld + col
                        if sw == 1:
                            for ox in range(lo, hi):
                                of[U(dst + ox)] += bf[U(src + ox)]
                        else:
                            for ox in range(lo, hi):
                                of[U(dst + ox * sw)] += bf[U(src + ox)]


@numba.njit(**_opts)
def fold_rows_wide(buf, n, c0, c1, r0, r1, kd, kh, kw, sd, pd, ph, dd, dh, dw, oh, ow, out):
    """Adjoint of :func:`unfold_rows_wide` for channels ``[c0, c1)`` of ``out``: one long contiguous add per
    tap and run of rows. ``buf``'s junk columns must be zero: they land on real values of ``out`` (the start
    of the next input row), always in the same channel's plane, which only this caller writes."""
    c_, d_, h_, w_ = out.shape[1], out.shape[2], out.shape[3], out.shape[4]
    kk = kd * kh * kw
    of = out.reshape(-1)
    bf = buf.reshape(-1)
    ld = buf.shape[1]
    for c in range(c0, c1):
        plane = (n * c_ + c) * d_
        for a in range(kd):
            for i in range(kh):
                for j in range(kw):
                    base = ((c - c0) * kk + (a * kh + i) * kw + j) * ld
                    r = r0
                    while r < r1:
                        oz = r // oh
                        oy = r - oz * oh
                        end = min(r1, (oz + 1) * oh)
                        iz = oz * sd - pd + a * dd
                        ya = max(oy, ph - i * dh)
                        yb = min(oy + end - r, h_ + ph - i * dh)
                        if 0 <= iz < d_ and ya < yb:
                            src = base + (r - r0 + ya - oy) * w_
                            dst = ((plane + iz) * h_ + ya - ph + i * dh) * w_ + j * dw
                            for q in range((yb - ya - 1) * w_ + ow):
                                of[U(dst + q)] += bf[U(src + q)]
                        r = end


@numba.njit(parallel=True, **_opts)
def unfold_products(fn, set_threads, workers, x, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, od, oh, ow,
                    groups, rpb, a, a_out, do_a, left, partial, do_w, wide, buf, aux, one, zero):
    """Blocked ``unfold`` of ``x`` (N, Cs, D, H, W) for an output of ``(od, oh, ow)`` positions ``P``, each block
    multiplied at once, per group ``g`` (``Kg = Cs/groups*kk`` patch rows):

    * ``do_a``: ``a_out[n, g-rows, block] = a[g-rows] @ cols_g``, with ``a`` (MA, Kg), ``a_out`` (N, MA, P);
    * ``do_w``: ``partial[t, g-rows] += left[n, g-rows, block] @ cols_g^T``, ``left`` (N, MB, P),
      ``partial`` (workers, MB, Kg): worker ``t``'s share of a weight gradient (the caller sums over ``t``).

    ``buf`` (workers, Cs*kk, >= rpb*width) is each worker's patch block; every array is C-contiguous. ``wide``
    (width stride 1, no width padding, height stride 1) takes the layout of :func:`unfold_rows_wide`, ``width``
    columns per output row with ``width = W``, else ``width = ow``; its products then go through ``aux``
    (workers, >= MB + MA/groups, >= rpb*W): the ``left`` block re-laid out wide (junk columns zero) in its
    first ``MB`` rows, then a group's output block before its junk columns are dropped."""
    n_ = x.shape[0]
    rows = od * oh
    positions = rows * ow
    per_sample = (rows + rpb - 1) // rpb
    blocks = n_ * per_sample
    kg = buf.shape[1] // groups
    ld = buf.shape[2]
    size = buf.itemsize
    ma = a_out.shape[1] // groups
    mb = left.shape[1] // groups
    for t in prange(workers):
        b0 = blocks * t // workers
        b1 = blocks * (t + 1) // workers
        if do_w and b1 == b0:
            partial[t] = 0
        before = 0
        if set_threads != 0:
            before = _call_int(set_threads, (np.int64(1),))
        bt = buf[t]
        pb = bt.ctypes.data
        at = aux[t]
        pa = at.ctypes.data
        la = aux.shape[2]
        w_ = x.shape[4]
        for b in range(b0, b1):
            n = b // per_sample
            r0 = (b - n * per_sample) * rpb
            r1 = min(r0 + rpb, rows)
            if wide:
                cols = (r1 - r0) * w_
                unfold_rows_wide(x, n, r0, r1, kd, kh, kw, sd, pd, ph, dd, dh, dw, oh, ow, bt)
                if do_w:  # the gradient block, wide, junk columns zero (they meet the patches' zero columns)
                    for m in range(left.shape[1]):
                        for r in range(r0, r1):
                            for q in range(ow):
                                at[m, (r - r0) * w_ + q] = left[n, m, r * ow + q]
                            for q in range(ow, w_):
                                at[m, (r - r0) * w_ + q] = 0
            else:
                cols = (r1 - r0) * ow
                unfold_rows(x, n, r0, r1, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, oh, ow, bt)
            for g in range(groups):
                pg = pb + g * kg * ld * size
                if do_w:  # (kg x mb) = cols_g (kg x cols) . left_g^T (cols x mb), column-major
                    if wide:
                        pl, ll = pa + g * mb * la * size, la
                    else:
                        pl = left.ctypes.data + ((n * left.shape[1] + g * mb) * positions + r0 * ow) * size
                        ll = positions
                    call_gemm(fn, _T, _N, kg, mb, cols, pg, ld, pl, ll,
                          partial.ctypes.data + (t * left.shape[1] + g * mb) * kg * size, kg, one,
                          zero if b == b0 else one)
                if do_a and wide:  # into aux, then its outputs (not the junk columns) into a_out
                    below = left.shape[1] if do_w else 0  # under the gradient block when there is one
                    call_gemm(fn, _N, _N, cols, ma, kg, pg, ld, a.ctypes.data + g * ma * kg * size, kg,
                          pa + below * la * size, la, one, zero)
                    for m in range(ma):
                        for r in range(r0, r1):
                            for q in range(ow):
                                a_out[n, g * ma + m, r * ow + q] = at[below + m, (r - r0) * w_ + q]
                elif do_a:  # (cols x ma) = cols_g^T (cols x kg) . a_g^T (kg x ma), column-major
                    call_gemm(fn, _N, _N, cols, ma, kg, pg, ld, a.ctypes.data + g * ma * kg * size, kg,
                          a_out.ctypes.data + ((n * a_out.shape[1] + g * ma) * positions + r0 * ow) * size,
                          positions, one, zero)
        if set_threads != 0:
            _call_int(set_threads, (before,))


@numba.njit(parallel=True, **_opts)
def fold_products(fn, set_threads, workers, src, a, groups, chunk, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw,
                  od, oh, ow, rpb, out, wide, buf, aux, one, zero):
    """Blocked adjoint: ``out`` (N, Co, D, H, W) = ``fold`` of the patches ``a_g^T @ src_g`` of an unfold with
    output ``(od, oh, ow)``, per group ``g``: ``src`` (N, M, P), ``a`` (M, Kg) with ``Kg = Co/groups*kk``.

    The work is split in units of one sample and up to ``chunk`` output channels of one group; a worker takes
    a contiguous range of units and, for each, zeroes its channels, then per block of output rows forms that
    block's patches for its channels only (``buf[t]``, (>= chunk*kk, >= rpb*width)) and folds them in.
    ``wide``: the layout of :func:`fold_rows_wide` (``width = W``, else ``ow``); the ``src`` block is first
    re-laid out wide in ``aux[t]`` (>= M/groups, >= rpb*W), junk columns zero."""
    n_, co = out.shape[0], out.shape[1]
    kk = kd * kh * kw
    rows = od * oh
    positions = rows * ow
    per_group = co // groups
    chunks = (per_group + chunk - 1) // chunk
    units = n_ * groups * chunks
    kg = per_group * kk
    m = src.shape[1]
    mg = m // groups
    ld = buf.shape[2]
    size = buf.itemsize
    for t in prange(workers):
        u0 = units * t // workers
        u1 = units * (t + 1) // workers
        before = 0
        if set_threads != 0:
            before = _call_int(set_threads, (np.int64(1),))
        bt = buf[t]
        at = aux[t]
        w_ = out.shape[4]
        for u in range(u0, u1):
            n = u // (groups * chunks)
            g = (u // chunks) % groups
            q = u % chunks
            c0 = g * per_group + q * chunk
            c1 = min(c0 + chunk, (g + 1) * per_group)
            out[n, c0:c1] = 0
            for r0 in range(0, rows, rpb):
                r1 = min(r0 + rpb, rows)
                pa = a.ctypes.data + (g * mg * kg + (c0 - g * per_group) * kk) * size  # this unit's columns of a_g
                if wide:
                    cols = (r1 - r0) * w_
                    for e in range(mg):
                        for r in range(r0, r1):
                            for x in range(ow):
                                at[e, (r - r0) * w_ + x] = src[n, g * mg + e, r * ow + x]
                            for x in range(ow, w_):
                                at[e, (r - r0) * w_ + x] = 0
                    call_gemm(fn, _N, _T, cols, (c1 - c0) * kk, mg, at.ctypes.data, aux.shape[2], pa, kg,
                          bt.ctypes.data, ld, one, zero)
                    for e in range((c1 - c0) * kk):  # junk columns exactly zero, whatever the weights hold
                        for r in range(r1 - r0):
                            for x in range(ow, w_):
                                bt[e, r * w_ + x] = 0
                    fold_rows_wide(bt, n, c0, c1, r0, r1, kd, kh, kw, sd, pd, ph, dd, dh, dw, oh, ow, out)
                else:
                    cols = (r1 - r0) * ow
                    # (cols x (c1-c0)*kk) = src_g^T (cols x mg) . a_g[:, channels] (mg x (c1-c0)*kk), column-major
                    call_gemm(fn, _N, _T, cols, (c1 - c0) * kk, mg,
                          src.ctypes.data + ((n * m + g * mg) * positions + r0 * ow) * size, positions, pa, kg,
                          bt.ctypes.data, ld, one, zero)
                    fold_rows(bt, n, c0, c1, r0, r1, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, oh, ow, out)
        if set_threads != 0:
            _call_int(set_threads, (before,))
