"""Chapter 9: distributed training - collectives, DDP's buckets, tensor parallelism, the cost model.

Four exercises:

* ``ch9.ring_allreduce`` - an all-reduce written with send and receive only, checked for the sum
  on every rank and for the bytes each link carries (2(N-1)/N of the tensor);
* ``ch9.bucket_size`` - choose DDP's bucket size so the all-reduces hide behind the backward
  (graded on the simulated clock);
* ``ch9.column_parallel`` - a column-parallel linear layer's forward and backward;
* ``ch9.predict_time`` - a collective's time from the α–β cost model.

The ranks of the first and third exercises are threads, each with its own npuccl process group over
one shared store (the same gloo transport as between processes): :func:`run_ranks`, which the learner
can call from the notebook too. The checks run the ranks in a forked copy of the notebook's process
(:func:`npu_lab.grading.forked.call_forked`): the learner's functions are there, defined in the
notebook, and a rank that never ends (a sleep in C code, blocked signals, a compiled loop) is killed
with its process instead of running on beside later checks. The helpers below (:func:`run_ranks`,
:func:`trace_backward`, :func:`step_time_us`...) are the ones the chapter uses.
"""

from __future__ import annotations

import collections
import ctypes
import datetime
import itertools
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ..distributed import cost
from ..grading.forked import call_forked
from ..grading.inputs import randn
from ..grading.references import measured
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester, short
from ..grading.values import check_plain, is_plain_tensor, tensors_close

chapter("ch9", "Distributed training: several NPUs, collectives, DDP, FSDP, tensor parallelism", [
    "DataParallel is one process driving every device from threads; DDP is one process per device",
    "A collective backend (NCCL, HCCL, npuccl) is registered with torch.distributed and moves device buffers",
    "Ring all-reduce is a reduce-scatter then an all-gather: each link carries 2(N-1)/N of the data",
    "A collective costs latency (α per step) plus bytes over bandwidth (β): small messages pay α, big ones β",
    "DDP buckets gradients and all-reduces each bucket while the backward is still computing the rest",
    "FSDP shards parameters, gradients and optimizer state and gathers each layer's weights just in time",
    "Tensor parallelism splits each layer's weights: column-parallel then row-parallel costs one all-reduce",
    "A desync (ranks calling different collectives) shows in the debug log as mismatched ops or sizes",
])


# ---------------------------------------------------------------------------------------------
# ranks as threads: one npuccl process group per thread over one store
# ---------------------------------------------------------------------------------------------

_GROUPS = itertools.count()
#: The groups of recent runs, kept alive a while: a gloo group freed by the last callback of one of
#: its own worker threads would join that thread from itself (``std::terminate``). Old ones are
#: freed here, in the calling thread, long after their last collective.
_RECENT: collections.deque = collections.deque(maxlen=64)


class RankStopped(BaseException):
    """Raised inside a rank thread that outlived its time (a BaseException, so ``except Exception`` does not
    swallow it; it is raised again until the thread ends)."""


def _stop(threads: list[threading.Thread]) -> None:
    """End the rank threads still running: a background thread raises :class:`RankStopped` in each, again
    and again (every 50 ms, then less often) while it lives.

    It runs outside the main thread, so the check's own refiring timeout cannot interrupt it. A thread
    blocked inside C code (a ``recv`` waiting for a peer, a ``sleep``) gets the exception when the call
    returns, which the collective timeout bounds for collectives."""
    live = [th for th in threads if th.is_alive()]
    if not live:
        return

    def reap() -> None:
        pause = 0.05
        while True:
            alive = [th for th in live if th.is_alive() and th.ident is not None]
            if not alive:
                return
            for th in alive:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(th.ident), ctypes.py_object(RankStopped))
            time.sleep(pause)
            pause = min(pause * 1.5, 1.0)

    threading.Thread(target=reap, daemon=True, name="ch9-rank-reaper").start()


