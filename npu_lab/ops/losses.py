"""Losses with their backwards: mse_loss, nll_loss (cross_entropy = log_softmax + nll_loss),
binary_cross_entropy, smooth_l1_loss, huber_loss, multi_margin_loss and multilabel_margin_loss.

Elementwise losses are scalar expressions run by :func:`npu_lab.ops.pointwise.pointwise`, written as
PyTorch's CPU kernels write them; the per-sample margin losses are numba loops
(:mod:`npu_lab.kernels.loss`) that accumulate where and in the precision ATen does.
"""

from __future__ import annotations

import numpy as np
import torch

from ..device import native
from ..device.tensors import NUMPY_DTYPES, block_of, flat_array
from ..kernels import loss as lk
from ..kernels.threads import sized
from .activations import check_floating, check_same_dtype, dtype_name
from .common import as_array, check_same_device, empty, launch, nbytes, resize_out
from .pointwise import pointwise
from .reductions import _reduce_sum
from .registry import register

# ATen's reduction enum
NONE, MEAN, SUM = 0, 1, 2


@register("mse_loss")
def mse_loss(self, target, reduction=MEAN):
    check_same_device("aten::mse_loss", self, target)
    sq = pointwise("squared_error", "({0} - {1}) * ({0} - {1})", (self, target), flops=2)
    if reduction == NONE:
        return sq
    return _reduce_sum(sq, None, False, None, mean=reduction == MEAN)


@register("mse_loss_backward")
def mse_loss_backward(grad_output, self, target, reduction):
    check_same_device("aten::mse_loss_backward", grad_output, self, target)
    scale = 2.0 / self.numel() if reduction == MEAN and self.numel() else 2.0
    return pointwise("mse_backward", "s * ({0} - {1}) * {2}", (self, target, grad_output),
                     named={"s": scale}, flops=3)


_ONES: dict[tuple[int, np.dtype], np.ndarray] = {}


def _nll_inputs(self, target, weight):
    """(scores as an (N, C) array, targets as int64, class weights) for the NLL kernels."""
    check_same_device("aten::nll_loss_forward", self, target, weight)
    if target.dtype not in (torch.int64, torch.uint8, torch.int32):
        raise RuntimeError(f"expected scalar type Long but found {target.dtype}")
    x = self if self.dim() == 2 else self.reshape(1, -1)
    t = target if target.dim() == 1 else target.reshape(-1)
    if x.shape[0] != t.shape[0]:
        raise ValueError(
            f"Expected input batch_size ({x.shape[0]}) to match target batch_size ({t.shape[0]})."
        )
    xa = as_array(x.contiguous())
    if weight is not None:
        w = as_array(weight.contiguous())
    else:  # no class weights: ones, made once per (C, dtype) and only ever read
        w = _ONES.get((x.shape[1], xa.dtype))
        if w is None:
            w = _ONES[(x.shape[1], xa.dtype)] = np.ones(x.shape[1], dtype=xa.dtype)
    ta = as_array(t.contiguous())
    return xa, (ta if ta.dtype == np.int64 else ta.astype(np.int64)), w


_current_device = native.load().current_device
_empty = native.load().empty
_NLL_FAST = (torch.float32, torch.float64)


