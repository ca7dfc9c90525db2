"""numba kernels that write values computed from the index."""

import numba
from numba import prange


@numba.njit(parallel=True, cache=True, nogil=True)
def arange(out, start, step):
    for i in prange(out.shape[0]):
        out[i] = start + i * step


@numba.njit(parallel=True, cache=True, nogil=True)
def linspace(out, start, end, step):
    """out[i] = start + step * i for the first half, end - step * (n - 1 - i) for the second (the CPU's split)."""
    n = out.shape[0]
    half = n // 2
    for i in prange(n):
        if i < half:
            out[i] = start + step * i
        else:
            out[i] = end - step * (n - i - 1)


@numba.njit(parallel=True, cache=True, nogil=True)
def logspace(out, start, end, step, base):
    """out[i] = base ** (the linspace value of i), with :func:`linspace`'s split."""
    n = out.shape[0]
    half = n // 2
    for i in prange(n):
        if i < half:
            out[i] = base ** (start + step * i)
        else:
            out[i] = base ** (end - step * (n - i - 1))


@numba.njit(parallel=True, cache=True, nogil=True)
def eye(out, one):
    """out[r, c] = one if r == c else 0 (a strided 2-D view)."""
    for r in prange(out.shape[0]):
        for c in range(out.shape[1]):
            out[r, c] = one if r == c else 0


@numba.njit(cache=True, nogil=True)
def tril_count(row, col, offset):
    """How many (i, j) with 0 <= i < row, 0 <= j < col and j <= i + offset."""
    n = 0
    for i in range(row):
        n += max(0, min(col, i + offset + 1))
    return n


@numba.njit(cache=True, nogil=True)
def tril_indices(out, row, col, offset):
    """out[:, k] = the k-th (i, j) of the lower triangle (j <= i + offset), row by row."""
    k = 0
    for i in range(row):
        for j in range(max(0, min(col, i + offset + 1))):
            out[0, k] = i
            out[1, k] = j
            k += 1


@numba.njit(cache=True, nogil=True)
def triu_indices(out, row, col, offset):
    """out[:, k] = the k-th (i, j) of the upper triangle (j >= i + offset), row by row."""
    k = 0
    for i in range(row):
        for j in range(max(0, i + offset), col):
            out[0, k] = i
            out[1, k] = j
            k += 1
