"""Device tensors: where an ``npu`` tensor's bytes live and how kernels see them.

An ``npu`` tensor is an ordinary ``torch.Tensor`` whose dispatch key is
PrivateUse1 and whose storage holds real bytes from the NPU's caching
allocator (``csrc/runtime/NpuAllocator.cpp``): ``t.data_ptr()`` is a real
address, ``t.untyped_storage().nbytes()`` its true size, and views are offsets
into the same storage, exactly as on a real chip.

Kernels work on that memory in place through NumPy arrays made by the runtime
(:func:`as_array`, :func:`flat_array`): each points at the tensor's bytes and
keeps its storage alive for as long as the array exists, so a kernel can never
touch memory that was freed under it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from . import native

_C = native.load()

#: PyTorch dtypes the NPU's kernels compute on, with their NumPy equivalents.
NUMPY_DTYPES: dict[torch.dtype, type] = {
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.float16: np.float16,
    torch.int64: np.int64,
    torch.int32: np.int32,
    torch.int16: np.int16,
    torch.int8: np.int8,
    torch.uint8: np.uint8,
    torch.bool: np.bool_,
    torch.complex64: np.complex64,
    torch.complex128: np.complex128,
    torch.uint16: np.uint16,
    torch.uint32: np.uint32,
    torch.uint64: np.uint64,
}

#: ``as_array(t)``: a NumPy array aliasing ``t``'s device bytes with ``t``'s shape and strides (no copy).
as_array = _C.as_array
#: ``flat_array(t)``: the whole storage of ``t`` as a 1-D array of ``t``'s dtype (for strided kernels).
flat_array = _C.flat_array
#: ``block_of(t)``: the bytes of ``t``'s storage as a ``uint8`` array.
block_of = _C.block


def check_dtype(dtype: torch.dtype) -> None:
    if dtype not in NUMPY_DTYPES:
        raise TypeError(
            f"npu kernels cannot work on {str(dtype).replace('torch.', '')} tensors; they compute in "
            + ", ".join(str(d).replace("torch.", "") for d in NUMPY_DTYPES)
            + " (float16 and bfloat16 in float32)"
        )


def contiguous_strides(size: Sequence[int]) -> tuple[int, ...]:
    strides = []
    acc = 1
    for s in reversed(size):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))


def storage_bytes(size: Sequence[int], stride: Sequence[int], itemsize: int, offset: int = 0) -> int:
    """Bytes a storage needs to back a tensor with this geometry."""
    if any(int(s) == 0 for s in size):
        return 0
    last = offset + sum((int(s) - 1) * int(st) for s, st in zip(size, stride))
    return (last + 1) * itemsize


def empty(size: Sequence[int], dtype: torch.dtype, index: int = -1) -> torch.Tensor:
    """A contiguous ``npu`` tensor (uninitialised) on device ``index`` (default: the current device)."""
    return _C.empty(size, dtype, index)


def empty_strided(
    size: Sequence[int], stride: Sequence[int] | None, dtype: torch.dtype, index: int = -1
) -> torch.Tensor:
    """An ``npu`` tensor with the given geometry (uninitialised bytes)."""
    if stride is None:
        return _C.empty(size, dtype, index)
    return _C.empty_strided(size, stride, dtype, index)


def has_block(t: torch.Tensor) -> bool:
    """Does ``t`` have device memory behind it (a real npu tensor, not a fake or meta one)?"""
    return t.device.type == "npu" and t.untyped_storage().data_ptr() != 0 or t.numel() == 0


def from_numpy(arr: np.ndarray, dtype: torch.dtype | None = None, index: int = -1) -> torch.Tensor:
    """Copy a host NumPy array into a new contiguous ``npu`` tensor (a counted host-to-device copy)."""
    src = torch.from_numpy(np.ascontiguousarray(arr))
    if dtype is not None:
        src = src.to(dtype)
    out = empty(src.shape, src.dtype, index)
    out.copy_(src)
    return out
