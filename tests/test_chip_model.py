"""The simulated chip: presets, host and device time lines, matrix units, pinned copies, graph replay."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity
from torch.profiler import profile as torch_profile

import npu_lab
from npu_lab.device import chips as chips_module
from npu_lab.device import clock


def timed_us(fn) -> float:
    """Simulated microseconds of ``fn`` between two events, the host waiting for the device after."""
    torch.npu.synchronize()
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000


@pytest.fixture(autouse=True)
def teaching_chip_after():
    yield
    npu_lab.use_chip("teaching")


def test_presets_are_documented_and_switch_back():
    presets = npu_lab.chips()
    assert {"teaching", "gpu-like", "npu-like", "edge"} <= set(presets)
    assert presets["teaching"].figures == npu_lab.CostModel()  # the chapters' figures, unchanged
    for chip in presets.values():
        assert chip.sources and chip.summary
        assert chip.name in chip.describe()
    assert npu_lab.current_chip() == "teaching"
    with npu_lab.use_chip("gpu-like") as chip:
        assert chip.name == "gpu-like" and npu_lab.current_chip() == "gpu-like"
        assert npu_lab.cost_model.matrix16_gflops == 312_000
    assert npu_lab.current_chip() == "teaching"
    npu_lab.cost_model.launch_us = 4.5
    assert npu_lab.current_chip() == "custom"
    with pytest.raises(ValueError, match="no chip named 'tpu'.*teaching"):
        npu_lab.use_chip("tpu")


def test_environment_picks_the_chip(monkeypatch):
    monkeypatch.setenv("NPU_LAB_CHIP", "edge")
    chips_module.apply_environment()
    assert npu_lab.current_chip() == "edge"
    monkeypatch.setenv("NPU_LAB_CHIP", "nonsense")
    with pytest.raises(ValueError, match="no chip named"):
        chips_module.apply_environment()


def _matmul_times(n: int = 1024) -> tuple[float, float]:
    a, b = torch.randn(n, n, device="npu"), torch.randn(n, n, device="npu")

    def half():
        with torch.autocast("npu", dtype=torch.float16):
            c = a @ b
        assert c.dtype == torch.float16

    return timed_us(lambda: a @ b), timed_us(half)


@pytest.mark.parametrize("chip", ["gpu-like", "npu-like"])
def test_16_bit_matmul_under_autocast_is_at_least_4x_faster_on_a_matrix_unit(chip):
    with npu_lab.use_chip(chip):
        t32, t16 = _matmul_times()
    assert t32 >= 4 * t16, (t32, t16)


def test_without_16_bit_units_autocast_does_not_pay():
    t32, t16 = _matmul_times()  # the teaching chip computes every precision on one unit
    assert t16 >= t32


def test_16_bit_kernels_move_16_bit_bytes_on_a_16_bit_chip():
    x = torch.randn(1 << 16, device="npu", dtype=torch.float16)
    with npu_lab.use_chip("gpu-like"), npu_lab.profile() as prof:
        x + x
    (k,) = prof.kernels  # no float32 conversions on a chip that computes in 16 bits
    assert (k.bytes_read, k.bytes_written) == (2 * x.nbytes, x.nbytes)
    with npu_lab.profile() as prof:
        x + x
    assert len(prof.kernels) > 1  # the teaching chip converts to float32 and back: counted work


def test_matrix_products_use_the_matrix_unit_and_elementwise_the_vector_unit():
    model = npu_lab.cost_model
    with npu_lab.use_chip("npu-like"):  # no 32-bit matrix unit: float32 products run on the vector unit
        assert model.unit_gflops(32) == model.peak_gflops == 4000
        assert model.unit_gflops(16) == 256_000
        assert model.kernel_us(1e9, 0, matrix=16) < model.kernel_us(1e9, 0, matrix=32)
        assert model.kernel_us(1e9, 0) == model.kernel_us(1e9, 0, matrix=32)
    with pytest.raises(ValueError, match="matrix="):
        clock.launch("bad", 1.0, 0, 0, matrix=8)


def test_a_pinned_copy_beats_a_pageable_one():
    x = torch.randn(1 << 20)
    pinned = x.pin_memory()
    for chip in ("gpu-like", "npu-like", "edge"):
        with npu_lab.use_chip(chip):
            pageable_us, pinned_us = timed_us(lambda: x.to("npu")), timed_us(lambda: pinned.to("npu"))
            staging = npu_lab.cost_model.staging_us(x.nbytes)
        assert pinned_us < pageable_us
        assert pageable_us == pytest.approx(pinned_us + staging, rel=0.02)
    assert timed_us(lambda: x.to("npu")) == pytest.approx(timed_us(lambda: pinned.to("npu")))  # teaching: free


def _overlap(non_blocking: bool, host_tensor: torch.Tensor) -> tuple[float, float, float, float, float]:
    """A big matmul on the default stream, a copy on a side stream, then an add on the default stream:
    (matmul start, matmul end, copy start, copy end, when the host had issued the add)."""
    a = torch.randn(1024, 1024, device="npu")
    side = torch.npu.Stream()
    torch.npu.synchronize()
    with npu_lab.profile() as prof:
        a @ a
        with torch.npu.stream(side):
            host_tensor.to("npu", non_blocking=non_blocking)
        a + 1  # issued after the copy: with a blocking copy, only once the copy is done
        torch.npu.synchronize()
    mm, copy, add = prof.kernels
    assert (mm.name, copy.kind, add.name) == ("mm", "copy", "add")
    return mm.start_us, mm.end_us, copy.start_us, copy.end_us, add.host_end_us


def test_a_non_blocking_copy_overlaps_a_kernel_and_a_blocking_one_holds_the_host():
    x = torch.randn(1 << 20)
    with npu_lab.use_chip("gpu-like"):
        mm_start, mm_end, c_start, c_end, add_issued = _overlap(True, x.pin_memory())
        assert mm_start <= c_start < mm_end  # the copy engine runs beside the compute stream
        assert add_issued < c_end  # the host went on at once
        _, _, _, c_end, add_issued = _overlap(False, x)
        assert add_issued >= c_end  # from pageable memory the host waits for the copy


def test_launch_bound_program_leaves_the_device_idle():
    x = torch.randn(16, device="npu")
    with npu_lab.use_chip("edge"), npu_lab.profile() as prof:
        y = x
        for _ in range(50):
            y = y + 1
        torch.npu.synchronize()
    host = npu_lab.cost_model.host_launch_us
    edge = npu_lab.chips()["edge"].figures
    assert prof.launches == 50
    assert prof.host_issue_us == pytest.approx(50 * edge.host_launch_us)
    assert prof.device_idle_us > prof.device_busy_us  # launch-bound: the device waits for the host
    assert host == npu_lab.CostModel().host_launch_us == 0  # (back on the teaching chip)
    # and the host lane is drawn
    ax = prof.plot_timeline()
    assert [t.get_text() for t in ax.get_yticklabels()][0] == "host"
    trace = prof.chrome_trace()["traceEvents"]
    assert sum(e.get("tid") == -1 and e["name"] == "launch add" for e in trace) == 50


def test_torch_profiler_shows_the_host_lane():
    x = torch.randn(64, device="npu")
    with npu_lab.use_chip("gpu-like"):
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            ((x + 1) * 2).sum().item()
    names = [e.name for e in prof.events()]
    assert names.count("npuLaunchKernel") == 3 and "npuMemcpyAsync" in names and "wait for memcpy DtoH" in names


def test_simulated_time_is_deterministic():
    x = torch.randn(256, 256, device="npu")
    with npu_lab.use_chip("edge"):
        times = [timed_us(lambda: (x @ x).relu().sum()) for _ in range(3)]
    assert times[0] == times[1] == times[2]


def _tiny_ops(x: torch.Tensor) -> torch.Tensor:
    y = x
    for _ in range(50):
        y = y * 1.01 + 0.5
    return y


def test_graph_replay_of_100_tiny_ops_beats_eager_and_gives_the_same_result():
    static_x = torch.zeros(64, device="npu")
    with npu_lab.use_chip("gpu-like"):
        _tiny_ops(static_x)  # warm-up, as before a CUDA graph capture
        g = torch.npu.NPUGraph()
        with torch.npu.graph(g):
            static_y = _tiny_ops(static_x)
        assert g.num_ops == 100 and g.num_launches == 100
        assert torch.npu.current_stream().stream_id == 0  # the capture's side stream is left
        new_x = torch.randn(64, device="npu")
        static_x.copy_(new_x)
        eager_us = timed_us(lambda: _tiny_ops(static_x))
        replay_us = timed_us(g.replay)
        torch.testing.assert_close(static_y, _tiny_ops(new_x))
        assert replay_us < 0.5 * eager_us, (replay_us, eager_us)
        with npu_lab.profile() as prof:
            g.replay()
        assert prof.launches == 100 and prof.host_issue_us == 0
        assert [h.name for h in prof.host] == ["npuGraphLaunch"]


def test_capturing_a_synchronizing_operation_raises_a_clear_error():
    x = torch.ones(8, device="npu")
    g = torch.npu.NPUGraph()
    with pytest.raises(RuntimeError, match=r"_local_scalar_dense.*cannot be captured.*\.item\(\)"):
        with torch.npu.graph(g):
            (x * 2).sum().item()
    assert not torch.npu.is_current_stream_capturing()
    assert torch.npu.current_stream().stream_id == 0
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()
    g2 = torch.npu.NPUGraph()
    with pytest.raises(RuntimeError, match="cannot be captured"):
        with torch.npu.graph(g2):
            (x * 2).cpu()
    with pytest.raises(RuntimeError, match="non-default stream"):
        torch.npu.NPUGraph().capture_begin()
    with pytest.raises(RuntimeError, match="not permitted when stream is capturing"):
        with torch.npu.graph(torch.npu.NPUGraph()):
            torch.npu.synchronize()
    x + 1  # the device works normally afterwards
    torch.npu.synchronize()


def test_reduce_overhead_replays_the_compiled_graph():
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU())
                                  for _ in range(4)]).npu().eval()
    x = torch.randn(4, 16, device="npu")
    with npu_lab.use_chip("gpu-like"), torch.no_grad():
        default = torch.compile(model, backend="npu")
        replayed = torch.compile(model, backend="npu", mode="reduce-overhead")
        for _ in range(3):
            default(x), replayed(x)
        default_us, replayed_us = timed_us(lambda: default(x)), timed_us(lambda: replayed(x))
        assert replayed_us < default_us, (replayed_us, default_us)
        for _ in range(2):
            x2 = torch.randn(4, 16, device="npu")
            torch.testing.assert_close(replayed(x2), model(x2))
        with npu_lab.profile() as prof:
            replayed(x)
        assert any(h.name == "npuGraphLaunch" for h in prof.host)


def test_a_whole_training_step_is_captured_and_replays_like_eager():
    torch.manual_seed(0)

    def mlp():
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).npu()

    model, ref = mlp(), mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    static_x, static_y = torch.randn(4, 8, device="npu"), torch.randn(4, 1, device="npu")

    def step():
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(static_x), static_y)
        loss.backward()  # autograd's backward ops are captured too
        opt.step()
        return loss

    with torch.npu.stream(torch.npu.Stream()):
        step()  # warm-up
    ref.load_state_dict(model.state_dict())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        static_loss = step()
    for a, b in zip(model.parameters(), ref.parameters()):  # capturing did not take a step
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for _ in range(3):
        x, y = torch.randn(4, 8, device="npu"), torch.randn(4, 1, device="npu")
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        ref_opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ref(x), y)
        loss.backward()
        ref_opt.step()
        torch.testing.assert_close(static_loss, loss)
        for a, b in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(a, b)
