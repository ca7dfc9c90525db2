"""The NHWC layout pass and its kernels: conv2d_nhwc, conv_bn_relu_nhwc, max_pool2d_nhwc."""

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torch.library import opcheck

from npu_lab import compiler, models
from npu_lab.compiler.passes.layout import TO_NCHW, TO_NHWC, layout_nhwc

aten = torch.ops.aten
NHWC_OPS = (torch.ops.npu.conv2d_nhwc.default, torch.ops.npu.conv_bn_relu_nhwc.default,
            torch.ops.npu.max_pool2d_nhwc.default)


# each test starts with no Dynamo caches and no compile records (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _nhwc(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 2, 3, 1).contiguous()


def _count(graph: torch.fx.Graph, target: object, dims: list[int] | None = None) -> int:
    return sum(1 for n in graph.nodes if n.op == "call_function" and n.target == target
               and (dims is None or list(n.args[1]) == dims))


def _layout_permutes(graph: torch.fx.Graph) -> tuple[int, int]:
    """(# permute(0, 2, 3, 1), # permute(0, 3, 1, 2)) in ``graph``."""
    return _count(graph, aten.permute.default, TO_NHWC), _count(graph, aten.permute.default, TO_NCHW)


def _npu(*ts):
    return [t.npu() if isinstance(t, torch.Tensor) else t for t in ts]


# --- kernels -----------------------------------------------------------------------------

CONV_CASES = [  # (n, cin, h, w, cout, k, stride, padding, dilation, groups, bias)
    (2, 3, 9, 9, 8, 3, 1, 1, 1, 1, True),
    (2, 4, 10, 7, 6, 3, 2, 0, 1, 2, False),
    (1, 6, 11, 11, 4, 3, 1, 2, 2, 1, True),
    (2, 8, 5, 6, 8, 1, 1, 0, 1, 1, True),  # 1x1: the input is its own column matrix
    (2, 8, 5, 6, 16, 1, 2, 0, 1, 1, False),  # strided 1x1 needs im2col
    (3, 6, 8, 8, 6, 3, 1, 1, 1, 6, True),  # depthwise
    (1, 5, 7, 9, 7, (3, 2), (2, 1), (1, 0), (1, 2), 1, True),  # non-square everything
]


