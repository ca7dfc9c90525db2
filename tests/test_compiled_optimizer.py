"""Compiled optimizer steps: foreach expansion, fused updates written in place, and their safety."""

import copy

import pytest
import torch

from npu_lab import compiler, models
from npu_lab.compiler.passes.foreach_expansion import expand_foreach
from npu_lab.compiler.passes.pointwise_fusion import FusedKernel
from npu_lab.device import clock

aten = torch.ops.aten


# each test starts with no Dynamo caches and no compile records (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


OPTIMIZERS = {
    "sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "sgd-nesterov-decay": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
    "adam": lambda p: torch.optim.Adam(p, lr=0.01),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=0.01),
}


def _launches(fn) -> int:
    before = clock.clock(0).launches
    fn()
    return clock.clock(0).launches - before


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_compiled_step_matches_eager_and_launches_fewer_kernels(name):
    torch.manual_seed(0)
    base = models.mlp(6, 8, 3)
    eager_model, compiled_model = copy.deepcopy(base).npu(), copy.deepcopy(base).npu()
    x, y = models.example_batch(eager_model, 8, "npu")
    eager_opt = OPTIMIZERS[name](eager_model.parameters())
    compiled_opt = OPTIMIZERS[name](compiled_model.parameters())
    compiled_step = torch.compile(compiled_opt.step, backend="npu")
    for _ in range(4):
        for model, opt in ((eager_model, eager_opt), (compiled_model, compiled_opt)):
            opt.zero_grad()
            models.loss_fn(model, model(x), y).backward()
        eager_launches = _launches(eager_opt.step)
        compiled_launches = _launches(compiled_step)
    for a, b in zip(eager_model.parameters(), compiled_model.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach().cpu(), rtol=1e-5, atol=1e-6)
    for sa, sb in zip(eager_opt.state.values(), compiled_opt.state.values()):
        for key in sa:
            torch.testing.assert_close(torch.as_tensor(sb[key]).cpu(), torch.as_tensor(sa[key]).cpu(),
                                       rtol=1e-5, atol=1e-6)
    assert compiled_launches < eager_launches, (compiled_launches, eager_launches)


def test_sgd_momentum_is_one_in_place_kernel_per_parameter():
    torch.manual_seed(0)
    model = models.mlp(6, 8, 3).npu()
    x, y = models.example_batch(model, 8, "npu")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # horizontal fusion switched off (it would run these kernels in one launch, tested below):
    # this also checks that its switch works
    step = torch.compile(opt.step, backend="npu", options={"horizontal_fusion": False})
    for _ in range(2):  # the first step creates the momentum buffers (a different graph)
        opt.zero_grad()
        models.loss_fn(model, model(x), y).backward()
        launches = _launches(step)
    n_params = len(list(model.parameters()))
    assert launches == n_params
    record = compiler.last_compile()
    assert any("_foreach_add_ over 6 tensors -> 6 calls of Tensor.add_" in c for c in record.dynamo_changes)
    final = record.graph("inference").final
    assert "copy_" not in final.code  # every parameter and buffer is written by its kernel
    kernels = [n.target for n in final.graph.nodes if isinstance(n.target, FusedKernel)]
    assert len(kernels) == n_params and all(len(k.into) == 2 for k in kernels)
    changes = record.graph("inference").snapshot("pointwise_fusion").changes
    assert sum("in place" in c for c in changes) == 2 * n_params


def test_foreach_expansion_on_a_dynamo_graph():
    def fn(xs, ys):
        torch._foreach_mul_(xs, 0.5)
        zs = torch._foreach_add(xs, ys, alpha=2.0)
        return torch._foreach_sqrt(zs)

    graphs = []

    def backend(gm, example_inputs):
        changes = expand_foreach(gm)
        graphs.append((gm, changes))
        return gm.forward

    xs = [torch.rand(3) + 1, torch.rand(2, 2) + 1]
    ys = [torch.rand(3), torch.rand(2, 2)]
    ref_xs = [x.clone() for x in xs]
    out = torch.compile(fn, backend=backend)(xs, ys)
    ref = fn(ref_xs, ys)
    for a, b in zip(out, ref):
        torch.testing.assert_close(a, b)
    for a, b in zip(xs, ref_xs):
        torch.testing.assert_close(a, b)
    gm, changes = graphs[0]
    assert len(changes) == 3
    names = [getattr(n.target, "__name__", "") for n in gm.graph.nodes if n.op == "call_function"]
    assert not any(n.startswith("_foreach") for n in names)
    assert names.count("mul_") == 2 and names.count("add") == 2 and names.count("sqrt") == 2


def test_foreach_of_a_non_pointwise_op_is_left_alone():
    def fn(xs):
        return torch._foreach_norm(xs)

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(expand_foreach(gm))
        return gm.forward

    torch.compile(fn, backend=backend)([torch.ones(3), torch.ones(4)])
    assert graphs == [[]]


def test_in_place_write_is_refused_when_the_old_value_is_read_later():
    def fn(p, g):
        a = p * 2  # p's old value, used by a kernel that runs after the update's kernel
        p.add_(g).mul_(3)
        return a + 1

    p0, g = torch.randn(5, 4), torch.randn(5, 4)
    p = p0.clone().npu()
    with torch.no_grad():
        out = torch.compile(fn, backend="npu")(p, g.npu())
    torch.testing.assert_close(out.cpu(), p0 * 2 + 1)
    torch.testing.assert_close(p.cpu(), (p0 + g) * 3)
    final = compiler.last_compile().graph("inference").final
    kernels = [n.target for n in final.graph.nodes if isinstance(n.target, FusedKernel)]
    assert len(kernels) == 2 and not any(k.into for k in kernels)
    assert "copy_" in final.code


def test_in_place_write_of_a_transposed_parameter():
    def fn(p, g):
        p.mul_(0.9).add_(g, alpha=-0.1)

    p0 = torch.randn(4, 6)
    g = torch.randn(6, 4).t()
    p = p0.clone().t().contiguous().t().npu()  # column-major storage
    with torch.no_grad():
        torch.compile(fn, backend="npu")(p, g.npu())
    torch.testing.assert_close(p.cpu(), p0 * 0.9 - 0.1 * g)
    assert p.stride() == (1, 4)


def test_horizontal_fusion_runs_the_whole_update_in_one_launch():
    torch.manual_seed(0)
    model = models.TransformerBlock(vocab=20, dim=16, heads=2, hidden=32).npu()
    x, y = models.example_batch(model, 2, "npu")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    reference = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    step = torch.compile(opt.step, backend="npu")
    for _ in range(3):
        for m, o in ((model, opt), (reference, ref_opt)):
            o.zero_grad()
            models.loss_fn(m, m(x), y).backward()
        launches = _launches(step)
        ref_opt.step()
    assert launches == 1
    for a, b in zip(reference.parameters(), model.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach().cpu(), rtol=1e-5, atol=1e-6)
    graph = compiler.last_compile().graph("inference")
    (change,) = graph.snapshot("horizontal_fusion").changes
    n = len(list(model.parameters()))
    assert f"{n} in-place kernels" in change and "-> 1 launch" in change
    (kernel,) = graph.kernels
    assert len(kernel.members) == n and "def combined(" in kernel.source
