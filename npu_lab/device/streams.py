"""Streams and events of the simulated NPU, with ``torch.cuda``'s names.

A stream is an ordered queue of kernels; each stream has its own simulated
clock (see :mod:`npu_lab.device.clock`). An event marks a point on a stream;
two timing events measure simulated device time between them.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator

import torch

from . import clock as _clock

_stream_ids = itertools.count(1)


def _index(device: int | str | torch.device | None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.type != "npu":
        raise ValueError(f"expected an npu device, got {d}")
    return d.index or 0


_current_device = 0


def current_device() -> int:
    return _current_device


def set_current_device(index: int) -> None:
    global _current_device
    _current_device = index


class Stream:
    """A simulated NPU stream (``torch.npu.Stream``).

    Args:
        device: the device of the stream (default: the current device).
        priority: accepted for API compatibility; the simulator ignores it.
    """

    def __init__(self, device: int | str | torch.device | None = None, priority: int = 0,
                 *, _stream_id: int | None = None) -> None:
        self.device_index = _index(device)
        self.priority = priority
        self.stream_id = next(_stream_ids) if _stream_id is None else _stream_id
        _clock.clock(self.device_index).now(self.stream_id)

    @property
    def device(self) -> torch.device:
        return torch.device("npu", self.device_index)

    def query(self) -> bool:
        """True: the simulator runs kernels eagerly, so work is always complete."""
        return True

    def synchronize(self) -> None:
        """Wait for this stream's work (advances nothing: it is already done)."""

    def wait_event(self, event: Event) -> None:
        """Make later work on this stream start after ``event``."""
        if event.time_us is not None:
            _clock.clock(self.device_index).wait_until(self.stream_id, event.time_us)

    def wait_stream(self, stream: Stream) -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    @property
    def simulated_time_us(self) -> float:
        """Where this stream's clock stands, in simulated microseconds."""
        return _clock.clock(self.device_index).now(self.stream_id)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Stream) and other.stream_id == self.stream_id
                and other.device_index == self.device_index)

    def __hash__(self) -> int:
        return hash((self.device_index, self.stream_id))

    def __repr__(self) -> str:
        return f"<torch.npu.Stream device=npu:{self.device_index} stream_id={self.stream_id}>"


_default_streams: dict[int, Stream] = {}
_streams_by_id: dict[tuple[int, int], Stream] = {}


def default_stream(device: int | str | torch.device | None = None) -> Stream:
    idx = _index(device)
    s = _default_streams.get(idx)
    if s is None:
        s = _default_streams[idx] = Stream(idx, _stream_id=0)
        _streams_by_id[(idx, 0)] = s
    return s


def current_stream(device: int | str | torch.device | None = None) -> Stream:
    idx = _index(device)
    sid = _clock.current_stream_id(idx)
    if sid == 0:
        return default_stream(idx)
    return _streams_by_id[(idx, sid)]


def set_stream(stream: Stream) -> None:
    _streams_by_id[(stream.device_index, stream.stream_id)] = stream
    _clock.set_current_stream_id(stream.stream_id, stream.device_index)


@contextlib.contextmanager
def stream(s: Stream | None) -> Iterator[Stream | None]:
    """Context manager that makes ``s`` the current stream of its device."""
    if s is None:
        yield None
        return
    prev = current_stream(s.device_index)
    set_stream(s)
    try:
        yield s
    finally:
        set_stream(prev)


class Event:
    """A simulated NPU event (``torch.npu.Event``).

    Args:
        enable_timing: record the simulated time so ``elapsed_time`` works.
        blocking, interprocess: accepted for API compatibility.
    """

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.time_us: float | None = None
        self.device_index: int | None = None

    def record(self, stream: Stream | None = None) -> None:
        """Mark the current point of ``stream`` (default: the current stream)."""
        stream = stream or current_stream()
        self.device_index = stream.device_index
        self.time_us = _clock.clock(stream.device_index).now(stream.stream_id)

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Wait until the event has happened (always true in the simulator)."""

    def wait(self, stream: Stream | None = None) -> None:
        (stream or current_stream()).wait_event(self)

    def elapsed_time(self, end_event: Event) -> float:
        """Simulated milliseconds from this event to ``end_event``."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError(
                "Both events must be created with argument 'enable_timing=True'."
            )
        if self.time_us is None or end_event.time_us is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event.time_us - self.time_us) / 1000.0

    def __repr__(self) -> str:
        state = "unrecorded" if self.time_us is None else f"t={self.time_us:.3f}us"
        return f"<torch.npu.Event {state}>"


def synchronize(device: int | str | torch.device | None = None) -> None:
    """Wait for all streams of a device: every stream's clock joins the latest one."""
    _clock.clock(_index(device)).synchronize()
