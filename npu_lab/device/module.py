"""``torch.npu``: the device module of the simulated NPU.

After ``import npu_lab`` this module *is* ``torch.npu``. Its names and
semantics follow ``torch.cuda``: devices, streams and events, random seeds,
and memory statistics. Each function is a thin layer over the native runtime
(``npu_lab._C``); PyTorch's own device-generic APIs (``torch.accelerator``,
``torch.Stream``, ``torch.Event``, ``torch.Generator``) reach the same runtime
through its C++ hooks and device guard.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from . import memory as _memory
from . import native
from . import rng as _rng
from . import streams as _streams
from .graphs import NPUGraph, graph, is_current_stream_capturing  # noqa: F401
from .streams import Event, Stream, current_stream, default_stream, set_stream, stream  # noqa: F401

_C = native.load()

__all__ = [
    "Event", "NPUGraph", "Stream", "current_device", "current_stream", "default_generators", "default_stream", "device",
    "graph", "is_current_stream_capturing",
    "device_count", "empty_cache", "get_amp_supported_dtype", "get_device_capability", "get_device_name",
    "get_device_properties", "get_offset", "get_rng_state", "get_rng_state_all", "init", "initial_seed", "is_available",
    "is_bf16_supported", "is_initialized", "manual_seed", "manual_seed_all", "max_memory_allocated",
    "max_memory_reserved", "mem_get_info", "memory_allocated", "memory_reserved", "memory_stats",
    "memory_summary", "reset_peak_memory_stats", "seed", "seed_all", "set_device", "set_offset", "set_rng_state",
    "set_rng_state_all", "set_stream", "stream", "synchronize",
]


def _index(device: Any = None) -> int:
    if device is None:
        return _C.current_device()
    if isinstance(device, int):
        idx = device
    elif isinstance(device, str) and device.isdigit():
        idx = int(device)
    else:
        d = torch.device(device)
        if d.type != "npu":
            raise ValueError(f"Expected an npu device, but got: {d}")
        idx = _C.current_device() if d.index is None else d.index
    count = _C.device_count()
    if not 0 <= idx < count:
        raise RuntimeError(
            f"The device index is out of range. It must be in [0, {count}), but got {idx} "
            f"(the simulated NPU has {count} devices: NPU_LAB_DEVICES sets how many)"
        )
    return idx


# -- devices and initialisation ----------------------------------------------------------
def is_available() -> bool:
    """True: the NPU is simulated on the host."""
    return _C.device_count() > 0


_queued_calls: list[tuple[Any, list[str]]] = []


def init() -> None:
    """Initialise the NPU runtime (as ``torch.cuda.init``). After a ``fork()``, a child cannot."""
    _lazy_init()


def is_initialized() -> bool:
    """Has the runtime been initialised in this process (and not inherited through a fork)?"""
    return _C.is_initialized()


def _is_in_bad_fork() -> bool:
    return _C.is_in_bad_fork()


def _lazy_init() -> None:
    """Called by PyTorch before the first npu tensor is made (and by :func:`init`)."""
    if _C.is_initialized():
        return
    _C.init()
    while _queued_calls:
        call, _where = _queued_calls.pop(0)
        call()


def _lazy_call(callable: Any, **kwargs: Any) -> None:
    if is_initialized():
        callable()
    else:
        _queued_calls.append((callable, traceback.format_stack()))


def device_count() -> int:
    """Number of simulated NPU devices (``NPU_LAB_DEVICES``, default 2)."""
    return _C.device_count()


def current_device() -> int:
    """Index of the current device of this thread."""
    return _C.current_device()


def set_device(device: Any) -> None:
    """Make ``device`` the current device of this thread."""
    _C.set_device(_index(device))


class device:
    """Context manager that changes the current device (``with torch.npu.device(1): ...``).

    A negative index or ``None`` leaves the device unchanged, as ``torch.cuda.device``.
    """

    def __init__(self, device: Any) -> None:
        self.idx = -1 if device is None or (isinstance(device, int) and device < 0) else _index(device)
        self.prev_idx = -1

    def __enter__(self) -> None:
        self.prev_idx = _C.exchange_device(self.idx)

    def __exit__(self, *exc: object) -> bool:
        _C.set_device(self.prev_idx)
        return False


@dataclass
class NpuDeviceProperties:
    """What ``torch.npu.get_device_properties`` returns: capacity and the roofline of the simulated chip."""

    name: str
    total_memory: int
    peak_gflops: float
    bandwidth_gbs: float
    launch_us: float
    link_gbs: float
    peer_gbs: float
    major: int = 1
    minor: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:  # the lab's older dict-style access keeps working
        return getattr(self, key)


def get_device_name(device: Any = None) -> str:
    _index(device)
    return "npu-lab simulated NPU"


def get_device_properties(device: Any = None) -> NpuDeviceProperties:
    """Capacity and the cost model's roofline numbers of a device."""
    idx = _index(device)
    cm = _C.get_cost_model()
    return NpuDeviceProperties(
        name=get_device_name(idx), total_memory=_C.mem_get_info(idx)[1], peak_gflops=cm["peak_gflops"],
        bandwidth_gbs=cm["bandwidth_gbs"], launch_us=cm["launch_us"], link_gbs=cm["link_gbs"],
        peer_gbs=cm["peer_gbs"],
    )


