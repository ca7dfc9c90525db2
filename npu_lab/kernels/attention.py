"""A fused scaled-dot-product attention kernel (forward and backward) in numba.

Unfused, attention is four kernels and one big intermediate: ``S = Q K^T``
(an ``L x S`` matrix per head), a softmax over it, and ``P V``. The fused
kernel walks one query row at a time and never writes ``S`` or ``P`` to device
memory: for query ``i`` it computes the row of scores, keeps their maximum and
the sum of exponentials (the *log-sum-exp*, saved for the backward), and
accumulates the output row directly. Heads and rows are shared out across
threads. Operands are read with their own strides: the heads that
``reshape(...).transpose(1, 2)`` splits off a projection need no copy.

The backward recomputes each probability row from Q, K and the saved
log-sum-exp instead of storing the ``L x S`` matrix: memory traffic traded for
FLOPs, the same bargain FlashAttention makes on GPUs.
"""

import math

import numba
import numpy as np
from numba import prange

from .fast_math import fast_exp

_opts = dict(cache=True, nogil=True, fastmath={"reassoc", "contract"}, error_model="numpy")


@numba.njit(parallel=True, **_opts)
def forward(q, k, v, bias, has_bias, causal, scale, out, lse, chunks):
    """q: (B, H, L, E), k: (B, H, S, E), v: (B, H, S, Ev), bias: (B, H, L, S) additive.

    Any strides (a head split off a projection by ``transpose`` is read where
    it lies, no copy). Writes out: (B, H, L, Ev) and lse: (B, H, L). The
    B*H*L query rows are cut into ``chunks`` runs shared out across threads.
    """
    b_n, h_n, l_n, e_n = q.shape
    s_n = k.shape[2]
    ev = v.shape[3]
    rows = b_n * h_n * l_n
    chunks = max(1, min(chunks, rows))
    # scratch rows per chunk, allocated once (not once per query row)
    score_rows = np.empty((chunks, s_n), np.float64)
    out_rows = np.empty((chunks, ev), np.float64)
    for c in prange(chunks):
        scores = score_rows[c]
        acc_out = out_rows[c]
        for t in range(c * rows // chunks, (c + 1) * rows // chunks):
            _forward_row(q, k, v, bias, has_bias, causal, scale, out, lse, t, scores, acc_out)


@numba.njit(inline="always", **_opts)
def _forward_row(q, k, v, bias, has_bias, causal, scale, out, lse, t, scores, acc_out):
    """Query row ``t`` (of B*H*L) of :func:`forward`, using the scratch rows it is given."""
    _, h_n, l_n, e_n = q.shape
    s_n = k.shape[2]
    ev = v.shape[3]
    b = t // (h_n * l_n)
    h = (t // l_n) % h_n
    i = t % l_n
    m = -np.inf
    for j in range(s_n):
        if causal and j > i:
            scores[j] = -np.inf
            continue
        acc = 0.0
        for e in range(e_n):
            acc += q[b, h, i, e] * k[b, h, j, e]
        sc = acc * scale
        if has_bias:
            sc += bias[b, h, i, j]
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
    if total == 0.0:  # a fully masked row: PyTorch's math path gives NaN
        for e in range(ev):
            out[b, h, i, e] = np.nan
        lse[b, h, i] = np.inf
        return
    for e in range(ev):
        acc_out[e] = 0.0
    for j in range(s_n):
        p = scores[j] / total
        if p != 0.0:
            for e in range(ev):
                acc_out[e] += p * v[b, h, j, e]
    for e in range(ev):
        out[b, h, i, e] = acc_out[e]
    lse[b, h, i] = m + math.log(total)


@numba.njit(parallel=True, **_opts)
def backward(dout, q, k, v, bias, has_bias, causal, scale, out, lse, dq, dk, dv, dbias, want_dbias):
    """Gradients of the fused forward; one (batch, head) pair per thread.

    Same shapes as :func:`forward`; dq/dk/dv like q/k/v, dbias (B, H, L, S)
    written only when ``want_dbias``.
    """
    b_n, h_n, l_n, e_n = q.shape
    s_n = k.shape[2]
    ev = v.shape[3]
    prob_rows = np.empty((b_n * h_n, s_n), np.float64)
    for g in prange(b_n * h_n):
        b = g // h_n
        h = g % h_n
        p = prob_rows[g]
        for j in range(s_n):
            for e in range(e_n):
                dk[b, h, j, e] = 0.0
            for e in range(ev):
                dv[b, h, j, e] = 0.0
        for i in range(l_n):
            for e in range(e_n):
                dq[b, h, i, e] = 0.0
            row_lse = np.float64(lse[b, h, i])
            if row_lse == np.inf:
                if want_dbias:
                    for j in range(s_n):
                        dbias[b, h, i, j] = 0.0
                continue
            # D_i = dout_i . out_i
            d_i = 0.0
            for e in range(ev):
                d_i += dout[b, h, i, e] * out[b, h, i, e]
            for j in range(s_n):
                if causal and j > i:
                    p[j] = 0.0
                    continue
                acc = 0.0
                for e in range(e_n):
                    acc += q[b, h, i, e] * k[b, h, j, e]
                sc = acc * scale
                if has_bias:
                    sc += bias[b, h, i, j]
                p[j] = fast_exp(sc - row_lse)
            for j in range(s_n):
                pj = p[j]
                if pj == 0.0:
                    if want_dbias:
                        dbias[b, h, i, j] = 0.0
                    continue
                dp = 0.0
                for e in range(ev):
                    dv[b, h, j, e] += pj * dout[b, h, i, e]
                    dp += dout[b, h, i, e] * v[b, h, j, e]
                ds = pj * (dp - d_i)
                if want_dbias:
                    dbias[b, h, i, j] = ds
                for e in range(e_n):
                    dq[b, h, i, e] += ds * k[b, h, j, e] * scale
                    dk[b, h, j, e] += ds * q[b, h, i, e] * scale
