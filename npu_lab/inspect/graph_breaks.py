"""Draw where Dynamo split a function into graphs, and why.

:func:`split` runs ``torch._dynamo.explain`` on a function (fresh Dynamo state) and keeps, in the
order Dynamo met them, the graphs it captured and the graph breaks between them, each break with
Dynamo's reason, the frame it happened in (the function itself or a ``torch_dynamo_resume_in_...``
resume function) and the source line. The resulting :class:`FrameSplit` draws:

* :meth:`FrameSplit.draw`: the chain graph -> break -> graph ..., one box per graph listing its
  operations (opaque calls, such as an ``allow_in_graph`` function, in orange), one red octagon
  per break with its line and reason;
* :meth:`FrameSplit.source_html`: the function's source, each line coloured by the graph its
  operations went into (from the nodes' ``stack_trace``), with the breaks marked at their lines.
"""

from __future__ import annotations

import html
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from .draw import Drawing, _esc, _target_name

__all__ = ["Break", "FrameSplit", "split"]

#: fill colours of graphs 0, 1, 2, ... (cycled)
GRAPH_COLOURS = ["#dbeafe", "#dcfce7", "#fef3c7", "#ede9fe", "#fce7f3", "#cffafe"]
BREAK_COLOUR = "#fecaca"
OPAQUE_COLOUR = "#fed7aa"
_STACK_LINE = re.compile(r'File "(.*?)", line (\d+), in (\S+)')


@dataclass
class Break:
    """One graph break: why, and where (file, line, frame name, the line's source)."""

    reason: str
    filename: str
    lineno: int
    frame: str
    source: str


@dataclass
class FrameSplit:
    """The graphs Dynamo captured from one function and the graph breaks between them."""

    name: str
    graphs: list[torch.fx.GraphModule] = field(default_factory=list)
    breaks: list[Break] = field(default_factory=list)
    filename: str = ""

    def ops(self, index: int) -> list[str]:
        """The operations of graph ``index``, in order (short names; opaque calls marked)."""
        out = []
        for n in self.graphs[index].graph.nodes:
            if n.op in ("call_function", "call_method", "call_module"):
                name = _target_name(n)
                out.append(f"{name} (opaque)" if _opaque(n) else name)
        return out

    def op_lines(self, index: int) -> dict[int, list[str]]:
        """Source line of this function -> the operations of graph ``index`` that came from it."""
        lines: dict[int, list[str]] = {}
        for n in self.graphs[index].graph.nodes:
            if n.op not in ("call_function", "call_method", "call_module"):
                continue
            line = self._line_of(n.meta.get("stack_trace") or "")
            if line is not None:
                lines.setdefault(line, []).append(_target_name(n))
        return lines

    def _line_of(self, stack_trace: str) -> int | None:
        """The last line of this function's file in a node's stack trace (None if not from it)."""
        found = None
        for file, line, _ in _STACK_LINE.findall(stack_trace):
            if file == self.filename:
                found = int(line)
        return found

    def summary(self) -> str:
        """One line for the split, then one per graph and per break, in order."""
        lines = [f"{self.name}: {len(self.graphs)} graph(s), {len(self.breaks)} graph break(s)"]
        for kind, i, item in self._sequence():
            if kind == "graph":
                lines.append(f"  graph {i}: {', '.join(self.ops(i)) or '(no operations)'}")
            else:
                lines.append(f"  break {i + 1} in {item.frame}, line {item.lineno} ({item.source}): {item.reason}")
        return "\n".join(lines)

    def _sequence(self) -> list[tuple[str, int, Any]]:
        """Graphs and breaks interleaved in the order Dynamo met them."""
        seq: list[tuple[str, int, Any]] = []
        for i in range(max(len(self.graphs), len(self.breaks))):
            if i < len(self.graphs):
                seq.append(("graph", i, self.graphs[i]))
            if i < len(self.breaks):
                seq.append(("break", i, self.breaks[i]))
        return seq

    def draw(self, title: str | None = None, max_ops: int = 12) -> Drawing:
        """The chain of graphs and breaks, left to right (at most ``max_ops`` operations listed per graph)."""
        title = title if title is not None else f"{self.name}: {len(self.graphs)} graph(s), {len(self.breaks)} break(s)"
        lines = ["digraph split {", '  rankdir=LR; node [fontname="Helvetica", fontsize=10, style=filled];',
                 '  edge [color="#6b7280"];', f'  label="{_esc(title)}"; labelloc=t; fontname="Helvetica";']
        previous = None
        for kind, i, item in self._sequence():
            if kind == "graph":
                ops = self.ops(i)
                shown = ops[:max_ops] + ([f"... {len(ops) - max_ops} more"] if len(ops) > max_ops else [])
                colour = OPAQUE_COLOUR if any("(opaque)" in o for o in ops) else GRAPH_COLOURS[i % len(GRAPH_COLOURS)]
                label = f"graph {i}\n" + "\n".join(shown)
                node = f"g{i}"
                lines.append(f'  {node} [label="{_esc(label)}", shape=box, fillcolor="{colour}"];')
            else:
                reason = _wrap(item.reason, 28)
                label = f"break {i + 1}: line {item.lineno}\n{_wrap(item.source, 28)}\n— {reason}"
                node = f"b{i}"
                lines.append(f'  {node} [label="{_esc(label)}", shape=octagon, fillcolor="{BREAK_COLOUR}", '
                             f"fontsize=9];")
            if previous is not None:
                lines.append(f"  {previous} -> {node};")
            previous = node
        lines.append("}")
        return Drawing("\n".join(lines), title, max_width_px=1100)

    def source_html(self, fn: Callable[..., Any]) -> str:
        """The source of ``fn`` as an HTML table: each line coloured by its graph, breaks in red.

        Lines are numbered as in ``fn``'s file (in a notebook: in its cell), like the breaks.
        """
        source, first = inspect.getsourcelines(fn)
        graph_of: dict[int, list[tuple[int, list[str]]]] = {}
        for i in range(len(self.graphs)):
            for line, ops in self.op_lines(i).items():
                graph_of.setdefault(line, []).append((i, ops))
        breaks_at: dict[int, list[tuple[int, Break]]] = {}
        for i, b in enumerate(self.breaks):
            if b.filename == self.filename:
                breaks_at.setdefault(b.lineno, []).append((i, b))
        rows = []
        for offset, text in enumerate(source):
            lineno = first + offset
            notes, colour = [], ""
            for i, ops in graph_of.get(lineno, []):
                colour = GRAPH_COLOURS[i % len(GRAPH_COLOURS)]
                notes.append(f"<span style='background:{colour};padding:0 4px'>graph {i}</span> "
                             + html.escape(", ".join(ops)))
            for i, b in breaks_at.get(lineno, []):
                colour = BREAK_COLOUR
                notes.append(f"<b style='color:#b91c1c'>&#9986; break {i + 1}</b> "
                             f"({html.escape(b.frame)}): {html.escape(b.reason)}")
            background = f";background:{colour}" if colour else ""
            rows.append(f"<tr><td style='text-align:right;color:#6b7280'>{lineno}</td>"
                        f"<td style='text-align:left{background}'><pre style='margin:0'>"
                        f"{html.escape(text.rstrip())}</pre></td>"
                        f"<td style='text-align:left'>{'<br>'.join(notes)}</td></tr>")
        return ("<table style='font-size:12px'><tr><th>line</th><th style='text-align:left'>source</th>"
                "<th style='text-align:left'>what Dynamo did with it</th></tr>" + "".join(rows) + "</table>")


