"""Lowerings: the nodes a launch plan runs as direct kernel calls on arrays.

Each :class:`Lowering` knows one kind of node: the compiler's fused kernels
(pointwise, reduction, matmul-with-epilogue, horizontally combined), the
matrix products ``mm``, ``addmm`` (``nn.Linear``) and ``npu.linear_relu``, and
the fused cross-entropy ``npu.log_softmax_nll`` with its backward.
``accepts`` looks at the node's recorded shapes and says which outputs the
kernel makes (new buffers, or an input it writes in place), or None when the
node is not in a form it handles (it then runs as an operator call).
``emit`` writes the lines that call the kernel and account its launch; the
builder (:mod:`npu_lab.compiler.launch_plan`) supplies the arrays.

Every decision that the operator layer takes per call (flat or strided loop,
the broadcast strides of each operand, FLOPs and bytes for the device clock)
is taken here once, from the graph's metadata.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.fx

from ..device.tensors import contiguous_strides
from ..kernels import loss as lk
from ..kernels import matmul as mk
from ..kernels.threads import sized
from ..ops.common import broadcast_strides
from ..ops.linalg import tiles
from ..ops.losses import raise_bad_target
from .passes.horizontal_fusion import CombinedKernel
from .passes.matmul_epilogue import FusedMatmul
from .passes.pointwise_fusion import FusedKernel, FusedReduction

if TYPE_CHECKING:
    from .launch_plan import Value, _Builder

aten = torch.ops.aten

#: An output spec: ("new", shape, strides, dtype) or ("into", position of the argument written in place).
Spec = tuple


def _meta(node: object) -> torch.Tensor | None:
    v = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


_FLOATS = (torch.float32, torch.float64)


def _npu_float(*nodes: object, dtypes: tuple[torch.dtype, ...] = _FLOATS) -> bool:
    """Are these nodes non-empty npu tensors of one of ``dtypes`` (float32/float64 by default)?"""
    for n in nodes:
        v = _meta(n)
        if v is None or v.device.type != "npu" or v.dtype not in dtypes or v.numel() == 0:
            return False
    return True


def _nbytes(b: _Builder, nodes: Sequence[object]) -> int:
    return sum(b.val(n).nbytes for n in nodes)


class Lowering:
    """How one kind of node runs in a launch plan (see the module docstring)."""

    def accepts(self, node: torch.fx.Node, b: _Builder) -> list[Spec] | None:
        raise NotImplementedError

    def emit(self, node: torch.fx.Node, b: _Builder, outs: list[Value]) -> None:
        raise NotImplementedError


class Pointwise(Lowering):
    """A :class:`FusedKernel`: the flat loop when every operand is dense in the output's shape."""

    def accepts(self, node, b):
        fk: FusedKernel = node.target
        n_in = len(node.args) - len(fk.into)
        ins = node.args[:n_in]
        if fk.n_random:  # a dropout inside: the call draws random bits first
            return None
        if not _npu_float(*node.args, dtypes=(*_FLOATS, torch.bool)) or not b.use_arrays(*node.args):
            return None
        shapes = [b.val(a).shape for a in ins]
        if shapes and torch.broadcast_shapes(*shapes) != fk.shape:
            return None
        specs: list[Spec] = []
        for k in range(len(fk.kernel.exprs)):
            if k in fk.into:
                specs.append(("into", fk.into[k]))
            else:
                st = fk.strides[k] if k < len(fk.strides) and fk.strides[k] is not None else None
                specs.append(("new", fk.shape, st or contiguous_strides(fk.shape), fk.dtype))
        return specs

    def emit(self, node, b, outs):
        fk: FusedKernel = node.target
        n_in = len(node.args) - len(fk.into)
        ins = node.args[:n_in]
        out_nodes = [(node, k) for k in range(len(outs))]
        kernel, scalars = b.const(fk.kernel, fk.__name__), b.const(fk.scalars, f"{fk.__name__}_scalars")
        shape = fk.shape
        dense = all(v.contiguous and v.shape == shape for v in outs) and all(
            b.val(a).contiguous and b.val(a).shape == shape for a in ins)
        if dense:
            o = ", ".join(b.flat(n) for n in out_nodes)
            i = ", ".join(b.flat(a) for a in ins)
            b.line(f"{kernel}.run_flat([{o}], [{i}], {scalars})")
        else:
            o = ", ".join(b.operand(n, broadcast_strides(v.shape, v.stride, shape)) for n, v in zip(out_nodes, outs))
            i = ", ".join(b.operand(a, broadcast_strides(b.val(a).shape, b.val(a).stride, shape)) for a in ins)
            b.line(f"{kernel}.run_strided({shape!r}, [{o}], [{i}], {scalars})")
        numel = math.prod(shape)
        b.launch(fk.kernel.name, numel * len(fk.fused_ops), _nbytes(b, ins), sum(v.nbytes for v in outs))
        b.bump([node.args[pos] for pos in sorted(set(fk.into.values()))])


