"""Layout pass: run chains of convolutions channels-last (NHWC) where it pays.

PyTorch tensors of images are NCHW: one plane per channel. The NPU's NCHW
convolution (im2col + matmul, :mod:`npu_lab.ops.conv`) computes its product
as a ``(pixels, channels)`` matrix, which is NHWC order, and then has to
transpose it into the NCHW output: one extra pass over every convolution's
output. The NHWC kernels (:mod:`npu_lab.ops.layout`) write the product
straight into the output, and their im2col copies contiguous channel runs.
Switching layout is not free either, so the pass works on whole *chains*.

What the pass does, on inference graphs (``kind == "inference"``; the backend
runs it only there, since forward graphs of training save activations for
the backward and would need extra conversions):

1. **Find chains.** A *member* is a 2-D convolution (``aten.convolution``,
   not transposed, or the fused ``npu.conv_bn_relu``), or an operator that
   does not care about layout and whose tensor inputs are all members:
   elementwise operators (``relu``, ``add`` of two same-shape tensors, ...)
   and ``max_pool2d`` whose indices are unused. Members connected through
   their inputs form one chain (a connected component). Unary elementwise
   operators at the end of a chain stay out of it: running them in NHWC
   would not make the exit conversion any smaller, and in NCHW they can
   still fuse with the operators after the chain.
2. **Decide where it pays** (the heuristic). For each chain:

   * *saved*: every convolution in NHWC skips the transpose of its output,
     so the chain saves the bytes of all its convolution outputs;
   * *cost*: every value that leaves the chain (used by a non-member, or a
     graph output) must be converted back to contiguous NCHW, one copy of
     that value. Entering the chain costs no copy: the first convolution
     reads its NCHW input through a ``permute(0, 2, 3, 1)`` view, gathering
     through the strides in its im2col.

   The chain is converted when *saved > cost*. Two convolutions in a row
   pay (two transposes saved, one conversion); a lone convolution whose
   output leaves at once does not (it would trade one full-size transpose
   for one full-size conversion); a lone convolution followed by a 2x2 max
   pool does (the conversion happens on the pooled, 4x smaller tensor).
3. **Rewrite each convolution** of a converted chain to
   ``permute(0, 2, 3, 1) -> npu.conv2d_nhwc -> permute(0, 3, 1, 2)``
   (``npu.conv_bn_relu_nhwc`` for the fused one), then **sink the permutes
   through the layout-free members**: ``relu(permute(y, [0, 3, 1, 2]))``
   becomes ``permute(relu(y), [0, 3, 1, 2])`` (a max pool becomes
   ``npu.max_pool2d_nhwc``), so the members now run in NHWC.
4. **Cancel inverse pairs**: ``permute(permute(y, [0, 3, 1, 2]), [0, 2, 3, 1])``
   is ``y``. What remains is one permute view where the chain starts and one
   ``permute(0, 3, 1, 2)`` + ``clone(contiguous)`` (the real conversion)
   at each exit, so a chain converts layout once on the way in and once on
   the way out.

On the simulated clock: the cost model charges each convolution for its im2col
matrix and, in NCHW, for writing and re-reading the matmul result to transpose
it (:func:`npu_lab.ops.conv.conv_traffic`), so the transposes a chain skips show
up as less device time, against the exit copies it adds
(``benchmarks/layout.py`` measures both simulated and wall time).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
import torch.fx
from torch._guards import detect_fake_mode

aten = torch.ops.aten

TO_NHWC = [0, 2, 3, 1]
TO_NCHW = [0, 3, 1, 2]

#: Elementwise operators that compute the same thing in any layout. They move into
#: NHWC when every tensor operand has the output's full 4-D shape (no broadcasting).
ELEMENTWISE = {
    aten.relu.default, aten.sigmoid.default, aten.tanh.default, aten.gelu.default, aten.silu.default,
    aten.hardtanh.default, aten.leaky_relu.default, aten.clamp.default, aten.clamp_min.default,
    aten.clamp_max.default, aten.neg.default, aten.abs.default, aten.exp.default,
    aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor,
    aten.add.Scalar, aten.sub.Scalar, aten.mul.Scalar, aten.div.Scalar,
    aten.maximum.default, aten.minimum.default,
}

_FLOATS = (torch.float32, torch.float64)


def _val(node: object) -> torch.Tensor | None:
    v = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _nbytes(node: torch.fx.Node) -> int:
    v = _val(node)
    return v.numel() * v.element_size() if v is not None else 0


def _is_image(node: object) -> bool:
    """A 4-D floating-point npu tensor value (with a recorded shape)."""
    v = _val(node)
    return v is not None and v.dim() == 4 and v.dtype in _FLOATS and v.device.type == "npu"


def _static(node: object) -> bool:
    """Is the value's shape made of plain integers (not symbols of a ``dynamic=True`` compile)?"""
    v = _val(node)
    return v is not None and all(isinstance(s, int) for s in v.shape)


