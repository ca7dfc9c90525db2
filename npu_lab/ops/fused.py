"""Fused NPU operators in their own ``npu`` library namespace.

These are the kernels the compiler's fusion passes rewrite graphs into. Each
is a ``torch.library.custom_op`` with an ``npu`` implementation, a fake
(meta) implementation so ``torch.compile`` can trace through it, and an
autograd formula, so it behaves like any ATen operator:

* ``torch.ops.npu.linear_relu(x, weight, bias)``: ``relu(x @ weight.T + bias)``
  in one kernel; the bias add and the ReLU happen as each output tile is
  written (a matmul *epilogue*), so the pre-activation never reaches memory.
* ``torch.ops.npu.conv_bn_relu(x, w, b, gamma, beta, mean, var, eps, stride, padding,
  dilation, groups, relu)``: inference conv2d + batch norm (+ ReLU) folded into one
  convolution with the ReLU in the matmul epilogue;
* ``torch.ops.npu.fused_attention(q, k, v, attn_mask, is_causal, scale)``:
  scaled-dot-product attention in one pass per query row, returning the
  output and the log-sum-exp the backward needs.
* ``torch.ops.npu.log_softmax_nll(x, target, weight, reduction, ignore_index)`` and
  ``torch.ops.npu.log_softmax_nll_backward(...)``: cross-entropy's forward and its
  input gradient, one kernel each. They appear only in compiled graphs (after
  AOTAutograd has split forward from backward), so they have no autograd formula.
"""

from __future__ import annotations

import numpy as np
import torch

from ..kernels import loss as lk
from ..kernels import matmul as mk
from ..kernels.threads import sized
from . import registry
from .common import as_array, check_same_device, empty, launch, nbytes
from .conv import conv_traffic
from .linalg import tiles
from .losses import MEAN, NONE, _nll_inputs, nll_reduce, raise_bad_target


@registry.custom_op("npu::linear_relu")
def linear_relu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """relu(x @ weight.T + bias) with the bias and ReLU fused into the matmul."""
    check_same_device("npu::linear_relu", x, weight, bias)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    m, k = x2.shape
    n = weight.shape[0]
    out = empty((m, n), x.dtype)
    wt = as_array(weight).T  # (K, N) view: the kernel reads the weight's rows, nothing is copied
    if bias is not None:
        mk.mm(as_array(x2), wt, as_array(out), tiles.get((m, n, k), tiles["default"]),
              epilogue="bias_relu", bias=as_array(bias))
    else:
        mk.mm(as_array(x2), wt, as_array(out), tiles.get((m, n, k), tiles["default"]), epilogue="relu")
    launch("linear_relu", 2.0 * m * n * k + 2.0 * m * n, nbytes(x) + nbytes(weight), nbytes(out), matrix=x.dtype)
    return out.reshape(*lead, n)


@linear_relu.register_fake
def _(x, weight, bias):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _linear_relu_setup(ctx, inputs, output):
    x, weight, bias = inputs
    ctx.save_for_backward(x, weight, output)
    ctx.has_bias = bias is not None


def _linear_relu_backward(ctx, grad):
    x, weight, out = ctx.saved_tensors
    g = grad * (out > 0)
    g2 = g.reshape(-1, g.shape[-1])
    grad_x = (g2 @ weight).reshape(x.shape)
    grad_w = g2.t() @ x.reshape(-1, x.shape[-1])
    grad_b = g2.sum(0) if ctx.has_bias else None
    return grad_x, grad_w, grad_b


linear_relu.register_autograd(_linear_relu_backward, setup_context=_linear_relu_setup)