class Reduction(Lowering):
    """A :class:`FusedReduction`: reduced outputs, then the full-shape values written from the loop."""

    def accepts(self, node, b):
        fk: FusedReduction = node.target
        if not _npu_float(*node.args) or not b.use_arrays(*node.args):
            return None
        specs: list[Spec] = [("new", fk.shape, contiguous_strides(fk.shape), fk.dtype) for _ in fk.kernel.outputs]
        specs += [("new", fk.full_shape, st or contiguous_strides(fk.full_shape), fk.dtype) for st in fk.full_strides]
        return specs

    def emit(self, node, b, outs):
        fk: FusedReduction = node.target
        ins, eps = node.args[:fk.n_inputs], node.args[fk.n_inputs:]
        n_out = len(fk.kernel.outputs)
        space, n_red = (fk.full_shape, fk.n_reduced) if fk.full_shape else ((1,), 1)
        nk = len(space) - n_red

        def kept(key: object, v: Value) -> str:  # an operand indexed by the kept (leading) dimensions
            return b.operand(key, broadcast_strides(v.shape, v.stride, fk.shape)[:nk])

        def full(key: object, v: Value) -> str:
            return b.operand(key, broadcast_strides(v.shape, v.stride, fk.full_shape))

        keys = [(node, k) for k in range(len(outs))]
        o = ", ".join(kept(k, v) for k, v in zip(keys[:n_out], outs[:n_out]))
        f = ", ".join(full(k, v) for k, v in zip(keys[n_out:], outs[n_out:]))
        i = ", ".join(full(a, b.val(a)) for a in ins)
        e = ", ".join(kept(a, b.val(a)) for a in eps)
        target = b.const(fk, fk.__name__)
        b.line(f"{target}.last_variant = {target}.kernel.run({space!r}, {n_red}, [{o}], [{f}], [{i}], [{e}], "
               f"{target}.scalars)")
        numel = math.prod(space)
        reduced = math.prod(fk.shape) if fk.shape else 1
        b.launch(fk.kernel.name, numel * (len(fk.kernel.prelude) + 1) + reduced * len(fk.kernel.epilogue),
                 _nbytes(b, node.args), sum(v.nbytes for v in outs))


def _matrix_view(b: _Builder, node: object, shape: tuple[int, ...], m: int, n: int) -> str:
    """``node`` broadcast to ``shape`` and read as an (m, n) array: a view when the strides allow."""
    v = b.val(node)
    item = v.itemsize
    probe = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), v.shape, tuple(s * item for s in v.stride))
    flat = np.broadcast_to(probe, shape).reshape(m, n)
    if np.may_share_memory(flat, probe):
        shift = flat.__array_interface__["data"][0] - probe.__array_interface__["data"][0]
        return b.array_as(v, (m, n), tuple(flat.strides), shift)
    var = f"{v.name}_bc{len(b.lines)}"  # broadcasting this layout needs a copy, as in FusedMatmul
    b.line(f"{var} = np.broadcast_to({b.array(node)}, {shape!r}).reshape({m}, {n})")
    return var


