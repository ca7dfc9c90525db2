"""Convolution as matrix multiplication, and pooling, in numba.

**unfold** copies, for every kernel tap of every input channel, the input value
that tap sees at every output position of every sample into one row of a
matrix ``cols`` of shape ``(C*kd*kh*kw, N*positions)``. The convolution is then
one matrix product with the weights viewed as ``(O, C*kd*kh*kw)`` (one per
group). Padding reads as zeros; stride and dilation only change which input
value each entry comes from.

The backward pass reuses the same picture: the weight gradient is
``grad_out @ cols^T``, and the input gradient is ``W^T @ grad_out`` summed back
into the input (**fold**, the adjoint of unfold, which adds overlapping
contributions). A transposed convolution is the adjoint: fold forward, unfold
backward.

This whole-batch form is the reference and the path for dtypes BLAS does not
take; float32/float64 convolutions build the same matrix a block of columns at
a time, multiplying each block while it is in cache (:mod:`npu_lab.kernels.conv_blocked`).

**im2col** is the row-per-position layout ``(N*Ho*Wo, C*kh*kw)``, which the
inference-time fused convolution + batch norm of :mod:`npu_lab.ops.fused` uses.
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
                        if bi < 0 or v > best or v != v:  # as the CPU: the last NaN wins
                            best = v
                            bi = ih * w_ + iw
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


# --- 1-3-D convolutions, plain and transposed: unfold / fold ------------------------------------------

@numba.njit(parallel=True, **_opts)
def unfold(x, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, od_, oh_, ow_, cols):
    """x: (N, C, D, H, W) -> cols: (C*kd*kh*kw, N, od*oh*ow): row ``(c, a, i, j)`` holds, for every
    sample and output position, the input value that kernel tap sees (zeros outside the volume). Seen as
    a ``(C*kk, N*positions)`` matrix it is the right operand of one product for the whole batch. The
    innermost loop walks an output row, so for stride 1 it copies a run of contiguous input values into
    a contiguous run of the matrix."""
    n_, c_, d_, h_, w_ = x.shape
    kk = kd * kh * kw
    for t in prange(n_ * c_):
        n = t // c_
        c = t % c_
        for a in range(kd):
            for i in range(kh):
                for j in range(kw):
                    row = c * kk + (a * kh + i) * kw + j
                    for oz in range(od_):
                        iz = oz * sd - pd + a * dd
                        for oy in range(oh_):
                            iy = oy * sh - ph + i * dh
                            base = (oz * oh_ + oy) * ow_
                            if iz < 0 or iz >= d_ or iy < 0 or iy >= h_:
                                for ox in range(ow_):
                                    cols[row, n, base + ox] = 0
                            else:
                                for ox in range(ow_):
                                    ix = ox * sw - pw + j * dw
                                    if 0 <= ix < w_:
                                        cols[row, n, base + ox] = x[n, c, iz, iy, ix]
                                    else:
                                        cols[row, n, base + ox] = 0


@numba.njit(parallel=True, **_opts)
def fold(cols, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, od_, oh_, ow_, out):
    """Adjoint of :func:`unfold`: out (N, C, D, H, W) = the sum of cols (C*kd*kh*kw, N, od*oh*ow) at the
    input positions its entries came from."""
    n_, c_, d_, h_, w_ = out.shape
    kk = kd * kh * kw
    for t in prange(n_ * c_):
        n = t // c_
        c = t % c_
        for iz in range(d_):
            for iy in range(h_):
                for ix in range(w_):
                    out[n, c, iz, iy, ix] = 0
        for a in range(kd):
            for i in range(kh):
                for j in range(kw):
                    row = c * kk + (a * kh + i) * kw + j
                    for oz in range(od_):
                        iz = oz * sd - pd + a * dd
                        if iz < 0 or iz >= d_:
                            continue
                        for oy in range(oh_):
                            iy = oy * sh - ph + i * dh
                            if iy < 0 or iy >= h_:
                                continue
                            base = (oz * oh_ + oy) * ow_
                            for ox in range(ow_):
                                ix = ox * sw - pw + j * dw
                                if 0 <= ix < w_:
                                    out[n, c, iz, iy, ix] += cols[row, n, base + ox]


# --- 3-D, adaptive and fractional pooling -------------------------------------------------------------

@numba.njit(parallel=True, **_opts)
def max_pool3d(x, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, out, idx):
    """x: (P, D, H, W); out/idx: (P, OD, OH, OW); idx is the flat (d*H+h)*W+w of the max.

    As the CPU: the first element in the window starts as the maximum, a larger value or a NaN replaces it.
    """
    p_, d_, h_, w_ = x.shape
    od_, oh_, ow_ = out.shape[1], out.shape[2], out.shape[3]
    for t in prange(p_ * od_):
        p = t // od_
        od = t % od_
        z0 = od * sd - pd
        while z0 < 0:
            z0 += dd
        for oh in range(oh_):
            y0 = oh * sh - ph
            while y0 < 0:
                y0 += dh
            for ow in range(ow_):
                x0 = ow * sw - pw
                while x0 < 0:
                    x0 += dw
                z1 = min(od * sd - pd + (kd - 1) * dd + 1, d_)
                y1 = min(oh * sh - ph + (kh - 1) * dh + 1, h_)
                x1 = min(ow * sw - pw + (kw - 1) * dw + 1, w_)
                best = -np.inf
                bi = (z0 * h_ + y0) * w_ + x0
                for iz in range(z0, z1, dd):
                    for iy in range(y0, y1, dh):
                        for ix in range(x0, x1, dw):
                            v = x[p, iz, iy, ix]
                            if v > best or v != v:
                                best = v
                                bi = (iz * h_ + iy) * w_ + ix
                out[p, od, oh, ow] = best
                idx[p, od, oh, ow] = bi


@numba.njit(parallel=True, **_opts)
def box_max(x, zs, ze, ys, ye, xs, xe, out, idx):
    """Max over the box [zs[o], ze[o]) x [ys[o], ye[o]) x [xs[o], xe[o]) of each (P, D, H, W) plane.

    Adaptive and fractional max pooling: the box bounds come per output index. idx gets the flat
    position of the max in its plane; NaN wins, as on the CPU.
    """
    p_, d_, h_, w_ = x.shape
    od_, oh_, ow_ = out.shape[1], out.shape[2], out.shape[3]
    for t in prange(p_ * od_):
        p = t // od_
        od = t % od_
        for oh in range(oh_):
            for ow in range(ow_):
                best = -np.inf
                bi = (zs[od] * h_ + ys[oh]) * w_ + xs[ow]
                for iz in range(zs[od], ze[od]):
                    for iy in range(ys[oh], ye[oh]):
                        for ix in range(xs[ow], xe[ow]):
                            v = x[p, iz, iy, ix]
                            if v > best or v != v:
                                best = v
                                bi = (iz * h_ + iy) * w_ + ix
                out[p, od, oh, ow] = best
                idx[p, od, oh, ow] = bi


@numba.njit(parallel=True, **_opts)
def fractional_max(x, zs, ys, xs, kd, kh, kw, out, idx):
    """Fractional max pooling: the window of output (p, od, oh, ow) starts at (zs[p, od], ys[p, oh], xs[p, ow])."""
    p_, d_, h_, w_ = x.shape
    od_, oh_, ow_ = out.shape[1], out.shape[2], out.shape[3]
    for p in prange(p_):
        for od in range(od_):
            for oh in range(oh_):
                for ow in range(ow_):
                    z0, y0, x0 = zs[p, od], ys[p, oh], xs[p, ow]
                    best = -np.inf
                    bi = (z0 * h_ + y0) * w_ + x0
                    for iz in range(z0, z0 + kd):
                        for iy in range(y0, y0 + kh):
                            for ix in range(x0, x0 + kw):
                                v = x[p, iz, iy, ix]
                                if v > best or v != v:
                                    best = v
                                    bi = (iz * h_ + iy) * w_ + ix
                    out[p, od, oh, ow] = best
                    idx[p, od, oh, ow] = bi


@numba.njit(parallel=True, **_opts)
def avg_pool3d(x, kd, kh, kw, sd, sh, sw, pd, ph, pw, count_include_pad, divisor, out):
    """x: (P, D, H, W) -> out: (P, OD, OH, OW), PyTorch's avg_pool3d (padding, count_include_pad, divisor)."""
    p_, d_, h_, w_ = x.shape
    od_, oh_, ow_ = out.shape[1], out.shape[2], out.shape[3]
    for t in prange(p_ * od_):
        p = t // od_
        od = t % od_
        z0 = od * sd - pd
        z1 = min(z0 + kd, d_ + pd)
        for oh in range(oh_):
            y0 = oh * sh - ph
            y1 = min(y0 + kh, h_ + ph)
            for ow in range(ow_):
                x0 = ow * sw - pw
                x1 = min(x0 + kw, w_ + pw)
                pool = (z1 - z0) * (y1 - y0) * (x1 - x0)
                zs, ys, xs = max(z0, 0), max(y0, 0), max(x0, 0)
                ze, ye, xe = min(z1, d_), min(y1, h_), min(x1, w_)
                acc = 0.0
                for iz in range(zs, ze):
                    for iy in range(ys, ye):
                        for ix in range(xs, xe):
                            acc += x[p, iz, iy, ix]
                if divisor != 0:
                    dv = divisor
                elif count_include_pad:
                    dv = pool
                else:
                    dv = (ze - zs) * (ye - ys) * (xe - xs)
                out[p, od, oh, ow] = acc / dv if dv != 0 else 0.0


