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
