"""Chapter 9's machinery: launch (processes from a notebook), the bucket model, the ring drawing's states."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

import npu_lab  # noqa: F401 - registers npuccl
from npu_lab.distributed import cost
from npu_lab.distributed.examples import pictures
from npu_lab.distributed.launch import WorkerError, launch
from npu_lab.exercises import ch9

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built in this torch")


# -- workers (module level: a spawned process imports them) ---------------------------------------

def sum_of_ranks(scale: float) -> dict:
    t = torch.full((4,), float(dist.get_rank() + 1), device="npu")
    dist.all_reduce(t)
    print("hello from", dist.get_rank())
    return {"rank": dist.get_rank(), "sum": t * scale, "device": str(t.device),
            "threads": (os.environ["OMP_NUM_THREADS"], os.environ["NUMBA_NUM_THREADS"], os.environ.get("EXTRA"))}


def fails_on_rank_one() -> None:
    if dist.get_rank() == 1:
        raise ValueError("rank one is broken")
    dist.all_reduce(torch.ones(1, device="npu"))  # waits for rank 1, which never comes


def test_launch_gathers_values_logs_and_output() -> None:
    results = launch(sum_of_ranks, 2, args=(0.5,), debug=True, env={"EXTRA": "x"}, timeout=120)
    assert [r.rank for r in results] == [0, 1]
    for r in results:
        assert r.value["rank"] == r.rank
        assert r.value["sum"].device.type == "cpu"  # moved to the CPU to cross to the notebook
        torch.testing.assert_close(r.value["sum"], torch.full((4,), 1.5))
        assert r.value["device"] == f"npu:{r.rank}"
        assert r.value["threads"] == ("1", "1", "x")
        assert r.seconds > 0 and r.startup_seconds > 0
        assert f"hello from {r.rank}" in r.output
        lines = [x for x in r.log if "NPUCCL INFO allreduce" in x]
        assert lines and "16 bytes float32 op=SUM" in lines[0], r.log


def test_a_failing_worker_raises_worker_error_naming_it() -> None:
    with pytest.raises(WorkerError) as info:
        launch(fails_on_rank_one, 2, timeout=120, collective_timeout=20)
    err = info.value
    assert err.rank == 1
    assert "ValueError: rank one is broken" in str(err)
    assert set(err.logs) == {0, 1}


def test_notebook_functions_and_bad_arguments_are_refused() -> None:
    def local() -> None:
        pass

    with pytest.raises(TypeError, match="spawned worker starts a fresh Python"):
        launch(local, 2)
    with pytest.raises(TypeError, match="spawned worker"):
        launch(lambda: None, 2)
    with pytest.raises(ValueError, match="nprocs"):
        launch(sum_of_ranks, 0)


# -- the bucket model and the ring ------------------------------------------------------------------

def _trace() -> ch9.BackwardTrace:
    mb = 2 ** 20
    return ch9.BackwardTrace(("c", "b", "a"), (4 * mb, 4 * mb, 4 * mb), (100.0, 200.0, 300.0), 300.0)


def test_buckets_fill_in_ready_order_and_close_once_they_hold_the_cap() -> None:
    trace = _trace()
    assert ch9._buckets(trace, 1) == [[0], [1], [2]]  # a gradient larger than the cap gets its own bucket
    assert ch9._buckets(trace, 8) == [[0, 1], [2]]  # 4 + 4 MB reach the 8 MB cap: the bucket closes
    assert ch9._buckets(trace, 7) == [[0, 1], [2]]  # it closes after the gradient that passes the cap (as DDP)
    assert ch9._buckets(trace, 100) == [[0, 1, 2]]
    with pytest.raises(ValueError, match="positive"):
        ch9._buckets(trace, 0)


def test_step_time_replays_the_cost_model() -> None:
    trace, link, p = _trace(), cost.Link(5.0, 64.0), 8
    one = cost.collective_us("allreduce", 12 * 2 ** 20, p, link, cost.choose_algorithm(12 * 2 ** 20, p, link))
    assert ch9.step_time_us(trace, 100, p, link) == pytest.approx(300 + one)  # one bucket after the backward
    each = cost.collective_us("allreduce", 4 * 2 ** 20, p, link, cost.choose_algorithm(4 * 2 ** 20, p, link))
    sched = ch9.bucket_schedule(trace, 1, p, link)
    assert [s for s, _, _ in sched] == pytest.approx([100, max(200, 100 + each), max(300, 100 + 2 * each)])
    assert ch9.step_time_us(trace, 1, p, link) == pytest.approx(sched[-1][1])


def test_trace_backward_records_every_gradient_on_the_device_clock() -> None:
    model = ch9.deep_mlp(64, 3, 0).to("npu")
    trace = ch9.trace_backward(model, torch.randn(8, 64).to("npu"))
    assert sorted(trace.names) == sorted(n for n, _ in model.named_parameters())
    assert trace.names[0].startswith("2.")  # the last layer's gradients are ready first
    assert list(trace.ready_us) == sorted(trace.ready_us) and trace.ready_us[-1] <= trace.backward_us + 1e-6
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("world", [2, 3, 4, 5])
def test_ring_states_end_with_every_chunk_summed_everywhere(world: int) -> None:
    states = pictures.ring_states(world)
    assert len(states) == 1 + 2 * (world - 1)
    after_rs = states[world - 1][1]
    for r in range(world):  # after the reduce-scatter, rank r owns chunk (r + 1) % N in full
        assert after_rs[r][(r + 1) % world] == frozenset(range(world))
    assert all(c == frozenset(range(world)) for row in states[-1][1] for c in row)


def test_rank_threads_that_outlive_their_time_are_stopped() -> None:
    """An answer looping forever in a rank thread (even inside ``except Exception``) is stopped when the
    check gives up: no rank thread keeps running (and burning a core) after run_ranks returns."""
    import threading
    import time

    def spin(rank, group):
        while True:
            try:
                while True:
                    pass
            except Exception:  # noqa: BLE001, S110 - what a careless answer does
                pass

    with pytest.raises(TimeoutError, match="did not finish"):
        ch9.run_ranks(2, spin, timeout=0.5)
    end = time.monotonic() + 30  # a rank still joining its group (C code) gets the exception when it returns
    while time.monotonic() < end and [t for t in threading.enumerate() if t.name.startswith("rank") and t.is_alive()]:
        time.sleep(0.1)
    assert not [t for t in threading.enumerate() if t.name.startswith("rank") and t.is_alive()]


def test_a_desync_shows_in_every_ranks_debug_log() -> None:
    """The chapter's desync: the ranks call their two all-reduces in different orders. The launch fails, and
    each rank's log holds its own first all-reduce (logged before gloo is called, so a rank whose call failed
    at once, its peer already gone, still has its line)."""
    from npu_lab.distributed.examples import workers

    with pytest.raises(WorkerError) as info:
        launch(workers.desync, 2, debug=True, timeout=60, collective_timeout=10)
    firsts = [next(x for x in info.value.logs[r] if "allreduce #1:" in x) for r in (0, 1)]
    assert "4096 bytes" in firsts[0] and "64 bytes" in firsts[1]
