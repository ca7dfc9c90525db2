"""The Python dispatch key: DispatchLog (a TorchDispatchMode), LoggingTensor, and the modes behind tracing."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from npu_lab import models
from npu_lab.inspect import dispatch
from npu_lab.inspect.dispatch_log import DispatchLog, LoggingTensor, log_training_step, mode_stack_during, op_name


def test_op_name_is_short():
    assert op_name(torch.ops.aten.add.Tensor) == "add.Tensor"
    assert op_name(torch.ops.aten.relu.default) == "relu"


def test_training_step_is_logged_per_phase_on_npu():
    model = models.mlp().to("npu")
    x, y = models.example_batch(model, 8, "npu")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    log = log_training_step(model, x, y, lambda out, t: models.loss_fn(model, out, t), opt)
    counts = log.counts()
    assert list(counts) == ["forward", "backward", "optimizer"]
    # three Linear layers: three addmm forward, the loss, then mm (weight grads) in the backward
    assert counts["forward"]["addmm"] == 3
    assert counts["forward"]["nll_loss_forward"] == 1
    assert counts["backward"]["nll_loss_backward"] == 1
    assert counts["backward"]["threshold_backward"] == 2  # the two ReLUs
    assert counts["backward"]["mm"] >= 3
    # the optimizer's update is real ATen work on the npu (foreach or per-parameter)
    assert any("add" in op or "mul" in op for op in counts["optimizer"])
    assert log.devices() == {"npu:0"}
    assert sum(sum(c.values()) for c in counts.values()) == len(log.calls)
    html = log._repr_html_()
    assert "addmm" in html and "backward" in html
    assert "forward" in log.summary().splitlines()[0]


def test_python_key_is_in_the_include_set_only_inside_the_mode():
    assert "Python" not in dispatch.keys(torch._C._dispatch_tls_local_include_set())
    with DispatchLog() as log:
        inside = dispatch.keys(torch._C._dispatch_tls_local_include_set())
        torch.ones(2, device="npu").add(1)
    assert "Python" in inside and "PythonTLSSnapshot" in inside
    assert "Python" not in dispatch.keys(torch._C._dispatch_tls_local_include_set())
    assert [c.op for c in log.calls] == ["ones", "add.Tensor"]


def test_phase_labels_and_bad_phase():
    log = DispatchLog()
    with log:
        with log.phase("a"):
            torch.ones(1).neg()
        torch.ones(1).neg()
    assert log.phases() == ["a", "main"]
    with pytest.raises(TypeError):
        with log.phase(""):
            pass


def test_logging_tensor_carries_the_python_key_and_logs_operators():
    t = LoggingTensor(torch.randn(3, device="npu"))
    assert "Python" in dispatch.tensor_keys(t)
    LoggingTensor.log.clear()
    out = (t * 2).relu().sum()
    assert isinstance(out, LoggingTensor) and out.device.type == "npu"
    assert LoggingTensor.log == ["mul.Tensor", "relu", "sum"]
    assert torch.allclose(out.elem.cpu(), (t.elem * 2).relu().sum().cpu())
    with pytest.raises(TypeError):
        LoggingTensor([1.0])


def test_tracers_are_dispatch_modes():
    def f(a):
        return a.sin() * 2

    x = torch.randn(3, device="npu")
    assert mode_stack_during(f, x) == [[]]
    assert mode_stack_during(f, x, tracer=make_fx) == [["ProxyTorchDispatchMode"]]
    fake = mode_stack_during(f, x, tracer=lambda g: make_fx(g, tracing_mode="fake"))
    assert fake == [["FakeTensorMode", "ProxyTorchDispatchMode"]]


def test_fake_tensor_mode_runs_npu_shapes_without_data():
    with FakeTensorMode() as mode:
        w = torch.empty(4096, 4096, device="npu")
        out = torch.nn.functional.linear(torch.empty(8, 4096, device="npu"), w).relu()
    assert isinstance(out, FakeTensor) and out.shape == (8, 4096) and out.device.type == "npu"
    assert isinstance(mode, torch.utils._python_dispatch.TorchDispatchMode)
