"""Record what the NPU does inside ``with npu_lab.profile() as prof:``.

Three sources feed one :class:`Profile`:

* every NPU kernel registered with the dispatcher passes through a hook
  (:mod:`npu_lab.profiler.hooks`), so the profile knows each ATen operator's
  name, input shapes and dtypes, its wall time on the host, and the
  ``torch.profiler.record_function`` ranges it ran inside;
* the device clock (:mod:`npu_lab.device.clock`) reports every kernel launch
  and host<->device copy with its FLOPs, bytes and *simulated* start/end on
  its stream; each is attributed to the operator that was running;
* the native allocator and the CPU fallback report allocations, frees and fallbacks;
* the simulated host's time line: when each launch was issued, and where the host
  waited for the device (synchronizations, blocking copies).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_flatten

from ..device import clock, fallback, native

_C = native.load()


@dataclass
class OpEvent:
    """One ATen operator call."""

    name: str
    shapes: list[tuple[int, ...]]
    dtypes: list[str]
    wall_us: float
    ranges: tuple[str, ...]
    kernels: list[int] = field(default_factory=list)  # indices into Profile.kernels


@dataclass
class KernelEvent:
    """One kernel launch or copy on the simulated device."""

    name: str
    kind: str  # "kernel" | "copy"
    op: str  # the ATen operator that launched it ("" if none)
    ranges: tuple[str, ...]
    stream: int
    flops: float
    bytes_read: int
    bytes_written: int
    start_us: float
    end_us: float
    wall_us: float  # host time of the enclosing operator, shared among its kernels
    host_start_us: float = 0.0  # when the simulated host started issuing it
    host_end_us: float = 0.0    # when it was issued (the device cannot start it earlier)

    @property
    def sim_us(self) -> float:
        return self.end_us - self.start_us

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved (the roofline's x axis)."""
        return self.flops / self.bytes if self.bytes else 0.0


@dataclass
class HostEvent:
    """Time the simulated host spent waiting for the device (``"sync"``: a synchronize, a blocking
    copy, ``.item()``) or launching a captured graph (``"graph"``), on the host's time line."""

    name: str
    kind: str  # "sync" | "graph"
    op: str
    start_us: float
    end_us: float

    @property
    def sim_us(self) -> float:
        return self.end_us - self.start_us


@dataclass
class MemoryEvent:
    kind: str  # "alloc" | "free"
    nbytes: int
    allocated_after: int
    sim_us: float
    wall_s: float


class _Recorder:
    def __init__(self, prof) -> None:
        self.prof = prof
        self.op_stack: list[OpEvent] = []
        self.ranges: list[str] = []

    def around_op(self, name: str, fn, args: tuple, kwargs: dict):
        flat = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        ev = OpEvent(name, [tuple(t.shape) for t in flat], [str(t.dtype).replace("torch.", "") for t in flat],
                     0.0, tuple(self.ranges))
        self.op_stack.append(ev)
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            ev.wall_us = (time.perf_counter() - t0) * 1e6
            self.op_stack.pop()
            if not self.op_stack:  # operators called inside a kernel belong to their caller
                self.prof.ops.append(ev)
                for k in ev.kernels:
                    self.prof.kernels[k].wall_us = ev.wall_us

    def on_kernel(self, rec: clock.KernelRecord) -> None:
        top = self.op_stack[0] if self.op_stack else None
        if rec.kind in ("sync", "graph"):
            self.prof.host.append(HostEvent(rec.name, rec.kind, top.name if top else "", rec.start_us, rec.end_us))
            return
        k = KernelEvent(rec.name, rec.kind, top.name if top else "", tuple(self.ranges), rec.stream, rec.flops,
                        rec.bytes_read, rec.bytes_written, rec.start_us, rec.end_us, 0.0, rec.host_start_us,
                        rec.host_end_us)
        self.prof.kernels.append(k)
        if top is not None:
            top.kernels.append(len(self.prof.kernels) - 1)

    def on_memory(self, kind: str, index: int, nbytes: int, allocated_after: int) -> None:
        self.prof.memory.append(MemoryEvent(kind, nbytes, allocated_after,
                                            _C.stream_time(index, _C.current_stream(index)),
                                            time.perf_counter() - self.prof._t0))

    def on_fallback(self, name: str) -> None:
        self.prof.fallbacks.append(name)


_rf = torch.autograd.profiler.record_function
_original_enter, _original_exit = _rf.__enter__, _rf.__exit__


def _patch_ranges(rec: _Recorder | None) -> None:
    """Follow ``torch.profiler.record_function`` ranges while recording."""
    if rec is None:
        _rf.__enter__, _rf.__exit__ = _original_enter, _original_exit
        return

    def enter(self):
        rec.ranges.append(self.name)
        return _original_enter(self)

    def exit(self, *exc):
        if rec.ranges:
            rec.ranges.pop()
        return _original_exit(self, *exc)

    _rf.__enter__, _rf.__exit__ = enter, exit


def start(prof) -> _Recorder:
    from . import hooks

    if hooks.recorder is not None:
        raise RuntimeError("an npu_lab.profile() is already recording")
    rec = _Recorder(prof)
    clock.listeners.append(rec.on_kernel)
    _C.set_memory_listener(rec.on_memory)
    fallback.listeners.append(rec.on_fallback)
    _patch_ranges(rec)
    hooks.recorder = rec
    return rec


def stop(rec: _Recorder) -> None:
    from . import hooks

    hooks.recorder = None
    _patch_ranges(None)
    clock.listeners.remove(rec.on_kernel)
    _C.set_memory_listener(None)
    fallback.listeners.remove(rec.on_fallback)
