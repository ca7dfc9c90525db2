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
    """d(loss)/d(logp): -w[t] * grad * scale at [i, t], zero elsewhere. Returns how many targets are out of
    range (their rows stay zero; the caller raises)."""
    n, c = out.shape
    bad = 0
    for i in prange(n):
        for j in range(c):
            out[i, j] = 0
        t = target[i]
        if t != ignore_index:
            if t < 0 or t >= c:
                bad += 1
            else:
                g = grad[i] if per_sample else grad[0]
                out[i, t] = -weight[t] * g * scale
    return bad


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
def nll_forward_totals(logp, target, weight, ignore_index, mean, loss, total):
    """:func:`nll_forward` and :func:`nll_totals` in one pass (the same sums, in the same order, so the same
    bits), for a mean or a sum over the batch: the first out-of-range sample's index, or -1."""
    n, c = logp.shape
    s = 0.0
    w = 0.0
    for i in range(n):
        t = target[i]
        if t == ignore_index:
            continue
        if t < 0 or t >= c:
            return i
        wt = weight[t]
        s += -wt * logp[i, t]
        w += wt
    if mean:
        loss[()] = s / w if w != 0 else np.nan
    else:
        loss[()] = s
    total[()] = w
    return -1


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



@numba.njit(parallel=True, **_opts)
def multi_margin_rows(x, target, weight, has_weight, p, margin, zero, fdim, out):
    """Per-sample multi-class margin loss in the input's dtype, as ATen computes it: out[i] = the sum over
    classes d != t of w[t] * max(0, margin - x[i, t] + x[i, d]) ** p, divided by the number of classes.
    ``zero``, ``margin`` and ``fdim`` are scalars of x's dtype; targets are in range."""
    n, c = x.shape
    for i in prange(n):
        t = target[i]
        xt = x[i, t]
        s = zero
        for d in range(c):
            if d == t:
                continue
            z = margin - xt + x[i, d]
            if z > 0:
                h = z if p == 1 else z * z
                if has_weight:
                    h *= weight[t]
                s += h
        out[i] = s / fdim


@numba.njit(parallel=True, **_opts)
def multi_margin_backward_rows(grad, per_sample, x, target, weight, has_weight, p, margin, zero, g, out):
    """d(multi_margin_loss)/dx: h = g (p = 1) or 2 g z (p = 2), times w[t], at each class d whose margin is
    violated (z = margin - x[t] + x[d] > 0), minus their sum at the target; then times the output gradient
    (``grad[i]`` if ``per_sample``, else ``grad[0]``)."""
    n, c = x.shape
    for i in prange(n):
        t = target[i]
        xt = x[i, t]
        gt = zero
        for d in range(c):
            if d == t:
                continue
            z = margin - xt + x[i, d]
            if z > 0:
                h = g if p == 1 else (g + g) * z
                if has_weight:
                    h *= weight[t]
                gt -= h
                out[i, d] = h
            else:
                out[i, d] = zero
        out[i, t] = gt
        go = grad[i] if per_sample else grad[0]
        for d in range(c):
            out[i, d] *= go


@numba.njit(**_opts)
def sum_float64(values):
    """The float64 sum of ``values`` in order (ATen's accumulate type for float losses on the CPU)."""
    s = 0.0
    for i in range(values.shape[0]):
        s += values[i]
    return s


@numba.njit(parallel=True, **_opts)
def multilabel_margin_rows(x, target, one, is_target, out):
    """Per-sample multi-label margin sums: for every label j of the row (its targets up to the first -1) and
    every class d that is not a label, max(0, 1 - x[j] + x[d]); accumulated in float64 and rounded to
    ``out``'s dtype (the caller divides by the number of classes). Fills ``is_target`` (1 at the labels)."""
    n, c = x.shape
    for i in prange(n):
        for k in range(c):
            is_target[i, k] = 0
        for k in range(c):
            j = target[i, k]
            if j < 0:
                break
            is_target[i, j] = 1
        s = 0.0
        for k in range(c):
            j = target[i, k]
            if j < 0:
                break
            xj = x[i, j]
            for d in range(c):
                if is_target[i, d] == 0:
                    z = one - xj + x[i, d]
                    if z > 0:
                        s += z
        out[i] = s


@numba.njit(parallel=True, **_opts)
def multilabel_margin_backward_rows(grad, per_sample, x, target, is_target, one, zero, g, out):
    """d(multilabel_margin_loss)/dx: -g at the label and +g at the class for each violating (label,
    non-label class) pair, then times the output gradient (``grad[i]`` if ``per_sample``, else ``grad[0]``)."""
    n, c = x.shape
    for i in prange(n):
        for d in range(c):
            out[i, d] = zero
        for k in range(c):
            j = target[i, k]
            if j < 0:
                break
            xj = x[i, j]
            for d in range(c):
                if is_target[i, d] == 0:
                    z = one - xj + x[i, d]
                    if z > 0:
                        out[i, j] -= g
                        out[i, d] += g
        go = grad[i] if per_sample else grad[0]
        for d in range(c):
            out[i, d] *= go


