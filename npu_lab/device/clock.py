"""The simulated device clock and its roofline cost model.

The host runs every kernel at once (NumPy/numba on the CPU), but the *device*
keeps its own time: each kernel launch advances the clock of the stream it ran
on by what the cost model says the kernel would take on the simulated chip:

    time = launch latency + max(FLOPs / peak FLOP/s, bytes moved / bandwidth)

That time is deterministic, so ``torch.npu.Event.elapsed_time`` and the
profiler agree with each other and do not depend on how busy the host is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class CostModel:
    """Roofline parameters of the simulated chip (all configurable).

    Attributes:
        peak_gflops: peak arithmetic throughput, GFLOP/s.
        bandwidth_gbs: device memory bandwidth, GB/s.
        launch_us: fixed cost of launching one kernel, microseconds.
        link_gbs: host<->device link bandwidth, GB/s (PCIe-like).
        link_latency_us: fixed cost of one host<->device copy, microseconds.
    """

    peak_gflops: float = 2000.0
    bandwidth_gbs: float = 400.0
    launch_us: float = 4.0
    link_gbs: float = 16.0
    link_latency_us: float = 8.0

    def kernel_us(self, flops: float, nbytes: float) -> float:
        compute = flops / (self.peak_gflops * 1e3)
        memory = nbytes / (self.bandwidth_gbs * 1e3)
        return self.launch_us + max(compute, memory)

    def copy_us(self, nbytes: float) -> float:
        return self.link_latency_us + nbytes / (self.link_gbs * 1e3)

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte above which a kernel is compute-bound."""
        return self.peak_gflops / self.bandwidth_gbs


@dataclass
class KernelRecord:
    """One kernel (or copy) as the device saw it."""

    device: int
    stream: int
    kind: str  # "kernel" | "copy"
    name: str
    flops: float
    bytes_read: int
    bytes_written: int
    start_us: float
    end_us: float


#: Called with every KernelRecord; the profiler subscribes here.
Listener = Callable[[KernelRecord], None]


class DeviceClock:
    """Per-stream simulated time of one device."""

    def __init__(self, index: int, model: CostModel) -> None:
        self.index = index
        self.model = model
        self.stream_time: dict[int, float] = {0: 0.0}
        self.launches = 0
        self.copies = 0

    def now(self, stream: int) -> float:
        t = self.stream_time.get(stream)
        if t is None:
            # A new stream starts idle at the device's latest time.
            t = self.stream_time[stream] = max(self.stream_time.values())
        return t

    def advance(self, stream: int, duration: float) -> tuple[float, float]:
        start = self.now(stream)
        end = start + duration
        self.stream_time[stream] = end
        return start, end

    def wait_until(self, stream: int, t: float) -> None:
        if self.now(stream) < t:
            self.stream_time[stream] = t

    def synchronize(self) -> float:
        """Every stream catches up with the latest one; returns that time."""
        latest = max(self.stream_time.values())
        for s in self.stream_time:
            self.stream_time[s] = latest
        return latest


cost_model = CostModel()
_clocks: dict[int, DeviceClock] = {}
listeners: list[Listener] = []
_current_stream: dict[int, int] = {}


def clock(index: int = 0) -> DeviceClock:
    c = _clocks.get(index)
    if c is None:
        c = _clocks[index] = DeviceClock(index, cost_model)
    return c


def current_stream_id(index: int = 0) -> int:
    return _current_stream.get(index, 0)


def set_current_stream_id(stream_id: int, index: int = 0) -> None:
    _current_stream[index] = stream_id


def launch(
    name: str,
    flops: float,
    bytes_read: int,
    bytes_written: int,
    index: int = 0,
) -> None:
    """Account one kernel launch on the current stream of device ``index``."""
    flops, bytes_read, bytes_written = float(flops), int(bytes_read), int(bytes_written)  # plain numbers only
    c = _clocks.get(index) or clock(index)
    stream = _current_stream.get(index, 0)
    start, end = c.advance(stream, c.model.kernel_us(flops, bytes_read + bytes_written))
    c.launches += 1
    if listeners:
        rec = KernelRecord(index, stream, "kernel", name, flops, bytes_read, bytes_written, start, end)
        for fn in listeners:
            fn(rec)


def copy(name: str, nbytes: int, index: int = 0) -> None:
    """Account one host<->device (or device<->device) copy."""
    nbytes = int(nbytes)
    c = _clocks.get(index) or clock(index)
    stream = _current_stream.get(index, 0)
    start, end = c.advance(stream, c.model.copy_us(nbytes))
    c.copies += 1
    if listeners:
        rec = KernelRecord(index, stream, "copy", name, 0.0, nbytes, nbytes, start, end)
        for fn in listeners:
            fn(rec)
