"""Draw FX graphs (and any small graph) as SVG in a notebook.

A :class:`Drawing` holds DOT source and renders it with, in order of preference:

1. ``graphviz-pure`` (a pip-installable, pure-Rust port of Graphviz that gives
   the same SVG on every machine, which keeps notebook outputs testable);
2. the system's ``dot`` (Debian's ``graphviz`` package);
3. nothing: the drawing then shows its DOT source with a note saying how to
   get a renderer, instead of failing.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.fx

KIND_STYLE = {
    "placeholder": ("ellipse", "#dbeafe"),
    "get_attr": ("note", "#fef3c7"),
    "call_function": ("box", "#f3f4f6"),
    "call_method": ("box", "#ede9fe"),
    "call_module": ("box3d", "#dcfce7"),
    "output": ("doublecircle", "#fee2e2"),
}
FUSED_STYLE = ("box", "#fed7aa")
#: AOTAutograd's incoming gradients (placeholders named ``tangents_*``): green, unlike the blue inputs.
TANGENT_STYLE = ("ellipse", "#bbf7d0")


def renderer() -> tuple[str, str] | None:
    """(name, path) of the renderer that will be used, or None."""
    here = Path(sys.executable).parent / "graphviz-pure"
    for name, path in (("graphviz-pure", str(here) if here.exists() else shutil.which("graphviz-pure")),
                       ("dot", shutil.which("dot"))):
        if path:
            return name, path
    return None


@dataclass
class Drawing:
    """DOT source that renders itself as SVG in Jupyter."""

    dot: str
    title: str = ""
    #: scale the SVG down (never up) to at most this many CSS pixels wide; None: natural size
    max_width_px: int | None = field(default=None, repr=False)

    def svg(self) -> str | None:
        r = renderer()
        if r is None:
            return None
        out = subprocess.run([r[1], "-Tsvg"], input=self.dot.encode(), capture_output=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"{r[0]} failed: {out.stderr.decode()[:500]}")
        text = out.stdout.decode()
        text = text[text.index("<svg"):] if "<svg" in text else text
        return fit_svg(text, self.max_width_px) if self.max_width_px else text

    def _repr_svg_(self) -> str | None:
        return self.svg()

    def _repr_html_(self) -> str | None:
        if renderer() is not None:
            return None  # the SVG representation is used
        return ("<p><b>No graph renderer found.</b> Install one with <code>pip install graphviz-pure</code> "
                "(or <code>apt-get install graphviz</code>). DOT source:</p><pre>"
                + html.escape(self.dot) + "</pre>")

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        svg = self.svg()
        path.write_text(svg if svg is not None and path.suffix == ".svg" else self.dot)
        return path


_SVG_SIZE = re.compile(r'<svg width="([\d.]+)(pt|px)?" height="([\d.]+)(pt|px)?"')


def svg_size_px(svg: str) -> tuple[float, float] | None:
    """(width, height) in CSS pixels of an SVG as Graphviz writes it (sizes in pt), or None."""
    m = _SVG_SIZE.search(svg)
    if m is None:
        return None
    scale = 4 / 3 if (m.group(2) or "pt") == "pt" else 1.0  # 1 pt = 4/3 CSS px
    return float(m.group(1)) * scale, float(m.group(3)) * scale


def fit_svg(svg: str, max_width_px: float) -> str:
    """The same SVG, scaled down (its viewBox kept) so that it is at most ``max_width_px`` wide."""
    size = svg_size_px(svg)
    if size is None or size[0] <= max_width_px:
        return svg
    factor = max_width_px / size[0]
    return _SVG_SIZE.sub(f'<svg width="{size[0] * factor:.0f}px" height="{size[1] * factor:.0f}px"', svg, count=1)


def side_by_side(*drawings: Drawing, max_width_px: int = 1100, gap_px: int = 24):
    """Several drawings in one row, scaled down together so the row fits in ``max_width_px``.

    SVG when a renderer is installed, the DOT source otherwise. Returns an ``IPython.display.HTML``.
    """
    from IPython.display import HTML

    svgs = [d.svg() for d in drawings]
    widths = [(svg_size_px(s) or (0.0, 0.0))[0] if s else 0.0 for s in svgs]
    room = max_width_px - gap_px * (len(drawings) - 1)
    factor = min(1.0, room / sum(widths)) if sum(widths) else 1.0
    cells = []
    for d, svg, w in zip(drawings, svgs, widths):
        if svg is None:
            cells.append(f"<pre>{html.escape(d.dot)}</pre>")
        else:
            cells.append(f"<div>{fit_svg(svg, w * factor) if factor < 1 else svg}</div>")
    return HTML(f"<div style='display:flex;gap:{gap_px}px;align-items:flex-start'>" + "".join(cells) + "</div>")


def _esc(text: str) -> str:
    """Escape for a quoted DOT string; real newlines become DOT line breaks."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def describe_value(val: object) -> str:
    """'f32[4, 8]' for a tensor (or fake tensor), tuples joined, '' otherwise."""
    if isinstance(val, torch.Tensor):
        dt = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64", torch.bool: "bool",
              torch.int32: "i32", torch.float16: "f16"}.get(val.dtype, str(val.dtype).replace("torch.", ""))
        return f"{dt}{list(val.shape)}"
    if isinstance(val, (tuple, list)):
        return ", ".join(describe_value(v) for v in val if isinstance(v, torch.Tensor))
    return ""


