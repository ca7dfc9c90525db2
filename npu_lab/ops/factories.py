"""Allocation and filling: empty, empty_strided, fill_, zero_, resize_, item()."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .. import _torch_private as private
from ..device import clock
from ..device.memory import memory
from ..device.tensors import check_dtype, contiguous_strides
from ..kernels import elementwise
from .common import (
    NUMPY_DTYPES,
    as_array,
    empty,
    empty_strided,
    nbytes,
    resize_out,
    run_elementwise,
    to_scalar,
)
from .registry import register


def _device_index(device: torch.device | str | None) -> int:
    if device is None:
        return 0
    d = torch.device(device)
    index = d.index or 0
    if index != 0:
        raise RuntimeError(
            f"Invalid device npu:{index}: the simulated NPU has 1 device (npu:0)"
        )
    return index


def _channels_last_strides(size: Sequence[int]) -> tuple[int, ...]:
    n, c, h, w = size
    return (h * w * c, 1, w * c, c)


@register("empty.memory_format")
def empty_memory_format(size, *, dtype=None, layout=None, device=None, pin_memory=None,
                        memory_format=None) -> torch.Tensor:
    dtype = dtype or torch.get_default_dtype()
    _device_index(device)
    if memory_format == torch.channels_last and len(size) == 4:
        return empty_strided(size, _channels_last_strides(size), dtype)
    return empty(size, dtype)


@register("empty_strided")
def empty_strided_(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None) -> torch.Tensor:
    dtype = dtype or torch.get_default_dtype()
    _device_index(device)
    return empty_strided(size, stride, dtype)


def fill_value(t: torch.Tensor, value: object) -> torch.Tensor:
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
    if value.device.type == "npu":
        value = as_array(value).item()
    return fill_value(self, value)


@register("zero_")
def zero_(self: torch.Tensor) -> torch.Tensor:
    return fill_value(self, 0)


@register("resize_")
def resize_(self: torch.Tensor, size, *, memory_format=None) -> torch.Tensor:
    resize_out(self, size)
    if memory_format == torch.channels_last and len(size) == 4:
        private.meta_redispatch(
            torch.ops.aten.as_strided_.default, self, size, _channels_last_strides(size), 0
        )
    return self


@register("set_.source_Storage_storage_offset")
def set_storage(self, source, storage_offset, size, stride=()) -> torch.Tensor:
    return private.meta_redispatch(
        torch.ops.aten.set_.source_Storage_storage_offset, self, source, storage_offset, size,
        stride or contiguous_strides(size),
    )


@register("set_.source_Tensor")
def set_tensor(self, source: torch.Tensor) -> torch.Tensor:
    return private.meta_redispatch(torch.ops.aten.set_.source_Tensor, self, source)


@register("_local_scalar_dense")
def local_scalar_dense(self: torch.Tensor):
    """``tensor.item()``: a synchronising device-to-host read of one element."""
    value = as_array(self).item()
    tr = memory(0).counters.transfers
    tr.device_to_host_bytes += nbytes(self)
    tr.device_to_host_copies += 1
    clock.copy("memcpy DtoH (item)", nbytes(self))
    return value


__all__ = ["check_dtype", "empty_memory_format", "fill_value"]


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
