"""Pointwise fusion: many elementwise operators, one generated numba kernel.

Eagerly, ``gelu(x * w + b)`` is three kernels, and each writes a full tensor to
device memory that the next one reads back. This pass finds connected groups
of elementwise ATen operators of the same shape, turns each group into one
loop body (a *prelude* of temporaries plus one expression per output), and
replaces the group with a single call to a :class:`FusedKernel`. Values used
outside the group become the kernel's outputs; everything else lives only in
registers. ``kernel.source`` shows the generated code.

Scalar constants become kernel arguments (cast to the tensor dtype), so
groups that differ only in constants share one compiled kernel.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.fx

from ...kernels import elementwise
from ...ops.common import broadcast_shape, empty, empty_strided, run_elementwise

aten = torch.ops.aten

# A rule turns (operands, scalars) into an expression. Operands are the names of
# tensor inputs; scalar arguments are passed through ``lit`` which turns them
# into kernel parameters.
Rule = Callable[[list, Callable[[object], str]], str]


def _binary(sym: str) -> Rule:
    def rule(a, lit):
        alpha = a[2] if len(a) > 2 else 1
        rhs = a[1] if alpha == 1 else f"{lit(alpha)} * {a[1]}"
        return f"({a[0]} {sym} {rhs})"

    return rule


RULES: dict[object, Rule] = {
    aten.add.Tensor: _binary("+"),
    aten.add.Scalar: _binary("+"),
    aten.sub.Tensor: _binary("-"),
    aten.sub.Scalar: _binary("-"),
    aten.mul.Tensor: lambda a, lit: f"({a[0]} * {a[1]})",
    aten.mul.Scalar: lambda a, lit: f"({a[0]} * {a[1]})",
    aten.div.Tensor: lambda a, lit: f"({a[0]} / {a[1]})",
    aten.div.Scalar: lambda a, lit: f"({a[0]} / {a[1]})",
    aten.rsub.Scalar: lambda a, lit: f"({a[1]} - {a[0]})",
    aten.neg.default: lambda a, lit: f"(-{a[0]})",
    aten.abs.default: lambda a, lit: f"abs({a[0]})",
    aten.exp.default: lambda a, lit: f"math.exp({a[0]})",
    aten.log.default: lambda a, lit: f"math.log({a[0]})",
    aten.sqrt.default: lambda a, lit: f"math.sqrt({a[0]})",
    aten.rsqrt.default: lambda a, lit: f"(1 / math.sqrt({a[0]}))",
    aten.reciprocal.default: lambda a, lit: f"(1 / {a[0]})",
    aten.relu.default: lambda a, lit: f"relu({a[0]})",
    aten.sigmoid.default: lambda a, lit: f"sigmoid({a[0]})",
    aten.tanh.default: lambda a, lit: f"math.tanh({a[0]})",
    aten.silu.default: lambda a, lit: f"silu({a[0]})",
    aten.sin.default: lambda a, lit: f"math.sin({a[0]})",
    aten.cos.default: lambda a, lit: f"math.cos({a[0]})",
    aten.erf.default: lambda a, lit: f"math.erf({a[0]})",
    aten.gelu.default: lambda a, lit: (f"gelu_tanh({a[0]})" if (a[1] if len(a) > 1 else "none") == "tanh"
                                       else f"gelu_erf({a[0]})"),
    aten.gelu_backward.default: lambda a, lit: (
        f"gelu_tanh_grad({a[0]}, {a[1]})" if (a[2] if len(a) > 2 else "none") == "tanh"
        else f"gelu_erf_grad({a[0]}, {a[1]})"),
    aten.threshold_backward.default: lambda a, lit: f"({a[0]} * 0 if {a[1]} <= {a[2]} else {a[0]})",
    aten.sigmoid_backward.default: lambda a, lit: f"({a[0]} * {a[1]} * (1 - {a[1]}))",
    aten.tanh_backward.default: lambda a, lit: f"({a[0]} * (1 - {a[1]} * {a[1]}))",
    aten.silu_backward.default: lambda a, lit: (
        f"({a[0]} * sigmoid({a[1]}) * (1 + {a[1]} * (1 - sigmoid({a[1]}))))"),
    aten.where.self: lambda a, lit: f"({a[1]} if {a[0]} else {a[2]})",
    aten.pow.Tensor_Scalar: lambda a, lit: f"({a[0]} ** {a[1]})",
    aten.clamp_min.default: lambda a, lit: f"max({a[0]}, {a[1]})",
    aten.clamp_max.default: lambda a, lit: f"min({a[0]}, {a[1]})",
    aten.maximum.default: lambda a, lit: f"max({a[0]}, {a[1]})",
    aten.minimum.default: lambda a, lit: f"min({a[0]}, {a[1]})",
}

_counter = itertools.count()


class FusedKernel:
    """A group of elementwise operators compiled into one numba kernel.

    Calling it with the group's external inputs returns its outputs.
    """

    __module__ = "npu_lab.compiler.passes.pointwise_fusion"

    def __init__(self, name: str, kernel: elementwise.ElementwiseKernel, scalars: Sequence[float],
                 shape: tuple[int, ...], dtype: torch.dtype, fused_ops: Sequence[str],
                 strides: Sequence[tuple[int, ...] | None] = ()) -> None:
        self.__name__ = self.__qualname__ = name
        self.kernel = kernel
        # the memory layout each replaced operator had (later views in the graph rely on it)
        self.strides = list(strides)
        self.scalars = [np.float32(s) if dtype == torch.float32 else np.float64(s) for s in scalars]
        self.shape = shape
        self.dtype = dtype
        self.fused_ops = list(fused_ops)

    @property
    def source(self) -> str:
        """The generated numba source of this fused kernel."""
        return self.kernel.source

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # the output shape is the inputs' broadcast shape (also right under dynamic shapes)
        shape = broadcast_shape(*[t.shape for t in inputs]) if inputs else self.shape
        outs = []
        for k in range(len(self.kernel.exprs)):
            st = self.strides[k] if k < len(self.strides) and shape == self.shape else None
            outs.append(empty(shape, self.dtype) if st is None else empty_strided(shape, st, self.dtype))
        run_elementwise(self.kernel, outs, list(inputs), self.scalars,
                        flops_per_element=len(self.fused_ops))
        return tuple(outs)

    def __repr__(self) -> str:
        return f"<FusedKernel {self.__name__}: {' -> '.join(self.fused_ops)}>"


def _val(node: object):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _fusible(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target not in RULES:
        return False
    v = _val(node)
    if not isinstance(v, torch.Tensor) or v.dtype not in (torch.float32, torch.float64):
        return False
    for a in node.all_input_nodes:
        av = _val(a)
        if not isinstance(av, torch.Tensor) or av.dtype not in (v.dtype, torch.bool):
            return False
        if av.device.type != "npu" and av.dim() > 0:
            return False
    return v.device.type == "npu"


def _depends_on(node: torch.fx.Node, group: set, order: dict, first: int) -> bool:
    """Does ``node`` (transitively) use a member of ``group``? Only nodes after ``first`` can."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n in group:
            return True
        if n in seen or order[n] < first:
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return False


