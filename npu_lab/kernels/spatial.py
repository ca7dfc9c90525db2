"""numba kernels for resampling, padding, spatial sampling, distances and bags of embeddings.

**Separable resampling.** Every upsampling mode (nearest, linear, cubic, anti-aliased)
and every padding mode (reflect, replicate) maps an output position to input
positions one spatial dimension at a time. The operator layer computes, for each
dimension, a table ``index[o, t]``/``weight[o, t]`` of the ``t`` taps of output
``o`` (exactly as PyTorch's CPU kernels compute them, in their precision); these
kernels then apply the tables to ``(P, D, H, W)`` planes (1-D and 2-D inputs
have size-1 leading dimensions)::

    out[p, a, b, c] = sum_{i,j,k} wd[a,i] wh[b,j] ww[c,k] x[p, id[a,i], ih[b,j], iw[c,k]]

The backward passes are the adjoints (scatter-adds into the input's planes), one
plane per thread so no two threads add to the same element. Nearest and pads
have a single tap of weight one: :func:`gather3`/:func:`scatter3` copy instead of
multiplying, which keeps integer tensors exact.

**Grid sampling** follows ATen's ``GridSampler.cpp`` (unnormalise, pad by
zeros/border/reflection, bilinear/nearest/bicubic), forward and backward.
"""

import math

import numba
import numpy as np
from numba import prange

_opts = dict(cache=True, nogil=True, error_model="numpy")


# --- separable resampling -------------------------------------------------------------------------

@numba.njit(parallel=True, **_opts)
def interp(x, id_, wd, ih, wh, iw, ww, out):
    """out[p, a, b, c] = sum of the taps' weights times x at the taps' indices (see the module docstring)."""
    p_ = x.shape[0]
    od_, oh_, ow_ = out.shape[1], out.shape[2], out.shape[3]
    td, th, tw = id_.shape[1], ih.shape[1], iw.shape[1]
    for t in prange(p_ * od_):
        p = t // od_
        a = t % od_
        for b in range(oh_):
            for c in range(ow_):
                acc = 0.0
                for i in range(td):
                    z = id_[a, i]
                    for j in range(th):
                        y = ih[b, j]
                        wdh = wd[a, i] * wh[b, j]
                        for k in range(tw):
                            acc += wdh * ww[c, k] * x[p, z, y, iw[c, k]]
                out[p, a, b, c] = acc


@numba.njit(parallel=True, **_opts)
def interp_backward(grad, id_, wd, ih, wh, iw, ww, out):
    """Adjoint of :func:`interp`: out (P, D, H, W) = the sum of grad's contributions to each input element."""
    p_, od_, oh_, ow_ = grad.shape
    d_, h_, w_ = out.shape[1], out.shape[2], out.shape[3]
    td, th, tw = id_.shape[1], ih.shape[1], iw.shape[1]
    for p in prange(p_):
        for z in range(d_):
            for y in range(h_):
                for x in range(w_):
                    out[p, z, y, x] = 0.0
        for a in range(od_):
            for b in range(oh_):
                for c in range(ow_):
                    g = grad[p, a, b, c]
                    for i in range(td):
                        z = id_[a, i]
                        for j in range(th):
                            y = ih[b, j]
                            gdh = g * wd[a, i] * wh[b, j]
                            for k in range(tw):
                                out[p, z, y, iw[c, k]] += gdh * ww[c, k]


@numba.njit(parallel=True, **_opts)
def gather3(x, id_, ih, iw, out):
    """out[p, a, b, c] = x[p, id[a], ih[b], iw[c]] (nearest upsampling, reflection/replication padding)."""
    p_ = x.shape[0]
    od_, oh_, ow_ = out.shape[1], out.shape[2], out.shape[3]
    for t in prange(p_ * od_):
        p = t // od_
        a = t % od_
        z = id_[a]
        for b in range(oh_):
            y = ih[b]
            for c in range(ow_):
                out[p, a, b, c] = x[p, z, y, iw[c]]


