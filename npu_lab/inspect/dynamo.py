"""Look inside TorchDynamo: captured graphs, graph breaks, guards, bytecode, recompiles.

:func:`explain` compiles a function with a recording backend and collects, from
Dynamo's own state:

* the FX graphs it captured (one per graph-break-separated region);
* the graph breaks, with Dynamo's reason and the user source line;
* the guards of each compiled entry, grouped by what they guard (read from the
  cache entry's guard manager, the object Dynamo evaluates on every call);
* the function's original bytecode and the bytecode Dynamo generated (with
  decompiled source when the optional ``depyf`` package is installed);
* how many times it compiled.

:meth:`DynamoReport.draw` draws a captured graph with what Dynamo baked into it: the Python numbers
that became constants, the input sizes, the code of inlined functions, each next to the guard that
protects it. :func:`check_guards` evaluates those guards against new inputs and says which
one fails and why; :func:`recompile_demo` shows a guard failure causing a
recompile.
"""

from __future__ import annotations

import ast
import dis
import inspect
import io
import re
from dataclasses import dataclass, field

import torch
import torch.fx

# checked on torch 2.13: where Dynamo keeps a function's compiled entries
from torch._dynamo.eval_frame import _debug_get_cache_entry_list  # noqa: E402

from .draw import Drawing, _esc, fx_lines

_GUARD = re.compile(r"^[|\s]*\+- (\w+): (.*?)(?:\s+#.*)?$")
_MANAGER = re.compile(r"^[|\s]*\+- GuardManager: source=(.*?), accessed_by")


_HOST_THREADS = re.compile(r'"num_threads":\s*\d+')


@dataclass
class Guard:
    kind: str  # TENSOR_MATCH, EQUALS_MATCH, TYPE_MATCH, GLOBAL_STATE, ...
    code: str
    source: str  # what it guards: L['x'], G['name'], "symbolic shapes" (size relations) or "global state"


@dataclass
class GraphBreak:
    reason: str
    filename: str
    lineno: int


def _bytecode(code) -> str:
    out = io.StringIO()
    dis.dis(code, file=out)
    return out.getvalue()


def parse_guards(text: str) -> list[Guard]:
    """Guards from a guard manager's printout, each tagged with what it guards."""
    guards: list[Guard] = []
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        depth = line.find("+-")
        m = _MANAGER.match(line)
        if m:
            while stack and stack[-1][0] >= depth:
                stack.pop()
            stack.append((depth, m.group(1)))
            continue
        g = _GUARD.match(line)
        if g and g.group(1) not in ("RootGuardManager",):
            while stack and stack[-1][0] >= depth:
                stack.pop()
            # The global-state guard records torch's CPU thread count: a fact of this machine, not of the program
            code = _HOST_THREADS.sub('"num_threads":"<torch.get_num_threads() when compiled>"', g.group(2).strip())
            if stack:
                source = stack[-1][1]
            else:  # the root's own guards; those naming a local or global are the shape env's size relations
                source = "symbolic shapes" if re.search(r"\b[LG]\[", code) else "global state"
            guards.append(Guard(g.group(1), code, source))
    return guards


@dataclass
class DynamoReport:
    graphs: list[torch.fx.GraphModule] = field(default_factory=list)
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    guards: list[list[Guard]] = field(default_factory=list)  # one list per compiled entry
    original_bytecode: str = ""
    transformed_bytecode: list[str] = field(default_factory=list)
    transformed_code: list = field(default_factory=list)  # the code objects Dynamo wrote (types.CodeType)
    decompiled: list[str] = field(default_factory=list)
    compile_count: int = 0

    def guard_groups(self, entry: int = 0) -> dict[str, list[Guard]]:
        groups: dict[str, list[Guard]] = {}
        for g in self.guards[entry] if self.guards else []:
            groups.setdefault(g.source, []).append(g)
        return groups

    def draw(self, index: int = 0, guards: bool = True) -> Drawing:
        """Draw graph ``index``; with ``guards``, also what Dynamo baked into it and the guards that protect it.

        The guards are those of compiled entry ``index`` (for a function without graph breaks, entry 0 is
        the one compiled with graph 0). See :func:`draw_baked`.
        """
        entry = self.guards[index] if guards and index < len(self.guards) else []
        return draw_baked(self.graphs[index], entry if guards else None, f"Dynamo graph {index}")

    def summary(self) -> str:
        lines = [f"{len(self.graphs)} graph(s), {len(self.graph_breaks)} graph break(s), "
                 f"compiled {self.compile_count} time(s)"]
        for b in self.graph_breaks:
            lines.append(f"  break at {b.filename}:{b.lineno}: {b.reason}")
        for source, gs in self.guard_groups().items():
            lines.append(f"  guards on {source}: " + ", ".join(sorted({g.kind for g in gs})))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        parts = [f"<pre>{html.escape(self.summary())}</pre>"]
        for source, gs in self.guard_groups().items():
            rows = "".join(f"<tr><td>{g.kind}</td><td><code>{html.escape(g.code)}</code></td></tr>" for g in gs)
            parts.append(f"<details><summary>guards on <code>{html.escape(source)}</code> ({len(gs)})</summary>"
                         f"<table>{rows}</table></details>")
        return "".join(parts)


