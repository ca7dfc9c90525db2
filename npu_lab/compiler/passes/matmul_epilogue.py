"""Matmul epilogues: elementwise operators applied to a product as it is stored.

In a backward graph, ``threshold_backward(mm(g, w), relu_out, 0)`` is two
kernels: the product writes a full matrix to device memory and the ReLU
gradient reads it back. A matmul keeps each finished sum in a register before
storing it, so the elementwise chain can run right there: this part of
pointwise fusion generates a matmul kernel (:mod:`npu_lab.kernels.matmul`)
whose store applies the chain, and the intermediate never reaches memory.

The *epilogue* of ``mm`` or ``addmm`` (an ``nn.Linear``: the bias add comes
first) is found like a reduction's: elementwise nodes of the product's shape
that use its value, whose other inputs are scalars or tensors that do not
depend on the kernel (read as ``x[i, j]``, broadcast to the product's shape).
Every value used outside the kernel, the product included, is one of its
outputs. ``kernel.source`` shows the generated code.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np
import torch
import torch.fx

from ...kernels import matmul as mk
from ...ops.common import as_array, empty, launch, nbytes
from ...ops.linalg import tiles
from .pointwise_fusion import (
    _counter,
    _depends_on,
    _expr,
    _fusible,
    _op_name,
    _static_shape,
    _to_move,
    _val,
    scalar_params,
)

aten = torch.ops.aten


class FusedMatmul:
    """A matrix product with its elementwise epilogue, compiled into one numba kernel.

    Called as ``(a, b[, bias], *inputs)`` it returns the kernel's outputs
    (contiguous, each in the shape of the operator it replaces), in the order
    of :attr:`outputs`.

    Attributes:
        epilogue: the generated :class:`~npu_lab.kernels.matmul.Epilogue`.
        shape: ``(M, N, K)`` of the product.
        fused_ops: the operators the kernel replaces, in graph order.
        outputs: which value each output holds (an operator name).
    """

    __module__ = "npu_lab.compiler.passes.matmul_epilogue"

    def __init__(self, name: str, epilogue: mk.Epilogue, shape: tuple[int, int, int], dtype: torch.dtype,
                 fused_ops: Sequence[str], outputs: Sequence[str], has_bias: bool, scalars: Sequence[float],
                 input_shapes: Sequence[tuple[int, ...]], output_shapes: Sequence[tuple[int, ...]],
                 row_sums_shape: tuple[int, ...] | None = None) -> None:
        self.__name__ = self.__qualname__ = name
        self.epilogue = epilogue
        self.shape = shape
        self.dtype = dtype
        self.fused_ops = list(fused_ops)
        self.outputs = list(outputs)
        self.has_bias = has_bias
        self.input_shapes = list(input_shapes)
        self.output_shapes = list(output_shapes)
        #: the shape of a last, extra output: the row sums of ``a`` (a bias gradient), if any
        self.row_sums_shape = row_sums_shape
        np_dtype = np.float32 if dtype == torch.float32 else np.float64
        self.scalars = [np_dtype(s) for s in scalars]

    @property
    def source(self) -> str:
        """The generated numba source of this kernel (with the default register tiles)."""
        m, n, k = self.shape
        return mk.source(tiles.get((m, n, k), tiles["default"]), self.epilogue)

    def _operand(self, t: torch.Tensor, shape: tuple[int, ...]) -> np.ndarray:
        """``t`` broadcast to ``shape`` (the epilogue node's), read as an ``(M, N)`` array."""
        m, n, _ = self.shape
        if t.device.type == "npu":
            arr = as_array(t)
        else:  # a 0-dim CPU tensor, which PyTorch allows next to device tensors as a scalar
            arr = np.asarray(t.item(), dtype=np.dtype(str(t.dtype).replace("torch.", "")))
        # a view when the broadcast strides allow it (a bias row, a same-shape tensor), else a copy
        return np.broadcast_to(arr, shape).reshape(m, n)

    def __call__(self, a: torch.Tensor, b: torch.Tensor, *rest: torch.Tensor) -> tuple[torch.Tensor, ...]:
        m, n, k = self.shape
        bias = rest[0] if self.has_bias else None
        inputs = rest[1:] if self.has_bias else rest
        outs = [empty(shape, self.dtype) for shape in self.output_shapes]
        arrays = [as_array(o).reshape(m, n) for o in outs]  # contiguous: the same memory as (M, N)
        operands = [self._operand(t, s) for t, s in zip(inputs, self.input_shapes)]
        sums = None
        if self.row_sums_shape is not None:
            outs.append(empty(self.row_sums_shape, self.dtype))
            sums = as_array(outs[-1]).reshape(m)
        mk.mm(as_array(a), as_array(b), arrays[0], tiles.get((m, n, k), tiles["default"]), epilogue=self.epilogue,
              bias=None if bias is None else as_array(bias).reshape(n), extra=[*arrays[1:], *operands, *self.scalars],
              a_row_sums=sums)
        read = nbytes(a) + nbytes(b) + sum(nbytes(t) for t in rest)
        flops = 2.0 * m * n * k + m * n * (len(self.fused_ops) - 1) + (m * k if sums is not None else 0)
        launch(self.__name__, flops, read, sum(nbytes(o) for o in outs), matrix=a.dtype)
        return tuple(outs)

    def __repr__(self) -> str:
        return f"<FusedMatmul {self.__name__}: {' -> '.join(self.fused_ops)}>"


def _product(node: torch.fx.Node) -> bool:
    """Is ``node`` an ``mm``, or an ``addmm`` with a row bias (``nn.Linear``), that can take an epilogue?"""
    if node.op != "call_function" or node.target not in (aten.mm.default, aten.addmm.default) or node.kwargs:
        return False
    mats = node.args[1:3] if node.target is aten.addmm.default else node.args[:2]
    if node.target is aten.addmm.default and len(node.args) != 3:
        return False
    v = _val(node)
    if not isinstance(v, torch.Tensor) or v.dtype not in (torch.float32, torch.float64) or v.device.type != "npu":
        return False
    vals = [_val(x) for x in mats]
    if not all(isinstance(x, torch.Tensor) and _static_shape(x) is not None and x.dtype == v.dtype for x in vals):
        return False
    if _static_shape(v) is None or 0 in (*v.shape, vals[0].shape[1]):
        return False
    if node.target is aten.addmm.default:
        bias = _val(node.args[0])
        n = v.shape[1]
        return isinstance(bias, torch.Tensor) and bias.dtype == v.dtype and tuple(bias.shape) in ((n,), (1, n))
    return True


_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def _find_epilogue(prod: torch.fx.Node, nodes: list[torch.fx.Node], order: dict
                   ) -> tuple[list[torch.fx.Node], dict[torch.fx.Node, torch.fx.Node]]:
    """The epilogue of ``prod``: elementwise nodes after it that use its value.

    A contiguous product stays contiguous through ``view``s (``nn.Linear`` on a
    3-D input is ``view -> addmm -> view``), and a contiguous value of the
    product's size is the same run of memory whatever its shape, so the
    epilogue is found through views: ``views`` maps each view of a kernel
    value to the value it reinterprets. Each epilogue node must be contiguous,
    of the product's size, and take kernel values only in its own shape; its
    other tensor inputs are read at the same element (broadcast to its shape).
    """
    pv = _val(prod)
    size = pv.numel()
    inside: set[torch.fx.Node] = {prod}
    views: dict[torch.fx.Node, torch.fx.Node] = {}
    members: list[torch.fx.Node] = []
    first = order[prod]
    for n in nodes[order[prod] + 1:]:
        v = _val(n)
        if not isinstance(v, torch.Tensor) or _static_shape(v) is None:
            continue
        if n.op == "call_function" and n.target in _VIEWS and n.args[0] in inside and v.is_contiguous():
            views[n] = n.args[0]
            inside.add(n)
            continue
        if not _fusible(n) or v.numel() != size or not v.is_contiguous() or v.dtype != pv.dtype:
            continue
        args = n.all_input_nodes
        if not any(a in inside for a in args):
            continue
        if any(a in inside and tuple(_val(a).shape) != tuple(v.shape) for a in args):
            continue
        if any(a not in inside and _depends_on(a, inside, order, first) for a in args):
            continue
        members.append(n)
        inside.add(n)
    return members, views


def _fuse(gm: torch.fx.GraphModule, prod: torch.fx.Node) -> str | None:
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    epilogue, views = _find_epilogue(prod, nodes, order)

    def placed(epi: list[torch.fx.Node]) -> list[torch.fx.Node]:  # the kernel's nodes, in graph order
        last = order[epi[-1]]
        return sorted([prod, *epi, *(w for w in views if order[w] < last)], key=order.get)

    while epilogue and _to_move(placed(epilogue), nodes, order) is None:
        epilogue.pop()
    if not epilogue:
        return None
    fused = placed(epilogue)
    moved = _to_move(fused, nodes, order)
    members = set(fused)
    views = {w: src for w, src in views.items() if w in members}

    def root(n: torch.fx.Node) -> torch.fx.Node:  # the kernel value a view reinterprets
        while n in views:
            n = views[n]
        return n

    inputs: list[tuple[torch.fx.Node, tuple[int, ...]]] = []  # (input, shape it is read in)
    names: dict[torch.fx.Node, str] = {prod: "v"}
    scalars: list[float] = []
    reading: list[tuple[int, ...]] = [()]  # the shape of the node being emitted

    lit = scalar_params(scalars, "p")

    def name_of(a: torch.fx.Node) -> str:
        if a in members:
            return names[root(a)]
        key = (a, reading[0])
        if key not in inputs:
            inputs.append(key)
        return f"e{inputs.index(key)}[i, j]"

    has_bias = prod.target is aten.addmm.default
    body = ["v = v + bias[j]"] if has_bias else []
    for k, node in enumerate(epilogue):
        reading[0] = tuple(_val(node).shape)
        body.append(f"u{k} = {_expr(node, name_of, lit)}")
        names[node] = f"u{k}"
    # kernel values used outside the kernel (directly, or through a view that must be re-made)
    used = {root(n) for n in fused if any(u not in members for u in n.users)}
    outputs = [n for n in [prod, *epilogue] if n in used]
    m, n = _val(prod).shape
    k = _val(prod.args[2] if has_bias else prod.args[1]).shape[0]
    params = tuple([f"out{q}" for q in range(1, len(outputs))] + [f"e{q}" for q in range(len(inputs))]
                   + [f"p{q}" for q in range(len(scalars))])
    ops = [_op_name(x) for x in [prod, *epilogue]]
    name = f"fused_matmul_{next(_counter)}"
    ep = mk.Epilogue("_".join(ops)[:60], tuple(body), tuple(names[o] for o in outputs), params)
    fk = FusedMatmul(name, ep, (m, n, k), _val(prod).dtype, ops, [_op_name(o) for o in outputs], has_bias,
                     scalars, [shape for _, shape in inputs], [tuple(_val(o).shape) for o in outputs])
    args = (prod.args[1], prod.args[2], prod.args[0]) if has_bias else (prod.args[0], prod.args[1])
    with gm.graph.inserting_after(fused[-1]):
        call = gm.graph.call_function(fk, (*args, *(a for a, _ in inputs)))
    call.meta["fused"] = fk
    call.meta["val"] = tuple(_val(o) for o in outputs)
    previous = call
    got: dict[torch.fx.Node, torch.fx.Node] = {}
    for i, out in enumerate(outputs):
        with gm.graph.inserting_after(previous):
            got[out] = previous = gm.graph.call_function(operator.getitem, (call, i))
        got[out].meta.update(out.meta)
    for node in fused:  # views of kernel values used outside are re-made after the call
        if node in views and any(u not in members for u in node.users):
            with gm.graph.inserting_after(previous):
                previous = gm.graph.call_function(aten.view.default, (got[root(node)], list(_val(node).shape)))
            previous.meta.update(node.meta)
            got[node] = previous
    for node, new in got.items():
        node.replace_all_uses_with(new, delete_user_cb=lambda u: u not in members)
    for node in moved or ():
        previous.append(node)
        previous = node
    for node in sorted(fused, key=order.get, reverse=True):
        gm.graph.erase_node(node)
    return (f"{name}: fused {len(epilogue) + 1} ops ({', '.join(ops)}) -> 1 kernel: a {m}x{k} @ {k}x{n} product "
            f"whose {len(epilogue)} epilogue op(s) run as each value is stored; "
            f"{len(inputs)} extra input(s), {len(outputs)} output(s)")


def _transposed(node: object) -> torch.fx.Node | None:
    """``g`` if ``node`` is a 2-D transpose of ``g``, else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    if node.target is aten.t.default or (node.target is aten.permute.default and list(node.args[1]) == [1, 0]):
        return node.args[0]
    return None


def _fuse_bias_gradient(gm: torch.fx.GraphModule, total: torch.fx.Node) -> str | None:
    """``sum(g, [0])`` next to ``mm(g.T, x)``: the product's kernel sums the rows of ``g.T`` too."""
    if total.target is not aten.sum.dim_IntList or total.kwargs or len(total.args) < 2:
        return None
    g, dims = total.args[0], total.args[1]
    gv, tv = _val(g), _val(total)
    if not (isinstance(gv, torch.Tensor) and isinstance(tv, torch.Tensor) and gv.dim() == 2
            and list(dims) in ([0], [-2]) and tv.dtype == gv.dtype and _static_shape(gv) is not None):
        return None
    prods = [u for t in g.users if _transposed(t) is g for u in t.users
             if u.op == "call_function" and u.target is aten.mm.default and not u.kwargs and u.args[0] is t
             and _product(u)]
    if not prods:
        return None
    prod = prods[0]
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    fused = sorted([prod, total], key=order.get)
    moved = _to_move(fused, nodes, order)
    if moved is None or (order[total] < order[prod] and any(a in moved for a in prod.all_input_nodes)):
        return None
    m, n = _val(prod).shape
    k = _val(prod.args[1]).shape[0]
    ops = ["mm", "sum.dim_IntList"]
    name = f"fused_matmul_{next(_counter)}"
    fk = FusedMatmul(name, mk.Epilogue("none"), (m, n, k), gv.dtype, ops, ["mm", "sum.dim_IntList"], False, [], [],
                     [tuple(_val(prod).shape)], row_sums_shape=tuple(tv.shape))
    with gm.graph.inserting_after(fused[-1]):
        call = gm.graph.call_function(fk, tuple(prod.args))
    call.meta["fused"] = fk
    call.meta["val"] = (_val(prod), tv)
    previous = call
    for i, out in enumerate((prod, total)):
        with gm.graph.inserting_after(previous):
            get = previous = gm.graph.call_function(operator.getitem, (call, i))
        get.meta.update(out.meta)
        out.replace_all_uses_with(get)
    for node in moved:
        previous.append(node)
        previous = node
    gm.graph.erase_node(total)
    gm.graph.erase_node(prod)
    return (f"{name}: fused 2 ops (mm, sum.dim_IntList) -> 1 kernel: the {m}x{k} @ {k}x{n} product g.T @ x "
            f"also sums g over its rows (a bias gradient) in the same launch")


def fuse_matmul_epilogues(gm: torch.fx.GraphModule) -> list[str]:
    """Fuse every ``mm``/``addmm`` with its elementwise epilogue (in place); returns the changes."""
    changes = []
    for node in list(gm.graph.nodes):
        if _product(node):
            change = _fuse(gm, node)
            if change:
                changes.append(change)
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is aten.sum.dim_IntList:
            change = _fuse_bias_gradient(gm, node)
            if change:
                changes.append(change)
    return changes