@pytest.mark.parametrize("case", CONV_CASES, ids=[str(i) for i in range(len(CONV_CASES))])
@pytest.mark.parametrize("contiguous", [True, False], ids=["nhwc", "permuted-view"])
def test_conv2d_nhwc_matches_cpu_conv2d(case, contiguous):
    n, cin, h, w, cout, k, stride, padding, dilation, groups, bias = case
    kh, kw = k if isinstance(k, tuple) else (k, k)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, cin, h, w, generator=g)
    weight = torch.randn(cout, cin // groups, kh, kw, generator=g)
    b = torch.randn(cout, generator=g) if bias else None
    pair = lambda v: list(v) if isinstance(v, tuple) else [v, v]  # noqa: E731
    ref = F.conv2d(x, weight, b, pair(stride), pair(padding), pair(dilation), groups)
    xin = _nhwc(x).npu() if contiguous else x.npu().permute(0, 2, 3, 1)
    out = torch.ops.npu.conv2d_nhwc(xin, *_npu(weight, b), pair(stride), pair(padding), pair(dilation), groups)
    assert out.is_contiguous() and out.shape == (n, ref.shape[2], ref.shape[3], cout)
    torch.testing.assert_close(out.cpu().permute(0, 3, 1, 2), ref, rtol=1e-4, atol=1e-4)


def test_conv2d_nhwc_opcheck_and_errors():
    x, w, b = _npu(torch.randn(2, 6, 6, 4), torch.randn(8, 2, 3, 3), torch.randn(8))
    result = opcheck(torch.ops.npu.conv2d_nhwc, (x, w, b, [1, 1], [1, 1], [1, 1], 2),
                     test_utils=("test_schema", "test_faketensor"))
    assert all(v == "SUCCESS" for v in result.values())
    with pytest.raises(RuntimeError, match="channels"):
        torch.ops.npu.conv2d_nhwc(x, w, b, [1, 1], [1, 1], [1, 1], 1)
    with pytest.raises(RuntimeError, match="too small"):
        torch.ops.npu.conv2d_nhwc(x, torch.randn(8, 2, 9, 9).npu(), b, [1, 1], [0, 0], [1, 1], 2)


def test_conv2d_nhwc_gradients_match_cpu():
    g = torch.Generator().manual_seed(2)
    x, w, b = torch.randn(2, 4, 7, 7, generator=g), torch.randn(6, 2, 3, 3, generator=g), torch.randn(6, generator=g)
    grad = torch.randn(2, 6, 4, 4, generator=g)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    F.conv2d(*leaves, stride=2, padding=1, groups=2).backward(grad)
    npu_leaves = [_nhwc(x).npu().requires_grad_(), w.npu().requires_grad_(), b.npu().requires_grad_()]
    out = torch.ops.npu.conv2d_nhwc(*npu_leaves, [2, 2], [1, 1], [1, 1], 2)
    out.backward(_nhwc(grad).npu())
    torch.testing.assert_close(npu_leaves[0].grad.cpu().permute(0, 3, 1, 2), leaves[0].grad, rtol=1e-4, atol=1e-4)
    for got, want in zip(npu_leaves[1:], leaves[1:]):
        torch.testing.assert_close(got.grad.cpu(), want.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("groups", [1, 2])
def test_conv_bn_relu_nhwc_matches_cpu(relu, groups):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 8, 3, padding=1, stride=2, groups=groups)
    bn = torch.nn.BatchNorm2d(8).eval()
    with torch.no_grad():
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2)
        bn.weight.normal_()
        bn.bias.normal_()
        x = torch.randn(2, 4, 9, 9)
        ref = bn(conv(x))
        ref = torch.relu(ref) if relu else ref
        params = _npu(conv.weight, conv.bias, bn.weight, bn.bias, bn.running_mean, bn.running_var)
        args = (_nhwc(x).npu(), *params, bn.eps, [2, 2], [1, 1], [1, 1], groups, relu)
        out = torch.ops.npu.conv_bn_relu_nhwc(*args)
        torch.testing.assert_close(out.cpu().permute(0, 3, 1, 2), ref, rtol=1e-4, atol=1e-5)
        result = opcheck(torch.ops.npu.conv_bn_relu_nhwc, args, test_utils=("test_schema", "test_faketensor"))
    assert all(v == "SUCCESS" for v in result.values())


@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil_mode", [
    ([2, 2], [], [0, 0], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [1, 1], True),
    ([3, 2], [1, 2], [1, 0], [2, 1], False),
])
def test_max_pool2d_nhwc_matches_cpu(kernel, stride, padding, dilation, ceil_mode):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 9, 8, generator=g)
    x[0, 1, 2, 3] = float("nan")  # NaN wins, as on the CPU
    ref = F.max_pool2d(x, kernel, stride or None, padding, dilation, ceil_mode)
    args = (_nhwc(x).npu(), kernel, stride, padding, dilation, ceil_mode)
    out = torch.ops.npu.max_pool2d_nhwc(*args)
    torch.testing.assert_close(out.cpu().permute(0, 3, 1, 2), ref, equal_nan=True)
    result = opcheck(torch.ops.npu.max_pool2d_nhwc, args, test_utils=("test_schema", "test_faketensor"))
    assert all(v == "SUCCESS" for v in result.values())


# --- the pass on small FX graphs ----------------------------------------------------------

def _weights(*shapes, seed: int = 4):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) * 0.3 for s in shapes]


def _run_pass(fn, *cpu_args):
    """Trace ``fn`` on npu copies of ``cpu_args``, run the pass, check it still computes ``fn``."""
    args = _npu(*cpu_args)
    gm = make_fx(fn, tracing_mode="fake")(*args)
    gm.graph.eliminate_dead_code()
    changes = layout_nhwc(gm)
    out = gm(*args)
    torch.testing.assert_close(out.cpu(), fn(*cpu_args), rtol=1e-4, atol=1e-4)
    return gm, changes


