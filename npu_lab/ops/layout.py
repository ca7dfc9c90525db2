"""Channels-last (NHWC) operators in the ``npu`` namespace.

The compiler's layout pass (:mod:`npu_lab.compiler.passes.layout`) rewrites
chains of convolutions to run in the NHWC layout, where one pixel's channels
are contiguous in memory. These are the kernels it rewrites them into:

* ``torch.ops.npu.conv2d_nhwc(x, weight, bias, stride, padding, dilation, groups)``:
  ``x`` is ``(N, H, W, Cin)``, the result ``(N, Ho, Wo, Cout)`` (contiguous).
  ``weight`` and ``bias`` are the usual PyTorch ``(Cout, Cin/groups, kh, kw)``
  and ``(Cout,)`` tensors. Numerically it is ``F.conv2d`` with both tensors
  permuted: ``conv2d_nhwc(x, ...) == F.conv2d(x.permute(0, 3, 1, 2), ...).permute(0, 2, 3, 1)``.
* ``torch.ops.npu.conv_bn_relu_nhwc(x, w, b, gamma, beta, mean, var, eps, stride, padding,
  dilation, groups, relu)``: the NHWC twin of ``npu.conv_bn_relu`` (inference batch norm
  folded into the convolution, ReLU in the matmul epilogue).
* ``torch.ops.npu.max_pool2d_nhwc(x, kernel_size, stride, padding, dilation, ceil_mode)``:
  the values of ``F.max_pool2d`` on an NHWC tensor (no indices).

Why NHWC pays for convolutions (see :mod:`npu_lab.kernels.conv_nhwc`): im2col
copies contiguous channel runs, and the matmul ``cols @ W^T`` produces the
NHWC output directly, so the final transpose the NCHW kernel needs disappears.

Inputs may have any strides: a channels-first tensor viewed as NHWC with
``permute(0, 2, 3, 1)`` works (the kernel gathers through the strides), a
contiguous NHWC tensor is fastest. ``conv2d_nhwc`` has an autograd formula
(the NCHW backward on permuted views); ``conv_bn_relu_nhwc`` and
``max_pool2d_nhwc`` are inference kernels and have none.
"""

from __future__ import annotations

import numpy as np
import torch

from ..kernels import conv as ck
from ..kernels import conv_nhwc as nk
from ..kernels import matmul as mk
from . import registry
from .common import as_array, check_same_device, empty, launch, nbytes
from .conv import _pair, conv_traffic
from .linalg import tiles


