"""The profiler's data: kernels, simulated time, memory, trace export, coverage."""

import json

import torch

import npu_lab
from npu_lab import models


def _step(fn, model, x, y):
    loss = models.loss_fn(model, fn(x), y)
    loss.backward()
    return loss


def test_profile_records_kernels_ops_and_ranges():
    m = models.mlp().npu()
    x, y = models.example_batch(m, 8, "npu")
    _step(m, m, x, y)  # warm up
    with npu_lab.profile() as prof:
        with torch.profiler.record_function("forward"):
            out = m(x)
        models.loss_fn(m, out, y).backward()
    assert prof.launches > 10
    names = {k.name for k in prof.kernels}
    assert {"mm", "threshold_backward"} <= names
    fwd = [k for k in prof.kernels if "forward" in k.ranges]
    assert fwd and all(k.op for k in fwd)
    mm = next(k for k in prof.kernels if k.name == "mm")
    assert mm.flops > 0 and mm.bytes > 0 and mm.end_us > mm.start_us
    table = prof.table(sort_by="sim_us")
    assert "mm" in table and "kernel launches" in table
    assert prof.peak_allocated > 0 and any(e.kind == "alloc" for e in prof.memory)


def test_simulated_time_matches_events():
    a = torch.randn(128, 128, device="npu")
    torch.npu.synchronize()
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    with npu_lab.profile() as prof:
        start.record()
        (a @ a).relu().sum()
        end.record()
    # the events measure the kernels plus recording the start event itself
    assert abs(start.elapsed_time(end) * 1000 - npu_lab.cost_model.event_us - prof.sim_time_us) < 1e-6


def test_fusion_lowers_kernel_count_and_simulated_time():
    torch.manual_seed(0)
    m = models.mlp().npu()
    x, y = models.example_batch(m, 8, "npu")
    compiled = torch.compile(m, backend="npu")
    _step(m, m, x, y)
    _step(compiled, m, x, y)
    with npu_lab.profile() as eager:
        _step(m, m, x, y)
    with npu_lab.profile() as comp:
        _step(compiled, m, x, y)
    assert comp.launches < eager.launches
    assert comp.sim_time_us < eager.sim_time_us
    assert "linear_relu" in {k.name for k in comp.kernels}


def test_chrome_trace_is_valid_json_with_one_event_per_kernel(tmp_path):
    a = torch.randn(64, 64, device="npu")
    with npu_lab.profile() as prof:
        (a @ a + 1).cpu()
    path = prof.export_chrome_trace(tmp_path / "trace.json")
    trace = json.loads(path.read_text())
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] != -1]
    assert len(complete) == len(prof.kernels)
    # the host lane: .cpu() waited for its copy (the teaching chip's host issues work at no cost)
    host = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == -1]
    assert [e["name"] for e in host] == ["wait for memcpy DtoH"]
    assert {e["name"] for e in complete} >= {"mm", "add", "memcpy DtoH"}
    assert all("ts" in e and "dur" in e for e in complete)


def test_plots_render():
    import matplotlib

    matplotlib.use("Agg")
    a = torch.randn(64, 64, device="npu")
    with npu_lab.profile() as prof:
        (a @ a).relu()
    assert prof.plot_timeline() is not None
    assert prof.plot_memory() is not None
    assert prof.plot_roofline() is not None


def test_fallbacks_are_recorded():
    npu_lab.set_cpu_fallback(True)
    try:
        x = torch.rand(5, device="npu") * 0.5
        with npu_lab.without_kernels("aten::erfinv"), npu_lab.profile() as prof:  # an op with no npu kernel
            torch.erfinv(x)
        assert any(f.startswith("aten::erfinv") for f in prof.fallbacks)
    finally:
        npu_lab.set_cpu_fallback(False)


class _NeedsErfinv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.erfinv(torch.tanh(self.lin(x)) * 0.5)


def test_coverage_sorts_operators():
    rep = npu_lab.coverage(models.mlp(), models.example_batch(models.mlp(), 4)[0])
    assert rep.ready and "aten::addmm" in rep.native and "aten::mm" in rep.native
    assert not npu_lab.cpu_fallback_enabled()
    with npu_lab.without_kernels("aten::erfinv"):  # an op with no npu kernel
        rep2 = npu_lab.coverage(_NeedsErfinv(), torch.randn(3, 4))
    assert not rep2.ready
    assert any(op.startswith("aten::erfinv") for op in rep2.fallback)
    assert "CPU fallback" in rep2.summary() and "fallback" in rep2.table()
