"""The simulated device clock and its roofline cost model.

The host runs every kernel at once (NumPy/numba on the CPU), but the *device*
keeps its own time: each kernel launch advances the clock of the stream it ran
on by what the cost model says the kernel would take on the simulated chip:

    time = launch latency + max(FLOPs / peak FLOP/s, bytes moved / bandwidth)

The clocks live in the simulated driver (``csrc/driver/clock.cpp``), next to the
streams and events that read them, so ``torch.Event.elapsed_time``, the copies
the C++ runtime makes and the kernels the Python side launches all share one
time line. That time is deterministic: it does not depend on how busy the host is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import native

_C = native.load()

_FIELDS = ("peak_gflops", "bandwidth_gbs", "launch_us", "link_gbs", "link_latency_us", "peer_gbs",
           "peer_latency_us", "event_us")


class _Roofline:
    """The cost formulas, shared by a :class:`CostModel` and the device's live one."""

    peak_gflops: float
    bandwidth_gbs: float
    launch_us: float
    link_gbs: float
    link_latency_us: float
    peer_gbs: float
    peer_latency_us: float
    event_us: float

    def kernel_us(self, flops: float, nbytes: float) -> float:
        """Simulated microseconds of a kernel doing ``flops`` and moving ``nbytes`` in device memory."""
        compute = flops / (self.peak_gflops * 1e3)
        memory = nbytes / (self.bandwidth_gbs * 1e3)
        return self.launch_us + max(compute, memory)

    def copy_us(self, nbytes: float) -> float:
        """Simulated microseconds of one host<->device copy."""
        return self.link_latency_us + nbytes / (self.link_gbs * 1e3)

    def peer_copy_us(self, nbytes: float) -> float:
        """Simulated microseconds of one copy between two devices."""
        return self.peer_latency_us + nbytes / (self.peer_gbs * 1e3)

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte above which a kernel is compute-bound."""
        return self.peak_gflops / self.bandwidth_gbs


@dataclass
class CostModel(_Roofline):
    """Roofline parameters of a simulated chip (a plain record, for what-if calculations).

    Attributes:
        peak_gflops: peak arithmetic throughput, GFLOP/s.
        bandwidth_gbs: device memory bandwidth, GB/s.
        launch_us: fixed cost of launching one kernel, microseconds.
        link_gbs: host<->device link bandwidth, GB/s (PCIe-like).
        link_latency_us: fixed cost of one host<->device copy, microseconds.
        peer_gbs: device<->device link bandwidth, GB/s.
        peer_latency_us: fixed cost of one device<->device copy, microseconds.
        event_us: what recording an event takes on its stream, microseconds (two events recorded
            back to back measure this much apart, as on a real device: never zero).
    """

    peak_gflops: float = 2000.0
    bandwidth_gbs: float = 400.0
    launch_us: float = 4.0
    link_gbs: float = 16.0
    link_latency_us: float = 8.0
    peer_gbs: float = 64.0
    peer_latency_us: float = 5.0
    event_us: float = 0.5


class DeviceCostModel(_Roofline):
    """The cost model the simulated devices use now (``npu_lab.cost_model``).

    Reading an attribute reads the driver's figure; setting one changes it for
    every device from the next kernel on.
    """

    def __getattr__(self, name: str) -> float:
        if name in _FIELDS:
            return _C.get_cost_model()[name]
        raise AttributeError(name)

    def __setattr__(self, name: str, value: float) -> None:
        if name not in _FIELDS:
            raise AttributeError(f"the cost model has no figure {name!r}; it has {', '.join(_FIELDS)}")
        figures = _C.get_cost_model()
        figures[name] = float(value)
        _C.set_cost_model(figures)

    def snapshot(self) -> CostModel:
        """The current figures as a plain :class:`CostModel`."""
        return CostModel(**_C.get_cost_model())

    def load(self, model: CostModel) -> None:
        """Make the devices use ``model``'s figures."""
        _C.set_cost_model({f: float(getattr(model, f)) for f in _FIELDS})

    def __repr__(self) -> str:
        return "DeviceCostModel(" + ", ".join(f"{k}={v:g}" for k, v in _C.get_cost_model().items()) + ")"


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


def _dispatch(kind, name, device, stream, flops, bytes_read, bytes_written, start, end) -> None:
    rec = KernelRecord(device, stream, kind, name, flops, bytes_read, bytes_written, start, end)
    for fn in list(listeners):
        fn(rec)


class _Listeners(list):
    """The Python listeners of the driver's activities; the driver calls them only while there are some."""

    def _sync(self) -> None:
        _C.set_activity_listener(_dispatch if self else None)

    def append(self, fn: Listener) -> None:
        super().append(fn)
        self._sync()

    def remove(self, fn: Listener) -> None:
        super().remove(fn)
        self._sync()

    def pop(self, index: int = -1) -> Listener:
        fn = super().pop(index)
        self._sync()
        return fn

    def clear(self) -> None:
        super().clear()
        self._sync()


cost_model = DeviceCostModel()
listeners: list[Listener] = _Listeners()


class DeviceClock:
    """The simulated time of one device's streams (read from the driver)."""

    def __init__(self, index: int) -> None:
        self.index = index

    def now(self, stream: int = 0) -> float:
        """Where ``stream``'s clock stands, in simulated microseconds."""
        return _C.stream_time(self.index, stream)

    def wait_until(self, stream: int, t: float) -> None:
        _C.stream_wait_until(self.index, stream, t)

    def synchronize(self) -> float:
        """Every stream catches up with the latest one; returns that time."""
        _C.synchronize(self.index)
        return self.now(0)

    @property
    def launches(self) -> int:
        """Kernels launched on this device so far."""
        return _C.launch_counts(self.index)[0]

    @property
    def copies(self) -> int:
        """Copies (host<->device, within and between devices) accounted on this device so far."""
        return _C.launch_counts(self.index)[1]


def clock(index: int = 0) -> DeviceClock:
    return DeviceClock(index)


def current_stream_id(index: int = -1) -> int:
    return _C.current_stream(index)


#: ``launch(name, flops, bytes_read, bytes_written, device=-1)``: account one kernel on the current
#: stream of ``device`` (default: the current device). Called by every numba kernel wrapper.
launch = _C.launch