def test_conv_chain_converts_once_in_and_once_out():
    def f(x, w1, b1, w2, w3):
        y = F.relu(F.conv2d(x, w1, b1, padding=1))
        y = F.relu(F.conv2d(y, w2, None, padding=1)) * 0.5
        return F.conv2d(y, w3, None, stride=2)

    x, w1, b1, w2, w3 = _weights((2, 3, 12, 12), (8, 3, 3, 3), (8,), (8, 8, 3, 3), (4, 8, 1, 1))
    gm, changes = _run_pass(f, x, w1, b1, w2, w3)
    assert _count(gm.graph, torch.ops.npu.conv2d_nhwc.default) == 3
    assert _count(gm.graph, aten.convolution.default) == 0
    assert _layout_permutes(gm.graph) == (1, 1)  # one entry view, one exit
    assert _count(gm.graph, aten.clone.default) == 1
    relus = [n for n in gm.graph.nodes if n.target == aten.relu.default]
    assert len(relus) == 2 and all(n.meta["val"].shape[-1] == 8 for n in relus)  # they run in NHWC now
    assert sum(": NHWC, chain" in c for c in changes) == 3
    assert any("1 entry view and 1 exit conversion left" in c for c in changes)


def test_elementwise_tail_stays_nchw_to_fuse_with_what_follows():
    def f(x, w1, w2):
        return F.relu(F.conv2d(F.relu(F.conv2d(x, w1, padding=1)), w2, padding=1)).mean((2, 3))

    gm, _ = _run_pass(f, *_weights((2, 3, 8, 8), (8, 3, 3, 3), (6, 8, 3, 3)))
    first, last = [n for n in gm.graph.nodes if n.target == aten.relu.default]
    assert tuple(first.meta["val"].shape) == (2, 8, 8, 8)  # between the convs: NHWC
    assert tuple(last.meta["val"].shape) == (2, 6, 8, 8)  # after the chain: NCHW, after the exit
    assert last.args[0].target == aten.clone.default
    assert _layout_permutes(gm.graph) == (1, 1)


def test_residual_add_and_pool_move_into_nhwc():
    def f(x, w1, w2):
        y = F.relu(F.conv2d(x, w1, padding=1))
        z = F.conv2d(y, w2, padding=1)
        return F.max_pool2d(F.relu(z + y), 2)

    gm, _ = _run_pass(f, *_weights((2, 4, 10, 10), (8, 4, 3, 3), (8, 8, 3, 3)))
    assert _count(gm.graph, torch.ops.npu.max_pool2d_nhwc.default) == 1
    assert _count(gm.graph, aten.max_pool2d_with_indices.default) == 0
    adds = [n for n in gm.graph.nodes if n.target == aten.add.Tensor]
    assert all(a.meta["val"].shape[-1] == 8 for a in adds)
    assert _layout_permutes(gm.graph) == (1, 1)


def test_lone_conv_is_left_alone_but_conv_then_pool_pays():
    def lone(x, w):
        return F.relu(F.conv2d(x, w, padding=1))

    def pooled(x, w):
        return F.max_pool2d(F.relu(F.conv2d(x, w, padding=1)), 2)

    args = _weights((2, 3, 8, 8), (8, 3, 3, 3))
    gm, changes = _run_pass(lone, *args)
    assert _count(gm.graph, torch.ops.npu.conv2d_nhwc.default) == 0
    assert _layout_permutes(gm.graph) == (0, 0)
    assert len(changes) == 1 and "left NCHW" in changes[0]
    gm, changes = _run_pass(pooled, *args)  # the exit converts the pooled, 4x smaller tensor
    assert _count(gm.graph, torch.ops.npu.conv2d_nhwc.default) == 1
    assert ": NHWC" in changes[0]


def test_values_used_outside_the_chain_get_their_own_exit():
    def f(x, w1, w2):
        y = F.conv2d(x, w1, padding=1)
        # saves two full-size transposes for one full-size and one pooled conversion
        return F.max_pool2d(F.conv2d(F.relu(y), w2, padding=1), 2), y.sum()

    args = _npu(*_weights((1, 4, 8, 8), (8, 4, 3, 3), (8, 8, 3, 3)))
    gm = make_fx(f, tracing_mode="fake")(*args)
    layout_nhwc(gm)
    assert _count(gm.graph, torch.ops.npu.conv2d_nhwc.default) == 2
    assert _layout_permutes(gm.graph) == (1, 2)
    for got, want in zip(gm(*args), f(*[a.cpu() for a in args])):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