def _target_name(node: torch.fx.Node) -> str:
    t = node.target
    if isinstance(t, str):
        return t
    name = getattr(t, "__name__", str(t))
    if isinstance(t, torch._ops.OpOverload):
        name = str(t).replace("aten.", "").replace(".default", "")
    return name


def fx_lines(g: torch.fx.Graph, prefix: str = "", max_nodes: int = 150,
             style: dict[str, tuple[str | None, str | None, str]] | None = None,
             notes: dict[str, str] | None = None) -> list[str]:
    """DOT lines (nodes, then edges) for an FX graph; node ids are ``prefix + node.name``.

    ``style`` maps a node name to (shape, fill colour, extra DOT attributes) that override its look
    (None keeps the shape or colour of its kind); ``notes`` adds a last line to a node's label.
    """
    lines = []
    nodes = list(g.nodes)[:max_nodes]
    shown = set(nodes)
    for n in nodes:
        fused = "fused" in n.meta or "npu." in str(n.target) or getattr(n.target, "__module__", "") == \
            "npu_lab.compiler.passes.pointwise_fusion"
        shape, color = FUSED_STYLE if fused else KIND_STYLE.get(n.op, ("box", "white"))
        if n.op == "placeholder" and n.name.startswith("tangents"):
            shape, color = TANGENT_STYLE
        extra = ""
        if style and n.name in style:
            new_shape, new_color, extra = style[n.name]
            shape, color = new_shape or shape, new_color or color
        val = n.meta.get("val", n.meta.get("example_value", n.meta.get("tensor_meta")))
        info = describe_value(val)
        target = _target_name(n)
        plain = n.op in ("placeholder", "output", "get_attr") or n.name.startswith(target.split(".")[0])
        label = n.name if plain else f"{n.name}\n{target}"
        if info:
            label += f"\n{info}"
        if notes and n.name in notes:
            label += f"\n{notes[n.name]}"
        if fused and "fused" in n.meta:
            ops = n.meta["fused"].fused_ops
            label += "\n[" + " → ".join(ops[:6]) + (" …" if len(ops) > 6 else "") + "]"
        lines.append(f'  "{_esc(prefix + n.name)}" [label="{_esc(label)}", shape={shape}, fillcolor="{color}"'
                     f'{", " + extra if extra else ""}];')
    for n in nodes:
        for a in n.all_input_nodes:
            if a in shown:
                lines.append(f'  "{_esc(prefix + a.name)}" -> "{_esc(prefix + n.name)}";')
    if len(g.nodes) > max_nodes:
        more = f'"{_esc(prefix)}more"' if prefix else "more"
        lines.append(f'  {more} [label="… {len(g.nodes) - max_nodes} more nodes", shape=plaintext];')
    return lines


def draw_fx(graph: torch.fx.Graph | torch.fx.GraphModule, title: str = "", max_nodes: int = 150) -> Drawing:
    """Draw an FX graph: nodes by kind, with shapes/dtypes from its metadata, fused nodes marked.

    AOTAutograd's incoming gradients (placeholders named ``tangents_*``) are green, other inputs blue.
    """
    g = graph.graph if isinstance(graph, torch.fx.GraphModule) else graph
    lines = ["digraph G {", '  rankdir=TB; node [fontname="Helvetica", fontsize=10, style=filled];',
             '  edge [fontname="Helvetica", fontsize=8, color="#6b7280"];']
    if title:
        lines.append(f'  label="{_esc(title)}"; labelloc=t; fontname="Helvetica";')
    lines += fx_lines(g, max_nodes=max_nodes)
    lines.append("}")
    return Drawing("\n".join(lines), title)


def draw_autograd(t: torch.Tensor, title: str = "autograd graph") -> Drawing:
    """Draw the ``grad_fn`` graph behind a tensor (autograd's backward graph)."""
    lines = ["digraph G {", '  rankdir=BT; node [fontname="Helvetica", fontsize=10, style=filled];']
    lines.append(f'  label="{_esc(title)}"; labelloc=t;')
    seen: dict[object, str] = {}
    stack = [t.grad_fn] if t.grad_fn is not None else []
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        nid = f"n{len(seen)}"
        seen[fn] = nid
        name = type(fn).__name__
        color = "#dcfce7" if name == "AccumulateGrad" else "#f3f4f6"
        label = name
        if name == "AccumulateGrad":
            label += f"\n{describe_value(fn.variable)}"
        lines.append(f'  {nid} [label="{_esc(label)}", shape=box, fillcolor="{color}"];')
        for nxt, _ in fn.next_functions:
            if nxt is not None:
                stack.append(nxt)
    for fn, nid in seen.items():
        for nxt, _ in fn.next_functions:
            if nxt is not None and nxt in seen:
                lines.append(f"  {seen[nxt]} -> {nid};")
    lines.append("}")
    return Drawing("\n".join(lines), title)
