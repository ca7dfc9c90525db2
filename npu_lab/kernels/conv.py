"""Convolution as matrix multiplication (im2col) and pooling, in numba.

**im2col** copies, for every output position, the input patch it sees into one
row of a matrix ``cols`` of shape ``(N*Ho*Wo, C*kh*kw)``. The convolution is
then a single matmul with the weights viewed as ``(O, C*kh*kw)``: the fast
tiled kernel does the arithmetic. Padding reads as zeros; stride and dilation
only change which input pixel each patch element comes from.

The backward pass reuses the same picture: the weight gradient is
``grad_out^T @ cols``, and the input gradient is ``grad_out @ W`` scattered back
into the image (**col2im**, the adjoint of im2col, which adds overlapping
contributions).
"""

import math

import numba
import numpy as np
from numba import prange

_opts = dict(cache=True, nogil=True, error_model="numpy")


@numba.njit(parallel=True, **_opts)
def im2col(x, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo, cols):
    """x: (N, C, H, W) -> cols: (N*ho*wo, C*kh*kw)."""
    n_, c_, h_, w_ = x.shape
    for t in prange(n_ * ho):
        n = t // ho
        oh = t % ho
        for ow in range(wo):
            row = (n * ho + oh) * wo + ow
            for c in range(c_):
                for i in range(kh):
                    ih = oh * sh - ph + i * dh
                    for j in range(kw):
                        iw = ow * sw - pw + j * dw
                        col = (c * kh + i) * kw + j
                        if 0 <= ih < h_ and 0 <= iw < w_:
                            cols[row, col] = x[n, c, ih, iw]
                        else:
                            cols[row, col] = 0.0


@numba.njit(parallel=True, **_opts)
def col2im(cols, n_, c_, h_, w_, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo, out):
    """Adjoint of im2col: out (N, C, H, W) accumulates cols (N*ho*wo, C*kh*kw)."""
    for t in prange(n_ * c_):
        n = t // c_
        c = t % c_
        for ih in range(h_):
            for iw in range(w_):
                out[n, c, ih, iw] = 0.0
        for oh in range(ho):
            for ow in range(wo):
                row = (n * ho + oh) * wo + ow
                for i in range(kh):
                    ih = oh * sh - ph + i * dh
                    if ih < 0 or ih >= h_:
                        continue
                    for j in range(kw):
                        iw = ow * sw - pw + j * dw
                        if 0 <= iw < w_:
                            out[n, c, ih, iw] += cols[row, (c * kh + i) * kw + j]


@numba.njit(parallel=True, **_opts)
def max_pool(x, kh, kw, sh, sw, ph, pw, dh, dw, out, idx):
    """x: (P, H, W) planes; out/idx: (P, Ho, Wo); idx is the flat h*W+w of the max (NaN wins)."""
    p_, h_, w_ = x.shape
    ho, wo = out.shape[1], out.shape[2]
    for p in prange(p_):
        for oh in range(ho):
            for ow in range(wo):
                best = -np.inf
                bi = -1
                for i in range(kh):
                    ih = oh * sh - ph + i * dh
                    if ih < 0 or ih >= h_:
                        continue
                    for j in range(kw):
                        iw = ow * sw - pw + j * dw
                        if iw < 0 or iw >= w_:
                            continue
                        v = x[p, ih, iw]
                        if bi < 0 or v > best or v != v:
                            best = v
                            bi = ih * w_ + iw
                            if v != v:
                                break
                out[p, oh, ow] = best
                idx[p, oh, ow] = bi


@numba.njit(parallel=True, **_opts)
def max_pool_backward(grad, idx, out):
    """out (P, H*W) += grad at the recorded argmax positions."""
    for p in prange(grad.shape[0]):
        for k in range(out.shape[1]):
            out[p, k] = 0.0
        for k in range(grad.shape[1]):
            i = idx[p, k]
            if i >= 0:
                out[p, i] += grad[p, k]


@numba.njit(parallel=True, **_opts)
def avg_pool(x, kh, kw, sh, sw, ph, pw, count_include_pad, divisor, out):
    p_, h_, w_ = x.shape
    ho, wo = out.shape[1], out.shape[2]
    for p in prange(p_):
        for oh in range(ho):
            for ow in range(wo):
                h0 = oh * sh - ph
                w0 = ow * sw - pw
                h1 = min(h0 + kh, h_ + ph)
                w1 = min(w0 + kw, w_ + pw)
                pool = (h1 - h0) * (w1 - w0)
                hs, ws = max(h0, 0), max(w0, 0)
                he, we = min(h1, h_), min(w1, w_)
                acc = 0.0
                for ih in range(hs, he):
                    for iw in range(ws, we):
                        acc += x[p, ih, iw]
                if divisor != 0:
                    d = divisor
                elif count_include_pad:
                    d = pool
                else:
                    d = (he - hs) * (we - ws)
                out[p, oh, ow] = acc / d if d != 0 else 0.0


@numba.njit(parallel=True, **_opts)
def avg_pool_backward(grad, h_, w_, kh, kw, sh, sw, ph, pw, count_include_pad, divisor, out):
    p_, ho, wo = grad.shape
    for p in prange(p_):
        for ih in range(h_):
            for iw in range(w_):
                out[p, ih, iw] = 0.0
        for oh in range(ho):
            for ow in range(wo):
                h0 = oh * sh - ph
                w0 = ow * sw - pw
                h1 = min(h0 + kh, h_ + ph)
                w1 = min(w0 + kw, w_ + pw)
                pool = (h1 - h0) * (w1 - w0)
                hs, ws = max(h0, 0), max(w0, 0)
                he, we = min(h1, h_), min(w1, w_)
                if divisor != 0:
                    d = divisor
                elif count_include_pad:
                    d = pool
                else:
                    d = (he - hs) * (we - ws)
                if d == 0:
                    continue
                g = grad[p, oh, ow] / d
                for ih in range(hs, he):
                    for iw in range(ws, we):
                        out[p, ih, iw] += g


@numba.njit(parallel=True, **_opts)
def adaptive_avg_pool(x, out):
    p_, h_, w_ = x.shape
    ho, wo = out.shape[1], out.shape[2]
    for p in prange(p_):
        for oh in range(ho):
            hs = (oh * h_) // ho
            he = -((-(oh + 1) * h_) // ho)
            for ow in range(wo):
                ws = (ow * w_) // wo
                we = -((-(ow + 1) * w_) // wo)
                acc = 0.0
                for ih in range(hs, he):
                    for iw in range(ws, we):
                        acc += x[p, ih, iw]
                out[p, oh, ow] = acc / ((he - hs) * (we - ws))


@numba.njit(parallel=True, **_opts)
def adaptive_avg_pool_backward(grad, h_, w_, out):
    p_, ho, wo = grad.shape
    for p in prange(p_):
        for ih in range(h_):
            for iw in range(w_):
                out[p, ih, iw] = 0.0
        for oh in range(ho):
            hs = (oh * h_) // ho
            he = -((-(oh + 1) * h_) // ho)
            for ow in range(wo):
                ws = (ow * w_) // wo
                we = -((-(ow + 1) * w_) // wo)
                g = grad[p, oh, ow] / ((he - hs) * (we - ws))
                for ih in range(hs, he):
                    for iw in range(ws, we):
                        out[p, ih, iw] += g


def pool_output_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size, including the ceil_mode rule."""
    numer = size + 2 * p - d * (k - 1) - 1
    out = (math.ceil(numer / s) if ceil_mode else numer // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out
