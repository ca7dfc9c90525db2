"""Interactive explorers for notebooks: the NPU compiler pass by pass, and Dynamo's guards.

Both keep their data in plain objects (tests, scripts and static notebooks
use those) and build an ipywidgets interface on demand: call ``.widget()``, or
just leave the explorer as the last expression of a cell. Without ipywidgets,
or in a front end that cannot show widgets (a notebook rendered on GitHub or
by nbconvert), they show a static HTML table instead.

* :class:`PassExplorer` (:func:`explore_passes`) - pick a graph (forward /
  backward / inference) and a pass of the ``npu`` backend; see the graph after
  that pass, what it removed and added, node counts, the generated code and
  the source of any fused kernel the pass made.
* :class:`GuardExplorer` (:func:`explore_guards`) - change one input's shape
  or dtype and call the compiled function; see which guard failed (in
  Dynamo's own words), whether Dynamo recompiled, and how many graphs it has
  compiled so far.
"""

from __future__ import annotations

import difflib
import html
import inspect
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from .draw import Drawing, draw_fx
from .dynamo import parse_guards

# --------------------------------------------------------------------------------------------------
# shared display helpers
# --------------------------------------------------------------------------------------------------


def _display(explorer: Any) -> None:
    """Display ``explorer`` as its widget, with its static HTML as the fallback representation.

    Front ends that can show widgets (JupyterLab, Notebook 7, VS Code) pick the
    widget; the others (GitHub, nbconvert without widget state) the HTML.
    """
    from IPython.display import HTML, display

    try:
        box = explorer.widget()
    except ImportError:  # no ipywidgets
        display(HTML(explorer._repr_html_()))
        return
    bundle = dict(box._repr_mimebundle_() or {})
    bundle["text/html"] = explorer._repr_html_()
    bundle["text/plain"] = repr(explorer)
    display(bundle, raw=True)


def _pre(text: str, style: str = "") -> str:
    return f"<pre style='margin:0;{style}'>{html.escape(text)}</pre>"


# --------------------------------------------------------------------------------------------------
# PassExplorer
# --------------------------------------------------------------------------------------------------


def _op_name(node: torch.fx.Node) -> str:
    """What a node calls: ``aten.addmm.default``, ``npu.linear_relu.default``, ``fused_3``, ``getitem``."""
    target = node.target
    if isinstance(target, str):
        return target
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    return getattr(target, "__name__", None) or str(target)


def _op_counts(graph: torch.fx.Graph) -> Counter:
    return Counter(_op_name(n) for n in graph.nodes if n.op in ("call_function", "call_method", "call_module"))


def _kernels_of(graph: torch.fx.Graph) -> list[Any]:
    return [n.meta["fused"] for n in graph.nodes if "fused" in n.meta]


@dataclass
class PassStep:
    """One pass of the ``npu`` backend applied to one graph, and what it changed.

    Attributes:
        kind: which graph: ``"forward"``, ``"backward"`` or ``"inference"``.
        name: the pass (``"input"`` is the graph before any pass, ``"cached"`` a reused graph).
        changes: what the pass itself reported.
        added: operators that appeared, ``{op: how many}`` (``op`` as in ``node.target``).
        removed: operators that disappeared, ``{op: how many}``.
        node_count: nodes in the graph after the pass (placeholders and output included).
        node_count_before: nodes before the pass (equal to ``node_count`` for the first step).
        index: position of this step among the snapshots of its graph.
        code: the Python code FX generated for the graph after the pass (``gm.code``).
        code_before: the same for the graph before the pass.
        kernels: the generated source of the fused kernels this pass created.
        kernel_names: their names (the ``fused_*`` nodes' targets).
    """

    kind: str
    name: str
    changes: list[str]
    added: dict[str, int]
    removed: dict[str, int]
    node_count: int
    node_count_before: int = 0
    index: int = 0
    code: str = ""
    code_before: str = ""
    kernels: list[str] = field(default_factory=list)
    kernel_names: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether the pass changed the graph or reported anything."""
        return bool(self.added or self.removed or self.changes or self.code != self.code_before)

    def summary(self) -> str:
        """A few lines: node counts, operators removed and added, and the pass's own report."""
        lines = [f"{self.kind} graph after {self.name!r}: {self.node_count_before} -> {self.node_count} nodes"]
        lines += [f"  removed {n} x {op}" for op, n in sorted(self.removed.items())]
        lines += [f"  added   {n} x {op}" for op, n in sorted(self.added.items())]
        lines += [f"  - {c}" for c in self.changes]
        if self.kernel_names:
            lines.append(f"  generated kernel(s): {', '.join(self.kernel_names)}")
        if not self.changed:
            lines.append("  (no change)")
        return "\n".join(lines)

    def code_diff(self) -> str:
        """A unified diff of the generated code before and after the pass."""
        diff = difflib.unified_diff(self.code_before.splitlines(), self.code.splitlines(),
                                    "before", f"after {self.name}", lineterm="", n=1)
        return "\n".join(diff) or "(code unchanged)"