def _fast_nll_inputs(self, target, weight, reduction) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(scores, targets, class weights) as :func:`_nll_inputs` gives them, for a classifier's loss: (N, C)
    contiguous float scores, N int64 targets, no class weights, a mean or a sum, on the current device; None
    for anything else (the kernel's general path then checks and runs the call)."""
    if weight is not None or reduction == NONE or not isinstance(self, torch.Tensor) \
            or not isinstance(target, torch.Tensor):
        return None
    if self.dtype not in _NLL_FAST or target.dtype is not torch.int64 or self.dim() != 2 or target.dim() != 1:
        return None
    dev = self.get_device()
    n = self.shape[0]
    if not n or target.shape[0] != n or dev != _current_device() or target.get_device() != dev \
            or not (self.is_contiguous() and target.is_contiguous()):
        return None
    x = as_array(self)
    w = _ONES.get((self.shape[1], x.dtype))
    if w is None:
        w = _ONES[(self.shape[1], x.dtype)] = np.ones(self.shape[1], dtype=x.dtype)
    return x, as_array(target), w


def _fast_nll_forward(self, target, weight, reduction, ignore_index):
    found = _fast_nll_inputs(self, target, weight, reduction)
    if found is None:
        return None
    x, t, w = found
    n = x.shape[0]
    dtype, dev = self.dtype, self.get_device()
    out, total_weight = _empty([], dtype, dev), _empty([], dtype, dev)
    if lk.nll_forward_totals(x, t, w, ignore_index, reduction == MEAN, as_array(out), as_array(total_weight)) >= 0:
        return None  # a target out of range: the general path raises
    size = self.element_size()
    launch("nll_loss", 2 * n, n * x.shape[1] * size + 8 * n, size)
    return out, total_weight


def _fast_nll_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    found = _fast_nll_inputs(self, target, weight, reduction)
    if found is None or not isinstance(grad_output, torch.Tensor) or grad_output.dtype is not self.dtype \
            or grad_output.numel() != 1 or grad_output.get_device() != self.get_device():
        return None
    x, t, w = found
    scale = 1.0
    if reduction == MEAN:
        tw = float(as_array(total_weight))
        scale = 1.0 / tw if tw else 0.0
    out = empty(self.shape, self.dtype)
    g = as_array(grad_output.contiguous()).reshape(-1)
    if sized(lk.nll_backward, out.numel())(g, t, w, ignore_index, scale, False, as_array(out)):
        return None  # a target out of range: the general path raises
    size = self.element_size()
    launch("nll_loss_backward", self.numel(), size + 8 * x.shape[0], self.numel() * size)
    return out


@register("nll_loss_forward", fast=_fast_nll_forward)
def nll_loss_forward(self, target, weight, reduction, ignore_index):
    if self.dim() not in (1, 2):
        raise ValueError(f"Expected 1 or 2 dimensions (got {self.dim()})")
    x, t, w = _nll_inputs(self, target, weight)
    n = x.shape[0]
    losses = np.empty(n, dtype=np.float64)
    weights = np.empty(n, dtype=np.float64)
    bad = lk.nll_forward(x, t, w, ignore_index, losses, weights)
    if bad >= 0:
        raise IndexError(f"Target {t[bad]} is out of bounds.")
    out, total_weight = nll_reduce(losses, weights, reduction, self.dim() == 2, self.dtype)
    launch("nll_loss", 2 * n, nbytes(self) + nbytes(target), nbytes(out))
    return out, total_weight


def _filled(shape: tuple[int, ...], dtype: torch.dtype, values: object) -> torch.Tensor:
    """A new contiguous npu tensor holding ``values`` (a number or an array of ``shape``)."""
    out = empty(shape, dtype)
    block_of(out).view(NUMPY_DTYPES[dtype])[:out.numel()] = values
    return out


def raise_bad_target(bad: np.ndarray, target: np.ndarray) -> None:
    """ATen's error for the first sample whose target is out of range (``bad`` flags them per sample)."""
    if bad.any():
        raise IndexError(f"Target {target[int(np.argmax(bad))]} is out of bounds.")


def _scalar_array(t: torch.Tensor) -> np.ndarray:
    """The 0-d array over a new 0-d npu tensor's device bytes."""
    return block_of(t).view(NUMPY_DTYPES[t.dtype])[:1].reshape(())


def nll_reduce(losses: np.ndarray, weights: np.ndarray, reduction: int, batched: bool,
               dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, total weight) as ``nll_loss_forward`` returns them, from per-sample losses and weights.

    The sums are the kernel :func:`npu_lab.kernels.loss.nll_totals`, which compiled graphs call too,
    so both give the same bits."""
    if reduction == NONE and batched:
        # like ATen, the unreduced loss of a batch reports a total weight of 0
        return _filled((losses.shape[0],), dtype, losses), _filled((), dtype, 0)
    loss, total_weight = empty((), dtype), empty((), dtype)
    lk.nll_totals(losses, weights, _scalar_array(loss), _scalar_array(total_weight), reduction == MEAN)
    return loss, total_weight


@register("nll_loss_backward", fast=_fast_nll_backward)
def nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    check_same_device("aten::nll_loss_backward", grad_output, self, target, total_weight)
    x, t, w = _nll_inputs(self, target, weight)
    out = empty(self.shape, self.dtype)
    g = as_array(grad_output.contiguous()).reshape(-1)
    per_sample = reduction == NONE and self.dim() == 2
    scale = 1.0
    if reduction == MEAN:
        tw = float(as_array(total_weight))
        scale = 1.0 / tw if tw else 0.0
    if sized(lk.nll_backward, out.numel())(g, t, w, ignore_index, scale, per_sample, as_array(out).reshape(x.shape)):
        raise_bad_target((t != ignore_index) & ((t < 0) | (t >= x.shape[1])), t)
    launch("nll_loss_backward", self.numel(), nbytes(grad_output) + nbytes(target), nbytes(out))
    return out


def _flatten_spatial(self: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, C, d1, ...) scores and (N, d1, ...) targets as (N*d1*..., C) and (N*d1*...)."""
    c = self.shape[1]
    moved = self.movedim(1, -1).reshape(-1, c)
    return moved, target.reshape(-1)


@register("nll_loss2d_forward")
def nll_loss2d_forward(self, target, weight, reduction, ignore_index):
    """nll_loss for images (N, C, H, W): every pixel is a sample."""
    check_same_device("aten::nll_loss2d_forward", self, target, weight)
    flat, t = _flatten_spatial(self, target)
    out, total = nll_loss_forward(flat, t, weight, reduction, ignore_index)
    if reduction == NONE:
        out = out.reshape(target.shape)
    return out, total


@register("nll_loss2d_backward")
def nll_loss2d_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    check_same_device("aten::nll_loss2d_backward", grad_output, self, target)
    flat, t = _flatten_spatial(self, target)
    g = grad_output.reshape(-1) if reduction == NONE else grad_output
    grad = nll_loss_backward(g, flat, t, weight, reduction, ignore_index, total_weight)
    shape = [self.shape[0], *self.shape[2:], self.shape[1]]
    return grad.reshape(shape).movedim(-1, 1).contiguous()


# ---------------------------------------------------------------------------
# Shared helpers for the losses below


def _reduce(loss: torch.Tensor, reduction: int) -> torch.Tensor:
    """ATen's apply_loss_reduction: the loss itself, its mean or its sum."""
    if reduction == NONE:
        return loss
    return _reduce_sum(loss, None, False, None, mean=reduction == MEAN)


def _into(out: torch.Tensor | None, result: torch.Tensor) -> torch.Tensor:
    """``result``, or ``result`` written into ``out`` (resized to its shape)."""
    if out is None or out is result:
        return result
    resize_out(out, result.shape)  # the value is cast to out's dtype, as ATen's copy into out= does
    if out.numel():
        as_array(out)[...] = as_array(result)
    return out


def _floating_common(kernel: str, *tensors: torch.Tensor) -> torch.dtype:
    """The promoted dtype of ``tensors``, which must be floating (the CPU kernels' dispatch)."""
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    if not dtype.is_floating_point:
        raise NotImplementedError(f'"{kernel}_npu" not implemented for \'{dtype_name(dtype)}\'')
    return dtype


def _check_unit_interval(t: torch.Tensor, what: str) -> None:
    a = as_array(t)
    if a.size and not np.logical_and(a >= 0, a <= 1).all():
        raise RuntimeError(f"all elements of {what} should be between 0 and 1")


# ---------------------------------------------------------------------------
# binary_cross_entropy: -w (t log(x) + (1 - t) log(1 - x)), each log clamped at -100

_BCE = "({1} - one) * max(math.log(one - {0}), m100) - {1} * max(math.log({0}), m100)"
_BCE_GRAD = "{0} * ({1} - {2}) / max((one - {1}) * {1}, eps)"
_EPSILON = float(np.float32(1e-12))  # ATen's `constexpr float EPSILON = 1e-12`


def _bce(self, target, weight, reduction, out):
    check_same_device("aten::binary_cross_entropy", self, target, weight)
    check_floating("binary_cross_entropy", self)
    check_same_dtype(self, target)
    _check_unit_interval(self, "input")
    _check_unit_interval(target, "target")
    if out is not None:
        check_same_device("aten::binary_cross_entropy", self, out)
        check_same_dtype(self, out)
        resize_out(out, self.shape)
    loss = empty(self.shape, self.dtype) if out is None or reduction != NONE else out
    # ATen runs the kernel on squeezed views, so (N, 1) against (N,) needs no broadcast
    pointwise("binary_cross_entropy", _BCE, (self.squeeze(), target.squeeze()), named={"one": 1, "m100": -100},
              out=loss.squeeze(), inplace=True, flops=8)
    if weight is not None:
        pointwise("mul", "{0} * {1}", (loss, weight), out=loss, inplace=True)
    return _into(out, _reduce(loss, reduction))


@register("binary_cross_entropy")
def binary_cross_entropy(self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
                         reduction: int = MEAN) -> torch.Tensor:
    """Binary cross entropy of probabilities ``self`` against ``target`` (optionally weighted), reduced."""
    return _bce(self, target, weight, reduction, None)


@register("binary_cross_entropy.out")
def binary_cross_entropy_out(self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
                             reduction: int = MEAN, *, out: torch.Tensor) -> torch.Tensor:
    """binary_cross_entropy into ``out``."""
    return _bce(self, target, weight, reduction, out)


def _bce_backward(grad_output, self, target, weight, reduction, grad_input):
    check_same_device("aten::binary_cross_entropy_backward", grad_output, self, target, weight)
    check_floating("binary_cross_entropy_backward", self)
    check_same_dtype(self, grad_output, target)
    if grad_input is None:
        grad_input = empty(self.shape, self.dtype)
    else:
        check_same_device("aten::binary_cross_entropy_backward", self, grad_input)
        check_same_dtype(self, grad_input)
        resize_out(grad_input, self.shape)
    pointwise("binary_cross_entropy_backward", _BCE_GRAD, (grad_output.squeeze(), self.squeeze(), target.squeeze()),
              named={"one": 1, "eps": _EPSILON}, out=grad_input.squeeze(), inplace=True, flops=5)
    if weight is not None:
        pointwise("mul", "{0} * {1}", (grad_input, weight), out=grad_input, inplace=True)
    if reduction == MEAN:
        pointwise("div", "{0} / n", (grad_input,), named={"n": self.numel()}, out=grad_input, inplace=True)
    return grad_input


@register("binary_cross_entropy_backward")
def binary_cross_entropy_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                                  weight: torch.Tensor | None = None, reduction: int = MEAN) -> torch.Tensor:
    """grad * (x - t) / max(x (1 - x), 1e-12), times the weight, over N for the mean."""
    return _bce_backward(grad_output, self, target, weight, reduction, None)