def _opaque(node: torch.fx.Node) -> bool:
    """A call Dynamo did not trace into: a user function kept whole, or a nonstrict-trace call."""
    if node.op != "call_function":
        return False
    name = getattr(node.target, "__name__", "")
    if name.startswith("flat_apply"):
        return True
    module = getattr(node.target, "__module__", "") or ""
    return not (module.startswith(("torch", "_operator", "operator", "builtins", "math"))
                or isinstance(node.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))
                or isinstance(node.target, type))


def _wrap(text: str, width: int) -> str:
    words, lines, current = text.split(), [], ""
    for w in words:
        if current and len(current) + 1 + len(w) > width:
            lines.append(current)
            current = w
        else:
            current = f"{current} {w}".strip()
    if current:
        lines.append(current)
    return "\n".join(lines[:3]) + (" ..." if len(lines) > 3 else "")


def split(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> FrameSplit:
    """Run ``fn(*args, **kwargs)`` under ``torch._dynamo.explain`` and return its graphs and breaks.

    Dynamo's state is reset before and after, so earlier compiles do not interfere. The function
    really runs (once), so its side effects, such as a ``print``, happen.

    Each break names the frame Dynamo was compiling when it met the break: ``fn`` itself or a resume
    function (``torch_dynamo_resume_in_<fn>_at_<line>``), read from the compile id Dynamo stamps on the
    graph the break ended (``explain``'s own reasons fold some resume frames into the function's name).
    """
    if not callable(fn):
        raise TypeError(f"split() needs a function, got {type(fn).__name__}")
    from torch._guards import CompileContext

    code = getattr(fn, "__code__", None)
    frames: dict[int, str] = {}  # Dynamo's frame id -> the name of the code it compiled

    def hook(compiled_code: Any, new_code: Any) -> None:
        compile_id = CompileContext.current_compile_id()
        if compile_id is not None:
            frames.setdefault(compile_id.frame_id, compiled_code.co_name)

    torch._dynamo.reset()
    handle = torch._dynamo.convert_frame.register_bytecode_hook(hook)
    try:
        explained = torch._dynamo.explain(fn)(*args, **kwargs)
    finally:
        handle.remove()
        torch._dynamo.reset()
    result = FrameSplit(getattr(fn, "__name__", "fn"), list(explained.graphs),
                        filename=code.co_filename if code is not None else "")
    for gm in explained.graphs:
        r = getattr(gm, "compile_subgraph_reason", None)
        if r is None or not r.graph_break:
            continue
        frame = r.user_stack[-1] if r.user_stack else None
        compile_id = gm.meta.get("dynamo_compile_id")
        compiled = frames.get(compile_id.frame_id) if compile_id is not None else None
        reason = str(r.reason).strip().splitlines()[0] if str(r.reason).strip() else "?"
        result.breaks.append(Break(reason, frame.filename if frame else "?", frame.lineno if frame else 0,
                                   compiled or (frame.name if frame else "?"),
                                   (frame.line or "").strip() if frame else ""))
    return result