def _groups(gm: torch.fx.GraphModule) -> list[list[torch.fx.Node]]:
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    group_of: dict[torch.fx.Node, int] = {}
    groups: dict[int, list[torch.fx.Node]] = {}
    for node in gm.graph.nodes:
        if not _fusible(node):
            continue
        shape = tuple(_val(node).shape)
        target = None
        for p in node.all_input_nodes:
            g = group_of.get(p)
            if g is None or tuple(_val(p).shape) != shape or _val(p).dtype != _val(node).dtype:
                continue
            members = groups[g]
            # every outside user of the group must come after this node
            ok = all(u in members or u is node or order[u] > order[node]
                     for m in members for u in m.users)
            # and no outside input of this node may depend on the group (that would be a cycle)
            first = order[members[0]]
            ok = ok and not any(a not in members and _depends_on(a, set(members), order, first)
                                for a in node.all_input_nodes)
            if ok:
                target = g
                break
        if target is None:
            target = len(groups)
            groups[target] = []
        groups[target].append(node)
        group_of[node] = target
    # A lone fusible producer whose users all sit in one group joins that group
    # (e.g. ``0.25 * x`` feeding the end of a chain that started elsewhere).
    for g, members in list(groups.items()):
        if len(members) != 1:
            continue
        node = members[0]
        targets = {group_of.get(u) for u in node.users}
        if len(targets) != 1 or None in targets or g in targets:
            continue
        (t,) = targets
        if tuple(_val(groups[t][0]).shape) != tuple(_val(node).shape):
            continue
        if any(_depends_on(a, set(groups[t]), order, order[groups[t][0]]) for a in node.all_input_nodes):
            continue
        groups[t] = sorted(groups[t] + [node], key=order.get)
        group_of[node] = t
        del groups[g]
    return [g for g in groups.values() if len(g) >= 2]