@numba.njit(**_opts)
def _target_prime(targets, offset, stride, s, blank):
    """The s-th label of the blank-augmented target: blank at even s, the (s // 2)-th target at odd s."""
    if s % 2 == 0:
        return blank
    return targets[offset + stride * (s // 2)]


@numba.njit(**_opts)
def _logsumexp3(a, b, c, neginf, zero):
    """log(exp(a) + exp(b) + exp(c)) about the largest term (0 if all are -inf), as ATen's CTC loops write it."""
    m = a
    if b > m:
        m = b
    if c > m:
        m = c
    if m == neginf:
        m = zero
    return math.log(math.exp(a - m) + math.exp(b - m) + math.exp(c - m)) + m


@numba.njit(parallel=True, **_opts)
def ctc_alpha(log_probs, targets, offsets, stride, input_lengths, target_lengths, blank, neginf, zero,
              log_alpha, nll):
    """CTC forward (Graves et al. 2006, eq. 6-8) per sample b, in log space: log_alpha[b, t, s] over the
    blank-augmented target, and nll[b] = -log p(target | input). ``log_probs`` is (T, B, C); ``targets`` a
    flat int array whose sample b starts at offsets[b] with the given stride."""
    nb = log_probs.shape[1]
    for b in prange(nb):
        for t in range(log_alpha.shape[1]):
            for s in range(log_alpha.shape[2]):
                log_alpha[b, t, s] = neginf
        n_in = input_lengths[b]
        n_tg = target_lengths[b]
        off = offsets[b]
        if n_in == 0:
            nll[b] = -zero if n_tg == 0 else -neginf  # -log(1) (an empty target) or -log(0)
            continue
        log_alpha[b, 0, 0] = log_probs[0, b, blank]
        if n_tg > 0:
            log_alpha[b, 0, 1] = log_probs[0, b, _target_prime(targets, off, stride, 1, blank)]
        for t in range(1, n_in):
            for s in range(2 * n_tg + 1):
                cur = _target_prime(targets, off, stride, s, blank)
                la1 = log_alpha[b, t - 1, s]
                la2 = log_alpha[b, t - 1, s - 1] if s > 0 else neginf
                la3 = neginf
                if s > 1 and _target_prime(targets, off, stride, s - 2, blank) != cur:
                    la3 = log_alpha[b, t - 1, s - 2]
                log_alpha[b, t, s] = _logsumexp3(la1, la2, la3, neginf, zero) + log_probs[t, b, cur]
        if n_tg == 0:
            nll[b] = -log_alpha[b, n_in - 1, 0]
        else:
            l1 = log_alpha[b, n_in - 1, 2 * n_tg]
            l2 = log_alpha[b, n_in - 1, 2 * n_tg - 1]
            m = max(l1, l2)
            if m == neginf:
                m = zero
            nll[b] = -(math.log(math.exp(l1 - m) + math.exp(l2 - m)) + m)


@numba.njit(parallel=True, **_opts)
def ctc_grad(grad_out, log_probs, targets, offsets, stride, input_lengths, target_lengths, nll, log_alpha, blank,
             zero_infinity, neginf, zero, log_beta, grad):
    """CTC backward (Graves et al. 2006, eq. 10-11 and 16): log_beta by the backward recursion, then
    grad[t, b, c] = (exp(lp) - exp(log(sum of alpha * beta over the states labelled c) + nll - lp)) * grad_out[b]
    for t < input length, 0 beyond (and everywhere when ``zero_infinity`` and the loss is infinite)."""
    nt, nb, nc = log_probs.shape
    for b in prange(nb):
        if zero_infinity and nll[b] == -neginf:
            for t in range(nt):
                for c in range(nc):
                    grad[t, b, c] = zero
            continue
        n_in = input_lengths[b]
        n_tg = target_lengths[b]
        off = offsets[b]
        for t in range(nt):
            for c in range(nc):
                grad[t, b, c] = neginf if t < n_in else zero
        if n_in > 0:
            for s in range(log_beta.shape[2]):
                log_beta[b, n_in - 1, s] = neginf
            log_beta[b, n_in - 1, 2 * n_tg] = log_probs[n_in - 1, b, blank]
            grad[n_in - 1, b, blank] = log_alpha[b, n_in - 1, 2 * n_tg] + log_beta[b, n_in - 1, 2 * n_tg]
            if n_tg > 0:
                cur = _target_prime(targets, off, stride, 2 * n_tg - 1, blank)
                log_beta[b, n_in - 1, 2 * n_tg - 1] = log_probs[n_in - 1, b, cur]
                grad[n_in - 1, b, cur] = log_alpha[b, n_in - 1, 2 * n_tg - 1] + log_beta[b, n_in - 1, 2 * n_tg - 1]
        for t in range(n_in - 2, -1, -1):
            for s in range(2 * n_tg, -1, -1):
                cur = _target_prime(targets, off, stride, s, blank)
                lb1 = log_beta[b, t + 1, s]
                lb2 = log_beta[b, t + 1, s + 1] if s < 2 * n_tg else neginf
                lb3 = neginf
                if s < 2 * n_tg - 1 and _target_prime(targets, off, stride, s + 2, blank) != cur:
                    lb3 = log_beta[b, t + 1, s + 2]
                log_beta[b, t, s] = _logsumexp3(lb1, lb2, lb3, neginf, zero) + log_probs[t, b, cur]
                lab = log_alpha[b, t, s] + log_beta[b, t, s]
                lcab = grad[t, b, cur]
                if lcab == neginf:
                    grad[t, b, cur] = lab
                else:
                    m = max(lcab, lab)
                    grad[t, b, cur] = math.log(math.exp(lcab - m) + math.exp(lab - m)) + m
        gr = grad_out[b]
        nl = nll[b]
        for t in range(n_in):
            for c in range(nc):
                lp = log_probs[t, b, c]
                grad[t, b, c] = (math.exp(lp) - math.exp(grad[t, b, c] + nl - lp)) * gr