def _out_size(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _conv_geometry(x: torch.Tensor, weight: torch.Tensor, stride: tuple[int, ...], padding: tuple[int, ...],
                   dilation: tuple[int, ...], groups: int, op: str) -> tuple[int, int]:
    """Check an NHWC convolution's shapes; return the output height and width."""
    if x.dim() != 4 or weight.dim() != 4:
        raise RuntimeError(f"{op}: expected a 4-D NHWC input and a 4-D weight, got {x.dim()}-D and "
                           f"{weight.dim()}-D")
    n, h, w, c = x.shape
    o, cg, kh, kw = weight.shape
    if c != cg * groups:
        raise RuntimeError(f"{op}: given groups={groups}, weight of size {list(weight.shape)}, expected "
                           f"NHWC input {list(x.shape)} to have {cg * groups} channels, but got {c} channels")
    if o % groups:
        raise RuntimeError(f"{op}: {o} output channels are not divisible by groups={groups}")
    ho = _out_size(h, kh, stride[0], padding[0], dilation[0])
    wo = _out_size(w, kw, stride[1], padding[1], dilation[1])
    if ho <= 0 or wo <= 0:
        raise RuntimeError(f"{op}: calculated output size ({max(ho, 0)}x{max(wo, 0)}) is too small")
    return ho, wo


def _run_conv_nhwc(x: torch.Tensor, weight_rows: np.ndarray, bias: np.ndarray | None, kernel: tuple[int, int],
                   stride: tuple[int, ...], padding: tuple[int, ...], dilation: tuple[int, ...], groups: int,
                   relu: bool, ho: int, wo: int) -> torch.Tensor:
    """The NHWC convolution: im2col of channel runs, then one matmul per group into the output.

    ``weight_rows`` is the weight as an ``(Cout, kh*kw*Cin/groups)`` matrix whose
    columns are ordered ``(kh, kw, c)``, the order :func:`im2col_nhwc` fills a row in.
    """
    n, h, w, c = x.shape
    kh, kw = kernel
    o = weight_rows.shape[0]
    og, cg = o // groups, c // groups
    m, k = n * ho * wo, kh * kw * cg
    out = empty((n, ho, wo, o), x.dtype)
    out2d = as_array(out).reshape(m, o)  # NHWC output == the (pixels, channels) product matrix
    if m == 0 or o == 0:
        return out
    xa = as_array(x)
    epilogue = ("bias_relu" if relu else "bias") if bias is not None else ("relu" if relu else "none")
    pointwise = (kh == kw == 1 and tuple(stride) == (1, 1) and tuple(padding) == (0, 0) and groups == 1
                 and x.is_contiguous())
    for g in range(groups):
        if pointwise:
            cols = xa.reshape(m, c)  # a 1x1 convolution's column matrix is the input itself
        else:
            cols = np.empty((m, k), dtype=xa.dtype)
            nk.im2col_nhwc(xa, g * cg, cg, kh, kw, stride[0], stride[1], padding[0], padding[1],
                           dilation[0], dilation[1], ho, wo, cols)
        wt = weight_rows[g * og:(g + 1) * og].T  # (K, og): the kernel reads weight rows as they are
        b = np.ascontiguousarray(bias[g * og:(g + 1) * og]) if bias is not None else None
        target = out2d if groups == 1 else np.empty((m, og), dtype=xa.dtype)
        mk.mm(cols, wt, target, tiles.get((m, og, k), tiles["default"]), epilogue=epilogue, bias=b)
        if groups > 1:
            out2d[:, g * og:(g + 1) * og] = target
    return out


def _traffic(x: torch.Tensor, out: torch.Tensor, weight: torch.Tensor, stride, padding, groups: int) -> int:
    """The im2col bytes of an NHWC convolution (none for a 1x1 that reads its input directly)."""
    n, ho, wo, o = out.shape
    _, c, kh, kw = weight.shape[0], x.shape[3], weight.shape[2], weight.shape[3]
    pointwise = kh == kw == 1 and tuple(stride) == (1, 1) and tuple(padding) == (0, 0) and groups == 1
    return conv_traffic(n, ho, wo, c, kh, kw, o, out.element_size(), nhwc=True, pointwise=pointwise)


def _weight_rows(weight: np.ndarray) -> np.ndarray:
    """(Cout, Cin/g, kh, kw) -> (Cout, kh*kw*Cin/g), columns in NHWC patch order (kh, kw, c)."""
    return weight.transpose(0, 2, 3, 1).reshape(weight.shape[0], -1)


# --- conv2d_nhwc ------------------------------------------------------------------------

@registry.custom_op("npu::conv2d_nhwc")
def conv2d_nhwc(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: list[int],
                padding: list[int], dilation: list[int], groups: int) -> torch.Tensor:
    """2-D convolution of an NHWC input ``(N, H, W, Cin)``; returns ``(N, Ho, Wo, Cout)`` contiguous.

    The bias is added in the matmul epilogue, as each output tile is written.
    """
    check_same_device("npu::conv2d_nhwc", x, weight, bias)
    stride, padding, dilation = _pair(stride), _pair(padding), _pair(dilation)
    ho, wo = _conv_geometry(x, weight, stride, padding, dilation, groups, "npu::conv2d_nhwc")
    o, cg, kh, kw = weight.shape
    rows = _weight_rows(as_array(weight))
    b = as_array(bias).astype(rows.dtype) if bias is not None else None
    out = _run_conv_nhwc(x, rows, b, (kh, kw), stride, padding, dilation, groups, False, ho, wo)
    extra = _traffic(x, out, weight, stride, padding, groups) // 2
    launch("conv2d_nhwc", 2.0 * out.numel() * cg * kh * kw, nbytes(x) + nbytes(weight) + extra, nbytes(out) + extra,
           matrix=x.dtype)
    return out


@conv2d_nhwc.register_fake
def _(x, weight, bias, stride, padding, dilation, groups):
    stride, padding, dilation = _pair(stride), _pair(padding), _pair(dilation)
    ho, wo = _conv_geometry(x, weight, stride, padding, dilation, groups, "npu::conv2d_nhwc")
    return x.new_empty((x.shape[0], ho, wo, weight.shape[0]))


def _conv2d_nhwc_setup(ctx, inputs, output) -> None:
    x, weight, bias, stride, padding, dilation, groups = inputs
    ctx.save_for_backward(x, weight)
    ctx.has_bias = bias is not None
    ctx.args = (_pair(stride), _pair(padding), _pair(dilation), groups)


def _conv2d_nhwc_backward(ctx, grad: torch.Tensor):
    """The NCHW convolution backward, on NCHW views of the NHWC tensors."""
    x, weight = ctx.saved_tensors
    stride, padding, dilation, groups = ctx.args
    mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.has_bias and ctx.needs_input_grad[2]]
    gi, gw, gb = torch.ops.aten.convolution_backward(
        grad.permute(0, 3, 1, 2), x.permute(0, 3, 1, 2), weight, [weight.shape[0]] if ctx.has_bias else None,
        list(stride), list(padding), list(dilation), False, [0, 0], groups, mask)
    gi = gi.permute(0, 2, 3, 1) if gi is not None else None
    return gi, gw, gb, None, None, None, None


