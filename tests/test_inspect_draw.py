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


def test_wide_drawings_scale_down_to_fit():
    svg = '<svg width="1500pt" height="300pt"\n viewBox="0.00 0.00 1500.00 300.00">'
    assert draw.svg_size_px(svg) == (2000.0, 400.0)  # Graphviz sizes are in points: 4/3 px each
    fitted = draw.fit_svg(svg, 1000)
    assert draw.svg_size_px(fitted) == (1000.0, 200.0) and 'viewBox="0.00 0.00 1500.00 300.00"' in fitted
    assert draw.fit_svg(svg, 3000) == svg  # never scaled up
    wide = draw.Drawing("digraph { rankdir=LR; " + " -> ".join(f"n{i}" for i in range(40)) + " }",
                        max_width_px=600)
    assert "max_width_px" not in repr(wide)  # notebooks show the repr: it stays what it was
    if draw.renderer() is not None:
        assert draw.svg_size_px(wide.svg())[0] <= 600
        row = draw.side_by_side(wide, wide, max_width_px=900, gap_px=20)
        sizes = [float(w) for w in __import__("re").findall(r'<svg width="([\d.]+)px"', row.data)]
        assert len(sizes) == 2 and sum(sizes) + 20 <= 901


def test_tangents_are_drawn_unlike_other_inputs():
    g = torch.fx.Graph()
    a, t = g.placeholder("primals_1"), g.placeholder("tangents_1")
    g.output(g.call_function(torch.mul, (a, t)))
    dot = draw.draw_fx(g).dot
    assert draw.TANGENT_STYLE[1] in dot and draw.KIND_STYLE["placeholder"][1] in dot
