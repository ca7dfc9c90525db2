"""Streams and events of the simulated NPU, with ``torch.cuda``'s names.

A stream is an ordered queue of kernels; each stream has its own simulated
clock in the driver. An event marks a point on a stream; two timing events
measure simulated device time between them. ``torch.npu.Stream`` and
``torch.npu.Event`` are PyTorch's own ``torch.Stream`` and ``torch.Event``
(which reach the device through its C++ device guard), plus a few conveniences
that read the simulated clock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from . import native

_C = native.load()


def _index(device: int | str | torch.device | None) -> int:
    if device is None:
        return _C.current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.type != "npu":
        raise ValueError(f"expected an npu device, got {d}")
    return _C.current_device() if d.index is None else d.index


def current_device() -> int:
    return _C.current_device()


def set_current_device(index: int) -> None:
    _C.set_device(index)


class Stream(torch.Stream):
    """An NPU stream (``torch.npu.Stream``): a ``torch.Stream`` with its own simulated clock.

    Args:
        device: the device of the stream (default: the current device).
        priority: accepted for API compatibility; the simulator ignores it.
    """

    def __new__(cls, device: int | str | torch.device | None = None, priority: int = 0, **kwargs) -> Stream:
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("npu", _index(device)), priority=priority)

    @classmethod
    def _wrap(cls, stream: torch.Stream) -> Stream:
        return cls(stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type)

    @property
    def simulated_time_us(self) -> float:
        """Where this stream's clock stands, in simulated microseconds."""
        return _C.stream_time(self.device_index, self.stream_id)

    def __repr__(self) -> str:
        return f"<torch.npu.Stream device=npu:{self.device_index} stream_id={self.stream_id}>"


class Event(torch.Event):
    """An NPU event (``torch.npu.Event``): a ``torch.Event`` on the simulated clock.

    Args:
        enable_timing: record the simulated time so ``elapsed_time`` works.
        blocking, interprocess: accepted for API compatibility.
    """

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                device: int | str | torch.device | None = None) -> Event:
        return super().__new__(cls, device=torch.device("npu", _index(device)), enable_timing=enable_timing,
                               blocking=blocking, interprocess=interprocess)

    def record(self, stream: torch.Stream | None = None) -> None:
        """Mark the current point of ``stream`` (default: the current stream of the event's device)."""
        super().record(stream if stream is not None else current_stream(self.device.index))

    def wait(self, stream: torch.Stream | None = None) -> None:
        super().wait(stream if stream is not None else current_stream(self.device.index))

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Simulated milliseconds from this event to ``end_event`` (both recorded, both timing)."""
        if not (self.event_id and end_event.event_id):
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        # torch.Event.elapsed_time accepts only exact torch.Event arguments, so ask the driver directly.
        return _C.event_elapsed_time(self.event_id, end_event.event_id)

    @property
    def time_us(self) -> float | None:
        """The simulated time at which the event was recorded (None before it is)."""
        if not self.event_id:
            return None
        t, _device, _id, recorded, _timing = _C.event_info(self.event_id)
        return t if recorded else None

    def __repr__(self) -> str:
        t = self.time_us
        return f"<torch.npu.Event {'unrecorded' if t is None else f't={t:.3f}us'}>"


#: c10::DeviceType::PrivateUse1, the device type code torch.Stream takes.
_PRIVATEUSE1 = 20


def default_stream(device: int | str | torch.device | None = None) -> Stream:
    """The default stream (id 0) of a device."""
    return Stream(stream_id=0, device_index=_index(device), device_type=_PRIVATEUSE1)


def current_stream(device: int | str | torch.device | None = None) -> Stream:
    """The current stream of a device, on this thread."""
    idx = _index(device)
    return Stream(stream_id=_C.current_stream(idx), device_index=idx, device_type=_PRIVATEUSE1)


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` the current stream of its device (on this thread)."""
    _C.set_current_stream(stream.device_index, stream.stream_id)


@contextlib.contextmanager
def stream(s: torch.Stream | None) -> Iterator[torch.Stream | None]:
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


def synchronize(device: int | str | torch.device | None = None) -> None:
    """Wait for all streams of a device: every stream's clock joins the latest one."""
    _C.synchronize(_index(device))