def _steps_of_graph(graph_record: Any) -> list[PassStep]:
    steps: list[PassStep] = []
    previous_ops: Counter = Counter()
    previous_kernels: set[int] = set()
    previous_code, previous_count = "", 0
    for i, snap in enumerate(graph_record.snapshots):
        ops = _op_counts(snap.graph)
        kernels = [k for k in _kernels_of(snap.graph) if id(k) not in previous_kernels]
        count = len(snap.graph.nodes)
        steps.append(PassStep(
            kind=graph_record.kind, name=snap.name, changes=list(snap.changes),
            added=dict(ops - previous_ops) if i else {}, removed=dict(previous_ops - ops) if i else {},
            node_count=count, node_count_before=previous_count if i else count, index=i,
            code=snap.code, code_before=previous_code if i else snap.code,
            kernels=[getattr(k, "source", "") for k in kernels],
            kernel_names=[getattr(k, "__name__", type(k).__name__) for k in kernels]))
        previous_ops, previous_code, previous_count = ops, snap.code, count
        previous_kernels = {id(k) for k in _kernels_of(snap.graph)}
    return steps


class PassExplorer:
    """The graphs of one ``torch.compile(..., backend="npu")`` call, pass by pass.

    ``PassExplorer()`` explores the newest compilation
    (:func:`npu_lab.compiler.last_compile`), ``PassExplorer(record)`` a given
    :class:`~npu_lab.compiler.record.CompileRecord`; :func:`explore_passes`
    compiles a function or module first.

    Data (no widgets needed):

    * ``steps`` - every :class:`PassStep`, graph by graph, in pipeline order
      (whatever passes the record holds, custom passes included);
    * ``kinds`` - the graphs: some of ``forward``, ``backward``, ``inference``;
    * ``steps_of(kind)``, ``step(kind, index_or_name)``, ``describe(kind, index)``.

    Interface: ``show(kind, index)`` shows one step (in the widget if one was
    built, else as HTML in the notebook); ``widget()`` builds a graph dropdown,
    a pass slider and an area with the drawing, the diff, the code and the
    fused kernels. ``current`` is the ``(kind, index)`` shown last.
    AOTAutograd compiles the backward graph at the first ``.backward()``:
    call ``refresh()`` after it to add that graph.
    """

    def __init__(self, record: Any = None, kind: str | None = None) -> None:
        if record is None:
            from ..compiler.record import last_compile

            record = last_compile()
        self.record = record
        self.steps: list[PassStep] = []
        self.refresh()
        if kind is not None and kind not in self.kinds:
            raise KeyError(f"no {kind!r} graph in this compilation; have {self.kinds}")
        self.kind = kind or (self.kinds[0] if self.kinds else None)
        self.current: tuple[str, int] | None = None
        self.current_html = ""  # what show() rendered last
        self._controls: dict[str, Any] = {}
        self._syncing = False

    def refresh(self) -> None:
        """Re-read the record (e.g. after ``.backward()`` added the backward graph)."""
        self.steps = [s for g in self.record.graphs for s in _steps_of_graph(g)]

    @property
    def kinds(self) -> list[str]:
        """The graphs of this compilation, in the order they were compiled."""
        return list(dict.fromkeys(s.kind for s in self.steps))

    def steps_of(self, kind: str) -> list[PassStep]:
        """The steps of one graph, first to last."""
        return [s for s in self.steps if s.kind == kind]

    def _index(self, kind: str, index: int | str) -> int:
        steps = self.steps_of(kind)
        if not steps:
            raise KeyError(f"no {kind!r} graph in this compilation; have {self.kinds}")
        if isinstance(index, str):
            names = [s.name for s in steps]
            if index not in names:
                raise KeyError(f"no pass {index!r} in the {kind} graph; have {names}")
            return names.index(index)
        return index % len(steps)

    def step(self, kind: str | None = None, index: int | str = -1) -> PassStep:
        """The step of graph ``kind`` at ``index`` (a position or a pass name; -1 is the last)."""
        kind = kind or self.kind
        return self.steps_of(kind)[self._index(kind, index)]

    def describe(self, kind: str | None = None, index: int | str = -1) -> str:
        """Text saying what pass ``index`` of graph ``kind`` changed."""
        return self.step(kind, index).summary()

    def drawing(self, kind: str | None = None, index: int | str = -1) -> Drawing:
        """The :class:`~npu_lab.inspect.draw.Drawing` of graph ``kind`` after pass ``index``."""
        kind = kind or self.kind
        i = self._index(kind, index)
        graph = next(g for g in self.record.graphs if g.kind == kind)
        return draw_fx(graph.snapshots[i].graph, title=f"{kind} graph after {graph.snapshots[i].name}")

    # ---- rendering -------------------------------------------------------------------------------

    @staticmethod
    def _diff_html(step: PassStep) -> str:
        head = (f"<b>{html.escape(step.kind)}</b> graph after <b>{html.escape(step.name)}</b> "
                f"(step {step.index}): {step.node_count_before} &rarr; {step.node_count} nodes")
        items = [f"<li style='color:#b91c1c'>removed {n} &times; <code>{html.escape(op)}</code></li>"
                 for op, n in sorted(step.removed.items())]
        items += [f"<li style='color:#15803d'>added {n} &times; <code>{html.escape(op)}</code></li>"
                  for op, n in sorted(step.added.items())]
        items += [f"<li>{html.escape(c)}</li>" for c in step.changes]
        if not step.changed:
            items.append("<li><i>no change</i></li>")
        return f"<div>{head}<ul style='margin:2px 0'>{''.join(items)}</ul></div>"

    def _drawing_html(self, kind: str, index: int) -> str:
        d = self.drawing(kind, index)
        try:
            svg = d.svg()
        except Exception as e:  # a renderer failure must not break the explorer
            return _pre(f"could not render the drawing ({e}); DOT source:\n{d.dot}")
        return svg if svg is not None else (d._repr_html_() or _pre(d.dot))

    def _sections(self, step: PassStep) -> list[tuple[str, str]]:
        sections = [("generated code after this pass", _pre(step.code)),
                    ("code diff against the previous step", _pre(step.code_diff()))]
        sections += [(f"fused kernel {name} (generated source)", _pre(src or "(no source kept)"))
                     for name, src in zip(step.kernel_names, step.kernels, strict=True)]
        return sections

    def render_html(self, kind: str | None = None, index: int | str = -1) -> str:
        """Static HTML of one step: the diff, the drawing, and the code and kernels in ``<details>``."""
        kind = kind or self.kind
        i = self._index(kind, index)
        step = self.steps_of(kind)[i]
        details = "".join(f"<details><summary>{html.escape(t)}</summary>{body}</details>"
                          for t, body in self._sections(step))
        return self._diff_html(step) + self._drawing_html(kind, i) + details

    def show(self, kind: str | None = None, index: int | str = -1) -> None:
        """Show graph ``kind`` after pass ``index`` (a position or a pass name; -1 is the last).

        Updates the widget if :meth:`widget` was called (moving its controls
        too), otherwise displays the step as HTML in the notebook.
        """
        kind = kind or self.kind
        i = self._index(kind, index)
        step = self.steps_of(kind)[i]
        self.kind = kind
        self.current = (kind, i)
        c = self._controls
        if not c:
            self.current_html = self.render_html(kind, i)
            from IPython.display import HTML, display

            display(HTML(self.current_html))
            return
        self._syncing = True
        try:
            c["kind"].value = kind
            c["slider"].max = len(self.steps_of(kind)) - 1
            c["slider"].value = i
        finally:
            self._syncing = False
        c["label"].value = f"{step.name}  ({i + 1}/{len(self.steps_of(kind))})"
        c["diff"].value = self._diff_html(step)
        c["drawing"].value = self._drawing_html(kind, i)
        sections = self._sections(step)
        import ipywidgets as w

        c["accordion"].children = [w.HTML(body) for _, body in sections]
        c["accordion"].titles = tuple(t for t, _ in sections)
        c["accordion"].selected_index = None
        self.current_html = c["diff"].value + c["drawing"].value

    def widget(self, kind: str | None = None, index: int | str = -1) -> Any:
        """A dropdown for the graph and a slider over its passes, above the step they select.

        Returns an ``ipywidgets.VBox`` (its ``explorer`` attribute is this object).
        """
        import ipywidgets as w

        kinds = self.kinds
        kind = kind or self.kind
        n = len(self.steps_of(kind))
        kind_box = w.Dropdown(options=kinds, value=kind, description="graph")
        slider = w.IntSlider(value=self._index(kind, index), min=0, max=n - 1, description="after pass",
                             continuous_update=False, readout=False)
        label = w.Label()
        self._controls = {"kind": kind_box, "slider": slider, "label": label, "diff": w.HTML(),
                          "drawing": w.HTML(layout=w.Layout(overflow="auto", max_height="600px")),
                          "accordion": w.Accordion(children=[])}

        def on_kind(change: dict) -> None:
            if not self._syncing:
                self.show(change["new"], min(slider.value, len(self.steps_of(change["new"])) - 1))

        def on_slider(change: dict) -> None:
            if not self._syncing:
                self.show(kind_box.value, change["new"])

        kind_box.observe(on_kind, names="value")
        slider.observe(on_slider, names="value")
        c = self._controls
        box = w.VBox([w.HBox([kind_box, slider, label]), c["diff"], c["drawing"], c["accordion"]])
        box.explorer = self
        self.show(kind, index)
        return box

    def _ipython_display_(self) -> None:
        _display(self)

    def _repr_html_(self) -> str:
        rows = []
        for s in self.steps:
            ops = [f"-{n} {k}" for k, n in sorted(s.removed.items())]
            ops += [f"+{n} {k}" for k, n in sorted(s.added.items())]
            rows.append(f"<tr><td>{html.escape(s.kind)}</td><td>{s.index}</td><td>{html.escape(s.name)}</td>"
                        f"<td>{s.node_count_before} &rarr; {s.node_count}</td>"
                        f"<td style='text-align:left'>{html.escape(', '.join(ops))}</td>"
                        f"<td style='text-align:left'>{html.escape('; '.join(s.changes))}</td></tr>")
        return ("<table><tr><th>graph</th><th>step</th><th>pass</th><th>nodes</th><th>ops removed / added</th>"
                f"<th>what the pass says</th></tr>{''.join(rows)}</table>")

    def __repr__(self) -> str:
        return "\n".join(s.summary() for s in self.steps)


