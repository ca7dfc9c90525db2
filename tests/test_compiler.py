"""torch.compile(backend="npu"): end-to-end agreement, each pass, caching, recompiles."""

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import npu_lab
from npu_lab import compiler, models
from npu_lab.compiler import passes
from npu_lab.compiler.passes.pointwise_fusion import FusedKernel

aten = torch.ops.aten


# each test starts with no Dynamo caches and no compile records (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _aten_graph(fn, *args):
    return make_fx(fn, tracing_mode="fake")(*args)


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


# --- end to end --------------------------------------------------------------------

def _fwd_bwd(model, x, y, compiled: bool):
    fn = torch.compile(model, backend="npu") if compiled else model
    out = fn(x)
    loss = models.loss_fn(model, out, y)
    loss.backward()
    grads = [p.grad.detach().cpu().clone() for p in model.parameters()]
    model.zero_grad()
    return out.detach().cpu(), grads


@pytest.mark.parametrize("make", [models.mlp, models.SmallCNN, models.TransformerBlock],
                         ids=["mlp", "cnn", "transformer"])
def test_compiled_matches_eager_forward_and_backward(make):
    torch.manual_seed(0)
    model = make()
    x_cpu, y_cpu = models.example_batch(model, 4)
    ref_out, ref_grads = _fwd_bwd(model, x_cpu, y_cpu, compiled=False)
    model.npu()
    x, y = x_cpu.npu(), y_cpu.npu()
    eager_out, eager_grads = _fwd_bwd(model, x, y, compiled=False)
    out, grads = _fwd_bwd(model, x, y, compiled=True)
    torch.testing.assert_close(out, eager_out, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-4)
    for g, e, r in zip(grads, eager_grads, ref_grads):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(g, r, rtol=1e-3, atol=1e-4)
    kinds = [g.kind for g in compiler.last_compile().graphs]
    assert "forward" in kinds and "backward" in kinds


