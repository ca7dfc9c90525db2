"""numba kernels that write values computed from the index."""

import numba
from numba import prange


@numba.njit(parallel=True, cache=True, nogil=True)
def arange(out, start, step):
    for i in prange(out.shape[0]):
        out[i] = start + i * step
