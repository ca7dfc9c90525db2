"""A fused scaled-dot-product attention kernel (forward and backward) in numba.

Unfused, attention is four kernels and one big intermediate: ``S = Q K^T``
(an ``L x S`` matrix per head), a softmax over it, and ``P V``. The fused
kernel walks one query row at a time and never writes ``S`` or ``P`` to device
memory: for query ``i`` it computes the row of scores, keeps their maximum and
the sum of exponentials (the *log-sum-exp*, saved for the backward), and
accumulates the output row directly. Heads and rows are shared out across
threads.

The backward recomputes each probability row from Q, K and the saved
log-sum-exp instead of storing the ``L x S`` matrix: memory traffic traded for
FLOPs, the same bargain FlashAttention makes on GPUs.
"""

import math

import numba
import numpy as np
from numba import prange

from .fast_math import fast_exp

_opts = dict(cache=True, nogil=True, fastmath=False, error_model="numpy")


@numba.njit(parallel=True, **_opts)
def forward(q, k, v, bias, has_bias, causal, scale, out, lse):
    """q: (G, L, E), k: (G, S, E), v: (G, S, Ev), bias: (G, L, S) additive."""
    g_n, l_n, e_n = q.shape
    s_n = k.shape[1]
    ev = v.shape[2]
    for t in prange(g_n * l_n):
        g = t // l_n
        i = t % l_n
        scores = np.empty(s_n, np.float64)
        m = -np.inf
        for j in range(s_n):
            if causal and j > i:
                scores[j] = -np.inf
                continue
            acc = 0.0
            for e in range(e_n):
                acc += q[g, i, e] * k[g, j, e]
            sc = acc * scale
            if has_bias:
                sc += bias[g, i, j]
            scores[j] = sc
            if sc > m:
                m = sc
        total = 0.0
        for j in range(s_n):
            if scores[j] == -np.inf:
                scores[j] = 0.0
            else:
                scores[j] = fast_exp(scores[j] - m)
                total += scores[j]
        for e in range(ev):
            out[g, i, e] = 0.0
        if total == 0.0:  # a fully masked row: PyTorch's math path gives NaN
            for e in range(ev):
                out[g, i, e] = np.nan
            lse[g, i] = np.inf
            continue
        for j in range(s_n):
            p = scores[j] / total
            if p != 0.0:
                for e in range(ev):
                    out[g, i, e] += p * v[g, j, e]
        lse[g, i] = m + math.log(total)


@numba.njit(parallel=True, **_opts)
def backward(dout, q, k, v, bias, has_bias, causal, scale, out, lse, dq, dk, dv, dbias):
    """Gradients of the fused forward; one (batch, head) group per thread."""
    g_n, l_n, e_n = q.shape
    s_n = k.shape[1]
    ev = v.shape[2]
    for g in prange(g_n):
        for j in range(s_n):
            for e in range(e_n):
                dk[g, j, e] = 0.0
            for e in range(ev):
                dv[g, j, e] = 0.0
        p = np.empty(s_n, np.float64)
        for i in range(l_n):
            for e in range(e_n):
                dq[g, i, e] = 0.0
            if lse[g, i] == np.inf:
                for j in range(s_n):
                    dbias[g, i, j] = 0.0
                continue
            # D_i = dout_i . out_i
            d_i = 0.0
            for e in range(ev):
                d_i += dout[g, i, e] * out[g, i, e]
            for j in range(s_n):
                if causal and j > i:
                    p[j] = 0.0
                    continue
                acc = 0.0
                for e in range(e_n):
                    acc += q[g, i, e] * k[g, j, e]
                sc = acc * scale
                if has_bias:
                    sc += bias[g, i, j]
                p[j] = fast_exp(sc - lse[g, i])
            for j in range(s_n):
                pj = p[j]
                if pj == 0.0:
                    dbias[g, i, j] = 0.0
                    continue
                dp = 0.0
                for e in range(ev):
                    dv[g, j, e] += pj * dout[g, i, e]
                    dp += dout[g, i, e] * v[g, j, e]
                ds = pj * (dp - d_i)
                dbias[g, i, j] = ds
                for e in range(e_n):
                    dq[g, i, e] += ds * k[g, j, e] * scale
                    dk[g, j, e] += ds * q[g, i, e] * scale
