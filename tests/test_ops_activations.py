"""Activations and losses on the npu (npu_lab/ops/activations.py, npu_lab/ops/losses.py) against PyTorch's CPU.

Two layers: PyTorch's OpInfo samples (all of them in float32, the first few in float64, fallback off, forward and
backward)
must be "native"; then the cases the samples miss: transposed, sliced (offset) and expanded inputs, empty and
0-d tensors, in-place and ``out=`` forms, the backward operators' ``grad_input`` forms, integer and half dtypes,
the CPU's errors for bad input, inputs left unchanged, and rrelu's random slopes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import npu_lab
from npu_lab.ops.sweep import sweep

pytest.importorskip("expecttest", reason="OpInfo's op_db needs the expecttest test dependency")

aten = torch.ops.aten
NPU = "npu"

#: OpInfos whose every operator has an npu kernel in this family.
NATIVE = [
    "nn.functional.hardswish", "nn.functional.hardsigmoid", "nn.functional.leaky_relu", "nn.functional.glu",
    "nn.functional.elu", "nn.functional.prelu", "nn.functional.celu", "nn.functional.rrelu", "nn.functional.selu",
    "nn.functional.logsigmoid", "nn.functional.mish", "nn.functional.softshrink", "nn.functional.hardshrink",
    "nn.functional.hardtanh", "nn.functional.relu6", "nn.functional.softplus",
    "nn.functional.binary_cross_entropy_with_logits", "nn.functional.smooth_l1_loss", "nn.functional.huber_loss",
    "nn.functional.multi_margin_loss", "nn.functional.multilabel_margin_loss",
    "nn.functional.multilabel_soft_margin_loss", "nn.functional.ctc_loss",
    # these also need kernels of other families (logit, xlogy, norm, linalg_vector_norm)
    "nn.functional.binary_cross_entropy", "nn.functional.kl_div", "nn.functional.triplet_margin_loss",
    "nn.functional.triplet_margin_with_distance_loss", "nn.functional.pairwise_distance", "dist",
    "nn.functional.cosine_similarity", "nn.functional.normalize", "masked.normalize",
]


@pytest.fixture(autouse=True)
def _fallback_off(fallback_off):
    """Nothing here may run on the CPU behind the test's back."""
    yield


@pytest.fixture(scope="module")
def reports():
    """Every sample of every OpInfo above in float32 (the first few in float64), with the CPU fallback off."""
    names = NATIVE
    return {dtype: {o.name: o for o in sweep(False, dtype, samples=samples, names=names).ops}
            for dtype, samples in ((torch.float32, 1000), (torch.float64, 3))}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", NATIVE)
def test_opinfo_native(reports, name, dtype):
    o = reports[dtype][name]
    assert o.status == "native", (o.status, o.detail)
    assert o.samples > 0
    assert o.grads_checked or name == "nn.functional.rrelu"  # rrelu's draws are random: shapes only


# ---------------------------------------------------------------------------
# helpers


def _npu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(NPU)


def check(fn, view, *bases: torch.Tensor, grad=True, rtol=1.3e-6, atol=1e-5) -> None:
    """fn(*view(*bases)) on the CPU and on npu copies of ``bases``: same results, same gradients (with respect to
    the floating bases, or those ``grad`` flags, for a random cotangent), and the npu inputs unchanged."""
    flags = grad if isinstance(grad, tuple) else (grad,) * len(bases)
    wants = [w and b.is_floating_point() for b, w in zip(bases, flags)]
    cpu = [b.detach().clone().requires_grad_(w) for b, w in zip(bases, wants)]
    dev = [_npu(b).requires_grad_(w) for b, w in zip(bases, wants)]
    saved = [b.detach().clone() for b in bases]
    expected, actual = fn(*view(*cpu)), fn(*view(*dev))
    assert actual.device.type == NPU
    torch.testing.assert_close(actual.cpu(), expected, rtol=rtol, atol=atol, equal_nan=True)
    for b, s in zip(dev, saved):
        torch.testing.assert_close(b.detach().cpu(), s, rtol=0, atol=0, equal_nan=True)
    if any(wants) and expected.requires_grad:
        cot = torch.randn(expected.shape, dtype=expected.dtype)
        g_cpu = torch.autograd.grad(expected, [b for b, w in zip(cpu, wants) if w], cot, allow_unused=True)
        g_npu = torch.autograd.grad(actual, [b for b, w in zip(dev, wants) if w], _npu(cot), allow_unused=True)
        for gc, gn in zip(g_cpu, g_npu):
            assert (gc is None) == (gn is None)
            if gc is not None:
                torch.testing.assert_close(gn.cpu(), gc, rtol=max(rtol, 1e-5), atol=max(atol, 1e-5), equal_nan=True)


def same_outcome(fn, *args) -> None:
    """fn gives the CPU's result on npu copies of the tensor arguments, or raises the CPU's exception type."""
    try:
        expected = fn(*args)
    except Exception:  # noqa: BLE001 - then the npu must raise the same
        raises_like_cpu(fn, *args)
        return
    actual = fn(*[_npu(a) if isinstance(a, torch.Tensor) else a for a in args])
    torch.testing.assert_close(actual.cpu(), expected)


