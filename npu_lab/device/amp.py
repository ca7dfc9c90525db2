"""The two kernels ``torch.amp.GradScaler("npu")`` needs, as NPU kernels.

Mixed-precision training scales the loss up before ``backward()`` so that small
float16 gradients do not underflow to zero, then divides the gradients by the
same factor before the optimizer step. ``GradScaler`` does the bookkeeping in
Python but leaves the arithmetic to two device operators, so that the host never
waits for the device inside a step:

* ``aten::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)``
  multiplies every gradient by ``inv_scale`` and sets ``found_inf`` to 1.0 if any
  element of any gradient is inf or NaN (then ``GradScaler.step`` skips the step);
* ``aten::_amp_update_scale_(scale, growth_tracker, found_inf, growth, backoff, interval)``
  shrinks the scale after an overflow, or grows it after ``interval`` good steps.

CUDA implements both as kernels (the first with one launch over many tensors,
``multi_tensor_apply``); so does the NPU here, with numba. They are registered
through :func:`npu_lab.ops.registry.register` like every other NPU kernel.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from ..ops.common import as_array, launch, nbytes
from ..ops.registry import register

__all__ = ["non_finite_check_and_unscale_", "update_scale_"]


@numba.njit(cache=True, nogil=True)
def _check_and_unscale(a: np.ndarray, inv: float) -> bool:
    """Multiply ``a`` by ``inv`` in place; True if any element was inf or NaN."""
    bad = False
    flat = a.reshape(-1)
    for i in range(flat.size):
        v = flat[i]
        if not np.isfinite(v):
            bad = True
        flat[i] = v * inv
    return bad


def _check_scalar(t: torch.Tensor, name: str, dtype: torch.dtype) -> None:
    if t.numel() != 1:
        raise RuntimeError(f"{name} must be a 1-element tensor.")
    if t.dtype != dtype:
        raise RuntimeError(f"{name} must be a {str(dtype).removeprefix('torch.')} tensor.")
    if t.device.type != "npu":
        raise RuntimeError(f"{name} must be an npu tensor, got one on {t.device}.")


@register("aten::_amp_foreach_non_finite_check_and_unscale_")
def non_finite_check_and_unscale_(grads: list[torch.Tensor], found_inf: torch.Tensor,
                                  inv_scale: torch.Tensor) -> None:
    """Unscale ``grads`` in place by ``inv_scale``; set ``found_inf`` to 1.0 if any is inf or NaN.

    One simulated launch for all gradients (like CUDA's multi-tensor apply).
    """
    _check_scalar(inv_scale, "inv_scale", torch.float32)
    _check_scalar(found_inf, "found_inf", torch.float32)
    if not grads:
        return
    inv = float(as_array(inv_scale).reshape(-1)[0])
    bad = False
    moved = 0
    for g in grads:
        if g.device != found_inf.device:
            raise RuntimeError(f"found_inf is on {found_inf.device} but a gradient is on {g.device}; "
                               "unscale gradients per device")
        if not g.is_floating_point():
            raise RuntimeError(f"gradients must be floating point tensors, got {g.dtype}")
        if g.numel() == 0:
            continue
        if g.is_contiguous():
            bad |= bool(_check_and_unscale(as_array(g), inv))
        else:  # a strided gradient: unscale a packed copy, write it back
            packed = as_array(g).copy()
            bad |= bool(_check_and_unscale(packed, inv))
            as_array(g)[...] = packed
        moved += nbytes(g)
    if bad:
        as_array(found_inf).reshape(-1)[0] = 1.0
    launch("amp_non_finite_check_and_unscale", sum(g.numel() for g in grads), moved, moved)


@register("aten::_amp_update_scale_")
def update_scale_(scale: torch.Tensor, growth_tracker: torch.Tensor, found_inf: torch.Tensor,
                  scale_growth_factor: float, scale_backoff_factor: float,
                  growth_interval: int) -> torch.Tensor:
    """Update the loss scale in place, on the device (CUDA's ``amp_update_scale_cuda_kernel``).

    After an overflow (``found_inf`` nonzero) the scale is multiplied by ``scale_backoff_factor``
    and the count of good steps restarts; after ``growth_interval`` good steps in a row it is
    multiplied by ``scale_growth_factor`` (if the result is finite).
    """
    _check_scalar(scale, "current_scale", torch.float32)
    _check_scalar(growth_tracker, "growth_tracker", torch.int32)
    _check_scalar(found_inf, "found_inf", torch.float32)
    s, tracker = as_array(scale).reshape(-1), as_array(growth_tracker).reshape(-1)
    if float(as_array(found_inf).reshape(-1)[0]):
        s[0] = np.float32(s[0] * scale_backoff_factor)
        tracker[0] = 0
    else:
        successful = int(tracker[0]) + 1
        if successful == growth_interval:
            grown = np.float32(float(s[0]) * scale_growth_factor)
            if np.isfinite(grown):
                s[0] = grown
            tracker[0] = 0
        else:
            tracker[0] = successful
    launch("amp_update_scale", 2, 12, 8)
    return scale
