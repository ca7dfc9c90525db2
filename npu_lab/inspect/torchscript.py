"""Look inside TorchScript: its IR as text that reads the same anywhere, its nodes, its drawing.

TorchScript (``torch.jit``) keeps a model as a typed SSA graph (``torch._C.Graph``)
whose nodes are ``aten::`` operators and ``prim::`` instructions; control flow is a
node with nested blocks (``prim::If``: two, ``prim::Loop``: one). Helpers:

* :func:`clean` - IR, TorchScript code or a TorchScript error without source
  locations, name mangling and tracer scopes (so it prints the same on every machine);
* :func:`draw_script` - the graph as SVG, with ``prim::If``/``prim::Loop`` blocks as boxes;
* :func:`record_warnings` - the warnings a trace or script raised, with the source
  line of the model that caused each one.
"""

from __future__ import annotations

import linecache
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .draw import Drawing, _esc

_SOURCE_NOTE = re.compile(r"\s+# (?:/|<|[A-Za-z]:\\)\S*:\d+:\d+\s*$")
_MANGLE = re.compile(r"___torch_mangle_\d+\.")
_SCOPE = re.compile(r", scope: [\w.]+")
_FILE = re.compile(r'File "[^"]+", line (\d+)')


def clean(text: str) -> str:
    """TorchScript IR/code/error text without source notes, name mangling, scopes or file paths."""
    text = _MANGLE.sub("", str(text))
    text = _SCOPE.sub("", text)
    text = _FILE.sub(r'File "<source>", line \1', text)
    return "\n".join(_SOURCE_NOTE.sub("", line).rstrip() for line in text.splitlines())


def _graph(obj: object) -> torch._C.Graph:
    """The graph of a graph, a ScriptFunction or a ScriptModule (its inlined graph)."""
    if isinstance(obj, torch._C.Graph):
        return obj
    graph = getattr(obj, "inlined_graph", None) or getattr(obj, "graph", None)
    if not isinstance(graph, torch._C.Graph):
        raise TypeError(f"expected a TorchScript graph, ScriptModule or ScriptFunction, got {type(obj).__name__}")
    return graph


# --- drawing ---------------------------------------------------------------------------------

_STYLE = {
    "input": ("ellipse", "#dbeafe"),
    "aten": ("box", "#f3f4f6"),
    "prim": ("box", "#ede9fe"),
    "attr": ("note", "#fef3c7"),
    "call": ("box3d", "#dcfce7"),
    "control": ("diamond", "#fed7aa"),
    "merge": ("invtriangle", "#fed7aa"),
    "const": ("plaintext", "white"),
    "output": ("doublecircle", "#fee2e2"),
}


#: Drawings wider than this (in CSS pixels) are scaled down to it: a notebook's output area is about 900 px wide.
_MAX_WIDTH_PX = 860


def _type_label(value: torch._C.Value) -> str:
    t = value.type()
    if isinstance(t, torch._C.TensorType):
        dtype = t.scalarType()
        sizes = t.sizes()
        if dtype and sizes is not None:
            return f"{dtype}({', '.join(map(str, sizes))})"
        return ""
    if t.kind() in ("ClassType", "NoneType", "DeviceObjType"):
        return ""
    return str(t)


def _name(value: torch._C.Value, fallback: str) -> str:
    """A value's name in the source (``h.29`` -> ``h``), or ``fallback`` for a nameless temporary (``%12``)."""
    name = value.debugName().split(".")[0]
    return fallback if not name or name.isdigit() else name


def _is_module(value: torch._C.Value) -> bool:
    return value.type().kind() == "ClassType"


