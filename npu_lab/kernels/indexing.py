"""numba kernels for masks and indices."""

import numba
import numpy as np
from numba import prange

_opts = dict(cache=True, nogil=True, error_model="numpy")


@numba.njit(**_opts)
def masked_select(x, mask, out):
    """Copy x[i] where mask[i] into out (1-D inputs of the same length); returns count."""
    k = 0
    for i in range(x.shape[0]):
        if mask[i]:
            out[k] = x[i]
            k += 1
    return k


@numba.njit(**_opts)
def count_true(mask):
    n = 0
    for i in range(mask.shape[0]):
        if mask[i]:
            n += 1
    return n


@numba.njit(parallel=True, **_opts)
def masked_fill(x, mask, value):
    for i in prange(x.shape[0]):
        if mask[i]:
            x[i] = value


@numba.njit(parallel=True, **_opts)
def index_select(x, idx, out):
    """out[o, j, i] = x[o, idx[j], i] for x viewed as (outer, dim, inner)."""
    for o in prange(x.shape[0]):
        for j in range(idx.shape[0]):
            src = idx[j]
            for i in range(x.shape[2]):
                out[o, j, i] = x[o, src, i]


@numba.njit(**_opts)
def check_bounds(idx, size):
    """Index of the first out-of-range entry (negative entries already wrapped), or -1."""
    for k in range(idx.shape[0]):
        if idx[k] < 0 or idx[k] >= size:
            return k
    return -1


@numba.njit(parallel=True, **_opts)
def gather(x, idx, out):
    """out[o, j, i] = x[o, idx[o, j, i], i] for (outer, dim, inner) views of matching outer/inner."""
    for o in prange(idx.shape[0]):
        for j in range(idx.shape[1]):
            for i in range(idx.shape[2]):
                out[o, j, i] = x[o, idx[o, j, i], i]


@numba.njit(**_opts)
def scatter(dst, idx, src, mode):
    """dst[o, idx[o, j, i], i] (=, +=, *= for mode 0, 1, 2) src[o, j, i].

    Serial, so repeated indices behave like the CPU's loop (the last write wins
    for mode 0; every contribution counts for modes 1 and 2).
    """
    for o in range(idx.shape[0]):
        for j in range(idx.shape[1]):
            for i in range(idx.shape[2]):
                k = idx[o, j, i]
                if mode == 1:
                    dst[o, k, i] += src[o, j, i]
                elif mode == 2:
                    dst[o, k, i] *= src[o, j, i]
                else:
                    dst[o, k, i] = src[o, j, i]


@numba.njit(**_opts)
def index_add(dst, idx, src, alpha):
    """dst[o, idx[j], i] += alpha * src[o, j, i] for (outer, dim, inner) views."""
    for o in range(src.shape[0]):
        for j in range(src.shape[1]):
            k = idx[j]
            for i in range(src.shape[2]):
                dst[o, k, i] += alpha * src[o, j, i]


@numba.njit(**_opts)
def masked_scatter(dst, mask, src):
    """Fill dst where mask is true with consecutive elements of src; returns how many were used."""
    k = 0
    for i in range(dst.shape[0]):
        if mask[i]:
            dst[i] = src[k]
            k += 1
    return k


@numba.njit(**_opts)
def scatter_value(dst, idx, value):
    for o in range(idx.shape[0]):
        for j in range(idx.shape[1]):
            for i in range(idx.shape[2]):
                dst[o, idx[o, j, i], i] = value


@numba.njit(**_opts)
def nonzero(x2d, out):
    """Coordinates of the non-zero elements of a flattened array, given its shape columns."""
    n = 0
    for k in range(x2d.shape[0]):
        if x2d[k] != 0:
            out[n, 0] = k
            n += 1
    return n


@numba.njit(**_opts)
def embedding_backward(grad, indices, out, padding_idx, counts, scale_by_freq):
    """out[indices[k]] += grad[k] (rows), skipping padding_idx; optional 1/frequency scaling."""
    for k in range(indices.shape[0]):
        r = indices[k]
        if r == padding_idx:
            continue
        s = 1.0 / counts[r] if scale_by_freq else 1.0
        for c in range(grad.shape[1]):
            out[r, c] += grad[k, c] * s


