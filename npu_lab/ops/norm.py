"""Normalisation layers: batch norm (train/eval, running stats), layer norm and group norm, with backwards."""

from __future__ import annotations

import math

import numpy as np
import torch

from ..device import native
from ..kernels import norm as nk
from ..kernels import workspace
from ..kernels.threads import PARALLEL_MIN_WORK, sized
from .common import as_array, check_same_device, empty, launch, nbytes
from .registry import register


def _ncs(t: torch.Tensor) -> np.ndarray:
    """An (N, C, S) view of an (N, C, ...) tensor in its own dtype (of a contiguous copy if it is not
    contiguous); the kernels accumulate in float64."""
    shape = t.shape
    s = math.prod(shape[2:]) if len(shape) > 2 else 1
    return as_array(t.contiguous()).reshape(shape[0], shape[1], s)


def _param(p: torch.Tensor | None, c: int, fill: float) -> np.ndarray:
    return as_array(p).astype(np.float64).reshape(c) if p is not None else np.full(c, fill)


def _check_bn(input: torch.Tensor, *tensors) -> None:
    check_same_device("aten::native_batch_norm", input, *tensors)
    if input.dim() < 2:
        raise ValueError(f"Expected 2D or 3D input (got {input.dim()}D input)")


def _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps):
    _check_bn(input, weight, bias, running_mean, running_var)
    c = input.shape[1]
    x = _ncs(input)
    if training:
        mean, var = np.empty(c), np.empty(c)
        sized(nk.batch_stats, x.size)(x, mean, var)
        count = x.shape[0] * x.shape[2]
        if count <= 1:
            raise ValueError("Expected more than 1 value per channel when training, got input size "
                             f"{list(input.shape)}")
        if running_mean is not None:
            rm = as_array(running_mean)
            rm[...] = (1 - momentum) * rm + momentum * mean
        if running_var is not None:
            rv = as_array(running_var)
            rv[...] = (1 - momentum) * rv + momentum * var * count / (count - 1)
    else:
        mean = as_array(running_mean).astype(np.float64)
        var = as_array(running_var).astype(np.float64)
    invstd = 1.0 / np.sqrt(var + eps)
    out = empty(input.shape, input.dtype)
    sized(nk.batch_apply, x.size)(x, mean, invstd, _param(weight, c, 1.0), _param(bias, c, 0.0),
                                  as_array(out).reshape(x.shape))
    launch("batch_norm", 4 * input.numel(), nbytes(input), nbytes(out))
    stat_dtype = input.dtype
    if training:
        save_mean, save_invstd = empty((c,), stat_dtype), empty((c,), stat_dtype)
        as_array(save_mean)[...] = mean
        as_array(save_invstd)[...] = invstd
    else:
        save_mean, save_invstd = empty((0,), stat_dtype), empty((0,), stat_dtype)
    return out, save_mean, save_invstd


@register("native_batch_norm")
def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps)


@register("_native_batch_norm_legit")
def native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps)


@register("_native_batch_norm_legit.no_stats")
def native_batch_norm_legit_no_stats(input, weight, bias, training, momentum, eps):
    return _bn_forward(input, weight, bias, None, None, True, momentum, eps)


@register("_native_batch_norm_legit_no_training")
def native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, momentum, eps):
    return _bn_forward(input, weight, bias, running_mean, running_var, False, momentum, eps)


@register("native_batch_norm_backward")
def native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd,
                               train, eps, output_mask):
    check_same_device("aten::native_batch_norm_backward", grad_out, input, weight)
    c = input.shape[1]
    x, dy = _ncs(input), _ncs(grad_out)
    if train:
        mean = as_array(save_mean).astype(np.float64)
        invstd = as_array(save_invstd).astype(np.float64)
    else:
        mean = as_array(running_mean).astype(np.float64)
        invstd = 1.0 / np.sqrt(as_array(running_var).astype(np.float64) + eps)
    grad_input = empty(input.shape, input.dtype) if output_mask[0] else None
    dx = as_array(grad_input).reshape(x.shape) if output_mask[0] else workspace.buffer("norm.dx", x.shape, x.dtype)
    dw, db = np.empty(c), np.empty(c)
    sized(nk.batch_backward, x.size)(dy, x, mean, invstd, _param(weight, c, 1.0), bool(train), dx, dw, db)
    launch("batch_norm_backward", 8 * input.numel(), nbytes(input) + nbytes(grad_out), nbytes(input))
    grads = [grad_input if output_mask[0] else None]
    for want, arr, shape in ((output_mask[1], dw, (c,)), (output_mask[2], db, (c,))):
        if want:
            t = empty(shape, input.dtype)
            as_array(t)[...] = arr.reshape(shape)
            grads.append(t)
        else:
            grads.append(None)
    return tuple(grads)