def raises_like_cpu(fn, *args) -> type:
    """fn raises the same exception type on the CPU and on npu copies of the tensor arguments."""
    with pytest.raises(Exception) as on_cpu:  # noqa: B017 - whatever the CPU raises is the expectation
        fn(*args)
    dev_args = [_npu(a) if isinstance(a, torch.Tensor) else a for a in args]
    with pytest.raises(on_cpu.type):
        fn(*dev_args)
    return on_cpu.type


def _activation_input(shape=(6, 8), dtype=torch.float32) -> torch.Tensor:
    x = torch.randn(shape, dtype=dtype) * 4
    # the kinks of every activation here, exactly
    x.view(-1)[:12] = torch.tensor([-3.0, 3.0, 0.0, -0.4, 0.4, 6.0, -0.6, 0.8, -20.0, 20.0, 2.0, -1.0], dtype=dtype)
    return x


ACTIVATIONS = {
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "leaky_relu_negative": lambda x: F.leaky_relu(x, -0.3),
    "elu": lambda x: F.elu(x, alpha=0.7),
    "elu_scaled": lambda x: torch.ops.aten.elu(x, 0.7, 1.2, 0.9),
    "celu": lambda x: F.celu(x, alpha=1.3),
    "selu": F.selu,
    "hardtanh": lambda x: F.hardtanh(x, -0.6, 0.8),
    "relu6": F.relu6,
    "softplus": lambda x: F.softplus(x, beta=1.5, threshold=3),
    "softplus_default": F.softplus,
    "softshrink": lambda x: F.softshrink(x, 0.4),
    "hardshrink": lambda x: F.hardshrink(x, 0.4),
    "logsigmoid": F.logsigmoid,
    "mish": F.mish,
    "glu": lambda x: F.glu(x, -1),
    "glu_dim0": lambda x: F.glu(x, 0),
    "rrelu_eval": lambda x: F.rrelu(x, 0.1, 0.3, training=False),
    "prelu_scalar": lambda x: F.prelu(x, torch.full((1,), 0.25, dtype=x.dtype, device=x.device)),
}
LAYOUTS = {
    "contiguous": lambda x: (x,),
    "transposed": lambda x: (x.t(),),
    "offset": lambda x: (x[2:, 2:],),
    "expanded": lambda x: (x[:1].expand(4, -1),),
}


# ---------------------------------------------------------------------------
# activations: layouts, dtypes, empty and 0-d tensors


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_layouts(name, layout, dtype):
    check(ACTIVATIONS[name], LAYOUTS[layout], _activation_input(dtype=dtype))


@pytest.mark.parametrize("name", [n for n in ACTIVATIONS if not n.startswith("glu")])
def test_activation_empty_and_scalar(name):
    check(ACTIVATIONS[name], lambda x: (x,), torch.empty(0, 3))
    check(ACTIVATIONS[name], lambda x: (x,), torch.tensor(-1.5))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["hardswish", "elu", "leaky_relu", "softplus", "logsigmoid", "mish", "glu",
                                  "hardtanh", "softshrink"])
def test_activation_half(name, dtype):
    # glu's gradient: the CPU rounds sigmoid(b) to bfloat16 before using it, the npu computes it in float32
    # (no values exactly at a threshold: the CPU compares some in the half type, the npu in float32)
    tol = 5e-2 if dtype == torch.bfloat16 else 1e-2
    check(ACTIVATIONS[name], lambda x: (x,), (torch.randn(6, 8) * 4).to(dtype), rtol=tol, atol=tol)


def test_prelu_channels():
    w = torch.tensor([0.1, -0.5, 2.0, 0.0])
    check(F.prelu, lambda x, w: (x, w), torch.randn(3, 4, 5), w)
    check(F.prelu, lambda x, w: (x.transpose(0, 1), w), torch.randn(4, 3, 5), w)
    check(F.prelu, lambda x, w: (x[:, ::2], w[:2]), torch.randn(2, 4, 3), w)
    raises_like_cpu(aten._prelu_kernel, torch.randn(3, 4), torch.rand(5))
    raises_like_cpu(aten._prelu_kernel, torch.randn(3, 4), torch.rand(4).double())
    raises_like_cpu(F.prelu, torch.randn(3, 4).long(), torch.ones(4).long())


INT_DTYPES = [torch.int64, torch.int32, torch.uint8, torch.bool]


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
@pytest.mark.parametrize("name", ["hardswish", "hardsigmoid", "leaky_relu", "elu", "celu", "selu", "softplus",
                                  "softshrink", "hardshrink", "logsigmoid", "mish", "glu", "rrelu_eval"])