def run_ranks(world_size: int, body: Callable[[int, dist.ProcessGroup], Any], timeout: float = 30.0,
              collective_timeout: float = 10.0) -> list[Any]:
    """``[body(rank, group) for each rank]``, the ranks running at once as threads of this process.

    Each thread gets its own :class:`~npu_lab.distributed.ProcessGroupNPUCCL` of ``world_size``
    ranks (the groups meet through one in-memory store), so the bodies can exchange npu tensors
    with ``group.send`` / ``group.recv`` / ``group.allreduce`` as processes would. A rank that
    raises makes this raise its exception (after the others finish or time out); a rank still
    running after ``timeout`` seconds raises ``TimeoutError``.
    """
    from ..distributed.process_group import ProcessGroupNPUCCL

    if type(world_size) is not int or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    store = dist.PrefixStore(f"ch9/{next(_GROUPS)}/", dist.HashStore())
    results: list[Any] = [None] * world_size
    errors: list[BaseException | None] = [None] * world_size
    groups: list[Any] = [None] * world_size

    def main(rank: int) -> None:
        try:
            group = ProcessGroupNPUCCL(store, rank, world_size, datetime.timedelta(seconds=collective_timeout))
            groups[rank] = group
            results[rank] = body(rank, group)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            errors[rank] = exc

    threads = [threading.Thread(target=main, args=(r,), daemon=True, name=f"rank{r}") for r in range(world_size)]
    for th in threads:
        th.start()
    deadline = time.monotonic() + timeout
    try:
        for th in threads:
            th.join(max(0.0, deadline - time.monotonic()))
        stuck = [r for r, th in enumerate(threads) if th.is_alive()]
    finally:  # also when the check's own time limit interrupts the wait: no rank keeps running afterwards
        _stop(threads)
    _RECENT.append(groups)
    if stuck:
        raise TimeoutError(f"ranks {stuck} did not finish within {timeout:g} s: is every rank waiting to receive "
                           f"before anyone sends (a deadlock)?")
    for exc in errors:
        if exc is not None:
            raise exc
    return results


class Wire:
    """``send`` and ``recv`` for one rank, counting the bytes each link carries.

    ``send(t, dst)`` hands a copy of ``t`` to the network and returns at once (like a buffered
    ``dist.isend``); ``recv(t, src)`` waits for the next message from ``src`` and writes it into ``t``.
    """

    def __init__(self, rank: int, world_size: int, group: dist.ProcessGroup, links: dict[tuple[int, int], int]):
        self.rank, self.world_size, self.group, self.links = rank, world_size, group, links
        self.pending: list[Any] = []

    def _peer(self, peer: Any, what: str) -> int:
        if type(peer) is not int or not 0 <= peer < self.world_size or peer == self.rank:
            raise ValueError(f"{what}: the peer must be another rank, an int in [0, {self.world_size}) other than "
                             f"{self.rank}, got {peer!r}")
        return peer

    @staticmethod
    def _tensor(t: Any, what: str) -> torch.Tensor:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what} takes a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "npu":
            raise TypeError(f"{what}: keep the data on the npu (got a tensor on {t.device})")
        return t

    def send(self, t: torch.Tensor, dst: int) -> None:
        """Send (a copy of) ``t`` to rank ``dst``; returns without waiting for it to arrive."""
        t, dst = self._tensor(t, "send"), self._peer(dst, "send")
        self.links[(self.rank, dst)] = self.links.get((self.rank, dst), 0) + t.numel() * t.element_size()
        self.pending.append(self.group.send([t.detach().contiguous().clone()], dst, 0))

    def recv(self, t: torch.Tensor, src: int) -> torch.Tensor:
        """Receive the next message from rank ``src`` into ``t`` (same size as what was sent); returns ``t``."""
        t, src = self._tensor(t, "recv"), self._peer(src, "recv")
        self.group.recv([t], src, 0).wait()
        return t

    def finish(self) -> None:
        for work in self.pending:
            work.wait()


#: Seconds the ranks of one case may run inside the check (then :func:`run_ranks` gives up on them).
RANKS_TIMEOUT = 30.0
#: Seconds the forked process running them may take in all (then it is killed).
CHILD_TIMEOUT = RANKS_TIMEOUT + 15.0