@numba.njit(parallel=True, **_opts)
def scatter3(grad, id_, ih, iw, out):
    """Adjoint of :func:`gather3`: out (P, D, H, W) zeroed, then out[p, id[a], ih[b], iw[c]] += grad[p, a, b, c]."""
    p_, od_, oh_, ow_ = grad.shape
    d_, h_, w_ = out.shape[1], out.shape[2], out.shape[3]
    for p in prange(p_):
        for z in range(d_):
            for y in range(h_):
                for x in range(w_):
                    out[p, z, y, x] = 0
        for a in range(od_):
            z = id_[a]
            for b in range(oh_):
                y = ih[b]
                for c in range(ow_):
                    out[p, z, y, iw[c]] += grad[p, a, b, c]


# --- im2col / col2im (ATen's (N, C*kh*kw, L) layout) ---------------------------------------------

@numba.njit(parallel=True, **_opts)
def unfold(x, kh, kw, sh, sw, ph, pw, dh, dw, oh_, ow_, out):
    """x: (N, C, H, W) -> out: (N, C*kh*kw, oh*ow), the sliding blocks of F.unfold (zeros outside)."""
    n_, c_, h_, w_ = x.shape
    for t in prange(n_ * c_):
        n = t // c_
        c = t % c_
        for i in range(kh):
            for j in range(kw):
                row = (c * kh + i) * kw + j
                for oh in range(oh_):
                    y = oh * sh - ph + i * dh
                    for ow in range(ow_):
                        xx = ow * sw - pw + j * dw
                        if 0 <= y < h_ and 0 <= xx < w_:
                            out[n, row, oh * ow_ + ow] = x[n, c, y, xx]
                        else:
                            out[n, row, oh * ow_ + ow] = 0


@numba.njit(parallel=True, **_opts)
def fold(cols, kh, kw, sh, sw, ph, pw, dh, dw, oh_, ow_, out):
    """Adjoint of :func:`unfold`: out (N, C, H, W) = the sum of the blocks cols (N, C*kh*kw, oh*ow)."""
    n_, c_, h_, w_ = out.shape
    for t in prange(n_ * c_):
        n = t // c_
        c = t % c_
        for y in range(h_):
            for xx in range(w_):
                out[n, c, y, xx] = 0
        for i in range(kh):
            for j in range(kw):
                row = (c * kh + i) * kw + j
                for oh in range(oh_):
                    y = oh * sh - ph + i * dh
                    if y < 0 or y >= h_:
                        continue
                    for ow in range(ow_):
                        xx = ow * sw - pw + j * dw
                        if 0 <= xx < w_:
                            out[n, c, y, xx] += cols[n, row, oh * ow_ + ow]


# --- grid sampling (GridSamplerKernel.cpp for 2-D, GridSampler.cpp for 3-D) ---------------------------
#
# The arithmetic is done in the input's precision, step by step as the CPU does it (the 2-D kernel
# mirrors ATen's vectorised one, the 3-D kernel its scalar one): a coordinate a rounding away from an
# integer picks other neighbours, and gradients jump there. ``z`` is a zero of the input's dtype; every
# constant is made as ``z + np.float32(c)`` so that float32 inputs stay in float32 arithmetic.

@numba.njit(**_opts)
def _f(z, c):
    """The constant ``c`` in the precision of ``z``."""
    return z + np.float32(c)


@numba.njit(**_opts)
def _clip2(x, size, z):
    """ComputeLocationBase::clip_coordinates: clamp to [0, size-1], NaN to 0."""
    if not x > z:
        return z
    m = _f(z, size - 1)
    return m if x > m else x


@numba.njit(**_opts)
def _clip2_grad(x, size, z):
    """clip_coordinates_get_grad: the clamped value and whether it was strictly inside."""
    lo = x if x > z else z
    m = _f(z, size - 1)
    res = lo if lo < m else m
    return res, (lo != z and res != m)


@numba.njit(**_opts)
def _reflect2(x, size, align_corners, z):
    """ComputeLocationBase::reflect_coordinates (both branches) and the sign of its derivative."""
    if align_corners:
        if size <= 1:
            return z, z
        twice = _f(z, size - 1) * _f(z, 2)
        low = z
    else:
        twice = _f(z, size) * _f(z, 2)
        low = _f(z, -0.5)
    v = x - low
    neg = v < z
    a = abs(v)
    flips = np.trunc(a / twice)
    extra = a - flips * twice
    refl = twice - extra
    more = extra > refl
    res = (refl if more else extra) + low
    return res, (_f(z, -1) if more != neg else _f(z, 1))


@numba.njit(**_opts)
def _scaling2(size, align_corners, z):
    return _f(z, size - 1) / _f(z, 2) if align_corners else _f(z, size) / _f(z, 2)


