"""Put a collective on the simulated device clock, on the device's communication stream.

Like NCCL, npuccl runs every collective on a stream of its own per device (the
*communication stream*, :func:`comm_stream`), not on the stream that computes:

1. the communication stream first waits for the caller's current stream (the
   collective reads tensors that stream produced): the collective starts at
   ``max(comm stream clock, current stream clock)``;
2. it lasts what the α–β model (:mod:`.cost`) says and moves only the communication
   stream's clock to its end, so the compute stream keeps going: compute and
   communication overlap on the simulated clock;
3. whoever uses the result waits *stream-ordered*: the collective's future is a
   device-aware ``torch.futures.Future`` completed with an event recorded at the
   collective's end (:func:`complete`), and ``future.wait()`` / ``work.wait()``
   makes the waiter's current stream wait on that event (the host does not block
   the simulated clock). That is how DDP's reducer, which waits on the future in
   C++, sees its gradients only after their allreduce ended.

The profiler sees each collective as an event of kind ``"collective"`` named
``npuccl:<op>``, with its bytes, on the communication stream's lane.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ..device import clock, native

_C = native.load()

_lock = threading.Lock()
_comm: dict[int, int] = {}  # device -> its communication stream id
_free_signals: dict[int, list[int]] = {}  # device -> idle signal streams (see reserve_signal)


#: Signal streams made with the communication stream. A new stream starts where the device's
#: latest stream stands, so streams made then stand at or before every later collective's end.
SIGNAL_STREAMS = 8


@dataclass
class CollectiveRecord:
    """One collective as the device clock saw it (kept while :func:`recording`)."""

    op: str
    device: int
    nbytes: int
    ready_us: float  #: where the caller's stream stood when it issued the collective
    start_us: float  #: start on the communication stream
    end_us: float  #: end on the communication stream


_records: list[CollectiveRecord] | None = None


@contextlib.contextmanager
def recording() -> Iterator[list[CollectiveRecord]]:
    """Inside ``with recording() as records:``, every collective on an npu device is appended to ``records``."""
    global _records
    previous, _records = _records, []
    try:
        yield _records
    finally:
        _records = previous


def comm_stream(device: int) -> int:
    """The id of ``device``'s communication stream (created on first use, then always the same)."""
    with _lock:
        sid = _comm.get(device)
        if sid is None:
            sid = torch.npu.Stream(device).stream_id
            _comm[device] = sid
            _free_signals[device] = [torch.npu.Stream(device).stream_id for _ in range(SIGNAL_STREAMS)]
        return sid


def is_comm_stream(device: int, stream: int) -> bool:
    """Whether ``stream`` of ``device`` is npuccl's communication stream."""
    return _comm.get(device) == stream


def account(op: str, device: int, duration_us: float, nbytes: int) -> tuple[float, float]:
    """Run collective ``op`` on ``device``'s communication stream; returns its simulated (start, end).

    The communication stream waits for the caller's current stream first; the current
    stream itself does not move (use :func:`reserve_signal` and :func:`complete` to make a
    consumer wait for the end).
    """
    if device < 0:
        device = _C.current_device()
    comm = comm_stream(device)
    current = _C.current_stream(device)
    ready = _C.stream_time(device, current)
    _C.stream_wait_until(device, comm, ready)
    start = _C.stream_time(device, comm)
    end = start + duration_us
    _C.stream_wait_until(device, comm, end)
    if _records is not None:
        _records.append(CollectiveRecord(op, device, nbytes, ready, start, end))
    if clock.listeners:
        clock._dispatch("collective", f"npuccl:{op}", device, comm, 0.0, nbytes, nbytes, start, end)
    return start, end


def reserve_signal(device: int, time_us: float) -> int:
    """A stream of ``device`` standing at ``time_us``, kept for one collective's completion event.

    The collective completes later, on some host thread; the event it records there must mark
    the collective's end, not wherever the (busy, shared) communication stream stands by then.
    So each pending collective holds a small idle stream parked at its end time (one made with
    the communication stream, which stands no later than that; a new one only when more than
    :data:`SIGNAL_STREAMS` collectives are pending at once).
    """
    with _lock:
        pool = _free_signals.setdefault(device, [])
        fits = [s for s in pool if _C.stream_time(device, s) <= time_us]
        if fits:
            sid = max(fits, key=lambda s: _C.stream_time(device, s))
            pool.remove(sid)
        else:
            sid = torch.npu.Stream(device).stream_id
    _C.stream_wait_until(device, sid, time_us)
    return sid


def complete(future: torch.futures.Future, device: int, signal: int, value: object) -> None:
    """Complete the device-aware ``future`` with ``value``, its event recorded on ``signal``; free ``signal``."""
    previous = _C.current_stream(device)
    _C.set_current_stream(device, signal)
    try:
        future.set_result(value)
    finally:
        _C.set_current_stream(device, previous)
        release_signal(device, signal)


def release_signal(device: int, signal: int) -> None:
    """Give a stream from :func:`reserve_signal` back to the pool."""
    with _lock:
        _free_signals.setdefault(device, []).append(signal)


def wait_until(device: int, time_us: float) -> None:
    """Make ``device``'s current stream (of this thread) wait until ``time_us`` (a stream wait, not a host one)."""
    _C.stream_wait_until(device, _C.current_stream(device), time_us)