_NUMBER = (bool, int, float)
#: guards that compare a value with a constant: ``L['n'] == 3``, ``G['SCALE'] == 1.5``
_VALUE_GUARD = re.compile(r"^(?P<source>.+?) == (?P<value>.+)$")
_CODE_GUARD = re.compile(r"___check_obj_id\((?P<source>G\['(?P<fn>\w+)'\])\.__code__")
_TENSOR_GUARD = re.compile(r"check_tensor\((?P<source>.+?), \w+, DispatchKeySet\((?P<keys>[^)]*)\), "
                           r"torch\.(?P<dtype>\w+), device=\w+, requires_grad=\w+, size=(?P<size>\[[^\]]*\])")
GUARD_STYLE = 'shape=box, style="filled,dashed", fillcolor="#fee2e2", fontsize=9, margin="0.15,0.05"'
CONSTANT_STYLE = 'shape=note, style=filled, fillcolor="#fef3c7", fontsize=9'


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return None


def _constants(gm: torch.fx.GraphModule) -> list[tuple[torch.fx.Node, object]]:
    """(node, value) for every Python number a node takes as an argument: a value baked into the graph."""
    found = []
    for n in gm.graph.nodes:
        if n.op not in ("call_function", "call_method", "call_module"):
            continue
        for a in [*n.args, *n.kwargs.values()]:
            if isinstance(a, _NUMBER):
                found.append((n, a))
    return found


def draw_baked(gm: torch.fx.GraphModule, guards: list[Guard] | None, title: str = "") -> Drawing:
    """Draw a Dynamo graph with what it baked in, each next to the guard that protects it.

    * a Python number an operation takes (``mul(sin, 3)``) becomes a yellow note ``3``, linked to the
      value guards that pin it (``L['n'] == 3``); a number no guard mentions came from the source code
      itself (a literal), which the code object's own cache already pins;
    * a graph input gets its ``TENSOR_MATCH`` guard: dtype, device and the sizes the graph assumes;
    * an operation that came from an inlined function gets the ``ID_MATCH`` guard on that function's code.

    Guards are dashed red boxes. Constants are matched to guards by value: a number that two guards
    share is linked to both. ``guards=None`` draws the graph alone.
    """
    g = gm.graph
    lines = ["digraph G {", '  rankdir=TB; node [fontname="Helvetica", fontsize=10, style=filled];',
             '  edge [fontname="Helvetica", fontsize=8, color="#6b7280"];']
    if title:
        lines.append(f'  label="{_esc(title)}"; labelloc=t; fontname="Helvetica";')
    lines += fx_lines(g)
    if guards is not None:
        lines += _baked_lines(gm, guards)
    lines.append("}")
    return Drawing("\n".join(lines), title)


def _baked_lines(gm: torch.fx.GraphModule, guards: list[Guard]) -> list[str]:
    lines: list[str] = []
    values = []
    for g in guards:
        m = _VALUE_GUARD.match(g.code)
        if g.kind in ("EQUALS_MATCH", "CONSTANT_MATCH") and m:
            values.append((g, _literal(m.group("value"))))
    guard_ids: dict[str, str] = {}

    def guard_node(text: str) -> str:
        if text not in guard_ids:
            guard_ids[text] = f"guard{len(guard_ids)}"
            lines.append(f'  {guard_ids[text]} [label="{_esc("guard: " + text)}", {GUARD_STYLE}];')
        return guard_ids[text]

    for i, (node, value) in enumerate(_constants(gm)):
        cid = f"const{i}"
        pinned = [g for g, v in values if type(v) in _NUMBER and v == value and type(v) is type(value)]
        label = f"{value!r}\nconstant" + ("" if pinned else "\n(a literal in the code)")
        lines.append(f'  {cid} [label="{_esc(label)}", {CONSTANT_STYLE}];')
        lines.append(f'  {cid} -> "{_esc(node.name)}" [style=dashed];')
        for g in pinned:
            lines.append(f'  {guard_node(g.code)} -> {cid} [style=dashed, color="#b91c1c", arrowhead=none];')
    placeholders = {n.target: n for n in gm.graph.nodes if n.op == "placeholder"}
    for g in guards:
        m = _TENSOR_GUARD.search(g.code) if g.kind == "TENSOR_MATCH" else None
        if m is None:
            continue
        flat = re.sub(r"\W+", "_", m.group("source"))  # L['x'] -> L_x_, Dynamo's placeholder name
        node = placeholders.get(flat) or placeholders.get(flat.rstrip("_") + "_")
        if node is None:
            continue
        backend = m.group("keys").split(",")[0].strip()
        device = torch._C._get_privateuse1_backend_name() if backend == "PrivateUse1" else backend.lower()
        text = f"{m.group('source')}: {m.group('dtype')} on {device}, size={m.group('size')}"
        lines.append(f'  {guard_node(text)} -> "{_esc(node.name)}" [style=dashed, color="#b91c1c", arrowhead=none];')
    for g in guards:
        m = _CODE_GUARD.search(g.code) if g.kind == "ID_MATCH" else None
        if m is None:
            continue
        inlined = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")
                   and f", in {m.group('fn')}\n" in (n.meta.get("stack_trace") or "")]
        for n in inlined:
            text = f"{m.group('source')}.__code__ (its code is inlined here)"
            lines.append(f'  {guard_node(text)} -> "{_esc(n.name)}" [style=dashed, color="#b91c1c", '
                         "arrowhead=none];")
    return lines


