"""Chapter 9: distributed training - collectives, DDP's buckets, tensor parallelism, the cost model.

Four exercises:

* ``ch9.ring_allreduce`` - an all-reduce written with send and receive only, checked for the sum
  on every rank and for the bytes each link carries (2(N-1)/N of the tensor);
* ``ch9.grad_buckets`` - DDP's gradient buckets built by hand: hooks that start each bucket's
  all-reduce as soon as its gradients are ready, while the backward still runs, and a ``finish()``
  that averages them back into ``.grad``;
* ``ch9.tp_mlp`` - a tensor-parallel MLP block (column-parallel, tanh, row-parallel), forward and a
  backward written by hand, with one all-reduce each;
* ``ch9.predict_time`` - a collective's time from the α–β cost model, and a two-level all-reduce's.

The ranks of the first three exercises are threads, each with its own npuccl process group over
one shared store (the same gloo transport as between processes): :func:`run_ranks`, which the learner
can call from the notebook too. The checks run the ranks in a forked copy of the notebook's process
(:func:`npu_lab.grading.forked.call_forked`): the learner's functions are there, defined in the
notebook, and a rank that never ends (a sleep in C code, blocked signals, a compiled loop) is killed
with its process instead of running on beside later checks. A rank that raises ends every rank at once,
and the check names that rank and what it raised. The helpers below (:func:`run_ranks`,
:func:`trace_backward`, :func:`step_time_us`...) are the ones the chapter uses; the checks' references are
private.
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

import torch
import torch.distributed as dist
from torch import nn

from ..distributed import cost
from ..grading import guard
from ..grading.forked import call_forked
from ..grading.inputs import randn
from ..grading.predictions import question
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester, short
from ..grading.values import is_plain_tensor, tensors_close

chapter("ch9", "Distributed training: several NPUs, collectives, DDP, FSDP, tensor parallelism", [
    "DataParallel is one process driving every device from threads; DDP is one process per device",
    "A collective backend (NCCL, HCCL, npuccl) is registered with torch.distributed and moves device buffers",
    "Ring all-reduce is a reduce-scatter then an all-gather: each link carries 2(N-1)/N of the data",
    "A collective costs latency (α per step) plus bytes over bandwidth (β): small messages pay α, big ones β",
    "DDP buckets gradients and all-reduces each bucket while the backward is still computing the rest",
    "DDP rebuilds its buckets after the first step, in the order the gradients became ready",
    "FSDP shards parameters, gradients and optimizer state and gathers each layer's weights just in time",
    "Tensor parallelism splits each layer's weights: column-parallel then row-parallel costs one all-reduce",
    "A desync (ranks calling different collectives) shows in the debug log as mismatched ops or sizes",
])

# Predict, then run (the chapter's questions; the cells measure the answers)
question("ch9.dp_bytes",
         "DP and DDP train the same 1 MB model on 2 devices. How many times more bytes cross between the devices "
         "per step with DP than with DDP (a number, e.g. 1.5)?",
         why="DP copies the weights out to device 1 and its gradients back (2 copies of the model), plus the inputs "
             "and outputs; DDP's ring all-reduce with 2 ranks moves 2(N-1)/N = 1 copy per link",
         rtol=0.1)
question("ch9.tree_or_ring",
         "An all-reduce of 1 MB over 4 ranks, α = 5 us and β = 64 GB/s: which algorithm does npuccl pick, "
         "'ring' or 'tree'?",
         why="ring: 2(N-1)α + 2(N-1)/N · n/β = 30 + 24.6 us; tree: 2⌈log2 N⌉α + 2n/β = 20 + 32.8 us: the tree pays "
             "two latencies fewer, which is worth more than its extra bytes at this size",
         choices=("ring", "tree"))
question("ch9.buckets_1mb",
         "DDP with bucket_cap_mb=1 on 8 × Linear(512, 512): how many buckets does it all-reduce per step?",
         why="each weight is 512 × 512 × 4 bytes = exactly 1 MiB, so a bucket closes as soon as it holds one weight "
             "(and the bias next to it): 8 layers, 8 buckets",
         choices=tuple(range(1, 17)))
question("ch9.fsdp_allgathers",
         "FSDP shards each of the 8 Linear layers (and the root). How many all-gathers does it run in 3 training "
         "steps?",
         why="a layer's weights are gathered before its forward and again before its backward (they were freed in "
             "between): 2 per layer per step, 8 layers × 2 × 3 steps = 48",
         choices=tuple(range(0, 97)))


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


#: The kinds a rank's exception is raised again as (the kinds a forked child reports as themselves, so that a
#: stub's ``NotImplementedError`` still reads "not started" and a ``KeyboardInterrupt`` "interrupted").
_RAISED_AS: tuple[type[BaseException], ...] = (NotImplementedError, KeyboardInterrupt, SystemExit, TimeoutError,
                                              ValueError, TypeError, RuntimeError)
_TRACEBACK = BaseException.__dict__["__traceback__"].__get__


class RankError(RuntimeError):
    """What a rank raised, when it was not one of the kinds :func:`run_ranks` raises again as themselves."""


def _rank_error(rank: int, exc: BaseException) -> BaseException:
    """``exc`` (raised on ``rank``) as an exception of its own kind whose message names the rank and what it raised,
    carrying the rank's traceback (so a check shows the learner's line)."""
    kind = next((k for k in _RAISED_AS if isinstance(exc, k)), RankError)
    text = guard.safe_text(exc, str, limit=500)
    name = guard.type_name(exc)
    message = f"rank {rank} raised {name}" + (f": {text}" if text else "")
    try:
        new = kind(message)
    except BaseException:  # noqa: BLE001 - a kind that will not take a message (it cannot happen for the above)
        new = RankError(message)
    try:
        new = new.with_traceback(_TRACEBACK(exc))
    except BaseException:  # noqa: BLE001, S110 - without the traceback, the message still says it all
        pass
    new.rank = rank
    return new


def run_ranks(world_size: int, body: Callable[[int, dist.ProcessGroup], Any], timeout: float = 30.0,
              collective_timeout: float = 10.0) -> list[Any]:
    """``[body(rank, group) for each rank]``, the ranks running at once as threads of this process.

    Each thread gets its own :class:`~npu_lab.distributed.ProcessGroupNPUCCL` of ``world_size``
    ranks (the groups meet through one in-memory store), so the bodies can exchange npu tensors
    with ``group.send`` / ``group.recv`` / ``group.allreduce`` as processes would. A rank that
    raises (anything: ``KeyboardInterrupt`` and ``SystemExit`` too) ends the run at once: the other
    ranks are stopped, and its exception is raised here, of the same kind, its message naming the rank
    (``rank 1 raised ValueError: ...``). A rank still running after ``timeout`` seconds raises
    ``TimeoutError``.
    """
    from ..distributed.process_group import ProcessGroupNPUCCL

    if type(world_size) is not int or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    store = dist.PrefixStore(f"ch9/{next(_GROUPS)}/", dist.HashStore())
    results: list[Any] = [None] * world_size
    errors: list[BaseException | None] = [None] * world_size
    groups: list[Any] = [None] * world_size
    lock = threading.Lock()
    first_failure: list[int] = []  # the rank that raised first
    finished = [0]
    changed = threading.Event()  # a rank raised, or every rank is done

    def main(rank: int) -> None:
        try:
            group = ProcessGroupNPUCCL(store, rank, world_size, datetime.timedelta(seconds=collective_timeout))
            groups[rank] = group
            results[rank] = body(rank, group)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            errors[rank] = exc
            if not isinstance(exc, RankStopped):  # (stopped by this function, after it gave up on the ranks)
                with lock:
                    if not first_failure:
                        first_failure.append(rank)
                changed.set()
        finally:
            with lock:
                finished[0] += 1
                if finished[0] == world_size:
                    changed.set()

    threads = [threading.Thread(target=main, args=(r,), daemon=True, name=f"rank{r}") for r in range(world_size)]
    for th in threads:
        th.start()
    deadline = time.monotonic() + timeout
    failed: int | None = None
    stuck: list[int] = []
    try:
        while not changed.wait(max(0.0, min(0.05, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                break
        with lock:  # what happened, read before the ranks still running are stopped
            failed = first_failure[0] if first_failure else None
            stuck = [r for r, th in enumerate(threads) if th.is_alive()]
    finally:  # also when the check's own time limit interrupts the wait: no rank keeps running afterwards
        _stop(threads)
    _RECENT.append(groups)
    if failed is not None:
        raise _rank_error(failed, errors[failed])
    if stuck:
        raise TimeoutError(f"ranks {stuck} did not finish within {timeout:g} s: is every rank waiting to receive "
                           f"before anyone sends (a deadlock)?")
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


def _waited_in_vain(outcome: Any) -> bool:
    """Whether a run failed because a rank waited out the collective timeout (a deadlock)."""
    text = (outcome.error or "").lower()
    return outcome.timed_out or "timed out" in text or "did not finish" in text


def _cpu(value: Any) -> Any:
    """A plain tensor moved to the CPU (to cross back from the forked process); anything else as it is."""
    return value.detach().cpu() if is_plain_tensor(value) else value


_WARMED: set[Any] = set()


def _warm(key: Any, run: Callable[[], Any]) -> None:
    """Run ``run()`` (the check's own computation on npu tensors) once per process, before forking the ranks: the
    npu kernels it compiles (numba, cached in this process) are then inherited by every forked child, which would
    otherwise compile them again, each time, for seconds."""
    if key not in _WARMED:
        with torch.no_grad():
            run()
        _WARMED.add(key)


# ---------------------------------------------------------------------------------------------
# ch9.ring_allreduce
# ---------------------------------------------------------------------------------------------

#: (world size, shape, dtype, hidden): uneven chunks, fewer elements than ranks, a 0-d tensor, one rank, float64
RING_CASES = [(2, (8,), torch.float32, False), (3, (12,), torch.float32, False),
              (4, (10,), torch.float32, True), (3, (7,), torch.float32, True), (5, (2, 13), torch.float32, True),
              (4, (3,), torch.float32, True), (3, (), torch.float32, True), (1, (6,), torch.float32, True),
              (3, (9,), torch.float64, True)]


def _ring_inputs(world: int, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    return [randn(*shape, seed=100 + 7 * world + r, dtype=dtype) for r in range(world)]


def drive_ring(ring_allreduce: Callable[..., Any], world: int, shape: tuple[int, ...],
               dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """Run ``ring_allreduce(tensor, rank, world_size, send, recv)`` on ``world`` thread-ranks, in a forked
    process (see the module's docstring).

    Returns what each rank returned (on the CPU, as plain data), the device type of each result, and the bytes
    each link ``(src, dst)`` carried.
    """
    inputs = _ring_inputs(world, shape, dtype)
    _warm(("ring", dtype), lambda: _warm_ring(dtype))

    def run() -> dict[str, Any]:
        links: dict[tuple[int, int], int] = {}

        def body(rank: int, group: dist.ProcessGroup) -> Any:
            wire = Wire(rank, world, group, links)
            out = ring_allreduce(inputs[rank].to("npu"), rank, world, wire.send, wire.recv)
            wire.finish()
            return {"out": _cpu(out), "device": out.device.type if is_plain_tensor(out) else None}

        results = run_ranks(world, body, timeout=RANKS_TIMEOUT)
        return {"results": [r["out"] for r in results], "devices": [r["device"] for r in results],
                "links": dict(links)}

    return call_forked(run, CHILD_TIMEOUT)


def _warm_ring(dtype: torch.dtype) -> None:
    """The npu operators a ring all-reduce uses (copies, views, additions in place), for ``dtype``."""
    for shape in ((12,), (), (2, 13)):
        x = torch.ones(shape, dtype=dtype).to("npu")
        flat = x.reshape(-1).clone()
        for chunk in torch.tensor_split(flat, 3):
            incoming = torch.empty_like(chunk).copy_(chunk)
            chunk += incoming
            chunk.add_(incoming)
            chunk.detach().contiguous().clone()
        (flat + flat).reshape(shape).cpu()


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
    for world, shape, dtype, hidden in RING_CASES:
        numel = math.prod(shape)
        inputs = _ring_inputs(world, shape, dtype)
        want = torch.stack([x.double() for x in inputs]).sum(0).to(dtype)
        size = torch.empty((), dtype=dtype).element_size()
        kind = "" if dtype == torch.float32 else f", {str(dtype).removeprefix('torch.')}"
        label = f"world_size={world}, shape={shape}{kind}"
        outcome = t.call(drive_ring, ring_allreduce, world, shape, dtype)
        if not outcome.ok:
            stuck = _waited_in_vain(outcome)
            t.error(f"{label}: run ring_allreduce on every rank", outcome, hidden=hidden,
                    hint=("every rank waited to receive and nobody sent: a deadlock. " if stuck else "")
                    + ("a buffer you receive into must have the message's dtype and size (torch.empty_like of the "
                       "chunk). " if dtype != torch.float32 else "")
                    + "each rank sends to (rank + 1) % world_size and receives from (rank - 1) % world_size; "
                      "send returns at once, recv waits, so send first, then receive")
            if stuck:
                break  # the other cases would wait out the same timeout
            continue
        results, devices = outcome.value["results"], outcome.value["devices"]
        wrong = [r for r, got in enumerate(results)
                 if not (is_plain_tensor(got) and got.dtype == dtype and tensors_close(got, want, rtol=1e-4,
                                                                                      atol=1e-4))]
        t.expect(f"{label}: every rank returns the sum of all ranks' tensors", not wrong, hidden=hidden,
                 expected=f"the sum, shape {shape}{kind}",
                 got="the sum on every rank" if not wrong else f"rank {wrong[0]}: {short(results[wrong[0]])}",
                 hint="reduce-scatter (N-1 steps: send a chunk on, add the chunk that arrives) then all-gather "
                      "(N-1 steps: pass the finished chunks on); split with torch.tensor_split so uneven sizes work "
                      "(a rank may get an empty chunk), keep the input's shape and dtype (torch.empty_like), and with "
                      "one rank the sum is the tensor itself")
        off = [r for r, d in enumerate(devices) if d != "npu"]
        t.expect(f"{label}: the results stay on the npu", not off, hidden=hidden, expected="npu tensors",
                 got="npu" if not off else f"rank {off[0]}: {devices[off[0]]}",
                 hint="return the npu tensor you reduced into, not a CPU copy")
        links = outcome.value["links"]
        if world == 1:
            t.expect(f"{label}: one rank sends nothing", not links, hidden=hidden, expected="no message",
                     got=short({f"{s}->{d}": b for (s, d), b in sorted(links.items())}),
                     hint="with world_size 1 there is nobody to send to: the loops run 0 times")
            continue
        lo, hi = ring_bytes_bounds(world, numel, size)
        ring = _is_ring(links, world)
        t.expect(f"{label}: each rank sends to one neighbour (a ring)", ring, hidden=hidden,
                 expected="rank r -> one peer, the peers forming one cycle",
                 got=short({f"{s}->{d}": b for (s, d), b in sorted(links.items())}),
                 hint="send only to (rank + 1) % world_size")
        per_link = sorted(set(links.values()))
        ok_bytes = ring and all(lo <= b <= hi for b in links.values())
        t.expect(f"{label}: bytes per link = 2(N-1)/N · size", ok_bytes, hidden=hidden,
                 expected=f"{lo}..{hi} bytes per link ({2 * (world - 1)}/{world} of {numel * size} bytes)",
                 got=f"{per_link} bytes per link",
                 hint="send chunks of size/N, 2(N-1) times: passing the whole tensor around the ring sends N-1 "
                      "times too much")


# ---------------------------------------------------------------------------------------------
# DDP's buckets on the simulated clock (the chapter's cost model of bucketing)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BackwardTrace:
    """When each gradient became ready in one backward, on the simulated device clock.

    ``names``, ``nbytes`` and ``ready_us`` are in the order the gradients became ready (the
    order DDP rebuilds its buckets in); times count from the start of the backward.
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


def _buckets(trace: BackwardTrace, bucket_mb: float) -> list[list[int]]:
    """Gradient indices per bucket, as DDP rebuilds them with an explicit ``bucket_cap_mb``: in ready order, each
    gradient added to the open bucket, which closes once it holds at least ``bucket_mb`` MB."""
    if not isinstance(bucket_mb, (int, float)) or not bucket_mb > 0:
        raise ValueError(f"bucket_mb must be a positive number, got {bucket_mb!r}")
    cap = bucket_mb * 2 ** 20
    out: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i, n in enumerate(trace.nbytes):
        current.append(i)
        size += n
        if size >= cap:
            out.append(current)
            current, size = [], 0
    if current:
        out.append(current)
    return out


def bucket_schedule(trace: BackwardTrace, bucket_mb: float, world_size: int,
                    link: cost.Link | None = None) -> list[tuple[float, float, int]]:
    """(start, end, bytes) of each bucket's all-reduce on the communication stream.

    The buckets are filled as DDP fills them after its first step (in the order the gradients became
    ready; a bucket closes once it holds at least ``bucket_mb`` MB). A bucket's all-reduce starts when its
    last gradient is ready and the previous all-reduce has finished (one communication stream); it lasts what
    :func:`npu_lab.distributed.cost.collective_us` says for ``world_size`` ranks.
    """
    link = link or cost.device_link()
    free, out = 0.0, []
    for b in _buckets(trace, bucket_mb):
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


def deep_mlp(width: int, depth: int, seed: int) -> nn.Module:
    """``depth`` blocks of ``Linear(width, width)`` + ``Tanh``, initialised from ``seed``."""
    torch.manual_seed(seed)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)])


