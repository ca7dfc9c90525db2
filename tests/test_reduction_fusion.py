"""Reduction fusion: elementwise prologue -> sum/mean/amax -> elementwise epilogue as one generated kernel."""

from __future__ import annotations

import ast
import importlib
import operator
from collections.abc import Callable

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import npu_lab
from npu_lab import compiler
from npu_lab.compiler import passes
from npu_lab.compiler.passes.pointwise_fusion import FusedKernel, FusedReduction
from npu_lab.inspect import draw
from npu_lab.kernels import fused_reduction

aten = torch.ops.aten
# the module (``npu_lab.compiler.passes.pointwise_fusion`` the attribute is the pass function)
pf = importlib.import_module("npu_lab.compiler.passes.pointwise_fusion")


# each test starts with no Dynamo caches and no compile records (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _calls(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """Nodes that launch kernels (``getitem`` only picks an output of a fused kernel)."""
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]


def _reductions(gm: torch.fx.GraphModule) -> list[FusedReduction]:
    return [n.target for n in _calls(gm) if isinstance(n.target, FusedReduction)]


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g)


def _fuse(fn: Callable, *cpu_args: torch.Tensor) -> tuple[torch.fx.GraphModule, int, list[str]]:
    """Trace ``fn`` on npu copies of the arguments, run pointwise fusion; (graph, calls before, changes)."""
    args = [a.npu() for a in cpu_args]
    gm = make_fx(fn, tracing_mode="fake")(*args)
    before = len(_calls(gm))
    changes = passes.pointwise_fusion(gm)
    return gm, before, changes


def _check_numerics(gm: torch.fx.GraphModule, fn: Callable, *cpu_args: torch.Tensor, **tol: float) -> None:
    out = gm(*[a.npu() for a in cpu_args])
    ref = fn(*cpu_args)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    for o, r in zip(outs, refs):
        assert o.device.type == "npu" and o.shape == r.shape and o.dtype == r.dtype
        torch.testing.assert_close(o.cpu(), r, equal_nan=True, **tol)


@pytest.fixture(autouse=True)
def _plain_fused_reductions(monkeypatch):
    """These tests are about FusedReduction; softmax-like groups would otherwise become row kernels
    (tests/test_fusion_suite.py tests those)."""
    monkeypatch.setattr(importlib.import_module("npu_lab.compiler.passes.pointwise_fusion"), "FUSE_ROWS", False)


# --- the target patterns -----------------------------------------------------------------

def mse(x, y):
    return ((x - y) ** 2).mean()


def rmse_scaled(x, y):
    return torch.sqrt(((x - y) ** 2).mean()) * 0.5


def relu_weighted_sum(x, w):
    return (torch.relu(x) * w).sum(-1)