@register("binary_cross_entropy_backward.grad_input")
def binary_cross_entropy_backward_out(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                                      weight: torch.Tensor | None = None, reduction: int = MEAN, *,
                                      grad_input: torch.Tensor) -> torch.Tensor:
    """binary_cross_entropy_backward into ``grad_input``."""
    return _bce_backward(grad_output, self, target, weight, reduction, grad_input)


# ---------------------------------------------------------------------------
# smooth_l1_loss and huber_loss (the same curve, scaled differently), with backwards

_SMOOTH_L1 = "half * abs({0} - {1}) * abs({0} - {1}) / beta if abs({0} - {1}) < beta else abs({0} - {1}) - half * beta"
_HUBER = "half * abs({0} - {1}) * abs({0} - {1}) if abs({0} - {1}) < delta else delta * (abs({0} - {1}) - half * delta)"
# the CPU's vectorised forms: sign(d) (with -1 at 0) where |d| >= beta, d / beta inside
_SMOOTH_L1_GRAD = ("norm * ((one if {0} - {1} > zero else -one) if abs({0} - {1}) >= beta else ({0} - {1}) / beta)"
                   " * {2}")
_HUBER_GRAD = ("norm * ((one if {0} - {1} > zero else -one) * delta if abs({0} - {1}) >= delta else {0} - {1})"
               " * {2}")


