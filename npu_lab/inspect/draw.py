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
import shutil
import subprocess
import sys
from dataclasses import dataclass
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

    def svg(self) -> str | None:
        r = renderer()
        if r is None:
            return None
        out = subprocess.run([r[1], "-Tsvg"], input=self.dot.encode(), capture_output=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"{r[0]} failed: {out.stderr.decode()[:500]}")
        text = out.stdout.decode()
        return text[text.index("<svg"):] if "<svg" in text else text

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


def draw_fx(graph: torch.fx.Graph | torch.fx.GraphModule, title: str = "", max_nodes: int = 150) -> Drawing:
    """Draw an FX graph: nodes by kind, with shapes/dtypes from its metadata, fused nodes marked."""
    g = graph.graph if isinstance(graph, torch.fx.GraphModule) else graph
    lines = ["digraph G {", '  rankdir=TB; node [fontname="Helvetica", fontsize=10, style=filled];',
             '  edge [fontname="Helvetica", fontsize=8, color="#6b7280"];']
    if title:
        lines.append(f'  label="{_esc(title)}"; labelloc=t; fontname="Helvetica";')
    nodes = list(g.nodes)[:max_nodes]
    shown = set(nodes)
    for n in nodes:
        fused = "fused" in n.meta or "npu." in str(n.target) or getattr(n.target, "__module__", "") == \
            "npu_lab.compiler.passes.pointwise_fusion"
        shape, color = FUSED_STYLE if fused else KIND_STYLE.get(n.op, ("box", "white"))
        val = n.meta.get("val", n.meta.get("example_value", n.meta.get("tensor_meta")))
        info = describe_value(val)
        target = _target_name(n)
        plain = n.op in ("placeholder", "output", "get_attr") or n.name.startswith(target.split(".")[0])
        label = n.name if plain else f"{n.name}\n{target}"
        if info:
            label += f"\n{info}"
        if fused and "fused" in n.meta:
            ops = n.meta["fused"].fused_ops
            label += "\n[" + " → ".join(ops[:6]) + (" …" if len(ops) > 6 else "") + "]"
        lines.append(f'  "{_esc(n.name)}" [label="{_esc(label)}", shape={shape}, fillcolor="{color}"];')
    for n in nodes:
        for a in n.all_input_nodes:
            if a in shown:
                lines.append(f'  "{_esc(a.name)}" -> "{_esc(n.name)}";')
    if len(g.nodes) > max_nodes:
        lines.append(f'  more [label="… {len(g.nodes) - max_nodes} more nodes", shape=plaintext];')
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
