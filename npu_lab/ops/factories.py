"""Filling: fill_, zero_, arange and autograd's zero tensors (allocation and resize_ are the native runtime's)."""

from __future__ import annotations

import torch

from ..device.tensors import check_dtype
from ..kernels import elementwise
from .common import (
    NUMPY_DTYPES,
    as_array,
    empty,
    nbytes,
    resize_out,
    run_elementwise,
    to_scalar,
)
from .registry import register


def fill_value(t: torch.Tensor, value: object) -> torch.Tensor:
    check_dtype(t.dtype)
    value = to_scalar(value)
    if t.dtype == torch.bool:
        value = bool(value)
    kernel = elementwise.kernel("fill", 0, "value", ("value",))
    run_elementwise(kernel, [t], [], (NUMPY_DTYPES[t.dtype](value),), flops_per_element=0)
    return t


@register("fill_.Scalar")
def fill_scalar(self: torch.Tensor, value) -> torch.Tensor:
    return fill_value(self, value)


@register("fill_.Tensor")
def fill_tensor(self: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    if value.dim() != 0:
        raise RuntimeError(
            "fill_ only supports 0-dimension value tensor but got tensor with "
            f"{value.dim()} dimensions."
        )
    if value.device != self.device:  # a CPU scalar tensor: a plain fill, as ATen does
        return fill_value(self, value.item())
    # As ATen: a value on the same device is copied in (broadcast from 0-d), so a self-overlapping
    # (expanded) tensor is refused as on every other device; a value that is an element of self is
    # cloned first, or the copy would overwrite it before reading it.
    return self.copy_(value.clone() if torch._C._is_alias_of(self, value) else value)


@register("zero_")
def zero_(self: torch.Tensor) -> torch.Tensor:
    return fill_value(self, 0)


__all__ = ["fill_value"]


@register("arange.start_out")
def arange_out(start, end, step=1, *, out):
    start, end, step = to_scalar(start), to_scalar(end), to_scalar(step)
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (end - start) / step < 0:
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    import math

    n = max(0, math.ceil((end - start) / step))
    resize_out(out, (n,))
    run_arange(out, start, step)
    return out


def run_arange(out: torch.Tensor, start, step) -> None:
    from ..kernels.fill import arange as arange_kernel

    a = as_array(out)
    if out.is_contiguous():
        arange_kernel(a.reshape(-1), start, step)
    else:
        tmp = empty(out.shape, out.dtype)
        arange_kernel(as_array(tmp).reshape(-1), start, step)
        a[...] = as_array(tmp)
    from .common import launch

    launch("arange", out.numel(), 0, nbytes(out))


@register("_efficientzerotensor")
def efficientzerotensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """Autograd's "known zero" gradient: the NPU materialises real zeros."""
    return fill_value(empty(size, dtype or torch.get_default_dtype()), 0)