def draw_script(obj: object, title: str = "", constants: bool = False, max_nodes: int = 120) -> Drawing:
    """Draw a TorchScript graph (of a ScriptModule: its inlined graph).

    Ellipses are inputs, grey boxes ``aten::`` operators, purple boxes other ``prim::``
    nodes, notes parameters read with ``prim::GetAttr`` (named by their path), 3-D boxes
    ``prim::CallMethod`` calls; a ``prim::If``/``prim::Loop`` is an orange diamond with
    its blocks drawn as boxes around their nodes, and (for an ``If``) a triangle where
    the branches' results meet. A loop's edges are labelled with what they carry: its trip
    count and the initial value of each loop-carried variable going in, the iteration counter
    and the carried values inside the body, the next values going back (dashed), and each
    variable's final value after the loop. Constants are hidden unless ``constants`` is true.
    """
    graph = _graph(obj)
    lines = ["digraph G {", '  rankdir=TB; node [fontname="Helvetica", fontsize=10, style=filled];',
             '  edge [fontname="Helvetica", fontsize=9, color="#6b7280"];', "  compound=true;"]
    if title:
        lines.append(f'  label="{_esc(title)}"; labelloc=t; fontname="Helvetica";')
    producer: dict[int, str] = {}  # value.unique() -> DOT id of what provides it
    carried: dict[int, str] = {}  # values a prim::Loop provides (its counter, carried values) -> edge label
    paths: dict[int, str] = {}  # module-valued values -> dotted attribute path
    edges: list[str] = []
    count = {"n": 0, "shown": 0}

    def new_id() -> str:
        count["n"] += 1
        return f"n{count['n']}"

    def emit(indent: str, nid: str, label: str, style: str) -> None:
        shape, color = _STYLE[style]
        lines.append(f'{indent}"{nid}" [label="{_esc(label)}", shape={shape}, fillcolor="{color}"];')
        count["shown"] += 1

    def connect(values: object, target: str, extra: str = "", labels: object = None) -> None:
        """Edges from what provides each value to ``target``; a value a loop provides is labelled with its name
        (``labels``: one label per value for these edges instead, "" for none)."""
        for i, v in enumerate(values):
            src = producer.get(v.unique())
            if src is None:
                continue
            label = labels[i] if labels is not None else carried.get(v.unique(), "")
            attrs = [a for a in (extra.strip(" []"), f'label="{_esc(label)}"' if label else "") if a]
            edges.append(f'  "{src}" -> "{target}"' + (f" [{', '.join(attrs)}]" if attrs else "") + ";")

    for i, v in enumerate(graph.inputs()):
        if _is_module(v):
            paths[v.unique()] = ""
            continue
        nid = f"in{i}"
        producer[v.unique()] = nid
        info = _type_label(v)
        emit("  ", nid, v.debugName().split(".")[0] + (f"\n{info}" if info else ""), "input")

    def block(b: object, indent: str) -> None:
        for node in b.nodes():
            if count["shown"] >= max_nodes:
                return
            kind = node.kind()
            outs = list(node.outputs())
            if kind == "prim::Constant":
                if not constants or not outs:
                    continue
                nid = new_id()
                text = clean(str(node)).split("prim::Constant")[-1].strip("()") or "None"
                emit(indent, nid, text, "const")
                producer[outs[0].unique()] = nid
                continue
            if kind == "prim::GetAttr":
                parent = paths.get(node.input().unique())
                path = node.s("name") if not parent else f"{parent}.{node.s('name')}"
                if _is_module(outs[0]):
                    paths[outs[0].unique()] = path
                    continue
                nid = new_id()
                emit(indent, nid, path, "attr")
                producer[outs[0].unique()] = nid
                continue
            nid = new_id()
            if kind in ("prim::If", "prim::Loop"):
                lines.append(f'{indent}subgraph cluster_{nid} {{ label="{kind}"; style=rounded; color="#f97316";')
                emit(indent + "  ", nid, "if" if kind == "prim::If" else "loop", "control")
                if kind == "prim::If":
                    connect(list(node.inputs())[:1], nid)
                else:  # (trip count, condition, initial value of each carried variable)
                    ins = list(node.inputs())
                    connect(ins, nid, labels=["trip count", ""] + [f"{_name(v, 'value')} (initial)"
                                                                    for v in ins[2:]])
                merge = None
                if kind == "prim::If":
                    merge = new_id()
                for k, inner in enumerate(node.blocks()):
                    name = ("then" if k == 0 else "else") if kind == "prim::If" else "body"
                    lines.append(f'{indent}  subgraph cluster_{nid}_{k} {{ label="{name}"; style=dashed; '
                                 'color="#9ca3af";')
                    for j, p in enumerate(inner.inputs()):  # a loop body's counter and carried values
                        producer[p.unique()] = nid
                        carried[p.unique()] = (f"{_name(p, 'i')} (iteration)" if j == 0 else
                                               f"{_name(p, 'value')} (carried)")
                    first = count["n"]
                    block(inner, indent + "    ")
                    lines.append(f"{indent}  }}")
                    if count["n"] > first and kind == "prim::If":
                        edges.append(f'  "{nid}" -> "n{first + 1}" [style=dashed, label="{name}"];')
                    returned = list(inner.outputs())
                    if kind == "prim::Loop":  # (condition, next value of each carried variable)
                        params = list(inner.inputs())[1:]
                        connect(returned[1:], nid, " [style=dashed, constraint=false]",
                                labels=[f"next {_name(p, 'value')}" for p in params])
                    else:
                        connect(returned, merge)
                if merge is not None:
                    emit(indent + "  ", merge, "if result", "merge")
                lines.append(f"{indent}}}")
                for o in outs:
                    producer[o.unique()] = merge or nid
                    if kind == "prim::Loop":
                        carried[o.unique()] = f"{_name(o, 'value')} (after the loop)"
                continue
            if kind == "prim::CallMethod":
                target = list(node.inputs())[0]
                label = f"{paths.get(target.unique(), '?')}.{node.s('name')}".lstrip(".")
                emit(indent, nid, label, "call")
                connect(list(node.inputs())[1:], nid)
            else:
                info = ", ".join(filter(None, (_type_label(o) for o in outs)))
                style = "aten" if kind.startswith("aten::") else "prim"
                emit(indent, nid, kind + (f"\n{info}" if info else ""), style)
                connect(node.inputs(), nid)
            for o in outs:
                producer[o.unique()] = nid

    block(graph, "  ")
    if count["shown"] >= max_nodes:
        lines.append(f'  more [label="… more nodes not drawn (max_nodes={max_nodes})", shape=plaintext];')
    lines.append('  "return" [label="return", shape=doublecircle, fillcolor="#fee2e2", style=filled];')
    connect(graph.outputs(), "return")
    lines.extend(edges)
    lines.append("}")
    return Drawing("\n".join(lines), title, max_width_px=_MAX_WIDTH_PX)