@numba.njit(**_opts)
def _unnorm2(coord, size, align_corners, z):
    sf = _scaling2(size, align_corners, z)
    if align_corners:
        return (coord + _f(z, 1)) * sf
    return (coord + _f(z, 1)) * sf - _f(z, 0.5)


@numba.njit(**_opts)
def _coords2(x, size, padding, align_corners, z):
    """compute_coordinates: the padding mode applied to an unnormalised coordinate."""
    if padding == 1:
        return _clip2(x, size, z)
    if padding == 2:
        r, _ = _reflect2(x, size, align_corners, z)
        return _clip2(r, size, z)
    return x


@numba.njit(**_opts)
def _loc2(coord, size, padding, align_corners, z):
    """ComputeLocation::apply_get_grad: the input coordinate of a grid value and its derivative."""
    x = _unnorm2(coord, size, align_corners, z)
    sf = _scaling2(size, align_corners, z)
    if padding == 1:
        r, inside = _clip2_grad(x, size, z)
        return r, (sf if inside else z)
    if padding == 2:
        r, g = _reflect2(x, size, align_corners, z)
        g = g * sf
        r, inside = _clip2_grad(r, size, z)
        return r, (g if inside else z)
    return x, sf


@numba.njit(**_opts)
def _cubic_coeffs(t, z, out):
    """get_cubic_coefficients (A = -0.75), in the order of operations of ATen's vectorised kernel."""
    a = _f(z, -0.75)
    one, two, three = _f(z, 1), _f(z, 2), _f(z, 3)
    five, eight, four = _f(z, 5), _f(z, 8), _f(z, 4)
    x = t + one
    out[0] = ((a * x - five * a) * x + eight * a) * x - four * a
    x = t
    out[1] = ((a + two) * x - (a + three)) * x * x + one
    x = one - t
    out[2] = ((a + two) * x - (a + three)) * x * x + one
    x = two - t
    out[3] = ((a * x - five * a) * x + eight * a) * x - four * a


@numba.njit(**_opts)
def _cubic_coeffs_grad(t, z, out):
    """get_cubic_coefficients_grad: d coefficient / d t."""
    a = _f(z, -0.75)
    two, three, ten, eight = _f(z, 2), _f(z, 3), _f(z, 10), _f(z, 8)
    x = _f(z, -1) - t
    out[0] = (_f(z, -3) * a * x - ten * a) * x - eight * a
    x = z - t
    out[1] = (_f(z, -3) * (a + two) * x - two * (a + three)) * x
    x = _f(z, 1) - t
    out[2] = (three * (a + two) * x - two * (a + three)) * x
    x = two - t
    out[3] = (three * a * x - ten * a) * x + eight * a


@numba.njit(**_opts)
def _bounded2(x, n, c, xx, yy, h_, w_, padding, align_corners, z):
    """get_value_bounded: x[n, c] at the padded coordinates (zero outside when padding by zeros)."""
    xi = int(_coords2(xx, w_, padding, align_corners, z))
    yi = int(_coords2(yy, h_, padding, align_corners, z))
    if 0 <= xi < w_ and 0 <= yi < h_:
        return x[n, c, yi, xi], yi, xi, True
    return z, 0, 0, False


