"""Interactive explorers for notebooks: the NPU compiler pass by pass, and Dynamo's guards.

Both keep their data in plain objects (tests and static notebooks use those)
and build an ipywidgets interface on demand (``.widget()``, or just display
the object in Jupyter). Without ipywidgets they render as static HTML.

* :class:`PassExplorer` - pick a graph (forward / backward / inference) and a
  pass; see the graph after it, what the pass changed, node counts, the
  generated code and the source of any fused kernel it made.
* :class:`GuardExplorer` - change an input's shape or dtype and call the
  compiled function; see which guard failed and whether Dynamo recompiled.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from .draw import draw_fx
from .dynamo import check_guards


def _op_names(graph: torch.fx.Graph) -> Counter:
    names: Counter = Counter()
    for n in graph.nodes:
        if n.op in ("call_function", "call_method", "call_module"):
            target = n.target
            name = getattr(target, "__name__", None) if not isinstance(target, str) else target
            names[str(target) if isinstance(target, torch._ops.OpOverload) else (name or str(target))] += 1
    return names


@dataclass
class PassStep:
    """One pass applied to one graph: what it changed."""

    kind: str
    name: str
    changes: list[str]
    added: dict[str, int]
    removed: dict[str, int]
    node_count: int
    code: str
    kernels: list[str] = field(default_factory=list)  # source of fused kernels present after this pass


class PassExplorer:
    """The graphs of one ``torch.compile(backend="npu")`` call, pass by pass.

    ``PassExplorer()`` uses the newest compilation; ``PassExplorer(record)``
    a given :class:`~npu_lab.compiler.record.CompileRecord`;
    :func:`explore_passes` compiles a function first.
    """

    def __init__(self, record: Any = None):
        if record is None:
            from ..compiler.record import last_compile

            record = last_compile()
        self.record = record
        self.steps: list[PassStep] = []
        for graph in record.graphs:
            previous: Counter = Counter()
            for i, snap in enumerate(graph.snapshots):
                ops = _op_names(snap.graph)
                added = dict(ops - previous) if i else {}
                removed = dict(previous - ops) if i else {}
                kernels = [n.meta["fused"].source for n in snap.graph.nodes
                           if "fused" in n.meta and hasattr(n.meta["fused"], "source")]
                self.steps.append(PassStep(graph.kind, snap.name, list(snap.changes), added, removed,
                                           len(snap.graph.nodes), snap.code, kernels))
                previous = ops
        self.current: tuple[str, int] | None = None
        self._output = None

    @property
    def kinds(self) -> list[str]:
        return list(dict.fromkeys(s.kind for s in self.steps))

    def steps_of(self, kind: str) -> list[PassStep]:
        return [s for s in self.steps if s.kind == kind]

    def _snapshot(self, kind: str, index: int):
        graph = next(g for g in self.record.graphs if g.kind == kind)
        return graph.snapshots[index]

    def describe(self, kind: str, index: int) -> str:
        """Text saying what pass ``index`` of graph ``kind`` changed."""
        steps = self.steps_of(kind)
        step = steps[index]
        before = steps[index - 1].node_count if index else step.node_count
        lines = [f"{kind} graph after {step.name!r}: {step.node_count} nodes (before: {before})"]
        lines += [f"  removed {n} x {op}" for op, n in sorted(step.removed.items())]
        lines += [f"  added   {n} x {op}" for op, n in sorted(step.added.items())]
        lines += [f"  - {c}" for c in step.changes]
        if not (step.removed or step.added or step.changes):
            lines.append("  (no change)")
        return "\n".join(lines)

    def show(self, kind: str | None = None, index: int = -1) -> None:
        """Show graph ``kind`` after pass ``index`` (in the widget's output area if it exists)."""
        from IPython.display import HTML, display

        kind = kind or self.kinds[0]
        steps = self.steps_of(kind)
        index = index % len(steps)
        self.current = (kind, index)
        step = steps[index]
        body = [HTML(f"<pre>{html.escape(self.describe(kind, index))}</pre>"),
                draw_fx(self._snapshot(kind, index).graph, title=f"{kind}: after {step.name}")]
        if self._output is not None:
            self._output.clear_output(wait=True)
            with self._output:
                for item in body:
                    display(item)
                display(self._code_accordion(step))
        else:
            for item in body:
                display(item)

    def _code_accordion(self, step: PassStep):
        import ipywidgets as w

        parts = [w.HTML(f"<pre>{html.escape(step.code)}</pre>")]
        titles = ["generated code"]
        for i, src in enumerate(step.kernels):
            parts.append(w.HTML(f"<pre>{html.escape(src)}</pre>"))
            titles.append(f"fused kernel {i}")
        acc = w.Accordion(children=parts, selected_index=None)
        for i, t in enumerate(titles):
            acc.set_title(i, t)
        return acc

    def widget(self):
        """A dropdown for the graph and a slider over its passes, above the output area."""
        import ipywidgets as w

        kinds = self.kinds
        kind_box = w.Dropdown(options=kinds, value=kinds[0], description="graph")
        n = len(self.steps_of(kinds[0]))
        slider = w.IntSlider(value=n - 1, min=0, max=n - 1, description="pass", continuous_update=False)
        label = w.Label()
        self._output = w.Output()

        def refresh(*_: Any) -> None:
            steps = self.steps_of(kind_box.value)
            slider.max = len(steps) - 1
            label.value = steps[slider.value].name
            self.show(kind_box.value, slider.value)

        kind_box.observe(refresh, names="value")
        slider.observe(refresh, names="value")
        refresh()
        box = w.VBox([w.HBox([kind_box, slider, label]), self._output])
        box.explorer = self  # tests and learners can reach the data from the widget
        return box

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        try:
            display(self.widget())
        except ImportError:
            display(HTML(self._repr_html_()))

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(s.kind)}</td><td>{html.escape(s.name)}</td><td>{s.node_count}</td>"
            f"<td style='text-align:left'>{html.escape(', '.join(f'-{n} {k}' for k, n in s.removed.items()))}"
            f" {html.escape(', '.join(f'+{n} {k}' for k, n in s.added.items()))}</td>"
            f"<td style='text-align:left'>{html.escape('; '.join(s.changes))}</td></tr>" for s in self.steps)
        return ("<table><tr><th>graph</th><th>pass</th><th>nodes</th><th>ops removed / added</th>"
                f"<th>what the pass says</th></tr>{rows}</table>")

    def __repr__(self) -> str:
        return "\n".join(self.describe(k, i) for k in self.kinds for i in range(len(self.steps_of(k))))