def _pointwise_loss(name, kernel, template, named, self, target, reduction, out, flops):
    """An elementwise loss of (self, target), broadcast and promoted, then reduced (into ``out``)."""
    check_same_device(f"aten::{name}", self, target)
    _floating_common(kernel, self, target)
    if out is not None:
        check_same_device(f"aten::{name}", self, out)
    if reduction == NONE:
        return pointwise(name, template, (self, target), named=named, out=out, flops=flops)
    loss = pointwise(name, template, (self, target), named=named, flops=flops)
    return _into(out, _reduce(loss, reduction))


def _smooth_l1(self, target, reduction, beta, out):
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    return _pointwise_loss("smooth_l1_loss", "smooth_l1", _SMOOTH_L1, {"half": 0.5, "beta": beta}, self, target,
                           reduction, out, 6)


@register("smooth_l1_loss")
def smooth_l1_loss(self: torch.Tensor, target: torch.Tensor, reduction: int = MEAN, beta: float = 1.0) -> torch.Tensor:
    """0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere (d = self - target), reduced."""
    return _smooth_l1(self, target, reduction, beta, None)


@register("smooth_l1_loss.out")
def smooth_l1_loss_out(self: torch.Tensor, target: torch.Tensor, reduction: int = MEAN, beta: float = 1.0, *,
                       out: torch.Tensor) -> torch.Tensor:
    """smooth_l1_loss into ``out``."""
    return _smooth_l1(self, target, reduction, beta, out)


def _loss_backward(name, kernel, template, named, grad_output, self, target, reduction, grad_input, flops):
    """An elementwise loss gradient of (self, target, grad_output) into ``grad_input`` (norm = 1/N for the mean)."""
    check_same_device(f"aten::{name}", grad_output, self, target, grad_input)
    _floating_common(kernel, self, target, grad_output)
    norm = 1.0 / self.numel() if reduction == MEAN and self.numel() else 1.0
    return pointwise(name, template, (self, target, grad_output), named={"norm": norm, "one": 1, "zero": 0, **named},
                     out=grad_input, flops=flops)


@register("smooth_l1_loss_backward.grad_input")
def smooth_l1_loss_backward_out(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, reduction: int,
                                beta: float, *, grad_input: torch.Tensor) -> torch.Tensor:
    """norm * grad * (d / beta inside (-beta, beta), sign(d) outside)."""
    return _loss_backward("smooth_l1_loss_backward", "smooth_l1_backward", _SMOOTH_L1_GRAD, {"beta": beta},
                          grad_output, self, target, reduction, grad_input, 6)


def _huber(self, target, reduction, delta, out):
    if not delta > 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    check_same_device("aten::huber_loss", self, target, out)
    _floating_common("huber", self, target)
    # unlike smooth_l1_loss, the unreduced loss has the input's dtype (ATen writes it into empty_like(input))
    shape = torch.broadcast_shapes(self.shape, target.shape)
    loss = out if out is not None and reduction == NONE else empty(shape, self.dtype if out is None else out.dtype)
    pointwise("huber_loss", _HUBER, (self, target), named={"half": 0.5, "delta": delta}, out=loss, flops=6)
    return _into(out, _reduce(loss, reduction))


@register("huber_loss")
def huber_loss(self: torch.Tensor, target: torch.Tensor, reduction: int = MEAN, delta: float = 1.0) -> torch.Tensor:
    """0.5 d^2 where |d| < delta, delta (|d| - 0.5 delta) elsewhere (d = self - target), reduced."""
    return _huber(self, target, reduction, delta, None)


@register("huber_loss.out")
def huber_loss_out(self: torch.Tensor, target: torch.Tensor, reduction: int = MEAN, delta: float = 1.0, *,
                   out: torch.Tensor) -> torch.Tensor:
    """huber_loss into ``out``."""
    return _huber(self, target, reduction, delta, out)


@register("huber_loss_backward.out")
def huber_loss_backward_out(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, reduction: int,
                            delta: float, *, grad_input: torch.Tensor) -> torch.Tensor:
    """norm * grad * (d inside (-delta, delta), delta * sign(d) outside)."""
    check_same_dtype(self, target, grad_output, grad_input)
    return _loss_backward("huber_loss_backward", "huber_backward", _HUBER_GRAD, {"delta": delta},
                          grad_output, self, target, reduction, grad_input, 6)


# ---------------------------------------------------------------------------
# multi_margin_loss and multilabel_margin_loss: (N, C) scores, one loop per sample


def _frames(self: torch.Tensor) -> tuple[int, int]:
    """(samples, classes) of a 0-, 1- or 2-D input, with ATen's error for anything else."""
    nd = self.dim()
    if not ((nd == 2 and self.shape[1] != 0) or (nd == 1 and self.shape[0] != 0) or nd == 0):
        raise RuntimeError("Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(self.shape)}")
    if nd <= 1:
        return 1, 1 if nd == 0 else self.shape[0]
    return self.shape[0], self.shape[1]


