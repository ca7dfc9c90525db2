"""Draw FX graphs (and any small graph) as SVG in a notebook.

A :class:`Drawing` holds DOT source and renders it with, in order of preference:

1. ``graphviz-pure`` (a pip-installable, pure-Rust port of Graphviz that gives
   the same SVG on every machine, which keeps notebook outputs testable);
2. the system's ``dot`` (Debian's ``graphviz`` package);
3. nothing: the drawing then shows its DOT source with a note saying how to
   get a renderer, instead of failing.

Fonts. Graphviz sizes every box from the width of its label *in the font the DOT names*, measured
with built-in metrics; the reader's browser then draws the SVG with whatever font it has under that
name. If it has none (no Helvetica on most Linux machines), it falls back to another, often wider,
and the labels overflow their boxes. So every drawing is laid out and drawn in one font,
:data:`FONT` (DejaVu Sans: Graphviz knows its metrics, and nearly every Linux desktop has it):
:meth:`Drawing.svg` sets it as the default of the graph, its nodes and edges, replaces the sans-serif
fonts a DOT source names (Helvetica, Arial) by it, and writes :data:`FONT_FAMILY` into the SVG: the
measured font first, then one with the same widths, then narrower ones (Liberation Sans, Arial,
Helvetica). A browser without DejaVu Sans (on macOS or Windows, say) draws the labels a little
smaller than their boxes, never larger.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx

#: The font every drawing is measured and drawn in (see the module's docstring).
FONT = "DejaVu Sans"
#: The SVG's font list: the measured font, fonts with its widths, then narrower ones (labels still fit).
FONT_FAMILY = "DejaVu Sans,Bitstream Vera Sans,Liberation Sans,Arial,Helvetica,sans-serif"
#: Font names a DOT source may give that Drawing replaces by FONT (sans-serif fonts Graphviz measures narrower).
_SANS_NAMES = r"(?:Helvetica|Arial|Liberation Sans|sans-serif|sans)"
_SANS = re.compile(rf'fontname\s*=\s*(?:"{_SANS_NAMES}"|{_SANS_NAMES}(?=[\s,;\]]))', re.IGNORECASE)
_SVG_FONT = re.compile(r'font-family="DejaVu Sans(?:,[^"]*)?"')

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
        out = subprocess.run([r[1], "-Tsvg"], input=in_lab_font(self.dot).encode(), capture_output=True,
                             timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"{r[0]} failed: {out.stderr.decode()[:500]}")
        text = out.stdout.decode()
        text = text[text.index("<svg"):] if "<svg" in text else text
        text = _SVG_FONT.sub(f'font-family="{FONT_FAMILY}"', text)
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


def in_lab_font(dot: str) -> str:
    """The DOT source laid out in :data:`FONT`: the default of the graph, its nodes and edges, and in place of
    the sans-serif fonts the source names. Other fonts a source names (a monospace one, say) are kept."""
    brace = dot.find("{")
    if brace < 0:
        return dot
    defaults = f' graph [fontname="{FONT}"]; node [fontname="{FONT}"]; edge [fontname="{FONT}"];'
    return _SANS.sub(f'fontname="{FONT}"', dot[: brace + 1] + defaults + dot[brace + 1:])


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
    """'f32[4, 8]' for a tensor (a fake tensor, or ShapeProp's metadata of one), tuples joined, '' otherwise."""
    from torch.fx.passes.shape_prop import TensorMetadata

    if isinstance(val, (torch.Tensor, TensorMetadata)):
        dt = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64", torch.bool: "bool",
              torch.int32: "i32", torch.float16: "f16"}.get(val.dtype, str(val.dtype).replace("torch.", ""))
        return f"{dt}{list(val.shape)}"
    if isinstance(val, (tuple, list)):
        return ", ".join(describe_value(v) for v in val if isinstance(v, (torch.Tensor, TensorMetadata)))
    return ""


def _sizes(value: object) -> str:
    """A size as short text: '2x3' for (2, 3), '3' for 3."""
    if isinstance(value, (tuple, list)):
        return "x".join(str(v) for v in value)
    return str(value)


