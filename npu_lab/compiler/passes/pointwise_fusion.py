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

Reductions fuse too. ``sum``/``mean``/``amax`` over the trailing dimensions
(the last one of a contiguous tensor, or all of them) becomes one generated
:class:`FusedReduction` together with its elementwise *prologue* (the chain
that computes its input, evaluated inside the reduction loop, so the input
tensor is never written) and its elementwise *epilogue* (operators that
consume only the reduced value, scalars and tensors of the reduced shape,
applied once per output element). ``((x - y) ** 2).mean().sqrt()`` is one
kernel. Reductions are fused first; the remaining elementwise groups follow.
When elementwise work *after* a reduction uses the reduced value at full size (RMSNorm, softmax,
layer norm), the whole group becomes one row kernel instead
(:mod:`npu_lab.compiler.passes.row_fusion`; switch: :data:`FUSE_ROWS`). Set
:data:`FUSE_REDUCTIONS` to False to fuse elementwise operators only.

Matrix products fuse with their elementwise epilogue in the same way, before
anything else: ``threshold_backward(mm(g, w), mask, 0)`` becomes one generated
matmul kernel that applies the ReLU gradient to each sum as it stores it
(:mod:`npu_lab.compiler.passes.matmul_epilogue`; switch: :data:`FUSE_MATMULS`).

