"""Constant folding: compute at compile time what does not depend on the inputs.

A node whose arguments are all constants (literals, ``get_attr`` buffers, or
other folded nodes) gives the same tensor on every call, so the pass runs it
once and stores the result as a buffer of the graph module. Typical catches:
masks built with ``arange``/``full``/``ones`` and arithmetic on them.
Random and "empty" factories are never folded, and results larger than
``MAX_ELEMENTS`` are left alone so constants do not eat device memory.
"""

from __future__ import annotations

import torch
import torch.fx

from ..._torch_private import real_tensors

MAX_ELEMENTS = 1 << 20
_NEVER = ("empty", "rand", "randn", "randint", "randperm", "bernoulli", "dropout", "normal", "uniform")


def _foldable(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    schema = node.target._schema
    if schema.is_mutable or any(w in schema.name for w in _NEVER):
        return False
    if torch.Tag.nondeterministic_seeded in node.target.tags:
        return False
    return True


def constant_folding(gm: torch.fx.GraphModule) -> list[str]:
    values: dict[torch.fx.Node, object] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            values[node] = getattr(gm, node.target)
    changes: list[str] = []
    counter = 0
    for node in list(gm.graph.nodes):
        if not _foldable(node):
            continue
        deps = node.all_input_nodes
        if any(d not in values for d in deps):
            continue
        if any(u.op == "output" for u in node.users):
            continue
        args = torch.fx.node.map_arg(node.args, lambda n: values[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: values[n])
        with real_tensors():  # the backend may be called with AOTAutograd's fake mode still active
            result = node.target(*args, **kwargs)
        if not isinstance(result, torch.Tensor) or result.numel() > MAX_ELEMENTS:
            continue
        name = f"_folded_{counter}"
        counter += 1
        gm.register_buffer(name, result)
        with gm.graph.inserting_before(node):
            const = gm.graph.get_attr(name)
        const.meta.update(node.meta)
        node.replace_all_uses_with(const)
        values[const] = result
        changes.append(f"folded {node.name} ({node.target}) into constant {name} {tuple(result.shape)}")
        gm.graph.erase_node(node)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return changes
