"""The whole-sequence LSTM and GRU kernels (npu_lab/ops/rnn_sequence.py) against nn.LSTM/nn.GRU on the CPU: the
same outputs and gradients for every layout they take, first and second derivatives, ATen's composite for what
they do not take (and ATen's errors), far fewer launches than the composite, and no such kernel on a bare
device."""

from __future__ import annotations

import pytest
import torch

import npu_lab
from npu_lab import adaptation
from npu_lab.ops import rnn_sequence

_FUSED = "_RecurrentStackBackward"
_KINDS = [torch.nn.LSTM, torch.nn.GRU]


def _fused(out: torch.Tensor) -> bool:
    """Did the sequence kernel make ``out`` (possibly under a transpose or squeeze of nn.LSTM's own)?"""
    return _FUSED in type(out.grad_fn).__name__ or _FUSED in str(out.grad_fn.next_functions)


def _pair(cls: type = torch.nn.LSTM, dtype: torch.dtype = torch.float32, input_size: int = 6, hidden: int = 5,
          **kwargs) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    cpu = cls(input_size, hidden, **kwargs).to(dtype)
    npu = cls(input_size, hidden, **kwargs).to(dtype)
    npu.load_state_dict(cpu.state_dict())
    return cpu, npu.npu()


def _states(out_state: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return out_state if isinstance(out_state, tuple) else (out_state,)


def _run(model: torch.nn.Module, x: torch.Tensor, state: tuple[torch.Tensor, ...] | None):
    """Forward and backward of a loss using the output and every final state: (outputs, gradients of x, the
    initial states and the parameters)."""
    leaves = [x.detach().requires_grad_()] + [s.detach().requires_grad_() for s in state or ()]
    given = None if state is None else tuple(leaves[1:]) if len(leaves) == 3 else leaves[1]
    out, finals = model(leaves[0], given)
    finals = _states(finals)
    (out.square().sum() + (finals[0] * 3).sum() + finals[-1].sin().sum()).backward()
    return (out, *finals), [t.grad for t in leaves] + [p.grad for p in model.parameters()]


def _assert_matches(cpu: torch.nn.Module, npu: torch.nn.Module, x: torch.Tensor, state=None, fused: bool = True,
                    **tol) -> None:
    want, want_grads = _run(cpu, x, state)
    got, got_grads = _run(npu, x.npu(), None if state is None else tuple(s.npu() for s in state))
    assert _fused(got[0]) == fused
    for a, b in zip(want + tuple(want_grads), got + tuple(got_grads), strict=True):
        torch.testing.assert_close(b.cpu(), a, **tol)


@pytest.mark.parametrize("cls", _KINDS, ids=["lstm", "gru"])
@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize("batch_first", [False, True], ids=["time-major", "batch-first"])
def test_outputs_and_every_gradient_match_the_cpu(cls, layers, bidirectional, batch_first):
    cpu, npu = _pair(cls, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
    x = torch.randn(3, 4, 6) if batch_first else torch.randn(4, 3, 6)
    _assert_matches(cpu, npu, x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cls", _KINDS, ids=["lstm", "gru"])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
def test_without_biases_and_with_a_given_state(cls, bidirectional):
    cpu, npu = _pair(cls, num_layers=2, bias=False, bidirectional=bidirectional)
    shape = (4 if bidirectional else 2, 3, 5)
    state = tuple(torch.randn(shape) for _ in range(2 if cls is torch.nn.LSTM else 1))
    _assert_matches(cpu, npu, torch.randn(5, 3, 6), state, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cls", _KINDS, ids=["lstm", "gru"])
def test_an_unbatched_sequence(cls):
    cpu, npu = _pair(cls, num_layers=2, bidirectional=True)
    _assert_matches(cpu, npu, torch.randn(4, 6), rtol=1e-5, atol=1e-5)
    state = tuple(torch.randn(4, 5) for _ in range(2 if cls is torch.nn.LSTM else 1))
    _assert_matches(cpu, npu, torch.randn(4, 6), state, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cls", _KINDS, ids=["lstm", "gru"])
def test_a_longer_sequence_in_float64(cls):
    cpu, npu = _pair(cls, torch.float64, 32, 32, num_layers=2)
    _assert_matches(cpu, npu, torch.randn(16, 4, 32, dtype=torch.float64))


@pytest.mark.parametrize("cls", _KINDS, ids=["lstm", "gru"])
def test_only_some_inputs_need_a_gradient(cls):
    cpu, npu = _pair(cls, num_layers=2)
    for model in (cpu, npu):
        model.weight_hh_l0.requires_grad_(False)
        model.bias_ih_l1.requires_grad_(False)
    x = torch.randn(4, 3, 6)
    out, finals = cpu(x)
    out_n, finals_n = npu(x.npu())  # the input needs no gradient either
    (out.sum() + _states(finals)[0].sum()).backward()
    (out_n.sum() + _states(finals_n)[0].sum()).backward()
    for p, p_n in zip(cpu.parameters(), npu.parameters()):
        assert (p.grad is None) == (p_n.grad is None)
        if p.grad is not None:
            torch.testing.assert_close(p_n.grad.cpu(), p.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cls", _KINDS, ids=["lstm", "gru"])
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "eval"])
def test_without_a_gradient_nothing_is_recorded(cls, mode):
    cpu, npu = _pair(cls, num_layers=2, bidirectional=True, dropout=0.5)
    x = torch.randn(4, 3, 6)
    cpu.eval(), npu.eval()  # (no dropout in eval mode: the kernel takes the call)
    context = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode, "eval": torch.enable_grad}[mode]
    with context():
        want = cpu(x)
        with npu_lab.profile() as prof:
            got = npu(x.npu())
    # the sequence kernel ran (one input product and one per step, per layer and direction)
    assert sum(k.name == "mm" for k in prof.kernels) == 2 * 2 * (1 + 4)
    for a, b in zip((want[0], *_states(want[1])), (got[0], *_states(got[1])), strict=True):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-5, atol=1e-5)
    if mode == "eval":  # the parameters need gradients: the one node is recorded
        assert _FUSED in type(got[0].grad_fn).__name__
    else:
        assert got[0].grad_fn is None


def _functional(cls: type, num_layers: int, bidirectional: bool, has_biases: bool):
    """``torch.lstm``/``torch.gru`` as a function of (x, *initial states, *parameters), for gradcheck."""
    def fn(x, *rest):
        if cls is torch.nn.LSTM:
            return torch.lstm(x, rest[:2], rest[2:], has_biases, num_layers, 0.0, True, bidirectional, False)
        return torch.gru(x, rest[0], rest[1:], has_biases, num_layers, 0.0, True, bidirectional, False)
    return fn


def _tiny_inputs(cls: type, num_layers: int, bidirectional: bool, bias: bool = True) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    model = cls(3, 2, num_layers=num_layers, bidirectional=bidirectional, bias=bias).double()
    cells = num_layers * (2 if bidirectional else 1)
    states = [torch.randn(cells, 2, 2, dtype=torch.float64) for _ in range(2 if cls is torch.nn.LSTM else 1)]
    tensors = (torch.randn(3, 2, 3, dtype=torch.float64), *states, *[p.detach() for p in model._flat_weights])
    return tuple(t.npu().requires_grad_() for t in tensors)


@pytest.mark.parametrize("cls", _KINDS, ids=["lstm", "gru"])
@pytest.mark.parametrize("bias", [True, False])
def test_gradcheck(cls, bias):
    inputs = _tiny_inputs(cls, 2, True, bias)
    fn = _functional(cls, 2, True, bias)
    assert _FUSED in type(fn(*inputs)[0].grad_fn).__name__
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("cls", _KINDS, ids=["lstm", "gru"])
def test_gradgradcheck(cls):
    inputs = _tiny_inputs(cls, 2, False)
    assert torch.autograd.gradgradcheck(_functional(cls, 2, False, True), inputs, eps=1e-6, atol=1e-5)


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")
@pytest.mark.filterwarnings("ignore:dropout option adds dropout after all but last")
@pytest.mark.parametrize("cls", _KINDS, ids=["lstm", "gru"])
def test_projections_and_dropout_in_training_are_left_to_the_composite(cls):
    if cls is torch.nn.LSTM:
        cpu, npu = _pair(cls, num_layers=2, proj_size=3)
        _assert_matches(cpu, npu, torch.randn(4, 3, 6), fused=False, rtol=1e-5, atol=1e-5)
    _, npu = _pair(cls, num_layers=2, dropout=0.5)
    out, _ = npu(torch.randn(4, 3, 6).npu())
    assert out.grad_fn is not None and not _fused(out)
    _, npu = _pair(cls, num_layers=1, dropout=0.5)  # (one layer: no dropout to draw, the kernel takes it)
    out, _ = npu(torch.randn(4, 3, 6).npu())
    assert _fused(out)


@pytest.mark.parametrize("cls", _KINDS, ids=["lstm", "gru"])
def test_half_precision_is_left_to_the_composite(cls):
    cpu, npu = _pair(cls, torch.bfloat16, num_layers=2)
    x = torch.randn(4, 3, 6).bfloat16()
    want, got = cpu(x), npu(x.npu())
    assert not _fused(got[0])
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("cls", _KINDS, ids=["lstm", "gru"])
@pytest.mark.parametrize("case", ["states", "wrong batch", "state on the cpu", "weights of another dtype",
                                  "too few weights"])
def test_bad_calls_raise_what_the_composite_raises(cls, case):
    lstm = cls is torch.nn.LSTM
    x = torch.randn(4, 3, 6)
    h = torch.zeros(1, 3, 5)
    params = [p.detach() for p in cls(6, 5)._flat_weights]
    states = {"states": [h, h, h] if lstm else [h, h], "wrong batch": [torch.zeros(1, 2, 5)] * 2}.get(case, [h, h])
    if case == "weights of another dtype":
        params = [p.double() for p in params]
    if case == "too few weights":
        params = params[:3]

    def call(composite: bool):
        def move(t):
            return t if case == "state on the cpu" and t.dim() == 3 and t is not x else t.npu()
        hx = [move(t) for t in states] if lstm else move(states[0]) if case != "states" else [move(t) for t in states]
        args = (move(x), hx, [move(p) for p in params], True, 1, 0.0, True, False, False)
        op = torch.ops.aten.lstm.input if lstm else torch.ops.aten.gru.input
        if composite:
            return op._op_dk(torch._C.DispatchKey.CompositeImplicitAutograd, *args)
        return op(*args)

    with pytest.raises((RuntimeError, TypeError)) as want:
        call(composite=True)
    with pytest.raises((RuntimeError, TypeError)) as got:
        call(composite=False)
    assert type(got.value) is type(want.value) and str(got.value) == str(want.value)


@pytest.mark.parametrize("cls", _KINDS, ids=["lstm", "gru"])
def test_far_fewer_launches_than_the_composite(cls):
    torch.manual_seed(0)
    model = cls(8, 8, num_layers=2).npu()
    x = torch.randn(16, 4, 8).npu().requires_grad_()
    zeros = torch.zeros(2, 4, 8).npu()
    hx = [zeros, zeros] if cls is torch.nn.LSTM else zeros
    args = (hx, model._flat_weights, True, 2, 0.0, True, False, False)
    op = torch.ops.aten.lstm.input if cls is torch.nn.LSTM else torch.ops.aten.gru.input

    def launches(fn) -> tuple[int, list[str]]:
        with npu_lab.profile() as prof:
            out, h, *_ = fn(x, *args)
            (out.sum() + h.sum()).backward()
        return prof.launches, [k.name for k in prof.kernels if k.kind == "kernel"]

    fused, names = launches(op)
    composite, _ = launches(lambda *a: op._op_dk(torch._C.DispatchKey.CompositeImplicitAutograd, *a))
    steps, layers = 16, 2
    # forward: one input product and one hidden product per step; backward: one product per step, then three
    # per layer (dW_ih, dW_hh, dX), where the composite runs four per step and accumulates the weights' gradients
    assert names.count("mm") == layers * (1 + steps) + layers * (steps + 3)
    cell = "fused_lstm_cell" if cls is torch.nn.LSTM else "fused_gru_cell"
    assert names.count(cell) == names.count(f"{cell}_backward") == layers * steps
    assert "column_sum" not in names
    assert fused < composite / 2, (fused, composite)


def test_fake_tensors_and_functorch_transforms_get_the_composite():
    from torch._subclasses.fake_tensor import FakeTensorMode

    _, npu = _pair(num_layers=2)
    with FakeTensorMode(allow_non_fake_inputs=True):  # (the kernels never see a fake tensor's missing memory)
        out, _ = npu(torch.empty(4, 3, 6, device="npu"))
    assert out.shape == (4, 3, 5) and out.device.type == "npu"
    x = torch.randn(4, 3, 6).npu()
    params = dict(npu.named_parameters())
    grads = torch.func.grad(lambda p: torch.func.functional_call(npu, p, (x,))[0].sum())(params)
    npu(x)[0].sum().backward()
    for name, p in params.items():
        torch.testing.assert_close(grads[name], p.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(torch.npu.device_count() < 2, reason="one npu device")
def test_a_second_device_that_is_not_the_current_one():
    cpu, npu = _pair(torch.nn.GRU, num_layers=2, bidirectional=True)
    npu = npu.to("npu:1")
    x = torch.randn(4, 3, 6)
    want, want_grads = _run(cpu, x, None)
    got, got_grads = _run(npu, x.to("npu:1"), None)
    assert _fused(got[0]) and {t.device for t in (*got, *got_grads)} == {torch.device("npu:1")}
    for a, b in zip(want + tuple(want_grads), got + tuple(got_grads), strict=True):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-5, atol=1e-5)


def test_a_profile_sees_the_same_operators_and_values():
    _, npu = _pair(num_layers=2, bidirectional=True)
    x = torch.randn(4, 3, 6).npu()
    want = _run(npu, x, None)
    npu.zero_grad()
    with npu_lab.profile() as prof:
        got = _run(npu, x, None)
    ops = {op.name for op in prof.ops}
    assert {"aten::mm", "aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_lstm_cell_backward_impl"} <= ops
    for a, b in zip([*want[0], *want[1]], [*got[0], *got[1]], strict=True):
        torch.testing.assert_close(b, a)


def test_registered_on_the_npu_but_not_on_a_bare_device():
    for op in ("aten::lstm.input", "aten::gru.input"):
        for key in ("AutogradPrivateUse1", "PrivateUse1"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(op, key)
    assert rnn_sequence._lib is not None

    def probe() -> None:
        import torch

        import npu_lab  # noqa: F401
        from npu_lab.ops import rnn_sequence

        print(rnn_sequence._lib is None,
              torch._C._dispatch_has_kernel_for_dispatch_key("aten::lstm.input", "AutogradPrivateUse1"),
              torch._C._dispatch_has_kernel_for_dispatch_key("aten::gru.input", "AutogradPrivateUse1"))

    fresh = adaptation.run_fresh(probe, env={"NPU_LAB_BARE": "1"})
    assert fresh.ok, fresh.stderr[-2000:]
    assert fresh.stdout.split()[-3:] == ["True", "False", "False"]


def _clocked(model: torch.nn.Module, x: torch.Tensor) -> tuple[list[torch.Tensor], int, int, float]:
    """Forward and backward with nothing recording: (outputs and gradients, kernel launches, copies, simulated
    µs)."""
    model.zero_grad()
    clock = npu_lab.device.clock.clock(0)
    torch.npu.synchronize()
    launches, copies, start = clock.launches, clock.copies, clock.now()
    got, grads = _run(model, x, None)
    torch.npu.synchronize()
    return [t.cpu() for t in (*got, *grads)], clock.launches - launches, clock.copies - copies, clock.now() - start


@pytest.mark.parametrize("cls", _KINDS, ids=["lstm", "gru"])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
def test_the_compiled_time_loop_launches_what_the_step_by_step_loop_does(monkeypatch, cls, bidirectional):
    """With nothing recording, a layer's loop runs as one compiled call (npu_lab/ops/rnn_loops.py): the same
    values and per-step launches as the step-by-step loop, less the gathering of the steps' results (one stack
    forward, and backward one concatenation of the gates' gradients, two for a GRU's, per layer and direction),
    plus one copy of a one-directional output (the loop keeps its own)."""
    _, npu = _pair(cls, num_layers=2, bidirectional=bidirectional)
    x = torch.randn(7, 3, 6).npu()
    kind = "lstm" if cls is torch.nn.LSTM else "gru"
    calls: list[str] = []
    for name in (f"{kind}_forward", f"{kind}_backward"):
        real = getattr(rnn_sequence.rnn_loops, name)
        monkeypatch.setattr(rnn_sequence.rnn_loops, name,
                            lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    compiled, launches, copies, took = _clocked(npu, x)
    cells = 2 * (2 if bidirectional else 1)
    assert calls == [f"{kind}_forward"] * cells + [f"{kind}_backward"] * cells
    monkeypatch.setattr(rnn_sequence.rnn_loops, "takes", lambda *tensors: False)
    stepwise, step_launches, step_copies, step_took = _clocked(npu, x)
    assert len(calls) == 2 * cells  # (not called again)
    for a, b in zip(stepwise, compiled, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)
    gathered = 2 if cls is torch.nn.LSTM else 3
    assert (launches, copies) == (step_launches - gathered * cells, step_copies + (not bidirectional))
    assert took < step_took


@pytest.mark.parametrize("cls", _KINDS, ids=["lstm", "gru"])
def test_writing_to_the_output_before_the_backward_leaves_the_gradients_right(cls):
    """The compiled loop keeps its own copy of the hidden states, so the output is the caller's to change in place
    (as ATen's composite's is; the CPU's float32 LSTM kernel, which saves its output, raises instead)."""
    cpu, npu = _pair(cls, torch.float64, num_layers=2)  # (float64: the CPU's composite, which allows it)
    x = torch.randn(5, 3, 6, dtype=torch.float64)
    weights = torch.randn(5, 3, 5, dtype=torch.float64)
    grads = []
    for model, inputs in ((cpu, x), (npu, x.npu())):
        out, _ = model(inputs)
        loss = (out * weights.to(out.device)).sum()
        out.add_(7)  # (in place, as F.relu(out, inplace=True) would)
        loss.backward()
        grads.append([p.grad.cpu() for p in model.parameters()])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(b, a)