In-place updates fuse as well. An optimizer step compiles to an inference
graph that ends with ``copy_(param, new_param)`` for every input it updates
(AOTAutograd's functional form of ``param.add_(...)``). When ``new_param`` is
an output of a fused kernel, the kernel writes it straight into ``param``'s
memory and the copy disappears: one SGD-with-momentum update is one kernel
that reads the parameter, its gradient and its momentum buffer once, and
writes the parameter and the buffer once.
"""

from __future__ import annotations

import heapq
import itertools
import operator
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.fx

from ...device.rng import generator as device_generator
from ...kernels import elementwise, fused_reduction
from ...kernels.elementwise import Operand
from ...ops.common import (
    as_array,
    broadcast_shape,
    empty,
    empty_strided,
    launch,
    nbytes,
    operand,
    run_elementwise,
)

aten = torch.ops.aten

# A rule turns (operands, scalars) into an expression. Operands are the names of
# tensor inputs; scalar arguments are passed through ``lit`` which turns them
# into kernel parameters.
Rule = Callable[[list, Callable[[object], str]], str]


def _binary(sym: str) -> Rule:
    def rule(a, lit):
        alpha = a[2] if len(a) > 2 else 1
        if isinstance(alpha, str):  # already a kernel parameter (alpha= given as a keyword)
            rhs = f"{alpha} * {a[1]}"
        else:
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
    aten.exp.default: lambda a, lit: f"fast_exp({a[0]})",
    aten.log.default: lambda a, lit: f"math.log({a[0]})",
    aten.sqrt.default: lambda a, lit: f"math.sqrt({a[0]})",
    aten.rsqrt.default: lambda a, lit: f"(1 / math.sqrt({a[0]}))",
    aten.reciprocal.default: lambda a, lit: f"(1 / {a[0]})",
    aten.relu.default: lambda a, lit: f"relu({a[0]})",
    aten.sigmoid.default: lambda a, lit: f"sigmoid({a[0]})",
    aten.tanh.default: lambda a, lit: f"fast_tanh({a[0]})",
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
    aten.addcmul.default: lambda a, lit: f"({a[0]} + {a[3] if len(a) > 3 else 1} * {a[1]} * {a[2]})",
    aten.addcdiv.default: lambda a, lit: f"({a[0]} + {a[3] if len(a) > 3 else 1} * ({a[1]} / {a[2]}))",
    # a tensor filled with one value (its first operand gives only the shape)
    aten.full_like.default: lambda a, lit: f"{a[1]}",
    aten.pow.Tensor_Scalar: lambda a, lit: f"({a[0]} ** {a[1]})",
    aten.clamp_min.default: lambda a, lit: f"max({a[0]}, {a[1]})",
    aten.clamp_max.default: lambda a, lit: f"min({a[0]}, {a[1]})",
    aten.maximum.default: lambda a, lit: f"max({a[0]}, {a[1]})",
    aten.minimum.default: lambda a, lit: f"min({a[0]}, {a[1]})",
}



def dropout_output(x: torch.Tensor, p: float) -> torch.Tensor:
    """``native_dropout(x, p, True)[0]`` when nothing reads the mask: the form dropout takes in a fused kernel.

    Inside a fused kernel each element draws its 64 random bits from the device generator's
    Philox stream (the same bits eager dropout would draw, in the same order, for a contiguous
    result) and keeps ``x * 1/(1-p)`` with probability ``1-p``; the mask is never written.
    Called on its own, it is eager dropout.
    """
    return aten.native_dropout.default(x, p, True)[0]


def _dropout_rule(a, lit):
    x, p = a[0], a[1]
    p = float(p)
    # keep when U >= p, U = (bits >> 11) / 2**53 exactly as eager draws it; in integers: (bits >> 11) >= ceil(p * 2**53)
    threshold = int(np.ceil(p * 2.0 ** 53))
    scale = lit(float(np.float32(1.0 / (1.0 - p))))
    return f"({x} * {scale} if dropout_keep(@BITS@, {threshold}) else {x} * 0)"


RULES[dropout_output] = _dropout_rule

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
        #: output index -> position of the call argument the output is written into (in place)
        self.into: dict[int, int] = {}
        #: dropouts inside the kernel: each reads 64 random bits per element from the device generator
        self.n_random = 0

    @property
    def source(self) -> str:
        """The generated numba source of this fused kernel."""
        return self.kernel.source

    def __call__(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n_in = len(args) - len(self.into)
        # a 0-dim CPU tensor (PyTorch allows one next to device tensors, as a scalar) is uploaded
        inputs = tuple(t.to("npu") if t.device.type == "cpu" else t for t in args[:n_in])
        # the output shape is the inputs' broadcast shape (also right under dynamic shapes)
        shape = broadcast_shape(*[t.shape for t in inputs]) if inputs else self.shape
        outs = []
        for k in range(len(self.kernel.exprs)):
            if k in self.into:
                outs.append(args[self.into[k]])
                continue
            st = self.strides[k] if k < len(self.strides) and shape == self.shape else None
            outs.append(empty(shape, self.dtype) if st is None else empty_strided(shape, st, self.dtype))
        bits = [random_bits(shape) for _ in range(self.n_random)]
        # the random bits are made inside the kernel on a real chip (Philox in registers): not memory traffic
        run_elementwise(self.kernel, outs, [*inputs, *bits], self.scalars,
                        flops_per_element=len(self.fused_ops), uncounted=len(bits))
        return tuple(outs)

    def __repr__(self) -> str:
        return f"<FusedKernel {self.__name__}: {' -> '.join(self.fused_ops)}>"


#: Fuse reductions with their elementwise prologue and epilogue (see the module docstring).
FUSE_REDUCTIONS = True
#: Fuse a row's reductions with the full-size work that uses them into one row kernel (RMSNorm, softmax).
FUSE_ROWS = True
#: Fuse matrix products with their elementwise epilogue (see the module docstring).
FUSE_MATMULS = True

#: The reductions that fuse, by ATen overload.
REDUCTION_KINDS: dict[object, str] = {
    aten.sum.dim_IntList: "sum",
    aten.sum.default: "sum",
    aten.mean.dim: "mean",
    aten.mean.default: "mean",
    aten.amax.default: "amax",
}


def random_bits(shape: Sequence[int]) -> torch.Tensor:
    """An int64 npu tensor of raw Philox bits from the default device generator (advancing it)."""
    bits = empty(tuple(shape), torch.int64)
    n = bits.numel()
    if n:
        as_array(bits).reshape(-1)[:] = device_generator().raw(n).view(np.int64)
    return bits


def _host_operand(t: torch.Tensor, shape: Sequence[int]) -> Operand:
    """``t`` broadcast to ``shape`` as a kernel operand; a 0-dim CPU tensor becomes a 1-element array."""
    if t.device.type == "npu":
        return operand(t, shape)
    value = np.asarray([t.item()], dtype=np.dtype(str(t.dtype).replace("torch.", "")))
    return Operand(value, (0,) * max(len(shape), 1), 0)


class FusedReduction(FusedKernel):
    """A reduction fused with its elementwise prologue and epilogue into one numba kernel.

    Called with the prologue's external inputs followed by the epilogue's, it
    returns the reduced-shape outputs (the reduced value and/or epilogue
    values used elsewhere) followed by the full-shape outputs (prologue values
    other operators still need, written from inside the reduction loop).

    Attributes:
        kernel: the :class:`~npu_lab.kernels.fused_reduction.ReductionKernel`.
        full_shape: the shape of the reduced tensor (the loop's iteration space).
        n_reduced: how many trailing dimensions of ``full_shape`` are reduced.
        shape: the shape of the reduced outputs.
        last_variant: which generated loop ran last (``rows``, ``chunks``, ``strided``...).
    """

    __module__ = "npu_lab.compiler.passes.pointwise_fusion"

    def __init__(self, name: str, kernel: fused_reduction.ReductionKernel, scalars: Sequence[float],
                 full_shape: tuple[int, ...], n_reduced: int, out_shape: tuple[int, ...], dtype: torch.dtype,
                 fused_ops: Sequence[str], full_strides: Sequence[tuple[int, ...] | None], n_inputs: int) -> None:
        super().__init__(name, kernel, scalars, out_shape, dtype, fused_ops)  # type: ignore[arg-type]
        self.full_shape = tuple(full_shape)
        self.n_reduced = n_reduced
        self.full_strides = list(full_strides)
        self.n_inputs = n_inputs
        self.last_variant = ""

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        kernel = self.kernel
        ins, eps = inputs[: self.n_inputs], inputs[self.n_inputs:]
        outs = [empty(self.shape, self.dtype) for _ in kernel.outputs]
        fulls = [empty_strided(self.full_shape, st, self.dtype) for st in self.full_strides]
        space, n_red = (self.full_shape, self.n_reduced) if self.full_shape else ((1,), 1)
        nk = len(space) - n_red

        def kept(t: torch.Tensor) -> Operand:
            op = _host_operand(t, self.shape)
            return Operand(op.flat, tuple(op.strides[:nk]), op.offset)

        self.last_variant = kernel.run(
            space, n_red, [kept(t) for t in outs], [_host_operand(t, self.full_shape) for t in fulls],
            [_host_operand(t, self.full_shape) for t in ins], [kept(t) for t in eps], self.scalars)
        numel = int(np.prod(space))
        n_out = int(np.prod(self.shape)) if self.shape else 1
        launch(kernel.name, numel * (len(kernel.prelude) + 1) + n_out * len(kernel.epilogue),
               sum(nbytes(t) for t in inputs), sum(nbytes(t) for t in (*outs, *fulls)))
        return (*outs, *fulls)

    def __repr__(self) -> str:
        return f"<FusedReduction {self.__name__}: {' -> '.join(self.fused_ops)}>"


def _val(node: object):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _fusible(node: torch.fx.Node, random: bool = False) -> bool:
    """Can ``node`` be computed inside a fused kernel? (``random``: dropout too, only elementwise groups.)"""
    if node.op != "call_function" or node.target not in RULES or (node.target is dropout_output and not random):
        return False
    v = _val(node)
    if not isinstance(v, torch.Tensor) or v.dtype not in (torch.float32, torch.float64):
        return False
    # Dynamic shapes: the fused kernels are planned with concrete sizes and strides; reading a
    # symbolic one would add a guard and pin the graph to this size, so such nodes stay unfused.
    if not _static(v):
        return False
    for a in node.all_input_nodes:
        av = _val(a)
        if not isinstance(av, torch.Tensor) or av.dtype not in (v.dtype, torch.bool) or not _static(av):
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
    # writes[i]: in-place operators before position i. A group runs at its last member,
    # so no operator between its members may write a tensor (a read would move past it).
    writes = list(itertools.accumulate((_mutates(n) for n in gm.graph.nodes), initial=0))

    def writes_between(a: int, b: int) -> bool:
        return writes[b] - writes[a + 1] > 0 if b > a + 1 else False
    ids = itertools.count()

    def legal(members: list[torch.fx.Node], node: torch.fx.Node) -> bool:
        """Can ``members`` (groups found so far) and ``node`` run as one kernel at ``node``'s place?"""
        joined = set(members) | {node}
        # every outside user of the group must come after this node
        if not all(u in joined or order[u] > order[node] for m in members for u in m.users):
            return False
        # no outside input may depend on the group (that would be a cycle)
        first = min(order[m] for m in members)
        if any(a not in joined and _depends_on(a, joined - {node}, order, first)
               for m in joined for a in m.all_input_nodes):
            return False
        return not writes_between(first, order[node])

    for node in gm.graph.nodes:
        if not _fusible(node, random=True):
            continue
        shape = tuple(_val(node).shape)
        candidates: list[int] = []
        for p in node.all_input_nodes:
            g = group_of.get(p)
            if g is None or g in candidates or tuple(_val(p).shape) != shape or _val(p).dtype != _val(node).dtype:
                continue
            candidates.append(g)
        # Producer-consumer groups merge: a node that uses two groups joins them into one kernel
        # (as Inductor's scheduler does) when no cycle and no write in between forbids it.
        target = None
        if len(candidates) > 1 and legal([m for g in candidates for m in groups[g]], node):
            target = candidates[0]
            for g in candidates[1:]:
                for m in groups.pop(g):
                    group_of[m] = target
                    groups[target].append(m)
            groups[target].sort(key=order.get)
        else:
            target = next((g for g in candidates if legal(groups[g], node)), None)
        if target is None:
            target = next(ids)
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
        span = [order[node], order[groups[t][0]], order[groups[t][-1]]]
        if writes_between(min(span), max(span)):
            continue
        groups[t] = sorted(groups[t] + [node], key=order.get)
        group_of[node] = t
        del groups[g]
    return [g for g in groups.values() if len(g) >= 2]


def scalar_params(scalars: list[float], prefix: str) -> Callable[[object], str]:
    """The ``lit`` of :func:`_expr`: a number becomes a kernel parameter (``s0``, ``s1``...
    for prefix ``s``) whose value is appended to ``scalars``; anything else is written as is."""
    def lit(value: object) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return repr(value)
        scalars.append(float(value))
        return f"{prefix}{len(scalars) - 1}"

    return lit


def _expr(node: torch.fx.Node, name_of: Callable[[torch.fx.Node], str], lit: Callable[[object], str]) -> str:
    """The scalar expression of one elementwise node (tensor operands named by ``name_of``)."""
    exponent = node.args[1] if len(node.args) > 1 else None
    if node.target is aten.pow.Tensor_Scalar and isinstance(node.args[0], torch.fx.Node) \
            and isinstance(exponent, (int, float)) and not isinstance(exponent, bool) and exponent == 2:
        x = name_of(node.args[0])
        return f"({x} * {x})"  # exact, like pow(x, 2), and many times faster in a loop
    if node.target is dropout_output:  # p shapes the code (an integer threshold), not a kernel parameter
        return _dropout_rule([name_of(node.args[0]), node.args[1]], lit)
    operands = []
    for a in node.args:
        if isinstance(a, torch.fx.Node):
            operands.append(name_of(a))
        elif isinstance(a, (int, float)) and not isinstance(a, bool):
            operands.append(lit(a))
        else:
            operands.append(a)
    if node.kwargs:
        operands += [node.kwargs[key] if not isinstance(node.kwargs[key], (int, float))
                     or isinstance(node.kwargs[key], bool) else lit(node.kwargs[key])
                     for key in ("alpha", "approximate", "value") if key in node.kwargs]
    return RULES[node.target](operands, lit)


def _emit(group: list[torch.fx.Node]):
    members = set(group)
    inputs: list[torch.fx.Node] = []
    names: dict[torch.fx.Node, str] = {}
    scalars: list[float] = []
    prelude: list[str] = []

    lit = scalar_params(scalars, "s")

    def name_of(a: torch.fx.Node) -> str:
        if a not in members and a not in names:
            names[a] = f"x{len(inputs)}"
            inputs.append(a)
        return names[a]

    n_random = 0
    for k, node in enumerate(group):
        expr = _expr(node, name_of, lit)
        if "@BITS@" in expr:  # a dropout: its random bits are an extra input, numbered after the others
            expr = expr.replace("@BITS@", f"@BITS{n_random}@")
            n_random += 1
        names[node] = f"t{k}"
        prelude.append(f"t{k} = {expr}")
    for r in range(n_random):
        prelude = [line.replace(f"@BITS{r}@", f"x{len(inputs) + r}") for line in prelude]
    outputs = [n for n in group if any(u not in members for u in n.users)]
    return inputs, outputs, prelude, [names[o] for o in outputs], scalars, n_random


# --- reductions with their prologue and epilogue --------------------------------------------

def _op_name(node: torch.fx.Node) -> str:
    return str(node.target).replace("aten.", "").replace(".default", "")


def _static(v: torch.Tensor) -> bool:
    """Every size and stride of ``v`` is a plain int."""
    return all(isinstance(d, int) for d in v.shape) and all(isinstance(d, int) for d in v.stride())


def _static_shape(v: object) -> tuple[int, ...] | None:
    """The shape of a tensor value when every size is a plain int (not symbolic)."""
    if not isinstance(v, torch.Tensor) or not all(isinstance(d, int) for d in v.shape):
        return None
    return tuple(v.shape)


def _reduction(node: torch.fx.Node, contiguous: bool = True) -> tuple[str, int] | None:
    """(kind, number of trailing dimensions reduced) if ``node`` is a reduction that can fuse.

    Only reductions over trailing dimensions fuse: the last dimension(s) of a
    contiguous input (any layout with ``contiguous=False``), or all dimensions
    (any layout). Static shapes, float dtypes.
    """
    if node.op != "call_function" or node.target not in REDUCTION_KINDS or not node.args:
        return None
    src = node.args[0]
    v, iv = _val(node), _val(src)
    if not isinstance(v, torch.Tensor) or not isinstance(iv, torch.Tensor):
        return None
    if v.dtype not in (torch.float32, torch.float64) or iv.dtype != v.dtype:
        return None
    if v.device.type != "npu" or iv.device.type != "npu" or node.kwargs.get("dtype") not in (None, v.dtype):
        return None
    shape = _static_shape(iv)
    if shape is None or _static_shape(v) is None or int(np.prod(shape)) == 0:
        return None
    nd = len(shape)
    dims = None
    if node.target not in (aten.sum.default, aten.mean.default):
        dims = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else None)
    if isinstance(dims, int):
        dims = [dims]
    if not dims:
        dims = range(nd)
    reduced = sorted({int(d) % nd for d in dims}) if nd else []
    if reduced != list(range(nd - len(reduced), nd)):
        return None
    if contiguous and len(reduced) < nd and not iv.is_contiguous():
        return None
    return REDUCTION_KINDS[node.target], len(reduced)


def _mutates(node: torch.fx.Node) -> bool:
    """Could ``node`` write to a tensor (so moving a read across it would be wrong)?"""
    if node.op in ("call_method", "call_module"):
        return True
    target = node.target
    return node.op == "call_function" and isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable


def _ancestors(node: torch.fx.Node) -> set[torch.fx.Node]:
    """Every node ``node`` (transitively) depends on."""
    seen: set[torch.fx.Node] = set()
    stack = list(node.all_input_nodes)
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(n.all_input_nodes)
    return seen


def _prologue(red: torch.fx.Node, order: dict) -> list[torch.fx.Node]:
    """The elementwise nodes of the reduced tensor's shape that compute the reduction's input.

    Nodes are considered latest first, so when a node is decided all its
    possible in-kernel users are known. A node may have users outside the
    kernel (its value is then also written out by the kernel), unless such a
    user is itself needed to compute the reduction (that would be a cycle).
    """
    src = red.args[0]
    shape, dtype = _static_shape(_val(src)), _val(src).dtype
    needed = _ancestors(red)
    chosen: set[torch.fx.Node] = set()
    heap = [(-order[src], src)]
    seen: set[torch.fx.Node] = set()
    while heap:
        _, n = heapq.heappop(heap)
        if n in seen:
            continue
        seen.add(n)
        if not _fusible(n) or _static_shape(_val(n)) != shape or _val(n).dtype != dtype:
            continue
        if any(u is not red and u not in chosen and u in needed for u in n.users):
            continue
        chosen.add(n)
        for a in n.all_input_nodes:
            heapq.heappush(heap, (-order[a], a))
    return sorted(chosen, key=order.get)


def _epilogue(red: torch.fx.Node, prologue: list[torch.fx.Node], nodes: list[torch.fx.Node],
              order: dict) -> list[torch.fx.Node]:
    """Elementwise nodes after the reduction that use its value, in the reduced shape.

    Their other inputs must be scalars or tensors that do not depend on the
    kernel (they are read once per output element); prologue values (only
    available inside the loop) cannot be used.
    """
    shape, dtype = _static_shape(_val(red)), _val(red).dtype
    inside, pro = {red}, set(prologue)
    first = order[prologue[0]] if prologue else order[red]
    members: list[torch.fx.Node] = []
    for n in nodes[order[red] + 1:]:
        if not _fusible(n) or _static_shape(_val(n)) != shape or _val(n).dtype != dtype:
            continue
        args = n.all_input_nodes
        if not any(a in inside for a in args) or any(a in pro for a in args):
            continue
        group = inside | pro
        if any(a not in inside and _depends_on(a, group, order, first) for a in args):
            continue
        members.append(n)
        inside.add(n)
    return members


def _to_move(fused: list[torch.fx.Node], nodes: list[torch.fx.Node], order: dict) -> list[torch.fx.Node] | None:
    """Nodes to move after the fused call (placed after its last member), or None if it cannot be placed.

    Outside users of members that sit before the last member (often ``alias``
    views AOTAutograd adds for saved tensors), and everything depending on
    them up to that point, move after the call. That is impossible when a
    member needs one of them, and unsafe when an operator in between mutates
    a tensor (reads would move past the write).
    """
    members = set(fused)
    first, last = order[fused[0]], order[fused[-1]]
    moved: set[torch.fx.Node] = set()
    for n in nodes[first + 1:last]:
        if n in members:
            if any(a in moved for a in n.all_input_nodes):
                return None
        elif _mutates(n):
            return None
        elif any(a in members or a in moved for a in n.all_input_nodes):
            moved.add(n)
    return sorted(moved, key=order.get)


def _fuse_reduction(gm: torch.fx.GraphModule, red: torch.fx.Node, kind: str, n_reduced: int) -> str | None:
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    prologue = _prologue(red, order)
    epilogue = _epilogue(red, prologue, nodes, order)
    while epilogue and _to_move(prologue + [red] + epilogue, nodes, order) is None:
        epilogue.pop()
    fused = prologue + [red] + epilogue  # in graph order
    moved = _to_move(fused, nodes, order)
    if not (prologue or epilogue) or moved is None:
        return None
    members = set(fused)
    scalars: list[float] = []
    names: dict[torch.fx.Node, str] = {}
    inputs: list[torch.fx.Node] = []
    epi_inputs: list[torch.fx.Node] = []
    epi_names: dict[torch.fx.Node, str] = {}

    lit = scalar_params(scalars, "s")

    def prologue_name(a: torch.fx.Node) -> str:
        if a not in members and a not in names:
            names[a] = f"x{len(inputs)}"
            inputs.append(a)
        return names[a]

    def epilogue_name(a: torch.fx.Node) -> str:
        if a in members:
            return names[a]
        if a not in epi_names:
            epi_names[a] = f"y{len(epi_inputs)}"
            epi_inputs.append(a)
        return epi_names[a]

    prelude, epi = [], []
    for k, node in enumerate(prologue):
        prelude.append(f"t{k} = {_expr(node, prologue_name, lit)}")
        names[node] = f"t{k}"
    value = prologue_name(red.args[0])
    names[red] = "r"
    for k, node in enumerate(epilogue, start=len(prologue)):
        epi.append(f"t{k} = {_expr(node, epilogue_name, lit)}")
        names[node] = f"t{k}"

    def used_outside(n: torch.fx.Node) -> bool:
        return any(u not in members for u in n.users)

    reduced_outs = [n for n in [red] + epilogue if used_outside(n)]
    full_outs = [n for n in prologue if used_outside(n)]
    if not reduced_outs:
        return None
    src_val, red_val = _val(red.args[0]), _val(red)
    ops = [_op_name(n) for n in fused]
    name = f"fused_reduction_{next(_counter)}"
    kernel = fused_reduction.ReductionKernel(
        name, kind, len(inputs), len(epi_inputs), value, tuple(prelude), tuple(names[n] for n in full_outs),
        tuple(epi), tuple(names[n] for n in reduced_outs), tuple(f"s{i}" for i in range(len(scalars))),
        str(red_val.dtype).replace("torch.", ""), tuple(ops))
    full_strides = [None if _val(n).is_contiguous() else tuple(int(x) for x in _val(n).stride()) for n in full_outs]
    fk = FusedReduction(name, kernel, scalars, _static_shape(src_val), n_reduced, _static_shape(red_val),
                        red_val.dtype, ops, full_strides, len(inputs))
    outputs = reduced_outs + full_outs
    with gm.graph.inserting_after(fused[-1]):  # members are in graph order
        call = gm.graph.call_function(fk, tuple(inputs + epi_inputs))
    call.meta["fused"] = fk
    call.meta["val"] = tuple(_val(o) for o in outputs)
    previous = call
    for i, out in enumerate(outputs):
        with gm.graph.inserting_after(previous):
            get = previous = gm.graph.call_function(operator.getitem, (call, i))
        get.meta.update(out.meta)
        out.replace_all_uses_with(get, delete_user_cb=lambda u: u not in members)
    for node in moved:
        previous.append(node)
        previous = node
    for node in sorted(fused, key=order.get, reverse=True):
        gm.graph.erase_node(node)
    over = "all dims" if n_reduced == len(src_val.shape) else f"the last {n_reduced} dim(s)"
    return (f"{name}: fused {len(fused)} ops ({', '.join(ops)}) -> 1 kernel: {kind} over {over}, "
            f"{len(prologue)} prologue op(s) computed inside the reduction loop, {len(epilogue)} epilogue op(s); "
            f"{len(inputs) + len(epi_inputs)} inputs, {len(outputs)} outputs")


def fuse_reductions(gm: torch.fx.GraphModule) -> list[str]:
    """Fuse every eligible reduction with its elementwise prologue and epilogue (in place)."""
    changes = []
    # a reduction is never a member of another reduction's kernel, so none of these gets erased
    for node in list(gm.graph.nodes):
        info = _reduction(node)
        if info is not None:
            change = _fuse_reduction(gm, node, *info)
            if change:
                changes.append(change)
    return changes


def _writes_in_place(gm: torch.fx.GraphModule) -> list[str]:
    """``copy_(input, fused output)`` -> the fused kernel writes that output into the input.

    Safe when the kernel reads the input, if at all, only at the element it
    writes (same shape: no broadcast, no other view of it feeds the kernel) and
    nothing after the kernel reads the input's old value.
    """
    changes = []
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.copy_.default or node.users:
            continue
        dst, src = node.args[0], node.args[1]
        if not isinstance(dst, torch.fx.Node) or dst.op != "placeholder" or not isinstance(src, torch.fx.Node):
            continue
        if src.target is not operator.getitem or len(src.users) != 1:
            continue
        call, k = src.args
        fk = call.target
        if type(fk) is not FusedKernel or k in fk.into:
            continue
        dv, sv = _val(dst), _val(src)
        if not (isinstance(dv, torch.Tensor) and isinstance(sv, torch.Tensor) and _static(dv) and _static(sv)):
            continue
        if tuple(dv.shape) != tuple(sv.shape) or dv.dtype != sv.dtype or dv.device.type != "npu":
            continue
        feeding = _ancestors(call)
        if any(u is not call and u is not node and (order[u] > order[call] or u in feeding) for u in dst.users):
            continue
        fk.into[k] = len(call.args)
        call.args = (*call.args, dst)
        gm.graph.erase_node(node)
        gm.graph.erase_node(src)
        changes.append(f"{fk.__name__}: writes output {k} into {dst.name} in place (no copy_ after it)")
    return changes


def _dropout_without_mask(gm: torch.fx.GraphModule) -> list[str]:
    """``native_dropout(x, p, True)`` whose mask nobody reads -> :func:`dropout_output`, which can fuse."""
    changes = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.native_dropout.default or len(node.args) != 3:
            continue
        x, p, train = node.args
        v = _val(x)
        if train is not True or not isinstance(p, float) or not 0 < p < 1 or not isinstance(v, torch.Tensor):
            continue
        if v.device.type != "npu" or v.dtype not in (torch.float32, torch.float64) or not _static(v):
            continue
        users = list(node.users)
        if any(u.target is not operator.getitem for u in users) or any(u.args[1] != 0 and u.users for u in users):
            continue
        outs = [u for u in users if u.args[1] == 0]
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(dropout_output, (x, p))
        new.meta["val"] = _val(outs[0]) if outs else v
        for u in users:
            u.replace_all_uses_with(new)
            gm.graph.erase_node(u)
        gm.graph.erase_node(node)
        changes.append(f"{node.name}: native_dropout with an unread mask -> dropout_output (can fuse)")
    return changes


def pointwise_fusion(gm: torch.fx.GraphModule) -> list[str]:
    """Fuse matmuls and reductions with their epilogues, then groups of elementwise operators (in place)."""
    changes = _dropout_without_mask(gm)
    if FUSE_MATMULS:
        # imported here: the matmul part builds on this module's helpers
        from .matmul_epilogue import fuse_matmul_epilogues

        changes += fuse_matmul_epilogues(gm)
    if FUSE_REDUCTIONS:
        if FUSE_ROWS:
            from .row_fusion import fuse_rows  # builds on this module's helpers

            changes += fuse_rows(gm)
        changes += fuse_reductions(gm)
    for group in _groups(gm):
        inputs, outputs, prelude, out_exprs, scalars, n_random = _emit(group)
        if not outputs:
            continue
        name = f"fused_pointwise_{next(_counter)}"
        kernel = elementwise.ElementwiseKernel(
            name, len(inputs) + n_random, tuple(out_exprs), tuple(f"s{i}" for i in range(len(scalars))),
            tuple(prelude)
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
        fk.n_random = n_random
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
    changes += _writes_in_place(gm)
    gm.graph.lint()
    gm.recompile()
    return changes