def module_summary(module: torch.nn.Module) -> str:
    """A module's type with the sizes that tell it apart: 'Linear(4→8)', 'Conv2d(3→16, 3x3)', 'ReLU'."""
    name = type(module).__name__
    if isinstance(module, torch.nn.Linear):
        return f"{name}({module.in_features}→{module.out_features})"
    if isinstance(module, torch.nn.modules.conv._ConvNd):
        return f"{name}({module.in_channels}→{module.out_channels}, {_sizes(module.kernel_size)})"
    if isinstance(module, torch.nn.Embedding):
        return f"{name}({module.num_embeddings}, {module.embedding_dim})"
    if isinstance(module, torch.nn.LayerNorm):
        return f"{name}({_sizes(module.normalized_shape)})"
    if isinstance(module, torch.nn.GroupNorm):
        return f"{name}({module.num_groups}, {module.num_channels})"
    if hasattr(module, "num_features") and isinstance(module.num_features, int):  # batch/instance norm
        return f"{name}({module.num_features})"
    if isinstance(module, torch.nn.modules.dropout._DropoutNd):
        return f"{name}(p={module.p})"
    if isinstance(module, (torch.nn.modules.pooling._MaxPoolNd, torch.nn.modules.pooling._AvgPoolNd)):
        return f"{name}({_sizes(module.kernel_size)})"
    return name


def _module_label(g: torch.fx.Graph, node: torch.fx.Node) -> str:
    """A call_module node as 'layers.0 · Linear(4→8)': the submodule's qualified name and what it is.

    The node's own name goes on a line above when it is not just the qualified name in Python spelling (the
    second call of a module, say).
    """
    target = str(node.target)
    owner = g.owning_module
    try:
        label = f"{target} · {module_summary(owner.get_submodule(target))}" if owner is not None else target
    except AttributeError:
        label = target
    pythonic = target.replace(".", "_")
    return label if node.name in (pythonic, f"_{pythonic}") else f"{node.name}\n{label}"


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
        if n.op == "call_module":
            label = _module_label(g, n)
        else:
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
    lines = ["digraph G {", f'  rankdir=TB; node [fontname="{FONT}", fontsize=10, style=filled];',
             f'  edge [fontname="{FONT}", fontsize=8, color="#6b7280"];']
    if title:
        lines.append(f'  label="{_esc(title)}"; labelloc=t; fontname="{FONT}";')
    lines += fx_lines(g, max_nodes=max_nodes)
    lines.append("}")
    return Drawing("\n".join(lines), title)


def _leaf_names(names: Mapping[str, torch.Tensor] | torch.nn.Module | None, frame: Any) -> dict[int, str]:
    """id(tensor) -> name, from ``names`` or else from the variables of the caller's frame (locals first)."""
    if isinstance(names, torch.nn.Module):
        names = dict(names.named_parameters())
    if names is None:
        names = {}
        for scope in (frame.f_globals, frame.f_locals) if frame is not None else ():
            names.update({k: v for k, v in scope.items() if isinstance(v, torch.Tensor) and not k.startswith("_")})
    found: dict[int, str] = {}
    for name in sorted(names, key=str):
        if isinstance(names[name], torch.Tensor):
            found.setdefault(id(names[name]), str(name))
    return found


def draw_autograd(t: torch.Tensor, title: str = "autograd graph",
                  names: Mapping[str, torch.Tensor] | torch.nn.Module | None = None) -> Drawing:
    """Draw the ``grad_fn`` graph behind a tensor (autograd's backward graph).

    Each leaf's ``AccumulateGrad`` node says which tensor it fills: its name and shape, e.g. ``w: f32[3]``.
    Names come from ``names`` (a dict of tensors by name, or a module, whose parameters are named), or,
    without it, from the variables of the code that calls ``draw_autograd``; a leaf with no name is
    drawn as ``leaf: f32[3]``.
    """
    import sys

    known = _leaf_names(names, sys._getframe(1) if names is None else None)
    lines = ["digraph G {", f'  rankdir=BT; node [fontname="{FONT}", fontsize=10, style=filled];']
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
            leaf = fn.variable
            label += f"\n{known.get(id(leaf), 'leaf')}: {describe_value(leaf)}"
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
