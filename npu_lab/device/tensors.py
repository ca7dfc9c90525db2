"""Device tensors: where an ``npu`` tensor's bytes live and how kernels see them.

An ``npu`` tensor is an ordinary ``torch.Tensor`` whose dispatch key is
PrivateUse1. Its sizes, strides and storage offset are real PyTorch metadata;
its storage object carries one attribute, ``_npu_block``: a block of the
simulated device memory (a NumPy ``uint8`` array). Views share the storage
object, and therefore the block, exactly as they share memory on a real chip.

When the last tensor using a storage dies, PyTorch drops the storage object and
a finalizer gives the block back to the device's allocator.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .. import _torch_private as private
from .memory import memory

#: PyTorch dtypes the simulated NPU stores, with their NumPy equivalents.
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
}

_BLOCK_ATTR = "_npu_mem"


class DeviceBlock:
    """Ownership of one allocator block; returns it to the allocator when dropped."""

    __slots__ = ("array", "mem")

    def __init__(self, array: np.ndarray, mem) -> None:
        self.array = array
        self.mem = mem

    def __del__(self) -> None:
        mem = self.mem
        if mem is not None:
            self.mem = None
            mem.free(self.array)


def check_dtype(dtype: torch.dtype) -> None:
    if dtype not in NUMPY_DTYPES:
        raise TypeError(
            f"npu does not support dtype {dtype}; supported: "
            + ", ".join(str(d).replace("torch.", "") for d in NUMPY_DTYPES)
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


def attach_block(storage: torch.UntypedStorage, nbytes: int, index: int = 0) -> np.ndarray:
    """Give ``storage`` a fresh device block of ``nbytes`` from device ``index``.

    If the storage already had a block (``resize_``), the old bytes are copied
    over and the old block goes back to the allocator.
    """
    mem = memory(index)
    array = mem.malloc(nbytes)
    old = getattr(storage, _BLOCK_ATTR, None)
    if old is not None and old.array.nbytes:
        n = min(old.array.nbytes, array.nbytes)
        array[:n] = old.array[:n]
    setattr(storage, _BLOCK_ATTR, DeviceBlock(array, mem))
    return array


def empty_strided(
    size: Sequence[int], stride: Sequence[int] | None, dtype: torch.dtype, index: int = 0
) -> torch.Tensor:
    """Allocate an ``npu`` tensor with the given geometry (uninitialised bytes)."""
    check_dtype(dtype)
    size = tuple(int(s) for s in size)
    if stride is None or tuple(int(s) for s in stride) == contiguous_strides(size):
        return empty(size, dtype, index)
    stride = tuple(int(s) for s in stride)
    itemsize = torch.empty((), dtype=dtype).element_size() if dtype not in _ITEMSIZE else _ITEMSIZE[dtype]
    numel = storage_bytes(size, stride, itemsize) // itemsize
    base = private.create_empty_tensor((numel,), dtype)
    t = private.meta_redispatch(torch.ops.aten.as_strided.default, base, size, stride, 0)
    attach_block(t.untyped_storage(), numel * itemsize, index)
    return t


_ITEMSIZE = {dt: np.dtype(npt).itemsize for dt, npt in NUMPY_DTYPES.items()}


def empty(size: Sequence[int], dtype: torch.dtype, index: int = 0) -> torch.Tensor:
    """A contiguous ``npu`` tensor (uninitialised)."""
    check_dtype(dtype)
    t = private.create_empty_tensor(tuple(int(s) for s in size), dtype)
    attach_block(t.untyped_storage(), t.numel() * t.element_size(), index)
    return t


def has_block(t: torch.Tensor) -> bool:
    return hasattr(t.untyped_storage(), _BLOCK_ATTR)


def block_of(t: torch.Tensor) -> np.ndarray:
    """The device block behind ``t`` (shared by all its views)."""
    try:
        return getattr(t.untyped_storage(), _BLOCK_ATTR).array
    except AttributeError:
        raise RuntimeError(
            f"tensor on {t.device} has no simulated device memory attached"
        ) from None


def as_array(t: torch.Tensor) -> np.ndarray:
    """A NumPy array that aliases ``t``'s device bytes with ``t``'s strides.

    Kernels read and write device memory through these arrays; no copy is made.
    """
    block = getattr(t.untyped_storage(), _BLOCK_ATTR).array
    itemsize = t.element_size()
    return np.ndarray(
        tuple(t.shape),
        NUMPY_DTYPES[t.dtype],
        buffer=block,
        offset=t.storage_offset() * itemsize,
        strides=tuple(s * itemsize for s in t.stride()),
    )


def flat_array(t: torch.Tensor) -> np.ndarray:
    """The whole storage of ``t`` as a 1-D array of ``t``'s dtype (for strided kernels)."""
    block = getattr(t.untyped_storage(), _BLOCK_ATTR).array
    itemsize = t.element_size()
    n = block.nbytes // itemsize
    return np.ndarray((n,), NUMPY_DTYPES[t.dtype], buffer=block)


def from_numpy(arr: np.ndarray, dtype: torch.dtype | None = None, index: int = 0) -> torch.Tensor:
    """Copy a host NumPy array into a new contiguous ``npu`` tensor (counted as H2D)."""
    from .memory import memory as _memory

    src = np.ascontiguousarray(arr)
    if dtype is None:
        dtype = torch.from_numpy(src[:0].copy()).dtype if src.size else torch.from_numpy(src).dtype
    out = empty(src.shape, dtype, index)
    as_array(out)[...] = src
    tr = _memory(index).counters.transfers
    tr.host_to_device_bytes += out.numel() * out.element_size()
    tr.host_to_device_copies += 1
    return out