@numba.njit(parallel=True, **_opts)
def triangle(x, out, diagonal, lower):
    """tril (lower=True) / triu of the last two dims of a (batch, rows, cols) array."""
    for b in prange(x.shape[0]):
        for r in range(x.shape[1]):
            for c in range(x.shape[2]):
                keep = (c - r <= diagonal) if lower else (c - r >= diagonal)
                # a plain zero: ``x * 0`` would be -0.0 for negative x and NaN for inf/NaN, the CPU writes 0
                out[b, r, c] = x[b, r, c] if keep else 0


# --- scatter_reduce, index_reduce, index_fill/copy, put/take, roll ------------------------

@numba.njit(inline="always")
def _combine(d, s, mode):
    """One reduction step: sum/mean (0, 2), prod (1), amax (3), amin (4); NaN propagates for amax/amin."""
    if mode == 1:
        return d * s
    if mode == 3:
        return s if (s != s or s > d) else d
    if mode == 4:
        return s if (s != s or s < d) else d
    return d + s


@numba.njit(**_opts)
def scatter_reduce(dst, dst_strides, idx, idx_shape, dim, src, src_off, src_strides, mode, init,
                   include_self, counts):
    """dst[pos with idx along dim] reduce= src[pos] for every position of the index.

    ``dst`` and ``counts`` are contiguous flat arrays with ``dst_strides``; ``idx`` is the
    contiguous flat index of shape ``idx_shape`` (at least 1-d, as long as both stride lists); ``src`` is a flat
    storage read at
    ``src_off + sum(coord * src_strides)``. Without ``include_self`` every target is first set to
    ``init`` (the reduction's identity). ``counts`` (mode 2, mean) gets one per contribution.
    Serial, so repeated indices combine in the CPU's order.
    """
    nd = idx_shape.shape[0]
    n = idx.shape[0]
    coord = np.zeros(nd, np.int64)
    for sweep in range(1 if include_self else 0, 2):
        for d in range(nd):
            coord[d] = 0
        for k in range(n):
            doff = 0
            soff = src_off
            for d in range(nd):
                c = coord[d]
                doff += (idx[k] if d == dim else c) * dst_strides[d]
                soff += c * src_strides[d]
            if sweep == 0:
                dst[doff] = init
            else:
                dst[doff] = _combine(dst[doff], src[soff], mode)
                if mode == 2:
                    counts[doff] += 1
            for d in range(nd - 1, -1, -1):
                coord[d] += 1
                if coord[d] < idx_shape[d]:
                    break
                coord[d] = 0


@numba.njit(parallel=True, **_opts)
def divide_counts(dst, counts, floor):
    """dst[i] /= max(counts[i], 1) (floor division for integer results)."""
    for i in prange(dst.shape[0]):
        c = counts[i] if counts[i] > 0 else 1
        if floor:
            dst[i] = dst[i] // c
        else:
            dst[i] = dst[i] / c


@numba.njit(**_opts)
def index_reduce(dst, idx, src, mode, init, include_self, counts):
    """dst[o, idx[j], i] reduce= src[o, j, i] for (outer, dim, inner) views (modes as :func:`scatter_reduce`)."""
    if not include_self:
        for o in range(src.shape[0]):
            for j in range(src.shape[1]):
                for i in range(src.shape[2]):
                    dst[o, idx[j], i] = init
    for o in range(src.shape[0]):
        for j in range(src.shape[1]):
            k = idx[j]
            for i in range(src.shape[2]):
                dst[o, k, i] = _combine(dst[o, k, i], src[o, j, i], mode)
                if mode == 2:
                    counts[o, k, i] += 1


@numba.njit(parallel=True, **_opts)
def index_fill(dst, idx, value):
    """dst[o, idx[j], i] = value for an (outer, dim, inner) view (strided views allowed)."""
    for o in prange(dst.shape[0]):
        for j in range(idx.shape[0]):
            k = idx[j]
            for i in range(dst.shape[2]):
                dst[o, k, i] = value


@numba.njit(**_opts)
def index_copy(dst, idx, src):
    """dst[o, idx[j], i] = src[o, j, i] (serial: with repeated indices the last copy wins, as on the CPU)."""
    for o in range(src.shape[0]):
        for j in range(src.shape[1]):
            k = idx[j]
            for i in range(src.shape[2]):
                dst[o, k, i] = src[o, j, i]


@numba.njit(**_opts)
def wrap_check(idx, size):
    """Wrap negative entries of ``idx`` in place (``-size <= i < size``); index of the first bad entry, or -1."""
    for k in range(idx.shape[0]):
        v = idx[k]
        if v < -size or v >= size:
            return k
        if v < 0:
            idx[k] = v + size
    return -1