# ---------------------------------------------------------------------------------------------
# ch9.ring_allreduce
# ---------------------------------------------------------------------------------------------

#: (world size, shape, hidden)
RING_CASES = [(2, (8,), False), (3, (12,), False), (4, (10,), True), (3, (7,), True), (5, (2, 13), True)]


def _ring_inputs(world: int, shape: tuple[int, ...]) -> list[torch.Tensor]:
    return [randn(*shape, seed=100 + 7 * world + r) for r in range(world)]


def drive_ring(ring_allreduce: Callable[..., Any], world: int, shape: tuple[int, ...]) -> dict[str, Any]:
    """Run ``ring_allreduce(tensor, rank, world_size, send, recv)`` on ``world`` thread-ranks, in a forked
    process (see the module's docstring).

    Returns what each rank returned (on the CPU, as plain data) and the bytes each link ``(src, dst)`` carried.
    """
    inputs = _ring_inputs(world, shape)

    def run() -> dict[str, Any]:
        links: dict[tuple[int, int], int] = {}

        def body(rank: int, group: dist.ProcessGroup) -> Any:
            wire = Wire(rank, world, group, links)
            out = ring_allreduce(inputs[rank].to("npu"), rank, world, wire.send, wire.recv)
            wire.finish()
            return out.detach().cpu() if is_plain_tensor(out) else out

        results = run_ranks(world, body, timeout=RANKS_TIMEOUT)
        return {"results": results, "links": dict(links)}

    return call_forked(run, CHILD_TIMEOUT)


def _waited_in_vain(outcome: Any) -> bool:
    """Whether a run failed because a rank waited out the collective timeout (a deadlock)."""
    text = (outcome.error or "").lower()
    return outcome.timed_out or "timed out" in text or "did not finish" in text