def _tiles_expr(b: _Builder, m: int, n: int, k: int) -> str:
    t = b.const(tiles, "tiles")
    return f"{t}.get({(m, n, k)!r}, {t}['default'])"


class Matmul(Lowering):
    """A :class:`FusedMatmul`: the product with its generated epilogue (and row sums)."""

    def accepts(self, node, b):
        fk: FusedMatmul = node.target
        if not _npu_float(*node.args) or not b.use_arrays(*node.args):
            return None
        specs: list[Spec] = [("new", s, contiguous_strides(s), fk.dtype) for s in fk.output_shapes]
        if fk.row_sums_shape is not None:
            specs.append(("new", fk.row_sums_shape, contiguous_strides(fk.row_sums_shape), fk.dtype))
        return specs

    def emit(self, node, b, outs):
        fk: FusedMatmul = node.target
        m, n, k = fk.shape
        a, w, *rest = node.args
        bias = rest[0] if fk.has_bias else None
        inputs = rest[1:] if fk.has_bias else rest
        n_out = len(fk.output_shapes)
        arrays = [b.array_as(v, (m, n), (n * v.itemsize, v.itemsize)) for v in outs[:n_out]]
        operands = [_matrix_view(b, t, s, m, n) for t, s in zip(inputs, fk.input_shapes)]
        sums = b.array_as(outs[-1], (m,), (outs[-1].itemsize,)) if fk.row_sums_shape is not None else "None"
        bias_arr = "None"
        if bias is not None:
            bv = b.val(bias)
            bias_arr = b.array_as(bv, (n,), (bv.stride[-1] * bv.itemsize,))
        extra = [*arrays[1:], *operands, *(b.const(s, "p") for s in fk.scalars)]
        b.line(f"_mm({b.array(a)}, {b.array(w)}, {arrays[0]}, {_tiles_expr(b, m, n, k)}, "
               f"epilogue={b.const(fk.epilogue, 'epilogue')}, bias={bias_arr}, extra=[{', '.join(extra)}], "
               f"a_row_sums={sums})")
        b.namespace["_mm"] = mk.mm
        flops = 2.0 * m * n * k + m * n * (len(fk.fused_ops) - 1) + (m * k if fk.row_sums_shape else 0)
        b.launch(fk.__name__, flops, _nbytes(b, node.args), sum(v.nbytes for v in outs), matrix=b.val(a).dtype)


class Combined(Lowering):
    """A :class:`CombinedKernel`: every member's operands as flat arrays, one launch."""

    def accepts(self, node, b):
        ck: CombinedKernel = node.target
        if not _npu_float(*node.args) or not b.use_arrays(*node.args):
            return None
        pos = 0
        for arity, numel in zip(ck.arities, ck.numels):
            if not all(b.val(a).contiguous and b.val(a).numel == numel for a in node.args[pos:pos + arity]):
                return None
            pos += arity
        return []

    def emit(self, node, b, outs):
        ck: CombinedKernel = node.target
        flat: list[str] = []
        flops = read = written = 0
        pos = 0
        written_args: list[object] = []
        for member, arity, numel in zip(ck.members, ck.arities, ck.numels):
            group = node.args[pos:pos + arity]
            pos += arity
            n_in = arity - len(member.into)
            targets = [group[member.into[k]] for k in range(len(member.kernel.exprs))]
            flat += [b.flat(t) for t in targets] + [b.flat(t) for t in group[:n_in]]
            flat += [b.const(s, "s") for s in member.scalars]
            flops += numel * len(member.fused_ops)
            read += _nbytes(b, group[:n_in])
            written += _nbytes(b, targets)
            written_args += [t for t in targets if t not in written_args]
        b.line(f"{b.const(ck.fn, ck.__name__)}({', '.join(flat)})")
        b.launch(ck.__name__, flops, read, written)
        b.bump(written_args)