def _long_target(target: torch.Tensor) -> np.ndarray:
    if target.dtype != torch.int64:
        raise RuntimeError(f"expected scalar type Long but found {dtype_name(target.dtype)}")
    return np.ascontiguousarray(as_array(target)).reshape(-1)


def _multi_margin_checks(self, target, p, weight, name):
    check_same_device(f"aten::{name}", self, target, weight)
    if p not in (1, 2):
        raise RuntimeError("only p == 1 and p == 2 supported")
    nframe, dim = _frames(self)
    if not (target.dim() <= 1 and target.numel() == nframe):
        raise RuntimeError("multi_margin_loss: target tensor should be 1-D with size equal to the number of input "
                           f"samples (batch size). Expected target size [{nframe}], but got {list(target.shape)}. "
                           f"Input has shape {list(self.shape)}.")
    if weight is not None and not (weight.dim() <= 1 and weight.numel() == dim):
        raise RuntimeError(f"inconsistent weight size, expected {dim} but got {list(weight.shape)}")
    return nframe, dim


def _multi_margin_arrays(self, target, weight, nframe, dim, kernel):
    """(scores as (N, C), targets, weights, has weights) for the kernels, checked like ATen's dispatch."""
    check_floating(kernel, self)
    t = _long_target(target)
    np_type = NUMPY_DTYPES[self.dtype]
    if weight is not None and weight.dtype != self.dtype:
        raise RuntimeError(f"expected scalar type {dtype_name(self.dtype)} but found {dtype_name(weight.dtype)}")
    w = np.ascontiguousarray(as_array(weight)).reshape(-1) if weight is not None else np.empty(0, np_type)
    if t.size and (t.min() < 0 or t.max() >= dim):
        raise RuntimeError("target out of range")
    x = np.ascontiguousarray(as_array(self)).reshape(nframe, dim)
    return x, t, w, weight is not None


def _multi_margin(self, target, p, margin, weight, reduction, out):
    nframe, dim = _multi_margin_checks(self, target, p, weight, "multi_margin_loss")
    shape = (nframe,) if reduction == NONE and target.dim() > 0 else ()
    if out is None:
        out = empty(shape, self.dtype)
    else:
        check_same_device("aten::multi_margin_loss", self, out)
        check_same_dtype(self, out)
        resize_out(out, shape)
    if self.numel() == 0:
        return out.zero_() if out.numel() else out
    x, t, w, has_w = _multi_margin_arrays(self, target, weight, nframe, dim, "multi_margin_loss_npu_kernel")
    np_type = NUMPY_DTYPES[self.dtype]
    rows = np.empty(nframe, np_type)
    sized(lk.multi_margin_rows, x.size)(x, t, w, has_w, int(p), np_type(margin), np_type(0), np_type(dim), rows)
    if reduction == NONE:
        as_array(out)[...] = rows.reshape(shape)
    else:  # ATen sums the per-sample losses in float64
        total = lk.sum_float64(rows)
        as_array(out)[...] = total / nframe if reduction == MEAN else total
    launch("multi_margin_loss", 4 * x.size, nbytes(self) + nbytes(target), nbytes(out))
    return out


@register("multi_margin_loss")
def multi_margin_loss(self: torch.Tensor, target: torch.Tensor, p=1, margin=1, weight: torch.Tensor | None = None,
                      reduction: int = MEAN) -> torch.Tensor:
    """Per sample, sum over classes d != y of w[y] max(0, margin - x[y] + x[d])^p / C, reduced."""
    return _multi_margin(self, target, p, margin, weight, reduction, None)


@register("multi_margin_loss.out")
def multi_margin_loss_out(self: torch.Tensor, target: torch.Tensor, p=1, margin=1,
                          weight: torch.Tensor | None = None, reduction: int = MEAN, *,
                          out: torch.Tensor) -> torch.Tensor:
    """multi_margin_loss into ``out``."""
    return _multi_margin(self, target, p, margin, weight, reduction, out)


def _per_sample_grad(grad_output: torch.Tensor, target: torch.Tensor, nframe: int, reduction: int,
                     name: str) -> tuple[np.ndarray, bool]:
    """The output gradient as a flat array, and whether it holds one value per sample."""
    if reduction == NONE and target.dim() > 0 and name == "multi_margin_loss":
        if grad_output.dim() != 1 or grad_output.shape[0] != nframe:
            raise RuntimeError(f"multi_margin_loss_backward: expected grad_output to have shape [{nframe}] when "
                               f"reduction='none', but got {list(grad_output.shape)}")
    per_sample = reduction == NONE and grad_output.dim() > 0
    if per_sample and name == "multilabel_margin_loss" and (grad_output.dim() != 1
                                                           or grad_output.shape[0] != nframe):
        raise RuntimeError(f"Expected a tensor of dimension 1 and tensor.size[0] == {nframe} but got: dimension "
                           f"{grad_output.dim()} and tensor.size[0] = {grad_output.shape[0]}")
    return np.ascontiguousarray(as_array(grad_output)).reshape(-1), per_sample


