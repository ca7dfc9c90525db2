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