def _rows(input: torch.Tensor, normalized_shape) -> tuple[int, int, list[int]]:
    n = len(normalized_shape)
    if tuple(input.shape[input.dim() - n:]) != tuple(normalized_shape):
        raise RuntimeError(
            f"Given normalized_shape={list(normalized_shape)}, expected input with shape [*, "
            f"{', '.join(map(str, normalized_shape))}], but got input of size{list(input.shape)}")
    feats = math.prod(normalized_shape)
    rows = input.numel() // feats if feats else 0
    stat_shape = list(input.shape[:input.dim() - n]) + [1] * n
    return rows, feats, stat_shape


_C = native.load()
_empty, _current_device = _C.empty, _C.current_device
_LN_FAST = (torch.float32, torch.float64)


def _ln_fast_rows(input, normalized_shape, weight, bias, *more: torch.Tensor) -> tuple[int, int] | None:
    """(rows, features) for a transformer's layer norm: a contiguous float ``input`` on the current device,
    normalised over its last dimension, with a weight and a bias (and every tensor in ``more``) contiguous, of its
    dtype, on its device; None for anything else (the kernel's general path then checks and runs the call)."""
    if not isinstance(input, torch.Tensor) or input.dtype not in _LN_FAST or len(normalized_shape) != 1:
        return None
    dtype, dev = input.dtype, input.get_device()
    feats = normalized_shape[0]
    shape = input.shape
    if dev != _current_device() or not input.is_contiguous() or not shape or shape[-1] != feats or not feats:
        return None
    for p in (weight, bias):
        if not (isinstance(p, torch.Tensor) and p.dtype is dtype and p.dim() == 1 and p.shape[0] == feats
                and p.get_device() == dev and p.is_contiguous()):
            return None
    for t in more:
        if not (isinstance(t, torch.Tensor) and t.dtype is dtype and t.get_device() == dev and t.is_contiguous()):
            return None
    rows = input.numel() // feats
    return (rows, feats) if rows else None


def _fast_layer_norm(input, normalized_shape, weight, bias, eps):
    """:func:`native_layer_norm` with less Python, for the calls :func:`_ln_fast_rows` takes; None for others."""
    found = _ln_fast_rows(input, normalized_shape, weight, bias)
    if found is None:
        return None
    rows, feats = found
    dtype, dev = input.dtype, input.get_device()
    shape = list(input.shape)
    out = _empty(shape, dtype, dev)
    m, r = _empty(shape[:-1] + [1], dtype, dev), _empty(shape[:-1] + [1], dtype, dev)
    sized(nk.layer_forward, rows * feats)(
        as_array(input).reshape(rows, feats), as_array(weight).astype(np.float64),
        as_array(bias).astype(np.float64), float(eps), as_array(out).reshape(rows, feats), as_array(m).reshape(rows),
        as_array(r).reshape(rows))
    size = input.element_size()
    n = rows * feats
    launch("layer_norm", 6 * n, size * n + 2 * feats * size, size * (n + 2 * rows))
    return out, m, r


def _fast_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    """:func:`native_layer_norm_backward` with less Python, for the calls :func:`_ln_fast_rows` takes (with
    ``grad_out`` shaped as ``input`` and one statistic per row); None for others."""
    found = _ln_fast_rows(input, normalized_shape, weight, bias, grad_out, mean, rstd)
    if found is None or grad_out.shape != input.shape:
        return None
    rows, feats = found
    if mean.numel() != rows or rstd.numel() != rows:
        return None
    dtype, dev = input.dtype, input.get_device()
    x = as_array(input).reshape(rows, feats)
    dy = as_array(grad_out).reshape(rows, feats)
    m, r = as_array(mean).reshape(rows), as_array(rstd).reshape(rows)
    w = as_array(weight).astype(np.float64)
    n = rows * feats
    results: list[torch.Tensor | None] = [None, None, None]
    if output_mask[0]:
        results[0] = _empty(list(input.shape), dtype, dev)
        sized(nk.layer_backward_input, n)(dy, x, m, r, w, as_array(results[0]).reshape(rows, feats))
    if output_mask[1] or output_mask[2]:
        dw, db = np.empty(feats), np.empty(feats)
        sized(nk.layer_backward_params, n)(dy, x, m, r, dw, db, 8 if n >= PARALLEL_MIN_WORK else 1)
        for i, sums in ((1, dw), (2, db)):
            if output_mask[i]:
                results[i] = _empty([feats], dtype, dev)
                as_array(results[i])[...] = sums
    size = input.element_size()
    launch("layer_norm_backward", 10 * n, 2 * n * size, n * size)
    return tuple(results)