def get_device_capability(device: Any = None) -> tuple[int, int]:
    """(major, minor) version of the simulated chip."""
    p = get_device_properties(device)
    return p.major, p.minor


def synchronize(device: Any = None) -> None:
    """Wait for all kernels on ``device``: every stream's clock joins the latest."""
    _streams.synchronize(_index(device))


# -- random numbers ----------------------------------------------------------------
class _DefaultGenerators:
    """``torch.npu.default_generators[i]``: the default ``torch.Generator`` of device ``i``."""

    def __getitem__(self, i: int) -> torch.Generator:
        return _rng.default_generator(_index(i))

    def __len__(self) -> int:
        return _C.device_count()

    def __iter__(self) -> Iterator[torch.Generator]:
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()


def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    _rng.default_generator(current_device()).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every device's generator (``torch.manual_seed`` calls this too)."""
    for g in default_generators:
        g.manual_seed(int(seed))


def seed() -> None:
    """Seed the current device with a random number."""
    _rng.default_generator(current_device()).seed()


def seed_all() -> None:
    for g in default_generators:
        g.seed()


def get_offset(device: Any = None) -> int:
    """How many Philox blocks the device's default generator has handed out since it was seeded."""
    return _rng.default_generator(_index(device)).get_offset()


def set_offset(offset: int, device: Any = None) -> None:
    """Move the device's default generator to Philox block ``offset`` (its seed unchanged)."""
    _rng.default_generator(_index(device)).set_offset(int(offset))


def initial_seed() -> int:
    return _rng.default_generator(current_device()).initial_seed()


def get_rng_state(device: Any = "npu") -> torch.Tensor:
    """The generator state of a device: 16 bytes, (seed, offset) as CUDA's Philox."""
    return _rng.default_generator(_index(device)).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "npu") -> None:
    if not (isinstance(new_state, torch.Tensor) and new_state.dtype == torch.uint8 and new_state.numel() == 16):
        raise RuntimeError("npu RNG state must be a uint8 tensor of 16 bytes (seed, offset)")
    _rng.default_generator(_index(device)).set_state(new_state.cpu())


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for i, s in enumerate(new_states):
        set_rng_state(s, i)


# -- memory ------------------------------------------------------------------------
def memory_allocated(device: Any = None) -> int:
    """Bytes occupied by live tensors on the device (rounded to allocator blocks)."""
    return _C.memory_counters(_index(device))["allocated"]


def max_memory_allocated(device: Any = None) -> int:
    """Peak of :func:`memory_allocated` since start or the last reset."""
    return _C.memory_counters(_index(device))["peak_allocated"]


def memory_reserved(device: Any = None) -> int:
    """Bytes held by the caching allocator (allocated + cached)."""
    return _C.memory_counters(_index(device))["reserved"]


def max_memory_reserved(device: Any = None) -> int:
    return _C.memory_counters(_index(device))["peak_reserved"]


def reset_peak_memory_stats(device: Any = None) -> None:
    _C.reset_peak(_index(device))


def reset_max_memory_allocated(device: Any = None) -> None:
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    _C.reset_accumulated(_index(device))


def memory_stats(device: Any = None) -> dict[str, int]:
    """Allocator and transfer counters, keyed like ``torch.cuda.memory_stats()``."""
    return _memory.memory(_index(device)).stats()


def empty_cache() -> None:
    """Release cached blocks of every device so :func:`memory_reserved` drops to what is in use."""
    for i in range(device_count()):
        _C.empty_cache(i)


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free bytes, total bytes) of the device."""
    return tuple(_C.mem_get_info(_index(device)))  # type: ignore[return-value]


def memory_summary(device: Any = None) -> str:
    """A short readable table of :func:`memory_stats`."""
    stats = memory_stats(device)
    width = max(len(k) for k in stats)
    return "\n".join(f"{k:<{width}}  {v:>14,}" for k, v in stats.items())


# -- mixed precision -----------------------------------------------------------------
def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes ``torch.autocast("npu", dtype=...)`` accepts."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True