@numba.njit(**_opts)
def put(dst, idx, src, accumulate):
    """dst[idx[k]] = src[k] (or += with ``accumulate``), serially over a flat contiguous ``dst``."""
    for k in range(idx.shape[0]):
        if accumulate:
            dst[idx[k]] += src[k]
        else:
            dst[idx[k]] = src[k]


@numba.njit(parallel=True, **_opts)
def take(x, idx, out):
    """out[k] = x[idx[k]] for a flat contiguous ``x``."""
    for k in prange(idx.shape[0]):
        out[k] = x[idx[k]]


@numba.njit(parallel=True, **_opts)
def roll3(x, out, shift):
    """out[o, (j + shift) % n, i] = x[o, j, i] for (outer, n, inner) views, 0 <= shift < n."""
    n = x.shape[1]
    for o in prange(x.shape[0]):
        for j in range(n):
            t = j + shift
            if t >= n:
                t -= n
            for i in range(x.shape[2]):
                out[o, t, i] = x[o, j, i]


@numba.njit(**_opts)
def nonzero_static(flat, shape, out, fill_value):
    """The first ``out.shape[0]`` coordinates of the non-zero entries of a row-major ``flat`` array, rest filled."""
    nd = shape.shape[0]
    rows = out.shape[0]
    r = 0
    for k in range(flat.shape[0]):
        if r >= rows:
            break
        if flat[k] != 0:
            rem = k
            for d in range(nd - 1, -1, -1):
                out[r, d] = rem % shape[d]
                rem //= shape[d]
            r += 1
    for q in range(r, rows):
        for d in range(nd):
            out[q, d] = fill_value
    return r


@numba.njit(**_opts)
def segment_reduce(data, bounds, out, mode, start, has_initial):
    """Reduce ``data`` (outer, n, inner) over segments: out[o, s, i] from data[o, bounds[o, s]:bounds[o, s+1], i].

    Modes: 0 sum, 1 prod, 2 mean, 3 max, 4 min (NaN propagates). Every segment starts from
    ``start`` (the initial value, or the reduction's identity); an empty segment's mean is NaN
    unless an initial value was given. Serial in the segment, as the CPU accumulates.
    """
    for o in range(out.shape[0]):
        for s in range(out.shape[1]):
            lo = bounds[o, s]
            hi = bounds[o, s + 1]
            for i in range(out.shape[2]):
                v = start
                for j in range(lo, hi):
                    v = _combine(v, data[o, j, i], mode)
                if mode == 2:
                    if hi == lo and not has_initial:
                        out[o, s, i] = np.nan
                    elif hi > lo and v == v:
                        out[o, s, i] = v / (hi - lo)
                    else:
                        out[o, s, i] = v
                else:
                    out[o, s, i] = v


@numba.njit(**_opts)
def segment_reduce_backward(grad, output, data, bounds, grad_input, mode, initial):
    """The CPU's gradient of :func:`segment_reduce` into a zeroed ``grad_input`` (all (outer, n|segments, inner)).

    sum: the segment's gradient; mean: divided by the length; max/min: to every element equal
    to the result (or NaN), positive shares divided by their count; prod: grad * output / x, or
    the explicit product of the other elements (times ``initial``) where x is zero or NaN.
    """
    for o in range(grad.shape[0]):
        for s in range(grad.shape[1]):
            lo = bounds[o, s]
            hi = bounds[o, s + 1]
            for i in range(grad.shape[2]):
                g = grad[o, s, i]
                if mode == 3 or mode == 4:
                    counter = 0
                    for j in range(lo, hi):
                        x = data[o, j, i]
                        if x != x or x == output[o, s, i]:
                            grad_input[o, j, i] = g
                            counter += 1
                    if counter >= 2:
                        for j in range(lo, hi):
                            if grad_input[o, j, i] > 0:
                                grad_input[o, j, i] = grad_input[o, j, i] / counter
                elif mode == 1:
                    gv = g * output[o, s, i]
                    for j in range(lo, hi):
                        x = data[o, j, i]
                        if x != x or x == 0:
                            p = initial
                            for k in range(lo, hi):
                                if k != j:
                                    p = p * data[o, k, i]
                            grad_input[o, j, i] = g * p
                        else:
                            grad_input[o, j, i] = gv / x
                else:
                    if mode == 2 and hi > lo:
                        g = g / (hi - lo)
                    for j in range(lo, hi):
                        grad_input[o, j, i] = g
