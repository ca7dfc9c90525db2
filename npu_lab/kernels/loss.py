"""numba kernels for losses."""

import math

import numba
import numpy as np
from numba import prange

from .fast_math import fast_exp

_opts = dict(cache=True, nogil=True, error_model="numpy")


@numba.njit(**_opts)
def nll_forward(logp, target, weight, ignore_index, losses, weights):
    """Per-sample loss -w[t] * logp[i, t] (0 where target == ignore_index)."""
    n, c = logp.shape
    for i in range(n):
        t = target[i]
        if t == ignore_index:
            losses[i] = 0
            weights[i] = 0
            continue
        if t < 0 or t >= c:
            return i  # the caller raises with this sample's index
        w = weight[t]
        losses[i] = -w * logp[i, t]
        weights[i] = w
    return -1


@numba.njit(parallel=True, **_opts)
def nll_backward(grad, target, weight, ignore_index, scale, per_sample, out):
    """d(loss)/d(logp): -w[t] * grad * scale at [i, t], zero elsewhere."""
    n, c = out.shape
    for i in prange(n):
        for j in range(c):
            out[i, j] = 0
        t = target[i]
        if t != ignore_index:
            g = grad[i] if per_sample else grad[0]
            out[i, t] = -weight[t] * g * scale


@numba.njit(parallel=True, fastmath={"reassoc", "contract"}, **_opts)
def log_softmax_nll_rows(x, target, weight, ignore_index, out, losses, weights, bad):
    """Cross-entropy forward in one pass per row: ``out`` = log_softmax(x), per-sample
    loss -w[t] * out[i, t] and weight w[t]. ``bad[i]`` is 1 where the target is out of range;
    returns how many are."""
    n, c = x.shape
    nbad = 0
    for i in prange(n):
        xr = x[i]
        orow = out[i]
        m = xr[0]
        for j in range(1, c):
            if xr[j] > m:
                m = xr[j]
        s = 0.0
        for j in range(c):
            s += fast_exp(xr[j] - m)
        lse = m + math.log(s)
        for j in range(c):
            orow[j] = xr[j] - lse
        t = target[i]
        bad[i] = 0
        if t == ignore_index:
            losses[i] = 0
            weights[i] = 0
        elif t < 0 or t >= c:
            losses[i] = 0
            weights[i] = 0
            bad[i] = 1
            nbad += 1
        else:
            losses[i] = -weight[t] * orow[t]
            weights[i] = weight[t]
    return nbad


@numba.njit(**_opts)
def nll_totals(losses, weights, loss, total, mean):
    """loss[()] = the summed (or, if ``mean``, weight-averaged) loss, total[()] = the total weight, from
    per-sample values."""
    s = 0.0
    w = 0.0
    for i in range(losses.shape[0]):
        s += losses[i]
        w += weights[i]
    if mean:
        loss[()] = s / w if w != 0 else np.nan
    else:
        loss[()] = s
    total[()] = w


@numba.njit(parallel=True, fastmath={"reassoc", "contract"}, **_opts)
def log_softmax_nll_backward_rows(grad, logp, target, weight, ignore_index, scale, per_sample, out):
    """d(cross-entropy)/d(x) in one pass: w[t] * g * scale * (softmax(x) - onehot(t)) per row."""
    n, c = out.shape
    for i in prange(n):
        t = target[i]
        if t == ignore_index or t < 0 or t >= c:
            for j in range(c):
                out[i, j] = 0
            continue
        g = (grad[i] if per_sample else grad[0]) * weight[t] * scale
        for j in range(c):
            out[i, j] = g * fast_exp(logp[i, j])
        out[i, t] -= g


@numba.njit(parallel=True, **_opts)
def squared_error(x, y, out):
    for i in prange(x.shape[0]):
        d = x[i] - y[i]
        out[i] = d * d
