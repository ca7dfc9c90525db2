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


@numba.njit(inline="always")
def _open01(b):
    """A uniform double in the open interval (0, 1) from 53 random bits."""
    return ((b >> np.uint64(11)) + 0.5) * _F53


@numba.njit(parallel=True, cache=True, nogil=True)
def exponential(bits, out, lambd):
    """Exponential(lambd) by inversion: -log(U) / lambd with U in (0, 1)."""
    for i in prange(out.shape[0]):
        out[i] = -math.log(_open01(bits[i])) / lambd


@numba.njit(parallel=True, cache=True, nogil=True)
def cauchy(bits, out, median, sigma):
    """Cauchy(median, sigma) by inversion: median + sigma * tan(pi * (U - 1/2))."""
    for i in prange(out.shape[0]):
        out[i] = median + sigma * math.tan(math.pi * (_open01(bits[i]) - 0.5))


@numba.njit(parallel=True, cache=True, nogil=True)
def geometric(bits, out, log1m_p):
    """Geometric(p) on {1, 2, ...} (trials to the first success): ceil(log(U) / log(1 - p))."""
    for i in prange(out.shape[0]):
        out[i] = math.ceil(math.log(_open01(bits[i])) / log1m_p)


@numba.njit(parallel=True, cache=True, nogil=True)
def log_normal(bits, out, mean, std):
    """exp(Normal(mean, std)) (Box-Muller as :func:`normal`, two raw values per pair of outputs)."""
    n = out.shape[0]
    for p in prange((n + 1) // 2):
        u1 = ((bits[2 * p] >> np.uint64(11)) + 1) * _F53
        u2 = (bits[2 * p + 1] >> np.uint64(11)) * _F53
        r = math.sqrt(-2.0 * math.log(u1))
        theta = 2.0 * math.pi * u2
        out[2 * p] = math.exp(mean + std * r * math.cos(theta))
        if 2 * p + 1 < n:
            out[2 * p + 1] = math.exp(mean + std * r * math.sin(theta))


@numba.njit(parallel=True, cache=True, nogil=True)
def multinomial_replacement(bits, probs, out):
    """out[r, s] ~ Categorical(probs[r]) (unnormalised weights) by inverting the cumulative sum.

    The category is the first whose running sum exceeds U * total, so a zero weight is never drawn.
    """
    rows, k = probs.shape
    n = out.shape[1]
    for r in prange(rows):
        cdf = np.empty(k, np.float64)
        acc = 0.0
        last = 0
        for j in range(k):
            acc += probs[r, j]
            cdf[j] = acc
            if probs[r, j] > 0:
                last = j
        for s in range(n):
            target = (bits[r * n + s] >> np.uint64(11)) * _F53 * acc
            lo = 0
            hi = k  # first j with cdf[j] > target
            while lo < hi:
                mid = (lo + hi) // 2
                if cdf[mid] > target:
                    hi = mid
                else:
                    lo = mid + 1
            out[r, s] = lo if lo < k else last


@numba.njit(parallel=True, cache=True, nogil=True)
def multinomial_no_replacement(bits, probs, out):
    """out[r] = the categories of the n largest probs[r, j] / E_j, E_j ~ Exponential(1) (the CPU's method).

    Taking the top n of those keys samples without replacement with probabilities proportional
    to the weights; zero weights come last.
    """
    rows, k = probs.shape
    n = out.shape[1]
    for r in prange(rows):
        keys = np.empty(k, np.float64)
        for j in range(k):
            keys[j] = -(probs[r, j] / -math.log(_open01(bits[r * k + j])))
        order = np.argsort(keys, kind="mergesort")
        for s in range(n):
            out[r, s] = order[s]
