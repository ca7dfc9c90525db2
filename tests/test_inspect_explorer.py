"""The pass explorer and the guard explorer: their data, their widgets, and Dynamo's real behaviour."""

from __future__ import annotations

import sys

import pytest
import torch
import torch._dynamo

import npu_lab
from npu_lab import models
from npu_lab.inspect import GuardExplorer, GuardTrial, PassExplorer, PassStep, explore_guards, explore_passes

# each test starts with no Dynamo caches and no compile records (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _mlp_explorer(backward: bool) -> PassExplorer:
    m = models.mlp().to("npu")
    x, _ = models.example_batch(m, 8, "npu")
    if backward:
        return explore_passes(m, x, backward=True)
    return explore_passes(m, x, kind="inference")


# ---- PassExplorer ------------------------------------------------------------------------------------


def test_pass_explorer_steps_follow_the_record_with_backward():
    ex = _mlp_explorer(backward=True)
    rec = npu_lab.compiler.last_compile()
    assert ex.record is rec and ex.kinds == ["forward", "backward"]
    for g in rec.graphs:
        assert [s.name for s in ex.steps_of(g.kind)] == [s.name for s in g.snapshots]
        assert [s.node_count for s in ex.steps_of(g.kind)] == [len(s.graph.nodes) for s in g.snapshots]
    assert all(isinstance(s, PassStep) for s in ex.steps)
    fusion = ex.step("forward", "pattern_fusion")
    # two of the three addmm are followed by relu: each pair becomes npu.linear_relu (which also absorbs
    # the weight transpose); the last addmm stays
    assert fusion.added == {"npu.linear_relu.default": 2}
    assert fusion.removed["aten.addmm.default"] == 2 and fusion.removed["aten.relu.default"] == 2
    assert fusion.node_count == fusion.node_count_before - 3
    assert any("linear_relu" in c for c in fusion.changes)
    assert "npu.linear_relu" in fusion.code and "npu.linear_relu" not in fusion.code_before
    assert "+    linear_relu" in fusion.code_diff()
    assert "added   2 x npu.linear_relu.default" in ex.describe("forward", "pattern_fusion")
    first = ex.steps_of("backward")[0]
    assert first.name == "input" and first.added == {} and first.removed == {} and not first.changed
    table = ex._repr_html_()
    assert table.startswith("<table>") and table.count("<tr>") == len(ex.steps) + 1


def test_pass_explorer_from_a_record_and_refresh_after_backward():
    m = models.mlp().to("npu")
    x, _ = models.example_batch(m, 4, "npu")
    out = torch.compile(m, backend="npu", options={"cache": False})(x)
    ex = explore_passes()  # the newest compilation
    assert ex.kinds == ["forward"]
    out.sum().backward()  # AOTAutograd compiles the backward graph now
    ex.refresh()
    assert ex.kinds == ["forward", "backward"]
    assert explore_passes(npu_lab.compiler.last_compile(), kind="backward").kind == "backward"
    with pytest.raises(KeyError, match="no 'inference' graph"):
        PassExplorer(kind="inference")


def test_pass_explorer_widget_follows_the_slider_and_the_dropdown():
    ex = _mlp_explorer(backward=False)
    assert ex.kinds == ["inference"]
    box = ex.widget()
    assert box.explorer is ex
    c = ex._controls
    names = [s.name for s in ex.steps_of("inference")]
    assert ex.current == ("inference", len(names) - 1) and c["label"].value.startswith(names[-1])
    last_diff, last_drawing = c["diff"].value, c["drawing"].value
    assert "<svg" in last_drawing or "DOT source" in last_drawing

    fusion = names.index("pattern_fusion")
    c["slider"].value = fusion  # what dragging the slider does
    assert ex.current == ("inference", fusion) and c["label"].value.startswith("pattern_fusion")
    assert c["diff"].value != last_diff and "npu.linear_relu.default" in c["diff"].value
    assert c["drawing"].value != last_drawing and "linear_relu" in c["drawing"].value
    assert c["accordion"].titles[0] == "generated code after this pass"
    assert "npu.linear_relu" in c["accordion"].children[0].value

    ex.show("inference", "input")  # show() moves the controls too
    assert c["slider"].value == 0 and ex.current == ("inference", 0) and "no change" in c["diff"].value


def test_pass_explorer_shows_fused_kernel_source_and_switches_graphs():
    def f(a):
        return (a.sin() * 2 + 1).relu()

    x = torch.randn(4, 8, device="npu", requires_grad=True)
    ex = explore_passes(f, x, backward=True)
    fused = ex.step("forward", "pointwise_fusion")
    assert len(fused.kernels) == 1 and fused.kernel_names[0].startswith("fused")
    assert "numba" in fused.kernels[0] and fused.kernel_names[0] in fused.added
    assert all(not s.kernels for s in ex.steps_of("forward") if s.name != "pointwise_fusion")

    ex.widget("forward", "pointwise_fusion")
    c = ex._controls
    assert c["accordion"].titles[-1] == f"fused kernel {fused.kernel_names[0]} (generated source)"
    assert "numba" in c["accordion"].children[-1].value
    c["kind"].value = "backward"
    assert ex.current[0] == "backward" and c["slider"].max == len(ex.steps_of("backward")) - 1