@numba.njit(parallel=True, **_opts)
def grid_sample_2d(x, grid, mode, padding, align_corners, z, out):
    """x (N, C, H, W), grid (N, Ho, Wo, 2) -> out (N, C, Ho, Wo); mode 0 bilinear, 1 nearest, 2 bicubic."""
    n_, c_, h_, w_ = x.shape
    ho, wo = grid.shape[1], grid.shape[2]
    for t in prange(n_ * ho):
        n = t // ho
        oh = t % ho
        cx = np.empty(4, dtype=out.dtype)
        cy = np.empty(4, dtype=out.dtype)
        row = np.empty(4, dtype=out.dtype)
        for ow in range(wo):
            gx = grid[n, oh, ow, 0]
            gy = grid[n, oh, ow, 1]
            if mode == 2:
                xs = _unnorm2(gx, w_, align_corners, z)
                ys = _unnorm2(gy, h_, align_corners, z)
                x0 = np.floor(xs)
                y0 = np.floor(ys)
                _cubic_coeffs(xs - x0, z, cx)
                _cubic_coeffs(ys - y0, z, cy)
                for c in range(c_):
                    for i in range(4):
                        yy = y0 + _f(z, i - 1)
                        acc = cx[0] * _bounded2(x, n, c, x0 - _f(z, 1), yy, h_, w_, padding, align_corners, z)[0]
                        for j in range(1, 4):
                            acc = acc + cx[j] * _bounded2(x, n, c, x0 + _f(z, j - 1), yy, h_, w_, padding,
                                                          align_corners, z)[0]
                        row[i] = acc
                    out[n, c, oh, ow] = cy[0] * row[0] + cy[1] * row[1] + cy[2] * row[2] + cy[3] * row[3]
                continue
            xs = _coords2(_unnorm2(gx, w_, align_corners, z), w_, padding, align_corners, z)
            ys = _coords2(_unnorm2(gy, h_, align_corners, z), h_, padding, align_corners, z)
            if mode == 1:
                xi = int(np.rint(xs))
                yi = int(np.rint(ys))
                ok = 0 <= xi < w_ and 0 <= yi < h_
                for c in range(c_):
                    out[n, c, oh, ow] = x[n, c, yi, xi] if ok else z
                continue
            x0 = np.floor(xs)
            y0 = np.floor(ys)
            w = xs - x0
            e = _f(z, 1) - w
            nn = ys - y0
            s = _f(z, 1) - nn
            xw, yn = int(x0), int(y0)
            ok_w, ok_e = 0 <= xw < w_, 0 <= xw + 1 < w_
            ok_n, ok_s = 0 <= yn < h_, 0 <= yn + 1 < h_
            for c in range(c_):
                v_nw = x[n, c, yn, xw] if ok_n and ok_w else z
                v_ne = x[n, c, yn, xw + 1] if ok_n and ok_e else z
                v_sw = x[n, c, yn + 1, xw] if ok_s and ok_w else z
                v_se = x[n, c, yn + 1, xw + 1] if ok_s and ok_e else z
                out[n, c, oh, ow] = (v_nw * (s * e)) + (v_ne * (s * w)) + (v_sw * (nn * e)) + (v_se * (nn * w))


