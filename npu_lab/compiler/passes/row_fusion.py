"""Row fusion: reductions over a row, and the elementwise work that uses them, in one kernel.

``x * rsqrt(mean(x * x, -1, keepdim=True) + eps) * w`` (RMSNorm) needs the row's statistic
*before* it can compute any element of the result. A plain fused reduction
(:mod:`pointwise_fusion`) stops at the statistic, so RMSNorm is two kernels, and the second reads
``x`` again from memory. Inductor makes one kernel per row (a *persistent reduction*); so does
this pass, with a :class:`~npu_lab.kernels.row_kernel.RowKernel`.

A group starts at a reduction over the last dimension, with its elementwise prologue. Later
operators join while they use the group and have the row's shape (full-size nodes), the reduced
shape (per-row values such as ``mean + eps``), or reduce a full-size member over the last dimension
again (softmax's sum after its max, layer norm's variance after its mean). Full-size values are
recomputed in every walk over the row that needs them; each reduction adds one walk; the outputs
are written in the last walk. A group becomes a row kernel only if some full-size node uses a
per-row value (otherwise the plain fused reduction is as good).

``aten._softmax`` and ``aten.native_layer_norm`` over the last dimension are decomposed first
when fusion can gain from it, so ``softmax(scores * 0.125 + mask)`` is one kernel, and a layer norm
whose statistics nobody reads does not write them.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence

import numpy as np
import torch
import torch.fx

from ...kernels import row_kernel
from ...kernels.elementwise import Operand
from ...ops.common import empty, empty_strided, launch, nbytes, operand
from .pointwise_fusion import (
    FusedKernel,
    _depends_on,
    _expr,
    _fusible,
    _host_operand,
    _mutates,
    _op_name,
    _prologue,
    _reduction,
    _static,
    _to_move,
    _val,
    scalar_params,
)

aten = torch.ops.aten
_counter = itertools.count()


class FusedRows(FusedKernel):
    """A group of row reductions and elementwise operators compiled into one :class:`RowKernel`.

    Called with the group's external inputs, it returns the full-size outputs followed by the
    per-row outputs.

    Attributes:
        kernel: the :class:`~npu_lab.kernels.row_kernel.RowKernel` (``kernel.source(pattern)``).
        full_shape: the iteration space (rows are its last dimension).
        input_shapes: each input's shape as the kernel reads it (broadcast to the full shape).
        last_pattern: the row-stride pattern of the last call.
    """

    __module__ = "npu_lab.compiler.passes.row_fusion"

    def __init__(self, name: str, kernel: row_kernel.RowKernel, scalars: Sequence[float],
                 full_shape: tuple[int, ...], dtype: torch.dtype, fused_ops: Sequence[str],
                 input_spaces: Sequence[tuple[int, ...]], full_strides: Sequence[tuple[int, ...] | None],
                 row_shapes: Sequence[tuple[int, ...]], flops: int) -> None:
        super().__init__(name, kernel, scalars, full_shape, dtype, fused_ops)  # type: ignore[arg-type]
        self.full_shape = tuple(full_shape)
        self.input_spaces = list(input_spaces)
        self.full_strides = list(full_strides)
        self.row_shapes = [tuple(s) for s in row_shapes]
        self.flops = flops
        self.last_pattern = ""

    @property
    def source(self) -> str:
        """The generated source (for the stride pattern of the last call, or all-contiguous)."""
        return self.kernel.source(self.last_pattern or "1" * (self.kernel.n_inputs + len(self.full_strides)))

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        shape = self.full_shape
        fulls = [empty(shape, self.dtype) if st is None else empty_strided(shape, st, self.dtype)
                 for st in self.full_strides]
        rows = [empty(s, self.dtype) for s in self.row_shapes]
        ins = [_in_space(t, space, shape) for t, space in zip(inputs, self.input_spaces)]
        self.last_pattern = self.kernel.run(shape, ins, [operand(t, shape) for t in fulls],
                                            [_in_space(t, t.shape, shape) for t in rows], self.scalars)
        launch(self.__name__, self.flops, sum(nbytes(t) for t in dict.fromkeys(inputs)),
               sum(nbytes(t) for t in (*fulls, *rows)))
        return (*fulls, *rows)

    def __repr__(self) -> str:
        return f"<FusedRows {self.__name__}: {' -> '.join(self.fused_ops)}>"


def _in_space(t: torch.Tensor, space: Sequence[int], shape: Sequence[int]) -> Operand:
    """``t`` broadcast to ``space`` (the full shape, or a per-row shape), then seen over ``shape``."""
    op = _host_operand(t, space)
    st = tuple(op.strides)
    if len(space) == len(shape) - 1:  # the row dimension was reduced away
        st = st + (0,)
    elif tuple(space) != tuple(shape):  # keepdim: one value per row
        st = st[:-1] + (0,)
    if len(st) != len(shape):  # a 1-element CPU scalar
        st = (0,) * len(shape)
    return Operand(op.flat, st, op.offset)


class _Group:
    """The members of one row kernel and what each is (full-size, per-row, or a reduction)."""

    def __init__(self, red: torch.fx.Node, kind: str) -> None:
        src = _val(red.args[0])
        self.shape = tuple(int(d) for d in src.shape)
        self.dtype = src.dtype
        self.keep = self.shape[:-1] + (1,)
        self.drop = self.shape[:-1]
        self.members: list[torch.fx.Node] = []
        self.cls: dict[torch.fx.Node, str] = {}  # "full", "row" or "red"
        self.level: dict[torch.fx.Node, int] = {}
        self.kind: dict[torch.fx.Node, str] = {}
        self.seed = red
        self.seed_kind = kind

    def level_of(self, n: object) -> int:
        return self.level.get(n, 0) if isinstance(n, torch.fx.Node) else 0

    def classify(self, n: torch.fx.Node) -> str | None:
        """What ``n`` would be in this group, or None if it cannot join."""
        v = _val(n)
        if not isinstance(v, torch.Tensor) or v.dtype != self.dtype:
            return None
        info = _reduction(n, contiguous=False)
        if info is not None:
            src = n.args[0]
            ok = (info[1] == 1 and self.cls.get(src) == "full" or n is self.seed) and len(self.shape) >= 1
            return "red" if ok and tuple(v.shape) in (self.keep, self.drop) else None
        if not _fusible(n):
            return None
        shape = tuple(v.shape)
        inputs = [a for a in n.all_input_nodes if a in self.cls]
        if shape == self.shape:
            # a per-row value broadcasts along the row only in its keepdim form
            if any(self.cls[a] != "full" and tuple(_val(a).shape) != self.keep for a in inputs):
                return None
            return "full"
        if shape in (self.keep, self.drop):
            if any(self.cls[a] == "full" or tuple(_val(a).shape) != shape for a in inputs):
                return None
            return "row"
        return None

    def add(self, n: torch.fx.Node, cls: str) -> None:
        self.members.append(n)
        self.cls[n] = cls
        if cls == "red":
            self.level[n] = self.level_of(n.args[0]) + 1
            self.kind[n] = _reduction(n, contiguous=False)[0]
        else:
            self.level[n] = max([self.level_of(a) for a in n.all_input_nodes] + [0])

    def needs_rows(self) -> bool:
        """Does a full-size member use a per-row value (the case a plain fused reduction cannot do)?"""
        return any(c == "full" and any(self.cls.get(a) in ("row", "red") for a in n.all_input_nodes)
                   for n, c in self.cls.items())


def _build(red: torch.fx.Node, kind: str, nodes: list[torch.fx.Node], order: dict) -> _Group | None:
    group = _Group(red, kind)
    if len(group.shape) < 1 or group.shape[-1] < 2 or not _static(_val(red.args[0])):
        return None
    for n in _prologue(red, order):
        group.add(n, "full")
    group.add(red, "red")
    first = order[group.members[0]]
    for n in nodes[order[red] + 1:]:
        if not any(a in group.cls for a in n.all_input_nodes):
            continue
        cls = group.classify(n)
        if cls is None:
            continue
        if any(a not in group.cls and _depends_on(a, set(group.members), order, first) for a in n.all_input_nodes):
            continue
        group.add(n, cls)
    # the group runs at its last member: members that cannot move there are dropped from the end
    while group.members and _to_move(sorted(group.members, key=order.get), nodes, order) is None:
        last = group.members.pop()
        for d in (group.cls, group.level, group.kind):
            d.pop(last, None)
    if group.seed not in group.cls or not group.needs_rows():
        return None
    return group


def _emit(gm: torch.fx.GraphModule, group: _Group, nodes: list[torch.fx.Node], order: dict) -> str:
    members = sorted(group.members, key=order.get)
    mset = set(members)
    scalars: list[float] = []
    lit = scalar_params(scalars, "s")
    inputs: list[torch.fx.Node] = []
    spaces: list[tuple[int, ...]] = []
    names: dict[torch.fx.Node, str] = {}
    key_of: dict[tuple[torch.fx.Node, tuple], str] = {}

    def name_for(space: tuple[int, ...]):
        def name_of(a: torch.fx.Node) -> str:
            if a in mset:
                return names[a]
            key = (a, space)
            if key not in key_of:
                # per-row inputs are read once per row (``v_in3``), full-size ones per element (``x3``)
                key_of[key] = f"x{len(inputs)}" if space == group.shape else f"v_in{len(inputs)}"
                inputs.append(a)
                spaces.append(space)
            return key_of[key]
        return name_of

    exprs: dict[torch.fx.Node, str] = {}
    for k, n in enumerate(members):
        names[n] = f"t{k}"
    for n in members:
        c = group.cls[n]
        if c == "red":
            exprs[n] = names[n.args[0]] if n.args[0] in mset else name_for(group.shape)(n.args[0])
        else:
            space = group.shape if c == "full" else tuple(_val(n).shape)
            exprs[n] = _expr(n, name_for(space), lit)

    def full_closure(targets: Sequence[object]) -> list[torch.fx.Node]:
        """The full-size members needed to compute ``targets`` per element, in graph order."""
        need: set[torch.fx.Node] = set()
        stack = [t for t in targets if isinstance(t, torch.fx.Node)]
        while stack:
            n = stack.pop()
            if n in need or group.cls.get(n) != "full":
                continue
            need.add(n)
            stack.extend(n.all_input_nodes)
        return sorted(need, key=order.get)

    def reads(body_nodes: Sequence[torch.fx.Node], extra: Sequence[object] = ()) -> tuple[int, ...]:
        used = set()
        for n in list(body_nodes) + [e for e in extra if isinstance(e, torch.fx.Node)]:
            for a in (n.all_input_nodes if n in mset else [n]):
                if a not in mset and (a, group.shape) in key_of:
                    used.add(int(key_of[(a, group.shape)][1:]))
        return tuple(sorted(used))

    def used_outside(n: torch.fx.Node) -> bool:
        return any(u not in mset for u in n.users)

    rows_by_level: dict[int, list[torch.fx.Node]] = {}
    for n in members:
        if group.cls[n] == "row":
            rows_by_level.setdefault(group.level[n], []).append(n)
    before = tuple(f"{names[n]} = {exprs[n]}" for n in rows_by_level.get(0, []))
    phases = []
    for level in range(1, max(group.level[n] for n in members if group.cls[n] == "red") + 1):
        reds = [n for n in members if group.cls[n] == "red" and group.level[n] == level]
        srcs = [n.args[0] for n in reds]
        body_nodes = full_closure(srcs)
        phases.append(row_kernel.Phase(
            body=tuple(f"{names[n]} = {exprs[n]}" for n in body_nodes),
            reads=reads(body_nodes, [s for s in srcs if s not in mset]),
            kinds=tuple(group.kind[n] for n in reds), values=tuple(exprs[n] for n in reds),
            results=tuple(names[n] for n in reds),
            after=tuple(f"{names[n]} = {exprs[n]}" for n in rows_by_level.get(level, []))))
    full_outs = [n for n in members if group.cls[n] == "full" and used_outside(n)]
    row_outs = [n for n in members if group.cls[n] != "full" and used_outside(n)]
    final_nodes = full_closure(full_outs)
    ops = [_op_name(n) for n in members]
    name = f"fused_rows_{next(_counter)}"
    kernel = row_kernel.RowKernel(
        name, len(inputs), before, tuple(phases), tuple(f"{names[n]} = {exprs[n]}" for n in final_nodes),
        reads(final_nodes), tuple(names[n] for n in full_outs), tuple(names[n] for n in row_outs),
        tuple(f"s{i}" for i in range(len(scalars))), str(group.dtype).replace("torch.", ""), tuple(ops))
    full_strides = []
    for n in full_outs:
        v = _val(n)
        st = tuple(int(x) for x in v.stride())
        full_strides.append(None if v.is_contiguous() or st[-1] == 0 else st)
    numel = int(np.prod(group.shape))
    n_rows = numel // group.shape[-1]
    flops = sum(numel if group.cls[n] != "row" else n_rows for n in members)
    fk = FusedRows(name, kernel, scalars, group.shape, group.dtype, ops, spaces, full_strides,
                   [tuple(int(d) for d in _val(n).shape) for n in row_outs], flops)
    moved = _to_move(members, nodes, order)
    outputs = full_outs + row_outs
    with gm.graph.inserting_after(members[-1]):
        call = gm.graph.call_function(fk, tuple(inputs))
    call.meta["fused"] = fk
    call.meta["val"] = tuple(_val(o) for o in outputs)
    previous = call
    for i, out in enumerate(outputs):
        with gm.graph.inserting_after(previous):
            get = previous = gm.graph.call_function(operator.getitem, (call, i))
        get.meta.update(out.meta)
        out.replace_all_uses_with(get, delete_user_cb=lambda u: u not in mset)
    for node in moved or []:
        previous.append(node)
        previous = node
    for node in reversed(members):
        gm.graph.erase_node(node)
    n_walks = len(phases) + (1 if full_outs else 0)
    return (f"{name}: fused {len(members)} ops ({', '.join(ops)}) -> 1 row kernel: {len(phases)} reduction "
            f"walk(s) and {n_walks} walk(s) in all over each row of {group.shape[-1]}; "
            f"{len(inputs)} inputs, {len(outputs)} outputs")


# --- decompositions that let softmax and layer norm join a row kernel ------------------------

def _call(gm: torch.fx.GraphModule, target, *args) -> torch.fx.Node:
    """A new node, with its ``val`` computed by running ``target`` on its inputs' fake values."""
    node = gm.graph.call_function(target, args)
    vals = torch.fx.node.map_arg(node.args, _val)
    with torch._guards.detect_fake_mode(vals):
        node.meta["val"] = target(*vals)
    return node