def test_training_loop_compiled_matches_eager():
    torch.manual_seed(0)
    eager, comp = models.mlp(), models.mlp()
    comp.load_state_dict(eager.state_dict())
    losses_eager = models.train(eager, 10, "npu", lr=0.01)
    compiled = torch.compile(comp.npu(), backend="npu")
    x, y = models.example_batch(comp, 8, "npu")
    opt = torch.optim.SGD(comp.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        loss = models.loss_fn(comp, compiled(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    for a, b in zip(losses_eager, losses):
        assert abs(a - b) < 1e-4
    assert compiler.stats["backend_calls"] == 1  # no recompilation across steps


def test_graph_break_on_data_dependent_control_flow():
    def f(x):
        y = x.sin() * 2
        if y.sum() > 0:  # needs a value: Dynamo breaks the graph here
            return y.relu() + 1
        return y.exp() - 1

    counter = torch._dynamo.testing.CompileCounterWithBackend("npu")
    cf = torch.compile(f, backend=counter)
    for x in (torch.ones(8, device="npu"), -torch.ones(8, device="npu")):
        torch.testing.assert_close(cf(x).cpu(), f(x).cpu(), rtol=1e-6, atol=1e-6)
    assert counter.frame_count >= 2
    explanation = torch._dynamo.explain(f)(torch.ones(8, device="npu"))
    assert explanation.graph_break_count >= 1


def test_cpu_inputs_move_in_and_out():
    model = models.mlp()
    x, _ = models.example_batch(model, 4)
    before = npu_lab.transfer_stats()["host_to_device_copies"]
    out = torch.compile(model, backend="npu")(x)
    assert out.device.type == "cpu"
    torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    assert compiler.last_compile().moved_from_cpu
    assert npu_lab.transfer_stats()["host_to_device_copies"] > before


def test_recompile_after_guard_failure_and_dynamic_shapes():
    counter = torch._dynamo.testing.CompileCounterWithBackend("npu")
    f = torch.compile(lambda x: F.gelu(x) * x, backend=counter)
    for n in (4, 4, 8):
        x = torch.randn(n, device="npu")
        torch.testing.assert_close(f(x).cpu(), (F.gelu(x) * x).cpu())
    assert counter.frame_count == 2  # the new size failed a guard and recompiled
    dyn = torch.compile(lambda x: F.gelu(x) * x, backend="npu", dynamic=True)
    for n in (3, 5, 7):
        x = torch.randn(n, 6, device="npu")
        torch.testing.assert_close(dyn(x).cpu(), (F.gelu(x) * x).cpu())


def test_compiled_graph_cache_hits_for_identical_graphs():
    a, b = models.mlp().npu(), models.mlp().npu()
    x, _ = models.example_batch(a, 4, "npu")
    with torch.no_grad():
        torch.compile(a, backend="npu")(x)
        torch._dynamo.reset()  # Dynamo forgets; the NPU backend's own cache does not
        torch.compile(b, backend="npu")(x)
    assert compiler.stats["backend_calls"] == 2
    assert compiler.stats["cache_hits"] >= 1
    assert compiler.last_compile().graph("inference").cache_hit


def test_options_switch_passes():
    def f(x):
        return (x * 2 + 1).relu().sigmoid()

    x = torch.randn(32, device="npu")
    torch.compile(f, backend="npu")(x)
    assert compiler.last_compile().graph("inference").kernels
    torch._dynamo.reset()
    out = torch.compile(f, backend="npu", options={"pointwise_fusion": False})(x)
    g = compiler.last_compile().graph("inference")
    assert not g.kernels and "pointwise_fusion" not in [s.name for s in g.snapshots]
    torch.testing.assert_close(out.cpu(), f(x).cpu())
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown npu compiler option"):
        torch.compile(f, backend="npu", options={"no_such_pass": True})(x)


# --- passes on small FX graphs ----------------------------------------------------------

def test_dead_code_elimination():
    def f(x):
        unused = x.exp()  # noqa: F841
        return x + 1

    gm = _aten_graph(f, torch.randn(4, device="npu"))
    assert aten.exp.default in _targets(gm)
    changes = passes.dead_code_elimination(gm)
    assert aten.exp.default not in _targets(gm) and changes
    x = torch.randn(4, device="npu")
    torch.testing.assert_close(gm(x).cpu(), (x + 1).cpu())


def test_constant_folding():
    def f(x):
        mask = torch.ones(4, 4, device="npu").tril() * 2  # depends on no input
        return x * mask

    gm = make_fx(f)(torch.randn(4, 4, device="npu"))
    n_before = len(_targets(gm))
    changes = passes.constant_folding(gm)
    assert changes and len(_targets(gm)) < n_before
    assert any(n.op == "get_attr" for n in gm.graph.nodes)
    x = torch.randn(4, 4, device="npu")
    torch.testing.assert_close(gm(x).cpu(), f(x).cpu())


def test_pattern_fusion_addmm_and_linear_relu():
    def f(x, w, b):
        return torch.relu(torch.mm(x, w.t()) + b)

    args = (torch.randn(5, 3, device="npu"), torch.randn(4, 3, device="npu"), torch.randn(4, device="npu"))
    gm = _aten_graph(f, *args)
    changes = passes.pattern_fusion(gm)
    assert _targets(gm).count(torch.ops.npu.linear_relu.default) == 1
    assert aten.mm.default not in _targets(gm) and aten.relu.default not in _targets(gm)
    assert any("addmm" in c for c in changes) and any("linear_relu" in c for c in changes)
    torch.testing.assert_close(gm(*args).cpu(), f(*args).cpu(), rtol=1e-5, atol=1e-5)


def test_pattern_fusion_folds_permutes():
    def f(x, y):
        s = x + y
        back = s.permute(1, 0, 2).permute(1, 0, 2)  # cancels: s itself
        moved = s.permute(2, 0, 1).permute(0, 2, 1)  # one permute: (2, 1, 0)
        return back * 2, moved + 1, x.permute(1, 0, 2).permute(1, 0, 2)  # an input's pair stays

    args = (torch.randn(2, 3, 4, device="npu"), torch.randn(2, 3, 4, device="npu"))
    gm = _aten_graph(f, *args)
    changes = passes.pattern_fusion(gm)
    permutes = [n for n in gm.graph.nodes if n.target is aten.permute.default]
    assert [list(n.args[1]) for n in permutes] == [[2, 1, 0], [1, 0, 2], [1, 0, 2]]
    assert len(changes) == 2 and "cancel" in changes[0]
    for got, want in zip(gm(*args), f(*args)):
        assert got.stride() == want.stride()
        torch.testing.assert_close(got.cpu(), want.cpu())


def test_attention_pattern_becomes_fused_kernel():
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    q = torch.randn(2, 2, 6, 8, device="npu", requires_grad=True)
    out = torch.compile(f, backend="npu")(q, q, q)
    fw = compiler.last_compile().graph("forward").final
    assert "npu.fused_attention" in fw.code
    out.sum().backward()
    q2 = q.detach().clone().requires_grad_()
    ref = f(q2, q2, q2)
    ref.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach().cpu(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(q.grad.cpu(), q2.grad.cpu(), rtol=1e-4, atol=1e-5)


def test_pointwise_fusion_structure_and_source():
    def f(x, w, b):
        return F.gelu(x * w + b).sigmoid() * 3

    args = (torch.randn(16, 8, device="npu"), torch.randn(8, device="npu"), torch.randn(8, device="npu"))
    gm = _aten_graph(f, *args)
    n_pointwise = len(_targets(gm))
    changes = passes.pointwise_fusion(gm)
    fused = [t for t in _targets(gm) if isinstance(t, FusedKernel)]
    assert len(fused) == 1 and len(fused[0].fused_ops) == n_pointwise
    assert "gelu_erf" in fused[0].source and "prange" in fused[0].source
    assert changes
    torch.testing.assert_close(gm(*args).cpu(), f(*args).cpu(), rtol=1e-5, atol=1e-6)


def test_fusion_lowers_kernel_launches():
    from npu_lab.device import clock

    def f(x):
        return ((x * 2 + 1).relu() - 0.5).tanh() * x

    x = torch.randn(1000, device="npu")
    c = clock.clock(0)
    start = c.launches
    f(x)
    eager = c.launches - start
    cf = torch.compile(f, backend="npu")
    cf(x)
    start = c.launches
    cf(x)
    assert c.launches - start < eager


def test_autotuner_picks_and_caches(tmp_path, monkeypatch):
    from npu_lab.compiler import autotune
    from npu_lab.ops import linalg

    monkeypatch.setattr(autotune, "cache_file", lambda: tmp_path / "autotune.json")
    monkeypatch.setattr(autotune, "CANDIDATES", [(4, 4), (1, 1)])
    (tmp_path / "autotune.json").write_text('{"24x40x16": [8, 128]}')  # a choice the kernel no longer has
    # float32 products take BLAS: nothing to time (the numba kernels' tiles are tuned with blas=False)
    blas = autotune.tune(24, 40, 16, repeat=1)
    assert blas.kernel == "blas" and not blas.timings_us and "no tiles to tune" in blas.describe()
    first = autotune.tune(24, 40, 16, repeat=1, blas=False)
    assert set(first.timings_us) == {(4, 4), (1, 1)} and not first.from_cache
    assert linalg.tiles[(24, 40, 16)] == first.best
    second = autotune.tune(24, 40, 16, blas=False)
    assert second.from_cache and second.best == first.best
    assert "tried" in first.describe() and "cache" in second.describe()
    del linalg.tiles[(24, 40, 16)]
    # a shape whose weight is worth transposing once takes the outer-product kernel: nothing to time
    outer = autotune.tune(128, 512, 256, repeat=1, blas=False)
    assert outer.kernel == "packed outer" and not outer.timings_us and "no tiles to tune" in outer.describe()
    assert (128, 512, 256) not in linalg.tiles and "128x512x256" not in (tmp_path / "autotune.json").read_text()


def test_memory_planner_reuses_buffers_and_the_device_follows_the_plan():
    import gc

    from npu_lab.compiler.passes import memory_plan

    def f(x, w):
        a = torch.mm(x, w)        # four matmuls in a row: each result dies after the next
        b = torch.mm(a, w)
        c = torch.mm(b, w)
        return torch.mm(c, w)

    x, w = torch.randn(256, 256, device="npu"), torch.randn(256, 256, device="npu")
    gm = _aten_graph(f, x, w)
    changes = passes.memory_planning(gm)
    plan = memory_plan.last_plan
    assert plan.saved_bytes > 0 and plan.planned_peak < plan.naive_peak and changes
    assert len(plan.buffers) < len(plan.assignments)
    gc.collect()
    torch.npu.reset_peak_memory_stats()
    base = torch.npu.memory_allocated()
    out = gm(x, w)
    peak = torch.npu.max_memory_allocated() - base
    assert peak <= plan.planned_peak
    torch.testing.assert_close(out.cpu(), f(x, w).cpu(), rtol=1e-3, atol=1e-2)


def test_conv_bn_relu_fusion_in_inference():
    torch.manual_seed(0)
    m = models.SmallCNN()
    models.train(m, 2, "cpu", lr=0.01)  # non-trivial running statistics
    m.eval()
    x, _ = models.example_batch(m, 4)
    with torch.no_grad():
        ref = m(x)
        out = torch.compile(m.npu(), backend="npu")(x.npu())
    final = compiler.last_compile().graph("inference").final
    assert final.code.count("npu.conv_bn_relu") == 2
    assert "convolution.default" not in final.code and "batch_norm" not in final.code.replace("conv_bn", "")
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-4)


def test_custom_pass_is_run_recorded_and_part_of_the_cache_key():
    import torch._dynamo

    import npu_lab.compiler as compiler

    aten = torch.ops.aten
    seen = []

    def mul_by_two_to_add(gm):
        changes = []
        for n in list(gm.graph.nodes):
            if n.op == "call_function" and n.target == aten.mul.Tensor and n.args[1] == 2:
                with gm.graph.inserting_before(n):
                    new = gm.graph.call_function(aten.add.Tensor, (n.args[0], n.args[0]))
                n.replace_all_uses_with(new)
                gm.graph.erase_node(n)
                changes.append("x * 2 -> x + x")
        seen.append(len(changes))
        return changes

    def f(x):
        return (x * 2).sin()

    x = torch.randn(8, device="npu")
    compiler.reset()
    torch._dynamo.reset()
    torch.compile(f, backend="npu")(x)  # without the pass: cached graph must not be reused below
    with compiler.extra_pass(mul_by_two_to_add):
        torch._dynamo.reset()
        out = torch.compile(f, backend="npu")(x)
        snap = compiler.last_compile().graph("inference").snapshot("mul_by_two_to_add")
    assert seen == [1] and snap.changes == ["x * 2 -> x + x"]
    names = [s.name for s in compiler.last_compile().graph("inference").snapshots]
    assert names.index("pattern_fusion") < names.index("mul_by_two_to_add") < names.index("pointwise_fusion")
    torch.testing.assert_close(out.cpu(), f(x.cpu()))
    assert compiler.custom_passes.REGISTERED == {}
    torch._dynamo.reset()


@pytest.mark.parametrize("backend", ["eager", "npu"])
def test_graph_break_on_backward_runs_npu_kernels_eagerly(backend):
    """After a graph break Dynamo sees every new frame; the device's own kernels must be skipped."""
    import copy
    import warnings

    import torch._dynamo

    from npu_lab import models

    torch.manual_seed(0)
    base = models.mlp()
    x, y = models.example_batch(base, 16)
    losses = []
    for compiled in (False, True):
        torch._dynamo.reset()
        m = copy.deepcopy(base).to("npu")

        def step(a, b, m=m):
            loss = models.loss_fn(m, m(a), b)
            loss.backward()  # a graph break: the backward runs eagerly under Dynamo's frame hook
            return loss

        fn = torch.compile(step, backend=backend) if compiled else step
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*Dynamo does not know how to trace.*")
            losses.append((fn(x.to("npu"), y.to("npu")).item(), [p.grad.cpu() for p in m.parameters()]))
    assert abs(losses[0][0] - losses[1][0]) < 1e-6
    for g0, g1 in zip(losses[0][1], losses[1][1]):
        torch.testing.assert_close(g0, g1)
    torch._dynamo.reset()



def test_npu_backend_goes_dynamic_after_one_recompile():
    import torch._dynamo

    from npu_lab.grading.structure import CompileCounter  # noqa: F401  (documented alternative)

    torch._dynamo.reset()
    calls = []

    def counting(gm, example_inputs):
        calls.append(1)
        return npu_lab.compiler.npu_backend(gm, example_inputs)

    def f(a, w):
        return ((a @ w).relu() * 2 + 1).sum(-1)

    w = torch.randn(8, 5, device="npu")
    fn = torch.compile(f, backend=counting)
    for n in (4, 6, 7, 9, 13):
        a = torch.randn(n, 8, device="npu")
        torch.testing.assert_close(fn(a, w).cpu(), f(a.cpu(), w.cpu()), rtol=1e-5, atol=1e-5)
    assert len(calls) == 2  # the first new size recompiles with a dynamic batch dimension; later sizes reuse it
    torch._dynamo.reset()


def test_constant_folding_with_a_dynamic_python_int():
    """After an int argument turns dynamic (a SymInt input), folded constants are real tensors, not fake ones."""
    def f(x, step):
        return torch.tanh(x) * (0.1 / (1 + step))

    x = torch.randn(4, 3, device="npu")
    compiled = torch.compile(f, backend="npu")
    for step in (2, 3, 7):  # the second value makes `step` a SymInt graph input
        out = compiled(x, step)
        torch.testing.assert_close(out.cpu(), f(x.cpu(), step))
    folded = [v for gm in (g.snapshots[-1].graph.owning_module for g in compiler.last_compile().graphs)
              if gm is not None for v in gm.buffers()]
    assert not any(isinstance(v, torch._subclasses.FakeTensor) for v in folded)
