"""numba kernels for masks and indices."""

import numba
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