def _multi_margin_backward(grad_output, self, target, p, margin, weight, reduction, grad_input):
    check_same_device("aten::multi_margin_loss_backward", grad_output, self)
    nframe, dim = _multi_margin_checks(self, target, p, weight, "multi_margin_loss_backward")
    if grad_input is None:
        grad_input = empty(self.shape, self.dtype)
    else:
        check_same_dtype(self, grad_input)
        resize_out(grad_input, self.shape)
        if not grad_input.is_contiguous():
            raise RuntimeError("grad_input must be contiguous")
    if self.numel() == 0:
        return grad_input
    x, t, w, has_w = _multi_margin_arrays(self, target, weight, nframe, dim, "multi_margin_loss_backward_npu_kernel")
    check_same_dtype(self, grad_output)
    g, per_sample = _per_sample_grad(grad_output, target, nframe, reduction, "multi_margin_loss")
    np_type = NUMPY_DTYPES[self.dtype]
    scale = np_type(1.0 / (nframe * dim) if reduction == MEAN else 1.0 / dim)
    out = as_array(grad_input).reshape(nframe, dim)
    sized(lk.multi_margin_backward_rows, x.size)(g, per_sample, x, t, w, has_w, int(p), np_type(margin),
                                                 np_type(0), scale, out)
    launch("multi_margin_loss_backward", 4 * x.size, nbytes(self) + nbytes(target), nbytes(grad_input))
    return grad_input


@register("multi_margin_loss_backward")
def multi_margin_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, p, margin,
                               weight: torch.Tensor | None = None, reduction: int = MEAN) -> torch.Tensor:
    """d(multi_margin_loss)/d(self)."""
    return _multi_margin_backward(grad_output, self, target, p, margin, weight, reduction, None)


@register("multi_margin_loss_backward.grad_input")
def multi_margin_loss_backward_out(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, p, margin,
                                   weight: torch.Tensor | None = None, reduction: int = MEAN, *,
                                   grad_input: torch.Tensor) -> torch.Tensor:
    """multi_margin_loss_backward into ``grad_input``."""
    return _multi_margin_backward(grad_output, self, target, p, margin, weight, reduction, grad_input)


def _multilabel_checks(self, target, name):
    check_same_device(f"aten::{name}", self, target)
    nframe, dim = _frames(self)
    if self.dim() <= 1:
        ok = target.dim() <= 1 and target.numel() == dim
    else:
        ok = target.dim() == 2 and target.shape[0] == nframe and target.shape[1] == dim
    if not ok:
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of size: {list(self.shape)}")
    return nframe, dim


def _multilabel_target(target, dim, argument):
    t = _long_target(target)
    if t.size and (t.min() < -1 or t.max() >= dim):
        raise RuntimeError(f"argument #{argument} 'target' is out of range")
    return t


def _multilabel_forward(self, target, reduction, output, is_target):
    nframe, dim = _multilabel_checks(self, target, "multilabel_margin_loss_forward")
    shape = () if reduction != NONE or target.dim() <= 1 else (nframe,)
    if output is None:
        output, is_target = empty(shape, self.dtype), empty(target.shape, self.dtype)
    else:
        check_same_device("aten::multilabel_margin_loss_forward", self, output, is_target)
        check_same_dtype(self, output, is_target)
        resize_out(output, shape)
        resize_out(is_target, target.shape)
        if not is_target.is_contiguous():
            raise RuntimeError("is_target must be contiguous")
    if self.numel() == 0:
        is_target.zero_()
        return output, is_target
    t = _multilabel_target(target, dim, 2)
    check_floating("multilabel_margin_loss_forward_out_frame", self)
    np_type = NUMPY_DTYPES[self.dtype]
    x = np.ascontiguousarray(as_array(self)).reshape(nframe, dim)
    rows = np.empty(nframe, np_type)
    marks = as_array(is_target).reshape(nframe, dim)
    sized(lk.multilabel_margin_rows, x.size)(x, t.reshape(nframe, dim), np_type(1), marks, rows)
    if reduction == NONE and target.dim() > 1:
        as_array(output)[...] = rows / np_type(dim)
    else:  # the per-sample sums added in float64, then divided
        total = lk.sum_float64(rows) / dim
        as_array(output)[...] = total / nframe if reduction == MEAN else total
    launch("multilabel_margin_loss", 3 * x.size * dim, nbytes(self) + nbytes(target),
           nbytes(output) + nbytes(is_target))
    return output, is_target