def explore_passes(record_or_fn: Any = None, *args: Any, kind: str | None = None, backward: bool | None = None,
                   options: dict | None = None, reset: bool = False) -> PassExplorer:
    """Explore the ``npu`` backend's passes over one compilation.

    * ``explore_passes()`` - the newest compilation (``npu_lab.compiler.last_compile()``);
    * ``explore_passes(record)`` - a given ``CompileRecord``;
    * ``explore_passes(fn_or_module, *example_inputs)`` - compile it with
      ``torch.compile(..., backend="npu")`` and call it once. The backend's
      graph cache is switched off (unless ``options`` says otherwise) so every
      pass runs and is recorded, instead of a single ``"cached"`` step.

    ``kind`` picks the graph shown first. When compiling: ``kind="inference"``
    calls the function under ``torch.no_grad()`` (one inference graph);
    ``kind="backward"`` or ``backward=True`` back-propagates the sum of the
    (first) output so the backward graph is compiled too; otherwise the
    function runs in the current grad mode (a forward graph if anything
    requires grad; ``.backward()`` later adds the backward graph, then call
    the explorer's ``refresh()``).

    ``reset=True`` calls ``torch._dynamo.reset()`` first (forgetting every
    compiled function of the session). Without it, if the call compiled
    nothing (e.g. the function hit Dynamo's recompile limit after many
    re-runs), Dynamo is reset and the function called once more.
    """
    from ..compiler.record import CompileRecord, history

    if record_or_fn is None or isinstance(record_or_fn, CompileRecord):
        return PassExplorer(record_or_fn, kind)
    if not callable(record_or_fn):
        raise TypeError(f"expected a CompileRecord, a function or a module, got {type(record_or_fn).__name__}")
    import torch._dynamo

    def compile_and_run() -> int:
        before = len(history)
        compiled = torch.compile(record_or_fn, backend="npu", options={"cache": False, **(options or {})})
        if kind == "inference":
            with torch.no_grad():
                out = compiled(*args)
        else:
            out = compiled(*args)
        if len(history) > before and (backward or (backward is None and kind == "backward")):
            first = out if isinstance(out, torch.Tensor) else next(
                t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor))
            first.sum().backward()
        return before

    if reset:
        torch._dynamo.reset()
    before = compile_and_run()
    if len(history) == before and not reset:
        torch._dynamo.reset()
        before = compile_and_run()
    if len(history) == before:
        raise RuntimeError("calling the function compiled nothing with backend='npu' (no tensor operations?)")
    # with graph breaks one call compiles several graphs; explore the first
    return PassExplorer(history[before], kind)


