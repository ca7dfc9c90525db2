"""Copies: host->device, device->host and device->device (with dtype casts).

Host<->device copies are the only way data crosses between the CPU and the
simulated NPU. Each one is counted (bytes and direction) in the device's
memory statistics and costed on the simulated clock at link bandwidth.
"""

from __future__ import annotations

import numpy as np
import torch

from ..device import clock
from ..device.memory import memory
from ..kernels import elementwise
from .common import NUMPY_DTYPES, as_array, nbytes, resize_out, run_elementwise
from .registry import register


def _host_array(t: torch.Tensor) -> np.ndarray:
    if t.dtype not in NUMPY_DTYPES:
        raise TypeError(f"npu cannot exchange {t.dtype} tensors with the host")
    return t.detach().resolve_conj().resolve_neg().numpy()


def cast_kernel(dst_dtype: torch.dtype) -> elementwise.ElementwiseKernel:
    expr = "x0 != 0" if dst_dtype == torch.bool else "x0"
    return elementwise.kernel(f"copy_to_{str(dst_dtype).split('.')[-1]}", 1, expr)


def device_copy(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """Copy (and cast, and broadcast) one npu tensor into another."""
    run_elementwise(cast_kernel(dst.dtype), [dst], [src], flops_per_element=0)
    tr = memory(0).counters.transfers
    tr.device_to_device_bytes += nbytes(dst)
    tr.device_to_device_copies += 1
    return dst


def host_to_device(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    if src.dtype not in NUMPY_DTYPES:
        src = src.to(torch.float32)
    as_array(dst)[...] = _host_array(src)
    n = nbytes(src)
    tr = memory(0).counters.transfers
    tr.host_to_device_bytes += n
    tr.host_to_device_copies += 1
    clock.copy("memcpy HtoD", n)
    return dst


def device_to_host(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    data = as_array(src)
    if dst.dtype in NUMPY_DTYPES and not dst.requires_grad:
        dst.numpy()[...] = data
    else:
        with torch.no_grad():
            dst.copy_(torch.from_numpy(np.array(data)))
    n = nbytes(src)
    tr = memory(0).counters.transfers
    tr.device_to_host_bytes += n
    tr.device_to_host_copies += 1
    clock.copy("memcpy DtoH", n)
    return dst


def copy_any(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    if dst.numel() == 0:
        return dst
    if dst.device.type == "npu":
        if src.device.type == "npu":
            return device_copy(dst, src)
        return host_to_device(dst, src)
    if src.device.type == "npu":
        return device_to_host(dst, src)
    raise RuntimeError(f"npu copy called with {src.device} -> {dst.device}")


@register("copy_")
def copy_(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    torch.broadcast_shapes(src.shape, self.shape)
    if tuple(torch.broadcast_shapes(src.shape, self.shape)) != tuple(self.shape):
        raise RuntimeError(
            f"output with shape {list(self.shape)} doesn't match the broadcast shape "
            f"{list(torch.broadcast_shapes(src.shape, self.shape))}"
        )
    return copy_any(self, src)


@register("_copy_from")
def _copy_from(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    return copy_any(dst, self)


@register("_copy_from_and_resize")
def _copy_from_and_resize(self: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    if dst.device.type == "npu":
        resize_out(dst, self.shape)
    else:
        dst.resize_(self.shape)
    return copy_any(dst, self)
