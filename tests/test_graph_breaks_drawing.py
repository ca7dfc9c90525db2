"""graph_breaks.split: the graphs and breaks Dynamo made of a function, drawn."""

import inspect

import pytest
import torch

from npu_lab.inspect.graph_breaks import split


def clip(x):
    y = x.sin() * 2
    bound = y.std().item()
    return y.clamp(max=bound) + 1


def helper(t):
    print("helper runs")
    return (t - t.mean()) * 2


def model(x):
    y = x.relu()
    y = HELPER(y)
    return y.tanh()


HELPER = helper


def test_split_of_an_item_break(capsys):
    s = split(clip, torch.randn(16, device="npu"))
    assert len(s.graphs) == 2 and len(s.breaks) == 1
    first = inspect.getsourcelines(clip)[1]
    (brk,) = s.breaks
    assert brk.lineno == first + 2 and "item()" in brk.reason and brk.frame == "clip"
    assert s.ops(0) == ["sin", "mul", "std"]
    assert s.op_lines(0) == {first + 1: ["sin", "mul"], first + 2: ["std"]}
    assert s.ops(1) == ["clamp", "add"]
    dot = s.draw().dot
    assert "g0 -> b0" in dot and "b0 -> g1" in dot and "octagon" in dot
    page = s.source_html(clip)
    assert "break 1" in page and "graph 1" in page and "y.clamp(max=bound)" in page


@pytest.mark.parametrize("wrap, graphs, opaque", [
    (lambda f: f, 3, False),
    (torch.compiler.disable, 2, False),
    (torch._dynamo.allow_in_graph, 1, True),
    (torch._dynamo.nonstrict_trace, 1, True),
])
def test_disable_allow_in_graph_nonstrict_trace(wrap, graphs, opaque, capsys):
    global HELPER
    HELPER = wrap(helper)
    try:
        s = split(model, torch.randn(8, device="npu"))
    finally:
        HELPER = helper
    assert len(s.graphs) == graphs
    all_ops = [op for i in range(len(s.graphs)) for op in s.ops(i)]
    assert any("(opaque)" in op for op in all_ops) == opaque
    if wrap is torch.compiler.disable:
        assert "disable" in s.breaks[0].reason and "mean" not in all_ops


def test_split_rejects_non_functions():
    with pytest.raises(TypeError):
        split(3)


def noisy(x):
    y = x.sin() * 2
    print("noisy")
    bound = y.std().item()
    return y.clamp(max=bound) + 1


def test_each_break_names_the_frame_dynamo_compiled(capsys):
    """After the first break the rest runs in a resume function named after that break's line; the next break
    happens there (explain's own records call that frame by the function's name)."""
    s = split(noisy, torch.randn(16, device="npu"))
    first = inspect.getsourcelines(noisy)[1]
    assert [b.lineno for b in s.breaks] == [first + 2, first + 3]
    assert s.breaks[0].frame == "noisy"
    assert s.breaks[1].frame == f"torch_dynamo_resume_in_noisy_at_{first + 2}"
    assert len(s.graphs) == 3
