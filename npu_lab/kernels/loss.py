"""numba kernels for losses."""

import numba
from numba import prange

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


@numba.njit(parallel=True, **_opts)
def squared_error(x, y, out):
    for i in prange(x.shape[0]):
        d = x[i] - y[i]
        out[i] = d * d