@register("native_layer_norm", fast=_fast_layer_norm)
def native_layer_norm(input, normalized_shape, weight, bias, eps):
    check_same_device("aten::native_layer_norm", input, weight, bias)
    rows, feats, stat_shape = _rows(input, normalized_shape)
    # the kernel reads the input in its own dtype, accumulates in float64 and writes each result once
    x = as_array(input.contiguous()).reshape(rows, feats)
    w = as_array(weight).reshape(-1).astype(np.float64) if weight is not None else np.ones(feats)
    b = as_array(bias).reshape(-1).astype(np.float64) if bias is not None else np.zeros(feats)
    out = empty(input.shape, input.dtype)
    m, r = empty(stat_shape, input.dtype), empty(stat_shape, input.dtype)
    sized(nk.layer_forward, x.size)(x, w, b, float(eps), as_array(out).reshape(rows, feats),
                                    as_array(m).reshape(rows), as_array(r).reshape(rows))
    size = input.element_size()
    params = sum(t.numel() * t.element_size() for t in (weight, bias) if t is not None)
    launch("layer_norm", 6 * rows * feats, size * rows * feats + params, size * (rows * feats + 2 * rows))
    return out, m, r


@register("native_layer_norm_backward", fast=_fast_layer_norm_backward)
def native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    check_same_device("aten::native_layer_norm_backward", grad_out, input, mean, rstd, weight, bias)
    rows, feats, _ = _rows(input, normalized_shape)
    x = as_array(input.contiguous()).reshape(rows, feats)
    dy = as_array(grad_out.contiguous()).reshape(rows, feats)
    m = as_array(mean.contiguous()).reshape(rows)
    r = as_array(rstd.contiguous()).reshape(rows)
    w = as_array(weight).reshape(-1).astype(np.float64) if weight is not None else np.ones(feats)
    results: list[torch.Tensor | None] = [None, None, None]
    if output_mask[0]:
        results[0] = empty(input.shape, input.dtype)
        sized(nk.layer_backward_input, x.size)(dy, x, m, r, w, as_array(results[0]).reshape(rows, feats))
    if output_mask[1] or output_mask[2]:
        dw, db = np.empty(feats), np.empty(feats)
        chunks = 8 if x.size >= PARALLEL_MIN_WORK else 1
        sized(nk.layer_backward_params, x.size)(dy, x, m, r, dw, db, chunks)
        if output_mask[1] and weight is not None:
            results[1] = empty(weight.shape, weight.dtype)
            as_array(results[1])[...] = dw.reshape(weight.shape)
        if output_mask[2] and bias is not None:
            results[2] = empty(bias.shape, bias.dtype)
            as_array(results[2])[...] = db.reshape(bias.shape)
    launch("layer_norm_backward", 10 * input.numel(), nbytes(input) + nbytes(grad_out), nbytes(input))
    return tuple(results)


# --- group norm -------------------------------------------------------------------------------------

def _check_group(input, weight, bias, c: int, group: int) -> None:
    """check_group_norm_inputs (the CPU's messages, its bias message included)."""
    if group <= 0:
        raise RuntimeError(f"Expected num groups to be greater than 0, got {group}")
    if c % group:
        raise RuntimeError("Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(input.shape)} and num_groups={group}")
    if weight is not None and (weight.dim() != 1 or weight.numel() != c):
        raise RuntimeError("Expected weight to be a vector of size equal to the number of channels in input, but got "
                           f"weight of shape {list(weight.shape)} and input of shape {list(input.shape)}")
    if bias is not None and (bias.dim() != 1 or bias.numel() != c):
        shown = list(weight.shape) if weight is not None else [0]
        raise RuntimeError("Expected bias to be a vector of size equal to the number of channels in input, but got "
                           f"bias of shape {shown} and input of shape {list(input.shape)}")


