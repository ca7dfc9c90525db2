"""Worker functions chapter 9 runs in several processes (through :func:`..launch.launch`).

A spawned process can only run a function it can import, so the chapter's experiments live here
rather than in the notebook. Each runs inside an initialised process group (``launch`` did
``init_process_group``), on the npu device ``rank % device count``, and returns plain data.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F  # noqa: N812

from ...device.clock import clock
from ...profiler import profile


def mlp(width: int = 256, depth: int = 4, seed: int = 0) -> nn.Sequential:
    """The chapter's model: ``depth`` ``Linear(width, width)`` layers with ``Tanh`` between them."""
    from ..overlap import mlp_model

    return mlp_model(width, depth, seed)


def batches(steps: int, batch: int, width: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` (input, target) pairs of the whole batch, the same in every process (seeded)."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, width, generator=g), torch.randn(batch, width, generator=g)) for _ in range(steps)]


def by_op(prof: Any) -> dict[str, float]:
    """Simulated device microseconds per ATen operator (or collective) in a profile of one step."""
    out: dict[str, float] = {}
    for k in prof.kernels:
        key = k.op or k.name
        out[key] = out.get(key, 0.0) + k.sim_us
    return out


def launches_by_op(prof: Any) -> dict[str, int]:
    """Kernel launches and copies per ATen operator (or collective) in a profile of one step."""
    out: dict[str, int] = {}
    for k in prof.kernels:
        key = k.op or k.name
        out[key] = out.get(key, 0) + 1
    return out


def _device() -> torch.device:
    return torch.device("npu", torch.npu.current_device())


def _sim_now(device: torch.device) -> float:
    return clock(device.index).synchronize()


def train_one_process(steps: int = 3, batch: int = 32, width: int = 256, depth: int = 4,
                      device: str = "npu:0") -> dict[str, Any]:
    """Train the chapter's model on whole batches on one device (the reference DDP must equal).

    Returns each step's loss, simulated microseconds and host seconds, the device time per operator of the last
    step (:func:`by_op`), and the final parameters."""
    model = mlp(width, depth).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, sim_us, host_s = [], [], []
    dev = torch.device(device)
    for x, y in batches(steps, batch, width):
        x, y = x.to(dev), y.to(dev)
        t0 = time.perf_counter()
        with profile() as prof:
            s0 = _sim_now(dev)
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            sim_us.append(_sim_now(dev) - s0)
        host_s.append(time.perf_counter() - t0)
        losses.append(loss.item())
    return {"losses": losses, "sim_us": sim_us, "host_s": host_s, "device_us_by_op": by_op(prof),
            "launches_by_op": launches_by_op(prof),
            "params": {k: v.detach().cpu() for k, v in model.state_dict().items()}}


def ddp_train(steps: int = 3, batch: int = 32, width: int = 256, depth: int = 4, bucket_cap_mb: float = 25.0,
              warmup: int = 1) -> dict[str, Any]:
    """Train the chapter's model with DDP, each rank on its slice of every batch.

    Trains ``warmup + steps`` steps. Returns the losses of every step (of the whole batch: the ranks'
    losses averaged), the final parameters, and the host seconds and simulated microseconds of each
    step after the ``warmup`` ones, and the bytes and number of collectives and the device time per
    operator (:func:`by_op`) of the last step.
    """
    from torch.nn.parallel import DistributedDataParallel

    rank, world = dist.get_rank(), dist.get_world_size()
    device = _device()
    model = DistributedDataParallel(mlp(width, depth).to(device), bucket_cap_mb=bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, host_s, sim_us = [], [], []
    for i, (x, y) in enumerate(batches(steps + warmup, batch, width)):
        xs, ys = x.chunk(world)[rank].to(device), y.chunk(world)[rank].to(device)
        with _CountBytes() as counted, profile() as prof:
            t0, s0 = time.perf_counter(), _sim_now(device)
            opt.zero_grad()
            loss = F.mse_loss(model(xs), ys)
            loss.backward()
            opt.step()
            s1 = _sim_now(device)
            t1 = time.perf_counter()
        whole = loss.detach().clone()
        dist.all_reduce(whole, op=dist.ReduceOp.AVG)
        losses.append(whole.item())
        if i >= warmup:
            host_s.append(t1 - t0)
            sim_us.append(s1 - s0)
    return {"losses": losses, "host_s": host_s, "sim_us": sim_us, "world": world,
            "comm_bytes": counted.nbytes, "collectives": counted.calls, "device_us_by_op": by_op(prof),
            "launches_by_op": launches_by_op(prof),
            "params": {k: v.detach().cpu() for k, v in model.module.state_dict().items()}}


def dp_train(steps: int = 3, batch: int = 32, width: int = 256, depth: int = 4, warmup: int = 1,
             devices: tuple[int, ...] = (0, 1)) -> dict[str, Any]:
    """The same training with ``nn.DataParallel`` in this one process (threads over ``devices``)."""
    import warnings

    main = torch.device("npu", devices[0])
    model = mlp(width, depth).to(main)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dp = nn.DataParallel(model, device_ids=list(devices)) if len(devices) > 1 else model
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        losses, host_s, sim_us = [], [], []
        for i, (x, y) in enumerate(batches(steps + warmup, batch, width)):
            t0 = time.perf_counter()
            s0 = max(clock(d).synchronize() for d in devices)
            opt.zero_grad()
            loss = F.mse_loss(dp(x.to(main)), y.to(main))
            loss.backward()
            opt.step()
            s1 = max(clock(d).synchronize() for d in devices)
            t1 = time.perf_counter()
            losses.append(loss.item())
            if i >= warmup:
                host_s.append(t1 - t0)
                sim_us.append(s1 - s0)
    return {"losses": losses, "host_s": host_s, "sim_us": sim_us, "world": len(devices),
            "params": {k: v.detach().cpu() for k, v in model.state_dict().items()}}


def host_step_times(rounds: int = 7, batch: int = 32, width: int = 256, depth: int = 4,
                    devices: tuple[int, ...] = (0, 1)) -> dict[str, float]:
    """Median host seconds of one training step on one device and with ``nn.DataParallel``, in this process.

    Both are warmed up first (two steps each), then timed in alternating rounds, the order swapped every
    round, so that neither warm-up nor a slower stretch of the machine decides which looks faster.
    """
    import warnings

    main = torch.device("npu", devices[0])
    one = mlp(width, depth).to(main)
    model = mlp(width, depth).to(main)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dp = nn.DataParallel(model, device_ids=list(devices))
    runs = {"one device": (one, torch.optim.SGD(one.parameters(), lr=0.05)),
            "DP": (dp, torch.optim.SGD(model.parameters(), lr=0.05))}
    x, y = batches(1, batch, width)[0]
    x, y = x.to(main), y.to(main)

    def step(name: str) -> float:
        net, opt = runs[name]
        t0 = time.perf_counter()
        opt.zero_grad()
        F.mse_loss(net(x), y).backward()
        opt.step()
        for d in devices:
            clock(d).synchronize()
        return time.perf_counter() - t0

    times: dict[str, list[float]] = {name: [] for name in runs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in runs:
            step(name), step(name)
        for r in range(rounds):
            for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                times[name].append(step(name))
    return {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}


def ddp_host_times(rounds: int = 5, per_device_batch: int = 16, width: int = 256, depth: int = 4) -> dict[str, float]:
    """Median host seconds of one training step in this rank's process: one device on the whole batch, and DDP
    on this rank's slice of it.

    The same comparison as :func:`host_step_times`, inside the DDP processes: both warmed up first (two steps
    each), then timed in alternating rounds, the order swapped every round (every rank follows the same order,
    so the DDP steps' all-reduces still match).
    """
    from torch.nn.parallel import DistributedDataParallel

    rank, world = dist.get_rank(), dist.get_world_size()
    device = _device()
    one, model = mlp(width, depth).to(device), mlp(width, depth).to(device)
    ddp = DistributedDataParallel(model, bucket_cap_mb=25.0)
    x, y = batches(1, per_device_batch * world, width)[0]
    x, y = x.to(device), y.to(device)
    runs = {"one device": (one, torch.optim.SGD(one.parameters(), lr=0.05), x, y),
            "DDP": (ddp, torch.optim.SGD(ddp.parameters(), lr=0.05), x.chunk(world)[rank], y.chunk(world)[rank])}

    def step(name: str) -> float:
        net, opt, inputs, target = runs[name]
        t0 = time.perf_counter()
        opt.zero_grad()
        F.mse_loss(net(inputs), target).backward()
        opt.step()
        _sim_now(device)
        return time.perf_counter() - t0

    for name in runs:
        step(name), step(name)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(rounds):
        for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            times[name].append(step(name))
    return {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}


def allreduce_times(sizes: list[int], repeat: int = 3) -> dict[str, Any]:
    """Host seconds and simulated microseconds of one all-reduce of each size (float32 elements)."""
    device = _device()
    host, sim = [], []
    for n in sizes:
        t = torch.ones(n, device=device)
        dist.all_reduce(t)  # warm up (and check)
        best = float("inf")
        for _ in range(repeat):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            best = min(best, time.perf_counter() - t0)
        s0 = _sim_now(device)
        dist.all_reduce(t)
        sim.append(_sim_now(device) - s0)
        host.append(best)
    return {"sizes": list(sizes), "host_s": host, "sim_us": sim, "world": dist.get_world_size()}


def collective_times(nbytes: int = 2 ** 20) -> dict[str, Any]:
    """Simulated microseconds of one all-gather, reduce-scatter, broadcast and all-reduce, each of an ``nbytes``
    whole (float32), as this rank's device clock records them (each collective warmed up once first).

    ``nbytes`` is the gathered whole for the all-gather (each rank contributes ``nbytes / p``), the whole input
    for the reduce-scatter (each rank keeps ``nbytes / p``), and the buffer for the broadcast and the all-reduce.
    """
    device = _device()
    p = dist.get_world_size()
    n = nbytes // 4
    whole, part = torch.ones(n, device=device), torch.ones(n // p, device=device)
    runs = {"allgather": lambda: dist.all_gather_into_tensor(whole, part),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, whole),
            "broadcast": lambda: dist.broadcast(whole, src=0),
            "allreduce": lambda: dist.all_reduce(whole)}
    out: dict[str, Any] = {"world": p, "nbytes": nbytes}
    for op, run in runs.items():
        run()  # warm up
        dist.barrier()
        s0 = _sim_now(device)
        run()
        out[op] = _sim_now(device) - s0
    return out


def desync(swap: bool = True, n_big: int = 1024, n_small: int = 16) -> str:
    """Two all-reduces; with ``swap`` the odd ranks call them in the other order (a desync bug)."""
    device = _device()
    big, small = torch.ones(n_big, device=device), torch.ones(n_small, device=device)
    order = [big, small] if not (swap and dist.get_rank() % 2) else [small, big]
    for t in order:
        dist.all_reduce(t)
    return "finished"


def tp_vs_dp(batch: int = 32, width: int = 256, hidden: int = 1024) -> dict[str, Any]:
    """One forward+backward of a 2-layer MLP, tensor-parallel vs data-parallel, with the bytes each moves.

    Counts, on this rank, the parameter bytes it holds and the bytes its collectives carry (from the
    same numbers the debug log prints), and the simulated step time.
    """
    from torch.nn.parallel import DistributedDataParallel

    from ..tensor_parallel import ParallelMLP

    rank, world = dist.get_rank(), dist.get_world_size()
    device = _device()
    torch.manual_seed(0)
    fc1, fc2 = nn.Linear(width, hidden).to(device), nn.Linear(hidden, width).to(device)
    x, y = batches(1, batch, width)[0]
    x, y = x.to(device), y.to(device)
    out: dict[str, Any] = {}
    tp = ParallelMLP.from_mlp(fc1, fc2, nn.GELU())
    dp = DistributedDataParallel(nn.Sequential(copy.deepcopy(fc1), nn.GELU(), copy.deepcopy(fc2)))
    for name, model, inputs, target in (("TP", tp, x, y),
                                        ("DP", dp, x.chunk(world)[rank], y.chunk(world)[rank])):
        for _ in range(3):  # the third step is measured: DDP rebuilds its buckets before the second one
            with _CountBytes() as counted:
                s0 = _sim_now(device)
                F.mse_loss(model(inputs), target).backward()
                s1 = _sim_now(device)
        out[name] = {"param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
                     "comm_bytes": counted.nbytes, "collectives": counted.calls, "by_op": dict(counted.by_op),
                     "sim_us": s1 - s0}
    return out


class _CountBytes:
    """Counts the collectives npuccl issues (and their bytes) while active, by wrapping its ``_issue``."""

    def __enter__(self) -> _CountBytes:
        from ..process_group import ProcessGroupNPUCCL

        self.nbytes, self.calls = 0, 0
        self.by_op: dict[str, int] = {}
        self._cls = ProcessGroupNPUCCL
        self._orig = ProcessGroupNPUCCL._issue
        counter = self

        def issue(pg: Any, op: str, tensors: Any, call: Any, **kw: Any) -> Any:
            counter.nbytes += kw.get("nbytes", 0)
            counter.calls += 1
            counter.by_op[op] = counter.by_op.get(op, 0) + 1
            return counter._orig(pg, op, tensors, call, **kw)

        ProcessGroupNPUCCL._issue = issue
        return self

    def __exit__(self, *exc: object) -> None:
        self._cls._issue = self._orig



def chapter_suite(steps: int = 3, per_device_batch: int = 16, width: int = 256, depth: int = 4,
                  sizes: tuple[int, ...] = (2 ** 10, 2 ** 14, 2 ** 18), bucket_caps: tuple[float, ...] = (),
                  fsdp: bool = False) -> dict[str, Any]:
    """Chapter 9's measurements in one set of processes (starting processes is the slow part here).

    DDP training with ``per_device_batch`` samples per rank (:func:`ddp_train`), all-reduce times
    (:func:`allreduce_times`) and the other collectives' (:func:`collective_times`); with 2 ranks also tensor
    vs data parallelism (:func:`tp_vs_dp`) and the host time of a step, one device vs DDP
    (:func:`ddp_host_times`) and, on rank 0, one device vs DP (:func:`host_step_times`); DDP's bucket overlap
    for each of ``bucket_caps`` (:mod:`npu_lab.distributed.overlap`, its default model), and with ``fsdp`` the
    memory of DDP and FSDP training (:func:`npu_lab.distributed.fsdp.train`).
    """
    world = dist.get_world_size()
    out: dict[str, Any] = {"ddp": ddp_train(steps, per_device_batch * world, width, depth),
                           "allreduce": allreduce_times(list(sizes)), "collectives": collective_times()}
    if world == 2:
        out["tp_vs_dp"] = tp_vs_dp(per_device_batch * world, width)
        out["host"] = ddp_host_times(per_device_batch=per_device_batch, width=width, depth=depth)
        # DP in rank 0's process, with the same one kernel thread per process as the DDP side (rank 1 waits)
        out["host_dp"] = (host_step_times(batch=per_device_batch * world, width=width, depth=depth)
                          if dist.get_rank() == 0 else None)
        dist.barrier()
    if bucket_caps:
        from .. import overlap

        out["overlap"] = [overlap.measure_step(overlap.mlp_model, overlap.random_batch, cap) for cap in bucket_caps]
    if fsdp:
        from .. import fsdp as fsdp_module

        out["memory"] = {kind: fsdp_module.train(kind) for kind in fsdp_module.KINDS}
    return out
