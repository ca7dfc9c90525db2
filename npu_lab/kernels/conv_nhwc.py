"""Channels-last (NHWC) convolution and max pooling, in numba.

In the NCHW layout (:mod:`npu_lab.kernels.conv`) the values of one pixel sit
``H*W`` elements apart, one per channel plane. In **NHWC** they sit next to
each other: ``x[n, h, w, :]`` is one contiguous run of ``C`` values. That
changes two things for a convolution done as im2col + matmul:

* **im2col copies runs, not single values.** One row of the column matrix is
  the patch an output pixel sees, ordered ``(kh, kw, C)``: for each of the
  ``kh*kw`` taps it copies ``C`` consecutive input values. The column matrix
  is ``(N*Ho*Wo, kh*kw*C)``.
* **The product is already the output.** ``cols @ W^T`` has one row per
  output pixel and one column per output channel: that *is* an
  ``(N, Ho, Wo, Cout)`` tensor in NHWC order. The NCHW kernel must transpose
  this product into ``(N, Cout, Ho, Wo)`` afterwards (one more pass over the
  whole output); the NHWC kernel lets the matmul write straight into the
  output buffer.

A 1x1 convolution with stride 1 and no padding needs no im2col at all in
NHWC: the input, seen as an ``(N*H*W, C)`` matrix, already is the column
matrix (see :func:`npu_lab.ops.layout.conv2d_nhwc`).

The kernels accept inputs with any strides (numba compiles one version per
memory layout), so a channels-first tensor *viewed* as NHWC with
``permute(0, 2, 3, 1)`` can be read without a conversion copy first.
"""

import numba
import numpy as np
from numba import prange

_opts = dict(cache=True, nogil=True, error_model="numpy")


@numba.njit(parallel=True, **_opts)
def im2col_nhwc(x, c0, cg, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo, cols):
    """Channels ``[c0, c0 + cg)`` of x (N, H, W, C) -> cols (N*ho*wo, kh*kw*cg), rows ordered (kh, kw, c).

    Taps that fall into the padding read as zeros.
    """
    n_, h_, w_ = x.shape[0], x.shape[1], x.shape[2]
    for t in prange(n_ * ho):
        n = t // ho
        oh = t % ho
        for ow in range(wo):
            row = (n * ho + oh) * wo + ow
            for i in range(kh):
                ih = oh * sh - ph + i * dh
                for j in range(kw):
                    iw = ow * sw - pw + j * dw
                    base = (i * kw + j) * cg
                    if 0 <= ih < h_ and 0 <= iw < w_:
                        for c in range(cg):  # one contiguous run of channels
                            cols[row, base + c] = x[n, ih, iw, c0 + c]
                    else:
                        for c in range(cg):
                            cols[row, base + c] = 0.0


@numba.njit(parallel=True, **_opts)
def max_pool_nhwc(x, kh, kw, sh, sw, ph, pw, dh, dw, out):
    """out (N, Ho, Wo, C) = the maximum of each window of x (N, H, W, C); NaN wins, like PyTorch.

    The innermost loop walks channels, so every window tap reads one
    contiguous run of ``C`` values and updates ``C`` running maxima.
    """
    n_, h_, w_, c_ = x.shape
    ho, wo = out.shape[1], out.shape[2]
    for t in prange(n_ * ho):
        n = t // ho
        oh = t % ho
        for ow in range(wo):
            for c in range(c_):
                out[n, oh, ow, c] = -np.inf
            for i in range(kh):
                ih = oh * sh - ph + i * dh
                if ih < 0 or ih >= h_:
                    continue
                for j in range(kw):
                    iw = ow * sw - pw + j * dw
                    if iw < 0 or iw >= w_:
                        continue
                    for c in range(c_):
                        v = x[n, ih, iw, c]
                        cur = out[n, oh, ow, c]
                        if v > cur or (v != v and cur == cur):
                            out[n, oh, ow, c] = v