def _decompile(code) -> str:
    try:
        import depyf  # optional
    except ImportError:
        return "(install the optional 'depyf' package to see decompiled source)"
    try:
        return depyf.decompile(code)
    except Exception as e:  # decompilers lag behind new bytecode
        return f"(depyf could not decompile this code: {type(e).__name__})"


def explain(fn, *args, **kwargs) -> DynamoReport:
    """Compile ``fn`` with Dynamo (fresh state) on ``args`` and report what it did."""
    torch._dynamo.reset()
    report = DynamoReport(original_bytecode=_bytecode(fn.__code__))

    def recording_backend(gm: torch.fx.GraphModule, example_inputs):
        report.graphs.append(gm)
        report.compile_count += 1
        return gm.forward

    def hook(code, new_code):
        if code is fn.__code__ or code.co_name == fn.__code__.co_name:
            report.transformed_bytecode.append(_bytecode(new_code))
            report.transformed_code.append(new_code)
            report.decompiled.append(_decompile(new_code))
        return None

    handle = torch._dynamo.convert_frame.register_bytecode_hook(hook)
    try:
        torch.compile(fn, backend=recording_backend)(*args, **kwargs)
    finally:
        handle.remove()
    for entry in _debug_get_cache_entry_list(fn.__code__):
        report.guards.append(parse_guards(str(entry.guard_manager)))
    explained = torch._dynamo.explain(fn)(*args, **kwargs)
    for r in explained.break_reasons:
        frame = r.user_stack[-1] if r.user_stack else None
        report.graph_breaks.append(GraphBreak(str(r.reason).strip(), frame.filename if frame else "?",
                                              frame.lineno if frame else 0))
    torch._dynamo.reset()
    return report


def graph_call_offsets(code) -> tuple[int, int]:
    """Bytecode offsets in Dynamo's new code: where the compiled graph is loaded, and the ``CALL`` that calls it.

    Follows the value stack with :func:`dis.stack_effect`: the call of the graph is the ``CALL`` that
    consumes the function ``LOAD_GLOBAL __compiled_fn_...`` pushed (the calls in between, such as the
    profiler markers', leave it on the stack).
    """
    depth, below, load = 0, None, None
    for ins in dis.get_instructions(code):
        if load is None and ins.opname == "LOAD_GLOBAL" and str(ins.argval).startswith("__compiled_fn"):
            below, load = depth, ins.offset
        after = depth + dis.stack_effect(ins.opcode, ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None,
                                         jump=False)
        if load is not None and ins.offset > load and ins.opname == "CALL" and after == below + 1:
            return load, ins.offset
        depth = after
    raise ValueError("no call of a compiled graph in this code")


@dataclass
class GuardCheck:
    entry: int
    passed: bool
    failed_guard: str = ""


def check_guards(fn, *args, **kwargs) -> list[GuardCheck]:
    """Evaluate every compiled entry's guards of ``fn`` against new arguments."""
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    f_locals = dict(bound.arguments)
    results = []
    for i, entry in enumerate(_debug_get_cache_entry_list(fn.__code__)):
        info = entry.guard_manager.check_verbose(f_locals)
        # a part ends in "  # <source line>  # <file>:<line>" comments: keep the guard's own text
        failed = "; ".join(p.split("  #")[0].rstrip() for p in info.verbose_code_parts) if not info.result else ""
        results.append(GuardCheck(i, bool(info.result), failed))
    return results


@dataclass
class RecompileDemo:
    first_compiles: int
    checks: list[GuardCheck]
    second_compiles: int

    @property
    def recompiled(self) -> bool:
        return self.second_compiles > self.first_compiles

    def summary(self) -> str:
        failing = [c.failed_guard for c in self.checks if not c.passed]
        why = f"guard failed: {failing[0]}" if failing else "all guards passed"
        return (f"{why}; compiled {self.first_compiles} -> {self.second_compiles} time(s)"
                + (" (recompiled)" if self.recompiled else " (reused)"))


def recompile_demo(fn, first: tuple, second: tuple, backend: str = "eager", **compile_kwargs) -> RecompileDemo:
    """Run compiled ``fn`` on ``first`` then ``second``; say which guard failed and if it recompiled."""
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
    compiled = torch.compile(fn, backend=counter, **compile_kwargs)
    compiled(*first)
    n1 = counter.frame_count
    checks = check_guards(fn, *second)
    compiled(*second)
    demo = RecompileDemo(n1, checks, counter.frame_count)
    return demo