def test_floating_only_activations_refuse_integers(name, dtype):
    assert raises_like_cpu(ACTIVATIONS[name], torch.arange(-4, 4).to(dtype)) is NotImplementedError


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8], ids=str)
def test_hardtanh_integers(dtype):
    x = torch.arange(-20, 20, 3, dtype=dtype).reshape(2, -1)
    check(lambda t: F.hardtanh(t, -3.7, 5.2), lambda t: (t.t(),), x, grad=False, rtol=0, atol=0)
    check(F.relu6, lambda t: (t[:, 1:],), x, grad=False, rtol=0, atol=0)
    check(lambda t: F.hardtanh(t.clone(), -2, 4, inplace=True), lambda t: (t,), x, grad=False, rtol=0, atol=0)


def test_hardtanh_errors():
    u8 = torch.arange(10, dtype=torch.uint8)
    check(F.relu6, lambda t: (t,), u8, grad=False, rtol=0, atol=0)
    raises_like_cpu(F.hardtanh, u8)  # negative lower limit on an unsigned type
    raises_like_cpu(F.hardtanh, torch.tensor([True, False]))
    raises_like_cpu(F.hardtanh, torch.randn(3, dtype=torch.complex64))


# ---------------------------------------------------------------------------
# in place (through views, whose base must change exactly where the view is), out= forms

INPLACE = {
    "hardswish": lambda x: F.hardswish(x, inplace=True),
    "hardsigmoid": lambda x: F.hardsigmoid(x, inplace=True),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2, inplace=True),
    "elu": lambda x: F.elu(x, 0.7, inplace=True),
    "celu": lambda x: F.celu(x, 1.3, inplace=True),
    "selu": lambda x: F.selu(x, inplace=True),
    "hardtanh": lambda x: F.hardtanh(x, -0.6, 0.8, inplace=True),
    "relu6": lambda x: F.relu6(x, inplace=True),
    "mish": lambda x: F.mish(x, inplace=True),
    "rrelu_eval": lambda x: F.rrelu(x, 0.1, 0.3, training=False, inplace=True),
}


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "offset"])
@pytest.mark.parametrize("name", INPLACE)
def test_activation_in_place(name, layout):
    fn, view = INPLACE[name], LAYOUTS[layout]

    def through_view(x):
        base = x * 1  # a non-leaf autograd can differentiate through in place
        target = view(base)[0]
        result = fn(target)
        assert result.data_ptr() == target.data_ptr()
        return base

    check(through_view, lambda x: (x,), _activation_input())


def test_in_place_refuses_overlapping_memory():
    raises_like_cpu(lambda x: F.hardswish(x.expand(3, 4), inplace=True), torch.randn(4))
    raises_like_cpu(lambda x: F.elu(x.expand(3, 4), inplace=True), torch.randn(4))


def test_in_place_backward_with_a_negative_slope_is_refused():
    raises_like_cpu(lambda x: F.leaky_relu(x * 1, -0.2, inplace=True).sum().backward(),
                    torch.randn(4, requires_grad=True))
    raises_like_cpu(aten.elu_backward, torch.randn(4), -1.0, 1.0, 1.0, True, torch.randn(4))
    raises_like_cpu(aten.leaky_relu_backward, torch.randn(4), torch.randn(4), -0.5, True)


OUT_FORMS = {
    "hardswish": (aten.hardswish.out, ()),
    "hardsigmoid": (aten.hardsigmoid.out, ()),
    "elu": (aten.elu.out, (0.7, 1.2, 0.9)),
    "leaky_relu": (aten.leaky_relu.out, (0.2,)),
    "hardtanh": (aten.hardtanh.out, (-0.6, 0.8)),
    "softplus": (aten.softplus.out, (1.5, 3)),
    "softshrink": (aten.softshrink.out, (0.4,)),
    "hardshrink": (aten.hardshrink.out, (0.4,)),
    "mish": (aten.mish.out, ()),
    "glu": (aten.glu.out, (-1,)),
    "rrelu_eval": (lambda x, *a, out: aten.rrelu_with_noise.out(x, torch.empty_like(x), 0.1, 0.3, False, out=out),
                   ()),
}


@pytest.mark.parametrize("name", OUT_FORMS)
def test_activation_out(name):
    op, scalars = OUT_FORMS[name]
    x = _activation_input()
    expected = op(x.t(), *scalars, out=torch.empty(0))
    for shape in [(0,), tuple(expected.shape)]:  # resized from empty, and written in place
        out = torch.full(shape, 7.0, device=NPU)
        x_npu = _npu(x)
        result = op(x_npu.t(), *scalars, out=out)
        assert result is out
        torch.testing.assert_close(out.cpu(), expected)
        assert torch.equal(x_npu.cpu(), x)
    # another dtype: refused by the unary operators, cast into by glu (a binary TensorIterator op)
    same_outcome(lambda t: op(t, *scalars, out=torch.empty(0, dtype=torch.float64, device=t.device)), x)


def test_log_sigmoid_forward_out():
    x = _activation_input()
    out, buf = torch.empty(0, device=NPU), torch.empty(0, device=NPU)
    res = aten.log_sigmoid_forward.output(_npu(x).t(), output=out, buffer=buf)
    assert res[0] is out and res[1] is buf
    expected = aten.log_sigmoid_forward(x.t())
    torch.testing.assert_close(out.cpu(), expected[0])
    torch.testing.assert_close(buf.cpu(), expected[1])