def _groups(t: torch.Tensor, n: int, c: int, hxw: int, group: int) -> np.ndarray:
    """An (N, C, *) tensor as a contiguous (N, G, C/G, HxW) array."""
    return as_array(t.contiguous()).reshape(n, group, c // group, hxw)


@register("native_group_norm")
def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    """Group norm: statistics over each group of C/G channels (and all positions) of each sample."""
    check_same_device("aten::native_group_norm", input, weight, bias)
    n, c, hxw, group = int(N), int(C), int(HxW), int(group)
    _check_group(input, weight, bias, c, group)
    if input.numel() != n * c * hxw:
        raise RuntimeError("Expected X.numel() == N * C * HxW to be true, but got false.  (Could this error message "
                           "be improved?  If so, please report an enhancement request to PyTorch.)")
    if not input.is_floating_point():
        raise NotImplementedError(f"\"GroupNormKernelImpl\" not implemented for '{_type_name(input.dtype)}'")
    for p in (weight, bias):
        if p is not None and p.dtype != input.dtype:
            raise RuntimeError(f"mixed dtype (CPU): expect parameter to have scalar type of {_type_name(input.dtype)}")
    out = empty(input.shape, input.dtype)
    mean, rstd = empty((n, group), input.dtype), empty((n, group), input.dtype)
    if n * group:
        w = as_array(weight).astype(np.float64) if weight is not None else np.ones(c)
        b = as_array(bias).astype(np.float64) if bias is not None else np.zeros(c)
        x = _groups(input, n, c, hxw, group)
        sized(nk.group_forward, input.numel())(x, w, b, float(eps), as_array(out).reshape(x.shape),
                                               as_array(mean), as_array(rstd))
    launch("group_norm", 6 * input.numel(), nbytes(input), nbytes(out))
    return out, mean, rstd


@register("native_group_norm_backward")
def native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask):
    """Gradients of :func:`native_group_norm` for the input, weight and bias (as ``output_mask`` asks)."""
    check_same_device("aten::native_group_norm_backward", grad_out, input, mean, rstd, weight)
    n, c, hxw, group = int(N), int(C), int(HxW), int(group)
    if grad_out.numel() != n * c * hxw:
        raise RuntimeError("Expected dY.numel() == N * C * HxW to be true, but got false.  (Could this error message "
                           "be improved?  If so, please report an enhancement request to PyTorch.)")
    m = as_array(mean.contiguous()).reshape(n, group).astype(np.float64)
    r = as_array(rstd.contiguous()).reshape(n, group).astype(np.float64)
    x = _groups(input, n, c, hxw, group)
    dy = _groups(grad_out, n, c, hxw, group)
    w = as_array(weight).astype(np.float64) if weight is not None else np.ones(c)
    results: list[torch.Tensor | None] = [None, None, None]
    if output_mask[0]:
        dx = empty(input.shape, input.dtype)
        if input.numel():
            sized(nk.group_backward_input, input.numel())(dy, x, m, r, w, as_array(dx).reshape(x.shape))
        results[0] = dx
    if output_mask[1] or output_mask[2]:
        dw, db = np.zeros(c), np.zeros(c)
        if input.numel():
            sized(nk.group_backward_params, input.numel())(dy, x, m, r, dw, db)
        for i, arr in ((1, dw), (2, db)):
            if output_mask[i]:
                t = empty((c,), input.dtype)
                as_array(t)[...] = arr
                results[i] = t
    launch("group_norm_backward", 10 * input.numel(), nbytes(input) + nbytes(grad_out), nbytes(input))
    return tuple(results)


def _type_name(dtype: torch.dtype) -> str:
    return {torch.float32: "Float", torch.float64: "Double", torch.int64: "Long", torch.int32: "Int",
            torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool"}.get(
        dtype, str(dtype).removeprefix("torch."))


# --- batch norm with running-stat update (the ATen op torch.nn.functional.batch_norm uses in training) ----------

@register("_batch_norm_with_update")
def batch_norm_with_update(input, weight, bias, running_mean, running_var, momentum, eps):
    """Training batch norm updating the running statistics in place; a zero-size reserve as on the CPU."""
    out, save_mean, save_invstd = _bn_forward(input, weight, bias, running_mean, running_var, True, momentum, eps)
    return out, save_mean, save_invstd, empty((0,), torch.uint8)


@register("batch_norm_backward")
def batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps,
                        output_mask, reserve):
    """Gradient of the batch norms (``update``: batch statistics were used, given as save_mean/save_var)."""
    return native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var,
                                      update, eps, output_mask)