def softmax_denominator(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def layer_norm_stats(x):
    mean = x.mean(-1, keepdim=True)
    d = x - mean
    return d * torch.rsqrt((d * d).mean(-1, keepdim=True) + 1e-5)


def amax_abs_diff(x, y):
    return torch.amax(torch.abs(x - y), -1).sqrt() + 1


def logsumexp_by_hand(x):
    m = x.amax(-1, keepdim=True)
    return torch.log(torch.exp(x - m).sum(-1, keepdim=True)) + m


PATTERNS = {
    # name: (fn, argument shapes, reduction kinds that must be fused)
    "mse": (mse, [(33, 5), (33, 5)], ["mean"]),
    "rmse_epilogue": (rmse_scaled, [(7, 13), (7, 13)], ["mean"]),
    "relu_weighted_sum": (relu_weighted_sum, [(6, 19), (19,)], ["sum"]),
    "softmax": (softmax_denominator, [(5, 37)], ["sum"]),
    "layer_norm": (layer_norm_stats, [(4, 3, 24)], ["mean"]),
    "amax": (amax_abs_diff, [(9, 11), (9, 11)], ["amax"]),
    "logsumexp": (logsumexp_by_hand, [(3, 17)], ["sum"]),
}


@pytest.mark.parametrize("name", list(PATTERNS))
def test_pattern_becomes_one_fused_reduction(name):
    fn, shapes, kinds = PATTERNS[name]
    args = [_randn(*s, seed=i) for i, s in enumerate(shapes)]
    gm, before, changes = _fuse(fn, *args)
    kernels = _reductions(gm)
    assert sorted(k.kernel.kind for k in kernels) == kinds
    assert len(_calls(gm)) < before  # fewer call_function nodes than eagerly
    kernel = kernels[0]
    assert any(op.split(".")[0] == kinds[0] for op in kernel.fused_ops)
    assert len(kernel.fused_ops) >= 3  # the reduction and at least two elementwise ops
    assert any(c.startswith(kernel.__name__) for c in changes)
    source = kernel.source
    ast.parse(source)  # printable, valid Python
    assert "for j in range(n_inner)" in source and "prange" in source and "acc" in source
    _check_numerics(gm, fn, *args)


def test_prologue_runs_inside_the_loop_and_epilogue_after_it():
    x, y = _randn(8, 16), _randn(8, 16, seed=1)
    gm, _, _ = _fuse(rmse_scaled, x, y)
    (kernel,) = _reductions(gm)
    assert _calls(gm)[0].target is kernel  # the whole function is one kernel (+ getitem)
    k = kernel.kernel
    assert len(k.prelude) == 2 and len(k.epilogue) == 2 and k.outputs and not k.full_outputs
    src = kernel.source
    loop = src.index("for j in range(n_inner)")
    assert loop < src.index("(x0 - x1)") < src.index("r = np.float32(acc / n_inner)") < src.index("math.sqrt(r)")
    assert aten.sub.Tensor not in [n.target for n in gm.graph.nodes]


def test_prologue_value_needed_elsewhere_is_written_from_the_loop():
    x = _randn(6, 10)
    gm, _, _ = _fuse(softmax_denominator, x)
    (kernel,) = _reductions(gm)
    assert kernel.kernel.full_outputs  # exp(x - max) also feeds the division
    assert "r_full0[j] = " in kernel.source  # written from inside the reduction loop
    _check_numerics(gm, softmax_denominator, x)


# --- shapes: edge sizes, keepdim, full and partial reductions --------------------------------

SHAPES = [
    ((1,), None, False),        # one element
    ((), None, False),          # a 0-dim tensor
    ((5, 1), -1, True),         # last dim of size 1, keepdim
    ((5, 1), -1, False),        # last dim of size 1
    ((1, 7), -1, False),        # one row
    ((7, 13), -1, False),       # sizes that are not a multiple of any tile
    ((3, 5, 7), -1, True),
    ((3, 5, 7), [1, 2], False),  # trailing dims
    ((3, 5, 7), [-2, -1], True),
    ((4, 6), [0, 1], False),     # every dim, listed
    ((129, 515), -1, False),     # large enough for the parallel row loop
    ((70_001,), None, False),    # large full reduction: parallel chunks
]


@pytest.mark.parametrize("kind", ["sum", "mean", "amax"])
@pytest.mark.parametrize("shape,dim,keepdim", SHAPES, ids=[f"{s}-{d}-{k}" for s, d, k in SHAPES])
def test_edge_shapes_match_torch_cpu(kind, shape, dim, keepdim):
    def fn(x, y):
        z = torch.sigmoid(x * y - 0.25)
        if dim is None:
            r = getattr(torch, kind)(z) if kind != "amax" else torch.amax(z)
        else:
            r = getattr(torch, kind)(z, dim, keepdim=keepdim) if kind != "amax" else torch.amax(z, dim, keepdim)
        return r * 2 + 1

    x, y = _randn(*shape), _randn(*shape, seed=1)
    gm, before, _ = _fuse(fn, x, y)
    (kernel,) = _reductions(gm)
    assert kernel.kernel.kind == kind and len(_calls(gm)) < before
    assert len(kernel.fused_ops) == 6  # mul, sub, sigmoid | reduce | mul, add
    _check_numerics(gm, fn, x, y, rtol=1e-5, atol=1e-5)
    numel = max(x.numel(), 1)
    if numel >= 1 << 16:
        assert kernel.last_variant in ("rows_par", "chunks")


def test_broadcast_and_strided_operands():
    """Inputs broadcast into the loop, a transposed input, a strided full reduction in parallel chunks."""
    def weighted(x, w, b):
        return ((x * w + b) ** 2).sum()

    x, w, b = _randn(300, 257), _randn(257, seed=1), _randn(300, 1, seed=2)
    gm, _, _ = _fuse(weighted, x, w, b)
    (kernel,) = _reductions(gm)
    _check_numerics(gm, weighted, x, w, b, rtol=1e-4, atol=1e-2)
    assert kernel.last_variant == "strided_chunks"

    def transposed(x):
        return (x.t() * 3).sum().abs()

    x = _randn(6, 9)
    gm, _, _ = _fuse(transposed, x)
    (kernel,) = _reductions(gm)
    _check_numerics(gm, transposed, x, rtol=1e-5, atol=1e-5)
    assert kernel.last_variant == "strided"


def test_epilogue_with_a_tensor_of_the_reduced_shape_and_a_cpu_scalar():
    def fn(x, bias, scale):
        return ((x * x).sum(-1) + bias) * scale

    x, bias, scale = _randn(4, 6).npu(), _randn(4, seed=1).npu(), torch.tensor(2.5)  # a 0-dim CPU tensor
    gm = make_fx(fn, tracing_mode="fake")(x, bias, scale)
    passes.pointwise_fusion(gm)
    (kernel,) = _reductions(gm)
    assert kernel.kernel.n_epilogue_inputs == 2 and len(kernel.kernel.epilogue) == 2
    torch.testing.assert_close(gm(x, bias, scale).cpu(), fn(x.cpu(), bias.cpu(), scale), rtol=1e-5, atol=1e-5)


def test_amax_propagates_nan_like_torch():
    x = _randn(3, 8)
    x[1, 4] = float("nan")
    gm, _, _ = _fuse(lambda t: (t * 2).amax(-1).abs(), x)
    assert len(_reductions(gm)) == 1
    _check_numerics(gm, lambda t: (t * 2).amax(-1).abs(), x)


def test_float64():
    x, y = _randn(5, 9).double(), _randn(5, 9, seed=1).double()
    gm, _, _ = _fuse(rmse_scaled, x, y)
    (kernel,) = _reductions(gm)
    assert kernel.kernel.dtype == "float64" and "np.float64(" in kernel.source
    _check_numerics(gm, rmse_scaled, x, y, rtol=1e-12, atol=1e-12)


# --- falling back ---------------------------------------------------------------------------

FALLBACKS = {
    "leading_dim": (lambda x: (x * 2).sum(0).abs(), (5, 6)),
    "middle_dim": (lambda x: (x * 2).sum(1).abs(), (3, 4, 5)),
    "non_contiguous_input": (lambda x: (x.t() * 2).sum(-1).abs(), (5, 6)),
    "dtype_change": (lambda x: (x * 2).sum(-1, dtype=torch.float64).abs(), (5, 6)),
    "bool_input": (lambda x: (x > 0).sum(-1), (5, 6)),
}


@pytest.mark.parametrize("name", list(FALLBACKS))
def test_unsupported_reductions_fall_back(name):
    fn, shape = FALLBACKS[name]
    x = _randn(*shape)
    gm, _, _ = _fuse(fn, x)
    assert not _reductions(gm)
    assert any(n.target in pf.REDUCTION_KINDS for n in _calls(gm))
    _check_numerics(gm, fn, x, rtol=1e-5, atol=1e-5)


def test_nothing_to_fuse_leaves_the_reduction_alone():
    gm, before, _ = _fuse(lambda x: x.sum(-1), _randn(4, 4))
    assert not _reductions(gm) and len(_calls(gm)) == before


def test_switch_off(monkeypatch):
    monkeypatch.setattr(pf, "FUSE_REDUCTIONS", False)
    x, y = _randn(6, 4), _randn(6, 4, seed=1)
    gm, _, _ = _fuse(mse, x, y)
    assert not _reductions(gm)
    assert any(isinstance(n.target, FusedKernel) for n in _calls(gm))  # sub + pow still fuse
    _check_numerics(gm, mse, x, y)


def test_mutation_between_members_blocks_fusion():
    def fn(x, buf):
        y = torch.exp(x * buf)  # the prologue would read buf...
        buf.add_(1)  # ...before this write, but a fused kernel runs after it
        return y.sum(-1)

    x, buf = _randn(3, 4).npu(), torch.ones(3, 4, device="npu")
    gm = make_fx(fn)(x, buf.clone())
    assert aten.add_.Tensor in [n.target for n in gm.graph.nodes]
    passes.pointwise_fusion(gm)
    assert not _reductions(gm)
    got = gm(x, buf.clone())
    torch.testing.assert_close(got.cpu(), fn(x.cpu(), torch.ones(3, 4)))


def test_elementwise_groups_do_not_move_reads_across_a_write_either():
    def fn(x, buf):
        y = torch.exp(x * buf)
        buf.add_(1)
        return y + buf  # fusing add with exp(x * buf) would read buf after the write

    x = _randn(3, 4).npu()
    gm = make_fx(fn)(x, torch.ones(3, 4, device="npu"))
    passes.pointwise_fusion(gm)
    torch.testing.assert_close(gm(x, torch.ones(3, 4, device="npu")).cpu(), fn(x.cpu(), torch.ones(3, 4)))


def test_kernel_template_rejects_unknown_reductions():
    with pytest.raises(ValueError, match="unknown reduction"):
        fused_reduction.ReductionKernel("k", "prod", 1, 0, "x0")


def test_coalesce_merges_dense_dims_but_not_across_the_reduction():
    shape, n_red, full, kept = fused_reduction.coalesce((2, 3, 4, 5), 2, [[60, 20, 5, 1]], [[3, 1]])
    assert shape == [6, 20] and n_red == 1 and full == [[20, 1]] and kept == [[1]]
    shape, n_red, full, _ = fused_reduction.coalesce((4, 1), 1, [[1, 1]], [[1]])
    assert shape == [4, 1] and n_red == 1


# --- through torch.compile, forward and backward ----------------------------------------------

def rms_norm(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


def row_scale(x, s):
    return (x * s).tanh()  # backward: d s = sum(grad * (1 - tanh^2) * x, -1, keepdim)


E2E = {
    "mse": (mse, [(33, 5), (33, 5)]),
    "softmax": (softmax_denominator, [(6, 21)]),
    "rms_norm": (rms_norm, [(3, 7, 10), (10,)]),
    "layer_norm": (layer_norm_stats, [(5, 1, 12)]),
    "row_scale": (row_scale, [(9, 14), (9, 1)]),
}


@pytest.mark.parametrize("name", list(E2E))
def test_compiled_forward_and_backward_match_cpu(name):
    fn, shapes = E2E[name]
    cpu = [_randn(*s, seed=i).requires_grad_() for i, s in enumerate(shapes)]
    npu = [c.detach().npu().requires_grad_() for c in cpu]
    ref = fn(*cpu)
    out = torch.compile(fn, backend="npu")(*npu)
    grad = _randn(*ref.shape, seed=7)
    ref.backward(grad)
    out.backward(grad.npu())
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    for a, b in zip(npu, cpu):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-5)
    record = compiler.last_compile()
    fused = {g.kind: [k for k in g.kernels if isinstance(k, FusedReduction)] for g in record.graphs}
    if name != "row_scale":  # softmax: an alias AOTAutograd adds for exp(...) moves after the kernel
        assert fused["forward"]
    if name != "mse":
        assert fused["backward"], "the backward graph's sum(grad * ...) should fuse too"
    for kernels in fused.values():
        for k in kernels:
            assert "for j in range(n_inner)" in k.source


def test_compiled_inference_graph_records_and_draws_the_fused_reduction():
    x, y = _randn(16, 8).npu(), _randn(16, 8, seed=1).npu()
    with torch.no_grad():
        out = torch.compile(rmse_scaled, backend="npu")(x, y)
    torch.testing.assert_close(out.cpu(), rmse_scaled(x.cpu(), y.cpu()))
    graph = compiler.last_compile().graph("inference")
    (kernel,) = graph.kernels
    assert isinstance(kernel, FusedReduction) and "mean" in kernel.fused_ops
    final = graph.final
    assert "fused_reduction" in final.code and "aten.mean" not in final.code
    assert any("fused_reduction" in c for c in graph.snapshot("pointwise_fusion").changes)
    dot = draw.draw_fx(final.graph, "after passes").dot
    assert draw.FUSED_STYLE[1] in dot and "mean" in dot


def test_compiled_mse_launches_one_kernel_instead_of_three():
    x, y = _randn(64, 32).npu(), _randn(64, 32, seed=1).npu()
    compiled = torch.compile(mse, backend="npu")
    with torch.no_grad():
        compiled(x, y)
        with npu_lab.profile() as eager:
            mse(x, y)
        with npu_lab.profile() as comp:
            compiled(x, y)
    assert eager.launches == 3 and comp.launches == 1
    assert [k.name for k in comp.kernels if k.kind == "kernel"][0].startswith("fused_reduction")


def test_dynamic_shapes_fall_back_and_stay_correct():
    f = torch.compile(rmse_scaled, backend="npu", dynamic=True)
    for n in (3, 5, 8):
        x, y = _randn(n, 6), _randn(n, 6, seed=1)
        torch.testing.assert_close(f(x.npu(), y.npu()).cpu(), rmse_scaled(x, y))
