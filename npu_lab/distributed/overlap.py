"""DDP's gradient buckets and their overlap with backward, measured on the simulated clock.

``DistributedDataParallel`` groups gradients into buckets of about ``bucket_cap_mb``. When
backward has produced every gradient of a bucket, the bucket is *ready* and DDP starts its
allreduce right away, on npuccl's communication stream (:mod:`.timeline`), while backward
keeps computing the earlier layers' gradients on the compute stream. At the end of backward
DDP waits (a stream wait) for the last allreduce. Small buckets start communicating early but
pay the link latency α many times; one big bucket pays it once but cannot start before
backward is over.

:func:`ddp_overlap` measures that from a real DDP run on npu in ``world_size`` processes::

    from npu_lab.distributed import ddp_overlap
    reports = ddp_overlap(bucket_cap_mb=[0.5, 2, 25])      # the default model and batches
    for r in reports:
        print(r.bucket_cap_mb, r.step_us, r.overlap_fraction)
    reports[0].plot()

Each process keeps its own simulated clock (a collective does not align the ranks' clocks);
the ranks run the same model on equal slices, so their timelines agree and rank 0's is shown.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from . import timeline

ModelFn = Callable[[], nn.Module]
BatchFn = Callable[[int, int, int], tuple[torch.Tensor, torch.Tensor]]


def mlp_model(width: int = 512, depth: int = 8, seed: int = 0) -> nn.Module:
    """The default model: ``depth`` ``Linear(width, width)`` layers with ``Tanh`` between (seeded)."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i in range(depth):
        layers.append(nn.Linear(width, width))
        if i < depth - 1:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def random_batch(step: int, rank: int, world_size: int, batch: int = 64,
                 width: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """The default batches: rank ``rank``'s slice of step ``step``'s seeded (input, target) pair, on the CPU."""
    g = torch.Generator().manual_seed(1000 + step)
    x, y = torch.randn(batch, width, generator=g), torch.randn(batch, width, generator=g)
    return x.chunk(world_size)[rank], y.chunk(world_size)[rank]


@dataclass
class Interval:
    """One piece of work on a lane, in simulated microseconds from the start of the step."""

    name: str
    start_us: float
    end_us: float
    phase: str = ""  #: "forward", "backward", "copy-back" or "optimizer" (compute lane)


@dataclass
class BucketTiming:
    """One gradient bucket: when backward made it ready and when its allreduce ran (µs from the step start)."""

    index: int  #: in the order DDP allreduced the buckets
    nbytes: int
    ready_us: float
    start_us: float
    end_us: float

    @property
    def allreduce_us(self) -> float:
        return self.end_us - self.start_us


@dataclass
class OverlapReport:
    """One measured DDP step on the simulated clock of rank 0 (times in µs from the step's start).

    ``step_us``: the whole step (forward, backward, optimizer, all communication done).
    ``compute_us``: time the compute stream was busy. ``comm_us``: total allreduce time.
    ``exposed_comm_us``: time the compute stream stood idle waiting for communication
    (``step_us - compute_us``); ``overlap_fraction``: the share of ``comm_us`` hidden under compute.
    """

    bucket_cap_mb: float
    world_size: int
    step_us: float
    compute_us: float
    comm_us: float
    backward_start_us: float
    backward_end_us: float
    buckets: list[BucketTiming]
    compute: list[Interval]
    host_step_s: float  #: host seconds of the measured step (varies run to run)
    step_us_per_rank: list[float] = field(default_factory=list)

    @property
    def exposed_comm_us(self) -> float:
        return max(0.0, self.step_us - self.compute_us)

    @property
    def serial_us(self) -> float:
        """What the step would take with no overlap: compute, then every allreduce."""
        return self.compute_us + self.comm_us

    @property
    def overlap_fraction(self) -> float:
        if self.comm_us <= 0:
            return 0.0
        return max(0.0, min(1.0, (self.comm_us - self.exposed_comm_us) / self.comm_us))

    def summary(self) -> str:
        """One line: bucket size, buckets, step, compute, communication and how much of it was hidden."""
        n = len(self.buckets)
        return (f"bucket_cap_mb={self.bucket_cap_mb:g}: {n} bucket{'s' if n != 1 else ''}, step {self.step_us:.1f} us "
                f"(compute {self.compute_us:.1f} + allreduce {self.comm_us:.1f} = {self.serial_us:.1f} us serial), "
                f"{100 * self.overlap_fraction:.0f}% of communication hidden")

    def __repr__(self) -> str:
        return f"<OverlapReport {self.summary()}>"

    def plot(self, ax: Any = None) -> Any:
        """Draw the step: the compute lane (forward, backward, DDP's copy-back, optimizer) over the comm lane
        (one bar per bucket)."""
        import matplotlib.pyplot as plt

        ax = ax or plt.subplots(figsize=(9, 2.6))[1]
        colors = {"forward": "#9ecae1", "backward": "#3182bd", "copy-back": "#fed976", "optimizer": "#a1d99b"}
        for phase, color in colors.items():
            spans = [(c.start_us, max(c.end_us - c.start_us, 0.05)) for c in self.compute if c.phase == phase]
            ax.broken_barh(spans, (1.1, 0.8), color=color, label=phase)
        palette = plt.get_cmap("tab10").colors
        for b in self.buckets:
            color = palette[b.index % len(palette)]
            ax.broken_barh([(b.start_us, b.allreduce_us)], (0.1, 0.8), color=color, edgecolor="k", lw=0.5)
            ax.plot([b.ready_us, b.ready_us], [1.05, 1.95], color=color, lw=1.5)
            if b.allreduce_us > 0.06 * self.step_us:
                ax.text(b.start_us + b.allreduce_us / 2, 0.5, f"b{b.index}\n{b.nbytes / 2**20:.1f}MB",
                        ha="center", va="center", fontsize=7)
        ax.set_yticks([0.5, 1.5], ["comm stream\n(allreduce)", "compute stream"])
        ax.set_xlim(0, self.step_us * 1.02)
        ax.set_ylim(0, 2)
        ax.set_xlabel("simulated time in the step (us); ticks on the compute lane: a bucket became ready")
        ax.set_title(f"DDP, {self.world_size} processes, bucket_cap_mb={self.bucket_cap_mb:g}: "
                     f"step {self.step_us:.0f} us, {100 * self.overlap_fraction:.0f}% of allreduce hidden",
                     fontsize=10)
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
        return ax


def mse_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The default loss of :func:`ddp_overlap` (a module-level function, so spawned workers can import it)."""
    return F.mse_loss(out, target)


def measure_step(model_fn: ModelFn, batch_fn: BatchFn, cap: float, warmup: int = 2,
                 loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = mse_loss) -> dict[str, Any]:
    """In a worker process: train ``warmup`` DDP steps with ``bucket_cap_mb=cap``, then measure one step on
    the simulated clock. Returns plain data (picklable); :func:`report` turns every rank's into an
    :class:`OverlapReport`. :func:`ddp_overlap` launches the workers itself; call this from a worker of
    your own launch to measure inside a bigger run (as chapter 9 does)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from ..device import clock, native

    _C = native.load()
    rank, world = dist.get_rank(), dist.get_world_size()
    index = torch.npu.current_device()
    device = torch.device("npu", index)
    model = DistributedDataParallel(model_fn().to(device), bucket_cap_mb=cap)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(i: int) -> None:
        x, y = batch_fn(i, rank, world)
        opt.zero_grad()
        loss_fn(model(x.to(device)), y.to(device)).backward()
        opt.step()

    for i in range(warmup):  # the first step builds the buckets, then DDP rebuilds them in gradient order
        step(i)
    x, y = batch_fn(warmup, rank, world)
    x, y = x.to(device), y.to(device)
    opt.zero_grad()
    compute = _C.current_stream(index)
    dist.barrier()
    _C.synchronize(index)
    s0 = _C.stream_time(index, compute)
    kernels: list[clock.KernelRecord] = []
    t0 = time.perf_counter()
    clock.listeners.append(kernels.append)  # every kernel and copy on the device clock (as the profiler sees them)
    try:
        with timeline.recording() as records:
            loss = loss_fn(model(x), y)
            bwd0 = _C.stream_time(index, compute)
            loss.backward()
            bwd1 = _C.stream_time(index, compute)
            opt.step()
            _C.synchronize(index)
    finally:
        clock.listeners.remove(kernels.append)
    host_s = time.perf_counter() - t0
    end = _C.stream_time(index, compute)
    buckets = [(r.nbytes, r.ready_us - s0, r.start_us - s0, r.end_us - s0)
               for r in records if r.op == "allreduce" and r.device == index]
    # After the last bucket is ready, what backward() still runs on the compute stream is DDP's: it waits for
    # the allreduces and copies the averaged buckets back into each parameter's .grad.
    last_ready = max((s0 + ready for _, ready, _, _ in buckets), default=bwd1)
    intervals = []
    for k in kernels:
        if k.device != index or k.stream != compute or k.kind not in ("kernel", "copy"):
            continue
        phase = ("forward" if k.start_us < bwd0 else "backward" if k.start_us < last_ready
                 else "copy-back" if k.start_us < bwd1 else "optimizer")
        intervals.append((k.name, k.start_us - s0, k.end_us - s0, phase))
    return {"step_us": end - s0, "compute_us": sum(e - s for _, s, e, _ in intervals),
            "backward": (bwd0 - s0, bwd1 - s0), "buckets": buckets, "compute": intervals, "host_s": host_s}


def _worker(model_fn: ModelFn, batch_fn: BatchFn, caps: list[float], warmup: int,
            loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
            cost_model: dict[str, float]) -> list[dict[str, Any]]:
    from ..device.clock import cost_model as live

    for name, value in cost_model.items():
        setattr(live, name, value)
    return [measure_step(model_fn, batch_fn, cap, warmup, loss_fn) for cap in caps]


def report(cap: float, world: int, per_rank: list[dict[str, Any]]) -> OverlapReport:
    """The :class:`OverlapReport` of one bucket size from what :func:`measure_step` returned on each rank
    (drawn from rank 0's clock; every rank's step time is kept)."""
    r0 = per_rank[0]
    buckets = [BucketTiming(i, n, ready, start, end) for i, (n, ready, start, end) in enumerate(r0["buckets"])]
    compute = [Interval(name, s, e, phase) for name, s, e, phase in r0["compute"]]
    return OverlapReport(cap, world, r0["step_us"], r0["compute_us"], sum(b.allreduce_us for b in buckets),
                         r0["backward"][0], r0["backward"][1], buckets, compute, r0["host_s"],
                         [r["step_us"] for r in per_rank])


def _importable(fn: Callable[..., Any], what: str) -> None:
    target = fn.func if isinstance(fn, functools.partial) else fn
    if not callable(target):
        raise TypeError(f"{what} must be callable, got {type(fn).__name__}")
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", "")
    if module in (None, "__main__") or "<locals>" in qualname or "<lambda>" in qualname:
        raise TypeError(f"{what} ({qualname or target!r}) must be importable by the worker processes: a "
                        f"module-level function of a .py file (or a functools.partial of one), not one "
                        f"defined in the notebook")


def ddp_overlap(model_fn: ModelFn = mlp_model, batch_fn: BatchFn = random_batch,
                bucket_cap_mb: float | Sequence[float] = 25.0, world_size: int = 2, *, warmup: int = 2,
                loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = mse_loss,
                cost_model: dict[str, float] | None = None,
                timeout: float = 300.0) -> OverlapReport | list[OverlapReport]:
    """Measure DDP's bucket/backward overlap in ``world_size`` processes on npu (simulated clock).

    Args:
        model_fn: builds the model on the CPU (same weights in every process: seed inside it).
        batch_fn: ``batch_fn(step, rank, world_size) -> (input, target)``, this rank's slice.
        bucket_cap_mb: DDP's bucket size in MB, or a list of them (one process launch for all).
        world_size: number of processes.
        warmup: DDP steps before the measured one (DDP rebuilds its buckets after the first).
        loss_fn: ``loss_fn(output, target)``; mean squared error by default.
        cost_model: figures of ``npu_lab.cost_model`` to set in the workers (each is a fresh
            process with the default figures), e.g. ``{"peer_latency_us": 20.0}`` for a slower link.
        timeout: seconds the whole run may take.

    ``model_fn``, ``batch_fn`` and ``loss_fn`` run in spawned processes, so they must be
    importable (module-level functions, or ``functools.partial`` of them). Returns one
    :class:`OverlapReport` (or a list, for a list of sizes) with per-bucket ready time,
    allreduce start/end on the communication stream, the compute lane and the step time.
    """
    from .launch import launch

    caps = [bucket_cap_mb] if isinstance(bucket_cap_mb, int | float) else list(bucket_cap_mb)
    if not caps or any(not isinstance(c, int | float) or c <= 0 for c in caps):
        raise ValueError(f"bucket_cap_mb must be a positive number or a list of them, got {bucket_cap_mb!r}")
    if type(world_size) is not int or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    for fn, what in ((model_fn, "model_fn"), (batch_fn, "batch_fn"), (loss_fn, "loss_fn")):
        _importable(fn, what)
    from ..device.clock import _FIELDS

    figures = dict(cost_model or {})
    unknown = sorted(set(figures) - set(_FIELDS))
    if unknown:
        raise ValueError(f"cost_model: unknown figures {unknown}; the cost model has {', '.join(_FIELDS)}")
    results = launch(_worker, nprocs=world_size, args=(model_fn, batch_fn, caps, warmup, loss_fn, figures),
                     timeout=timeout)
    reports = [report(cap, world_size, [res.value[i] for res in results]) for i, cap in enumerate(caps)]
    return reports[0] if isinstance(bucket_cap_mb, int | float) else reports
