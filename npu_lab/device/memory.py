"""Simulated device memory: a caching allocator with a fixed capacity.

Each simulated device owns a :class:`DeviceMemory`. It hands out blocks of
bytes (NumPy ``uint8`` arrays that *are* the device memory), keeps freed blocks
in a cache for reuse the way PyTorch's CUDA caching allocator does, and raises
``torch.OutOfMemoryError`` when a request cannot fit in the capacity.

Two numbers matter, as on CUDA:

* **allocated** bytes: blocks that live tensors are using right now;
* **reserved** bytes: allocated plus cached blocks the allocator holds on to.

``reserved`` can never exceed the capacity. ``torch.npu.empty_cache()`` gives
the cached blocks back.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import torch

#: Blocks are rounded up to this many bytes, like CUDA's allocator.
BLOCK_ROUND = 512
#: Default capacity of a simulated device (overridable with NPU_LAB_MEMORY_GB).
DEFAULT_CAPACITY = 4 * 1024**3


def _format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.2f} {unit}" if unit != "B" else f"{int(n)} bytes"
        n /= 1024
    return f"{n:.2f} GiB"


def round_size(nbytes: int) -> int:
    """The size of the block the allocator uses for a request of ``nbytes``."""
    if nbytes <= 0:
        return 0
    return (nbytes + BLOCK_ROUND - 1) // BLOCK_ROUND * BLOCK_ROUND


@dataclass
class TransferStats:
    """Bytes and copies that crossed between host and device (or within it)."""

    host_to_device_bytes: int = 0
    host_to_device_copies: int = 0
    device_to_host_bytes: int = 0
    device_to_host_copies: int = 0
    device_to_device_bytes: int = 0
    device_to_device_copies: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class MemoryCounters:
    allocated: int = 0
    peak_allocated: int = 0
    reserved: int = 0
    peak_reserved: int = 0
    live_blocks: int = 0
    peak_live_blocks: int = 0
    num_allocs: int = 0
    num_frees: int = 0
    cache_hits: int = 0
    num_ooms: int = 0
    num_alloc_retries: int = 0
    transfers: TransferStats = field(default_factory=TransferStats)


class DeviceMemory:
    """The memory of one simulated device.

    Args:
        index: the device index this memory belongs to.
        capacity: total bytes the device has.
    """

    def __init__(self, index: int, capacity: int = DEFAULT_CAPACITY) -> None:
        self.index = index
        self.capacity = int(capacity)
        self.counters = MemoryCounters()
        self._cache: dict[int, list[np.ndarray]] = defaultdict(list)
        self._cached_bytes = 0
        self._listeners: list = []

    # -- allocation -------------------------------------------------------------
    def malloc(self, nbytes: int) -> np.ndarray:
        """A block of at least ``nbytes`` bytes; raises ``torch.OutOfMemoryError``."""
        size = round_size(nbytes)
        c = self.counters
        if size == 0:
            return np.empty(0, dtype=np.uint8)
        pool = self._cache.get(size)
        block = None
        if pool:
            # A freed block is reusable only once no NumPy view of it is left: a kernel
            # may still be reading a temporary whose tensor already died. The pool's
            # list slot and getrefcount's own argument are the only references then.
            for i in range(len(pool) - 1, -1, -1):
                if sys.getrefcount(pool[i]) <= 2:
                    block = pool.pop(i)
                    self._cached_bytes -= size
                    c.cache_hits += 1
                    break
        if block is None:
            if c.reserved + size > self.capacity:
                # Like CUDA: give the cache back and try once more before failing.
                c.num_alloc_retries += 1
                self.empty_cache()
                if c.reserved + size > self.capacity:
                    c.num_ooms += 1
                    self._raise_oom(nbytes)
            block = np.empty(size, dtype=np.uint8)
            c.reserved += size
            c.peak_reserved = max(c.peak_reserved, c.reserved)
        c.allocated += size
        c.peak_allocated = max(c.peak_allocated, c.allocated)
        c.live_blocks += 1
        c.peak_live_blocks = max(c.peak_live_blocks, c.live_blocks)
        c.num_allocs += 1
        for fn in self._listeners:
            fn("alloc", self.index, size)
        return block

    def free(self, block: np.ndarray) -> None:
        """Return a block to the cache (called when its storage dies)."""
        size = block.nbytes
        if size == 0:
            return
        c = self.counters
        c.allocated -= size
        c.live_blocks -= 1
        c.num_frees += 1
        self._cache[size].append(block)
        self._cached_bytes += size
        for fn in self._listeners:
            fn("free", self.index, size)

    def empty_cache(self) -> None:
        """Release every cached (unused) block."""
        self.counters.reserved -= self._cached_bytes
        self._cached_bytes = 0
        self._cache.clear()

    def _raise_oom(self, nbytes: int) -> None:
        c = self.counters
        free = self.capacity - c.reserved
        raise torch.OutOfMemoryError(
            f"NPU out of memory. Tried to allocate {_format_bytes(nbytes)}. "
            f"NPU {self.index} has a total capacity of {_format_bytes(self.capacity)} "
            f"of which {_format_bytes(free)} is free. "
            f"Of the allocated memory {_format_bytes(c.allocated)} is allocated by "
            f"tensors and {_format_bytes(c.reserved - c.allocated)} is reserved but "
            "unallocated. Free tensors you no longer need (del, then "
            "torch.npu.empty_cache()) or raise the capacity with "
            "npu_lab.set_memory_capacity()."
        )

    # -- statistics -------------------------------------------------------------
    @property
    def free_bytes(self) -> int:
        return self.capacity - self.counters.reserved

    def reset_peak(self) -> None:
        c = self.counters
        c.peak_allocated = c.allocated
        c.peak_reserved = c.reserved
        c.peak_live_blocks = c.live_blocks

    def stats(self) -> dict[str, int]:
        """Counters named like ``torch.cuda.memory_stats()``."""
        c = self.counters
        out = {
            "allocated_bytes.all.current": c.allocated,
            "allocated_bytes.all.peak": c.peak_allocated,
            "reserved_bytes.all.current": c.reserved,
            "reserved_bytes.all.peak": c.peak_reserved,
            "active.all.current": c.live_blocks,
            "active.all.peak": c.peak_live_blocks,
            "allocation.all.allocated": c.num_allocs,
            "allocation.all.freed": c.num_frees,
            "inactive_split_bytes.all.current": self._cached_bytes,
            "num_alloc_retries": c.num_alloc_retries,
            "num_ooms": c.num_ooms,
            "num_cache_hits": c.cache_hits,
            "capacity_bytes": self.capacity,
        }
        for k, v in c.transfers.as_dict().items():
            out[f"transfer.{k}"] = v
        return out


_memories: dict[int, DeviceMemory] = {}


def _default_capacity() -> int:
    gb = os.environ.get("NPU_LAB_MEMORY_GB")
    return int(float(gb) * 1024**3) if gb else DEFAULT_CAPACITY


def memory(index: int = 0) -> DeviceMemory:
    """The :class:`DeviceMemory` of device ``index``."""
    mem = _memories.get(index)
    if mem is None:
        mem = _memories[index] = DeviceMemory(index, _default_capacity())
    return mem


def set_capacity(nbytes: int, index: int = 0) -> None:
    """Change the capacity of device ``index`` (must hold what is reserved now)."""
    mem = memory(index)
    mem.empty_cache()
    if nbytes < mem.counters.reserved:
        raise ValueError(
            f"cannot shrink npu:{index} to {_format_bytes(nbytes)}: "
            f"{_format_bytes(mem.counters.reserved)} is in use"
        )
    mem.capacity = int(nbytes)