# ---------------------------------------------------------------------------
# backward operators called directly: expanded gradients, grad_input forms, promotion, errors

BACKWARDS = {
    "hardswish_backward": lambda g, x: aten.hardswish_backward(g, x),
    "hardsigmoid_backward": lambda g, x: aten.hardsigmoid_backward(g, x),
    "elu_backward": lambda g, x: aten.elu_backward(g, 0.7, 1.2, 0.9, False, x),
    "elu_backward_result": lambda g, x: aten.elu_backward(g, 0.7, 1.2, 0.9, True, aten.elu(x, 0.7, 1.2, 0.9)),
    "leaky_relu_backward": lambda g, x: aten.leaky_relu_backward(g, x, 0.2, False),
    "hardtanh_backward": lambda g, x: aten.hardtanh_backward(g, x, -0.6, 0.8),
    "softplus_backward": lambda g, x: aten.softplus_backward(g, x, 1.5, 3),
    "softshrink_backward": lambda g, x: aten.softshrink_backward(g, x, 0.4),
    "hardshrink_backward": lambda g, x: aten.hardshrink_backward(g, x, 0.4),
    "log_sigmoid_backward": lambda g, x: aten.log_sigmoid_backward(g, x, aten.log_sigmoid_forward(x)[1]),
    "glu_backward": lambda g, x: aten.glu_backward(g[:, :4], x, -1),
    "prelu_backward": lambda g, x: aten._prelu_kernel_backward(g, x, torch.full_like(x[:1], 0.3))[0],
    "prelu_backward_weight": lambda g, x: aten._prelu_kernel_backward(g, x, torch.full_like(x[:1], 0.3))[1],
}


@pytest.mark.parametrize("name", BACKWARDS)
def test_backward_operators(name):
    fn = BACKWARDS[name]
    check(fn, lambda g, x: (g.t().t(), x), torch.randn(6, 8), _activation_input(), grad=False)
    check(fn, lambda g, x: (g.t(), x.t()), torch.randn(8, 6), _activation_input((8, 6)), grad=False)
    check(fn, lambda g, x: (g[:1].expand(6, -1), x), torch.randn(6, 8), _activation_input(), grad=False)
    check(fn, lambda g, x: (g, x), torch.randn(0, 8), torch.randn(0, 8), grad=False)


GRAD_INPUT_FORMS = {
    "hardsigmoid": (aten.hardsigmoid_backward.grad_input, lambda g, x: (g, x)),
    "elu": (aten.elu_backward.grad_input, lambda g, x: (g, 0.7, 1.2, 0.9, False, x)),
    "leaky_relu": (aten.leaky_relu_backward.grad_input, lambda g, x: (g, x, 0.2, False)),
    "hardtanh": (aten.hardtanh_backward.grad_input, lambda g, x: (g, x, -0.6, 0.8)),
    "softplus": (aten.softplus_backward.grad_input, lambda g, x: (g, x, 1.5, 3)),
    "softshrink": (aten.softshrink_backward.grad_input, lambda g, x: (g, x, 0.4)),
    "hardshrink": (aten.hardshrink_backward.grad_input, lambda g, x: (g, x, 0.4)),
    "log_sigmoid": (aten.log_sigmoid_backward.grad_input, lambda g, x: (g, x, aten.log_sigmoid_forward(x)[1])),
    "glu": (aten.glu_backward.grad_input, lambda g, x: (g[:, :4], x, -1)),
}


@pytest.mark.parametrize("name", GRAD_INPUT_FORMS)
def test_backward_grad_input_forms(name):
    op, make = GRAD_INPUT_FORMS[name]
    g, x = torch.randn(6, 8), _activation_input()
    expected = op(*make(g, x), grad_input=torch.empty(0))
    gi = torch.empty(0, device=NPU)
    assert op(*make(_npu(g), _npu(x)), grad_input=gi) is gi
    torch.testing.assert_close(gi.cpu(), expected)


def test_backward_promotes_like_the_cpu():
    g, x = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4)
    for fn in ("hardswish_backward", "leaky_relu_backward", "softplus_backward", "hardtanh_backward"):
        check(BACKWARDS[fn], lambda g, x: (g, x), g, x, grad=False)
    raises_like_cpu(BACKWARDS["log_sigmoid_backward"], g, x)  # no promotion there: dtypes must agree
    raises_like_cpu(BACKWARDS["glu_backward"], g, x)


def test_activation_argument_errors():
    raises_like_cpu(F.softshrink, torch.randn(3), -0.5)
    raises_like_cpu(F.glu, torch.randn(3, 5))
    raises_like_cpu(F.glu, torch.tensor(1.0))
    raises_like_cpu(F.glu, torch.randn(3, 4), 2)
    raises_like_cpu(aten.glu_backward, torch.randn(3, 2), torch.randn(3, 5), 1)
    raises_like_cpu(F.celu, torch.randn(3), 0.0)
    raises_like_cpu(aten.rrelu_with_noise, torch.randn(3, 4), torch.empty(2), 0.1, 0.3, True)


