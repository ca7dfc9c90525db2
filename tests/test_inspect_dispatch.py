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


def _shown(call):
    return [s.key for s in call.path if s.kind != "fallthrough"]


def test_each_call_uses_its_own_key_set_not_the_one_when_the_trace_began():
    """A mode switched on inside the traced function counts from the call where it starts (issue: per-call keys)."""
    b = torch.randn(3, device="npu")

    def before_and_inside():
        b * 2
        with torch.inference_mode():
            b * 3
        b * 4

    first, inside, after = dispatch.trace(before_and_inside).calls
    assert _shown(first) == _shown(after) == ["AutogradPrivateUse1", "PrivateUse1"]
    assert _shown(inside) == ["PrivateUse1"]


def test_a_call_reissued_by_an_autocast_kernel_is_drawn_without_the_autocast_hop():
    """Autocast's kernel for linear casts, then calls linear again with its own key excluded: the t and addmm that
    reach the backend never pass AutocastPrivateUse1, although addmm has an autocast kernel of its own."""
    assert dispatch.dispatch_table("aten::addmm")["AutocastPrivateUse1"].kind != "fallthrough"
    assert dispatch.dispatch_table("aten::linear")["AutocastPrivateUse1"].kind != "fallthrough"
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 2).to("npu")
    x = torch.randn(2, 3, device="npu")
    with torch.autocast("npu", dtype=torch.float16):
        calls = dispatch.trace(lambda: layer(x).relu()).calls
    ops = [c.op for c in calls]
    assert ops[:3] == ["aten::_to_copy"] * 3 and "aten::addmm" in ops
    for call in calls:
        assert not any(s.key.startswith("Autocast") and s.kind != "fallthrough" for s in call.path), call.op
    addmm = calls[ops.index("aten::addmm")]
    assert _shown(addmm) == ["AutogradPrivateUse1", "PrivateUse1"]
    assert "AutocastPrivateUse1" not in addmm.keyset
    # relu has no autocast kernel: the key is in its key set, and the dispatcher falls through it
    relu = calls[ops.index("aten::relu")]
    assert "AutocastPrivateUse1" in relu.keyset
    assert any(s.key == "AutocastPrivateUse1" and s.kind == "fallthrough" for s in relu.path)


def test_autocast_entered_inside_the_traced_function_is_seen_from_there_on():
    x = torch.randn(2, 3, device="npu")

    def f():
        x.relu()
        with torch.autocast("npu", dtype=torch.float16):
            x.relu()

    outside, inside = dispatch.trace(f).calls
    assert "AutocastPrivateUse1" not in outside.keyset and "AutocastPrivateUse1" in inside.keyset