def explore_passes(fn: Callable[..., Any] | None = None, *args: Any, backward: bool = False,
                   options: dict | None = None) -> PassExplorer:
    """Compile ``fn`` with ``backend="npu"``, run it on ``args`` and explore the passes.

    With ``backward=True`` the (summed) result is back-propagated, so the
    forward and backward graphs are both compiled. Without ``fn``, explore the
    newest compilation.
    """
    if fn is None:
        return PassExplorer()
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="npu", options=options or {})
    out = compiled(*args)
    if backward:
        (out if isinstance(out, torch.Tensor) else out[0]).sum().backward()
    return PassExplorer()


@dataclass
class GuardTrial:
    """What happened when the compiled function was called on new inputs."""

    inputs: str
    failed_guards: list[str]
    recompiled: bool
    compiles_so_far: int

    @property
    def reason(self) -> str:
        if not self.failed_guards:
            return "every guard of a compiled entry passed: the compiled code was reused"
        verb = "recompiled" if self.recompiled else "did not recompile"
        return f"guard failed: {self.failed_guards[0]}; Dynamo {verb}"

    def __str__(self) -> str:
        return f"{self.inputs}: {self.reason} (compiled {self.compiles_so_far} time(s) so far)"


def _describe(args: tuple) -> str:
    parts = []
    for a in args:
        if isinstance(a, torch.Tensor):
            parts.append(f"Tensor{tuple(a.shape)} {str(a.dtype).replace('torch.', '')} on {a.device.type}")
        else:
            parts.append(repr(a))
    return "(" + ", ".join(parts) + ")"


