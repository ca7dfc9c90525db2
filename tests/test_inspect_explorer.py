"""The pass explorer and the guard explorer: their data, and one widget interaction each."""

from __future__ import annotations

import torch
import torch._dynamo

import npu_lab
from npu_lab import models
from npu_lab.inspect import GuardExplorer, PassExplorer, explore_guards, explore_passes


def _mlp_explorer(backward: bool) -> PassExplorer:
    npu_lab.compiler.reset()
    m = models.mlp().to("npu")
    x, _ = models.example_batch(m, 8, "npu")
    if not backward:
        with torch.no_grad():
            return explore_passes(lambda a: m(a), x)
    return explore_passes(lambda a: m(a), x, backward=True)


def test_pass_explorer_steps_follow_the_record():
    ex = _mlp_explorer(backward=True)
    rec = npu_lab.compiler.last_compile()
    assert ex.kinds == ["forward", "backward"]
    for g in rec.graphs:
        assert [s.name for s in ex.steps_of(g.kind)] == [s.name for s in g.snapshots]
    fusion = next(s for s in ex.steps_of("forward") if s.name == "pattern_fusion")
    assert fusion.added.get("npu.linear_relu.default") == 2
    assert fusion.removed.get("aten.relu.default") == 2 and fusion.removed.get("aten.addmm.default") == 2
    assert fusion.node_count < ex.steps_of("forward")[0].node_count
    assert "added   2 x npu.linear_relu.default" in ex.describe("forward", ex.steps_of("forward").index(fusion))
    assert "<table>" in ex._repr_html_()
    torch._dynamo.reset()


def test_pass_explorer_widget_responds_to_the_slider():
    ex = _mlp_explorer(backward=False)
    assert ex.kinds == ["inference"]
    box = ex.widget()
    assert box.explorer is ex
    last = len(ex.steps_of("inference")) - 1
    assert ex.current == ("inference", last)
    slider = box.children[0].children[1]
    slider.value = 0
    assert ex.current == ("inference", 0)
    assert box.children[0].children[2].value == "input"
    torch._dynamo.reset()


def test_guard_explorer_reports_failed_guards_and_recompiles():
    def f(a, b):
        return (a * 2 + b).relu()

    g = explore_guards(f, torch.randn(4, 8), torch.randn(8))
    assert g.compiles == 1 and any("TENSOR_MATCH" in s for s in g.guards())
    same = g.try_input(torch.randn(4, 8), torch.randn(8))
    assert same.failed_guards == [] and not same.recompiled
    # A new batch size fails the size guard; Dynamo recompiles with that dimension dynamic ...
    bigger = g.try_input(torch.randn(6, 8), torch.randn(8))
    assert bigger.recompiled and "size mismatch at index 0" in bigger.failed_guards[0]
    # ... so a third size is served by the dynamic entry without recompiling.
    third = g.try_input(torch.randn(7, 8), torch.randn(8))
    assert not third.recompiled and third.failed_guards == []
    dtype = g.try_input(torch.randn(6, 8, dtype=torch.float64), torch.randn(8, dtype=torch.float64))
    assert dtype.recompiled and "dtype mismatch" in dtype.failed_guards[0]
    assert g.compiles == 3 and "recompiled" in dtype.reason
    torch._dynamo.reset()


def test_guard_explorer_widget_button_calls_with_the_chosen_input():
    g = GuardExplorer(lambda a: a.sin() * 2, torch.randn(3, 5))
    box = g.widget()
    shape, dtype, button = box.controls
    shape.value = "3, 5"
    dtype.value = "float64"
    button.click()
    assert button.last_trial.recompiled and "dtype" in button.last_trial.failed_guards[0]
    assert len(g.trials) == 1 and g.trials[0].inputs.startswith("(Tensor(3, 5) float64")
    torch._dynamo.reset()