@register("multilabel_margin_loss_forward")
def multilabel_margin_loss_forward(self: torch.Tensor, target: torch.Tensor,
                                   reduction: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(per sample, sum over labels j and non-label classes d of max(0, 1 - x[j] + x[d]) / C, reduced;
    is_target, 1 at each sample's labels)."""
    return _multilabel_forward(self, target, reduction, None, None)


@register("multilabel_margin_loss_forward.output")
def multilabel_margin_loss_forward_out(self: torch.Tensor, target: torch.Tensor, reduction: int, *,
                                       output: torch.Tensor,
                                       is_target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """multilabel_margin_loss_forward into ``output`` and ``is_target``."""
    return _multilabel_forward(self, target, reduction, output, is_target)


def _multilabel_backward(grad_output, self, target, reduction, is_target, grad_input):
    check_same_device("aten::multilabel_margin_loss_backward", grad_output, self, target, is_target)
    nframe, dim = _multilabel_checks(self, target, "multilabel_margin_loss_backward")
    if tuple(target.shape) != tuple(is_target.shape):
        raise RuntimeError("Expected tensor for argument #3 'target' to have same size as tensor for argument #5 "
                           f"'is_target'; but {list(target.shape)} does not equal {list(is_target.shape)} (while "
                           "checking arguments for multilabel_margin_loss_backward_npu_template)")
    if grad_input is None:
        grad_input = empty(self.shape, self.dtype)
    else:
        check_same_dtype(self, grad_input)
        resize_out(grad_input, self.shape)
    if self.numel() == 0:
        return grad_input
    if not grad_input.is_contiguous():
        raise RuntimeError("grad_input must be contiguous")
    t = _multilabel_target(target, dim, 3)
    check_floating("multilabel_margin_loss_backward_out_frame", self)
    check_same_dtype(self, is_target, grad_output)
    marks = np.ascontiguousarray(as_array(is_target)).reshape(nframe, dim)
    if marks.min() < 0 or marks.max() > 1:
        raise RuntimeError("argument #5 'is_target' is out of range")
    g, per_sample = _per_sample_grad(grad_output, target, nframe, reduction, "multilabel_margin_loss")
    np_type = NUMPY_DTYPES[self.dtype]
    scale = np_type(1.0 / (nframe * dim) if reduction == MEAN else 1.0 / dim)
    x = np.ascontiguousarray(as_array(self)).reshape(nframe, dim)
    out = as_array(grad_input).reshape(nframe, dim)
    sized(lk.multilabel_margin_backward_rows, x.size)(g, per_sample, x, t.reshape(nframe, dim), marks, np_type(1),
                                                      np_type(0), scale, out)
    launch("multilabel_margin_loss_backward", 3 * x.size * dim, nbytes(self) + nbytes(target), nbytes(grad_input))
    return grad_input


@register("multilabel_margin_loss_backward")
def multilabel_margin_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                                    reduction: int, is_target: torch.Tensor) -> torch.Tensor:
    """d(multilabel_margin_loss)/d(self), from the forward's is_target."""
    return _multilabel_backward(grad_output, self, target, reduction, is_target, None)


@register("multilabel_margin_loss_backward.grad_input")
def multilabel_margin_loss_backward_out(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                                        reduction: int, is_target: torch.Tensor, *,
                                        grad_input: torch.Tensor) -> torch.Tensor:
    """multilabel_margin_loss_backward into ``grad_input``."""
    return _multilabel_backward(grad_output, self, target, reduction, is_target, grad_input)


# ---------------------------------------------------------------------------
# CTC loss: the forward-backward algorithm over the blank-augmented targets, one sample per thread

_CTC = "ctc_loss_allocate_outputs"


def _ctc_targets(log_probs, targets, input_lengths, target_lengths, blank):
    """ATen's argument checks; returns (targets' flat storage, per-sample offsets, stride, input lengths, target
    lengths, longest target)."""
    check_same_device("aten::_ctc_loss", log_probs, targets)
    check_floating("ctc_loss", log_probs)
    if targets.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"Expected tensor for argument #2 'targets' to have scalar type Int; but got "
                           f"{targets.dtype} instead (while checking arguments for {_CTC})")
    if log_probs.dim() != 3:
        raise RuntimeError(f"Expected 3-dimensional tensor, but got {log_probs.dim()}-dimensional tensor for "
                           f"argument #1 'log_probs' (while checking arguments for {_CTC})")
    if not 1 <= targets.dim() <= 2:
        raise RuntimeError(f"Expected 1 to 2 dimensions, but got {targets.dim()}-dimensional tensor for argument "
                           f"#2 'targets' (while checking arguments for {_CTC})")
    n_in, batch, classes = log_probs.shape
    if not 0 <= blank < classes:
        raise RuntimeError("blank must be in label range")
    il, tl = np.asarray(input_lengths, dtype=np.int64).reshape(-1), np.asarray(target_lengths, dtype=np.int64)
    tl = tl.reshape(-1)
    if il.shape[0] != batch:
        raise RuntimeError("input_lengths must be of size batch_size")
    if tl.shape[0] != batch:
        raise RuntimeError("target_lengths must be of size batch_size")
    for v in tl:
        if v < 0:
            raise RuntimeError(f"Expected target_lengths to have value at least 0, but got value {v} (while "
                               f"checking arguments for {_CTC})")
    max_target = int(tl.max()) if batch else 0
    if targets.dim() == 1:
        offsets = np.concatenate(([0], np.cumsum(tl)[:-1])) if batch else np.zeros(0, np.int64)
        stride, need = targets.stride(0), int(tl.sum())
    else:
        offsets, stride, need = np.arange(batch) * targets.stride(0), targets.stride(1), batch
        if targets.shape[1] < max_target:
            raise RuntimeError(f"Expected tensor to have size at least {max_target} at dimension 1, but got size "
                               f"{targets.shape[1]} for argument #2 'targets' (while checking arguments for {_CTC})")
    if targets.shape[0] != need:
        raise RuntimeError(f"Expected tensor to have size {need} at dimension 0, but got size {targets.shape[0]} "
                           f"for argument #2 'targets' (while checking arguments for {_CTC})")
    for v in il:
        if v < 0:
            raise RuntimeError(f"Expected input_lengths to have value at least 0, but got value {v} (while "
                               f"checking arguments for {_CTC})")
        if v > n_in:
            raise RuntimeError(f"Expected input_lengths to have value at most {n_in}, but got value {v} (while "
                               f"checking arguments for {_CTC})")
    flat = flat_array(targets)
    offsets = np.asarray(offsets, dtype=np.int64) + targets.storage_offset()
    # the labels the recursion reads must index log_probs (ATen does not check; reading past it is not an option)
    used = [flat[o + stride * np.arange(n)] for o, n in zip(offsets, tl) if n]
    if used:
        labels = np.concatenate(used)
        bad = (labels < 0) | (labels >= classes)
        if bad.any():
            raise IndexError(f"ctc_loss: target label {labels[bad][0]} is out of range for {classes} classes")
    return flat, offsets, stride, il, tl, max_target


def _ctc_forward(log_probs, targets, input_lengths, target_lengths, blank):
    flat, offsets, stride, il, tl, max_target = _ctc_targets(log_probs, targets, input_lengths, target_lengths,
                                                             blank)
    n_in, batch, _ = log_probs.shape
    np_type = NUMPY_DTYPES[log_probs.dtype]
    nll = empty((batch,), log_probs.dtype)
    log_alpha = empty((batch, n_in, 2 * max_target + 1), log_probs.dtype)
    work = batch * n_in * (2 * max_target + 1)
    sized(lk.ctc_alpha, work)(as_array(log_probs), flat, offsets, stride, il, tl, blank, np_type(-np.inf),
                              np_type(0), as_array(log_alpha), as_array(nll))
    launch("ctc_loss", 12 * work, nbytes(log_probs) + nbytes(targets), nbytes(nll) + nbytes(log_alpha))
    return nll, log_alpha


def _lengths(t: torch.Tensor, what: str) -> list[int]:
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise RuntimeError(f"{what} must be integral")
    return [int(v) for v in t.reshape(-1).tolist()]


@register("_ctc_loss")
def ctc_loss(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: list[int], target_lengths: list[int],
             blank: int = 0, zero_infinity: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(negative log likelihood of each target under the CTC alignment model, the log_alpha table)."""
    return _ctc_forward(log_probs, targets, input_lengths, target_lengths, blank)


@register("_ctc_loss.Tensor")
def ctc_loss_tensor(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
                    target_lengths: torch.Tensor, blank: int = 0,
                    zero_infinity: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """_ctc_loss with the lengths given as tensors."""
    return _ctc_forward(log_probs, targets, _lengths(input_lengths, "input_lengths"),
                        _lengths(target_lengths, "target_lengths"), blank)


def _ctc_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha, blank,
                  zero_infinity):
    check_same_device("aten::_ctc_loss_backward", grad, log_probs, neg_log_likelihood, log_alpha)
    flat, offsets, stride, il, tl, max_target = _ctc_targets(log_probs, targets, input_lengths, target_lengths,
                                                             blank)
    n_in, batch, classes = log_probs.shape
    check_same_dtype(log_probs, grad, neg_log_likelihood, log_alpha)
    for what, t in (("grad", grad), ("neg_log_likelihood", neg_log_likelihood)):
        if t.dim() != 1 or t.shape[0] != batch:
            raise RuntimeError(f"Expected {what} to have shape [{batch}], but got {list(t.shape)}")
    if tuple(log_alpha.shape) != (batch, n_in, 2 * max_target + 1):
        raise RuntimeError(f"Expected log_alpha to have shape {[batch, n_in, 2 * max_target + 1]}, but got "
                           f"{list(log_alpha.shape)}")
    np_type = NUMPY_DTYPES[log_probs.dtype]
    out = empty((n_in, batch, classes), log_probs.dtype)
    log_beta = np.empty(tuple(log_alpha.shape), np_type)
    work = batch * n_in * (2 * max_target + 1 + classes)
    sized(lk.ctc_grad, work)(as_array(grad), as_array(log_probs), flat, offsets, stride, il, tl,
                             as_array(neg_log_likelihood), as_array(log_alpha), blank, bool(zero_infinity),
                             np_type(-np.inf), np_type(0), log_beta, as_array(out))
    launch("ctc_loss_backward", 16 * work, nbytes(log_probs) + nbytes(log_alpha), nbytes(out))
    return out


@register("_ctc_loss_backward")
def ctc_loss_backward(grad: torch.Tensor, log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: list[int],
                      target_lengths: list[int], neg_log_likelihood: torch.Tensor, log_alpha: torch.Tensor,
                      blank: int, zero_infinity: bool = False) -> torch.Tensor:
    """d(CTC negative log likelihoods, weighted by ``grad``)/d(log_probs), from the forward's log_alpha."""
    return _ctc_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha,
                         blank, zero_infinity)


@register("_ctc_loss_backward.Tensor")
def ctc_loss_backward_tensor(grad: torch.Tensor, log_probs: torch.Tensor, targets: torch.Tensor,
                             input_lengths: torch.Tensor, target_lengths: torch.Tensor,
                             neg_log_likelihood: torch.Tensor, log_alpha: torch.Tensor, blank: int,
                             zero_infinity: bool = False) -> torch.Tensor:
    """_ctc_loss_backward with the lengths given as tensors."""
    return _ctc_backward(grad, log_probs, targets, _lengths(input_lengths, "input_lengths"),
                         _lengths(target_lengths, "target_lengths"), neg_log_likelihood, log_alpha, blank,
                         zero_infinity)
