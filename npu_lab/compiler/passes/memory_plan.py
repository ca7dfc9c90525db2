"""Memory planning: decide which intermediate buffers can share device memory.

Every intermediate tensor of a graph lives from the node that makes it to its
last use. Two tensors whose lifetimes do not overlap can use the same buffer.
The planner walks the graph in execution order, frees a buffer after the last
use of its tensor, and gives each new tensor the smallest free buffer that is
big enough (best fit), creating a new one only when none fits.

The plan is recorded on each node (``node.meta["buffer"]``) and summarised in
:data:`last_plan`. At run time the generated code releases every value right
after its last use (FX does this), and the NPU's caching allocator hands the
freed blocks to the next allocation of that size, which realises the plan.
Views (``view``, ``permute``, ``getitem`` of a fused kernel...) share their
base's buffer and allocate nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.fx

from ...device.memory import round_size

_VIEW_OPS = {
    torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.permute.default,
    torch.ops.aten.t.default, torch.ops.aten.transpose.int, torch.ops.aten.expand.default,
    torch.ops.aten.alias.default, torch.ops.aten.detach.default, torch.ops.aten.slice.Tensor,
    torch.ops.aten.select.int, torch.ops.aten.unsqueeze.default, torch.ops.aten.squeeze.dim,
    torch.ops.aten.as_strided.default, torch.ops.aten.reshape.default,
}


@dataclass
class MemoryPlan:
    """What the planner decided for one graph."""

    buffers: list[int] = field(default_factory=list)  # size of each planned buffer
    naive_peak: int = 0  # every intermediate in its own buffer, none freed
    planned_peak: int = 0  # with reuse
    assignments: dict[str, int] = field(default_factory=dict)

    @property
    def saved_bytes(self) -> int:
        return self.naive_peak - self.planned_peak

    def describe(self) -> str:
        return (f"{len(self.assignments)} intermediates in {len(self.buffers)} buffers: "
                f"peak {self.planned_peak:,} bytes instead of {self.naive_peak:,} "
                f"({self.saved_bytes:,} bytes saved)")


last_plan: MemoryPlan | None = None


def _nbytes(val: object) -> int:
    if isinstance(val, torch.Tensor):
        n = val.numel()
        if isinstance(n, torch.SymInt):
            # Dynamic shapes: plan with the example's size, read without int(), which would
            # add a guard and make Dynamo specialize the graph to that size again.
            n = n.node.hint
            if n is None:
                return 0
        return round_size(int(n) * val.element_size())
    if isinstance(val, (tuple, list)):
        return sum(_nbytes(v) for v in val)
    return 0


def _is_view(node: torch.fx.Node) -> bool:
    import operator

    return node.target in _VIEW_OPS or node.target is operator.getitem


def memory_planning(gm: torch.fx.GraphModule) -> list[str]:
    global last_plan
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    # a view's storage is its base's: follow views to the allocating node
    owner: dict[torch.fx.Node, torch.fx.Node] = {}
    for n in nodes:
        if n.op == "call_function" and _is_view(n) and n.args and isinstance(n.args[0], torch.fx.Node):
            owner[n] = owner.get(n.args[0], n.args[0])
        else:
            owner[n] = n
    last_use: dict[torch.fx.Node, int] = {}
    for n in nodes:
        for a in n.all_input_nodes:
            root = owner[a]
            last_use[root] = max(last_use.get(root, 0), order[n])
    plan = MemoryPlan()
    free: list[int] = []  # indices of free buffers
    live_bytes = 0
    naive = 0
    ends: dict[int, list[int]] = {}
    for n in nodes:
        # release buffers whose tensors died before this node
        for b in ends.pop(order[n], []):
            free.append(b)
            live_bytes -= plan.buffers[b]
        if n.op != "call_function" or owner[n] is not n:
            continue
        size = _nbytes(n.meta.get("val"))
        if size == 0:
            continue
        naive += size
        outlives = any(u.op == "output" for u in n.users) or n not in last_use
        fits = [b for b in free if plan.buffers[b] >= size]
        if fits:
            b = min(fits, key=lambda i: plan.buffers[i])
            free.remove(b)
        else:
            b = len(plan.buffers)
            plan.buffers.append(size)
        n.meta["buffer"] = b
        plan.assignments[n.name] = b
        live_bytes += plan.buffers[b]
        plan.planned_peak = max(plan.planned_peak, live_bytes)
        if not outlives:
            ends.setdefault(last_use[n] + 1, []).append(b)
    plan.naive_peak = naive
    last_plan = plan
    return [plan.describe()]