# --------------------------------------------------------------------------------------------------
# GuardExplorer
# --------------------------------------------------------------------------------------------------


@dataclass
class GuardTrial:
    """What happened when the compiled function was called on new inputs.

    Attributes:
        failed_guards: for each graph compiled so far, the first of its guards
            that the new inputs fail, in Dynamo's words (``"0/0: tensor 'x'
            size mismatch at index 0. expected 4, actual 6"``, where ``0/0``
            is the frame / graph id). Empty when one graph's guards all pass.
        recompiled: whether the call compiled a new graph.
        compiles_so_far: graphs the backend compiled so far (this call included).
        reason: one sentence saying what happened and why.
        inputs: the inputs, described.
        served_by: the id of the graph whose guards passed (reused), if any.
        dynamo_reasons: the guard failures Dynamo itself recorded during the call
            (``torch._dynamo.utils.guard_failures``; empty if it did not recompile).
        dynamic: inputs' dimensions the newest graph treats as dynamic, e.g. ``"L['x'] dim 0"``.
    """

    failed_guards: list[str]
    recompiled: bool
    compiles_so_far: int
    reason: str
    inputs: str = ""
    served_by: str | None = None
    dynamo_reasons: list[str] = field(default_factory=list)
    dynamic: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.inputs}: {self.reason} ({self.compiles_so_far} graph(s) compiled so far)"


