"""GEMM micro-kernels written in LLVM vector IR, callable from numba.

numba has no SIMD types: it vectorises loops when LLVM can prove it safe and
profitable. The inner loop of a fast matrix product is not such a loop. It
keeps a small block of ``C`` in vector *registers* for the whole ``K`` loop,
and at each ``k`` it adds an outer product to the block:

    for k:                                       # MR x (NV vectors) sums stay in registers
        b_0 .. b_{NV-1} = B[k, j0 : j0 + NV * W]  # NV vector loads of one row of B
        for r in 0..MR-1:
            a = broadcast(A[i0 + r, k])          # one scalar, copied to every lane
            acc[r][c] = fma(a, b_c, acc[r][c])   # NV fused multiply-adds

Written as scalar numba code this block is ``MR * NV * W`` separate sums,
which LLVM's SLP vectoriser does not regroup into vectors; the result runs at
scalar speed. :func:`outer_tile` emits the loop directly as LLVM IR instead,
with ``<W x float>`` values and the ``llvm.fma`` intrinsic, through numba's
:func:`numba.extending.intrinsic` hook. Each ``B`` value loaded serves ``MR``
multiply-adds and each ``A`` value ``NV * W``, so the loop is limited by the
FMA units, like a BLAS micro-kernel.

The form suits ``B`` whose rows are contiguous (``b.strides[1] == itemsize``)
and reads ``A`` one scalar at a time, in any layout. Backward products have
exactly these operands: ``grad @ W`` (``W`` is stored ``(out, in)``) and
``x.T @ grad`` (both stored batch-major), so they need no packing copy.

``dot_tile_{TM}x{TN}`` is the other form, for operands both contiguous along
``K`` (``x @ weight.T``): ``TM x TN`` dot products at once, each a vector of
partial sums. LLVM's own vectorisation of that loop ends with one horizontal
sum per output; here the ``TM * TN`` vectors are *folded* together (add the
halves of pairs of vectors, then of the results...), so 16 sums cost 15 vector
adds instead of 16 reductions.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic

#: Lanes of one vector register of each float type (512 bits).
LANES = {types.float32: 16, types.float64: 8}
#: Rows of C a micro-kernel call computes.
MR = 4
#: Vectors per row: a call computes MR x (NV * lanes) values of C.
NV = 4
#: Bump when the emitted IR changes: generated kernels embed it, so their numba cache is rebuilt.
VERSION = 3


#: Columns of C one micro-kernel call computes, per NumPy dtype.
TILE_COLS = {np.dtype(np.float32): NV * 16, np.dtype(np.float64): NV * 8}
#: Lanes of a vector register per NumPy dtype.
LANES_OF = {np.dtype(np.float32): 16, np.dtype(np.float64): 8}


def _signature(a, b, out):
    """The intrinsics' signature for three 2-D arrays of one float dtype, else None (numba then reports
    that no implementation matches)."""
    if not all(isinstance(t, types.Array) and t.ndim == 2 for t in (a, b, out)):
        return None
    if a.dtype not in LANES or b.dtype != a.dtype or out.dtype != a.dtype:
        return None
    return types.void(a, b, out, types.intp, types.intp, types.intp)


class _Emitter:
    """What both micro-kernels' code generators start from: the three arrays' data and byte row strides,
    the element and vector types, ``llvm.fma`` for them, and ``n_acc`` vector sums set to zero (allocas of
    the entry block, which LLVM promotes to registers)."""

    def __init__(self, context, builder, signature, args, n_acc: int, n_arrays: int = 3) -> None:
        aty = signature.args[0]
        self.builder = builder
        self.lanes = LANES[aty.dtype]
        arrays = [context.make_array(t)(context, builder, v)
                  for t, v in zip(signature.args[:n_arrays], args[:n_arrays])]
        self.ft = context.get_value_type(aty.dtype)
        self.vt = ir.VectorType(self.ft, self.lanes)
        self.intp = context.get_value_type(types.intp)
        self.i8p = ir.IntType(8).as_pointer()
        self.isz = context.get_abi_sizeof(self.ft)
        self.data = [builder.bitcast(arr.data, self.i8p) for arr in arrays]
        self.strides = [cgutils.unpack_tuple(builder, arr.strides, 2) for arr in arrays]
        width = "f32" if aty.dtype == types.float32 else "f64"
        self.fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(self.vt, [self.vt] * 3),
                                                  f"llvm.fma.v{self.lanes}{width}")
        self.accs = [cgutils.alloca_once(builder, self.vt) for _ in range(n_acc)]
        zero = ir.Constant(self.vt, [ir.Constant(self.ft, 0.0)] * self.lanes)
        for acc in self.accs:
            builder.store(zero, acc)

    def const(self, n: int) -> ir.Constant:
        return ir.Constant(self.intp, n)

    def accumulate(self, acc, x, y) -> None:
        """acc += x * y, fused."""
        self.builder.store(self.builder.call(self.fma, [x, y, self.builder.load(acc)]), acc)


@intrinsic
def outer_tile(typingctx, a, b, out, i0, j0, k):
    """out[i0:i0+MR, j0:j0+NV*W] = a[i0:i0+MR, :k] @ b[:k, j0:j0+NV*W] (see the module docstring).

    ``a``: 2-D, any strides; ``b`` and ``out``: 2-D with contiguous rows; all the same float dtype.
    The caller guarantees the block lies inside the arrays.
    """
    sig = _signature(a, b, out)
    if sig is None:
        return None

    def codegen(context, builder, signature, args):
        i0v, j0v, kv = args[3:]
        e = _Emitter(context, builder, signature, args, MR * NV)
        ft, vt, lanes = e.ft, e.vt, e.lanes
        abase, bbase, obase = e.data
        (sa0, sa1), (sb0, _), (so0, _) = e.strides
        itemsize = e.const(e.isz)
        arows = [builder.gep(abase, [builder.mul(builder.add(i0v, e.const(r)), sa0)]) for r in range(MR)]
        bcol = builder.gep(bbase, [builder.mul(j0v, itemsize)])
        splat = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)
        vbytes = lanes * e.isz
        with cgutils.for_range(builder, kv) as loop:
            kk = loop.index
            brow = builder.gep(bcol, [builder.mul(kk, sb0)])
            bvecs = [builder.load(builder.bitcast(builder.gep(brow, [e.const(c * vbytes)]), vt.as_pointer()),
                                  align=1) for c in range(NV)]
            for r in range(MR):
                ap = builder.gep(arows[r], [builder.mul(kk, sa1)])
                s = builder.load(builder.bitcast(ap, ft.as_pointer()))
                sv = builder.insert_element(ir.Constant(vt, ir.Undefined), s, ir.Constant(ir.IntType(32), 0))
                sv = builder.shuffle_vector(sv, ir.Constant(vt, ir.Undefined), splat)
                for c in range(NV):
                    e.accumulate(e.accs[r * NV + c], sv, bvecs[c])
        for r in range(MR):
            orow = builder.gep(obase, [builder.add(builder.mul(builder.add(i0v, e.const(r)), so0),
                                                   builder.mul(j0v, itemsize))])
            for c in range(NV):
                p = builder.bitcast(builder.gep(orow, [e.const(c * vbytes)]), vt.as_pointer())
                builder.store(builder.load(e.accs[r * NV + c]), p, align=1)
        return context.get_dummy_value()

    return sig, codegen


def _fold(builder, x, y, group: int, lanes: int):
    """Add the halves of each ``group``-lane group of x and of y: lanes/group groups of each, now half as wide,
    x's groups first. Folding 2^p vectors this way p times leaves each vector's total in its own group."""
    half = group // 2
    lo = [q for g in range(0, lanes, group) for q in range(g, g + half)]
    hi = [q for g in range(0, lanes, group) for q in range(g + half, g + group)]
    i32 = ir.IntType(32)
    lo_mask = ir.Constant(ir.VectorType(i32, lanes), lo + [q + lanes for q in lo])
    hi_mask = ir.Constant(ir.VectorType(i32, lanes), hi + [q + lanes for q in hi])
    return builder.fadd(builder.shuffle_vector(x, y, lo_mask), builder.shuffle_vector(x, y, hi_mask))


def _make_dot_tile(tm: int, tn: int):
    @intrinsic
    def dot_tile(typingctx, a, w, out, i0, j0, k):
        """out[i0 + r, j0 + c] = dot(a[i0 + r, :k], w[j0 + c, :k]) for a tm x tn tile; k a multiple of the lanes.

        ``a`` and ``w`` have contiguous rows, ``out`` contiguous rows. The tm * tn sums are vectors while
        ``k`` is walked, then folded together (:func:`_fold`) instead of summed one vector at a time.
        """
        sig = _signature(a, w, out)
        if sig is None:
            return None

        def codegen(context, builder, signature, args):
            i0v, j0v, kv = args[3:]
            e = _Emitter(context, builder, signature, args, tm * tn)
            ft, vt, lanes = e.ft, e.vt, e.lanes
            (abase, wbase, obase), (sa, sw, so) = e.data, e.strides

            def rows(base, first, stride, count):
                return [builder.gep(base, [builder.mul(builder.add(first, e.const(q)), stride)]) for q in range(count)]

            arows, wrows = rows(abase, i0v, sa[0], tm), rows(wbase, j0v, sw[0], tn)
            with cgutils.for_range(builder, builder.sdiv(kv, e.const(lanes))) as loop:
                off = builder.mul(loop.index, e.const(lanes * e.isz))
                avs = [builder.load(builder.bitcast(builder.gep(p, [off]), vt.as_pointer()), align=1) for p in arows]
                wvs = [builder.load(builder.bitcast(builder.gep(p, [off]), vt.as_pointer()), align=1) for p in wrows]
                for r in range(tm):
                    for c in range(tn):
                        e.accumulate(e.accs[r * tn + c], avs[r], wvs[c])
            vecs, group = [builder.load(acc) for acc in e.accs], lanes
            while len(vecs) > 1 and group > 1:
                vecs = [_fold(builder, vecs[p], vecs[p + 1], group, lanes) for p in range(0, len(vecs), 2)]
                group //= 2
            q = 0
            for v in vecs:  # each group of ``group`` lanes now holds the partial sums of one output
                for g in range(0, lanes, group):
                    s = builder.extract_element(v, ir.Constant(ir.IntType(32), g))
                    for x in range(1, group):
                        s = builder.fadd(s, builder.extract_element(v, ir.Constant(ir.IntType(32), g + x)))
                    r, c = divmod(q, tn)
                    row = builder.mul(builder.add(i0v, e.const(r)), so[0])
                    col = builder.mul(builder.add(j0v, e.const(c)), e.const(e.isz))
                    builder.store(s, builder.bitcast(builder.gep(obase, [builder.add(row, col)]), ft.as_pointer()))
                    q += 1
            return context.get_dummy_value()

        return sig, codegen

    dot_tile.__name__ = f"dot_tile_{tm}x{tn}"
    return dot_tile


def _transpose_masks(lanes: int):
    """Shuffle masks of the transpose: at each stage (block size b = lanes/2, ..., 1) rows p and p + b
    (p with bit b clear) swap their off-diagonal b x b blocks."""
    i32 = ir.IntType(32)
    b = lanes // 2
    while b >= 1:
        low = [q if not q & b else lanes + q - b for q in range(lanes)]
        high = [q + b if not q & b else lanes + q for q in range(lanes)]
        yield b, ir.Constant(ir.VectorType(i32, lanes), low), ir.Constant(ir.VectorType(i32, lanes), high)
        b //= 2


@intrinsic
def transpose_block(typingctx, src, dst, i0, j0):
    """dst[j0 + c, i0 + r] = src[i0 + r, j0 + c] for r, c < lanes: one square block through vector registers.

    ``src`` and ``dst``: 2-D, the same float dtype, rows contiguous. The block is loaded as ``lanes`` row
    vectors, transposed by log2(lanes) stages of two-vector shuffles, and stored as ``lanes`` rows of
    ``dst``. The caller guarantees the block lies inside both arrays.
    """
    if not all(isinstance(t, types.Array) and t.ndim == 2 for t in (src, dst)):
        return None
    if src.dtype not in LANES or dst.dtype != src.dtype:
        return None
    sig = types.void(src, dst, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        i0v, j0v = args[2:]
        e = _Emitter(context, builder, signature, args, 0, n_arrays=2)
        vt, lanes, itemsize = e.vt, e.lanes, e.const(e.isz)
        (sbase, dbase), ((ss0, _), (ds0, _)) = e.data, e.strides

        def row(base, first, q, stride, col):
            at = builder.add(builder.mul(builder.add(first, e.const(q)), stride), builder.mul(col, itemsize))
            return builder.bitcast(builder.gep(base, [at]), vt.as_pointer())

        rows = [builder.load(row(sbase, i0v, r, ss0, j0v), align=1) for r in range(lanes)]
        for b, low, high in _transpose_masks(lanes):
            new = list(rows)
            for p in range(lanes):
                if not p & b:
                    new[p] = builder.shuffle_vector(rows[p], rows[p + b], low)
                    new[p + b] = builder.shuffle_vector(rows[p], rows[p + b], high)
            rows = new
        for c in range(lanes):
            builder.store(rows[c], row(dbase, j0v, c, ds0, i0v), align=1)
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def transpose_into(src, dst, lanes):  # pragma: no cover - compiled
    """dst[:] = src.T for float matrices with contiguous rows, ``lanes`` x ``lanes`` blocks at a time
    (:func:`transpose_block`); the bands of ``lanes`` rows of ``dst`` are shared out across threads."""
    m, n = src.shape
    mb = m - m % lanes
    nb = n // lanes
    for jb in prange(nb):
        j0 = jb * lanes
        for i0 in range(0, mb, lanes):
            transpose_block(src, dst, i0, j0)
        for i in range(mb, m):  # rows of src below the last whole block
            for j in range(j0, j0 + lanes):
                dst[j, i] = src[i, j]
    for j in range(nb * lanes, n):  # columns of src right of the last whole block
        for i in range(m):
            dst[j, i] = src[i, j]


#: ``dot_tile_{TM}x{TN}``: the dot-product register tile of the matmul kernel, one per tile shape.
for _tm in (1, 2, 4):
    for _tn in (1, 2, 4):
        globals()[f"dot_tile_{_tm}x{_tn}"] = _make_dot_tile(_tm, _tn)


__all__ = ["LANES", "LANES_OF", "MR", "NV", "TILE_COLS", "VERSION", "outer_tile", "transpose_block", "transpose_into"]