# ---------------------------------------------------------------------------
# rrelu in training: random slopes from the npu generator


def test_rrelu_training_draws_slopes():
    x = _npu(_activation_input())
    noise = torch.full_like(x, 5.0)
    out = aten.rrelu_with_noise(x, noise, 0.1, 0.3, True)
    xc, nc, oc = x.cpu(), noise.cpu(), out.cpu()
    neg = xc <= 0
    assert ((nc[neg] >= 0.1) & (nc[neg] <= 0.3)).all() and (nc[~neg] == 1).all()
    assert nc[neg].unique().numel() > neg.sum() // 2  # drawn per element
    torch.testing.assert_close(oc, xc * nc, rtol=0, atol=0)
    # reproducible under a seed, from the device generator or an explicit one
    torch.npu.manual_seed(3)
    a = F.rrelu(x, 0.1, 0.3, training=True)
    torch.npu.manual_seed(3)
    b = F.rrelu(x, 0.1, 0.3, training=True)
    assert torch.equal(a.cpu(), b.cpu())
    g1, g2 = torch.Generator(device=NPU).manual_seed(7), torch.Generator(device=NPU).manual_seed(7)
    n1, n2 = torch.empty_like(x), torch.empty_like(x)
    aten.rrelu_with_noise(x, n1, 0.1, 0.3, True, g1)
    aten.rrelu_with_noise(x, n2, 0.1, 0.3, True, g2)
    assert torch.equal(n1.cpu(), n2.cpu())


def test_rrelu_training_in_place_strided_and_backward():
    base = _npu(_activation_input())
    view = base.t()
    noise = torch.empty(view.shape, device=NPU).t().contiguous().t()  # a strided noise buffer
    before = base.cpu()
    res = aten.rrelu_with_noise_(view, noise, 0.2, 0.25, True)
    assert res.data_ptr() == view.data_ptr()
    torch.testing.assert_close(base.cpu(), before * noise.cpu().t(), rtol=0, atol=0)
    x = _npu(_activation_input()).requires_grad_(True)
    y = F.rrelu(x, 0.2, 0.25, training=True)
    g = torch.randn(y.shape)
    (gx,) = torch.autograd.grad(y, x, _npu(g))
    slope = y.detach().cpu() / x.detach().cpu()
    slope[x.detach().cpu() == 0] = 1  # 0 * r: the gradient there is r, not recoverable from y
    nonzero = x.detach().cpu() != 0
    torch.testing.assert_close(gx.cpu()[nonzero], (g * slope)[nonzero])


def test_rrelu_refuses_integers_in_training():
    assert raises_like_cpu(lambda t: F.rrelu(t, training=True), torch.arange(-3, 3)) is NotImplementedError


# ---------------------------------------------------------------------------
# binary cross entropy


def _probs(*shape, dtype=torch.float32):
    return torch.rand(shape, dtype=dtype).clamp(1e-4, 1 - 1e-4)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_binary_cross_entropy(reduction):
    def bce(x, t, w=None):
        return F.binary_cross_entropy(x, t, w, reduction=reduction)

    x, t = _probs(5, 6), _probs(5, 6)
    # the target's gradient needs aten::logit (special functions): the input's only
    check(lambda x, t: bce(x, t), lambda x, t: (x.t(), t.t()), x, t, grad=(True, False))
    check(lambda x, t, w: bce(x, t, w), lambda x, t, w: (x[1:], t[1:], w[1:]), x, t, torch.rand(5, 6),
          grad=(True, False, False))
    check(lambda x, t: bce(x, t), lambda x, t: (x, t), torch.empty(0, 3), torch.empty(0, 3))
    # the exact ends: log(0) clamped at -100
    edge = torch.tensor([0.0, 1.0, 0.5, 1.0, 0.0])
    check(lambda x, t: bce(x, t), lambda x, t: (x, t), edge, torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0]), grad=False)


def test_binary_cross_entropy_gradient_wrt_input_float64():
    x, t = _probs(4, 3, dtype=torch.float64), _probs(4, 3, dtype=torch.float64)

    def bce(x):
        return F.binary_cross_entropy(x, t.to(x.device), reduction="mean")

    check(bce, lambda x: (x,), x)
    check(lambda x, t: F.binary_cross_entropy(x, t), lambda x, t: (x[:, 1:], t[:, 1:]), x, t, grad=(True, False))


def test_binary_cross_entropy_squeezes_like_aten():
    x, t = _probs(4, 1), _probs(4)
    check(lambda x, t: aten.binary_cross_entropy(x, t, None, 0), lambda x, t: (x, t), x, t, grad=False)
    g = torch.randn(4, 1)
    check(lambda g, x, t: aten.binary_cross_entropy_backward(g, x, t, None, 0), lambda *a: a, g, x, t, grad=False)


