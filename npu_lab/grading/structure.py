"""Checks of structure, not only of values: graphs, dispatch, compilation and graph breaks.

Helpers an exercise's grader uses to assert *how* the learner's code works:

* :func:`count_calls` - how many nodes of a graph call a given operator;
* :func:`kernels_run` - which operators reached a backend, and which kernel ran
  (from the lab's dispatch tracer, so a learner's ``npu`` kernel is seen running);
* :class:`CompileCounter` - a ``torch.compile`` backend that counts how often
  Dynamo handed it a graph (to prove "compiled once, no recompiles");
* :func:`graph_breaks` - the graph breaks Dynamo finds in a function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx


def call_targets(gm: torch.fx.GraphModule | torch.fx.Graph) -> list[Any]:
    """The targets of a graph's ``call_function``/``call_method``/``call_module`` nodes, in order."""
    graph = gm.graph if isinstance(gm, torch.fx.GraphModule) else gm
    return [n.target for n in graph.nodes if n.op in ("call_function", "call_method", "call_module")]


def count_calls(gm: torch.fx.GraphModule | torch.fx.Graph, *targets: Any) -> int:
    """How many nodes call any of ``targets`` (an op overload, its packet, a function or a name)."""
    def matches(t: Any) -> bool:
        for want in targets:
            if t == want or (isinstance(t, torch._ops.OpOverload) and t.overloadpacket == want):
                return True
            if isinstance(want, str) and str(t) in (want, f"aten.{want}", f"aten.{want}.default"):
                return True
        return False

    return sum(1 for t in call_targets(gm) if matches(t))


def kernels_run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
    """(operator, kernel) for every operator call that reached a backend while running ``fn``."""
    from ..inspect.dispatch import trace

    return [(c.op, c.kernel) for c in trace(fn, *args, **kwargs).calls]


class CompileCounter:
    """A ``torch.compile`` backend that counts the graphs it is given and runs them eagerly.

    >>> counter = CompileCounter()
    >>> f = torch.compile(fn, backend=counter)   # doctest: +SKIP
    >>> counter.frames                            # graphs compiled so far
    """

    def __init__(self) -> None:
        self.frames = 0
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self.frames += 1
        self.graphs.append(gm)
        return gm.forward


def graph_breaks(fn: Callable[..., Any], *args: Any) -> list[str]:
    """The reasons of the graph breaks Dynamo hits when compiling ``fn`` on ``args``."""
    import torch._dynamo

    torch._dynamo.reset()
    try:
        report = torch._dynamo.explain(fn)(*args)
    finally:
        torch._dynamo.reset()
    return [str(b.reason) for b in report.break_reasons]


def is_graph_module(obj: Any) -> bool:
    """A real ``torch.fx.GraphModule``, whose ``graph`` and ``code`` are FX's own.

    FX gives every GraphModule a class of its own (so that ``recompile`` can set
    its ``forward``); a learner's subclass that overrides ``graph``, ``code`` or
    ``recompile`` to show something other than what runs does not count.
    """
    cls = type(obj)
    if not issubclass(cls, torch.fx.GraphModule):
        return False
    gm = torch.fx.GraphModule
    for name in ("graph", "code", "recompile", "__getattr__", "__getattribute__", "__class__"):
        if getattr(cls, name, None) is not getattr(gm, name, None):
            return False
    return isinstance(vars(obj).get("_graph"), torch.fx.Graph) and type(vars(obj)["_graph"]) is torch.fx.Graph


class torch_calls:  # noqa: N801 - used like a function: ``with torch_calls() as calls:``
    """Records the torch functions called that return a tensor (and the operators dispatched) inside a ``with`` block.

    ``with torch_calls() as seen: ...`` then ``seen`` lists their names: used to check
    that an answer "computes it without asking PyTorch" (creates no tensor).
    """

    def __init__(self) -> None:
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        calls: list[str] = []
        self.calls = calls

        def _has_tensor(value: object) -> bool:
            if isinstance(value, torch.Tensor):
                return True
            return type(value) in (tuple, list) and any(isinstance(v, torch.Tensor) for v in value)

        class _Functions(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                result = func(*args, **(kwargs or {}))
                # only what makes or returns a tensor: a call that changes a setting (torch.set_grad_enabled,
                # torch.set_default_device) asks PyTorch nothing, and the check's state guard reports it anyway
                if _has_tensor(result):
                    calls.append(getattr(func, "__name__", str(func)))
                return result

        class _Operators(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                calls.append(str(func))
                return func(*args, **(kwargs or {}))

        self._modes = (_Functions(), _Operators())

    def __enter__(self) -> list[str]:
        for m in self._modes:
            m.__enter__()
        return self.calls

    def __exit__(self, *exc: object) -> None:
        for m in reversed(self._modes):
            m.__exit__(*exc)
