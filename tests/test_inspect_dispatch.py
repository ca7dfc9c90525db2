"""The dispatch inspector reads PyTorch's real dispatcher state."""

import torch

from npu_lab.inspect import dispatch


def test_tensor_keys_of_npu_and_cpu_tensors():
    assert dispatch.tensor_keys(torch.ones(1, device="npu"))[-1] == "PrivateUse1"
    assert "AutogradPrivateUse1" in dispatch.tensor_keys(torch.ones(1, device="npu"))
    assert dispatch.tensor_keys(torch.ones(1))[-1] == "CPU"


def test_dispatch_table_shows_the_npu_kernel_and_fallthroughs():
    table = dispatch.dispatch_table("aten::add.Tensor")
    assert table["PrivateUse1"].kind == "kernel" and "npu_lab" in table["PrivateUse1"].registered_at
    assert table["ADInplaceOrView"].kind == "fallthrough"
    assert "autograd" in table["AutogradPrivateUse1"].kind


def test_trace_of_add_with_requires_grad_names_autograd_and_npu_kernel():
    a = torch.randn(3, device="npu", requires_grad=True)
    b = torch.randn(3, device="npu")
    tr = dispatch.trace(lambda: a + b)
    (call,) = tr.calls
    assert call.op == "aten::add.Tensor"
    assert [s.key for s in call.path if s.kind != "fallthrough"] == ["AutogradPrivateUse1", "PrivateUse1"]
    assert any(s.key == "ADInplaceOrView" and s.kind == "fallthrough" for s in call.path)
    assert call.kernel.startswith("npu_lab.ops.pointwise")
    assert "AutogradPrivateUse1 -> PrivateUse1" in tr.text()


def test_inplace_ops_pass_through_ad_inplace_or_view():
    b = torch.randn(3, device="npu")
    (call,) = dispatch.trace(lambda: b.add_(1)).calls
    assert [s.key for s in call.path if s.kind != "fallthrough"] == [
        "AutogradPrivateUse1", "ADInplaceOrView", "PrivateUse1"]


def test_inference_mode_removes_autograd_from_the_path():
    b = torch.randn(3, device="npu")
    with torch.inference_mode():
        (call,) = dispatch.trace(lambda: b * 2).calls
    assert [s.key for s in call.path if s.kind != "fallthrough"] == ["PrivateUse1"]


def test_cpu_calls_reach_the_cpu_kernel_and_composites_are_named():
    x = torch.randn(3, requires_grad=True)
    (call,) = dispatch.trace(lambda: x + 1).calls
    assert call.path[-1].key == "CPU" and "CPU" in call.kernel
    a = torch.randn(3, device="npu")
    tr = dispatch.trace(lambda: torch.ones_like(a))
    assert "CompositeExplicitAutograd" in tr.calls[0].kernel
    assert "<table>" in tr._repr_html_()
