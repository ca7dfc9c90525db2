"""Losses: mse_loss and nll_loss (cross_entropy = log_softmax + nll_loss), with backwards."""

from __future__ import annotations

import numpy as np
import torch

from ..device.tensors import NUMPY_DTYPES, block_of
from ..kernels import loss as lk
from ..kernels.threads import sized
from .common import as_array, check_same_device, empty, launch, nbytes
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


@register("nll_loss_forward")
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


@register("nll_loss_backward")
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
    sized(lk.nll_backward, out.numel())(g, t, w, ignore_index, scale, per_sample, as_array(out).reshape(x.shape))
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
