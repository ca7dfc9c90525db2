"""What a kernel run cost: bytes moved, FLOPs, scratchpad, launches and simulated time.

The time is the device's own roofline (:mod:`npu_lab.device.clock`, ``npu_lab.cost_model``)::

    time = launch latency + max(FLOPs / peak FLOP/s, bytes / bandwidth)

per launch. A kernel whose *arithmetic intensity* (FLOPs per byte of device memory) is below the
ridge point (peak / bandwidth) is memory-bound: only moving fewer bytes makes it faster.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .model import _fmt_bytes


@dataclass
class Stats:
    """The counts of one kernel run (or of several, added with ``+``).

    Attributes:
        name: the kernel's name.
        grid: the grid it ran on.
        launches: kernel launches.
        bytes_read: device-memory bytes read by ``ctx.load``.
        bytes_written: device-memory bytes written by ``ctx.store``.
        flops: arithmetic on data tiles.
        scratchpad_peak: the most scratchpad bytes any block held at once.
        scratchpad_capacity: the capacity of one block's scratchpad.
        block_peaks: the scratchpad peak of every block, by block id.
        reads: per tensor, how many times each element was read (debug runs only).
        writes: per tensor, how many times each element was written (debug runs only).
        shapes: per tensor, its shape.
        time_us: simulated time on the device's cost model.
        trace: every load and store, in order (a :class:`~npu_lab.puzzles.debug.Trace`; debug runs only).
        mode: which runner ran it: ``"compiled"``, ``"python"`` (with the reason it was not compiled) or
            ``"debug"``.
    """

    name: str = "kernel"
    grid: tuple[int, ...] = ()
    launches: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    flops: float = 0.0
    scratchpad_peak: int = 0
    scratchpad_capacity: int = 0
    block_peaks: dict[tuple[int, ...], int] = field(default_factory=dict)
    reads: dict[str, object] = field(default_factory=dict)
    writes: dict[str, object] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    time_us: float = 0.0
    trace: object | None = None
    mode: str = ""

    @property
    def bytes(self) -> int:
        """Device-memory bytes moved, read and written."""
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """FLOPs per byte of device memory moved."""
        return self.flops / self.bytes if self.bytes else float("inf")

    def __add__(self, other: Stats) -> Stats:
        return Stats(f"{self.name}+{other.name}", self.grid, self.launches + other.launches,
                     self.bytes_read + other.bytes_read, self.bytes_written + other.bytes_written,
                     self.flops + other.flops, max(self.scratchpad_peak, other.scratchpad_peak),
                     max(self.scratchpad_capacity, other.scratchpad_capacity), {}, {}, {},
                     {**self.shapes, **other.shapes}, self.time_us + other.time_us,
                     mode=self.mode if self.mode == other.mode else "mixed")

    def roofline(self) -> Roofline:
        """Where this run sits on the device's roofline."""
        return roofline(self)

    def summary(self) -> str:
        """One paragraph: bytes, FLOPs, scratchpad, time and the roofline verdict."""
        how = f", {self.mode} runner" if self.mode in ("compiled", "debug") else (f", {self.mode}" if self.mode else "")
        lines = [f"{self.name}: {self.launches} launch{'es' if self.launches != 1 else ''} on a grid {self.grid}{how}",
                 f"  device memory: {self.bytes_read:,} B read + {self.bytes_written:,} B written "
                 f"= {self.bytes:,} B",
                 f"  arithmetic:    {self.flops:,.0f} FLOPs",
                 f"  scratchpad:    peak {_fmt_bytes(self.scratchpad_peak)} of {_fmt_bytes(self.scratchpad_capacity)}"
                 " per block",
                 f"  time:          {self.time_us:.3f} us simulated ({self.roofline().verdict()})"]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        from .draw import stats_html

        return stats_html(self)


@dataclass
class Roofline:
    """A run's place on the roofline: intensity against the ridge point, and the time's two parts."""

    intensity: float
    ridge: float
    compute_us: float
    memory_us: float
    launch_us: float
    peak_gflops: float
    bandwidth_gbs: float

    @property
    def bound(self) -> str:
        """``"memory"`` or ``"compute"``: which of the two terms sets the time."""
        return "memory" if self.memory_us >= self.compute_us else "compute"

    @property
    def attained_gflops(self) -> float:
        """GFLOP/s the kernel reaches, launch latency left out."""
        body = max(self.compute_us, self.memory_us)
        return self.peak_gflops * self.compute_us / body if body else 0.0

    def verdict(self) -> str:
        """E.g. ``memory-bound: 0.25 FLOP/B, below the ridge at 5 FLOP/B``."""
        side = "below" if self.intensity < self.ridge else "above"
        return (f"{self.bound}-bound: {self.intensity:.3g} FLOP/B, {side} the ridge at {self.ridge:.3g} FLOP/B; "
                f"{self.attained_gflops:.4g} of {self.peak_gflops:.4g} GFLOP/s")


def device_model() -> object:
    """The cost model the simulated device uses now (``npu_lab.cost_model``)."""
    from ..device.clock import cost_model

    return cost_model.snapshot()


def kernel_us(flops: float, nbytes: float, model: object | None = None) -> float:
    """Simulated microseconds of one launch doing ``flops`` and moving ``nbytes`` (the device's roofline)."""
    m = model or device_model()
    return m.kernel_us(flops, nbytes)


def roofline(stats: Stats, model: object | None = None) -> Roofline:
    """``stats`` on the roofline of ``model`` (default: the device's current cost model)."""
    m = model or device_model()
    return Roofline(stats.intensity, m.ridge_point, stats.flops / (m.peak_gflops * 1e3),
                    stats.bytes / (m.bandwidth_gbs * 1e3), m.launch_us * stats.launches, m.peak_gflops,
                    m.bandwidth_gbs)