def ring_bytes_bounds(world: int, numel: int, element_size: int = 4) -> tuple[int, int]:
    """(least, most) bytes one ring link carries: 2(N-1) chunks, each ⌊n/N⌋ or ⌈n/N⌉ elements."""
    return 2 * (world - 1) * (numel // world) * element_size, 2 * (world - 1) * -(-numel // world) * element_size


def _is_ring(links: dict[tuple[int, int], int], world: int) -> bool:
    """Every rank sends to exactly one peer, and following those sends visits every rank once."""
    nxt: dict[int, int] = {}
    for src, dst in links:
        if src in nxt:
            return False
        nxt[src] = dst
    if sorted(nxt) != list(range(world)):
        return False
    seen, r = set(), 0
    while r not in seen:
        seen.add(r)
        r = nxt[r]
    return len(seen) == world


@exercise("ch9.ring_allreduce", "Ring all-reduce from send and recv", names=["ring_allreduce"], timeout=60)
def _ring_allreduce(t: Tester, ring_allreduce) -> None:
    for world, shape, hidden in RING_CASES:
        numel = math.prod(shape)
        inputs = _ring_inputs(world, shape)
        want = torch.from_numpy(np.sum([x.double().numpy() for x in inputs], axis=0)).float()
        label = f"world_size={world}, shape={shape}"
        outcome = t.call(drive_ring, ring_allreduce, world, shape)
        if not outcome.ok:
            stuck = _waited_in_vain(outcome)
            t.error(f"{label}: run ring_allreduce on every rank", outcome, hidden=hidden,
                    hint=("every rank waited to receive and nobody sent: a deadlock. " if stuck else "")
                    + "each rank sends to (rank + 1) % world_size and receives from (rank - 1) % world_size; "
                      "send returns at once, recv waits, so send first, then receive")
            if stuck:
                break  # the other cases would wait out the same timeout
            continue
        results = outcome.value["results"]
        wrong = [r for r, got in enumerate(results) if not tensors_close(got, want, rtol=1e-4, atol=1e-4)]
        t.expect(f"{label}: every rank returns the sum of all ranks' tensors", not wrong, hidden=hidden,
                 expected=f"the sum, shape {shape}",
                 got="the sum on every rank" if not wrong else f"rank {wrong[0]}: {short(results[wrong[0]])}",
                 hint="reduce-scatter (N-1 steps: send a chunk on, add the chunk that arrives) then all-gather "
                      "(N-1 steps: pass the finished chunks on); split with torch.tensor_split so uneven sizes work "
                      "and keep the input's shape")
        links = outcome.value["links"]
        lo, hi = ring_bytes_bounds(world, numel)
        ring = _is_ring(links, world)
        t.expect(f"{label}: each rank sends to one neighbour (a ring)", ring, hidden=hidden,
                 expected="rank r -> one peer, the peers forming one cycle",
                 got=short({f"{s}->{d}": b for (s, d), b in sorted(links.items())}),
                 hint="send only to (rank + 1) % world_size")
        per_link = sorted(set(links.values()))
        ok_bytes = ring and all(lo <= b <= hi for b in links.values())
        t.expect(f"{label}: bytes per link = 2(N-1)/N · size", ok_bytes, hidden=hidden,
                 expected=f"{lo}..{hi} bytes per link ({2 * (world - 1)}/{world} of {numel * 4} bytes)",
                 got=f"{per_link} bytes per link",
                 hint="send chunks of size/N, 2(N-1) times: passing the whole tensor around the ring sends N-1 "
                      "times too much")


# ---------------------------------------------------------------------------------------------
# ch9.bucket_size: DDP's buckets on the simulated clock
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BackwardTrace:
    """When each gradient became ready in one backward, on the simulated device clock.

    ``names``, ``nbytes`` and ``ready_us`` are in the order the gradients became ready (the
    order DDP fills its buckets in); times count from the start of the backward.
    """

    names: tuple[str, ...]
    nbytes: tuple[int, ...]
    ready_us: tuple[float, ...]
    backward_us: float

    @property
    def total_bytes(self) -> int:
        return sum(self.nbytes)


def trace_backward(model: nn.Module, x: torch.Tensor) -> BackwardTrace:
    """Run ``model(x).square().mean().backward()`` on the npu and record each gradient's ready time.

    A hook on every parameter (``register_post_accumulate_grad_hook``, where DDP's reducer hooks
    in too) reads the device clock when that gradient is written.
    """
    from ..device.clock import clock, current_stream_id

    if x.device.type != "npu":
        raise ValueError(f"trace_backward measures on the npu clock: pass an npu input, got one on {x.device}")
    index = x.device.index if x.device.index is not None else torch.npu.current_device()
    dev = clock(index)
    seen: list[tuple[str, int, float]] = []
    hooks = [p.register_post_accumulate_grad_hook(
        lambda p, n=n: seen.append((n, p.numel() * p.element_size(), dev.now(current_stream_id(index)))))
        for n, p in model.named_parameters() if p.requires_grad]
    try:
        model.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        start = dev.synchronize()
        loss.backward()
        end = dev.synchronize()
    finally:
        for h in hooks:
            h.remove()
        model.zero_grad(set_to_none=True)
    return BackwardTrace(tuple(s[0] for s in seen), tuple(s[1] for s in seen),
                         tuple(s[2] - start for s in seen), end - start)


def buckets(trace: BackwardTrace, bucket_mb: float) -> list[list[int]]:
    """Gradient indices per bucket: filled in ready order until the next would pass ``bucket_mb`` (as DDP)."""
    if not isinstance(bucket_mb, (int, float)) or not bucket_mb > 0:
        raise ValueError(f"bucket_mb must be a positive number, got {bucket_mb!r}")
    cap = bucket_mb * 2 ** 20
    out: list[list[int]] = [[]]
    size = 0
    for i, n in enumerate(trace.nbytes):
        if out[-1] and size + n > cap:
            out.append([])
            size = 0
        out[-1].append(i)
        size += n
    return out


def bucket_schedule(trace: BackwardTrace, bucket_mb: float, world_size: int,
                    link: cost.Link | None = None) -> list[tuple[float, float, int]]:
    """(start, end, bytes) of each bucket's all-reduce on the communication stream.

    A bucket's all-reduce starts when its last gradient is ready and the previous all-reduce has
    finished (one communication stream); it lasts what :func:`npu_lab.distributed.cost.collective_us`
    says for ``world_size`` ranks.
    """
    link = link or cost.device_link()
    free, out = 0.0, []
    for b in buckets(trace, bucket_mb):
        nbytes = sum(trace.nbytes[i] for i in b)
        start = max(free, max(trace.ready_us[i] for i in b))
        algo = cost.choose_algorithm(nbytes, world_size, link)
        free = start + cost.collective_us("allreduce", nbytes, world_size, link, algo)
        out.append((start, free, nbytes))
    return out


def step_time_us(trace: BackwardTrace, bucket_mb: float, world_size: int, link: cost.Link | None = None) -> float:
    """Simulated microseconds from the start of the backward to the last gradient all-reduced."""
    sched = bucket_schedule(trace, bucket_mb, world_size, link)
    return max([trace.backward_us] + [end for _, end, _ in sched])


def exposed_comm_us(trace: BackwardTrace, bucket_mb: float, world_size: int, link: cost.Link | None = None) -> float:
    """The communication time not hidden behind the backward: step time minus backward time."""
    return step_time_us(trace, bucket_mb, world_size, link) - trace.backward_us


#: The grid the check compares a choice with (MB, geometric from 1 KB to 1 GB).
BUCKET_GRID = tuple(float(v) for v in np.geomspace(2 ** -10, 1024, 241))


def best_step_time_us(trace: BackwardTrace, world_size: int, link: cost.Link | None = None) -> tuple[float, float]:
    """(bucket MB, step µs) of the best bucket size on :data:`BUCKET_GRID`."""
    return min(((mb, step_time_us(trace, mb, world_size, link)) for mb in BUCKET_GRID), key=lambda p: p[1])


def deep_mlp(width: int, depth: int, seed: int) -> nn.Module:
    """``depth`` blocks of ``Linear(width, width)`` + ``Tanh``, initialised from ``seed`` (the bucket cases' models)."""
    torch.manual_seed(seed)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)])