# --- warnings --------------------------------------------------------------------------------

_TORCH_DIR = os.path.dirname(torch.__file__)


@dataclass
class CaughtWarning:
    category: str
    message: str
    source: str  # the line of the user's code that caused it ("" if it came from inside torch)

    def __str__(self) -> str:
        where = f"\n    raised at: {self.source}" if self.source else ""
        return f"{self.category}: {self.message}{where}"


class WarningLog(list):
    """The warnings recorded by :func:`record_warnings` (a list of :class:`CaughtWarning`)."""

    def of(self, *categories: str) -> list[CaughtWarning]:
        """The warnings of these categories (by class name, e.g. ``"TracerWarning"``)."""
        return [w for w in self if w.category in categories]

    def unique(self, *categories: str) -> list[CaughtWarning]:
        """Each distinct warning once, in the order first seen (only ``categories``, if given)."""
        seen: dict[tuple[str, str, str], CaughtWarning] = {}
        for w in self:
            if not categories or w.category in categories:
                seen.setdefault((w.category, w.message, w.source), w)
        return list(seen.values())

    def show(self, *categories: str) -> None:
        """Print each distinct warning once (only ``categories``, if given); "none" if there is none."""
        shown = self.unique(*categories)
        for w in shown:
            print(w)
        if not shown:
            print("no " + (" or ".join(categories) if categories else "warning"))


@contextmanager
def record_warnings() -> Iterator[WarningLog]:
    """Record every warning raised inside (each time it is raised), with its cause in user code.

    >>> with record_warnings() as log:      # doctest: +SKIP
    ...     torch.jit.trace(model, example)
    >>> log.show()                          # doctest: +SKIP
    """
    log = WarningLog()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield log
        finally:
            for w in caught:
                inside = os.path.abspath(w.filename).startswith(_TORCH_DIR)
                source = "" if inside else linecache.getline(w.filename, w.lineno).strip()
                log.append(CaughtWarning(w.category.__name__, str(w.message), source))
