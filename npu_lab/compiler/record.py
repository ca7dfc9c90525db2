"""What a compilation did, kept for learners and tests to inspect.

Every graph the ``npu`` backend compiles leaves a :class:`GraphRecord` with the
graph as it came in and after each pass, and every call of the backend leaves
a :class:`CompileRecord` grouping the Dynamo graph with its forward and
backward graphs. ``npu_lab.compiler.last_compile()`` returns the newest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch.fx


@dataclass
class PassSnapshot:
    """The graph after one pass, and what the pass changed."""

    name: str
    code: str
    graph: torch.fx.Graph
    changes: list[str] = field(default_factory=list)

    @property
    def ops(self) -> list[str]:
        return [str(n.target) for n in self.graph.nodes if n.op == "call_function"]


@dataclass
class GraphRecord:
    """One ATen graph (forward, backward or inference) through the pass pipeline."""

    kind: str
    snapshots: list[PassSnapshot] = field(default_factory=list)
    kernels: list = field(default_factory=list)
    cache_hit: bool = False
    #: the graph's :class:`~npu_lab.compiler.launch_plan.LaunchPlan` (``plan.source`` is its code)
    plan: object = None
    #: why the graph has no launch plan, if it has none
    plan_skipped: str = ""

    def snapshot(self, name: str) -> PassSnapshot:
        for s in self.snapshots:
            if s.name == name:
                return s
        raise KeyError(f"no snapshot {name!r}; have {[s.name for s in self.snapshots]}")

    @property
    def final(self) -> PassSnapshot:
        return self.snapshots[-1]


@dataclass
class CompileRecord:
    """One call of the backend: a Dynamo graph and the graphs AOTAutograd made of it."""

    dynamo_code: str
    dynamo_graph: torch.fx.Graph
    options: dict
    graphs: list[GraphRecord] = field(default_factory=list)
    moved_from_cpu: bool = False
    #: what the passes on the torch-level graph changed (attention rewrite, foreach expansion)
    dynamo_changes: list[str] = field(default_factory=list)

    def graph(self, kind: str) -> GraphRecord:
        for g in self.graphs:
            if g.kind == kind:
                return g
        raise KeyError(f"no {kind} graph; have {[g.kind for g in self.graphs]}")


history: list[CompileRecord] = []


def last_compile() -> CompileRecord:
    """The newest :class:`CompileRecord` (raises if nothing was compiled yet)."""
    if not history:
        raise RuntimeError("nothing has been compiled with backend='npu' yet")
    return history[-1]