def _emit(group: list[torch.fx.Node]):
    members = set(group)
    inputs: list[torch.fx.Node] = []
    names: dict[torch.fx.Node, str] = {}
    scalars: list[float] = []
    prelude: list[str] = []

    def lit(value: object) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return repr(value)
        scalars.append(float(value))
        return f"s{len(scalars) - 1}"

    for k, node in enumerate(group):
        operands = []
        for a in node.args:
            if isinstance(a, torch.fx.Node):
                if a not in members and a not in names:
                    names[a] = f"x{len(inputs)}"
                    inputs.append(a)
                operands.append(names[a])
            elif isinstance(a, (int, float)) and not isinstance(a, bool):
                operands.append(lit(a))
            else:
                operands.append(a)
        if node.kwargs:
            operands += [node.kwargs[key] if not isinstance(node.kwargs[key], (int, float))
                         or isinstance(node.kwargs[key], bool) else lit(node.kwargs[key])
                         for key in ("alpha", "approximate") if key in node.kwargs]
        expr = RULES[node.target](operands, lit)
        names[node] = f"t{k}"
        prelude.append(f"t{k} = {expr}")
    outputs = [n for n in group if any(u not in members for u in n.users)]
    return inputs, outputs, prelude, [names[o] for o in outputs], scalars


def pointwise_fusion(gm: torch.fx.GraphModule) -> list[str]:
    changes = []
    for group in _groups(gm):
        inputs, outputs, prelude, out_exprs, scalars = _emit(group)
        if not outputs:
            continue
        name = f"fused_pointwise_{next(_counter)}"
        kernel = elementwise.ElementwiseKernel(
            name, len(inputs), tuple(out_exprs), tuple(f"s{i}" for i in range(len(scalars))), tuple(prelude)
        )
        val = _val(group[0])
        ops = [str(n.target).replace("aten.", "").replace(".default", "") for n in group]
        strides = []
        for o in outputs:
            v = _val(o)
            try:
                st = tuple(int(x) for x in v.stride())
                strides.append(None if v.is_contiguous() else st)
            except (TypeError, RuntimeError):  # symbolic strides: allocate contiguous
                strides.append(None)
        try:
            static_shape = tuple(int(d) for d in val.shape)
        except (TypeError, RuntimeError):
            static_shape, strides = (), []
        fk = FusedKernel(name, kernel, scalars, static_shape, val.dtype, ops, strides)
        last = group[-1]
        with gm.graph.inserting_after(last):
            call = gm.graph.call_function(fk, tuple(inputs))
        call.meta["fused"] = fk
        call.meta["val"] = tuple(_val(o) for o in outputs)
        with gm.graph.inserting_after(call):
            for i, out in enumerate(outputs):
                get = gm.graph.call_function(operator.getitem, (call, i))
                get.meta.update(out.meta)
                out.replace_all_uses_with(get, delete_user_cb=lambda u, m=set(group): u not in m)
        for node in reversed(group):
            gm.graph.erase_node(node)
        changes.append(f"{name}: fused {len(group)} ops ({', '.join(ops)}) -> 1 kernel, "
                       f"{len(inputs)} inputs, {len(outputs)} outputs")
    gm.graph.lint()
    gm.recompile()
    return changes

