"""Launch plans: compiled graphs run as generated straight-line code that calls kernels directly."""

import gc
import re

import pytest
import torch

import npu_lab
from npu_lab import compiler, lazy, models
from npu_lab.compiler import launch_plan
from npu_lab.device import clock

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _graphs(kind: str | None = None) -> list:
    return [g for rec in compiler.history for g in rec.graphs if kind is None or g.kind == kind]


def _train(make, batch: int, options: dict | None, steps: int = 3):
    """Losses and final parameters of a few compiled SGD steps (or eager ones if options is None)."""
    torch.manual_seed(0)
    model = make().npu()
    x, y = models.example_batch(model, batch, "npu")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def forward_loss(x, y):
        return models.loss_fn(model, model(x), y)

    forward, update = forward_loss, opt.step
    if options is not None:
        forward = torch.compile(forward_loss, backend="npu", options=options)
        update = torch.compile(opt.step, backend="npu", options=options)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = forward(x, y)
        loss.backward()
        update()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("make, batch", [(lambda: models.mlp(12, 16, 4), 8), (models.TransformerBlock, 2),
                                         (models.SmallCNN, 2)], ids=["mlp", "transformer", "cnn"])
def test_plans_give_the_graphs_results_bit_for_bit(make, batch):
    eager = _train(make, batch, None)
    graph = _train(make, batch, {"launch_plan": False})
    assert all(g.plan is None and "switched off" in g.plan_skipped for g in _graphs())
    torch._dynamo.reset()
    compiler.reset()
    plan = _train(make, batch, {})
    assert {g.kind for g in _graphs() if g.plan is not None} >= {"forward", "backward", "inference"}
    assert plan[0] == graph[0]  # the same kernels on the same memory: identical numbers
    for a, b in zip(plan[1], graph[1]):
        assert torch.equal(a, b)
    torch.testing.assert_close(plan[0], eager[0], rtol=1e-5, atol=1e-6)
    for a, b in zip(plan[1], eager[1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_plan_source_calls_kernels_and_makes_views_arrays():
    model = models.mlp(12, 16, 4).npu()
    x, y = models.example_batch(model, 8, "npu")
    f = torch.compile(lambda x, y: models.loss_fn(model, model(x), y), backend="npu")
    f(x, y).backward()
    fwd, bwd = _graphs("forward")[0].plan, _graphs("backward")[0].plan
    for plan in (fwd, bwd):
        assert isinstance(plan, launch_plan.LaunchPlan)
        assert plan.source.startswith("def call(args):")
        assert plan.stats.kernels >= 2 and "_launch(" in plan.source
        assert plan.source.count("_launch(") == plan.stats.kernels
    assert bwd.stats.views >= 1 and "_nd(" in bwd.source  # permutes became arrays over device memory
    assert "kernels called directly" in repr(fwd)


def test_plan_launches_the_same_kernels_as_the_graph():
    def run(options):
        torch._dynamo.reset()
        compiler.reset()
        torch.manual_seed(0)
        model = models.mlp(12, 16, 4).npu()
        x, y = models.example_batch(model, 8, "npu")
        f = torch.compile(lambda x, y: models.loss_fn(model, model(x), y), backend="npu", options=options)
        f(x, y).backward()  # compiles
        names = []
        clock.listeners.append(lambda rec: names.append(
            (re.sub(r"_\d+$", "", rec.name), rec.flops, rec.bytes_read, rec.bytes_written)))
        try:
            f(x, y).backward()
        finally:
            clock.listeners.pop()
        return names  # generated kernels are numbered in order of creation: compare kinds

    assert run({}) == run({"launch_plan": False})


def test_intermediates_are_freed_and_buffers_reused(clean_memory):
    def chain(x):
        y = x @ x
        for _ in range(4):
            y = torch.tanh(y @ x) * 2.0
        return y.sum()

    x = torch.randn(32, 32, device="npu")
    f = torch.compile(chain, backend="npu")
    expected = chain(x)
    torch.testing.assert_close(f(x), expected)
    out = f(x)
    plan = _graphs("inference")[0].plan
    assert plan is not None and plan.stats.buffers_reused >= 1
    torch.testing.assert_close(out, expected)
    del out, expected
    gc.collect()
    x_bytes = torch.npu.memory_allocated() - clean_memory
    assert x_bytes == npu_lab.device.memory.round_size(32 * 32 * 4)  # only x is left: no leaked buffer


def test_in_place_writes_bump_versions():
    p = torch.randn(16, device="npu")
    g = torch.randn(16, device="npu")

    def update(p, g):
        p.mul_(0.9).add_(g, alpha=-0.1)

    expected = p.cpu() * 0.9 - 0.1 * g.cpu()
    f = torch.compile(update, backend="npu")
    f(p, g)
    v = p._version
    f(p, g)
    assert p._version > v
    expected = expected * 0.9 - 0.1 * g.cpu()
    torch.testing.assert_close(p.cpu(), expected)


def test_cpu_operators_go_through_the_dispatcher():
    model = models.mlp(6, 8, 3).npu()
    x, y = models.example_batch(model, 8, "npu")
    opt = torch.optim.Adam(model.parameters(), lr=0.01)  # its step counters live on the CPU
    step = torch.compile(opt.step, backend="npu")
    for _ in range(2):
        opt.zero_grad()
        models.loss_fn(model, model(x), y).backward()
        step()
    assert all(s["step"].device.type == "cpu" and s["step"].item() == 2 for s in opt.state.values())
    plan = _graphs("inference")[0].plan
    assert plan is not None and plan.stats.dispatched >= 1


class _Watch(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.add(str(func))
        return func(*args, **(kwargs or {}))


def test_plan_steps_aside_for_the_profiler():
    model = models.mlp(12, 16, 4).npu()
    x = torch.randn(8, 12, device="npu")
    f = torch.compile(model, backend="npu")
    with torch.no_grad():
        expected = f(x)
        plan = _graphs("inference")[0].plan
        before = plan.fallbacks
        with npu_lab.profile() as prof:
            out = f(x)
        assert plan.fallbacks == before + 1 and "profiler" in plan.why
        assert any(k.op for k in prof.kernels)  # kernels are attributed to operators again
        torch.testing.assert_close(out, expected)


def test_mismatched_layouts_and_dispatch_modes_fall_back_with_a_reason():
    def fn(a, b):
        return torch.relu(a * 2.0 + b).sum(0)

    a, b = torch.randn(8, 6, device="npu"), torch.randn(8, 6, device="npu")
    gm = torch.fx.experimental.proxy_tensor.make_fx(fn)(a, b)
    compiled = compiler.compile_graph(gm, [a, b], "inference", compiler.config)
    plan = compiled.meta["launch_plan"]
    out = plan([a, b])
    torch.testing.assert_close(out[0] if isinstance(out, (list, tuple)) else out, fn(a, b))
    assert plan.fallbacks == 0
    at = torch.randn(6, 8, device="npu").t()  # same shape, other strides
    out = plan([at, b])
    out = out[0] if isinstance(out, (list, tuple)) else out
    torch.testing.assert_close(out, fn(at, b))
    assert plan.fallbacks == 1 and "strides" in plan.why
    with _Watch() as watch:  # a TorchDispatchMode must see every operator: the graph runs node by node
        out = plan([a, b])
    torch.testing.assert_close(out[0] if isinstance(out, (list, tuple)) else out, fn(a, b))
    assert plan.fallbacks == 2 and "TorchDispatchMode was active (_Watch)" in plan.why
    assert "aten.sum.dim_IntList" in watch.seen


def test_lazy_mode_runs_plans():
    x = torch.randn(8, 12, device="npu")
    w = torch.randn(16, 12, device="npu")
    expected = torch.tanh(x @ w.t() + 1.0).sum(1).cpu()
    for _ in range(2):
        with lazy.mode():
            out = torch.tanh(x @ w.t() + 1.0).sum(1).cpu()
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    plan = lazy.last_graph().meta.get("launch_plan")
    assert plan is not None and plan.stats.kernels >= 1 and plan.fallbacks == 0


def test_lazy_training_step_names_do_not_collide():
    """A model moved to npu inside lazy mode makes nodes such as ``_to_copy_default_1``: the plan's
    constants must not take their names."""
    x = torch.randn(8, 10, device="npu")
    y = torch.zeros(8, dtype=torch.long, device="npu")
    params, names = [], set()
    for use_lazy in (False, True):
        with lazy.mode() if use_lazy else torch.enable_grad():
            torch.manual_seed(0)
            model = models.mlp().npu()
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            for _ in range(2):
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                if use_lazy:
                    lazy.mark_step()
                    names |= {n.name for n in lazy.last_graph().graph.nodes}
            params.append([p.detach().cpu() for p in model.parameters()])
    assert "_to_copy_default_1" in names
    for a, b in zip(*params):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    plan = lazy.last_graph().meta.get("launch_plan")
    assert plan is not None and plan.fallbacks == 0


def test_escaping_views_cost_no_view_operator():
    """A kernel output that leaves the graph through a reshape is allocated in the reshape's shape;
    other escaping views are made from their build-time geometry, sharing storage and versions."""
    torch.manual_seed(0)
    model = models.mlp(12, 16, 4).npu()
    x, y = models.example_batch(model, 8, "npu")
    compiled = torch.compile(lambda x, y: models.loss_fn(model, model(x), y), backend="npu")
    compiled(x, y).backward()
    backward = _graphs("backward")[-1].plan.source
    forward = _graphs("forward")[-1].plan.source
    # the bias gradients (sum with keepdim, then view) are allocated as (n,) tensors: no view call at all
    assert re.search(r"view_\d+ = _rt\.empty\(\(16,\)", backward) and "_aten_view" not in backward
    assert "_rt.view(" in forward  # the saved weight.T views
    # the views those plans make are true views: same storage, and an in-place write is seen through them
    w = torch.randn(6, 4).npu()
    v = launch_plan.plan_runtime.view(w, (4, 6), (1, 4), w.storage_offset(), torch.ops.aten.permute.default,
                                      ([1, 0],))
    assert v._base is w and v.untyped_storage()._cdata == w.untyped_storage()._cdata
    torch.testing.assert_close(v.cpu(), w.cpu().T)
    before = v._version
    w.add_(1)
    assert v._version == before + 1
    torch.testing.assert_close(v.cpu(), w.cpu().T)
    # with autograd recording, the operator itself runs (the view then has a grad_fn)
    p = torch.randn(6, 4).npu().requires_grad_()
    g = launch_plan.plan_runtime.view(p, (4, 6), (1, 4), 0, torch.ops.aten.permute.default, ([1, 0],))
    assert g.grad_fn is not None


def test_cross_entropy_runs_as_kernels_and_still_rejects_bad_targets():
    torch.manual_seed(0)
    x = torch.randn(8, 5).npu().requires_grad_()
    f = torch.compile(lambda x, t: torch.nn.functional.cross_entropy(x, t), backend="npu")
    t = torch.randint(0, 5, (8,)).npu()
    for _ in range(2):  # the first call of an AOT graph runs node by node; the second runs the plan
        x.grad = None
        loss = f(x, t)
        loss.backward()
    assert "_log_softmax_nll_fwd_" in _graphs("forward")[-1].plan.source
    assert "_log_softmax_nll_bwd_" in _graphs("backward")[-1].plan.source
    xc = x.detach().cpu().requires_grad_()
    ref = torch.nn.functional.cross_entropy(xc, t.cpu())
    ref.backward()
    torch.testing.assert_close(loss.cpu(), ref.detach())
    torch.testing.assert_close(x.grad.cpu(), xc.grad)
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        f(x, torch.tensor([0, 1, 2, 3, 4, 0, 7, 1]).npu())


def test_cross_entropy_with_negative_class_weights_is_not_an_index_error():
    """A negative class weight is legal (PyTorch computes with it); only a target out of range is an error."""
    torch.manual_seed(0)
    x, t, w = torch.randn(6, 4), torch.randint(0, 4, (6,)), torch.tensor([1.0, -2.0, 0.5, 3.0])
    f = torch.compile(lambda x, t, w: torch.nn.functional.cross_entropy(x, t, weight=w), backend="npu")
    torch.testing.assert_close(f(x.npu(), t.npu(), w.npu()).cpu(), torch.nn.functional.cross_entropy(x, t, weight=w))
