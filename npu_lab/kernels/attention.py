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
    it lies, no copy). Writes out: (B, H, L, Ev) and lse: (B, H, L). The B*H
    (batch, head) pairs are cut into ``chunks`` runs shared out across threads;
    each pair's keys and values are first gathered into a small contiguous
    scratch block, so the per-row loops run over contiguous memory and vectorise.
    """
    b_n, h_n, l_n, e_n = q.shape
    s_n = k.shape[2]
    ev = v.shape[3]
    groups = b_n * h_n
    chunks = max(1, min(chunks, groups))
    k_all = np.empty((chunks, s_n, e_n), q.dtype)
    v_all = np.empty((chunks, s_n, ev), q.dtype)
    q_all = np.empty((chunks, e_n), q.dtype)
    p_all = np.empty((chunks, s_n), q.dtype)
    o_all = np.empty((chunks, ev), q.dtype)
    for c in prange(chunks):
        kc, vc, qr, p, acc = k_all[c], v_all[c], q_all[c], p_all[c], o_all[c]
        for g in range(c * groups // chunks, (c + 1) * groups // chunks):
            b = g // h_n
            h = g % h_n
            _gather_heads(k, v, b, h, kc, vc)
            for i in range(l_n):
                _forward_row(q, bias, has_bias, causal, scale, out, lse, b, h, i, kc, vc, qr, p, acc)


@numba.njit(inline="always", **_opts)
def _gather_heads(k, v, b, h, kc, vc):
    """Copy head (b, h) of ``k`` and ``v`` (any strides) into the contiguous scratch ``kc``, ``vc``."""
    for j in range(kc.shape[0]):
        for e in range(kc.shape[1]):
            kc[j, e] = k[b, h, j, e]
        for e in range(vc.shape[1]):
            vc[j, e] = v[b, h, j, e]


@numba.njit(inline="always", **_opts)
def _scores(qr, kc, n_keys, scale, bias, has_bias, b, h, i, p):
    """p[j] = (q_i . k_j) * scale (+ bias[b, h, i, j]) for the first ``n_keys`` keys (contiguous rows)."""
    for j in range(n_keys):
        kj = kc[j]
        d = 0.0
        for e in range(qr.shape[0]):
            d += qr[e] * kj[e]
        sc = d * scale
        if has_bias:
            sc += bias[b, h, i, j]
        p[j] = sc


@numba.njit(inline="always", **_opts)
def _forward_row(q, bias, has_bias, causal, scale, out, lse, b, h, i, kc, vc, qr, p, acc):
    """Query row ``i`` of pair (b, h): scores, their softmax, and the weighted sum of values."""
    e_n = qr.shape[0]
    ev = acc.shape[0]
    n_keys = min(kc.shape[0], i + 1) if causal else kc.shape[0]
    for e in range(e_n):
        qr[e] = q[b, h, i, e]
    _scores(qr, kc, n_keys, scale, bias, has_bias, b, h, i, p)
    m = p[0]
    for j in range(1, n_keys):
        if p[j] > m:
            m = p[j]
    if m == -np.inf:  # a fully masked row: PyTorch's math path gives NaN
        for e in range(ev):
            out[b, h, i, e] = np.nan
        lse[b, h, i] = np.inf
        return
    for j in range(n_keys):
        p[j] = fast_exp(p[j] - m)
    total = 0.0
    for j in range(n_keys):
        total += p[j]
    for e in range(ev):
        acc[e] = 0.0
    for j in range(n_keys):
        pj = p[j]
        vj = vc[j]
        for e in range(ev):
            acc[e] += pj * vj[e]
    inv = 1.0 / total
    for e in range(ev):
        out[b, h, i, e] = acc[e] * inv
    lse[b, h, i] = m + math.log(total)


@numba.njit(parallel=True, **_opts)
def backward(dout, q, k, v, bias, has_bias, causal, scale, out, lse, dq, dk, dv, dbias, want_dbias):
    """Gradients of the fused forward; one (batch, head) pair per thread at a time.

    Same shapes as :func:`forward`; dq/dk/dv like q/k/v, dbias (B, H, L, S)
    written only when ``want_dbias``. K, V and the K/V gradients of a pair
    live in contiguous scratch blocks while its rows are processed.
    """
    b_n, h_n, l_n, e_n = q.shape
    s_n = k.shape[2]
    ev = v.shape[3]
    groups = b_n * h_n
    for g in prange(groups):
        b = g // h_n
        h = g % h_n
        kc = np.empty((s_n, e_n), q.dtype)
        vc = np.empty((s_n, ev), q.dtype)
        dkc = np.zeros((s_n, e_n), q.dtype)
        dvc = np.zeros((s_n, ev), q.dtype)
        qr = np.empty(e_n, q.dtype)
        dqr = np.empty(e_n, q.dtype)
        dor = np.empty(ev, q.dtype)
        p = np.empty(s_n, q.dtype)
        _gather_heads(k, v, b, h, kc, vc)
        for i in range(l_n):
            row_lse = lse[b, h, i]
            n_keys = min(s_n, i + 1) if causal else s_n
            if row_lse == np.inf:
                n_keys = 0
            for e in range(e_n):
                qr[e] = q[b, h, i, e]
                dqr[e] = 0.0
            d_i = 0.0  # D_i = dout_i . out_i
            for e in range(ev):
                dor[e] = dout[b, h, i, e]
                d_i += dor[e] * out[b, h, i, e]
            _scores(qr, kc, n_keys, scale, bias, has_bias, b, h, i, p)
            for j in range(n_keys):
                p[j] = fast_exp(p[j] - row_lse)
            for j in range(n_keys):
                pj = p[j]
                vj = vc[j]
                dp = 0.0
                for e in range(ev):
                    dp += dor[e] * vj[e]
                dvj = dvc[j]
                for e in range(ev):
                    dvj[e] += pj * dor[e]
                ds = pj * (dp - d_i)
                if want_dbias:
                    dbias[b, h, i, j] = ds
                dss = ds * scale
                kj = kc[j]
                dkj = dkc[j]
                for e in range(e_n):
                    dqr[e] += dss * kj[e]
                    dkj[e] += dss * qr[e]
            if want_dbias:
                for j in range(n_keys, s_n):
                    dbias[b, h, i, j] = 0.0
            for e in range(e_n):
                dq[b, h, i, e] = dqr[e]
        for j in range(s_n):
            for e in range(e_n):
                dk[b, h, j, e] = dkc[j, e]
            for e in range(ev):
                dv[b, h, j, e] = dvc[j, e]
