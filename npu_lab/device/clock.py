"""The simulated clocks (the host's and each device stream's) and the roofline cost model.

The machine runs every kernel at once (NumPy/numba on the CPU), but the
simulation keeps the time lines a real trace shows:

* the **host** (the Python thread issuing work) spends ``host_launch_us`` to
  issue each kernel or copy, and waits for the device only at synchronization
  points: ``torch.npu.synchronize()``, ``Stream``/``Event.synchronize()``,
  blocking copies and ``.item()``;
* each **device stream** runs its work in order, a kernel no earlier than the
  host issued it, for what the cost model says it takes on the simulated chip:

      time = launch latency + max(FLOPs / unit peak FLOP/s, bytes moved / bandwidth)

  where the unit is the vector unit (``peak_gflops``) or, for matrix products,
  the matrix unit, whose peak depends on the operands' precision
  (``matrix_gflops`` for 32-bit, ``matrix16_gflops`` for float16/bfloat16).

When the host issues work faster than the device runs it, the device is the
bottleneck (device-bound); when each kernel is shorter than its issue cost,
the device idles between kernels (launch-bound).

The clocks live in the simulated driver (``csrc/driver/clock.cpp``), next to the
streams and events that read them, so ``torch.Event.elapsed_time``, the copies
the C++ runtime makes and the kernels the Python side launches all share one
time line. That time is deterministic: it does not depend on how busy the host is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import native

_C = native.load()

_FIELDS = ("peak_gflops", "bandwidth_gbs", "launch_us", "link_gbs", "link_latency_us", "peer_gbs",
           "peer_latency_us", "event_us", "matrix_gflops", "matrix16_gflops", "host_launch_us", "host_memcpy_gbs")

#: What ``launch(..., matrix=)`` says for each dtype of a matrix product's operands.
_MATRIX_BITS = {torch.float16: 16, torch.bfloat16: 16}


def matrix_unit(dtype: torch.dtype) -> int:
    """The ``matrix=`` argument of :func:`launch` for a matrix product of ``dtype`` operands:
    16 for float16/bfloat16, 32 for everything else."""
    return _MATRIX_BITS.get(dtype, 32)


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
    matrix_gflops: float
    matrix16_gflops: float
    host_launch_us: float
    host_memcpy_gbs: float

    def unit_gflops(self, matrix: int = 0) -> float:
        """Peak GFLOP/s of the unit a kernel runs on: the vector unit (``matrix=0``) or the matrix
        unit at 32 or 16 bits (falling back to the vector unit where the chip has no such unit)."""
        if matrix == 16 and self.matrix16_gflops > 0:
            return self.matrix16_gflops
        if matrix and self.matrix_gflops > 0:
            return self.matrix_gflops
        return self.peak_gflops

    def kernel_us(self, flops: float, nbytes: float, matrix: int = 0) -> float:
        """Simulated microseconds of a kernel doing ``flops`` and moving ``nbytes`` in device memory
        (``matrix``: 0 on the vector unit, 16 or 32 on the matrix unit at that precision)."""
        compute = flops / (self.unit_gflops(matrix) * 1e3)
        memory = nbytes / (self.bandwidth_gbs * 1e3)
        return self.launch_us + max(compute, memory)

    def copy_us(self, nbytes: float) -> float:
        """Simulated microseconds of one host<->device transfer on the link (pinned memory)."""
        return self.link_latency_us + nbytes / (self.link_gbs * 1e3)

    def staging_us(self, nbytes: float) -> float:
        """Host microseconds of the staging memcpy a copy from or to pageable memory adds."""
        return nbytes / (self.host_memcpy_gbs * 1e3) if self.host_memcpy_gbs > 0 else 0.0

    def peer_copy_us(self, nbytes: float) -> float:
        """Simulated microseconds of one copy between two devices."""
        return self.peer_latency_us + nbytes / (self.peer_gbs * 1e3)

    def ridge_point_of(self, matrix: int = 0) -> float:
        """FLOPs per byte above which a kernel on that unit is compute-bound."""
        return self.unit_gflops(matrix) / self.bandwidth_gbs

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte above which a kernel on the vector unit is compute-bound."""
        return self.peak_gflops / self.bandwidth_gbs


@dataclass
class CostModel(_Roofline):
    """Roofline parameters of a simulated chip (a plain record, for what-if calculations).

    Attributes:
        peak_gflops: peak arithmetic throughput of the vector unit, GFLOP/s.
        bandwidth_gbs: device memory bandwidth, GB/s.
        launch_us: fixed cost of launching one kernel, microseconds.
        link_gbs: host<->device link bandwidth, GB/s (PCIe-like).
        link_latency_us: fixed cost of one host<->device copy, microseconds.
        peer_gbs: device<->device link bandwidth, GB/s.
        peer_latency_us: fixed cost of one device<->device copy, microseconds.
        event_us: what recording an event takes on its stream, microseconds (two events recorded
            back to back measure this much apart, as on a real device: never zero).
        matrix_gflops: peak of the matrix unit with 32-bit operands, GFLOP/s (0: matrix products
            run on the vector unit).
        matrix16_gflops: peak of the matrix unit with float16/bfloat16 operands, GFLOP/s (0: as
            with 32-bit operands).
        host_launch_us: host time to issue one kernel or copy (framework dispatch plus the
            driver's launch), microseconds.
        host_memcpy_gbs: host memcpy bandwidth of the staging copy that pageable host memory needs
            on its way to or from the device, GB/s (0: staging is free, pinned or not).
    """

    peak_gflops: float = 2000.0
    bandwidth_gbs: float = 400.0
    launch_us: float = 4.0
    link_gbs: float = 16.0
    link_latency_us: float = 8.0
    peer_gbs: float = 64.0
    peer_latency_us: float = 5.0
    event_us: float = 0.5
    matrix_gflops: float = 0.0
    matrix16_gflops: float = 0.0
    host_launch_us: float = 0.0
    host_memcpy_gbs: float = 0.0


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
    """One activity as the driver saw it: a kernel or a copy on a device stream, or a host wait
    (``"sync"``) or graph launch (``"graph"``), whose start/end are on the host's time line."""

    device: int
    stream: int
    kind: str  # "kernel" | "copy" | "collective" | "sync" | "graph"
    name: str
    flops: float
    bytes_read: int
    bytes_written: int
    start_us: float
    end_us: float
    host_start_us: float = 0.0  # when the host started issuing it (simulated host time)
    host_end_us: float = 0.0    # when the host was done issuing it


#: Called with every KernelRecord; the profiler subscribes here.
Listener = Callable[[KernelRecord], None]


def _dispatch(kind, name, device, stream, flops, bytes_read, bytes_written, start, end, host_start=0.0,
              host_end=0.0) -> None:
    rec = KernelRecord(device, stream, kind, name, flops, bytes_read, bytes_written, start, end, host_start,
                       host_end)
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


def host_time() -> float:
    """Where the host's time line stands, in simulated microseconds."""
    return _C.host_time()


#: ``launch(name, flops, bytes_read, bytes_written, device=-1, matrix=0)``: account one kernel on the
#: current stream of ``device`` (default: the current device); ``matrix`` is 0 for the vector unit, 16
#: or 32 for the matrix unit at that precision (:func:`matrix_unit`). Called by every kernel wrapper.
launch = _C.launch
