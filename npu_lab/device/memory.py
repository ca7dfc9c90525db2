"""Device memory as Python sees it: the native caching allocator's counters and controls.

Each device's memory is managed in C++ (``csrc/runtime/NpuAllocator.cpp``) by a
caching allocator over the simulated driver's ``npuMalloc``/``npuFree``
(``csrc/driver/memory.cpp``), the way PyTorch's CUDA caching allocator sits on
``cudaMalloc``. Freed blocks are kept in a cache per rounded size and handed out
again; when the driver reports the device full, the cache is given back and the
request retried once before ``torch.OutOfMemoryError``.

Two numbers matter, as on CUDA:

* **allocated** bytes: blocks that live tensors are using right now;
* **reserved** bytes: allocated plus cached blocks the allocator holds on to.

``reserved`` can never exceed the capacity. ``torch.npu.empty_cache()`` gives
the cached blocks back.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import native

_C = native.load()

#: Blocks are rounded up to this many bytes, like CUDA's allocator (kBlockRound in the runtime).
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
    """Bytes and copies that crossed between host and device, within a device, or between devices."""

    host_to_device_bytes: int = 0
    host_to_device_copies: int = 0
    device_to_host_bytes: int = 0
    device_to_host_copies: int = 0
    device_to_device_bytes: int = 0
    device_to_device_copies: int = 0
    peer_bytes: int = 0
    peer_copies: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class MemoryCounters:
    """A snapshot of one device's allocator counters."""

    allocated: int
    peak_allocated: int
    reserved: int
    peak_reserved: int
    cached: int
    live_blocks: int
    peak_live_blocks: int
    num_allocs: int
    num_frees: int
    cache_hits: int
    num_ooms: int
    num_alloc_retries: int
    capacity: int
    transfers: TransferStats


class DeviceMemory:
    """The memory of one device, as the native allocator reports it."""

    def __init__(self, index: int) -> None:
        self.index = index

    @property
    def counters(self) -> MemoryCounters:
        """The allocator's counters now (a snapshot)."""
        transfers = TransferStats(**_C.transfer_stats(self.index))
        return MemoryCounters(**_C.memory_counters(self.index), transfers=transfers)

    @property
    def capacity(self) -> int:
        return _C.mem_get_info(self.index)[1]

    @property
    def free_bytes(self) -> int:
        return _C.mem_get_info(self.index)[0]

    def empty_cache(self) -> None:
        """Give every cached (unused) block back to the driver."""
        _C.empty_cache(self.index)

    def reset_peak(self) -> None:
        _C.reset_peak(self.index)

    def stats(self) -> dict[str, int]:
        """Counters named like ``torch.cuda.memory_stats()``."""
        c = _C.memory_counters(self.index)
        out = {
            "allocated_bytes.all.current": c["allocated"],
            "allocated_bytes.all.peak": c["peak_allocated"],
            "reserved_bytes.all.current": c["reserved"],
            "reserved_bytes.all.peak": c["peak_reserved"],
            "active.all.current": c["live_blocks"],
            "active.all.peak": c["peak_live_blocks"],
            "allocation.all.allocated": c["num_allocs"],
            "allocation.all.freed": c["num_frees"],
            "inactive_split_bytes.all.current": c["cached"],
            "num_alloc_retries": c["num_alloc_retries"],
            "num_ooms": c["num_ooms"],
            "num_cache_hits": c["cache_hits"],
            "capacity_bytes": c["capacity"],
        }
        for k, v in _C.transfer_stats(self.index).items():
            out[f"transfer.{k}"] = v
        return out


def memory(index: int = 0) -> DeviceMemory:
    """The :class:`DeviceMemory` of device ``index``."""
    if not 0 <= index < _C.device_count():
        raise RuntimeError(f"Invalid device npu:{index}: the simulated NPU has {_C.device_count()} devices")
    return DeviceMemory(index)


def set_capacity(nbytes: int, index: int = 0) -> None:
    """Change the capacity of device ``index`` (it must hold what is reserved after emptying the cache)."""
    memory(index)
    _C.set_capacity(index, int(nbytes))
