"""npuccl, the npu's collective backend (npu_lab/distributed, issue 25), in real processes.

Every multi-process check runs inside one spawned group of 2 ranks (starting processes is what
costs time here): each rank runs the checks below in order and writes which passed to a JSON
file, and one pytest test per check reads both ranks' results. The collectives are compared
with gloo running the same operation on CPU tensors, where gloo has the operation; uneven
all_gather / reduce_scatter / all_to_all (which gloo lacks) are compared with the result
computed from every rank's inputs, which every rank can rebuild from their seeds.
"""

from __future__ import annotations

import copy
import datetime
import io
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import npu_lab
from npu_lab.distributed import cost

WORLD = 2
TIMEOUT = datetime.timedelta(seconds=30)
DEAD_RANK_TIMEOUT_S = 10

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int8,
          torch.bool]
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT]
SHAPES = [(), (1,), (7,), (3, 5), (0,)]

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built in this torch")


# -- helpers the ranks share -----------------------------------------------------------------------


def data(rank: int, shape: tuple[int, ...], dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    """Rank ``rank``'s input: small integers (exact in every dtype, so sums and products are exact)."""
    g = torch.Generator().manual_seed(1000 * rank + salt)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(-4, 5, shape, generator=g).to(dtype)


def npu(t: torch.Tensor) -> torch.Tensor:
    return t.to(f"npu:{torch.npu.current_device()}")


def same(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    actual = actual.cpu()
    if actual.dtype != expected.dtype or actual.shape != expected.shape or not torch.equal(actual, expected):
        raise AssertionError(f"{what}: npuccl gave {actual} ({actual.dtype}), expected {expected} ({expected.dtype})")


def wire_op(op: dist.ReduceOp) -> dist.ReduceOp:
    return dist.ReduceOp.SUM if op == dist.ReduceOp.AVG else op


def finish_avg(t: torch.Tensor, op: dist.ReduceOp) -> torch.Tensor:
    """What AVG is (SUM / world size; integers rounded toward zero), applied to gloo's SUM."""
    if op != dist.ReduceOp.AVG:
        return t
    return t / WORLD if t.is_floating_point() else t.div(WORLD, rounding_mode="trunc")


def reducible(dtype: torch.dtype, op: dist.ReduceOp) -> bool:
    return not (dtype == torch.bool and op == dist.ReduceOp.AVG)


# -- the checks, run by every rank in this order ---------------------------------------------------


def check_backend_is_npuccl(rank: int, gloo: dist.ProcessGroup) -> None:
    from npu_lab.distributed import ProcessGroupNPUCCL

    # The group was made from "cpu:gloo,npu:npuccl": npu tensors go to npuccl.
    assert isinstance(dist.group.WORLD, ProcessGroupNPUCCL), type(dist.group.WORLD)
    assert dist.get_world_size() == WORLD and dist.get_rank() == rank
    assert dist.Backend.default_device_backend_map["npu"] == "npuccl"


def check_all_reduce(rank: int, gloo: dist.ProcessGroup) -> None:
    for dtype in DTYPES:
        for op in OPS:
            for shape in SHAPES:
                x = data(rank, shape, dtype)
                t = npu(x)
                if not reducible(dtype, op):
                    try:
                        dist.all_reduce(t, op=op)
                    except ValueError:
                        continue
                    raise AssertionError("AVG of bool tensors should raise")
                dist.all_reduce(t, op=op)
                ref = x.clone()
                dist.all_reduce(ref, op=wire_op(op), group=gloo)
                same(t, finish_avg(ref, op), f"all_reduce {dtype} {op} {shape}")


def check_all_reduce_non_contiguous(rank: int, gloo: dist.ProcessGroup) -> None:
    x = data(rank, (5, 3), torch.float32)
    t = npu(x).t()  # a transposed view: staged through a dense buffer and copied back
    dist.all_reduce(t)
    ref = x.clone()
    dist.all_reduce(ref, group=gloo)
    same(t, ref.t(), "all_reduce of a transposed npu tensor")


def check_async_work_and_future(rank: int, gloo: dist.ProcessGroup) -> None:
    t = npu(torch.ones(4))
    work = dist.all_reduce(t, async_op=True)
    assert work.wait()
    value = work.get_future().wait()
    assert value[0].data_ptr() == t.data_ptr(), "the future holds the reduced npu tensor"
    same(t, torch.full((4,), float(WORLD)), "async all_reduce")


def check_all_reduce_coalesced(rank: int, gloo: dist.ProcessGroup) -> None:
    xs = [data(rank, (3,), torch.float32, s) for s in range(3)]
    ts = [npu(x) for x in xs]
    dist.group.WORLD.allreduce_coalesced(ts, dist.AllreduceCoalescedOptions()).wait()
    for i, (t, x) in enumerate(zip(ts, xs)):
        ref = x.clone()
        dist.all_reduce(ref, group=gloo)
        same(t, ref, f"allreduce_coalesced tensor {i}")


def check_broadcast(rank: int, gloo: dist.ProcessGroup) -> None:
    for dtype in DTYPES:
        for root in range(WORLD):
            x = data(rank, (6,), dtype)
            t = npu(x)
            dist.broadcast(t, src=root)
            dist.broadcast(x, src=root, group=gloo)
            same(t, x, f"broadcast {dtype} from {root}")


def check_reduce(rank: int, gloo: dist.ProcessGroup) -> None:
    root = WORLD - 1
    for dtype in DTYPES:
        for op in OPS:
            if not reducible(dtype, op):
                continue
            x = data(rank, (2, 3), dtype)
            t = npu(x)
            dist.reduce(t, dst=root, op=op)
            ref = x.clone()
            dist.reduce(ref, dst=root, op=wire_op(op), group=gloo)
            if rank == root:
                same(t, finish_avg(ref, op), f"reduce {dtype} {op}")


def check_all_gather(rank: int, gloo: dist.ProcessGroup) -> None:
    for dtype in DTYPES:
        x = data(rank, (2, 3), dtype)
        outs = [npu(torch.zeros(2, 3, dtype=dtype)) for _ in range(WORLD)]
        dist.all_gather(outs, npu(x))
        refs = [torch.zeros(2, 3, dtype=dtype) for _ in range(WORLD)]
        dist.all_gather(refs, x, group=gloo)
        for r in range(WORLD):
            same(outs[r], refs[r], f"all_gather {dtype} piece {r}")


def check_all_gather_uneven(rank: int, gloo: dist.ProcessGroup) -> None:
    # Rank r contributes r + 1 rows: gloo cannot do this, NCCL can, npuccl does.
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        outs = [npu(torch.zeros(r + 1, 3, dtype=dtype)) for r in range(WORLD)]
        dist.all_gather(outs, npu(data(rank, (rank + 1, 3), dtype)))
        for r in range(WORLD):
            same(outs[r], data(r, (r + 1, 3), dtype), f"uneven all_gather {dtype} piece {r}")


def check_all_gather_into_tensor(rank: int, gloo: dist.ProcessGroup) -> None:
    for dtype in DTYPES:
        x = data(rank, (3,), dtype)
        out = npu(torch.zeros(3 * WORLD, dtype=dtype))
        dist.all_gather_into_tensor(out, npu(x))
        ref = torch.zeros(3 * WORLD, dtype=dtype)
        dist.all_gather_into_tensor(ref, x, group=gloo)
        same(out, ref, f"all_gather_into_tensor {dtype}")


def check_reduce_scatter(rank: int, gloo: dist.ProcessGroup) -> None:
    # Against gloo's allreduce of the whole list (gloo has no list reduce_scatter), even and uneven pieces.
    for sizes in ([4] * WORLD, [r + 2 for r in range(WORLD)]):
        for dtype in DTYPES:
            for op in OPS:
                if not reducible(dtype, op):
                    continue
                xs = [data(rank, (n,), dtype, salt=i) for i, n in enumerate(sizes)]
                out = npu(torch.zeros(sizes[rank], dtype=dtype))
                dist.reduce_scatter(out, [npu(x) for x in xs], op=op)
                ref = torch.cat(xs)
                dist.all_reduce(ref, op=wire_op(op), group=gloo)
                mine = finish_avg(ref, op).split(sizes)[rank]
                same(out, mine, f"reduce_scatter {sizes} {dtype} {op}")


def check_reduce_scatter_tensor(rank: int, gloo: dist.ProcessGroup) -> None:
    for dtype in DTYPES:
        for op in OPS:
            if not reducible(dtype, op):
                continue
            x = data(rank, (WORLD * 3,), dtype)
            src = npu(x)
            out = npu(torch.zeros(3, dtype=dtype))
            dist.reduce_scatter_tensor(out, src, op=op)
            same(src, x, f"reduce_scatter_tensor {dtype} {op} leaves its input alone")
            ref = x.clone()
            dist.all_reduce(ref, op=wire_op(op), group=gloo)
            same(out, finish_avg(ref, op)[rank * 3:(rank + 1) * 3], f"reduce_scatter_tensor {dtype} {op}")


def check_all_to_all_single(rank: int, gloo: dist.ProcessGroup) -> None:
    for dtype in DTYPES:
        x = data(rank, (WORLD * 2, 3), dtype)
        out = npu(torch.zeros(WORLD * 2, 3, dtype=dtype))
        dist.all_to_all_single(out, npu(x))
        ref = torch.zeros(WORLD * 2, 3, dtype=dtype)
        dist.all_to_all_single(ref, x, group=gloo)
        same(out, ref, f"all_to_all_single {dtype}")
    # Uneven: rank r sends r + p + 1 rows to rank p.
    in_splits = [rank + p + 1 for p in range(WORLD)]
    out_splits = [r + rank + 1 for r in range(WORLD)]
    x = data(rank, (sum(in_splits), 2), torch.float32)
    out = npu(torch.zeros(sum(out_splits), 2))
    dist.all_to_all_single(out, npu(x), out_splits, in_splits)
    ref = torch.zeros(sum(out_splits), 2)
    dist.all_to_all_single(ref, x, out_splits, in_splits, group=gloo)
    same(out, ref, "all_to_all_single with uneven splits")


def check_all_to_all_list(rank: int, gloo: dist.ProcessGroup) -> None:
    # Rank r sends rank p a (r + p + 1)-element piece; every rank rebuilds what it should receive.
    ins = [data(rank, (rank + p + 1,), torch.int32, salt=p) for p in range(WORLD)]
    outs = [npu(torch.zeros(r + rank + 1, dtype=torch.int32)) for r in range(WORLD)]
    dist.all_to_all(outs, [npu(t) for t in ins])
    for r in range(WORLD):
        same(outs[r], data(r, (r + rank + 1,), torch.int32, salt=rank), f"all_to_all piece from {r}")


def check_gather_scatter(rank: int, gloo: dist.ProcessGroup) -> None:
    root = 0
    x = data(rank, (4,), torch.float16)
    outs = [npu(torch.zeros(4, dtype=torch.float16)) for _ in range(WORLD)] if rank == root else None
    dist.gather(npu(x), outs, dst=root)
    if rank == root:
        for r in range(WORLD):
            same(outs[r], data(r, (4,), torch.float16), f"gather piece {r}")
    pieces = [npu(data(r, (3,), torch.int64, salt=7)) for r in range(WORLD)] if rank == root else None
    out = npu(torch.zeros(3, dtype=torch.int64))
    dist.scatter(out, pieces, src=root)
    same(out, data(rank, (3,), torch.int64, salt=7), "scatter")


def check_send_recv(rank: int, gloo: dist.ProcessGroup) -> None:
    peer = 1 - rank
    for dtype in (torch.float32, torch.bfloat16, torch.bool):
        if rank == 0:
            dist.send(npu(data(0, (5,), dtype)), dst=peer)
        else:
            t = npu(torch.zeros(5, dtype=dtype))
            dist.recv(t, src=peer)
            same(t, data(0, (5,), dtype), f"send/recv {dtype}")
    # isend / irecv both ways at once, and a receive from any source.
    out = npu(torch.zeros(3))
    works = [dist.isend(npu(data(rank, (3,), torch.float32)), dst=peer), dist.irecv(out, src=peer)]
    for w in works:
        w.wait()
    same(out, data(peer, (3,), torch.float32), "isend/irecv")
    if rank == 1:
        dist.send(npu(torch.arange(4.0)), dst=0, tag=5)
    else:
        t = npu(torch.zeros(4))
        src = dist.recv(t, tag=5)
        assert src == 1, src
        same(t, torch.arange(4.0), "recv from any source")


def check_barrier(rank: int, gloo: dist.ProcessGroup) -> None:
    for _ in range(3):
        dist.barrier()


def check_device_clock_and_profile(rank: int, gloo: dist.ProcessGroup) -> None:
    from npu_lab.device.clock import clock

    t = npu(torch.ones(256 * 1024))  # 1 MiB of float32
    nbytes = t.numel() * 4
    link = cost.device_link()
    algo = cost.algorithm_for("allreduce", nbytes, WORLD, link)
    expect_us = cost.collective_us("allreduce", nbytes, WORLD, link, algo)
    ring = 2 * (WORLD - 1) * link.alpha_us + 2 * (WORLD - 1) / WORLD * nbytes / (link.gbs * 1e3)
    assert algo == "ring" and abs(expect_us - ring) < 1e-9, (algo, expect_us, ring)
    device = torch.npu.current_device()
    before = clock(device).now()
    with npu_lab.profile() as prof:
        dist.all_reduce(t)
    collectives = [k for k in prof.kernels if k.kind == "collective"]
    assert [k.name for k in collectives] == ["npuccl:allreduce"], [k.name for k in prof.kernels]
    k = collectives[0]
    assert abs(k.sim_us - expect_us) < 1e-6, (k.sim_us, expect_us)
    assert k.start_us >= before and clock(device).now() >= k.end_us
    assert "npuccl:allreduce" in prof.table()


def check_debug_log(rank: int, gloo: dist.ProcessGroup) -> None:
    captured = io.StringIO()
    old_err, old_env = sys.stderr, os.environ.get("NPU_LAB_CCL_DEBUG")
    os.environ["NPU_LAB_CCL_DEBUG"] = "INFO"
    sys.stderr = captured
    try:
        dist.all_reduce(npu(torch.ones(8)), op=dist.ReduceOp.MAX)
        dist.broadcast(npu(torch.ones(2, dtype=torch.int64)), src=0)
    finally:
        sys.stderr = old_err
        if old_env is None:
            del os.environ["NPU_LAB_CCL_DEBUG"]
        else:
            os.environ["NPU_LAB_CCL_DEBUG"] = old_env
    lines = captured.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert "NPUCCL INFO allreduce" in lines[0] and "32 bytes float32 op=MAX algo=ring peers=2 sim=" in lines[0], lines
    assert f"[npu:{torch.npu.current_device()}]" in lines[0], lines
    assert "broadcast" in lines[1] and "root=0 algo=chain" in lines[1], lines
    dist.all_reduce(npu(torch.ones(1)))  # and silent again
    assert captured.getvalue().count("\n") == 2


def check_functional_collectives_find_the_group_by_name(rank: int, gloo: dist.ProcessGroup) -> None:
    # torch.distributed._functional_collectives (FSDP2, DTensor, torch.compile) dispatch through c10d ops
    # that look the group up by name, and their wait_tensor is a stream wait on the comm stream.
    import torch.distributed._functional_collectives as funcol

    from npu_lab.distributed import timeline

    group = dist.group.WORLD
    assert group.group_name == "0", group.group_name
    x = npu(data(rank, (6,), torch.float32))
    want = sum(data(r, (6,), torch.float32) for r in range(WORLD))
    index = torch.npu.current_device()
    with timeline.recording() as records:
        total = funcol.all_reduce(x, "sum", group)
        same(total, want, "functional all_reduce")  # reading it waits (wait_tensor)
    (rec,) = records
    assert torch.npu.current_stream().simulated_time_us >= rec.end_us
    assert rec.device == index
    gathered = funcol.all_gather_tensor(x, 0, group)
    same(gathered, torch.cat([data(r, (6,), torch.float32) for r in range(WORLD)]), "functional all_gather")
    piece = funcol.reduce_scatter_tensor(npu(torch.arange(4.0)), "sum", 0, group)
    same(piece, torch.arange(4.0).chunk(WORLD)[rank] * WORLD, "functional reduce_scatter")


def check_ddp_equals_one_process(rank: int, gloo: dist.ProcessGroup) -> None:
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    whole = copy.deepcopy(model).to("npu")  # one process, whole batch
    ddp = DistributedDataParallel(model.to("npu"), bucket_cap_mb=0.001)  # several buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    whole_opt = torch.optim.SGD(whole.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x, y = torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(npu(x.chunk(WORLD)[rank])), npu(y.chunk(WORLD)[rank])).backward()
        opt.step()
        whole_opt.zero_grad()
        torch.nn.functional.mse_loss(whole(npu(x)), npu(y)).backward()
        whole_opt.step()
    for (name, p), q in zip(ddp.module.named_parameters(), whole.parameters()):
        assert p.device.type == "npu"
        diff = (p.detach().cpu() - q.detach().cpu()).abs().max().item()
        assert diff < 1e-5, f"{name}: DDP on {WORLD} processes differs from one process by {diff}"


def check_pending_work_does_not_keep_the_group_alive(rank: int, gloo: dist.ProcessGroup) -> None:
    # A collective's completion callback runs on one of gloo's worker threads. If it held the npuccl
    # group, a group destroyed while a collective was in flight would be freed on that thread: gloo's
    # destructor then joins its own thread and the process aborts ("Resource deadlock avoided").
    import gc
    import weakref

    from npu_lab.distributed import ProcessGroupNPUCCL

    group = dist.new_group(backend="npuccl")
    assert isinstance(group, ProcessGroupNPUCCL), type(group)
    inner = group._gloo  # kept, so the collective can still finish after the group is gone
    ref = weakref.ref(group)
    t = npu(torch.ones(4))
    if rank == 1:
        time.sleep(1.5)  # rank 0's collective is in flight while it destroys its group (1.5 s: even on a busy machine)
    work = dist.all_reduce(t, group=group, async_op=True)
    dist.destroy_process_group(group)
    del group
    gc.collect()
    alive = ref() is not None
    assert work.wait()
    same(t, torch.full((4,), float(WORLD)), "all_reduce on a group destroyed while it ran")
    del inner
    assert not alive or rank == 1, "a pending collective's callback keeps the npuccl group alive"


CHECKS: dict[str, Callable[[int, dist.ProcessGroup], None]] = {
    name.removeprefix("check_"): fn for name, fn in globals().items() if name.startswith("check_")
}


# -- the processes ---------------------------------------------------------------------------------


def _suite_worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.npu.set_device(rank % torch.npu.device_count())
    dist.init_process_group("cpu:gloo,npu:npuccl", init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD, timeout=TIMEOUT)
    gloo = dist.new_group(backend="gloo")
    results: dict[str, object] = {}
    for name, check in CHECKS.items():
        t0 = time.perf_counter()
        try:
            check(rank, gloo)
            results[name] = {"ok": True, "s": time.perf_counter() - t0}
        except Exception:
            results[name] = {"ok": False, "error": traceback.format_exc()}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def suite() -> dict[int, dict[str, dict]]:
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_suite_worker, args=(os.path.join(tmp, "init"), tmp), nprocs=WORLD)
        return {r: json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(WORLD)}


@pytest.mark.parametrize("name", list(CHECKS))
def test_npuccl(suite: dict[int, dict[str, dict]], name: str) -> None:
    errors = [f"rank {r}:\n{suite[r][name]['error']}" for r in range(WORLD) if not suite[r][name]["ok"]]
    assert not errors, "\n".join(errors)


def test_registered_on_import() -> None:
    assert "npuccl" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["npu"] == "npuccl"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"
    assert set(dist.Backend.backend_capability["npuccl"]) == {"npu", "cpu"}


def test_cost_model_formulas() -> None:
    link = cost.Link(alpha_us=5.0, gbs=50.0)
    n, p = 64e6, 8
    assert cost.collective_us("allreduce", n, p, link, "ring") == pytest.approx(2 * 7 * 5 + 2 * 7 / 8 * n / 50e3)
    assert cost.collective_us("allreduce", n, p, link, "tree") == pytest.approx(2 * 3 * 5 + 2 * n / 50e3)
    assert cost.choose_algorithm(n, p, link) == "ring"  # big messages: bandwidth wins
    assert cost.choose_algorithm(8, 64, link) == "tree"  # small messages over many ranks: latency wins
    assert cost.collective_us("allgather", n, p, link) == pytest.approx(7 * 5 + 7 / 8 * n / 50e3)
    t = cost.collective_us("allreduce", n, p, link, "ring")
    # The ring's bus bandwidth approaches the link bandwidth as messages grow.
    assert 0.95 * 50 < cost.bus_bandwidth("allreduce", n, p, t) <= 50
    assert cost.collective_us("allreduce", n, 1, link) == 0.0


# -- failure: a rank that never joins, a rank that dies --------------------------------------------


def _lonely_worker(init_file: str, queue: mp.Queue) -> None:
    t0 = time.perf_counter()
    try:
        dist.init_process_group("npuccl", init_method=f"file://{init_file}", rank=0, world_size=WORLD,
                                timeout=datetime.timedelta(seconds=DEAD_RANK_TIMEOUT_S))
        dist.all_reduce(npu(torch.ones(1)))
        queue.put(("no error", time.perf_counter() - t0))
    except Exception as exc:
        queue.put((f"{type(exc).__name__}: {exc}", time.perf_counter() - t0))


def _dying_worker(rank: int, init_file: str, queue: mp.Queue) -> None:
    # No backend named: the accelerator is npu, so init_process_group() picks npuccl.
    dist.init_process_group(init_method=f"file://{init_file}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=DEAD_RANK_TIMEOUT_S))
    backend = dist.group.WORLD.name()
    dist.all_reduce(npu(torch.ones(1)))  # both alive: works
    if rank == 1:
        os._exit(3)  # dies without a word
    time.sleep(0.5)
    t0 = time.perf_counter()
    try:
        dist.all_reduce(npu(torch.ones(1)))
        queue.put((backend, "no error", time.perf_counter() - t0))
    except Exception as exc:
        queue.put((backend, f"{type(exc).__name__}: {exc}", time.perf_counter() - t0))
    queue.close()
    queue.join_thread()  # the result is sent before the process ends abruptly
    os._exit(0)  # skip destroy_process_group: its peer is gone


def _run(target: Callable, args: tuple, nprocs: int) -> tuple:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args[:-1], queue) if nprocs == 1 else (r, *args[:-1], queue))
             for r in range(nprocs)]
    for p in procs:
        p.start()
    try:
        return queue.get(timeout=DEAD_RANK_TIMEOUT_S + 90)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()


def test_rank_that_never_joins_times_out() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        message, elapsed = _run(_lonely_worker, (os.path.join(tmp, "init"), None), nprocs=1)
    assert message.startswith("DistBackendError"), message
    assert "could not reach every other rank" in message, message
    assert elapsed < DEAD_RANK_TIMEOUT_S * 3, elapsed


def test_rank_that_dies_raises_on_the_others() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        backend, message, elapsed = _run(_dying_worker, (os.path.join(tmp, "init"), None), nprocs=WORLD)
    assert backend == "npuccl"
    assert message.startswith("DistBackendError"), message
    assert "npuccl allreduce" in message and "rank 0 of 2" in message, message
    assert elapsed < DEAD_RANK_TIMEOUT_S + 5, elapsed