# ---------------------------------------------------------------------------------------------
# ch9.grad_buckets: DDP's gradient buckets, built by hand
# ---------------------------------------------------------------------------------------------

class _Handle:
    """What the check's ``all_reduce`` returns: ``wait()`` blocks until the tensor holds the sum over the ranks."""

    def __init__(self, work: Any, on_wait: Callable[[], None] = lambda: None) -> None:
        self._work = work
        self._on_wait = on_wait

    def wait(self) -> None:
        """Wait until the all-reduce is done (the tensor then holds the sum over all ranks)."""
        self._on_wait()
        if self._work is not None:
            self._work.wait()


class _LateUse(nn.Module):
    """Parameters declared in another order than the forward uses them: ``head`` first, used last."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(24, 6)
        self.body = nn.Sequential(nn.Linear(12, 24), nn.Tanh(), nn.Linear(24, 24), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def _mlp(seed: int, *sizes: int) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        torch.manual_seed(seed)
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
            layers += [nn.Linear(a, b)] + ([nn.Tanh()] if i < len(sizes) - 2 else [])
        return nn.Sequential(*layers)
    return make


def _late_use() -> nn.Module:
    torch.manual_seed(13)
    return _LateUse()


def _frozen_first() -> nn.Module:
    model = _mlp(14, 16, 32, 32, 8)()
    for p in model[0].parameters():
        p.requires_grad_(False)
    return model


#: (description, model maker, input features, bucket MB, world size, batch, hidden)
BUCKET_CASES: list[tuple[str, Callable[[], nn.Module], int, float, int, int, bool]] = [
    ("Linear(32, 64)-Tanh-Linear(64, 64)-Tanh-Linear(64, 10), 0.01 MB buckets, 2 ranks",
     _mlp(10, 32, 64, 64, 10), 32, 0.01, 2, 8, False),
    ("the same model, 0.01 MB buckets, 3 ranks", _mlp(10, 32, 64, 64, 10), 32, 0.01, 3, 9, False),
    ("the same model, one rank", _mlp(10, 32, 64, 64, 10), 32, 0.01, 1, 4, True),
    ("buckets smaller than every gradient (one bucket each), 4 ranks, a batch of 10 (slices of 3, 3, 2, 2)",
     _mlp(11, 16, 24, 24, 4), 16, 1e-5, 4, 10, True),
    ("one bucket bigger than all the gradients, 2 ranks", _mlp(12, 16, 24, 24, 4), 16, 64.0, 2, 6, True),
    ("parameters declared in another order than the forward uses them (head first), 2 ranks",
     _late_use, 12, 0.002, 2, 6, True),
    ("a frozen first layer (its parameters require no grad), 2 ranks", _frozen_first, 16, 0.004, 2, 6, True),
]


def _bucket_inputs(features: int, world: int, batch: int, step: int) -> list[torch.Tensor]:
    """Each rank's slice of step ``step``'s batch (``tensor_split``: slices may differ by one sample)."""
    x = randn(batch, features, seed=60 + 7 * step + world)
    return list(torch.tensor_split(x, world))


def _bucket_reference(make: Callable[[], nn.Module], features: int, world: int, batch: int,
                      bucket_mb: float) -> dict[str, Any]:
    """What a real backward gives, for two steps: each rank's gradients and their average over the ranks (what DDP
    leaves in ``.grad``), the order the gradients became ready in (measured with hooks), and the buckets the rule
    makes: their sizes in elements, in the order they become complete."""
    model = make()
    params = [p for p in model.parameters() if p.requires_grad]
    order: list[int] = []
    hooks = [p.register_post_accumulate_grad_hook(lambda p, i=i: order.append(i)) for i, p in enumerate(params)]
    per_rank, mean = [], []
    try:
        for step in range(2):
            grads = []
            for x in _bucket_inputs(features, world, batch, step):
                model.zero_grad(set_to_none=True)
                order.clear()
                model(x).square().mean().backward()
                grads.append([p.grad.detach().clone() for p in params])
            per_rank.append(grads)
            mean.append([torch.stack([g[i].double() for g in grads]).mean(0).float() for i in range(len(params))])
    finally:
        for h in hooks:
            h.remove()
    cap = bucket_mb * 2 ** 20
    plan: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i in reversed(range(len(params))):
        current.append(i)
        size += params[i].numel() * params[i].element_size()
        if size >= cap:
            plan.append(current)
            current, size = [], 0
    if current:
        plan.append(current)
    left = [len(b) for b in plan]
    where = {i: k for k, b in enumerate(plan) for i in b}
    complete = []
    for i in order:
        left[where[i]] -= 1
        if left[where[i]] == 0:
            complete.append(sum(params[j].numel() for j in plan[where[i]]))
    return {"per_rank": per_rank, "mean": mean, "order": list(order), "plan": complete}


def _warm_buckets(make: Callable[[], nn.Module], ref: dict[str, Any]) -> None:
    """The npu operators of bucketing: flattening gradients into one tensor, dividing it, copying slices back."""
    model = make().to("npu")
    params = [p for p in model.parameters() if p.requires_grad]
    grads = [g.to("npu") for g in ref["per_rank"][0][0]]
    flat = torch.cat([g.reshape(-1) for g in grads])
    flat /= 2
    flat.div_(2)
    flat = flat / 2
    offset = 0
    for p, g in zip(params, grads):
        g.copy_(flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()


def drive_buckets(grad_buckets: Any, make: Callable[[], nn.Module], bucket_mb: float, world: int,
                  ref: dict[str, Any]) -> list[dict[str, Any]]:
    """Two training steps of ``make()`` on ``world`` thread-ranks with ``grad_buckets(model, bucket_mb, all_reduce,
    world_size)`` (in a forked process); per rank: the gradients after each ``finish()``, and each all-reduce
    call (its elements, and whether the backward was still running).

    The backward is replayed: each gradient of the real backward (``ref``, computed before) is written to
    ``.grad`` in the order it became ready, and the hooks registered with ``register_post_accumulate_grad_hook``
    run right after, as autograd's AccumulateGrad runs them. (Autograd's engine refuses to run in a process
    forked after it started its device threads, and the check needs the fork.) The all-reduces go through
    npuccl, over gloo, as between processes.
    """
    from .._torch_private import post_accumulate_grad_hooks

    _warm("buckets", lambda: _warm_buckets(make, ref))

    def body(rank: int, group: dist.ProcessGroup) -> list[dict[str, Any]]:
        model = make().to("npu")
        params = [p for p in model.parameters() if p.requires_grad]
        calls: list[tuple[Any, bool]] = []
        state = {"backward": False, "waits in backward": 0}

        def waited() -> None:
            if state["backward"]:
                state["waits in backward"] += 1

        def all_reduce(t: torch.Tensor) -> _Handle:
            """Start summing ``t`` (an npu tensor) over all ranks, in place; returns a handle to ``wait()`` on."""
            if not is_plain_tensor(t) or t.device.type != "npu":
                raise TypeError(f"all_reduce takes an npu tensor (the flattened bucket), got {short(t)}")
            if not t.is_contiguous():
                raise ValueError("all_reduce takes a contiguous tensor: flatten the bucket with torch.cat")
            calls.append((t.numel(), state["backward"]))
            return _Handle(group.allreduce([t]), waited)

        buckets = grad_buckets(model, bucket_mb, all_reduce, world)
        steps = []
        for step in range(2):
            model.zero_grad(set_to_none=True)
            state["backward"] = True
            try:
                for i in ref["order"]:  # the backward, as AccumulateGrad writes each gradient and runs the hooks
                    params[i].grad = ref["per_rank"][step][rank][i].to("npu")
                    for hook in post_accumulate_grad_hooks(params[i]):
                        hook(params[i])
            finally:
                state["backward"] = False
            buckets.finish()
            steps.append({"grads": [_cpu(p.grad) for p in params], "calls": list(calls),
                          "waits in backward": state["waits in backward"]})
            calls.clear()
            state["waits in backward"] = 0
        return steps

    return call_forked(lambda: run_ranks(world, body, timeout=RANKS_TIMEOUT), CHILD_TIMEOUT)


@exercise("ch9.grad_buckets", "DDP's gradient buckets: all-reduce each bucket while the backward runs",
          names=["GradBuckets"], timeout=60)
def _grad_buckets(t: Tester, GradBuckets) -> None:  # noqa: N803 - the learner's class
    if not t.expect("GradBuckets is a class", isinstance(GradBuckets, type), expected="class GradBuckets",
                    got=short(GradBuckets), hint="class GradBuckets: with __init__(self, model, bucket_mb, all_reduce, "
                                                 "world_size) and finish(self)"):
        return
    references = [(desc, make, mb, world, hidden, _bucket_reference(make, feat, world, batch, mb))
                  for desc, make, feat, mb, world, batch, hidden in BUCKET_CASES]  # before the learner's code runs
    for desc, make, mb, world, hidden, ref in references:
        plan = ref["plan"]
        outcome = t.call(drive_buckets, GradBuckets, make, mb, world, ref)
        if not outcome.ok:
            t.error(f"{desc}: two training steps on every rank", outcome, hidden=hidden,
                    hint="the hooks start an all-reduce without waiting for it (all_reduce returns at once); finish() "
                         "waits for every handle; every rank must start the same all-reduces in the same order")
            if _waited_in_vain(outcome):
                break  # the other cases would wait out the same timeout
            continue
        per_rank = outcome.value
        for step in range(2):
            when = "first step" if step == 0 else "second step (the buckets start empty again)"
            grads = [r[step]["grads"] for r in per_rank]
            bad = [r for r in range(world) if not (type(grads[r]) is list and len(grads[r]) == len(ref["mean"][step])
                                                   and all(tensors_close(g, w, rtol=1e-4, atol=1e-5)
                                                           for g, w in zip(grads[r], ref["mean"][step])))]
            t.expect(f"{desc}, {when}: every .grad holds the average of the ranks' gradients", not bad,
                     hidden=hidden, expected="the mean over the ranks, on every rank",
                     got="right" if not bad else f"rank {bad[0]} differs",
                     hint="finish(): wait for each handle, divide the summed bucket by world_size, copy each slice "
                          "back into its parameter's .grad (view_as), and reset the bucket state for the next step")
            calls = [r[step]["calls"] for r in per_rank]
            sizes = [[n for n, _ in c] for c in calls]
            ok_sizes = all(s == plan for s in sizes) or (world == 1 and all(not s for s in sizes))
            t.expect(f"{desc}, {when}: one all-reduce per bucket, of the bucket's size, as each bucket is complete",
                     ok_sizes, hidden=hidden, expected=f"all-reduces of {plan} elements",
                     got=f"rank 0: {sizes[0]}",
                     hint="assign the parameters that require grad to buckets in reverse order of model.parameters(): "
                          "add each one's bytes to the open bucket and close it once it holds at least "
                          "bucket_mb * 2**20 bytes; a bucket's all-reduce starts when all its gradients are ready, "
                          "whatever order they arrive in")
            late = [n for c in calls for n, during in c if not during]
            t.expect(f"{desc}, {when}: every all-reduce starts while loss.backward() is still running", not late,
                     hidden=hidden, expected="started from the gradient hooks",
                     got="all during the backward" if not late else f"{len(late)} started after it (in finish())",
                     hint="start a bucket's all-reduce from the hook of its last gradient "
                          "(p.register_post_accumulate_grad_hook): that is what overlaps the communication with the "
                          "rest of the backward")
            blocked = sum(r[step]["waits in backward"] for r in per_rank)
            t.expect(f"{desc}, {when}: no hook waits for an all-reduce (the backward goes on while they run)",
                     not blocked, hidden=hidden, expected="every wait() in finish()",
                     got="none" if not blocked else f"{blocked} wait() call(s) during the backward",
                     hint="a hook that waits for its all-reduce stops the backward until the bucket has crossed the "
                          "network: no overlap at all. Keep the handle and wait for it in finish()")


# ---------------------------------------------------------------------------------------------
# ch9.tp_mlp: a tensor-parallel MLP block, forward and backward by hand
# ---------------------------------------------------------------------------------------------

#: (world size, batch, in features, hidden features, out features, hidden): uneven shards, one rank, a rank
#: whose shard is empty
TP_CASES = [(2, 4, 6, 8, 5, False), (3, 5, 4, 10, 3, False), (1, 3, 5, 7, 2, True), (4, 2, 3, 6, 4, True),
            (4, 3, 5, 3, 2, True), (5, 6, 8, 12, 6, True)]


def _tp_reference(batch: int, fin: int, hidden: int, fout: int, seed: int) -> dict[str, torch.Tensor]:
    """The unsharded block ``tanh(x W1ᵀ + b1) W2ᵀ + b2``: its output and gradients for the loss ``(y * g).sum()``
    (autograd in float64 on the CPU)."""
    torch.manual_seed(seed)
    fc1, fc2 = nn.Linear(fin, hidden).double(), nn.Linear(hidden, fout).double()
    x = randn(batch, fin, seed=seed + 1).double().requires_grad_(True)
    g = randn(batch, fout, seed=seed + 2).double()
    y = fc2(torch.tanh(fc1(x)))
    (y * g).sum().backward()
    out = {"x": x, "w1": fc1.weight, "b1": fc1.bias, "w2": fc2.weight, "b2": fc2.bias, "g": g, "y": y,
           "gx": x.grad, "gw1": fc1.weight.grad, "gb1": fc1.bias.grad, "gw2": fc2.weight.grad, "gb2": fc2.bias.grad}
    return {k: v.detach().float() for k, v in out.items()}


def _shards(hidden: int, world: int) -> list[slice]:
    """Each rank's slice of the hidden features (``tensor_split``: sizes differ by at most one, some may be 0)."""
    out, start = [], 0
    for chunk in torch.tensor_split(torch.arange(hidden), world):
        out.append(slice(start, start + len(chunk)))
        start += len(chunk)
    return out