@numba.njit(parallel=True, **_opts)
def avg_pool3d_backward(grad, kd, kh, kw, sd, sh, sw, pd, ph, pw, count_include_pad, divisor, out):
    """Adjoint of avg_pool3d: out (P, D, H, W) from grad (P, OD, OH, OW)."""
    p_, od_, oh_, ow_ = grad.shape
    d_, h_, w_ = out.shape[1], out.shape[2], out.shape[3]
    for p in prange(p_):
        for iz in range(d_):
            for iy in range(h_):
                for ix in range(w_):
                    out[p, iz, iy, ix] = 0.0
        for od in range(od_):
            z0 = od * sd - pd
            z1 = min(z0 + kd, d_ + pd)
            for oh in range(oh_):
                y0 = oh * sh - ph
                y1 = min(y0 + kh, h_ + ph)
                for ow in range(ow_):
                    x0 = ow * sw - pw
                    x1 = min(x0 + kw, w_ + pw)
                    pool = (z1 - z0) * (y1 - y0) * (x1 - x0)
                    zs, ys, xs = max(z0, 0), max(y0, 0), max(x0, 0)
                    ze, ye, xe = min(z1, d_), min(y1, h_), min(x1, w_)
                    if divisor != 0:
                        dv = divisor
                    elif count_include_pad:
                        dv = pool
                    else:
                        dv = (ze - zs) * (ye - ys) * (xe - xs)
                    if dv == 0:
                        continue
                    g = grad[p, od, oh, ow] / dv
                    for iz in range(zs, ze):
                        for iy in range(ys, ye):
                            for ix in range(xs, xe):
                                out[p, iz, iy, ix] += g