@registry.custom_op("npu::fused_attention")
def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
                    is_causal: bool, scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled-dot-product attention in one kernel: returns (output, logsumexp)."""
    res = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        q, k, v, attn_mask, 0.0, is_causal, False, scale=scale
    )
    return res[0], res[1]


@fused_attention.register_fake
def _(q, k, v, attn_mask, is_causal, scale):
    from .attention import layout_strides

    # the layout the kernel gives its output (q's dimension order): a compiled graph that
    # transposes the heads back and reshapes then needs no copy
    shape = (*q.shape[:-1], v.shape[-1])
    strides = layout_strides(q, shape)
    out = q.new_empty(shape) if strides is None else q.new_empty_strided(shape, strides)
    lead = q.shape[:-2] if q.dim() == 4 else (1, q.shape[0])
    return out, q.new_empty((*lead, q.shape[-2]), dtype=torch.float32)


def _attention_setup(ctx, inputs, output):
    q, k, v, attn_mask, is_causal, scale = inputs
    ctx.save_for_backward(q, k, v, attn_mask, output[0], output[1])
    ctx.is_causal, ctx.scale = is_causal, scale


def _attention_backward(ctx, grad_out, grad_lse):
    q, k, v, attn_mask, out, lse = ctx.saved_tensors
    # built with torch factories so the formula also traces under FakeTensorMode (AOTAutograd)
    empty_i64 = q.new_empty((0,), dtype=torch.int64)
    z = q.new_zeros((), dtype=torch.int64)
    dq, dk, dv, dmask = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(
        grad_out, q, k, v, attn_mask, [True, True, True, attn_mask is not None], out, lse,
        empty_i64, empty_i64, q.shape[-2], k.shape[-2], 0.0, ctx.is_causal, z, z, scale=ctx.scale,
    )
    return dq, dk, dv, dmask, None, None


fused_attention.register_autograd(_attention_backward, setup_context=_attention_setup)


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, is_causal: bool = False,
                                 scale: float | None = None) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` through the NPU's fused kernel (no dropout)."""
    return torch.ops.npu.fused_attention(q, k, v, attn_mask, is_causal, scale)[0]


__all__ = ["fused_attention", "linear_relu", "scaled_dot_product_attention"]


@registry.custom_op("npu::conv_bn_relu")
def conv_bn_relu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, bn_weight: torch.Tensor | None,
                 bn_bias: torch.Tensor | None, running_mean: torch.Tensor, running_var: torch.Tensor, eps: float,
                 stride: list[int], padding: list[int], dilation: list[int], groups: int,
                 relu: bool) -> torch.Tensor:
    """Inference-time conv2d + batch_norm (+ ReLU) as one convolution.

    In evaluation mode batch norm is an affine map per output channel, so it
    folds into the convolution: ``w' = w * s`` and ``b' = (b - mean) * s + beta``
    with ``s = gamma / sqrt(var + eps)``. The ReLU runs in the matmul's epilogue.
    """
    from .conv import _cols, _geometry, _pair

    check_same_device("npu::conv_bn_relu", x, weight, bias, running_mean, running_var)
    stride, padding, dilation = _pair(stride), _pair(padding), _pair(dilation)
    n, c, h, wd, o, cg, kh, kw, ho, wo = _geometry(x, weight, stride, padding, dilation)
    var = as_array(running_var).astype(np.float64)
    scale = (as_array(bn_weight).astype(np.float64) if bn_weight is not None else np.ones(o)) / np.sqrt(var + eps)
    shift = (as_array(bn_bias).astype(np.float64) if bn_bias is not None else np.zeros(o))
    b0 = as_array(bias).astype(np.float64) if bias is not None else np.zeros(o)
    folded_b = ((b0 - as_array(running_mean).astype(np.float64)) * scale + shift).astype(np.float32)
    folded_w = (as_array(weight.contiguous()).reshape(o, -1) * scale[:, None]).astype(np.float32)
    xa = as_array(x.contiguous())
    og = o // groups
    result = np.empty((n * ho * wo, o), dtype=np.float32)
    epilogue = "bias_relu" if relu else "bias"
    for g in range(groups):
        cols = _cols(np.ascontiguousarray(xa[:, g * cg:(g + 1) * cg]), kh, kw, stride, padding, dilation, ho, wo)
        part = np.empty((cols.shape[0], og), dtype=np.float32)
        mk.mm(cols, np.ascontiguousarray(folded_w[g * og:(g + 1) * og].T), part,
              tiles.get((cols.shape[0], og, cols.shape[1]), tiles["default"]), epilogue=epilogue,
              bias=np.ascontiguousarray(folded_b[g * og:(g + 1) * og]))
        result[:, g * og:(g + 1) * og] = part
    out = empty((n, o, ho, wo), x.dtype)
    as_array(out)[...] = result.reshape(n, ho, wo, o).transpose(0, 3, 1, 2)
    extra = conv_traffic(n, ho, wo, x.shape[1], kh, kw, o, out.element_size(), nhwc=False) // 2
    launch("conv_bn_relu" if relu else "conv_bn", 2.0 * n * ho * wo * o * cg * kh * kw,
           nbytes(x) + nbytes(weight) + extra, nbytes(out) + extra, matrix=x.dtype)
    return out