class Product(Lowering):
    """``mm``, ``addmm`` with a row bias (``nn.Linear``) and ``npu.linear_relu`` on 2-D operands."""

    def _operands(self, node: torch.fx.Node) -> tuple[Any, Any, Any, str, str] | None:
        """(a, b-as-(K,N), bias, epilogue, name); b is "wT" for linear_relu's (N, K) weight."""
        target = node.target
        if target is aten.mm.default and not node.kwargs and len(node.args) == 2:
            return node.args[0], node.args[1], None, "none", "mm"
        if target is aten.addmm.default and not node.kwargs and len(node.args) == 3:
            bias, a, w = node.args
            n = _meta(w).shape[1] if _meta(w) is not None else -1
            if _meta(bias) is None or tuple(_meta(bias).shape) not in ((n,), (1, n)):
                return None
            return a, w, bias, "bias", "addmm"
        if target is torch.ops.npu.linear_relu.default and not node.kwargs and len(node.args) == 3:
            x, w, bias = node.args
            return x, w, bias, "bias_relu" if bias is not None else "relu", "linear_relu"
        return None

    def accepts(self, node, b):
        ops = self._operands(node)
        if ops is None:
            return None
        a, w, bias, _, _ = ops
        mats = [a, w] + ([bias] if bias is not None else [])
        if not _npu_float(*mats) or any(_meta(x).dim() != 2 for x in (a, w)):
            return None
        if len({_meta(x).dtype for x in mats}) != 1 or not b.use_arrays(*mats):
            return None
        out = _meta(node)
        if out is None or out.dim() != 2:
            return None
        return [("new", tuple(out.shape), contiguous_strides(tuple(out.shape)), out.dtype)]

    def emit(self, node, b, outs):
        a, w, bias, epilogue, name = self._operands(node)
        (out,) = outs
        m, n = out.shape
        k = b.val(a).shape[1]
        wv = b.val(w)
        if name == "linear_relu":  # the (N, K) weight read as its (K, N) transpose, nothing copied
            wt = b.array_as(wv, (k, n), (wv.stride[1] * wv.itemsize, wv.stride[0] * wv.itemsize))
        else:
            wt = b.array(w)
        bias_arr = "None"
        if bias is not None:
            bv = b.val(bias)
            bias_arr = b.array_as(bv, (n,), (bv.stride[-1] * bv.itemsize,))
        target = b.array_as(out, (m, n), (n * out.itemsize, out.itemsize))
        b.namespace["_mm"] = mk.mm
        b.line(f"_mm({b.array(a)}, {wt}, {target}, {_tiles_expr(b, m, n, k)}, epilogue={epilogue!r}, "
               f"bias={bias_arr})")
        flops = 2.0 * m * n * k + {"none": 0, "bias": m * n}.get(epilogue, 2 * m * n)
        read = b.val(a).nbytes + wv.nbytes + (b.val(bias).nbytes if name == "addmm" else 0)
        b.launch(name, flops, read, out.nbytes, matrix=out.dtype)


def _ce_inputs_ok(b: _Builder, scores: object, target: object, weight: object, reduction: object) -> bool:
    """Cross-entropy in the common form: (N, C) float scores, (N,) int64 targets, no class weights,
    a mean or summed loss; anything else runs as the operator."""
    xs, ts = _meta(scores), _meta(target)
    return (weight is None and reduction in (1, 2) and _npu_float(scores) and xs.dim() == 2
            and ts is not None and ts.device.type == "npu" and ts.dtype == torch.int64
            and tuple(ts.shape) == (xs.shape[0],) and b.use_arrays(scores, target))


def _ones(b: _Builder, c: int, dtype: torch.dtype) -> str:
    return b.const(np.ones(c, dtype=np.dtype(str(dtype).replace("torch.", ""))), "ones")