#: name -> (model maker, input shape, world size, hidden)
BUCKET_CASES: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], int, bool]] = {
    "8 x Linear(1024, 1024), batch 32, 8 ranks": (lambda: deep_mlp(1024, 8, 0), (32, 1024), 8, False),
    "12 x Linear(512, 512), batch 64, 16 ranks": (lambda: deep_mlp(512, 12, 1), (64, 512), 16, True),
    "16 x Linear(768, 768), batch 64, 32 ranks": (lambda: deep_mlp(768, 16, 2), (64, 768), 32, True),
}


def bucket_trace(name: str) -> BackwardTrace:
    """The backward trace of :data:`BUCKET_CASES` ``[name]`` (measured once per session)."""
    make, shape, _, _ = BUCKET_CASES[name]

    def measure() -> BackwardTrace:
        model = make().to("npu")
        return trace_backward(model, randn(*shape, seed=5).to("npu"))

    return measured(("ch9.bucket_trace", name), measure)


@exercise("ch9.bucket_size", "Choose DDP's bucket size for the most overlap", names=["choose_bucket_mb"], timeout=60)
def _bucket_size(t: Tester, choose_bucket_mb) -> None:
    link = cost.device_link()
    for name, (_, _, world, hidden) in BUCKET_CASES.items():
        trace = bucket_trace(name)  # measured before the learner's code runs
        best_mb, best_us = best_step_time_us(trace, world, link)
        outcome = t.call(choose_bucket_mb, trace, world)
        if not outcome.ok:
            t.error(f"choose_bucket_mb(<{name}>)", outcome, hidden=hidden,
                    hint="call step_time_us(trace, mb, world_size) for candidate sizes and keep the fastest")
            continue
        ok, mb, why = check_plain(outcome.value)
        if not ok or type(mb) not in (int, float) or not mb > 0 or not math.isfinite(mb):
            t.expect(f"choose_bucket_mb(<{name}>) returns a bucket size in MB", False, hidden=hidden,
                     expected="a positive float", got=why or short(mb), hint="return a number of megabytes")
            continue
        got_us = step_time_us(trace, float(mb), world, link)
        total_mb = trace.total_bytes / 2 ** 20
        t.expect(f"{name}: the step with your buckets is within 2% of the best bucket size's", got_us <= 1.02 * best_us,
                 hidden=hidden, expected=f"<= {1.02 * best_us:.0f} us",
                 got=f"{mb:g} MB -> {got_us:.0f} us ({len(buckets(trace, float(mb)))} buckets)",
                 hint=f"one bucket of all {total_mb:.0f} MB waits for the whole backward; tiny buckets pay the "
                      f"latency 2(N-1)·α each: scan sizes between them with step_time_us")


