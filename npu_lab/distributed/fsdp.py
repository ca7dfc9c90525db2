"""FSDP (``torch.distributed.fsdp.fully_shard``, FSDP2) on npu, and its memory per device next to DDP's.

DDP keeps a whole copy of the parameters, gradients and optimizer state on every device.
FSDP shards them: each of ``p`` devices keeps ``1/p`` of each, all-gathers a layer's
parameters just before using it (forward and backward) and frees them after, and
reduce-scatters the gradients so each device gets the averaged gradient of its own shard.
Those collectives are npuccl's ``all_gather_into_tensor`` and ``reduce_scatter_tensor``.

:func:`compare_memory` trains the same model both ways in ``world_size`` processes and
returns each run's losses, final parameters and device memory (npu_lab's allocator
counters)::

    from npu_lab.distributed.fsdp import compare_memory
    runs = compare_memory(world_size=2)
    runs["ddp"].peak_bytes, runs["fsdp"].peak_bytes
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from . import timeline
from .overlap import BatchFn, ModelFn, _importable, mlp_model, random_batch

KINDS = ("ddp", "fsdp")


@dataclass
class TrainRun:
    """One training run in one process: losses, final parameters and device memory (bytes)."""

    kind: str  #: "ddp", "fsdp" or "single"
    rank: int
    world_size: int
    losses: list[float]  #: this rank's loss per step (on its slice of the batch)
    params: dict[str, torch.Tensor] = field(repr=False)  #: the whole parameters after training (CPU)
    param_bytes: int  #: parameter bytes this device holds between steps (its shard under FSDP)
    allocated_bytes: int  #: device memory in use after training (parameters, gradients, optimizer state)
    peak_bytes: int  #: peak device memory during the training steps
    sim_us: float  #: simulated time of the training steps on this device
    collectives: dict[str, int] = field(default_factory=dict)  #: npuccl collectives per op during the steps
    comm_bytes: int = 0  #: bytes those collectives moved (as npuccl's cost model counts them)
    per_step: list[dict[str, int]] = field(default_factory=list)  #: npuccl collectives per op, step by step


def _local(p: torch.Tensor) -> torch.Tensor:
    return p.to_local() if hasattr(p, "to_local") else p


def _full(p: torch.Tensor) -> torch.Tensor:
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def train(kind: str, model_fn: ModelFn = mlp_model, batch_fn: BatchFn = random_batch, steps: int = 3,
          lr: float = 1e-3) -> TrainRun:
    """Train ``model_fn()`` for ``steps`` Adam steps, this rank on its slice of each batch.

    ``kind``: ``"ddp"`` (``DistributedDataParallel``), ``"fsdp"`` (``fully_shard`` on each
    ``Linear`` and on the root) or ``"single"`` (no process group: one process, whole batch).
    Memory peaks are measured from after the model is wrapped, over the training steps.
    """
    import torch.distributed as dist

    from ..device import native

    if kind not in (*KINDS, "single"):
        raise ValueError(f"kind must be one of ddp, fsdp, single, got {kind!r}")
    distributed = kind != "single"
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    index = torch.npu.current_device()
    device = torch.device("npu", index)
    module = model_fn().to(device)
    model: nn.Module = module
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(module)
    elif kind == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "no default device selected": launch did set it
            mesh = init_device_mesh("npu", (world,))
        for sub in module.modules():
            if isinstance(sub, nn.Linear):
                fully_shard(sub, mesh=mesh)
        fully_shard(module, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    _C = native.load()
    torch.npu.synchronize(index)
    torch.npu.reset_peak_memory_stats(index)
    t0 = _C.stream_time(index, 0)
    losses = []
    per_step: list[dict[str, int]] = []
    with timeline.recording() as records:
        for i in range(steps):
            before = len(records)
            x, y = batch_fn(i, rank, world)
            opt.zero_grad()
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            losses.append(loss.item())
            per_step.append(dict(Counter(r.op for r in records[before:])))
    counts = dict(Counter(r.op for r in records))
    torch.npu.synchronize(index)
    sim_us = _C.stream_time(index, 0) - t0
    peak, allocated = torch.npu.max_memory_allocated(index), torch.npu.memory_allocated(index)
    param_bytes = sum(_local(p).numel() * p.element_size() for p in module.parameters())
    params = {n: _full(p).detach().cpu() for n, p in module.named_parameters()}
    return TrainRun(kind, rank, world, losses, params, param_bytes, allocated, peak, sim_us, counts,
                    sum(r.nbytes for r in records), per_step)


def _worker(kinds: list[str], model_fn: ModelFn, batch_fn: BatchFn, steps: int, lr: float) -> list[TrainRun]:
    return [train(k, model_fn, batch_fn, steps, lr) for k in kinds]


def compare_memory(model_fn: ModelFn = mlp_model, batch_fn: BatchFn = random_batch, world_size: int = 2,
                   steps: int = 3, lr: float = 1e-3, *, kinds: tuple[str, ...] = KINDS,
                   timeout: float = 300.0) -> dict[str, list[TrainRun]]:
    """Train with each of ``kinds`` (DDP, FSDP) in ``world_size`` processes; one :class:`TrainRun` per rank.

    ``model_fn`` and ``batch_fn`` (``batch_fn(step, rank, world_size) -> (input, target)``) must be
    importable, as for :func:`..overlap.ddp_overlap`. Returns ``{kind: [run of rank 0, rank 1, ...]}``.
    """
    from .launch import launch

    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise ValueError(f"kinds must be taken from {KINDS}, got {kinds!r}")
    if type(world_size) is not int or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    for fn, what in ((model_fn, "model_fn"), (batch_fn, "batch_fn")):
        _importable(fn, what)
    results = launch(_worker, nprocs=world_size, args=(list(kinds), model_fn, batch_fn, steps, lr), timeout=timeout)
    return {k: [res.value[i] for res in results] for i, k in enumerate(kinds)}


def memory_table(runs: dict[str, list[TrainRun]]) -> str:
    """A short text table of :func:`compare_memory`'s result: MB per device for each kind."""
    lines = [f"{'':<6}{'params/device':>15}{'after training':>16}{'peak':>10}{'sim ms':>9}"]
    for kind, per_rank in runs.items():
        r = per_rank[0]
        lines.append(f"{kind:<6}{r.param_bytes / 2**20:>12.2f} MB{r.allocated_bytes / 2**20:>13.2f} MB"
                     f"{r.peak_bytes / 2**20:>7.2f} MB{r.sim_us / 1e3:>9.2f}")
    return "\n".join(lines)