def _warm_tp(ref: dict[str, torch.Tensor], shards: list[slice]) -> None:
    """The npu operators of a tensor-parallel block's forward and backward (products of transposed operands,
    tanh, sums over the batch), as the check's own reference computes them."""
    for sl in shards[:1]:
        x, w1, b1 = ref["x"].to("npu"), ref["w1"][sl].to("npu"), ref["b1"][sl].to("npu")
        w2, b2, g = ref["w2"][:, sl].contiguous().to("npu"), ref["b2"].to("npu"), ref["g"].to("npu")
        h = torch.tanh(x @ w1.T + b1)
        (h @ w2.T + b2).clone()
        a = (g @ w2) * (1 - h * h) * (1 - h.pow(2)) * (1 - torch.tanh(h) ** 2)
        for t in (a @ w1, a.T @ x, a.sum(0), g.T @ h, g.sum(0), a.sum(dim=0), torch.mm(a.t(), x)):
            t.contiguous().clone().cpu()


def drive_tp(forward: Callable[..., Any], backward: Callable[..., Any], world: int,
             ref: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    """Run the learner's forward, then backward (inside ``torch.inference_mode()``: no autograd), on ``world``
    thread-ranks in a forked process; per rank: the output, the five gradients and the all-reduces each made."""
    shards = _shards(ref["w1"].shape[0], world)
    _warm("tp", lambda: _warm_tp(ref, shards))

    def body(rank: int, group: dist.ProcessGroup) -> dict[str, Any]:
        sl = shards[rank]
        x, w1, b1 = ref["x"].to("npu"), ref["w1"][sl].to("npu"), ref["b1"][sl].to("npu")
        w2, b2, g = ref["w2"][:, sl].contiguous().to("npu"), ref["b2"].to("npu"), ref["g"].to("npu")
        counts = {"forward": 0, "backward": 0}
        phase = ["forward"]

        def all_reduce(t: torch.Tensor) -> torch.Tensor:
            """The sum of ``t`` over all ranks (a new tensor)."""
            if not isinstance(t, torch.Tensor) or t.device.type != "npu":
                raise TypeError(f"all_reduce takes an npu tensor, got {short(t)}")
            counts[phase[0]] += 1
            out = t.detach().contiguous().clone()
            group.allreduce([out]).wait()
            return out

        y = forward(x, w1, b1, w2, b2, all_reduce)
        phase[0] = "backward"
        with torch.inference_mode():
            grads = backward(x, w1, b1, w2, g, all_reduce)
        return {"y": _cpu(y), "grads": [_cpu(v) for v in grads] if type(grads) in (tuple, list) else _cpu(grads),
                "counts": dict(counts)}

    return call_forked(lambda: run_ranks(world, body, timeout=RANKS_TIMEOUT), CHILD_TIMEOUT)


_TP_GRADS = [("gx", "grad_x equals the whole block's input gradient", None),
             ("gw1", "grad_w1 is this rank's rows of fc1's weight gradient", "rows"),
             ("gb1", "grad_b1 is this rank's slice of fc1's bias gradient", "rows"),
             ("gw2", "grad_w2 is this rank's columns of fc2's weight gradient", "cols"),
             ("gb2", "grad_b2 equals fc2's whole bias gradient", None)]
_TP_HINTS = {
    "gx": "each rank's grad_a @ w1 is only its shard's share of grad_x: all_reduce (sum) it, the backward's one "
          "all-reduce",
    "gw1": "grad_a = (grad_y @ w2) * (1 - h²) with h = tanh(x @ w1.T + b1) recomputed; grad_w1 = grad_a.T @ x",
    "gb1": "grad_a summed over the batch (dim 0)",
    "gw2": "grad_y.T @ h, h this rank's slice of the hidden activation",
    "gb2": "grad_y summed over the batch: b2 is whole on every rank, and so is its gradient",
}


@exercise("ch9.tp_mlp", "A tensor-parallel MLP block: forward and a backward by hand, one all-reduce each",
          names=["tp_mlp_forward", "tp_mlp_backward"], timeout=60)
def _tp_mlp(t: Tester, tp_mlp_forward, tp_mlp_backward) -> None:
    for world, batch, fin, hidden, fout, hid in TP_CASES:
        ref = _tp_reference(batch, fin, hidden, fout, seed=70 + world + hidden)
        shards = _shards(hidden, world)
        sizes = [s.stop - s.start for s in shards]
        label = f"world_size={world}, x {batch}x{fin}, hidden {hidden} (shards {sizes}), out {fout}"
        outcome = t.call(drive_tp, tp_mlp_forward, tp_mlp_backward, world, ref)
        if not outcome.ok:
            text = outcome.error or ""
            autograd = "does not require grad" in text or "inference" in text.lower()
            t.error(f"{label}: run forward and backward on every rank", outcome, hidden=hid,
                    hint=("the backward runs inside torch.inference_mode(): no autograd there, compute the "
                          "gradients with the chain rule by hand. " if autograd else "")
                    + "forward: all_reduce(tanh(x @ w1.T + b1) @ w2.T) + b2; backward returns (grad_x, grad_w1, "
                      "grad_b1, grad_w2, grad_b2); every rank calls all_reduce the same number of times")
            if _waited_in_vain(outcome):
                break  # the other cases would wait out the same timeout
            continue
        per_rank = outcome.value
        bad_y = [r for r, res in enumerate(per_rank) if not tensors_close(res["y"], ref["y"], rtol=1e-4, atol=1e-5)]
        t.expect(f"{label}: every rank's output is the whole block's output", not bad_y, hidden=hid,
                 expected="tanh(x W1ᵀ + b1) W2ᵀ + b2, whole, on every rank",
                 got="right" if not bad_y else f"rank {bad_y[0]}: {short(per_rank[bad_y[0]]['y'])}",
                 hint="each rank's h_shard @ w2.T is a partial sum over its hidden features: all_reduce it, then add "
                      "b2 once (b2 is whole on every rank: adding it before the all-reduce adds it world_size times)")
        counts = [res["counts"] for res in per_rank]
        ok_counts = all(c == {"forward": 1, "backward": 1} for c in counts)
        t.expect(f"{label}: one all-reduce in the forward and one in the backward, on every rank", ok_counts,
                 hidden=hid, expected="{'forward': 1, 'backward': 1}", got=short(counts[0] if ok_counts else next(
                     c for c in counts if c != {"forward": 1, "backward": 1})),
                 hint="the forward all-reduces the partial outputs; the backward only grad_x (the weights' and biases' "
                      "gradients are local), with one rank too")
        grads = [res["grads"] for res in per_rank]
        if not all(type(g) is list and len(g) == 5 for g in grads):
            t.expect(f"{label}: backward returns (grad_x, grad_w1, grad_b1, grad_w2, grad_b2)", False, hidden=hid,
                     expected="a tuple of 5 tensors", got=short(grads[0]), hint="return all five gradients")
            continue
        for k, (key, what, part) in enumerate(_TP_GRADS):
            full = ref[key]
            wants = [full[sl] if part == "rows" else full[:, sl] if part == "cols" else full for sl in shards]
            bad = [r for r in range(world) if not tensors_close(grads[r][k], wants[r], rtol=1e-4, atol=1e-5)]
            t.expect(f"{label}: {what}", not bad, hidden=hid, expected="equal on every rank",
                     got="equal" if not bad else f"rank {bad[0]}: {short(grads[bad[0]][k])}", hint=_TP_HINTS[key])


# ---------------------------------------------------------------------------------------------
# ch9.predict_time
# ---------------------------------------------------------------------------------------------

def _collective_us(op: str, nbytes: float, p: int, alpha_us: float, gbs: float, algorithm: str) -> float:
    """The check's own α–β formulas (the ones the chapter derives); ``algorithm`` "auto": the faster of ring
    and tree, as npuccl picks."""
    if p <= 1:
        return 0.0
    beta = nbytes / (gbs * 1e3)
    if op == "allreduce":
        ring = 2 * (p - 1) * alpha_us + 2 * (p - 1) / p * beta
        tree = 2 * math.ceil(math.log2(p)) * alpha_us + 2 * beta
        return {"ring": ring, "tree": tree, "auto": min(ring, tree)}[algorithm]
    if op in ("allgather", "reduce_scatter"):
        return (p - 1) * alpha_us + (p - 1) / p * beta
    if op == "broadcast":
        return (p - 1) * alpha_us + beta
    raise ValueError(f"no formula for {op!r}")


def _hierarchical_us(nbytes: float, nodes: int, per_node: int, intra: tuple[float, float],
                     inter: tuple[float, float]) -> float:
    """Reduce-scatter inside each node, all-reduce each shard across the nodes (the faster algorithm), all-gather
    inside each node."""
    inside = _collective_us("reduce_scatter", nbytes, per_node, *intra, "ring")
    across = _collective_us("allreduce", nbytes / per_node, nodes, *inter, "auto")
    return inside + across + _collective_us("allgather", nbytes, per_node, *intra, "ring")


#: (op, bytes, world size, α µs, GB/s, algorithm, hidden)
PREDICT_CASES = [
    ("allreduce", 64 * 2 ** 20, 8, 5.0, 64.0, "ring", False),
    ("allreduce", 4096, 2, 5.0, 64.0, "ring", False),
    ("allgather", 16 * 2 ** 20, 4, 5.0, 64.0, "ring", False),
    ("allreduce", 2 ** 20, 4, 5.0, 64.0, "auto", False),
    ("allreduce", 1024, 6, 3.0, 100.0, "tree", True),
    ("reduce_scatter", 2 ** 20, 16, 2.0, 25.0, "ring", True),
    ("broadcast", 10 ** 6, 5, 4.0, 50.0, "ring", True),
    ("allreduce", 2 ** 30, 64, 10.0, 200.0, "ring", True),
    ("allreduce", 1000, 64, 10.0, 200.0, "auto", True),
    ("allreduce", 2 ** 30, 8, 5.0, 64.0, "auto", True),
    ("allreduce", 4096, 1, 5.0, 64.0, "ring", True),
    ("allgather", 4096, 1, 5.0, 64.0, "ring", True),
    ("broadcast", 4096, 1, 5.0, 64.0, "ring", True),
    ("allreduce", 4096, 1, 5.0, 64.0, "tree", True),
]

#: (bytes, nodes, devices per node, intra-node (α µs, GB/s), inter-node (α µs, GB/s), hidden)
HIERARCHY_CASES = [
    (64 * 2 ** 20, 4, 8, (2.0, 200.0), (10.0, 25.0), False),
    (2 ** 20, 2, 4, (2.0, 200.0), (10.0, 25.0), False),
    (8 * 2 ** 20, 16, 8, (1.0, 300.0), (15.0, 12.5), True),
    (4096, 8, 4, (2.0, 200.0), (10.0, 25.0), True),
    (32 * 2 ** 20, 1, 8, (2.0, 200.0), (10.0, 25.0), True),
    (32 * 2 ** 20, 6, 1, (2.0, 200.0), (10.0, 25.0), True),
    (32 * 2 ** 20, 1, 1, (2.0, 200.0), (10.0, 25.0), True),
]

#: The functions of npu_lab.distributed.cost that compute an answer of this exercise: a call to one of them while
#: the learner's code runs means the formula was not worked out (the exercise text asks for that).
_COST_FUNCTIONS = ("collective_us", "allreduce_us", "choose_algorithm", "algorithm_for")


def _cost_calls() -> int:
    return cost.calls()


@exercise("ch9.predict_time", "Predict a collective's time from the α–β model, and a two-level all-reduce's",
          names=["predict_us", "hierarchical_allreduce_us"], timeout=30)
def _predict_time(t: Tester, predict_us, hierarchical_allreduce_us) -> None:
    hints = {"allreduce": "ring: 2(p-1)·α + 2(p-1)/p · n/β; tree: 2⌈log2 p⌉·α + 2·n/β; 'auto': the smaller of the "
                          "two; 1 GB/s moves 1000 bytes per µs; one rank has nothing to send",
             "allgather": "(p-1)·α + (p-1)/p · n/β, n the gathered whole; one rank: 0",
             "reduce_scatter": "(p-1)·α + (p-1)/p · n/β, n the whole input; one rank: 0",
             "broadcast": "a pipelined chain: (p-1)·α + n/β; one rank: 0"}
    before = _cost_calls()
    for op, nbytes, world, alpha, gbs, algo, hidden in PREDICT_CASES:
        want = _collective_us(op, nbytes, world, alpha, gbs, algo)
        t.case(f"predict_us({op!r}, {nbytes}, {world}, alpha_us={alpha}, gbs={gbs}, algorithm={algo!r})",
               predict_us, op, nbytes, world, alpha, gbs, algo, expected=float(want), rtol=1e-6, atol=1e-6,
               hidden=hidden, hint=hints[op])
    for nbytes, nodes, per_node, intra, inter, hidden in HIERARCHY_CASES:
        want = _hierarchical_us(nbytes, nodes, per_node, intra, inter)
        t.case(f"hierarchical_allreduce_us({nbytes}, nodes={nodes}, per_node={per_node}, intra={intra}, "
               f"inter={inter})", hierarchical_allreduce_us, nbytes, nodes, per_node, intra, inter,
               expected=float(want), rtol=1e-6, atol=1e-6, hidden=hidden,
               hint="reduce-scatter the n bytes inside a node (per_node ranks, the intra link), all-reduce each "
                    "rank's n/per_node bytes across the nodes (nodes ranks, the inter link, the faster of ring and "
                    "tree), all-gather the n bytes inside the node; a level with one rank costs nothing")
    used = _cost_calls() - before
    t.expect("your functions work the formulas out (they call nothing in npu_lab.distributed.cost)", used == 0,
             expected="no call", got=f"{used} call(s) of {'/'.join(_COST_FUNCTIONS)}",
             hint="write the α–β formulas of the chapter yourself: the exercise is to know them, and the cost module "
                  "is the simulator's own answer")
