"""``torch.npu``: the device module of the simulated NPU.

After ``import npu_lab`` this module *is* ``torch.npu``. Its names and
semantics follow ``torch.cuda``: devices, streams and events, random seeds,
and memory statistics. Everything here works on the CPU-only machine the lab
runs on, because the device is simulated.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from . import memory as _memory
from . import rng as _rng
from . import streams as _streams
from .streams import Event, Stream, current_stream, default_stream, set_stream, stream  # noqa: F401

__all__ = [
    "Event", "Stream", "current_device", "current_stream", "default_stream", "device",
    "device_count", "empty_cache", "get_device_name", "get_device_properties",
    "get_rng_state", "get_rng_state_all", "initial_seed", "is_available", "manual_seed",
    "manual_seed_all", "max_memory_allocated", "max_memory_reserved", "mem_get_info",
    "memory_allocated", "memory_reserved", "memory_stats", "reset_peak_memory_stats",
    "seed", "set_device", "set_rng_state", "set_rng_state_all", "set_stream", "stream",
    "synchronize",
]

#: How many simulated devices exist. PyTorch 2.13's pure-Python backend path
#: creates every tensor on index 0, so the simulator has exactly one for now;
#: the runtime keeps the index as a parameter everywhere so this can grow.
DEVICE_COUNT = 1


def _index(device: Any = None) -> int:
    if device is None:
        return _streams.current_device()
    if isinstance(device, int):
        idx = device
    else:
        d = torch.device(device)
        if d.type != "npu":
            raise ValueError(f"Expected an npu device, but got: {d}")
        idx = d.index if d.index is not None else _streams.current_device()
    if not 0 <= idx < DEVICE_COUNT:
        raise RuntimeError(
            f"Invalid device index npu:{idx}: the simulated NPU has {DEVICE_COUNT} device(s)"
        )
    return idx


# -- devices ---------------------------------------------------------------------
def is_available() -> bool:
    """Always True: the NPU is simulated on the host."""
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    """Nothing to initialise lazily; present for torch.cuda parity."""


def device_count() -> int:
    """Number of simulated NPU devices."""
    return DEVICE_COUNT


def current_device() -> int:
    """Index of the current device."""
    return _streams.current_device()


def set_device(device: Any) -> None:
    """Make ``device`` the current device."""
    _streams.set_current_device(_index(device))


@contextlib.contextmanager
def device(device: Any) -> Iterator[None]:
    """Context manager that changes the current device."""
    prev = current_device()
    set_device(device)
    try:
        yield
    finally:
        set_device(prev)


def get_device_name(device: Any = None) -> str:
    _index(device)
    return "npu-lab simulated NPU"


def get_device_properties(device: Any = None) -> dict[str, Any]:
    """Capacity and the cost model's roofline numbers of a device."""
    from .clock import cost_model

    idx = _index(device)
    return {
        "name": get_device_name(idx),
        "total_memory": _memory.memory(idx).capacity,
        "peak_gflops": cost_model.peak_gflops,
        "bandwidth_gbs": cost_model.bandwidth_gbs,
        "launch_us": cost_model.launch_us,
    }


def synchronize(device: Any = None) -> None:
    """Wait for all kernels on ``device``: every stream's clock joins the latest."""
    _streams.synchronize(_index(device))


# -- random numbers ----------------------------------------------------------------
def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    _rng.generator(current_device()).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every device's generator (``torch.manual_seed`` calls this too)."""
    for i in range(DEVICE_COUNT):
        _rng.generator(i).manual_seed(int(seed))


def seed() -> None:
    """Seed the current device with a random number."""
    manual_seed(torch.randint(0, 2**62, ()).item())


def seed_all() -> None:
    for i in range(DEVICE_COUNT):
        _rng.generator(i).manual_seed(torch.randint(0, 2**62, ()).item())


def initial_seed() -> int:
    return _rng.generator(current_device()).seed


def get_rng_state(device: Any = "npu") -> torch.Tensor:
    """The generator state of a device: 16 bytes, (seed, offset) as CUDA's Philox."""
    return _rng.generator(_index(device)).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "npu") -> None:
    _rng.generator(_index(device)).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(DEVICE_COUNT)]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for i, s in enumerate(new_states):
        set_rng_state(s, i)


# -- memory ------------------------------------------------------------------------
def memory_allocated(device: Any = None) -> int:
    """Bytes occupied by live tensors on the device (rounded to allocator blocks)."""
    return _memory.memory(_index(device)).counters.allocated


def max_memory_allocated(device: Any = None) -> int:
    """Peak of :func:`memory_allocated` since start or the last reset."""
    return _memory.memory(_index(device)).counters.peak_allocated


def memory_reserved(device: Any = None) -> int:
    """Bytes held by the caching allocator (allocated + cached)."""
    return _memory.memory(_index(device)).counters.reserved


def max_memory_reserved(device: Any = None) -> int:
    return _memory.memory(_index(device)).counters.peak_reserved


def reset_peak_memory_stats(device: Any = None) -> None:
    _memory.memory(_index(device)).reset_peak()


def reset_max_memory_allocated(device: Any = None) -> None:
    reset_peak_memory_stats(device)


def memory_stats(device: Any = None) -> dict[str, int]:
    """Allocator and transfer counters, keyed like ``torch.cuda.memory_stats()``."""
    return _memory.memory(_index(device)).stats()


def empty_cache() -> None:
    """Release cached blocks so :func:`memory_reserved` drops to what is in use."""
    for i in range(DEVICE_COUNT):
        _memory.memory(i).empty_cache()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free bytes, total bytes) of the device."""
    mem = _memory.memory(_index(device))
    return mem.free_bytes, mem.capacity


def memory_summary(device: Any = None) -> str:
    """A short readable table of :func:`memory_stats`."""
    stats = memory_stats(device)
    width = max(len(k) for k in stats)
    return "\n".join(f"{k:<{width}}  {v:>14,}" for k, v in stats.items())


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16]


def is_bf16_supported() -> bool:
    return False