@numba.njit(parallel=True, **_opts)
def grid_sample_2d_backward(grad, x, grid, mode, padding, align_corners, z, want_input, gx_out, ggrid):
    """Gradients of :func:`grid_sample_2d` for the input (gx_out, zeroed here) and the grid (ggrid).

    Parallel over the batch: each sample adds into its own input image only.
    """
    n_, c_, h_, w_ = x.shape
    ho, wo = grid.shape[1], grid.shape[2]
    for n in prange(n_):
        cx = np.empty(4, dtype=ggrid.dtype)
        cy = np.empty(4, dtype=ggrid.dtype)
        dx = np.empty(4, dtype=ggrid.dtype)
        dy = np.empty(4, dtype=ggrid.dtype)
        if want_input:
            for c in range(c_):
                for yy in range(h_):
                    for xx in range(w_):
                        gx_out[n, c, yy, xx] = z
        for oh in range(ho):
            for ow in range(wo):
                gxn = grid[n, oh, ow, 0]
                gyn = grid[n, oh, ow, 1]
                if mode == 2:
                    xs = _unnorm2(gxn, w_, align_corners, z)
                    ys = _unnorm2(gyn, h_, align_corners, z)
                    x0 = np.floor(xs)
                    y0 = np.floor(ys)
                    _cubic_coeffs(xs - x0, z, cx)
                    _cubic_coeffs(ys - y0, z, cy)
                    _cubic_coeffs_grad(xs - x0, z, dx)
                    _cubic_coeffs_grad(ys - y0, z, dy)
                    sx = z
                    sy = z
                    for c in range(c_):
                        g = grad[n, c, oh, ow]
                        for i in range(4):
                            for j in range(4):
                                xx = x0 + _f(z, i - 1)
                                yy = y0 + _f(z, j - 1)
                                v, yi, xi, ok = _bounded2(x, n, c, xx, yy, h_, w_, padding, align_corners, z)
                                if want_input and ok:
                                    gx_out[n, c, yi, xi] += g * cx[i] * cy[j]
                                sx = sx - v * g * dx[i] * cy[j]
                                sy = sy - v * g * dy[j] * cx[i]
                    ggrid[n, oh, ow, 0] = sx * _scaling2(w_, align_corners, z)
                    ggrid[n, oh, ow, 1] = sy * _scaling2(h_, align_corners, z)
                    continue
                xs, mx = _loc2(gxn, w_, padding, align_corners, z)
                ys, my = _loc2(gyn, h_, padding, align_corners, z)
                if mode == 1:
                    xi = int(np.rint(xs))
                    yi = int(np.rint(ys))
                    if want_input and 0 <= xi < w_ and 0 <= yi < h_:
                        for c in range(c_):
                            gx_out[n, c, yi, xi] += grad[n, c, oh, ow]
                    ggrid[n, oh, ow, 0] = z
                    ggrid[n, oh, ow, 1] = z
                    continue
                x0 = np.floor(xs)
                y0 = np.floor(ys)
                w = xs - x0
                e = _f(z, 1) - w
                nn = ys - y0
                s = _f(z, 1) - nn
                xw, yn = int(x0), int(y0)
                ok_w, ok_e = 0 <= xw < w_, 0 <= xw + 1 < w_
                ok_n, ok_s = 0 <= yn < h_, 0 <= yn + 1 < h_
                sx = z
                sy = z
                for c in range(c_):
                    g = grad[n, c, oh, ow]
                    if want_input:
                        if ok_n and ok_w:
                            gx_out[n, c, yn, xw] += (s * e) * g
                        if ok_n and ok_e:
                            gx_out[n, c, yn, xw + 1] += (s * w) * g
                        if ok_s and ok_w:
                            gx_out[n, c, yn + 1, xw] += (nn * e) * g
                        if ok_s and ok_e:
                            gx_out[n, c, yn + 1, xw + 1] += (nn * w) * g
                    v_nw = x[n, c, yn, xw] if ok_n and ok_w else z
                    v_ne = x[n, c, yn, xw + 1] if ok_n and ok_e else z
                    v_sw = x[n, c, yn + 1, xw] if ok_s and ok_w else z
                    v_se = x[n, c, yn + 1, xw + 1] if ok_s and ok_e else z
                    sx = sx + ((v_ne - v_nw) * s + (v_se - v_sw) * nn) * g
                    sy = sy + ((v_sw - v_nw) * e + (v_se - v_ne) * w) * g
                ggrid[n, oh, ow, 0] = sx * mx
                ggrid[n, oh, ow, 1] = sy * my


@numba.njit(**_opts)
def _reflect3(x, twice_low, twice_high, z):
    """reflect_coordinates_set_grad (GridSampler.h) and the derivative's sign."""
    if twice_low == twice_high:
        return z, z
    mn = _f(z, twice_low) / _f(z, 2)
    span = _f(z, twice_high - twice_low) / _f(z, 2)
    x = x - mn
    g = _f(z, 1)
    if x < z:
        g = _f(z, -1)
        x = -x
    extra = np.fmod(x, span)
    flips = int(np.floor(x / span))
    if flips % 2 == 0:
        return extra + mn, g
    return span - extra + mn, -g


@numba.njit(**_opts)
def _clip3(x, size, z):
    """clip_coordinates_set_grad: min(size - 1, max(x, 0)) and its derivative."""
    if x <= z:
        return z, z
    m = _f(z, size - 1)
    if x >= m:
        return m, z
    return x, _f(z, 1)


@numba.njit(**_opts)
def _loc3(coord, size, padding, align_corners, z):
    """grid_sampler_compute_source_index_set_grad: the input coordinate and its derivative."""
    one, two = _f(z, 1), _f(z, 2)
    if align_corners:
        x = (coord + one) / two * _f(z, size - 1)
        g = _f(z, size - 1) / two
    else:
        x = ((coord + one) * _f(z, size) - one) / two
        g = _f(z, size) / two
    if padding == 1:
        x, g2 = _clip3(x, size, z)
        g = g * g2
    elif padding == 2:
        if align_corners:
            x, g2 = _reflect3(x, 0, 2 * (size - 1), z)
        else:
            x, g2 = _reflect3(x, -1, 2 * size - 1, z)
        x, g3 = _clip3(x, size, z)
        g = g * g2 * g3
    return x, g


