"""Foreach expansion: one ``torch._foreach_*`` call over N tensors -> N ordinary calls.

PyTorch's optimizers update all parameters with *foreach* operators
(``torch._foreach_mul_(bufs, 0.9)``, ``torch._foreach_add_(params, bufs, alpha=-lr)``):
one call per step of the update rule, each looping over every parameter. That
groups the work *horizontally* (same operator, many tensors), which saves host
overhead in eager mode. A compiler wants it *vertically*: all the steps of one
parameter's update next to each other, so that pointwise fusion can turn them
into one kernel that reads each tensor once and writes it once.

This pass runs on the Dynamo graph, before AOTAutograd. It replaces each
foreach call of a pointwise operator by one call per tensor (``torch.mul``,
``Tensor.mul_``...), taking element ``i`` of every list argument and passing the
other arguments through. AOTAutograd then functionalizes the in-place calls
and decomposes them like any other operator. Foreach operators that are not
pointwise (``_foreach_norm``...) are left alone.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

#: Foreach operators this pass expands (their per-tensor forms are pointwise).
POINTWISE = frozenset({
    "abs", "add", "addcdiv", "addcmul", "clamp_max", "clamp_min", "copy", "div", "exp", "lerp",
    "log", "maximum", "minimum", "mul", "neg", "pow", "reciprocal", "sigmoid", "sign", "sqrt",
    "sub", "tanh", "zero",
})


def _split(target: object) -> tuple[str, bool] | None:
    """``torch._foreach_add_`` -> ("add", True); None if not an expandable foreach op."""
    name = getattr(target, "__name__", "")
    if not name.startswith("_foreach_"):
        return None
    base = name[len("_foreach_"):]
    in_place = base.endswith("_")
    base = base.rstrip("_")
    if base not in POINTWISE:
        return None
    return base, in_place


def _length(node: torch.fx.Node) -> int | None:
    """The number of tensors a foreach call runs over (the length of its first list)."""
    for a in (*node.args, *node.kwargs.values()):
        if isinstance(a, (list, tuple)):
            return len(a)
    return None


def _element(a: object, i: int, n: int) -> object:
    return a[i] if isinstance(a, (list, tuple)) and len(a) == n else a


def expand_foreach(gm: torch.fx.GraphModule) -> list[str]:
    """Replace pointwise foreach calls in a Dynamo graph with per-tensor calls (in place)."""
    changes = []
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        split = _split(node.target)
        n = _length(node)
        if split is None or not n:
            continue
        base, in_place = split
        if in_place and node.users:
            continue
        if in_place:
            fn = getattr(torch.Tensor, f"{base}_")
        elif base == "zero":
            continue  # _foreach_zero exists only in place
        else:
            fn = getattr(torch, base, None)
            if fn is None:
                continue
        args, kwargs = node.args, dict(node.kwargs)
        if base in ("addcmul", "addcdiv"):
            # foreach takes the scale positionally (a number, a list or a tensor of them);
            # Tensor.addcmul takes it as value=. A tensor of scales stays a foreach call.
            value = args[3] if len(args) > 3 else kwargs.pop("scalars", kwargs.pop("value", 1))
            if isinstance(value, torch.fx.Node):
                continue
            args, kwargs["value"] = args[:3], value
        getitems = {u.args[1]: u for u in node.users
                    if u.op == "call_function" and u.target is operator.getitem}
        if not in_place and len(getitems) != len(node.users):
            continue  # the list result is used as a whole: keep the call
        with graph.inserting_before(node):
            calls = []
            for i in range(n):
                if not in_place and i not in getitems:
                    continue  # this result is never read
                call = graph.call_function(fn, tuple(_element(a, i, n) for a in args),
                                           {k: _element(v, i, n) for k, v in kwargs.items()})
                if not in_place:
                    item = getitems[i]
                    call.meta.update(item.meta)
                    item.replace_all_uses_with(call)
                    graph.erase_node(item)
                calls.append(call)
        graph.erase_node(node)
        changes.append(f"{node.name}: _foreach_{base}{'_' if in_place else ''} over {n} tensors -> "
                       f"{len(calls)} calls of {'Tensor.' + base + '_' if in_place else 'torch.' + base}")
    if changes:
        graph.lint()
        gm.recompile()
    return changes
