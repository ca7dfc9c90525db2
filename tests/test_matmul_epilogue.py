"""Matmul epilogue fusion: mm/addmm and the elementwise operators after it as one generated kernel."""

from __future__ import annotations

import importlib
import operator
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from npu_lab import compiler, models
from npu_lab.compiler import passes
from npu_lab.compiler.passes.matmul_epilogue import FusedMatmul
from npu_lab.kernels import matmul as mk

aten = torch.ops.aten
# the module (``npu_lab.compiler.passes.pointwise_fusion`` the attribute is the pass function)
pf = importlib.import_module("npu_lab.compiler.passes.pointwise_fusion")

# each test starts with no Dynamo caches and no compile records (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _calls(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]


def _matmuls(gm: torch.fx.GraphModule) -> list[FusedMatmul]:
    return [n.target for n in _calls(gm) if isinstance(n.target, FusedMatmul)]


def _randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _fuse_and_check(fn: Callable, *cpu_args: torch.Tensor) -> tuple[torch.fx.GraphModule, list[str]]:
    """Trace ``fn`` on npu copies (0-dim tensors stay on the CPU), run pointwise fusion, compare
    every output with the CPU."""
    def moved() -> list[torch.Tensor]:
        return [a.npu() if a.dim() else a for a in cpu_args]

    gm = make_fx(fn, tracing_mode="fake")(*moved())
    changes = passes.pointwise_fusion(gm)
    out = gm(*moved())
    ref = fn(*cpu_args)
    outs, refs = (out, ref) if isinstance(ref, tuple) else ((out,), (ref,))
    for o, r in zip(outs, refs):
        assert o.device.type == "npu" and o.shape == r.shape and o.dtype == r.dtype and o.is_contiguous()
        tol = {"rtol": 1e-4, "atol": 1e-4} if r.dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}
        torch.testing.assert_close(o.cpu(), r, **tol)
    return gm, changes


def relu_grad(g, w, y):  # the ReLU gradient after the input gradient of a linear layer
    return aten.threshold_backward(g @ w, y, 0)


def test_relu_gradient_fuses_into_the_product():
    g, w, y = _randn(33, 70), _randn(70, 45, seed=1), torch.relu(_randn(33, 45, seed=2))
    gm, changes = _fuse_and_check(relu_grad, g, w, y)
    (fk,) = _matmuls(gm)
    assert [n.target for n in _calls(gm)] == [fk]  # mm and threshold_backward are gone
    assert fk.fused_ops == ["mm", "threshold_backward"] and fk.outputs == ["threshold_backward"]
    assert "fused_matmul" in changes[0] and "1 epilogue op" in changes[0]
    assert "e0[i, j]" in fk.source and "out[i, j] = u0" in fk.source  # the mask read at the stored element


def test_linear_gelu_through_views_keeps_both_values():
    """nn.Linear on a 3-D input is view -> addmm -> view; the pre-activation is saved for backward."""
    def fn(x, w, b):
        pre = F.linear(x, w, b)
        return pre, F.gelu(pre) * 0.5

    x, w, b = _randn(4, 6, 64), _randn(32, 64, seed=1), _randn(32, seed=2)
    gm, _ = _fuse_and_check(fn, x, w, b)
    (fk,) = _matmuls(gm)
    assert fk.fused_ops == ["addmm", "gelu", "mul.Tensor"] and fk.outputs == ["addmm", "mul.Tensor"]
    assert fk.output_shapes == [(24, 32), (4, 6, 32)] and "v = v + bias[j]" in fk.epilogue.body


def test_residual_add_broadcast_operands_and_cpu_scalar():
    def fn(x, w, res, row, s):
        return (x @ w).view(2, 5, 12) * row + res - s

    x, w, res, row = _randn(10, 50), _randn(50, 12, seed=1), _randn(2, 5, 12, seed=2), _randn(12, seed=3)
    s = torch.tensor(0.25)  # a 0-dim CPU tensor next to npu tensors
    gm, _ = _fuse_and_check(fn, x, w, res, row, s)
    (fk,) = _matmuls(gm)
    assert fk.fused_ops[-1] == "sub.Tensor" and fk.input_shapes == [(2, 5, 12), (2, 5, 12), (2, 5, 12)]


def test_short_k_and_float64_take_the_row_kernel_and_edges():
    # K < mk.DOT_MIN_K runs the row-by-row kernel; 7 x 9 leaves edge rows and columns
    a, b = _randn(7, 5, dtype=torch.float64), _randn(5, 9, seed=1, dtype=torch.float64)
    gm, _ = _fuse_and_check(lambda a, b: torch.sigmoid(a @ b) * 2 + 1, a, b)
    assert len(_matmuls(gm)) == 1 and 5 < mk.DOT_MIN_K