def test_binary_cross_entropy_out_and_grad_input():
    x, t, w = _probs(3, 4), _probs(3, 4), torch.rand(4)
    for reduction in (0, 1, 2):
        out = torch.empty(5, device=NPU)
        res = aten.binary_cross_entropy.out(_npu(x), _npu(t), _npu(w), reduction, out=out)
        assert res is out
        torch.testing.assert_close(out.cpu(), aten.binary_cross_entropy(x, t, w, reduction))
        g = torch.randn(()) if reduction else torch.randn(3, 4)
        gi = torch.empty(0, device=NPU)
        assert aten.binary_cross_entropy_backward.grad_input(_npu(g), _npu(x), _npu(t), _npu(w), reduction,
                                                             grad_input=gi) is gi
        torch.testing.assert_close(gi.cpu(), aten.binary_cross_entropy_backward(g, x, t, w, reduction))


def test_binary_cross_entropy_errors():
    t = _probs(3)
    raises_like_cpu(F.binary_cross_entropy, torch.tensor([0.5, 1.5, 0.2]), t)
    raises_like_cpu(F.binary_cross_entropy, torch.tensor([0.5, float("nan"), 0.2]), t)
    raises_like_cpu(F.binary_cross_entropy, _probs(3), torch.tensor([0.5, -0.5, 0.2]))
    raises_like_cpu(aten.binary_cross_entropy, _probs(3, dtype=torch.float64), t)
    raises_like_cpu(aten.binary_cross_entropy, torch.tensor([1, 0]), torch.tensor([1, 0]))
    raises_like_cpu(aten.binary_cross_entropy, _probs(3, 4), _probs(3, 4), torch.rand(2, 3, 4), 0)


def test_binary_cross_entropy_with_logits_weights():
    x, t = torch.randn(4, 5) * 3, _probs(4, 5)
    check(lambda x, t, w, p: F.binary_cross_entropy_with_logits(x, t, w, pos_weight=p), lambda x, t, w, p: (
        x.t(), t.t(), w, p), x, t, torch.rand(4), torch.rand(4) * 2, grad=(True, True, False, False))


# ---------------------------------------------------------------------------
# smooth L1 and Huber


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_smooth_l1_loss(beta, reduction):
    x, t = torch.randn(4, 6) * 2, torch.randn(4, 6) * 2
    t[0, :3] = x[0, :3]  # zero differences: the kink (and beta = 0's sign)
    t[1, :2] = x[1, :2] + torch.tensor([beta, -beta])

    def loss(x, t):
        return F.smooth_l1_loss(x, t, reduction=reduction, beta=beta)

    check(loss, lambda x, t: (x.t(), t.t()), x, t)
    check(loss, lambda x, t: (x[1:, 2:], t[1:, 2:]), x, t)
    check(loss, lambda x, t: (x, t), torch.empty(0, 2), torch.empty(0, 2))
    check(lambda x, t: aten.smooth_l1_loss(x, t, 0, beta), lambda x, t: (x, t[:1]), x, t)  # broadcast target


@pytest.mark.parametrize("delta", [0.5, 1.0, 2.5])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_huber_loss(delta, reduction):
    x, t = torch.randn(4, 6) * 2, torch.randn(4, 6) * 2
    t[0, :3] = x[0, :3]
    t[1, :2] = x[1, :2] + torch.tensor([delta, -delta])

    def loss(x, t):
        return F.huber_loss(x, t, reduction=reduction, delta=delta)

    check(loss, lambda x, t: (x.t(), t.t()), x, t)
    check(loss, lambda x, t: (x[1:, 2:], t[1:, 2:]), x, t)
    check(loss, lambda x, t: (x, t), x, t.double(), grad=False)  # the input's dtype, not the promoted one
    check(loss, lambda x, t: (x, t), torch.empty(0, 2), torch.empty(0, 2))


def test_smooth_l1_and_huber_out_forms_and_errors():
    x, t = torch.randn(3, 4), torch.randn(3, 4)
    for op, param in ((aten.smooth_l1_loss.out, 0.7), (aten.huber_loss.out, 0.7)):
        for reduction in (0, 1, 2):
            out = torch.empty(7, device=NPU)
            assert op(_npu(x), _npu(t), reduction, param, out=out) is out
            torch.testing.assert_close(out.cpu(), op(x, t, reduction, param, out=torch.empty(0)))
    g = torch.randn(3, 4)
    for op, param in ((aten.smooth_l1_loss_backward.grad_input, 0.0), (aten.smooth_l1_loss_backward.grad_input, 0.7),
                      (aten.huber_loss_backward.out, 0.7)):
        for reduction, grad in ((0, g), (1, g[0, 0]), (2, g[0, 0])):
            gi = torch.empty(0, device=NPU)
            assert op(_npu(grad), _npu(x), _npu(t), reduction, param, grad_input=gi) is gi
            torch.testing.assert_close(gi.cpu(), op(grad, x, t, reduction, param, grad_input=torch.empty(0)))
    raises_like_cpu(F.smooth_l1_loss, x, t, None, None, "mean", -1.0)
    raises_like_cpu(F.huber_loss, x, t, "mean", 0.0)
    raises_like_cpu(aten.smooth_l1_loss, x.long(), t.long())
    raises_like_cpu(aten.huber_loss, x.long(), t.long())


