"""numba scan kernels (cumulative sum, product, max/min, log-sum-exp) along the middle axis.

The operator layer views its input as a contiguous ``x[outer, n, inner]`` with
the scanned dimension in the middle, so a scan never needs a transpose: each
``(outer, block of inner)`` pair is a work item, and the running values of a
block of ``inner`` lanes advance together along ``n`` (every load contiguous).
Floating sums and products accumulate in float64 and integer ones in int64, as
PyTorch's CPU kernels do (their accumulator type for float is double).
"""

import math

import numba
import numpy as np
from numba import prange

_opts = dict(cache=True, nogil=True, error_model="numpy")
_BLOCK = 256


@numba.njit(parallel=True, **_opts)
def cumsum(x, out, acc_init):
    """out[o, j, i] = sum of x[o, :j+1, i]; ``acc_init`` (0.0 or 0) sets the accumulator's type."""
    outer, n, inner = x.shape
    if inner == 1:  # along the last dimension: one running total per row, in a register
        for o in prange(outer):
            total = acc_init
            for j in range(n):
                total += x[o, j, 0]
                out[o, j, 0] = total
        return
    nb = (inner + _BLOCK - 1) // _BLOCK
    for w in prange(outer * nb):
        o = w // nb
        lo = (w % nb) * _BLOCK
        hi = min(inner, lo + _BLOCK)
        acc = np.full(hi - lo, acc_init)
        for j in range(n):
            for i in range(hi - lo):
                acc[i] += x[o, j, lo + i]
                out[o, j, lo + i] = acc[i]


@numba.njit(parallel=True, **_opts)
def cumprod(x, out, acc_init):
    """out[o, j, i] = product of x[o, :j+1, i]; ``acc_init`` (1.0 or 1) sets the accumulator's type."""
    outer, n, inner = x.shape
    nb = (inner + _BLOCK - 1) // _BLOCK
    for w in prange(outer * nb):
        o = w // nb
        lo = (w % nb) * _BLOCK
        hi = min(inner, lo + _BLOCK)
        acc = np.full(hi - lo, acc_init)
        for j in range(n):
            for i in range(hi - lo):
                acc[i] *= x[o, j, lo + i]
                out[o, j, lo + i] = acc[i]


@numba.njit(parallel=True, **_opts)
def cumextreme(x, values, indices, largest):
    """Running max (``largest``) or min with the index where it was reached.

    As PyTorch's CPU kernel: a later element equal to the running value takes its place
    (``>=``/``<=``), a NaN always does, and once the running value is NaN only NaNs replace it.
    """
    outer, n, inner = x.shape
    nb = (inner + _BLOCK - 1) // _BLOCK
    for w in prange(outer * nb):
        o = w // nb
        lo = (w % nb) * _BLOCK
        hi = min(inner, lo + _BLOCK)
        best = x[o, 0, lo:hi].copy()
        where = np.zeros(hi - lo, np.int64)
        for j in range(n):
            for i in range(hi - lo):
                v = x[o, j, lo + i]
                b = best[i]
                if v != v or (b == b and ((largest and v >= b) or (not largest and v <= b))):
                    best[i] = v
                    where[i] = j
                values[o, j, lo + i] = best[i]
                indices[o, j, lo + i] = where[i]


@numba.njit(**_opts)
def _log_add_exp(x, y):
    """log(exp(x) + exp(y)) as ATen's ``_log_add_exp_helper`` (NaN-propagating, exact for infinities)."""
    if y != y:
        lo = y
        hi = y
    else:
        lo = y if y < x else x  # std::min(x, y)
        hi = y if x < y else x  # std::max(x, y)
    if lo != hi or math.isfinite(lo):
        return math.log1p(math.exp(lo - hi)) + hi
    return x


@numba.njit(parallel=True, **_opts)
def logcumsumexp(x, out):
    """out[o, j, i] = log(sum of exp(x[o, :j+1, i])), accumulated in float64."""
    outer, n, inner = x.shape
    nb = (inner + _BLOCK - 1) // _BLOCK
    for w in prange(outer * nb):
        o = w // nb
        lo = (w % nb) * _BLOCK
        hi = min(inner, lo + _BLOCK)
        acc = np.full(hi - lo, -np.inf)
        for j in range(n):
            for i in range(hi - lo):
                acc[i] = _log_add_exp(np.float64(x[o, j, lo + i]), acc[i])
                out[o, j, lo + i] = acc[i]