def test_saturating_epilogues_stay_finite_near_float32_overflow():
    """tanh(v) and sigmoid(v) for |v| near 44 and 88, where e^(2|v|) or e^|v| is within a factor of
    two of float32's largest value: kernels compiled with full fast-math (which assumes no
    infinities) once turned these into NaN."""
    edge = torch.tensor([44.0, 44.19, 44.2, 44.3, 88.0, 88.4, 88.6, -44.25, -88.5, 3.0], dtype=torch.float32)
    a = torch.diag(edge)  # a @ I puts each value through the epilogue unchanged
    b = torch.eye(10)
    for fn in (lambda a, b: torch.tanh(a @ b) * 2.0, lambda a, b: torch.sigmoid(a @ b) + 1.0,
               lambda a, b: torch.sigmoid(-(a @ b)) * 3.0):
        gm, _ = _fuse_and_check(fn, a, b)
        assert len(_matmuls(gm)) == 1
        assert not gm(a.npu(), b.npu()).cpu().isnan().any()


def test_no_fusion_when_an_input_depends_on_the_product():
    def fn(a, b):
        p = a @ b
        return p * p.sum()  # the sum needs the whole product first: not an epilogue input

    gm, _ = _fuse_and_check(fn, _randn(8, 60), _randn(60, 8, seed=1))
    assert not _matmuls(gm)


def test_switch_off(monkeypatch):
    monkeypatch.setattr(pf, "FUSE_MATMULS", False)
    gm, _ = _fuse_and_check(relu_grad, _randn(8, 60), _randn(60, 8, seed=1), _randn(8, 8, seed=2))
    assert not _matmuls(gm)


def test_compiled_mlp_backward_fuses_relu_and_bias_gradients():
    torch.manual_seed(0)
    ref = models.mlp(64, 96, 10)
    model = models.mlp(64, 96, 10).npu()
    model.load_state_dict(ref.state_dict())
    x, y = models.example_batch(ref, 32, "cpu")
    models.loss_fn(ref, ref(x), y).backward()
    step = torch.compile(lambda a, t: models.loss_fn(model, model(a), t), backend="npu")
    loss = step(x.npu(), y.npu())
    loss.backward()
    backward = compiler.last_compile().graph("backward")
    fused = [k for k in backward.kernels if isinstance(k, FusedMatmul)]
    assert sorted(k.fused_ops[1] for k in fused) == ["sum.dim_IntList"] * 3 + ["threshold_backward"] * 2
    for p, q in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5)


def test_bias_gradient_is_summed_by_the_weight_gradient_product():
    def fn(g, x):  # a linear layer's weight and bias gradients
        return g.t() @ x, g.sum(0)

    gm, changes = _fuse_and_check(fn, _randn(33, 20), _randn(33, 70, seed=1))
    (fk,) = _matmuls(gm)
    assert fk.fused_ops == ["mm", "sum.dim_IntList"] and fk.row_sums_shape == (20,)
    assert not [n for n in _calls(gm) if n.target is aten.sum.dim_IntList]
    assert "bias gradient" in changes[0]


def test_bias_gradient_not_fused_with_a_product_of_another_tensor():
    gm, _ = _fuse_and_check(lambda g, h, x: (h.t() @ x, g.sum(0)), _randn(33, 20), _randn(33, 20, seed=1),
                            _randn(33, 70, seed=2))
    assert not _matmuls(gm)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_forward_and_backward_fuse(reduction):
    """log_softmax + nll_loss -> npu.log_softmax_nll; their backwards -> npu.log_softmax_nll_backward."""
    x = _randn(12, 7, seed=3)
    t = torch.tensor([0, 6, 3, -100, 2, 2, 5, 1, 0, 4, 6, 3])
    w = torch.rand(7, generator=torch.Generator().manual_seed(4))
    xr = x.clone().requires_grad_()
    F.cross_entropy(xr, t, weight=w, reduction=reduction).sum().backward()
    xn = x.npu().requires_grad_()
    loss = torch.compile(lambda a, b, c: F.cross_entropy(a, b, weight=c, reduction=reduction).sum(),
                         backend="npu")(xn, t.npu(), w.npu())
    loss.backward()
    torch.testing.assert_close(loss.cpu(), F.cross_entropy(x, t, weight=w, reduction=reduction).sum())
    torch.testing.assert_close(xn.grad.cpu(), xr.grad)
    record = compiler.last_compile()
    fwd = record.graph("forward").snapshot("pattern_fusion")
    bwd = record.graph("backward").snapshot("pattern_fusion")
    assert any("npu.log_softmax_nll (" in c for c in fwd.changes)
    assert any("npu.log_softmax_nll_backward" in c for c in bwd.changes)
    targets = {n.target for g in (fwd, bwd) for n in g.graph.nodes}
    assert aten._log_softmax.default not in targets and aten.nll_loss_backward.default not in targets


def test_fused_cross_entropy_rejects_a_bad_target():
    x, t = _randn(4, 3).npu(), torch.tensor([0, 1, 3, 2]).npu()
    with pytest.raises(IndexError, match="Target 3 is out of bounds"):
        torch.ops.npu.log_softmax_nll(x, t, None, 1, -100)