@numba.njit(parallel=True, **_opts)
def box_mean(x, zs, ze, ys, ye, xs, xe, out):
    """Mean over per-output boxes of each (P, D, H, W) plane (adaptive average pooling)."""
    p_ = x.shape[0]
    od_, oh_, ow_ = out.shape[1], out.shape[2], out.shape[3]
    for t in prange(p_ * od_):
        p = t // od_
        od = t % od_
        for oh in range(oh_):
            for ow in range(ow_):
                acc = 0.0
                for iz in range(zs[od], ze[od]):
                    for iy in range(ys[oh], ye[oh]):
                        for ix in range(xs[ow], xe[ow]):
                            acc += x[p, iz, iy, ix]
                out[p, od, oh, ow] = acc / ((ze[od] - zs[od]) * (ye[oh] - ys[oh]) * (xe[ow] - xs[ow]))


@numba.njit(parallel=True, **_opts)
def box_mean_backward(grad, zs, ze, ys, ye, xs, xe, out):
    """Adjoint of box_mean: out (P, D, H, W) from grad (P, OD, OH, OW)."""
    p_, od_, oh_, ow_ = grad.shape
    d_, h_, w_ = out.shape[1], out.shape[2], out.shape[3]
    for p in prange(p_):
        for iz in range(d_):
            for iy in range(h_):
                for ix in range(w_):
                    out[p, iz, iy, ix] = 0.0
        for od in range(od_):
            for oh in range(oh_):
                for ow in range(ow_):
                    g = grad[p, od, oh, ow] / ((ze[od] - zs[od]) * (ye[oh] - ys[oh]) * (xe[ow] - xs[ow]))
                    for iz in range(zs[od], ze[od]):
                        for iy in range(ys[oh], ye[oh]):
                            for ix in range(xs[ow], xe[ow]):
                                out[p, iz, iy, ix] += g


@numba.njit(parallel=True, **_opts)
def scatter_planes(src, idx, out, size):
    """out (P, size) = zeros, then out[p, idx[p, k]] = src[p, k] (max_unpool); returns the first bad index or -1.

    A bad index (outside [0, size)) stops its plane; the caller raises.
    """
    p_, k_ = src.shape
    bad = np.full(p_, -1, dtype=np.int64)
    found = np.zeros(p_, dtype=np.bool_)
    for p in prange(p_):
        for k in range(size):
            out[p, k] = 0
        for k in range(k_):
            i = idx[p, k]
            if i < 0 or i >= size:
                bad[p] = i
                found[p] = True
                break
            out[p, i] = src[p, k]
    for p in range(p_):
        if found[p]:
            return bad[p], True
    return np.int64(-1), False