# ---------------------------------------------------------------------------------------------
# ch9.column_parallel
# ---------------------------------------------------------------------------------------------

#: (world size, batch, in features, out features, hidden)
COLUMN_CASES = [(2, 4, 8, 6, False), (4, 3, 5, 8, True), (3, 6, 7, 9, True)]


def _column_reference(batch: int, fin: int, fout: int, seed: int) -> dict[str, torch.Tensor]:
    """The unsharded layer's output and gradients for the loss ``(y * g).sum()`` (autograd on the CPU)."""
    torch.manual_seed(seed)
    layer = nn.Linear(fin, fout).double()
    x = randn(batch, fin, seed=seed + 1).double().requires_grad_(True)
    g = randn(batch, fout, seed=seed + 2).double()
    y = layer(x)
    (y * g).sum().backward()
    return {"x": x.detach().float(), "w": layer.weight.detach().float(), "b": layer.bias.detach().float(),
            "g": g.float(), "y": y.detach().float(), "gx": x.grad.float(), "gw": layer.weight.grad.float(),
            "gb": layer.bias.grad.float()}


def drive_column(forward: Callable[..., Any], backward: Callable[..., Any], world: int,
                 ref: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    """Run the learner's column-parallel forward and backward on ``world`` thread-ranks, in a forked process."""
    def body(rank: int, group: dist.ProcessGroup) -> dict[str, Any]:
        rows = ref["w"].chunk(world)[rank].shape[0]
        sl = slice(rank * rows, (rank + 1) * rows)
        x, w, b = ref["x"].to("npu"), ref["w"][sl].to("npu"), ref["b"][sl].to("npu")

        def all_reduce(t: torch.Tensor) -> torch.Tensor:
            """The sum of ``t`` over all ranks (a new tensor)."""
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"all_reduce takes a torch.Tensor, got {type(t).__name__}")
            out = t.detach().contiguous().clone()
            group.allreduce([out]).wait()
            return out

        y = forward(x, w, b)
        grads = backward(x, w, ref["g"][:, sl].to("npu"), all_reduce)
        def cpu(v: Any) -> Any:
            return v.detach().cpu() if is_plain_tensor(v) else v

        return {"y": cpu(y), "grads": [cpu(v) for v in grads] if isinstance(grads, (tuple, list)) else grads}

    return call_forked(lambda: run_ranks(world, body, timeout=RANKS_TIMEOUT), CHILD_TIMEOUT)


@exercise("ch9.column_parallel", "A column-parallel linear layer: forward and backward",
          names=["column_parallel_forward", "column_parallel_backward"], timeout=60)
