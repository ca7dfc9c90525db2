"""numba kernels for normalisation layers.

**Batch norm** normalises each channel with statistics over the batch and
spatial positions: ``y = (x - mean_c) / sqrt(var_c + eps) * w_c + b_c``. In
training the statistics come from the batch (and update running averages); in
evaluation the running averages are used. Inputs are viewed as ``(N, C, S)``.

**Layer norm** normalises each row (the last dimensions) with its own mean and
variance. Inputs are viewed as ``(rows, features)``.

**Group norm** normalises each group of ``C/G`` channels of each sample (all their
positions together), then scales per channel. Inputs are viewed as ``(N, G, C/G, HxW)``.

Backward, with ``x_hat`` the normalised input and ``g = dy * w``:
``dx = invstd * (g - mean(g) - x_hat * mean(g * x_hat))`` over the normalised set.
Statistics accumulate in float64.
"""

import math

import numba
import numpy as np
from numba import prange

from .lanes import squared_deviations4, sum4

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
        xr = x[r]
        m = sum4(xr) / feats  # four running totals (kernels/lanes.py): a row's sums are short
        sq = squared_deviations4(xr, m)
        inv = 1.0 / math.sqrt(sq / feats + eps)
        mean[r] = m
        rstd[r] = inv
        for j in range(feats):
            out[r, j] = (x[r, j] - m) * inv * w[j] + b[j]


@numba.njit(parallel=True, **_opts)
def layer_backward_input(dy, x, mean, rstd, w, dx):
    rows, feats = x.shape
    for r in prange(rows):
        mg, mgx = _gradient_sums(dy[r], x[r], w, mean[r], rstd[r])
        mg /= feats
        mgx /= feats
        for j in range(feats):
            g = dy[r, j] * w[j]
            xh = (x[r, j] - mean[r]) * rstd[r]
            dx[r, j] = rstd[r] * (g - mg - xh * mgx)


@numba.njit(inline="always", **_opts)
def _gradient_sums(dy, x, w, m, s):
    """(sum of g, sum of g * x_hat) over a row, g = dy * w, x_hat = (x - m) * s; four running totals each."""
    n = x.shape[0]
    g0 = 0.0
    g1 = 0.0
    g2 = 0.0
    g3 = 0.0
    h0 = 0.0
    h1 = 0.0
    h2 = 0.0
    h3 = 0.0
    j = 0
    while j + 4 <= n:
        a = dy[j] * w[j]
        b = dy[j + 1] * w[j + 1]
        c = dy[j + 2] * w[j + 2]
        d = dy[j + 3] * w[j + 3]
        g0 += a
        g1 += b
        g2 += c
        g3 += d
        h0 += a * ((x[j] - m) * s)
        h1 += b * ((x[j + 1] - m) * s)
        h2 += c * ((x[j + 2] - m) * s)
        h3 += d * ((x[j + 3] - m) * s)
        j += 4
    while j < n:
        a = dy[j] * w[j]
        g0 += a
        h0 += a * ((x[j] - m) * s)
        j += 1
    return (g0 + g1) + (g2 + g3), (h0 + h1) + (h2 + h3)


@numba.njit(parallel=True, **_opts)
def layer_backward_params(dy, x, mean, rstd, dw, db, chunks):
    """dw, db: per-feature sums over the rows.

    The rows are cut into ``chunks`` runs (a fixed number, so the sums do not depend on the thread count);
    each run walks its rows in order and adds a whole contiguous row to its partial sums, which vectorises
    (walking a column would read with a stride). The partial sums are added at the end.
    """
    rows, feats = x.shape
    part_w = np.zeros((chunks, feats))
    part_b = np.zeros((chunks, feats))
    for c in prange(chunks):
        aw = part_w[c]
        ab = part_b[c]
        for r in range(c * rows // chunks, (c + 1) * rows // chunks):
            m = mean[r]
            s = rstd[r]
            for j in range(feats):
                aw[j] += dy[r, j] * ((x[r, j] - m) * s)
                ab[j] += dy[r, j]
    for j in range(feats):
        sw = 0.0
        sb = 0.0
        for c in range(chunks):
            sw += part_w[c, j]
            sb += part_b[c, j]
        dw[j] = sw
        db[j] = sb


@numba.njit(parallel=True, **_opts)
def group_forward(x, w, b, eps, out, mean, rstd):
    """Group norm of x viewed as (N, G, D, S): each (n, g) group normalised, then scaled per channel g*D+d.

    mean/rstd (N, G) get the statistics (biased variance; an empty group gives mean 0 and rstd NaN, as the CPU).
    """
    n_, g_, d_, s_ = x.shape
    count = d_ * s_
    for t in prange(n_ * g_):
        n = t // g_
        g = t % g_
        acc = 0.0
        for d in range(d_):
            for s in range(s_):
                acc += x[n, g, d, s]
        m = acc / count if count else 0.0
        sq = 0.0
        for d in range(d_):
            for s in range(s_):
                v = x[n, g, d, s] - m
                sq += v * v
        r = 1.0 / math.sqrt(sq / count + eps) if count else math.nan
        mean[n, g] = m
        rstd[n, g] = r
        for d in range(d_):
            c = g * d_ + d
            scale = r * w[c]
            shift = b[c] - m * scale
            for s in range(s_):
                out[n, g, d, s] = x[n, g, d, s] * scale + shift


@numba.njit(parallel=True, **_opts)
def group_backward_input(dy, x, mean, rstd, w, dx):
    """dX of group norm for (N, G, D, S) views (ATen's formula with per-channel sums of dy and dy*x)."""
    n_, g_, d_, s_ = x.shape
    scale = 1.0 / (d_ * s_) if d_ * s_ else 0.0
    for t in prange(n_ * g_):
        n = t // g_
        g = t % g_
        ds_g = 0.0
        db_g = 0.0
        for d in range(d_):
            c = g * d_ + d
            ds = 0.0
            db = 0.0
            for s in range(s_):
                ds += dy[n, g, d, s] * x[n, g, d, s]
                db += dy[n, g, d, s]
            ds_g += ds * w[c]
            db_g += db * w[c]
        m = mean[n, g]
        r = rstd[n, g]
        c2 = (db_g * m - ds_g) * r * r * r * scale
        c3 = -c2 * m - db_g * r * scale
        for d in range(d_):
            c1 = r * w[g * d_ + d]
            for s in range(s_):
                dx[n, g, d, s] = c1 * dy[n, g, d, s] + c2 * x[n, g, d, s] + c3


@numba.njit(parallel=True, **_opts)
def group_backward_params(dy, x, mean, rstd, dw, db):
    """dgamma[c] = sum_n (sum dy*x - mean * sum dy) * rstd and dbeta[c] = sum_n sum dy, for (N, G, D, S) views."""
    n_, g_, d_, s_ = x.shape
    for c in prange(g_ * d_):
        g = c // d_
        d = c % d_
        aw = 0.0
        ab = 0.0
        for n in range(n_):
            ds = 0.0
            sb = 0.0
            for s in range(s_):
                ds += dy[n, g, d, s] * x[n, g, d, s]
                sb += dy[n, g, d, s]
            aw += (ds - sb * mean[n, g]) * rstd[n, g]
            ab += sb
        dw[c] = aw
        db[c] = ab