def _last_dim(v: torch.Tensor, dim: int) -> bool:
    return v.dim() >= 1 and dim % v.dim() == v.dim() - 1


def _plain(v: object) -> bool:
    """A float fake tensor on npu, static shape, rows of at least 2 elements."""
    return (isinstance(v, torch._subclasses.FakeTensor) and v.device.type == "npu"
            and v.dtype in (torch.float32, torch.float64) and _static(v) and v.dim() >= 1 and v.numel() > 0
            and v.shape[-1] >= 2)


def _fusible_producer(node: torch.fx.Node) -> bool:
    src = node.args[0]
    return isinstance(src, torch.fx.Node) and _fusible(src)


def _decompose(gm: torch.fx.GraphModule) -> list[str]:
    changes = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is aten._softmax.default:
            x, dim, half = node.args
            # alone, the shipped softmax kernel is one kernel already; decompose when a neighbour can join
            if half or not _plain(_val(x)) or not _last_dim(_val(x), dim) or not (
                    _fusible_producer(node) or any(_fusible(u) for u in node.users)):
                continue
            with gm.graph.inserting_before(node):
                m = _call(gm, aten.amax.default, x, [-1], True)
                e = _call(gm, aten.exp.default, _call(gm, aten.sub.Tensor, x, m))
                s = _call(gm, aten.sum.dim_IntList, e, [-1], True)
                out = _call(gm, aten.div.Tensor, e, s)
            out.meta.update({k: v for k, v in node.meta.items() if k != "val"})
            node.replace_all_uses_with(out)
            gm.graph.erase_node(node)
            changes.append(f"{node.name}: _softmax over the last dim decomposed (amax, sub, exp, sum, div)")
        elif node.target is aten.native_layer_norm.default:
            x, shape, w, b, eps = node.args
            if len(shape) != 1 or not _plain(_val(x)) or _mutates(node):
                continue
            if any(u.target is not operator.getitem for u in node.users):
                continue
            # decompose when the statistics are not needed (the kernel then does not write them)
            # or a neighbour can join
            stats_used = any(u.args[1] in (1, 2) and u.users for u in node.users)
            consumer = any(_fusible(v) for u in node.users if u.args[1] == 0 for v in u.users)
            if stats_used and not (_fusible_producer(node) or consumer):
                continue
            with gm.graph.inserting_before(node):
                mean = _call(gm, aten.mean.dim, x, [-1], True)
                d = _call(gm, aten.sub.Tensor, x, mean)
                var = _call(gm, aten.mean.dim, _call(gm, aten.mul.Tensor, d, d), [-1], True)
                rstd = _call(gm, aten.rsqrt.default, _call(gm, aten.add.Tensor, var, eps))
                y = _call(gm, aten.mul.Tensor, d, rstd)
                if w is not None:
                    y = _call(gm, aten.mul.Tensor, y, w)
                if b is not None:
                    y = _call(gm, aten.add.Tensor, y, b)
            for u in list(node.users):
                u.replace_all_uses_with((y, mean, rstd)[u.args[1]])
                gm.graph.erase_node(u)
            gm.graph.erase_node(node)
            changes.append(f"{node.name}: native_layer_norm over the last dim decomposed "
                           "(mean, sub, mul, mean, add, rsqrt, mul, mul, add)")
    return changes


def fuse_rows(gm: torch.fx.GraphModule) -> list[str]:
    """Decompose row softmax / layer norm where fusion gains, then fuse every row group (in place)."""
    changes = _decompose(gm)
    tried: set[str] = set()
    while True:
        nodes = list(gm.graph.nodes)
        order = {n: i for i, n in enumerate(nodes)}
        for node in nodes:
            if node.name in tried:
                continue
            tried.add(node.name)
            info = _reduction(node, contiguous=False)
            if info is None or info[1] != 1:
                continue
            group = _build(node, info[0], nodes, order)
            if group is not None:
                changes.append(_emit(gm, group, nodes, order))
                break
        else:
            return changes