class CrossEntropy(Lowering):
    """``npu.log_softmax_nll``: the fused cross-entropy kernel on arrays, the loss reduced in place."""

    def accepts(self, node, b):
        x, target, weight, reduction, _ = node.args
        if node.kwargs or not _ce_inputs_ok(b, x, target, weight, reduction):
            return None
        v = _meta(x)
        shape = tuple(v.shape)
        return [("new", shape, contiguous_strides(shape), v.dtype), ("new", (), (), v.dtype),
                ("new", (), (), v.dtype)]

    def emit(self, node, b, outs):
        x, target, _, reduction, ignore_index = node.args
        logp, loss, total = outs
        n, c = logp.shape
        kernel = b.const(sized(lk.log_softmax_nll_rows, n * c), "log_softmax_nll_fwd")
        b.namespace["_raise_bad_target"] = raise_bad_target
        b.namespace["_nll_totals"] = lk.nll_totals
        per = f"{node.name}_rows"
        b.line(f"{per} = np.empty((3, {n}))  # per sample: loss, weight, target out of range")
        b.line(f"if {kernel}({b.array(x)}, {b.array(target)}, {_ones(b, c, logp.dtype)}, {int(ignore_index)}, "
               f"{b.array((node, 0))}, {per}[0], {per}[1], {per}[2]):")
        b.line(f"    _raise_bad_target({per}[2], {b.array(target)})  # IndexError, as ATen raises it")
        b.line(f"_nll_totals({per}[0], {per}[1], {b.array((node, 1))}, {b.array((node, 2))}, {reduction == 1})")
        b.launch("log_softmax_nll", 6 * n * c, b.val(x).nbytes + b.val(target).nbytes, logp.nbytes + loss.nbytes)


class CrossEntropyBackward(Lowering):
    """``npu.log_softmax_nll_backward``: the input gradient from the saved log-probabilities."""

    def accepts(self, node, b):
        grad, logp, target, weight, reduction, _, total = node.args
        if node.kwargs or not _ce_inputs_ok(b, logp, target, weight, reduction):
            return None
        gv, tv = _meta(grad), _meta(total)
        if gv is None or tv is None or gv.dim() != 0 or tv.dim() != 0 or not _npu_float(grad, total):
            return None
        if not b.use_arrays(grad, total):
            return None
        v = _meta(logp)
        shape = tuple(v.shape)
        return [("new", shape, contiguous_strides(shape), v.dtype)]

    def emit(self, node, b, outs):
        grad, logp, target, _, reduction, ignore_index, total = node.args
        (out,) = outs
        n, c = out.shape
        kernel = b.const(sized(lk.log_softmax_nll_backward_rows, n * c), "log_softmax_nll_bwd")
        g = b.array_as(b.val(grad), (1,), (b.val(grad).itemsize,))
        scale = "1.0"
        if reduction == 1:
            tw = f"{node.name}_tw"
            b.line(f"{tw} = float({b.array(total)}[()])")
            scale = f"(1.0 / {tw} if {tw} else 0.0)"
        b.line(f"{kernel}({g}, {b.array(logp)}, {b.array(target)}, {_ones(b, c, out.dtype)}, {int(ignore_index)}, "
               f"{scale}, False, {b.array(node)})")
        b.launch("log_softmax_nll_backward", 3 * n * c,
                 b.val(grad).nbytes + b.val(logp).nbytes + b.val(target).nbytes, out.nbytes)


_BY_TYPE: dict[type, Lowering] = {FusedKernel: Pointwise(), FusedReduction: Reduction(), FusedMatmul: Matmul(),
                                  CombinedKernel: Combined()}
_PRODUCT = Product()
_BY_TARGET: dict[object, Lowering] = {torch.ops.npu.log_softmax_nll.default: CrossEntropy(),
                                      torch.ops.npu.log_softmax_nll_backward.default: CrossEntropyBackward()}


def find(node: torch.fx.Node) -> Lowering | None:
    """The lowering for ``node``'s kind, if there is one."""
    low = _BY_TYPE.get(type(node.target))
    if low is not None:
        return low
    if node.target in (aten.mm.default, aten.addmm.default, torch.ops.npu.linear_relu.default):
        return _PRODUCT
    return _BY_TARGET.get(node.target)


def describe(node: torch.fx.Node) -> str:
    """A one-line comment for the generated code."""
    target = node.target
    fused = getattr(target, "fused_ops", None)
    if fused:
        return f"{target.__name__} ({' -> '.join(fused)})"
    return str(target)


__all__ = ["Lowering", "describe", "find"]