def _describe(args: Sequence[Any], kwargs: dict[str, Any] | None = None) -> str:
    def one(a: Any) -> str:
        if isinstance(a, torch.Tensor):
            return f"Tensor{tuple(a.shape)} {str(a.dtype).replace('torch.', '')} on {a.device.type}"
        return repr(a)

    parts = [one(a) for a in args] + [f"{k}={one(v)}" for k, v in (kwargs or {}).items()]
    return "(" + ", ".join(parts) + ")"


_TENSOR_MATCH = re.compile(r"check_tensor\((.+?), Tensor, .*?size=\[(.*?)\]")


def _dynamic_dims(guard_manager: Any) -> list[str]:
    """``"L['x'] dim 0"`` for every tensor dimension an entry's TENSOR_MATCH guards leave unspecialized."""
    dims = []
    for g in parse_guards(str(guard_manager)):
        m = _TENSOR_MATCH.search(g.code) if g.kind == "TENSOR_MATCH" else None
        if m:
            sizes = [s.strip() for s in m.group(2).split(",") if s.strip()]
            dims += [f"{m.group(1)} dim {i}" for i, s in enumerate(sizes) if s == "None"]
    return dims


def _random_input(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A deterministic tensor (made on the CPU, then moved: not every npu dtype has a random kernel)."""
    g = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        t = torch.randn(tuple(shape), generator=g)
    else:
        t = torch.randint(0, 10, tuple(shape), generator=g)
    return t.to(device=device, dtype=dtype)


class CountingBackend:
    """A ``torch.compile`` backend that counts (and keeps) the graphs it hands to ``backend``.

    Unlike ``torch._dynamo.testing.CompileCounterWithBackend`` it passes
    ``torch.compile``'s ``options=`` / ``mode=`` on, so ``backend="npu"`` takes options.
    """

    def __init__(self, backend: str | Callable = "eager") -> None:
        self.backend = backend
        self.frame_count = 0
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Callable:
        from torch._dynamo.backends.registry import lookup_backend

        self.frame_count += 1
        self.graphs.append(gm)
        compile_fn = lookup_backend(self.backend) if isinstance(self.backend, str) else self.backend
        return compile_fn(gm, example_inputs, **kwargs)


class GuardExplorer:
    """Call a compiled function on inputs of your choice and see which guard fails.

    ``GuardExplorer(fn, *example_args)`` resets Dynamo (``reset=False``
    keeps its state), compiles ``fn`` (a function or module) with
    ``torch.compile(fn, backend=backend, **compile_kwargs)`` (backend
    ``"eager"`` by default, ``"npu"`` works too) behind a counting wrapper,
    and calls it once on ``example_args``.

    :meth:`try_input` then evaluates every compiled graph's guards on new
    arguments with the guard manager Dynamo itself runs on each call (and
    Dynamo's own failure messages), calls the function, and returns a
    :class:`GuardTrial`: which guards failed, whether it recompiled, and how
    many graphs were compiled so far. ``trials`` keeps every trial.

    ``widget()`` (or displaying the explorer) gives a shape field, a dtype
    dropdown and a "call" button for one tensor argument.
    """

    DTYPES = ("float32", "float64", "float16", "int64")

    def __init__(self, fn: Callable[..., Any], *example_args: Any, backend: str | Callable = "eager",
                 reset: bool = True, **compile_kwargs: Any) -> None:
        import torch._dynamo

        if reset:
            torch._dynamo.reset()
        self.fn = fn
        self.example_args = example_args
        self.backend = backend
        self.counter = CountingBackend(backend)
        self.compiled = torch.compile(fn, backend=self.counter, **compile_kwargs)
        self.trials: list[GuardTrial] = []
        self.last_trial: GuardTrial | None = None
        self._controls: dict[str, Any] = {}
        self.codes: list[Any] = []  # code objects Dynamo compiled; codes[0] is the function's frame
        handle = torch._dynamo.convert_frame.register_bytecode_hook(self._record_code)
        try:
            self.compiled(*example_args)
        finally:
            handle.remove()

    def _record_code(self, code: Any, new_code: Any) -> None:
        if code not in self.codes:
            self.codes.append(code)

    @property
    def compiles(self) -> int:
        """How many graphs the backend compiled so far."""
        return self.counter.frame_count

    def entries(self) -> list[Any]:
        """Dynamo's cache entries for the function's frame, in the order it tries them."""
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        return list(_debug_get_cache_entry_list(self.codes[0])) if self.codes else []

    def guards(self, entry: int = 0) -> list[str]:
        """The guards of one compiled graph (0: the one Dynamo tries first), as ``"KIND: code"``."""
        entries = self.entries()
        if not entries:
            return []
        return [f"{g.kind}: {g.code}" for g in parse_guards(str(entries[entry].guard_manager))]

    def _frame_locals(self, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        """The local variables the compiled frame would start with, for evaluating its guards."""
        code = self.codes[0] if self.codes else None
        fn = self.fn
        func = getattr(fn, "__func__", fn)
        if code is not None and code is getattr(func, "__code__", None):
            bound = inspect.signature(fn).bind(*args, **kwargs)
            bound.apply_defaults()
            f_locals = dict(bound.arguments)
            if inspect.ismethod(fn):
                f_locals[code.co_varnames[0]] = fn.__self__
            return f_locals
        if code is not None and code.co_name == "inner" and code.co_freevars == ("fn",):
            # torch.compile(module) runs the module inside torch._dynamo.external_utils.wrap_inline's `inner`
            return {"args": tuple(args), "kwargs": dict(kwargs), "fn": fn}
        return None

    def check(self, *args: Any, **kwargs: Any) -> list[tuple[str, bool, str]]:
        """``(graph id, passed, failure)`` for each compiled graph's guards on these arguments (no call)."""
        f_locals = self._frame_locals(args, kwargs)
        if f_locals is None:
            return []
        results = []
        for e in self.entries():
            info = e.guard_manager.check_verbose(f_locals)
            if not info.result and any("KeyError on L[" in part for part in info.verbose_code_parts):
                return []  # the frame had locals we did not rebuild: leave the verdict to Dynamo
            if info.result:
                results.append((str(e.compile_id), True, ""))
                continue
            try:  # Dynamo's own wording (the text TORCH_LOGS=recompiles prints)
                from torch._dynamo.guards import get_guard_fail_reason

                why = get_guard_fail_reason(e.guard_manager, e.code, f_locals, e.compile_id, e.backend,
                                            skip_logging=True)
            except Exception:
                why = f"{e.compile_id}: " + "; ".join(info.verbose_code_parts)
            results.append((str(e.compile_id), False, why))
        return results

    def try_input(self, *args: Any, **kwargs: Any) -> GuardTrial:
        """Call the compiled function on ``args``; say which guards failed and whether it recompiled."""
        from torch._dynamo.utils import guard_failures

        checks = self.check(*args, **kwargs)
        served = next((cid for cid, ok, _ in checks if ok), None)
        failed = [] if served else [why for _, ok, why in checks if not ok]
        seen = {code: len(reasons) for code, reasons in guard_failures.items()}
        before, cached_before = self.compiles, len(self.entries())
        self.compiled(*args, **kwargs)
        dynamo_reasons = [r for code, reasons in list(guard_failures.items()) for r in reasons[seen.get(code, 0):]]
        recompiled = self.compiles > before
        entries = self.entries()
        dynamic = _dynamic_dims(entries[0].guard_manager) if entries else []
        if served:
            reason = f"the guards of compiled entry {served} passed: Dynamo reused it"
            if recompiled:
                reason += ", and compiled another graph (after a graph break)"
        elif not cached_before:
            reason = ("nothing was cached for this frame (was torch._dynamo.reset() called?): Dynamo compiled it "
                      "afresh" if recompiled else "nothing was cached for this frame and nothing was compiled")
        elif not checks:  # a frame whose locals we cannot rebuild: rely on what Dynamo reported
            failed = list(dynamo_reasons)
            reason = ("Dynamo recompiled: " + "; ".join(dynamo_reasons)) if recompiled else "Dynamo did not recompile"
        else:
            first = failed[0].split(": ", 1)[-1].split("  #")[0].strip()  # drop the source-line comment
            reason = f"guard failed: {first}"
            if recompiled:
                reason += f"; Dynamo recompiled (new entry {entries[0].compile_id if entries else '?'})"
                if dynamic:
                    reason += (f"; the new graph treats {', '.join(dynamic)} as dynamic (automatic dynamic "
                               "shapes), so other sizes there reuse it")
                elif "size mismatch" in first:
                    reason += "; the new graph has static sizes again, so the next new size recompiles too"
            else:
                from torch._dynamo import config

                limit = getattr(config, "recompile_limit", getattr(config, "cache_size_limit", 8))
                if len(entries) >= limit:
                    reason += (f"; torch._dynamo.config.recompile_limit ({limit}) reached: Dynamo ran the "
                               "function uncompiled (eagerly)")
                else:
                    reason += "; Dynamo did not recompile"
        trial = GuardTrial(failed, recompiled, self.compiles, reason, _describe(args, kwargs), served,
                           dynamo_reasons, dynamic)
        self.trials.append(trial)
        self.last_trial = trial
        return trial

    # ---- widget ----------------------------------------------------------------------------------

    def _arg_index(self, arg: int | None) -> int:
        if arg is not None:
            return arg
        for i, a in enumerate(self.example_args):
            if isinstance(a, torch.Tensor):
                return i
        raise ValueError("the explorer's widget needs a tensor among the example arguments")

    def _trial_html(self, trial: GuardTrial | None) -> str:
        if trial is None:
            return f"<p>compiled {self.compiles} graph(s) on {html.escape(_describe(self.example_args))}</p>"
        color = "#b91c1c" if trial.failed_guards else "#15803d"
        items = "".join(f"<li><code>{html.escape(f)}</code></li>" for f in trial.failed_guards)
        fails = f"<p>failed guards:</p><ul>{items}</ul>" if items else ""
        return (f"<p><code>{html.escape(trial.inputs)}</code>: <span style='color:{color}'>"
                f"{html.escape(trial.reason)}</span></p>{fails}"
                f"<p>recompiled: <b>{'yes' if trial.recompiled else 'no'}</b>; graphs compiled so far: "
                f"<b>{trial.compiles_so_far}</b></p>")

    def widget(self, arg: int | None = None) -> Any:
        """A shape field and a dtype dropdown for argument ``arg`` (default: the first tensor), and a call button.

        Returns an ``ipywidgets.VBox``; its ``explorer`` attribute is this
        object and ``controls`` maps ``shape``, ``dtype``, ``button``,
        ``result`` and ``history`` to the widgets.
        """
        import ipywidgets as w

        index = self._arg_index(arg)
        example = self.example_args[index]
        dtype_name = str(example.dtype).replace("torch.", "")
        shape = w.Text(value=", ".join(map(str, example.shape)), description=f"arg {index} shape",
                       style={"description_width": "initial"})
        dtype = w.Dropdown(options=list(dict.fromkeys((*self.DTYPES, dtype_name))), value=dtype_name,
                           description="dtype")
        button = w.Button(description="call", button_style="primary", icon="play")
        result = w.HTML(self._trial_html(self.last_trial))
        history = w.HTML(self._history_html())
        guards = w.Accordion(children=[w.HTML(self._guards_html())], titles=("guards of the newest graph",),
                             selected_index=None)

        def call(_: Any = None) -> None:
            try:
                dims = tuple(int(s) for s in shape.value.strip("()[] ").split(",") if s.strip())
            except ValueError:
                result.value = f"<p style='color:#b91c1c'>not a shape: {html.escape(shape.value)!s}</p>"
                return
            args = list(self.example_args)
            args[index] = _random_input(dims, getattr(torch, dtype.value), example.device)
            try:
                trial = self.try_input(*args)
            except Exception as e:  # e.g. shapes the function cannot take: show, do not raise in a callback
                result.value = f"<p style='color:#b91c1c'>the call raised {html.escape(type(e).__name__)}: " \
                               f"{html.escape(str(e)[:500])}</p>"
                return
            result.value = self._trial_html(trial)
            history.value = self._history_html()
            guards.children = [w.HTML(self._guards_html())]

        button.on_click(call)
        self._controls = {"shape": shape, "dtype": dtype, "button": button, "result": result, "history": history,
                          "guards": guards}
        box = w.VBox([w.HBox([shape, dtype, button]), result, history, guards])
        box.explorer = self
        box.controls = self._controls
        return box

    # ---- static views ----------------------------------------------------------------------------

    def _guards_html(self, limit: int = 40) -> str:
        gs = self.guards()
        items = "".join(f"<li><code>{html.escape(g)}</code></li>" for g in gs[:limit])
        more = f"<li>... {len(gs) - limit} more</li>" if len(gs) > limit else ""
        return f"<ul>{items}{more}</ul>"

    def _history_html(self) -> str:
        if not self.trials:
            return ""
        rows = "".join(
            f"<tr><td>{i}</td><td><code>{html.escape(t.inputs)}</code></td><td>{'yes' if t.recompiled else 'no'}</td>"
            f"<td>{t.compiles_so_far}</td><td style='text-align:left'>{html.escape(t.reason)}</td></tr>"
            for i, t in enumerate(self.trials))
        return ("<table><tr><th>#</th><th>inputs</th><th>recompiled</th><th>graphs</th><th>why</th></tr>"
                f"{rows}</table>")

    def _ipython_display_(self) -> None:
        _display(self)

    def _repr_html_(self) -> str:
        n = len(self.entries())
        return (f"<p>compiled {self.compiles} graph(s); {n} cached entr{'y' if n == 1 else 'ies'} for the frame.</p>"
                + self._history_html()
                + f"<details><summary>guards of the newest graph</summary>{self._guards_html()}</details>")

    def __repr__(self) -> str:
        return "\n".join([f"compiled {self.compiles} graph(s)"] + [str(t) for t in self.trials])


def explore_guards(fn: Callable[..., Any], *example_args: Any, backend: str | Callable = "eager",
                   **compile_kwargs: Any) -> GuardExplorer:
    """A :class:`GuardExplorer` for ``fn`` compiled (``backend="eager"`` or ``"npu"``) and called on ``example_args``.

    Example::

        g = explore_guards(lambda x: x.sin() * 2, torch.randn(4, 8))
        g.try_input(torch.randn(6, 8))   # size guard fails -> recompiles, dim 0 now dynamic
        g                                # in Jupyter: shape / dtype controls and a call button
    """
    return GuardExplorer(fn, *example_args, backend=backend, **compile_kwargs)
