"""Graph drawings: DOT built from real graphs, SVG when a renderer exists, a note when not."""

import torch

from npu_lab import compiler
from npu_lab.inspect import draw


def test_fx_drawing_marks_kinds_shapes_and_fused_nodes():
    torch._dynamo.reset()
    f = torch.compile(lambda x, w: torch.nn.functional.gelu(x @ w * 2 + 1), backend="npu")
    f(torch.randn(4, 8, device="npu"), torch.randn(8, 8, device="npu"))
    graph = compiler.last_compile().graph("inference").final.graph
    d = draw.draw_fx(graph, "after passes")
    assert "f32[4, 8]" in d.dot and "doublecircle" in d.dot
    assert draw.FUSED_STYLE[1] in d.dot and "gelu" in d.dot
    svg = d.svg()
    assert svg is not None and svg.startswith("<svg") and "fused_matmul" in svg  # gelu in the product's epilogue


def test_autograd_drawing_follows_grad_fn():
    x = torch.randn(3, device="npu", requires_grad=True)
    d = draw.draw_autograd((x * 2).sin().sum())
    for name in ("SumBackward0", "SinBackward0", "MulBackward0", "AccumulateGrad"):
        assert name in d.dot


def test_without_a_renderer_the_drawing_explains_itself(monkeypatch):
    monkeypatch.setattr(draw, "renderer", lambda: None)
    d = draw.Drawing("digraph { a -> b }")
    assert d._repr_svg_() is None
    note = d._repr_html_()
    assert "No graph renderer found" in note and "graphviz-pure" in note and "a -&gt; b" in note