def _column_parallel(t: Tester, column_parallel_forward, column_parallel_backward) -> None:
    for world, batch, fin, fout, hidden in COLUMN_CASES:
        ref = _column_reference(batch, fin, fout, seed=40 + world)
        label = f"world_size={world}, x {batch}x{fin}, Linear({fin}, {fout})"
        outcome = t.call(drive_column, column_parallel_forward, column_parallel_backward, world, ref)
        if not outcome.ok:
            t.error(f"{label}: run forward and backward on every rank", outcome, hidden=hidden,
                    hint="forward: x @ weight_shard.T + bias_shard; backward returns (grad_x, grad_weight_shard, "
                         "grad_bias_shard); every rank must call all_reduce the same number of times")
            if _waited_in_vain(outcome):
                break  # the other cases would wait out the same timeout
            continue
        per_rank = outcome.value
        rows = ref["w"].chunk(world)[0].shape[0]
        slices = [slice(r * rows, (r + 1) * rows) for r in range(world)]
        bad_y = [r for r, res in enumerate(per_rank) if not tensors_close(res["y"], ref["y"][:, slices[r]],
                                                                          rtol=1e-4, atol=1e-5)]
        t.expect(f"{label}: each rank's output is its slice of the layer's output", not bad_y, hidden=hidden,
                 expected=f"y[:, rank·{rows}:(rank+1)·{rows}]",
                 got="right" if not bad_y else f"rank {bad_y[0]}: {short(per_rank[bad_y[0]]['y'])}",
                 hint="no communication in the forward: x @ weight_shard.T + bias_shard")
        triples = [res["grads"] for res in per_rank]
        if not all(isinstance(g, (list, tuple)) and len(g) == 3 for g in triples):
            t.expect(f"{label}: backward returns (grad_x, grad_weight_shard, grad_bias_shard)", False, hidden=hidden,
                     expected="a tuple of 3 tensors", got=short(triples[0]), hint="return all three gradients")
            continue
        wants = [[ref["gx"]] * world, [ref["gw"][sl] for sl in slices], [ref["gb"][sl] for sl in slices]]
        for k, what in enumerate(["grad_x equals the unsharded layer's input gradient",
                                  "grad_weight_shard is this rank's rows of the weight gradient",
                                  "grad_bias_shard is this rank's slice of the bias gradient"]):
            bad = [r for r in range(world) if not tensors_close(triples[r][k], wants[k][r], rtol=1e-4, atol=1e-5)]
            hints = ["each rank's grad_y_shard @ weight_shard is only its slice's share of grad_x: all_reduce "
                     "(sum) them", "grad_y_shard.T @ x: local, no communication",
                     "grad_y_shard summed over the batch: local, no communication"]
            t.expect(f"{label}: {what}", not bad, hidden=hidden, expected="equal on every rank",
                     got="equal" if not bad else f"rank {bad[0]}: {short(triples[bad[0]][k])}", hint=hints[k])


# ---------------------------------------------------------------------------------------------
# ch9.predict_time
# ---------------------------------------------------------------------------------------------

#: (op, bytes, world size, α µs, GB/s, algorithm, hidden)
PREDICT_CASES = [
    ("allreduce", 64 * 2 ** 20, 8, 5.0, 64.0, "ring", False),
    ("allreduce", 4096, 2, 5.0, 64.0, "ring", False),
    ("allgather", 16 * 2 ** 20, 4, 5.0, 64.0, "ring", False),
    ("allreduce", 1024, 6, 3.0, 100.0, "tree", True),
    ("reduce_scatter", 2 ** 20, 16, 2.0, 25.0, "ring", True),
    ("broadcast", 10 ** 6, 5, 4.0, 50.0, "ring", True),
    ("allreduce", 2 ** 30, 64, 10.0, 200.0, "ring", True),
    ("allreduce", 4096, 1, 5.0, 64.0, "ring", True),
]


@exercise("ch9.predict_time", "Predict a collective's time from the α–β model", names=["predict_us"], timeout=30)
def _predict_time(t: Tester, predict_us) -> None:
    for op, nbytes, world, alpha, gbs, algo, hidden in PREDICT_CASES:
        want = cost.collective_us(op, nbytes, world, cost.Link(alpha, gbs), algo)
        hint = {"allreduce": "ring: 2(p-1)·α + 2(p-1)/p · n/β; tree: 2⌈log2 p⌉·α + 2·n/β; 1 GB/s moves 1000 "
                             "bytes per µs; one rank has nothing to do",
                "allgather": "(p-1)·α + (p-1)/p · n/β, n the gathered whole",
                "reduce_scatter": "(p-1)·α + (p-1)/p · n/β, n the whole input",
                "broadcast": "a pipelined chain: (p-1)·α + n/β"}[op]
        t.case(f"predict_us({op!r}, {nbytes}, {world}, alpha_us={alpha}, gbs={gbs}, algorithm={algo!r})",
               predict_us, op, nbytes, world, alpha, gbs, algo, expected=float(want), rtol=1e-6, atol=1e-6,
               hidden=hidden, hint=hint)