# ---------------------------------------------------------------------------
# margin losses


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("p", [1, 2])
def test_multi_margin_loss(p, reduction):
    x, y = torch.randn(5, 4), torch.tensor([0, 3, 1, 1, 2])
    w = torch.rand(4) + 0.5

    def loss(x, y, w=None, margin=1.0):
        return F.multi_margin_loss(x, y, p=p, margin=margin, weight=w, reduction=reduction)

    check(loss, lambda x, y: (x.t().contiguous().t(), y), x, y)
    check(lambda x, y, w: loss(x, y, w, 0.3), lambda x, y, w: (x[:, :], y, w), x, y, w, grad=(True, False, False))
    check(loss, lambda x, y: (x[1], y[1]), x, y)  # one sample, a vector of scores
    check(loss, lambda x, y: (x[0, 0], y[0]), x, torch.tensor([0, 0, 0, 0, 0]))  # 0-d scores
    check(loss, lambda x, y: (x[:0], y[:0]), x, y) if reduction == "none" else None


def test_multi_margin_loss_errors_and_grad_input():
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 2])
    raises_like_cpu(aten.multi_margin_loss, x, torch.tensor([0, 1, 4]))
    raises_like_cpu(aten.multi_margin_loss, x, torch.tensor([0, -1, 2]))
    raises_like_cpu(aten.multi_margin_loss, x, y, 3)
    raises_like_cpu(aten.multi_margin_loss, x, torch.tensor([0, 1]))
    raises_like_cpu(aten.multi_margin_loss, x, y, 1, 1, torch.rand(3))
    raises_like_cpu(aten.multi_margin_loss, x, y, 1, 1, torch.rand(4).double())
    raises_like_cpu(aten.multi_margin_loss, x, y.int())
    raises_like_cpu(aten.multi_margin_loss, x.long(), y)
    raises_like_cpu(aten.multi_margin_loss, torch.randn(2, 0), torch.tensor([0, 0]))
    g = torch.randn(3)
    gi = torch.empty(0, device=NPU)
    w = torch.rand(4)
    assert aten.multi_margin_loss_backward.grad_input(_npu(g), _npu(x), _npu(y), 2, 0.5, _npu(w), 0,
                                                      grad_input=gi) is gi
    torch.testing.assert_close(gi.cpu(), aten.multi_margin_loss_backward(g, x, y, 2, 0.5, w, 0))
    out = torch.empty(9, device=NPU)
    assert aten.multi_margin_loss.out(_npu(x), _npu(y), 1, 1, None, 0, out=out) is out
    torch.testing.assert_close(out.cpu(), aten.multi_margin_loss(x, y, 1, 1, None, 0))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss(reduction):
    x = torch.randn(4, 5)
    y = torch.tensor([[3, 0, -1, 1, 2], [4, 4, 1, -1, -1], [0, 1, 2, 3, 4], [-1, 2, 3, 0, 0]])

    def loss(x, y):
        return F.multilabel_margin_loss(x, y, reduction=reduction)

    check(loss, lambda x, y: (x.t().contiguous().t(), y), x, y)
    check(loss, lambda x, y: (x[1:, :], y[1:].t().contiguous().t()), x, y)
    check(loss, lambda x, y: (x[0], y[0]), x, y)


def test_multilabel_margin_loss_errors_and_out_forms():
    x, y = torch.randn(3, 4), torch.tensor([[0, 1, -1, 2]] * 3)
    raises_like_cpu(aten.multilabel_margin_loss_forward, x, torch.tensor([[0, 1, 4, -1]] * 3), 1)
    raises_like_cpu(aten.multilabel_margin_loss_forward, x, torch.tensor([[0, 1, -2, -1]] * 3), 1)
    raises_like_cpu(aten.multilabel_margin_loss_forward, x, torch.tensor([[0, 1, -1]] * 3), 1)
    raises_like_cpu(aten.multilabel_margin_loss_forward, x.long(), y, 1)
    raises_like_cpu(aten.multilabel_margin_loss_forward, x, y.int(), 1)
    loss, is_target = aten.multilabel_margin_loss_forward(x, y, 0)
    raises_like_cpu(aten.multilabel_margin_loss_backward, torch.ones(2), x, y, 0, is_target)
    raises_like_cpu(aten.multilabel_margin_loss_backward, torch.tensor(1.0), x, y, 1, is_target[:, :3])
    raises_like_cpu(aten.multilabel_margin_loss_backward, torch.tensor(1.0), x, y, 1, is_target * 2)
    out, marks = torch.empty(0, device=NPU), torch.empty(0, device=NPU)
    res = aten.multilabel_margin_loss_forward.output(_npu(x), _npu(y), 0, output=out, is_target=marks)
    assert res[0] is out and res[1] is marks
    torch.testing.assert_close(out.cpu(), loss)
    torch.testing.assert_close(marks.cpu(), is_target)
    g, gi = torch.randn(3), torch.empty(0, device=NPU)
    assert aten.multilabel_margin_loss_backward.grad_input(_npu(g), _npu(x), _npu(y), 0, marks, grad_input=gi) is gi
    torch.testing.assert_close(gi.cpu(), aten.multilabel_margin_loss_backward(g, x, y, 0, is_target))


