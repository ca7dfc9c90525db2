"""numba kernels that turn raw random bits into distributions."""

import math

import numba
import numpy as np
from numba import prange

_F24 = 1.0 / (1 << 24)
_F53 = 1.0 / (1 << 53)


@numba.njit(parallel=True, cache=True, nogil=True)
def uniform(bits, out, low, high):
    """out[i] = low + (high - low) * U[0, 1), 24 random bits (float32 precision)."""
    span = high - low
    for i in prange(out.shape[0]):
        u = (bits[i] >> np.uint64(40)) * _F24
        out[i] = low + span * u


@numba.njit(parallel=True, cache=True, nogil=True)
def uniform53(bits, out, low, high):
    """Uniform with 53 random bits (float64 precision)."""
    span = high - low
    for i in prange(out.shape[0]):
        u = (bits[i] >> np.uint64(11)) * _F53
        out[i] = low + span * u


@numba.njit(parallel=True, cache=True, nogil=True)
def normal(bits, out, mean, std):
    """Box-Muller: two raw values per pair of outputs."""
    n = out.shape[0]
    for p in prange((n + 1) // 2):
        u1 = ((bits[2 * p] >> np.uint64(11)) + 1) * _F53
        u2 = (bits[2 * p + 1] >> np.uint64(11)) * _F53
        r = math.sqrt(-2.0 * math.log(u1))
        theta = 2.0 * math.pi * u2
        out[2 * p] = mean + std * r * math.cos(theta)
        if 2 * p + 1 < n:
            out[2 * p + 1] = mean + std * r * math.sin(theta)


@numba.njit(parallel=True, cache=True, nogil=True)
def bernoulli_scalar(bits, out, p):
    for i in prange(out.shape[0]):
        u = (bits[i] >> np.uint64(11)) * _F53
        out[i] = 1 if u < p else 0


@numba.njit(parallel=True, cache=True, nogil=True)
def bernoulli_tensor(bits, out, p):
    for i in prange(out.shape[0]):
        u = (bits[i] >> np.uint64(11)) * _F53
        out[i] = 1 if u < p[i] else 0


@numba.njit(parallel=True, cache=True, nogil=True)
def random_range(bits, out, low, span):
    for i in prange(out.shape[0]):
        out[i] = low + np.int64(bits[i] % np.uint64(span))


@numba.njit(parallel=True, cache=True, nogil=True)
def dropout(bits, x, out, mask, p, scale):
    for i in prange(x.shape[0]):
        u = (bits[i] >> np.uint64(11)) * _F53
        keep = u >= p
        mask[i] = keep
        out[i] = x[i] * scale if keep else x[i] * 0


@numba.njit(cache=True, nogil=True)
def randperm(bits, out):
    n = out.shape[0]
    for i in range(n):
        out[i] = i
    for i in range(n - 1, 0, -1):
        j = np.int64(bits[i] % np.uint64(i + 1))
        t = out[i]
        out[i] = out[j]
        out[j] = t