def _conv_input(node: torch.fx.Node) -> tuple[torch.fx.Node | None, str]:
    """(input node, "") if ``node`` is a convolution the NHWC kernels run, else (None, why not)."""
    if node.target == aten.convolution.default:
        if len(node.args) != 9:
            return None, "unexpected convolution arguments"
        x, w, _b, stride, padding, dilation, transposed, _output_padding, _groups = node.args
        if transposed:
            return None, "transposed convolution (no NHWC kernel)"
        if len(stride) != 2 or not _is_image(node) or not _is_image(x):
            return None, "not a 2-D floating-point npu convolution"
        if _val(w).dtype != _val(x).dtype:
            return None, "mixed dtypes"
    elif node.target == torch.ops.npu.conv_bn_relu.default:
        x = node.args[0]
        if not (_is_image(node) and _is_image(x)):
            return None, "not a floating-point npu convolution"
    else:
        return None, "not a convolution"
    if not (_static(x) and _static(node)):
        return None, "symbolic (dynamic) shapes: the pass needs sizes to decide"
    return x, ""


def _pool_getitems(node: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The ``[0]`` getitems of a max pool whose indices nobody uses, else None."""
    if node.target != aten.max_pool2d_with_indices.default:
        return None
    users = list(node.users)
    if not all(u.op == "call_function" and u.target is operator.getitem and (u.args[1] == 0 or not u.users)
               for u in users):
        return None
    values = [u for u in users if u.args[1] == 0]
    return values or None


def _is_layout_free(node: torch.fx.Node, members: set[torch.fx.Node]) -> bool:
    """An elementwise node whose tensor operands are all members of the output's exact shape."""
    if node.target not in ELEMENTWISE or not _is_image(node):
        return False
    shape = tuple(_val(node).shape)
    operands = node.all_input_nodes
    if not operands:
        return False
    for a in operands:
        if a not in members or _val(a) is None or tuple(_val(a).shape) != shape:
            return False
    return all(not isinstance(v, (list, tuple)) for v in (*node.args, *node.kwargs.values()))


@dataclass
class Chain:
    """A connected group of members: convolutions and the layout-free operators between them."""

    nodes: list[torch.fx.Node] = field(default_factory=list)

    @property
    def convs(self) -> list[torch.fx.Node]:
        return [n for n in self.nodes if n.target in (aten.convolution.default, torch.ops.npu.conv_bn_relu.default)]

    def exits(self, members: set[torch.fx.Node]) -> list[torch.fx.Node]:
        """Member values some non-member (or the graph output) reads in NCHW."""
        out = []
        for n in self.nodes:
            if n.target == aten.max_pool2d_with_indices.default:
                continue  # its value is the getitem, itself a member
            if any(not _reads_nhwc(u, n, members) for u in n.users):
                out.append(n)
        return out

    def saved_bytes(self) -> int:
        return sum(_nbytes(c) for c in self.convs)

    def cost_bytes(self, members: set[torch.fx.Node]) -> int:
        return sum(_nbytes(e) for e in self.exits(members))


def _reads_nhwc(user: torch.fx.Node, value: torch.fx.Node, members: set[torch.fx.Node]) -> bool:
    """Will ``user`` read ``value`` in NHWC after the rewrite (no conversion needed)?"""
    if user not in members:
        return False
    if user.target in (aten.convolution.default, torch.ops.npu.conv_bn_relu.default,
                       aten.max_pool2d_with_indices.default):
        # only the image operand is NHWC; the value used as a weight etc. stays NCHW
        return user.args[0] is value and value not in user.args[1:] and value not in user.kwargs.values()
    return True


def find_chains(gm: torch.fx.GraphModule) -> tuple[list[Chain], set[torch.fx.Node], list[str]]:
    """The graph's chains, the set of all members, and why some convolutions are not members."""
    members: set[torch.fx.Node] = set()
    skipped: list[str] = []
    parent: dict[torch.fx.Node, torch.fx.Node] = {}

    def find(n: torch.fx.Node) -> torch.fx.Node:
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    def join(a: torch.fx.Node, b: torch.fx.Node) -> None:
        parent[find(a)] = find(b)

    def add(n: torch.fx.Node, *linked: torch.fx.Node) -> None:
        members.add(n)
        parent[n] = n
        for m in linked:
            if m in members:
                join(n, m)

    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target in (aten.convolution.default, torch.ops.npu.conv_bn_relu.default):
            x, why = _conv_input(node)
            if x is None:
                skipped.append(f"{node.name}: left NCHW: {why}")
                continue
            add(node, x)
        elif node.target == aten.max_pool2d_with_indices.default:
            getitems = _pool_getitems(node)
            if getitems is not None and node.args[0] in members and _is_image(getitems[0]):
                add(node, node.args[0])
                for g in getitems:
                    add(g, node)
        elif _is_layout_free(node, members):
            add(node, *node.all_input_nodes)
    # Trim elementwise tails: a unary elementwise member nobody in the chain reads would leave
    # NHWC right after it runs, so converting it saves nothing; left in NCHW it can still fuse
    # with what follows (e.g. relu + mean into one reduction kernel).
    for node in reversed(gm.graph.nodes):
        if (node in members and node.target in ELEMENTWISE and len(node.all_input_nodes) == 1
                and not any(u in members for u in node.users)):
            members.discard(node)
    groups: dict[torch.fx.Node, Chain] = {}
    for node in gm.graph.nodes:  # graph order inside each chain
        if node in members:
            groups.setdefault(find(node), Chain()).nodes.append(node)
    return list(groups.values()), members, skipped


# --- rewriting ---------------------------------------------------------------------------

def _fake_val(target: object, args: tuple, kwargs: dict) -> object:
    """The output of ``target`` on the fake (shape-only) values of its operands."""
    a, k = torch.fx.node.map_arg((args, kwargs), lambda n: n.meta.get("val"))
    leaves = [v for v in (*a, *k.values()) if isinstance(v, torch.Tensor)]
    mode = detect_fake_mode(leaves)
    if mode is None:
        return target(*a, **k)
    with mode:
        return target(*a, **k)


class _Rewriter:
    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.graph = gm.graph
        self.inserted: set[torch.fx.Node] = set()

    def call(self, target: object, args: tuple, kwargs: dict | None = None) -> torch.fx.Node:
        node = self.graph.call_function(target, args, kwargs or {})
        node.meta["val"] = _fake_val(target, args, kwargs or {})
        return node

    def permute(self, x: torch.fx.Node, dims: list[int]) -> torch.fx.Node:
        node = self.call(aten.permute.default, (x, list(dims)))
        self.inserted.add(node)
        return node

    def replace(self, old: torch.fx.Node, new_target: object, args: tuple, kwargs: dict | None = None,
                first_to_nhwc: bool = False) -> tuple[torch.fx.Node, torch.fx.Node]:
        """Insert ``[permute(0, 2, 3, 1)] -> new op -> permute(0, 3, 1, 2)`` before ``old``.

        Returns (new op, the permute back to NCHW); the caller reroutes ``old``'s users.
        """
        with self.graph.inserting_before(old):
            if first_to_nhwc:
                args = (self.permute(args[0], TO_NHWC), *args[1:])
            new = self.call(new_target, args, kwargs)
            new.meta.update({k: v for k, v in old.meta.items() if k not in ("val", "tensor_meta")})
            back = self.permute(new, TO_NCHW)
        return new, back


def _is_inserted_permute(node: object, dims: list[int], inserted: set[torch.fx.Node]) -> bool:
    return (isinstance(node, torch.fx.Node) and node in inserted and node.target == aten.permute.default
            and list(node.args[1]) == dims)


def _convert(gm: torch.fx.GraphModule, chain: Chain, rw: _Rewriter) -> None:
    """Rewrite one chain into NHWC, each member followed by a permute back to NCHW (cancelled later)."""
    graph = gm.graph
    for node in chain.nodes:
        if node.target == aten.convolution.default:
            x, w, b, stride, padding, dilation, _t, _op, groups = node.args
            _new, back = rw.replace(node, torch.ops.npu.conv2d_nhwc.default,
                                    (x, w, b, list(stride), list(padding), list(dilation), groups),
                                    first_to_nhwc=True)
        elif node.target == torch.ops.npu.conv_bn_relu.default:
            _new, back = rw.replace(node, torch.ops.npu.conv_bn_relu_nhwc.default, node.args, first_to_nhwc=True)
        elif node.target == aten.max_pool2d_with_indices.default:
            src = node.args[0]
            assert _is_inserted_permute(src, TO_NCHW, rw.inserted)
            defaults = [None, [], [0, 0], [1, 1], False]  # kernel_size, stride, padding, dilation, ceil_mode
            pool_args = list(node.args[1:]) + defaults[len(node.args) - 1:]
            names = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")
            for i, name in enumerate(names):
                pool_args[i] = node.kwargs.get(name, pool_args[i])
            k, s, p, d, ceil = pool_args
            _new, back = rw.replace(node, torch.ops.npu.max_pool2d_nhwc.default,
                                    (src.args[0], _two(k), _two(s) if s else [], _two(p), _two(d), bool(ceil)))
            for g in list(node.users):  # the values, and a dead getitem of the indices
                g.replace_all_uses_with(back)
                graph.erase_node(g)
            graph.erase_node(node)
            continue
        elif node.target is operator.getitem:
            continue  # handled with its pool
        else:  # layout-free elementwise: run it on the NHWC values, permute after
            def inner(a: object) -> object:
                if isinstance(a, torch.fx.Node):
                    assert _is_inserted_permute(a, TO_NCHW, rw.inserted)
                    return a.args[0]
                return a

            args = tuple(inner(a) for a in node.args)
            kwargs = {k: inner(v) for k, v in node.kwargs.items()}
            _new, back = rw.replace(node, node.target, args, kwargs)
        node.replace_all_uses_with(back)
        graph.erase_node(node)


def _two(v: object) -> list[int]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * 2 if len(v) == 1 else v


def _cancel(gm: torch.fx.GraphModule, rw: _Rewriter) -> int:
    """Remove permute(0, 2, 3, 1) of permute(0, 3, 1, 2) pairs; returns how many pairs went."""
    cancelled = 0
    for node in list(gm.graph.nodes):
        if _is_inserted_permute(node, TO_NHWC, rw.inserted) and _is_inserted_permute(node.args[0], TO_NCHW,
                                                                                     rw.inserted):
            back = node.args[0]
            node.replace_all_uses_with(back.args[0])
            gm.graph.erase_node(node)
            rw.inserted.discard(node)
            cancelled += 1
            if not back.users:
                gm.graph.erase_node(back)
                rw.inserted.discard(back)
    for node in list(gm.graph.nodes):  # permutes back to NCHW that only fed cancelled pairs
        if node in rw.inserted and not node.users:
            gm.graph.erase_node(node)
            rw.inserted.discard(node)
    return cancelled


def _materialize_exits(gm: torch.fx.GraphModule, rw: _Rewriter) -> int:
    """Make each remaining NCHW exit a contiguous tensor (later views, e.g. flatten, rely on it)."""
    exits = 0
    for node in list(gm.graph.nodes):
        if _is_inserted_permute(node, TO_NCHW, rw.inserted):
            with gm.graph.inserting_after(node):
                dense = rw.call(aten.clone.default, (node,), {"memory_format": torch.contiguous_format})
            node.replace_all_uses_with(dense, delete_user_cb=lambda u, d=dense: u is not d)
            exits += 1
    return exits


def layout_nhwc(gm: torch.fx.GraphModule) -> list[str]:
    """Run the convolution chains of an inference graph in NHWC where it pays (see the module docstring)."""
    if not any(n.op == "call_function" and n.target in (aten.convolution.default, torch.ops.npu.conv_bn_relu.default)
               for n in gm.graph.nodes):
        return []
    chains, members, changes = find_chains(gm)
    rw = _Rewriter(gm)
    chosen: list[Chain] = []
    for i, chain in enumerate(chains):  # decide every chain on the untouched graph first
        convs = chain.convs
        if not convs:
            continue
        saved, cost = chain.saved_bytes(), chain.cost_bytes(members)
        n_exits = len(chain.exits(members))
        others = len([n for n in chain.nodes if n not in convs and n.target is not operator.getitem])
        what = (f"chain {i} ({len(convs)} conv{'s' if len(convs) != 1 else ''}, {others} layout-free op"
                f"{'s' if others != 1 else ''}, {n_exits} exit{'s' if n_exits != 1 else ''})")
        for c in convs:
            if saved > cost:
                changes.append(f"{c.name}: NHWC, {what}: skips {saved:,} bytes of output transposes for "
                               f"{cost:,} bytes of layout conversion at the exits")
            else:
                changes.append(f"{c.name}: left NCHW, {what}: would skip {saved:,} bytes of output transposes "
                               f"but convert {cost:,} bytes at the exits")
        if saved > cost:
            chosen.append(chain)
    for chain in chosen:
        _convert(gm, chain, rw)
    converted = len(chosen)
    if converted:
        inserted = len(rw.inserted)
        pairs = _cancel(gm, rw)
        exits = _materialize_exits(gm, rw)
        entries = sum(1 for n in rw.inserted if list(n.args[1]) == TO_NHWC)
        changes.append(f"inserted {inserted} permutes; {inserted - entries - exits} went (sunk through the "
                       f"layout-free ops, {pairs} inverse pair{'s' if pairs != 1 else ''} cancelled): {entries} "
                       f"entry view{'s' if entries != 1 else ''} and {exits} exit conversion"
                       f"{'s' if exits != 1 else ''} left")
    gm.graph.lint()
    gm.recompile()
    return changes


__all__ = ["ELEMENTWISE", "TO_NCHW", "TO_NHWC", "Chain", "find_chains", "layout_nhwc"]
