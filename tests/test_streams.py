"""Streams and events on the simulated clock."""

import pytest
import torch

import npu_lab


def test_event_elapsed_time_follows_cost_model():
    a = torch.randn(256, 256, device="npu")
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    torch.npu.synchronize()
    start.record()
    a @ a
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    cm = npu_lab.cost_model
    flops = 2 * 256**3
    nbytes = 3 * 256 * 256 * 4
    expected_us = cm.event_us + cm.kernel_us(flops, nbytes)  # recording `start` takes event_us of the stream
    assert ms == pytest.approx(expected_us / 1000, rel=1e-9)


def test_elapsed_time_is_deterministic():
    def run():
        x = torch.ones(10_000, device="npu")
        s, e = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
        s.record()
        for _ in range(3):
            x = x * 2 + 1
        e.record()
        return s.elapsed_time(e)

    assert run() == run() > 0


def test_event_errors_like_cuda():
    s, e = torch.npu.Event(), torch.npu.Event()
    s.record()
    e.record()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        s.elapsed_time(e)
    with pytest.raises(RuntimeError, match="recorded"):
        torch.npu.Event(enable_timing=True).elapsed_time(torch.npu.Event(enable_timing=True))


def test_streams_have_their_own_clock_and_sync_joins_them():
    torch.npu.synchronize()
    side = torch.npu.Stream()
    main = torch.npu.current_stream()
    assert main == torch.npu.default_stream()
    t0 = side.simulated_time_us
    with torch.npu.stream(side):
        assert torch.npu.current_stream() == side
        torch.ones(1000, device="npu").mul_(3)
    assert torch.npu.current_stream() == main
    assert side.simulated_time_us > t0
    torch.npu.synchronize()
    assert side.simulated_time_us == main.simulated_time_us


def test_wait_event_orders_streams():
    torch.npu.synchronize()
    side = torch.npu.Stream()
    with torch.npu.stream(side):
        torch.ones(100_000, device="npu").mul_(3)
        done = torch.npu.Event(enable_timing=True)
        done.record()
    main = torch.npu.current_stream()
    assert main.simulated_time_us < done.time_us
    main.wait_event(done)
    assert main.simulated_time_us == done.time_us
    assert side.query() and done.query()


def test_future_callbacks_take_streams_from_a_fixed_pool():
    """Future.then on npu runs each callback on a stream from the device's pool (getStreamFromGlobalPool):
    a fixed set handed out round robin, like CUDA's, not a new stream per call (DDP comm hooks call it every step)."""
    seen = []
    for _ in range(20):
        fut = torch.futures.Future(devices=["npu:0"])
        chained = fut.then(lambda f: seen.append(torch.npu.current_stream().stream_id) or f.value())
        fut.set_result(torch.ones(2, device="npu"))
        torch.testing.assert_close(chained.wait().cpu(), torch.ones(2))
    assert len(seen) == 20
    assert len(set(seen)) == 8
    assert seen[:8] == seen[8:16]  # round robin
    assert torch.npu.default_stream().stream_id not in seen