class GuardExplorer:
    """Call a compiled function on inputs of your choice and see which guard fails.

    ``GuardExplorer(fn, *example_args)`` compiles ``fn`` (backend ``"eager"``
    by default) and calls it once. :meth:`try_input` evaluates the guards of
    every compiled entry on new arguments (Dynamo's own guard manager, the
    code it runs on every call), then calls the function and reports whether it
    recompiled.
    """

    def __init__(self, fn: Callable[..., Any], *example_args: Any, backend: str = "eager", **compile_kwargs: Any):
        import torch._dynamo
        import torch._dynamo.testing

        torch._dynamo.reset()
        self.fn = fn
        self.example_args = example_args
        self.counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
        self.compiled = torch.compile(fn, backend=self.counter, **compile_kwargs)
        self.compiled(*example_args)
        self.trials: list[GuardTrial] = []
        self._output = None

    @property
    def compiles(self) -> int:
        return self.counter.frame_count

    def guards(self) -> list[str]:
        """The guards of the first compiled entry, as Dynamo prints them."""
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        from . import dynamo

        entries = _debug_get_cache_entry_list(self.fn.__code__)
        if not entries:
            return []
        return [f"{g.kind}: {g.code}" for g in dynamo.parse_guards(str(entries[-1].guard_manager))]

    def try_input(self, *args: Any) -> GuardTrial:
        """Call the compiled function on ``args``; say which guard failed and whether it recompiled."""
        checks = check_guards(self.fn, *args)
        failed = [] if any(c.passed for c in checks) else [c.failed_guard for c in checks if c.failed_guard]
        before = self.compiles
        self.compiled(*args)
        trial = GuardTrial(_describe(args), failed, self.compiles > before, self.compiles)
        self.trials.append(trial)
        return trial

    def widget(self, arg: int = 0):
        """A shape field and a dtype dropdown for argument ``arg``, a call button and the trials so far."""
        import ipywidgets as w

        example = self.example_args[arg]
        shape = w.Text(value=", ".join(map(str, example.shape)), description="shape")
        dtype = w.Dropdown(options=["float32", "float64", "float16", "int64"],
                           value=str(example.dtype).replace("torch.", ""), description="dtype")
        button = w.Button(description="call", button_style="primary")
        self._output = w.Output()

        def call(_: Any = None) -> None:
            dims = tuple(int(s) for s in shape.value.replace("(", "").replace(")", "").split(",") if s.strip())
            t = torch.zeros(dims, dtype=getattr(torch, dtype.value), device=example.device)
            if t.is_floating_point():
                t = torch.randn(dims, generator=torch.Generator().manual_seed(0)).to(t)
            args = list(self.example_args)
            args[arg] = t
            trial = self.try_input(*args)
            self._output.clear_output(wait=True)
            with self._output:
                from IPython.display import HTML, display

                display(HTML(self._repr_html_()))
            button.last_trial = trial

        button.on_click(call)
        box = w.VBox([w.HBox([shape, dtype, button]), self._output])
        box.explorer = self
        box.controls = (shape, dtype, button)
        with self._output:
            from IPython.display import HTML, display

            display(HTML(self._repr_html_()))
        return box

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        try:
            display(self.widget())
        except ImportError:
            display(HTML(self._repr_html_()))

    def _repr_html_(self) -> str:
        guards = "".join(f"<li><code>{html.escape(g)}</code></li>" for g in self.guards()[:30])
        rows = "".join(
            f"<tr><td><code>{html.escape(t.inputs)}</code></td><td>{'yes' if t.recompiled else 'no'}</td>"
            f"<td style='text-align:left'>{html.escape(t.reason)}</td></tr>" for t in self.trials)
        return (f"<p>compiled {self.compiles} time(s); guards of the newest entry:</p><ul>{guards}</ul>"
                "<table><tr><th>inputs</th><th>recompiled</th><th>why</th></tr>" + rows + "</table>")

    def __repr__(self) -> str:
        return "\n".join([f"compiled {self.compiles} time(s)"] + [str(t) for t in self.trials])


def explore_guards(fn: Callable[..., Any], *example_args: Any, backend: str = "eager",
                   **compile_kwargs: Any) -> GuardExplorer:
    """A :class:`GuardExplorer` for ``fn`` compiled and called once on ``example_args``."""
    return GuardExplorer(fn, *example_args, backend=backend, **compile_kwargs)