def test_explorers_display_a_widget_with_an_html_fallback(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.display import display
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()
    ex = _mlp_explorer(backward=False)
    g = explore_guards(lambda a: a.cos(), torch.randn(3))
    with capture_output() as cap:
        display(ex)
        display(g)
    assert len(cap.outputs) == 2
    for out in cap.outputs:
        assert {"application/vnd.jupyter.widget-view+json", "text/html", "text/plain"} <= set(out.data)
    assert "pattern_fusion" in cap.outputs[0].data["text/html"]

    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # as if ipywidgets were not installed
    with capture_output() as cap:
        display(ex)
    assert set(cap.outputs[0].data) == {"text/html", "text/plain"}


# ---- GuardExplorer -----------------------------------------------------------------------------------


def _f(a, b):
    return (a * 2 + b).relu()


def test_guard_explorer_same_shape_new_batch_dtype():
    g = explore_guards(_f, torch.randn(4, 8), torch.randn(8))
    assert g.compiles == 1 and any(s.startswith("TENSOR_MATCH: check_tensor(L['a']") for s in g.guards())

    same = g.try_input(torch.randn(4, 8), torch.randn(8))
    assert isinstance(same, GuardTrial)
    assert same.failed_guards == [] and not same.recompiled and same.served_by == "0/0"
    assert same.compiles_so_far == 1 and "reused" in same.reason

    # A new batch size fails the size guard; Dynamo recompiles, marking that dimension dynamic
    # ("automatic dynamic shapes") ...
    bigger = g.try_input(torch.randn(6, 8), torch.randn(8))
    assert bigger.failed_guards == ["0/0: tensor 'a' size mismatch at index 0. expected 4, actual 6"]
    assert bigger.dynamo_reasons == bigger.failed_guards  # our prediction is what Dynamo itself reported
    assert bigger.recompiled and bigger.compiles_so_far == 2 and bigger.dynamic == ["L['a'] dim 0"]
    assert "automatic dynamic" in bigger.reason

    # ... so a third size reuses the dynamic graph without recompiling ...
    third = g.try_input(torch.randn(7, 8), torch.randn(8))
    assert not third.recompiled and third.failed_guards == [] and third.served_by == "0/1"

    # ... except size 1: dynamic graphs assume sizes >= 2 (0/1 specialization), so 1 gets its own graph
    one = g.try_input(torch.randn(1, 8), torch.randn(8))
    assert one.recompiled and "2 <= a.size()[0]" in one.failed_guards[0] and one.dynamic == []

    dtype = g.try_input(torch.randn(7, 8, dtype=torch.float64), torch.randn(8, dtype=torch.float64))
    assert dtype.recompiled and dtype.compiles_so_far == 4
    assert all("dtype mismatch. expected Float, actual Double" in f for f in dtype.failed_guards)
    assert len(dtype.failed_guards) == 3  # every cached graph was tried and failed
    assert len(g.trials) == 5 and "guard failed" in str(dtype)


def test_guard_explorer_recompile_limit():
    g = GuardExplorer(lambda a: a + 1, torch.ones(3))
    with torch._dynamo.config.patch(recompile_limit=2):
        assert g.try_input(torch.ones(3, dtype=torch.float64)).recompiled
        limited = g.try_input(torch.ones(3, dtype=torch.int64))
    assert not limited.recompiled and "dtype mismatch" in limited.failed_guards[0]
    assert "recompile_limit (2) reached" in limited.reason and limited.compiles_so_far == 2


def test_guard_explorer_on_a_module_with_the_npu_backend():
    m = models.mlp().to("npu")
    x, _ = models.example_batch(m, 8, "npu")
    g = explore_guards(m, x, backend="npu", options={"pointwise_fusion": False})
    assert npu_lab.compiler.last_compile().options == {"pointwise_fusion": False}  # options reach the backend
    assert not g.try_input(x.clone()).recompiled
    other = g.try_input(torch.randn(3, 10, device="npu"))
    assert other.recompiled and other.failed_guards == other.dynamo_reasons
    assert "tensor 'args[0]' size mismatch at index 0. expected 8, actual 3" in other.failed_guards[0]


def test_guard_explorer_widget_button_calls_with_the_chosen_input():
    g = GuardExplorer(lambda a: a.sin() * 2, torch.randn(3, 5))
    box = g.widget()
    assert box.explorer is g
    c = box.controls
    assert c["shape"].value == "3, 5" and c["dtype"].value == "float32"
    before = c["result"].value

    c["shape"].value = "3, 5"
    c["dtype"].value = "float64"
    c["button"].click()
    assert g.last_trial.recompiled and "dtype mismatch" in g.last_trial.failed_guards[0]
    assert g.trials[0].inputs == "(Tensor(3, 5) float64 on cpu)"
    assert c["result"].value != before and "dtype mismatch" in c["result"].value
    assert "graphs compiled so far: <b>2</b>" in c["result"].value and "<table>" in c["history"].value

    c["dtype"].value = "float32"
    c["shape"].value = "(3, 5)"
    c["button"].click()
    assert not g.last_trial.recompiled and "reused" in c["result"].value

    c["shape"].value = "3, x"
    c["button"].click()
    assert "not a shape" in c["result"].value and len(g.trials) == 2
