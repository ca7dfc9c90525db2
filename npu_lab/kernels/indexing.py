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