def test_unsupported_convolutions_are_untouched():
    def f(x, w, wt, w1d):
        y = F.conv_transpose2d(F.conv2d(x, w, padding=1), wt)
        return y, F.conv1d(x.flatten(2), w1d)

    args = _npu(*_weights((1, 4, 6, 6), (4, 4, 3, 3), (4, 2, 3, 3), (3, 4, 3)))
    gm = make_fx(f, tracing_mode="fake")(*args)
    changes = layout_nhwc(gm)
    assert not any(n.target in NHWC_OPS for n in gm.graph.nodes)
    assert any("transposed" in c for c in changes) and any("not a 2-D" in c for c in changes)


def test_graph_without_convolutions_is_unchanged():
    gm = make_fx(lambda x: F.relu(x) * 2, tracing_mode="fake")(torch.randn(2, 3, 4, 4, device="npu"))
    code = gm.code
    assert layout_nhwc(gm) == [] and gm.code == code


# --- through torch.compile ---------------------------------------------------------------------

def _conv_stack() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 8, 3, padding=1, stride=2), torch.nn.Flatten(),
    ).eval()


def test_small_cnn_inference_compiled_with_layout_matches_eager():
    torch.manual_seed(0)
    model = models.SmallCNN()
    models.train(model, 2, "cpu", lr=0.01)  # non-trivial batch-norm statistics
    model.eval()
    x, _ = models.example_batch(model, 4)
    with torch.no_grad():
        ref = model(x)
        model.npu()
        eager = model(x.npu())
        out = torch.compile(model, backend="npu")(x.npu())
    torch.testing.assert_close(out.cpu(), eager.cpu(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-4)
    snap = compiler.last_compile().graph("inference").snapshot("layout")
    assert _count(snap.graph, torch.ops.npu.conv_bn_relu_nhwc.default) == 2
    assert _count(snap.graph, torch.ops.npu.max_pool2d_nhwc.default) == 2
    assert _layout_permutes(snap.graph) == (1, 1)
    assert "npu.conv_bn_relu_nhwc" in compiler.last_compile().graph("inference").final.code


def test_conv_stack_compiled_matches_eager_and_layout_false_keeps_nchw():
    model = _conv_stack().npu()
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(5)).npu()
    with torch.no_grad():
        eager = model(x)
        out = torch.compile(model, backend="npu")(x)
        graph = compiler.last_compile().graph("inference")
        assert _count(graph.snapshot("layout").graph, torch.ops.npu.conv2d_nhwc.default) == 3
        torch._dynamo.reset()
        off = torch.compile(model, backend="npu", options={"layout": False})(x)
    torch.testing.assert_close(out.cpu(), eager.cpu(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(off.cpu(), eager.cpu(), rtol=1e-4, atol=1e-4)
    graph = compiler.last_compile().graph("inference")
    assert "layout" not in [s.name for s in graph.snapshots]
    assert "nhwc" not in graph.final.code and "convolution" in graph.final.code


def test_training_graphs_are_not_rewritten():
    model = _conv_stack().train().npu()
    x = torch.randn(2, 3, 16, 16, device="npu")
    out = torch.compile(model, backend="npu")(x)
    out.sum().backward()
    record = compiler.last_compile()
    for kind in ("forward", "backward"):
        g = record.graph(kind)
        assert "layout" not in [s.name for s in g.snapshots] and "nhwc" not in g.final.code
    assert all(p.grad is not None for p in model.parameters())


def test_dynamic_shapes_are_left_nchw():
    model = _conv_stack().npu()
    fn = torch.compile(model, backend="npu", dynamic=True)
    with torch.no_grad():
        for n in (2, 3):
            x = torch.randn(n, 3, 16, 16, device="npu")
            torch.testing.assert_close(fn(x).cpu(), model(x).cpu(), rtol=1e-4, atol=1e-4)
    changes = compiler.record.history[0].graph("inference").snapshot("layout").changes
    assert changes and all("dynamic" in c for c in changes)
