"""Put a collective on the simulated device clock, so it shows in ``npu_lab.profile()``.

A collective is enqueued on the current stream of the tensor's device, like a
kernel: it starts where that stream's clock stands, lasts what the α–β model
(:mod:`.cost`) says, and moves the stream's clock to its end. The profiler sees
it as an event of kind ``"collective"`` named ``npuccl:<op>``.
"""

from __future__ import annotations

from ..device import clock, native

_C = native.load()


def account(op: str, device: int, duration_us: float, nbytes: int) -> tuple[float, float]:
    """Advance ``device``'s current stream by ``duration_us``; returns the simulated (start, end)."""
    stream = _C.current_stream(device)
    start = _C.stream_time(device, stream)
    end = start + duration_us
    _C.stream_wait_until(device, stream, end)
    if clock.listeners:
        clock._dispatch("collective", f"npuccl:{op}", device, stream, 0.0, nbytes, nbytes, start, end)
    return start, end
