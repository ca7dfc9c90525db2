"""numba kernels for normalisation layers.

**Batch norm** normalises each channel with statistics over the batch and
spatial positions: ``y = (x - mean_c) / sqrt(var_c + eps) * w_c + b_c``. In
training the statistics come from the batch (and update running averages); in
evaluation the running averages are used. Inputs are viewed as ``(N, C, S)``.

**Layer norm** normalises each row (the last dimensions) with its own mean and
variance. Inputs are viewed as ``(rows, features)``.

Backward, with ``x_hat`` the normalised input and ``g = dy * w``:
``dx = invstd * (g - mean(g) - x_hat * mean(g * x_hat))`` over the normalised set.
Statistics accumulate in float64.
"""

import math

import numba
from numba import prange

_opts = dict(cache=True, nogil=True, error_model="numpy")


@numba.njit(parallel=True, **_opts)
def batch_stats(x, mean, var):
    """Per-channel mean and biased variance of x viewed as (N, C, S)."""
    n, c, s = x.shape
    count = n * s
    for ch in prange(c):
        acc = 0.0
        for i in range(n):
            for j in range(s):
                acc += x[i, ch, j]
        m = acc / count if count else 0.0
        sq = 0.0
        for i in range(n):
            for j in range(s):
                d = x[i, ch, j] - m
                sq += d * d
        mean[ch] = m
        var[ch] = sq / count if count else 0.0


@numba.njit(parallel=True, **_opts)
def batch_apply(x, mean, invstd, w, b, out):
    n, c, s = x.shape
    for ch in prange(c):
        scale = invstd[ch] * w[ch]
        shift = b[ch] - mean[ch] * scale
        for i in range(n):
            for j in range(s):
                out[i, ch, j] = x[i, ch, j] * scale + shift


@numba.njit(parallel=True, **_opts)
def batch_backward(dy, x, mean, invstd, w, train, dx, dw, db):
    n, c, s = x.shape
    count = n * s
    for ch in prange(c):
        sum_dy = 0.0
        sum_dy_xhat = 0.0
        for i in range(n):
            for j in range(s):
                xh = (x[i, ch, j] - mean[ch]) * invstd[ch]
                sum_dy += dy[i, ch, j]
                sum_dy_xhat += dy[i, ch, j] * xh
        dw[ch] = sum_dy_xhat
        db[ch] = sum_dy
        k = w[ch] * invstd[ch]
        for i in range(n):
            for j in range(s):
                if train:
                    xh = (x[i, ch, j] - mean[ch]) * invstd[ch]
                    dx[i, ch, j] = k * (dy[i, ch, j] - sum_dy / count - xh * sum_dy_xhat / count)
                else:
                    dx[i, ch, j] = k * dy[i, ch, j]


@numba.njit(parallel=True, **_opts)
def layer_forward(x, w, b, eps, out, mean, rstd):
    rows, feats = x.shape
    for r in prange(rows):
        acc = 0.0
        for j in range(feats):
            acc += x[r, j]
        m = acc / feats
        sq = 0.0
        for j in range(feats):
            d = x[r, j] - m
            sq += d * d
        inv = 1.0 / math.sqrt(sq / feats + eps)
        mean[r] = m
        rstd[r] = inv
        for j in range(feats):
            out[r, j] = (x[r, j] - m) * inv * w[j] + b[j]


@numba.njit(parallel=True, **_opts)
def layer_backward_input(dy, x, mean, rstd, w, dx):
    rows, feats = x.shape
    for r in prange(rows):
        mg = 0.0
        mgx = 0.0
        for j in range(feats):
            g = dy[r, j] * w[j]
            xh = (x[r, j] - mean[r]) * rstd[r]
            mg += g
            mgx += g * xh
        mg /= feats
        mgx /= feats
        for j in range(feats):
            g = dy[r, j] * w[j]
            xh = (x[r, j] - mean[r]) * rstd[r]
            dx[r, j] = rstd[r] * (g - mg - xh * mgx)


@numba.njit(parallel=True, **_opts)
def layer_backward_params(dy, x, mean, rstd, dw, db):
    rows, feats = x.shape
    for j in prange(feats):
        aw = 0.0
        ab = 0.0
        for r in range(rows):
            aw += dy[r, j] * (x[r, j] - mean[r]) * rstd[r]
            ab += dy[r, j]
        dw[j] = aw
        db[j] = ab


