"""numba reduction kernels over the rows of a contiguous 2-D array.

The operator layer moves the reduced dimensions to the end and makes the
input contiguous, so every reduction here sees ``x[outer, inner]`` and reduces
each row. Sums over the *leading* dimensions of a contiguous tensor (a bias
gradient: ``grad.sum(0)``) have their own kernel, :func:`sum_cols`, which reads
the rows as they lie instead of transposing them first. Floating sums
accumulate in float64 (PyTorch CPU uses a cascade sum for the same reason:
long float32 sums drift).
"""

import math

import numba
import numpy as np
from numba import prange

from .fast_math import fast_exp
from .lanes import dot4, sum4
from .pointers import ptr_array

_opts = dict(cache=True, nogil=True, error_model="numpy")


@numba.njit(parallel=True, **_opts)
def sum_rows(x, out):
    for r in prange(x.shape[0]):
        acc = 0.0
        for j in range(x.shape[1]):
            acc += x[r, j]
        out[r] = acc


@numba.njit(parallel=True, **_opts)
def sum_rows_int(x, out):
    for r in prange(x.shape[0]):
        acc = 0
        for j in range(x.shape[1]):
            acc += x[r, j]
        out[r] = acc


@numba.njit(parallel=True, **_opts)
def sum_cols(x, out):
    """out[j] = sum over i of x[i, j] (x C-contiguous): column blocks across threads.

    Each thread owns a block of columns and walks down the rows, so every load
    is contiguous; rows are read through slices indexed from 0, which lets
    LLVM vectorise the inner loop.
    """
    r_n, c_n = x.shape
    block = 512
    for b in prange((c_n + block - 1) // block):
        lo = b * block
        hi = min(c_n, lo + block)
        acc = out[lo:hi]
        for j in range(hi - lo):
            acc[j] = 0.0
        for i in range(r_n):
            row = x[i, lo:hi]
            for j in range(hi - lo):
                acc[j] += row[j]


@numba.njit(**_opts)
def sum_leading(rows, cols, x_address, out_address, like):
    """out[j] = the sum over i of x[i, j] for a C-contiguous ``rows x cols`` array given by address, summed in
    float64 down each column (:func:`sum_cols`' order) and stored in ``like``'s dtype; serial (small arrays)."""
    x = ptr_array(x_address, rows * cols, like)
    out = ptr_array(out_address, cols, like)
    acc = np.zeros(cols, np.float64)
    for i in range(rows):
        row = x[i * cols:(i + 1) * cols]
        for j in range(cols):
            acc[j] += row[j]
    for j in range(cols):
        out[j] = acc[j]


@numba.njit(parallel=True, **_opts)
def sum_all(x, chunks):
    """Sum of a long 1-D array in parallel chunks (float64 partials)."""
    n = x.shape[0]
    step = (n + chunks - 1) // chunks
    part = np.zeros(chunks)
    for c in prange(chunks):
        acc = 0.0
        for j in range(c * step, min(n, (c + 1) * step)):
            acc += x[j]
        part[c] = acc
    return part.sum()


@numba.njit(parallel=True, **_opts)
def prod_rows(x, out):
    for r in prange(x.shape[0]):
        acc = 1.0
        for j in range(x.shape[1]):
            acc *= x[r, j]
        out[r] = acc


@numba.njit(parallel=True, **_opts)
def max_rows(x, values, indices):
    """Row maximum and the index of its first occurrence; NaN wins."""
    for r in prange(x.shape[0]):
        best = x[r, 0]
        bi = 0
        for j in range(1, x.shape[1]):
            v = x[r, j]
            if best != best:
                break
            if v > best or v != v:
                best = v
                bi = j
        values[r] = best
        indices[r] = bi


@numba.njit(parallel=True, **_opts)
def min_rows(x, values, indices):
    for r in prange(x.shape[0]):
        best = x[r, 0]
        bi = 0
        for j in range(1, x.shape[1]):
            v = x[r, j]
            if best != best:
                break
            if v < best or v != v:
                best = v
                bi = j
        values[r] = best
        indices[r] = bi


@numba.njit(parallel=True, **_opts)
def var_rows(x, out, correction):
    """Two-pass variance per row (numerically safer than sum of squares)."""
    n = x.shape[1]
    for r in prange(x.shape[0]):
        mean = 0.0
        for j in range(n):
            mean += x[r, j]
        mean /= n
        acc = 0.0
        for j in range(n):
            d = x[r, j] - mean
            acc += d * d
        out[r] = acc / max(n - correction, 0.0)


@numba.njit(parallel=True, **_opts)
def softmax_rows(x, out, log):
    """Softmax (or log-softmax) of each row. The exponentials are written to ``out``
    first, in a loop of their own that vectorises; the float64 sum (four running totals in a fixed
    order, :mod:`npu_lab.kernels.lanes`) reads them back."""
    k = x.shape[1]
    for r in prange(x.shape[0]):
        xr = x[r]
        orow = out[r]
        m = xr[0]  # the row's own dtype: a float64 -inf start would make every exp float64
        for j in range(1, k):
            if xr[j] > m:
                m = xr[j]
        for j in range(k):
            orow[j] = fast_exp(xr[j] - m)
        s = sum4(orow)
        if log:
            lse = m + math.log(s)
            for j in range(k):
                orow[j] = xr[j] - lse
        else:
            for j in range(k):
                orow[j] = orow[j] / s


@numba.njit(parallel=True, **_opts)
def softmax_backward_rows(grad, out, result, log):
    """d(input) for softmax (log=False) or log_softmax (log=True), per row."""
    for r in prange(grad.shape[0]):
        if log:
            s = sum4(grad[r])
            for j in range(grad.shape[1]):
                result[r, j] = grad[r, j] - fast_exp(out[r, j]) * s
        else:
            s = dot4(grad[r], out[r])
            for j in range(grad.shape[1]):
                result[r, j] = out[r, j] * (grad[r, j] - s)


@numba.njit(parallel=True, **_opts)
def count_nonzero_rows(x, out):
    for r in prange(x.shape[0]):
        n = 0
        for j in range(x.shape[1]):
            if x[r, j] != 0:
                n += 1
        out[r] = n


@numba.njit(parallel=True, **_opts)
def prod_rows_int(x, out):
    """Integer row products (int64 accumulator, wrapping as PyTorch's does)."""
    for r in prange(x.shape[0]):
        acc = 1
        for j in range(x.shape[1]):
            acc *= x[r, j]
        out[r] = acc


@numba.njit(parallel=True, **_opts)
def nansum_rows(x, out):
    """Row sums skipping NaNs (float64 accumulator)."""
    for r in prange(x.shape[0]):
        acc = 0.0
        for j in range(x.shape[1]):
            v = x[r, j]
            if v == v:
                acc += v
        out[r] = acc


@numba.njit(parallel=True, **_opts)
def norm_rows(x, out, p):
    """Vector p-norm of each row of a real array: (sum |x|^p)^(1/p), with p = 0 (count of
    non-zeros), 1, 2, +inf (max |x|) and -inf (min |x|) as their own loops; NaN propagates."""
    n = x.shape[1]
    for r in prange(x.shape[0]):
        if p == 2.0:
            acc = 0.0
            for j in range(n):
                v = np.float64(x[r, j])
                acc += v * v
            out[r] = math.sqrt(acc)
        elif p == 1.0:
            acc = 0.0
            for j in range(n):
                acc += abs(np.float64(x[r, j]))
            out[r] = acc
        elif p == np.inf or p == -np.inf:
            best = abs(np.float64(x[r, 0])) if n else 0.0
            for j in range(1, n):
                if best != best:
                    break
                v = abs(np.float64(x[r, j]))
                if v != v or (p > 0 and v > best) or (p < 0 and v < best):
                    best = v
            out[r] = best
        elif p == 0.0:
            acc = 0.0
            for j in range(n):
                if x[r, j] != 0:
                    acc += 1.0
            out[r] = acc
        else:
            acc = 0.0
            for j in range(n):
                acc += abs(np.float64(x[r, j])) ** p
            out[r] = acc ** (1.0 / p)


@numba.njit(parallel=True, **_opts)
def var_mean_rows(x, var, mean, correction):
    """Two-pass variance (divided by max(0, n - correction): inf or NaN when that is 0) and mean per row."""
    n = x.shape[1]
    for r in prange(x.shape[0]):
        m = 0.0
        for j in range(n):
            m += x[r, j]
        m = m / n if n else math.nan
        acc = 0.0
        for j in range(n):
            d = x[r, j] - m
            acc += d * d
        var[r] = acc / max(n - correction, 0.0)
        mean[r] = m


@numba.njit(parallel=True, **_opts)
def minmax_rows(x, lo, hi):
    """Row minimum and maximum (NaN wins both)."""
    for r in prange(x.shape[0]):
        mn = x[r, 0]
        mx = x[r, 0]
        for j in range(1, x.shape[1]):
            v = x[r, j]
            if v != v:
                mn = v
                mx = v
                break
            if v < mn:
                mn = v
            if v > mx:
                mx = v
        lo[r] = mn
        hi[r] = mx


@numba.njit(**_opts)
def dot(a, b, acc):
    """acc + sum(a * b) of two 1-D arrays; the type of ``acc`` (0.0, 0, 0j) is the accumulator's."""
    for i in range(a.shape[0]):
        acc += a[i] * b[i]
    return acc


@numba.njit(**_opts)
def trace(x, acc):
    """acc + the sum of the main diagonal of a 2-D array (``acc`` sets the accumulator's type)."""
    for i in range(min(x.shape[0], x.shape[1])):
        acc += x[i, i]
    return acc


@numba.njit(parallel=True, **_opts)
def all_equal(a, b):
    """Whether two 1-D arrays of equal length are elementwise equal (NaN != NaN)."""
    n = a.shape[0]
    chunks = 8
    step = (n + chunks - 1) // chunks
    bad = np.zeros(chunks, np.bool_)
    for c in prange(chunks):
        for i in range(c * step, min(n, (c + 1) * step)):
            if not (a[i] == b[i]):
                bad[c] = True
                break
    return not bad.any()
