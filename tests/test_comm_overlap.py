"""npuccl's communication stream: collectives overlap compute on the simulated clock.

Two processes. A collective runs on the device's communication stream, starting where the
caller's stream stood; the caller's stream keeps computing; ``wait()`` is a stream wait to the
collective's end. DDP's bucket allreduces overlap backward (:func:`ddp_overlap`).
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.distributed as dist

from npu_lab.distributed import cost, timeline
from npu_lab.distributed.launch import launch
from npu_lab.distributed.overlap import BucketTiming, OverlapReport, ddp_overlap, mlp_model, random_batch


def overlap_worker() -> dict:
    """An async allreduce, compute on the current stream meanwhile, then wait()."""
    import npu_lab
    from npu_lab.device import native

    _C = native.load()
    index = torch.npu.current_device()
    world = dist.get_world_size()
    x = torch.ones(256 * 1024, device="npu")  # 1 MiB
    a = torch.randn(128, 128).to("npu")
    compute = _C.current_stream(index)
    torch.npu.synchronize()
    with npu_lab.profile() as prof:
        issued = _C.stream_time(index, compute)
        work = dist.all_reduce(x, async_op=True)
        after_issue = _C.stream_time(index, compute)
        for _ in range(3):
            a = torch.tanh(a @ a)
        computed = _C.stream_time(index, compute)
        work.wait()
        waited = _C.stream_time(index, compute)
        y = torch.full((64,), 2.0, device="npu")
        dist.all_reduce(y)  # synchronous: the stream continues after it
        sync_after = _C.stream_time(index, compute)
    coll = [k for k in prof.kernels if k.kind == "collective"]
    link = cost.device_link()
    return {
        "value_ok": bool((x.cpu() == world).all()) and bool((y.cpu() == 2.0 * world).all()),
        "compute": compute, "issued": issued, "after_issue": after_issue, "computed": computed,
        "waited": waited, "sync_after": sync_after,
        "coll": [(k.name, k.stream, k.start_us, k.end_us, k.bytes_read) for k in coll],
        "lanes": {s: prof.lane_name(s) for s in {k.stream for k in prof.kernels}},
        "comm_stream": timeline.comm_stream(index),
        "expect_us": cost.collective_us("allreduce", x.numel() * 4, world, link,
                                        cost.algorithm_for("allreduce", x.numel() * 4, world, link)),
        "trace_names": [e["args"]["name"] for e in prof.chrome_trace()["traceEvents"] if e["name"] == "thread_name"],
    }


@pytest.fixture(scope="module")
def async_run() -> list[dict]:
    return [r.value for r in launch(overlap_worker, nprocs=2, timeout=180)]


def test_collective_runs_on_the_comm_stream_from_where_the_caller_stood(async_run: list[dict]) -> None:
    for r in async_run:
        assert r["value_ok"]
        name, stream, start, end, nbytes = r["coll"][0]
        assert name == "npuccl:allreduce" and nbytes == 1 << 20
        assert stream == r["comm_stream"] != r["compute"]
        assert start == pytest.approx(r["issued"])  # the comm stream waited for the caller's stream
        assert end - start == pytest.approx(r["expect_us"])
        assert r["after_issue"] == pytest.approx(r["issued"])  # issuing did not charge the compute stream


def test_compute_overlaps_and_wait_is_a_stream_wait(async_run: list[dict]) -> None:
    for r in async_run:
        _, _, start, end, _ = r["coll"][0]
        compute_us = r["computed"] - r["issued"]
        assert compute_us > 0
        # wait() moved the compute stream to the collective's end, no further
        assert r["waited"] == pytest.approx(max(r["computed"], end))
        # overlapped: less than compute then communication one after the other
        assert r["waited"] - r["issued"] < compute_us + (end - start) - 1e-6
        # a synchronous collective leaves the caller's stream after its end
        _, _, _, sync_end, _ = r["coll"][1]
        assert r["sync_after"] >= sync_end


def test_profile_shows_the_comm_lane(async_run: list[dict]) -> None:
    for r in async_run:
        assert r["lanes"][r["comm_stream"]] == f"stream {r['comm_stream']} (comm)"
        assert r["lanes"][r["compute"]] == f"stream {r['compute']}"
        assert f"stream {r['comm_stream']} (comm)" in r["trace_names"]


SMALL_MODEL = functools.partial(mlp_model, width=256, depth=4)
SMALL_BATCH = functools.partial(random_batch, batch=32, width=256)


@pytest.fixture(scope="module")
def ddp_reports() -> list[OverlapReport]:
    return ddp_overlap(SMALL_MODEL, SMALL_BATCH, bucket_cap_mb=[0.1, 25], world_size=2)


def test_ddp_small_buckets_overlap_backward(ddp_reports: list[OverlapReport]) -> None:
    small, big = ddp_reports
    params = sum(p.numel() * 4 for p in SMALL_MODEL().parameters())
    for rep in ddp_reports:
        assert sum(b.nbytes for b in rep.buckets) == params
        assert rep.step_us_per_rank[0] == pytest.approx(rep.step_us_per_rank[1])
        assert rep.compute_us > 0 and rep.comm_us > 0
        for b in rep.buckets:
            assert isinstance(b, BucketTiming)
            assert b.ready_us <= b.start_us < b.end_us <= rep.step_us + 1e-6
            assert rep.backward_start_us <= b.ready_us <= rep.backward_end_us
        phases = {c.phase for c in rep.compute}
        assert phases == {"forward", "backward", "copy-back", "optimizer"}
        last_ready = max(b.ready_us for b in rep.buckets)
        assert all(c.start_us < last_ready for c in rep.compute if c.phase == "backward")
        # DDP copies an averaged bucket back into .grad once its allreduce is done (so none before the first)
        copies = [c for c in rep.compute if c.phase == "copy-back"]
        assert copies and all(c.name.startswith("memcpy") for c in copies)
        assert min(c.start_us for c in copies) >= min(b.end_us for b in rep.buckets) - 1e-6
    assert len(small.buckets) == 4 and len(big.buckets) == 1
    # several buckets: their allreduces run while backward still computes
    assert small.buckets[0].end_us < small.backward_end_us
    assert small.step_us < small.serial_us - 1e-6
    assert small.overlap_fraction > 0.5
    # one bucket is ready only when backward ends: nothing to overlap with
    assert big.step_us == pytest.approx(big.serial_us, rel=1e-6)
    assert big.overlap_fraction == pytest.approx(0.0, abs=1e-6)
    assert "4 buckets," in small.summary() and "1 bucket," in big.summary()
    ax = small.plot()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["comm stream\n(allreduce)", "compute stream"]
    assert len(ax.collections) == 4 + len(small.buckets)  # four compute phases, one bar per bucket


def test_profile_names_a_stream_of_collectives_the_comm_lane() -> None:
    from npu_lab.profiler import KernelEvent, Profile

    prof = Profile(kernels=[
        KernelEvent("mm", "kernel", "aten::mm", (), 0, 1e6, 100, 100, 0.0, 5.0, 0.0),
        KernelEvent("npuccl:allreduce", "collective", "", (), 3, 0.0, 64, 64, 1.0, 9.0, 0.0),
    ])
    assert prof.comm_streams == {3}
    assert prof.lane_name(3) == "stream 3 (comm)" and prof.lane_name(0) == "stream 0"
    ax = prof.plot_timeline()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["stream 0", "stream 3 (comm)"]


def test_ddp_overlap_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        ddp_overlap(bucket_cap_mb=0)
    with pytest.raises(ValueError, match="world_size"):
        ddp_overlap(world_size=0)
    with pytest.raises(TypeError, match="importable"):
        ddp_overlap(lambda: torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="unknown figures"):
        ddp_overlap(cost_model={"warp_speed": 9.0})