@numba.njit(parallel=True, **_opts)
def grid_sample_3d(x, grid, mode, padding, align_corners, z, out):
    """x (N, C, D, H, W), grid (N, Do, Ho, Wo, 3) -> out (N, C, Do, Ho, Wo); mode 0 bilinear, 1 nearest."""
    n_, c_, d_, h_, w_ = x.shape
    do, ho, wo = grid.shape[1], grid.shape[2], grid.shape[3]
    for t in prange(n_ * do):
        n = t // do
        od = t % do
        wts = np.empty(8, dtype=out.dtype)
        for oh in range(ho):
            for ow in range(wo):
                ix, _ = _loc3(grid[n, od, oh, ow, 0], w_, padding, align_corners, z)
                iy, _ = _loc3(grid[n, od, oh, ow, 1], h_, padding, align_corners, z)
                iz, _ = _loc3(grid[n, od, oh, ow, 2], d_, padding, align_corners, z)
                if mode == 1:
                    xi, yi, zi = int(np.rint(ix)), int(np.rint(iy)), int(np.rint(iz))
                    ok = 0 <= xi < w_ and 0 <= yi < h_ and 0 <= zi < d_
                    for c in range(c_):
                        out[n, c, od, oh, ow] = x[n, c, zi, yi, xi] if ok else z
                    continue
                x0, y0, z0 = np.floor(ix), np.floor(iy), np.floor(iz)
                x1, y1, z1 = x0 + _f(z, 1), y0 + _f(z, 1), z0 + _f(z, 1)
                for q in range(8):  # t/b (z0/z1), n/s (y0/y1), w/e (x0/x1), as the CPU orders them
                    fx = (x1 - ix) if q % 2 == 0 else (ix - x0)
                    fy = (y1 - iy) if (q // 2) % 2 == 0 else (iy - y0)
                    fz = (z1 - iz) if q // 4 == 0 else (iz - z0)
                    wts[q] = fx * fy * fz
                xi0, yi0, zi0 = int(x0), int(y0), int(z0)
                for c in range(c_):
                    acc = z
                    for q in range(8):
                        xx, yy, zz = xi0 + q % 2, yi0 + (q // 2) % 2, zi0 + q // 4
                        if 0 <= xx < w_ and 0 <= yy < h_ and 0 <= zz < d_:
                            acc = acc + x[n, c, zz, yy, xx] * wts[q]
                    out[n, c, od, oh, ow] = acc


@numba.njit(parallel=True, **_opts)
def grid_sample_3d_backward(grad, x, grid, mode, padding, align_corners, z, want_input, gx_out, ggrid):
    """Gradients of :func:`grid_sample_3d` for the input (gx_out, zeroed here) and the grid (ggrid)."""
    n_, c_, d_, h_, w_ = x.shape
    do, ho, wo = grid.shape[1], grid.shape[2], grid.shape[3]
    for n in prange(n_):
        wts = np.empty(8, dtype=ggrid.dtype)
        fs = np.empty((8, 3), dtype=ggrid.dtype)
        if want_input:
            for c in range(c_):
                for zz in range(d_):
                    for yy in range(h_):
                        for xx in range(w_):
                            gx_out[n, c, zz, yy, xx] = z
        for od in range(do):
            for oh in range(ho):
                for ow in range(wo):
                    ix, mx = _loc3(grid[n, od, oh, ow, 0], w_, padding, align_corners, z)
                    iy, my = _loc3(grid[n, od, oh, ow, 1], h_, padding, align_corners, z)
                    iz, mz = _loc3(grid[n, od, oh, ow, 2], d_, padding, align_corners, z)
                    if mode == 1:
                        xi, yi, zi = int(np.rint(ix)), int(np.rint(iy)), int(np.rint(iz))
                        if want_input and 0 <= xi < w_ and 0 <= yi < h_ and 0 <= zi < d_:
                            for c in range(c_):
                                gx_out[n, c, zi, yi, xi] += grad[n, c, od, oh, ow]
                        ggrid[n, od, oh, ow, 0] = z
                        ggrid[n, od, oh, ow, 1] = z
                        ggrid[n, od, oh, ow, 2] = z
                        continue
                    x0, y0, z0 = np.floor(ix), np.floor(iy), np.floor(iz)
                    x1, y1, z1 = x0 + _f(z, 1), y0 + _f(z, 1), z0 + _f(z, 1)
                    for q in range(8):
                        fs[q, 0] = (x1 - ix) if q % 2 == 0 else (ix - x0)
                        fs[q, 1] = (y1 - iy) if (q // 2) % 2 == 0 else (iy - y0)
                        fs[q, 2] = (z1 - iz) if q // 4 == 0 else (iz - z0)
                        wts[q] = fs[q, 0] * fs[q, 1] * fs[q, 2]
                    xi0, yi0, zi0 = int(x0), int(y0), int(z0)
                    sx = z
                    sy = z
                    sz = z
                    for c in range(c_):
                        g = grad[n, c, od, oh, ow]
                        if want_input:
                            for q in range(8):
                                xx, yy, zz = xi0 + q % 2, yi0 + (q // 2) % 2, zi0 + q // 4
                                if 0 <= xx < w_ and 0 <= yy < h_ and 0 <= zz < d_:
                                    gx_out[n, c, zz, yy, xx] += wts[q] * g
                        for q in range(8):
                            xx, yy, zz = xi0 + q % 2, yi0 + (q // 2) % 2, zi0 + q // 4
                            if not (0 <= xx < w_ and 0 <= yy < h_ and 0 <= zz < d_):
                                continue
                            v = x[n, c, zz, yy, xx]
                            # d weight / d coordinate: -1 for the low corner, +1 for the high one
                            tx = v * fs[q, 1] * fs[q, 2] * g
                            ty = v * fs[q, 0] * fs[q, 2] * g
                            tz = v * fs[q, 0] * fs[q, 1] * g
                            sx = sx - tx if q % 2 == 0 else sx + tx
                            sy = sy - ty if (q // 2) % 2 == 0 else sy + ty
                            sz = sz - tz if q // 4 == 0 else sz + tz
                    ggrid[n, od, oh, ow, 0] = mx * sx
                    ggrid[n, od, oh, ow, 1] = my * sy
                    ggrid[n, od, oh, ow, 2] = mz * sz


# --- distances ------------------------------------------------------------------------------------

@numba.njit(**_opts)
def _dist(a, b, p):
    """The p-norm distance of two rows (p = 0: count of differences; inf: max)."""
    m = a.shape[0]
    if p == 0.0:
        acc = 0.0
        for k in range(m):
            if a[k] != b[k]:
                acc += 1.0
        return acc
    if p == np.inf:
        acc = 0.0
        for k in range(m):
            acc = max(acc, abs(a[k] - b[k]))
        return acc
    if p == 1.0:
        acc = 0.0
        for k in range(m):
            acc += abs(a[k] - b[k])
        return acc
    if p == 2.0:
        acc = 0.0
        for k in range(m):
            d = a[k] - b[k]
            acc += d * d
        return math.sqrt(acc)
    acc = 0.0
    for k in range(m):
        acc += abs(a[k] - b[k]) ** p
    return acc ** (1.0 / p)


@numba.njit(parallel=True, **_opts)
def cdist(x1, x2, p, out):
    """out[b, i, j] = ||x1[b, i] - x2[b, j]||_p for x1 (B, R1, M), x2 (B, R2, M)."""
    b_, r1, _ = x1.shape
    r2 = x2.shape[1]
    for t in prange(b_ * r1):
        b = t // r1
        i = t % r1
        for j in range(r2):
            out[b, i, j] = _dist(x1[b, i], x2[b, j], p)


@numba.njit(**_opts)
def _dist_grad(diff, dist, p):
    """d ||v||_p / d v_k for one component, given the distance."""
    if p == 0.0 or dist == 0.0:
        return 0.0
    if p == 1.0:
        return np.sign(diff)
    if p == 2.0:
        return diff / dist
    if p == np.inf:
        return np.sign(diff) * (1.0 if abs(diff) == dist else 0.0)
    if p < 2.0:
        if diff == 0.0 and p < 1.0:
            return 0.0
        return np.sign(diff) * abs(diff) ** (p - 1.0) / dist ** (p - 1.0)
    return diff * abs(diff) ** (p - 2.0) / dist ** (p - 1.0)


@numba.njit(parallel=True, **_opts)
def cdist_backward(grad, x1, x2, p, dist, out):
    """Gradient of :func:`cdist` for x1: out[b, i] = sum_j grad[b, i, j] d dist[b, i, j] / d x1[b, i]."""
    b_, r1, m = x1.shape
    r2 = x2.shape[1]
    for t in prange(b_ * r1):
        b = t // r1
        i = t % r1
        for k in range(m):
            out[b, i, k] = 0.0
        for j in range(r2):
            g = grad[b, i, j]
            d = dist[b, i, j]
            for k in range(m):
                out[b, i, k] += g * _dist_grad(x1[b, i, k] - x2[b, j, k], d, p)


@numba.njit(parallel=True, **_opts)
def pdist(x, p, out):
    """out = the distances of every pair of rows i < j of x (N, M), in row-major pair order."""
    n = x.shape[0]
    for i in prange(n):
        base = n * i - i * (i + 1) // 2 - i - 1
        for j in range(i + 1, n):
            out[base + j] = _dist(x[i], x[j], p)


@numba.njit(parallel=True, **_opts)
def pdist_backward(grad, x, p, dist, out):
    """Gradient of :func:`pdist`: each row gets the contributions of the pairs it belongs to."""
    n, m = x.shape
    for i in prange(n):
        for k in range(m):
            out[i, k] = 0.0
        for j in range(n):
            if j == i:
                continue
            a, b = (i, j) if i < j else (j, i)
            idx = n * a - a * (a + 1) // 2 + (b - a - 1)
            g = grad[idx]
            d = dist[idx]
            for k in range(m):
                out[i, k] += g * _dist_grad(x[i, k] - x[j, k], d, p)


# --- embedding bags -------------------------------------------------------------------------------

@numba.njit(parallel=True, **_opts)
def embedding_bag(weight, indices, starts, ends, mode, psw, has_psw, padding_idx, out, bag_size, max_idx):
    """Reduce each bag indices[starts[b]:ends[b]] of weight rows: mode 0 sum, 1 mean, 2 max.

    Rows equal to padding_idx are skipped; per-sample weights (sum mode) scale each row.
    bag_size gets the count of rows used, max_idx (max mode) the row each maximum came from.
    """
    nb = starts.shape[0]
    dim = weight.shape[1]
    for b in prange(nb):
        for k in range(dim):
            out[b, k] = 0.0
            if mode == 2:
                max_idx[b, k] = 0
        count = 0
        for q in range(starts[b], ends[b]):
            r = indices[q]
            if r == padding_idx:
                continue
            s = psw[q] if has_psw else 1.0
            for k in range(dim):
                v = weight[r, k]
                if mode == 2:
                    if count == 0 or v > out[b, k]:
                        out[b, k] = v
                        max_idx[b, k] = r
                else:
                    out[b, k] += v * s
            count += 1
        bag_size[b] = count
        if mode == 1 and count > 0:
            for k in range(dim):
                out[b, k] /= count


@numba.njit(**_opts)
def embedding_bag_backward(grad, indices, bag_of, bag_size, max_idx, mode, psw, has_psw, padding_idx,
                           scale, counts, out):
    """Dense gradient of :func:`embedding_bag` for the weight (out zeroed by the caller).

    ``counts`` (per row, used when ``scale``) divides by how often each row occurs (sum and mean modes).
    """
    dim = grad.shape[1]
    if mode == 2:  # as the CPU: empty bags give nothing, and no scaling by frequency
        for b in range(grad.shape[0]):
            if bag_size[b] == 0:
                continue
            for k in range(dim):
                out[max_idx[b, k], k] += grad[b, k]
        return
    for q in range(indices.shape[0]):
        r = indices[q]
        if r == padding_idx:
            continue
        b = bag_of[q]
        if b < 0 or b >= grad.shape[0]:  # an index past the last bag (include_last_offset): in no bag
            continue
        s = psw[q] if has_psw else 1.0
        if mode == 1:
            s = s / bag_size[b] if bag_size[b] > 0 else 0.0
        if scale:
            s = s / counts[r]
        for k in range(dim):
            out[r, k] += grad[b, k] * s


@numba.njit(parallel=True, **_opts)
def embedding_bag_psw_backward(grad, weight, indices, bag_of, padding_idx, out):
    """Gradient for the per-sample weights (sum mode): the dot product of each row with its bag's gradient."""
    for q in prange(indices.shape[0]):
        r = indices[q]
        if r == padding_idx:
            out[q] = 0.0
            continue
        b = bag_of[q]
        if b < 0 or b >= grad.shape[0]:
            out[q] = 0.0
            continue
        acc = 0.0
        for k in range(grad.shape[1]):
            acc += grad[b, k] * weight[r, k]
        out[q] = acc