conv2d_nhwc.register_autograd(_conv2d_nhwc_backward, setup_context=_conv2d_nhwc_setup)


# --- conv_bn_relu_nhwc ------------------------------------------------------------------

@registry.custom_op("npu::conv_bn_relu_nhwc")
def conv_bn_relu_nhwc(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                      bn_weight: torch.Tensor | None, bn_bias: torch.Tensor | None, running_mean: torch.Tensor,
                      running_var: torch.Tensor, eps: float, stride: list[int], padding: list[int],
                      dilation: list[int], groups: int, relu: bool) -> torch.Tensor:
    """Inference conv2d + batch norm (+ ReLU) on an NHWC input (see ``npu.conv_bn_relu``).

    Batch norm in evaluation mode is ``y * s + t`` per output channel with
    ``s = gamma / sqrt(var + eps)``, so it folds into the convolution:
    ``w' = w * s`` and ``b' = (b - mean) * s + beta``.
    """
    check_same_device("npu::conv_bn_relu_nhwc", x, weight, bias, running_mean, running_var)
    stride, padding, dilation = _pair(stride), _pair(padding), _pair(dilation)
    ho, wo = _conv_geometry(x, weight, stride, padding, dilation, groups, "npu::conv_bn_relu_nhwc")
    o, cg, kh, kw = weight.shape
    dtype = as_array(weight).dtype
    var = as_array(running_var).astype(np.float64)
    scale = (as_array(bn_weight).astype(np.float64) if bn_weight is not None else np.ones(o)) / np.sqrt(var + eps)
    shift = as_array(bn_bias).astype(np.float64) if bn_bias is not None else np.zeros(o)
    b0 = as_array(bias).astype(np.float64) if bias is not None else np.zeros(o)
    folded_b = ((b0 - as_array(running_mean).astype(np.float64)) * scale + shift).astype(dtype)
    folded_w = (as_array(weight) * scale[:, None, None, None]).astype(dtype)
    out = _run_conv_nhwc(x, _weight_rows(folded_w), folded_b, (kh, kw), stride, padding, dilation, groups, relu,
                         ho, wo)
    extra = _traffic(x, out, weight, stride, padding, groups) // 2
    launch("conv_bn_relu_nhwc" if relu else "conv_bn_nhwc", 2.0 * out.numel() * cg * kh * kw,
           nbytes(x) + nbytes(weight) + extra, nbytes(out) + extra, matrix=x.dtype)
    return out


@conv_bn_relu_nhwc.register_fake
def _(x, weight, bias, bn_weight, bn_bias, running_mean, running_var, eps, stride, padding, dilation, groups,
      relu):
    stride, padding, dilation = _pair(stride), _pair(padding), _pair(dilation)
    ho, wo = _conv_geometry(x, weight, stride, padding, dilation, groups, "npu::conv_bn_relu_nhwc")
    return x.new_empty((x.shape[0], ho, wo, weight.shape[0]))


# --- max_pool2d_nhwc ----------------------------------------------------------------------

def _pool_geometry(x: torch.Tensor, kernel_size: list[int], stride: list[int], padding: list[int],
                   dilation: list[int], ceil_mode: bool) -> tuple[tuple[int, ...], ...]:
    if x.dim() != 4:
        raise RuntimeError(f"npu::max_pool2d_nhwc: expected a 4-D NHWC input, got {x.dim()}-D")
    k = _pair(kernel_size)
    s = _pair(stride) if stride else k
    p, d = _pair(padding), _pair(dilation)
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise RuntimeError("pad should be at most half of effective kernel size")
    ho = ck.pool_output_size(x.shape[1], k[0], s[0], p[0], d[0], ceil_mode)
    wo = ck.pool_output_size(x.shape[2], k[1], s[1], p[1], d[1], ceil_mode)
    return k, s, p, d, (x.shape[0], ho, wo, x.shape[3])


@registry.custom_op("npu::max_pool2d_nhwc")
def max_pool2d_nhwc(x: torch.Tensor, kernel_size: list[int], stride: list[int], padding: list[int],
                    dilation: list[int], ceil_mode: bool) -> torch.Tensor:
    """``F.max_pool2d`` of an NHWC tensor ``(N, H, W, C)``; returns ``(N, Ho, Wo, C)`` contiguous."""
    check_same_device("npu::max_pool2d_nhwc", x)
    k, s, p, d, shape = _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode)
    out = empty(shape, x.dtype)
    if out.numel():
        nk.max_pool_nhwc(as_array(x), k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1], as_array(out))
    launch("max_pool2d_nhwc", out.numel() * k[0] * k[1], nbytes(x), nbytes(out))
    return out


@max_pool2d_nhwc.register_fake
def _(x, kernel_size, stride, padding, dilation, ceil_mode):
    *_, shape = _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode)
    return x.new_empty(shape)


__all__ = ["conv2d_nhwc", "conv_bn_relu_nhwc", "max_pool2d_nhwc"]