@conv_bn_relu.register_fake
def _(x, weight, bias, bn_weight, bn_bias, running_mean, running_var, eps, stride, padding, dilation, groups,
      relu):
    kh, kw = weight.shape[-2:]
    ho = (x.shape[2] + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (x.shape[3] + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    return x.new_empty((x.shape[0], weight.shape[0], ho, wo))


@registry.custom_op("npu::log_softmax_nll")
def log_softmax_nll(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int,
                    ignore_index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cross-entropy's forward in one kernel: (log_softmax(x, 1), loss, total weight).

    What ``_log_softmax`` followed by ``nll_loss_forward`` compute, in one pass
    over each row of the (N, C) scores; the log-probabilities are returned too,
    since the backward needs them.
    """
    xc, t, w = _nll_inputs(x, target, weight)
    n = xc.shape[0]
    logp = empty(x.shape, x.dtype)
    rows = np.empty((3, n))  # per sample: loss, weight, target out of range
    if n:
        if sized(lk.log_softmax_nll_rows, x.numel())(xc, t, w, ignore_index, as_array(logp), *rows):
            raise_bad_target(rows[2], t)
    loss, total_weight = nll_reduce(rows[0], rows[1], reduction, True, x.dtype)
    launch("log_softmax_nll", 6 * x.numel(), nbytes(x) + nbytes(target), nbytes(logp) + nbytes(loss))
    return logp, loss, total_weight


@log_softmax_nll.register_fake
def _(x, target, weight, reduction, ignore_index):
    loss = x.new_empty((x.shape[0],) if reduction == NONE else ())
    return x.new_empty(x.shape), loss, x.new_empty(())


@registry.custom_op("npu::log_softmax_nll_backward")
def log_softmax_nll_backward(grad: torch.Tensor, logp: torch.Tensor, target: torch.Tensor,
                             weight: torch.Tensor | None, reduction: int, ignore_index: int,
                             total_weight: torch.Tensor) -> torch.Tensor:
    """Cross-entropy's input gradient in one kernel, from the saved log-probabilities.

    ``nll_loss_backward`` followed by ``_log_softmax_backward_data`` make a
    mostly-zero (N, C) gradient and then read it back; this computes
    ``w[t] * grad * scale * (softmax(x) - onehot(t))`` row by row instead.
    """
    check_same_device("npu::log_softmax_nll_backward", grad, total_weight)
    lp, t, w = _nll_inputs(logp, target, weight)
    out = empty(logp.shape, logp.dtype)
    scale = 1.0
    if reduction == MEAN:
        tw = float(as_array(total_weight))
        scale = 1.0 / tw if tw else 0.0
    g = as_array(grad.contiguous()).reshape(-1)
    per_sample = reduction == NONE
    sized(lk.log_softmax_nll_backward_rows, logp.numel())(g, lp, t, w, ignore_index, scale, per_sample,
                                                          as_array(out))
    launch("log_softmax_nll_backward", 3 * logp.numel(), nbytes(grad) + nbytes(logp) + nbytes(target),
           nbytes(out))
    return out


@log_softmax_nll_backward.register_fake
def _(grad, logp, target, weight, reduction, ignore_index, total_weight):
    return logp.new_empty(logp.shape)