def test_multilabel_soft_margin_loss_weighted():
    x, y = torch.randn(4, 6), (torch.rand(4, 6) > 0.5).float()
    check(lambda x, y, w: F.multilabel_soft_margin_loss(x, y, w), lambda x, y, w: (x.t().contiguous().t(), y, w),
          x, y, torch.rand(6), grad=(True, False, False))


# ---------------------------------------------------------------------------
# CTC


def _ctc_case(T=12, N=3, C=5, S=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    log_probs = torch.randn(T, N, C, generator=g).log_softmax(2)
    targets = torch.randint(1, C, (N, S), generator=g)
    return log_probs, targets


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss(reduction, zero_infinity):
    log_probs, targets = _ctc_case()
    il, tl = [12, 9, 4], [4, 2, 3]  # the last cannot align 3 labels (with a repeat) in 4 steps only if it repeats
    targets[2, :3] = torch.tensor([2, 2, 2])  # repeats need blanks between them: 3 + 2 > 4 steps, infinite loss

    def padded(lp, tg):
        return F.ctc_loss(lp, tg, il, tl, reduction=reduction, zero_infinity=zero_infinity)

    def concatenated(lp, tg):
        flat = torch.cat([tg[b, :n] for b, n in enumerate(tl)])
        return F.ctc_loss(lp, flat, torch.tensor(il), torch.tensor(tl), blank=0, reduction=reduction,
                          zero_infinity=zero_infinity)

    check(padded, lambda lp, tg: (lp, tg), log_probs, targets)
    check(concatenated, lambda lp, tg: (lp.transpose(0, 1).contiguous().transpose(0, 1), tg), log_probs, targets)


def test_ctc_loss_corner_cases():
    log_probs, targets = _ctc_case(T=6, N=4, C=4, S=3, seed=1)
    # an empty target, an empty input, the blank at the last class, float64, unbatched
    check(lambda lp, tg: F.ctc_loss(lp, tg, [6, 0, 5, 6], [0, 0, 3, 1], blank=3, reduction="none"),
          lambda lp, tg: (lp, tg.clamp(max=2)), log_probs, targets)
    check(lambda lp, tg: F.ctc_loss(lp, tg, [6, 5, 4, 6], [3, 2, 1, 0], reduction="sum"),
          lambda lp, tg: (lp, tg), log_probs.double(), targets)
    check(lambda lp, tg: F.ctc_loss(lp, tg, [6], [3], reduction="none"), lambda lp, tg: (lp[:, 0], tg[0]),
          log_probs, targets)
    # int32 targets, straight to the ATen operator
    nll, alpha = aten._ctc_loss(_npu(log_probs), _npu(targets).int(), [6, 5, 4, 6], [3, 2, 1, 0], 0, False)
    e_nll, e_alpha = aten._ctc_loss(log_probs, targets.int(), [6, 5, 4, 6], [3, 2, 1, 0], 0, False)
    torch.testing.assert_close(nll.cpu(), e_nll)
    grad = aten._ctc_loss_backward(_npu(torch.ones(4)), _npu(log_probs), _npu(targets), [6, 5, 4, 6], [3, 2, 1, 0],
                                   nll, alpha, 0, False)
    e_grad = aten._ctc_loss_backward(torch.ones(4), log_probs, targets, [6, 5, 4, 6], [3, 2, 1, 0], e_nll, e_alpha,
                                     0, False)
    torch.testing.assert_close(grad.cpu(), e_grad)


def test_ctc_loss_errors():
    log_probs, targets = _ctc_case(T=6, N=2, C=4, S=3)
    raises_like_cpu(aten._ctc_loss, log_probs, targets, [6, 6], [3, 3], 4, False)  # blank out of range
    raises_like_cpu(aten._ctc_loss, log_probs, targets, [7, 6], [3, 3], 0, False)  # input longer than T
    raises_like_cpu(aten._ctc_loss, log_probs, targets, [6, 6], [4, 3], 0, False)  # target longer than given
    raises_like_cpu(aten._ctc_loss, log_probs, targets, [6], [3], 0, False)
    raises_like_cpu(aten._ctc_loss, log_probs, targets, [6, -1], [3, 3], 0, False)
    raises_like_cpu(aten._ctc_loss, log_probs[0], targets, [6, 6], [3, 3], 0, False)
    raises_like_cpu(aten._ctc_loss, log_probs, targets.float(), [6, 6], [3, 3], 0, False)
    raises_like_cpu(aten._ctc_loss, log_probs, targets.reshape(-1), [6, 6], [3, 2], 0, False)
    # a label past the classes: the CPU reads outside log_probs; the npu refuses
    with pytest.raises(IndexError):
        aten._ctc_loss(_npu(log_probs), _npu(targets) + 4, [6, 6], [3, 3], 0, False)


def test_module_is_registered():
    assert "aten::hardswish" in npu_lab.ops.CLAIMED and "aten::_ctc_loss" in npu_lab.ops.CLAIMED
