"""Pattern fusion: rewrite known operator patterns into fused NPU kernels.

On ATen graphs (after AOTAutograd):

* ``add(mm(a, b), bias)``          -> ``addmm(bias, a, b)``   (one kernel, bias in the epilogue)
* ``relu(addmm(b, x, t(w)))``      -> ``npu.linear_relu(x, w, b)``
* ``relu(mm(x, t(w)))``            -> ``npu.linear_relu(x, w, None)``
* ``relu(batch_norm_eval(conv(x)))`` -> ``npu.conv_bn_relu(...)`` (inference graphs: the
  batch norm folds into the convolution's weights at run time; the ReLU is optional)
* ``permute(permute(x, p), q)``     -> ``permute(x, p∘q)``, or ``x`` itself when that is the
  identity (backward graphs transpose weight gradients back and forth)
* ``nll_loss_forward(_log_softmax(x))`` -> ``npu.log_softmax_nll(x, ...)`` and
  ``_log_softmax_backward_data(nll_loss_backward(...))`` -> ``npu.log_softmax_nll_backward(...)``
  (cross-entropy: one kernel each way instead of two)

On the Dynamo graph (before AOTAutograd, see :func:`fuse_attention`):

* ``F.scaled_dot_product_attention(q, k, v, ...)`` without dropout
                                   -> ``npu.fused_attention(q, k, v, ...)``,
  so both the forward and the backward graphs get the fused kernels.

A rewrite happens only when the intermediate result has no other user, so no
value the rest of the graph needs disappears.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

aten = torch.ops.aten

_TRANSPOSES = (aten.t.default, aten.transpose.int, aten.permute.default)


def _val(node: object):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _transposed_weight(node: object) -> torch.fx.Node | None:
    """``w`` if ``node`` is ``t(w)`` (or an equivalent 2-D transpose/permute), else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    if node.target == aten.t.default:
        return node.args[0]
    if node.target == aten.transpose.int and sorted(node.args[1:3]) in ([0, 1], [-2, -1], [-1, 0]):
        return node.args[0]
    if node.target == aten.permute.default and list(node.args[1]) == [1, 0]:
        return node.args[0]
    return None


def _is_row_bias(bias: object, mm_node: torch.fx.Node) -> bool:
    b, out = _val(bias), _val(mm_node)
    if b is None or out is None or not isinstance(b, torch.Tensor):
        return False
    n = out.shape[-1]
    return tuple(b.shape) in ((n,), (1, n)) and b.dtype == out.dtype


def _fuse_addmm(gm: torch.fx.GraphModule) -> list[str]:
    changes = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target != aten.add.Tensor or node.kwargs.get("alpha", 1) != 1:
            continue
        a, b = node.args[:2]
        for mm_node, bias in ((a, b), (b, a)):
            if (isinstance(mm_node, torch.fx.Node) and mm_node.target == aten.mm.default
                    and len(mm_node.users) == 1 and _is_row_bias(bias, mm_node)):
                if isinstance(bias, torch.fx.Node) and _val(bias).dim() == 2:
                    with gm.graph.inserting_before(node):
                        bias = gm.graph.call_function(aten.view.default, (bias, [_val(bias).shape[-1]]))
                with gm.graph.inserting_before(node):
                    fused = gm.graph.call_function(aten.addmm.default, (bias, *mm_node.args))
                fused.meta.update(node.meta)
                node.replace_all_uses_with(fused)
                gm.graph.erase_node(node)
                gm.graph.erase_node(mm_node)
                changes.append(f"mm + add -> addmm ({fused.name})")
                break
    return changes


def _fuse_linear_relu(gm: torch.fx.GraphModule) -> list[str]:
    changes = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target != aten.relu.default:
            continue
        src = node.args[0]
        if not isinstance(src, torch.fx.Node) or len(src.users) != 1:
            continue
        if src.target == aten.addmm.default and not src.kwargs:
            bias, x, wt = src.args[:3]
            if len(src.args) > 3 or (isinstance(bias, torch.fx.Node) and _val(bias).dim() != 1):
                continue
        elif src.target == aten.mm.default:
            bias, (x, wt) = None, src.args
        else:
            continue
        w = _transposed_weight(wt)
        if w is None or _val(x) is None or _val(x).dtype != torch.float32:
            continue
        with gm.graph.inserting_before(node):
            fused = gm.graph.call_function(torch.ops.npu.linear_relu.default, (x, w, bias))
        fused.meta.update(node.meta)
        node.replace_all_uses_with(fused)
        gm.graph.erase_node(node)
        gm.graph.erase_node(src)
        if not wt.users:
            gm.graph.erase_node(wt)
        changes.append(f"{'addmm' if bias is not None else 'mm'} + relu -> npu.linear_relu ({fused.name})")
    return changes


def _fuse_conv_bn(gm: torch.fx.GraphModule) -> list[str]:
    import operator

    changes = []
    for bn in list(gm.graph.nodes):
        if bn.op != "call_function" or bn.target != aten._native_batch_norm_legit_no_training.default:
            continue
        conv = bn.args[0]
        if not (isinstance(conv, torch.fx.Node) and conv.target == aten.convolution.default
                and len(conv.users) == 1 and _val(conv) is not None and _val(conv).dim() == 4):
            continue
        x, w, b, stride, padding, dilation, transposed, _, groups = conv.args
        getters = list(bn.users)
        if transposed or len(getters) != 1 or getters[0].target is not operator.getitem or getters[0].args[1] != 0:
            continue
        out = getters[0]
        bn_w, bn_b, mean, var, _momentum, eps = bn.args[1:7]
        relu = None
        if len(out.users) == 1:
            (user,) = out.users
            if user.op == "call_function" and user.target == aten.relu.default:
                relu = user
        last = relu or out
        with gm.graph.inserting_before(last):
            fused = gm.graph.call_function(
                torch.ops.npu.conv_bn_relu.default,
                (x, w, b, bn_w, bn_b, mean, var, eps, list(stride), list(padding), list(dilation), groups,
                 relu is not None),
            )
        fused.meta.update(last.meta)
        last.replace_all_uses_with(fused)
        for dead in ([relu] if relu else []) + [out, bn, conv]:
            gm.graph.erase_node(dead)
        changes.append(f"convolution + batch_norm{' + relu' if relu else ''} -> npu.conv_bn_relu ({fused.name})")
    return changes


def _row_dim(node: torch.fx.Node, dim: object) -> bool:
    """Is ``dim`` the last dimension of ``node``'s 2-D float value?"""
    v = _val(node)
    return (isinstance(v, torch.Tensor) and v.dim() == 2 and v.dtype in (torch.float32, torch.float64)
            and dim in (1, -1))


def _fuse_cross_entropy(gm: torch.fx.GraphModule) -> list[str]:
    import operator

    changes = []
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target == aten.nll_loss_forward.default:
            logp, target, weight, reduction, ignore_index = node.args
            if not (isinstance(logp, torch.fx.Node) and logp.target == aten._log_softmax.default
                    and _row_dim(logp, logp.args[1]) and not logp.args[2]):
                continue
            # the fused node takes the log_softmax's place: its other inputs must exist by then
            if any(isinstance(a, torch.fx.Node) and order[a] > order[logp] for a in (target, weight)):
                continue
            if not all(u.target is operator.getitem for u in node.users):
                continue
            with gm.graph.inserting_before(logp):
                fused = gm.graph.call_function(torch.ops.npu.log_softmax_nll.default,
                                               (logp.args[0], target, weight, reduction, ignore_index))
                new_logp = gm.graph.call_function(operator.getitem, (fused, 0))
            fused.meta["val"] = (_val(logp), *_val(node))
            new_logp.meta.update(logp.meta)
            logp.replace_all_uses_with(new_logp, delete_user_cb=lambda u, nll=node: u is not nll)
            for get in list(node.users):
                get.args = (fused, get.args[1] + 1)
            gm.graph.erase_node(node)
            gm.graph.erase_node(logp)
            changes.append(f"_log_softmax + nll_loss_forward -> npu.log_softmax_nll ({fused.name})")
        elif node.target == aten._log_softmax_backward_data.default:
            grad, logp, dim, _dtype = node.args
            if not (isinstance(grad, torch.fx.Node) and grad.target == aten.nll_loss_backward.default
                    and len(grad.users) == 1 and _row_dim(logp, dim) and _val(logp).dtype == _val(node).dtype):
                continue
            tangent, _, target, weight, reduction, ignore_index, total_weight = grad.args
            with gm.graph.inserting_before(node):
                fused = gm.graph.call_function(torch.ops.npu.log_softmax_nll_backward.default,
                                               (tangent, logp, target, weight, reduction, ignore_index, total_weight))
            fused.meta.update(node.meta)
            node.replace_all_uses_with(fused)
            gm.graph.erase_node(node)
            gm.graph.erase_node(grad)
            changes.append(f"nll_loss_backward + _log_softmax_backward_data -> npu.log_softmax_nll_backward "
                           f"({fused.name})")
    return changes


def _fold_permutes(gm: torch.fx.GraphModule) -> list[str]:
    changes = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.permute.default:
            continue
        inner = node.args[0]
        if not (isinstance(inner, torch.fx.Node) and inner.op == "call_function"
                and inner.target is aten.permute.default):
            continue
        base = inner.args[0]
        p, q = list(inner.args[1]), list(node.args[1])
        nd = len(p)
        composed = [p[d % nd] % nd for d in q]  # dim d of the result is dim p[q[d]] of the base
        if composed == list(range(nd)):
            # an input is left alone: AOTAutograd handles outputs that alias inputs itself
            if not isinstance(base, torch.fx.Node) or base.op == "placeholder":
                continue
            node.replace_all_uses_with(base)
            gm.graph.erase_node(node)
            changes.append(f"permute(permute({base.name})) -> {base.name} (the permutations cancel)")
        else:
            node.args = (base, composed)
            changes.append(f"permute(permute({base.name})) -> one permute ({node.name})")
        if not inner.users:
            gm.graph.erase_node(inner)
    return changes


def pattern_fusion(gm: torch.fx.GraphModule) -> list[str]:
    """Run the ATen-level rewrites (addmm, linear+relu, conv+batch_norm(+relu), permutes, cross-entropy)."""
    changes = (_fuse_addmm(gm) + _fuse_linear_relu(gm) + _fuse_conv_bn(gm) + _fold_permutes(gm)
               + _fuse_cross_entropy(gm))
    gm.graph.lint()
    gm.recompile()
    return changes


# --- before AOTAutograd --------------------------------------------------------------

def _sdpa_targets() -> tuple:
    return (torch._C._nn.scaled_dot_product_attention, torch.nn.functional.scaled_dot_product_attention)


def fused_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
               is_causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """What a fused attention node calls: the NPU's one-kernel attention."""
    return torch.ops.npu.fused_attention(q, k, v, attn_mask, is_causal, scale)[0]


def fuse_attention(gm: torch.fx.GraphModule) -> list[str]:
    """Swap ``scaled_dot_product_attention`` calls (no dropout, no GQA) for the fused NPU op."""
    changes = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _sdpa_targets():
            continue
        names = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]
        bound = dict(zip(names, node.args))
        bound.update(node.kwargs)
        if bound.get("dropout_p", 0.0) not in (0, 0.0) or bound.get("enable_gqa", False):
            continue
        q, k, v = bound["query"], bound["key"], bound["value"]
        q_val, k_val = _val(q) if isinstance(q, torch.fx.Node) else None, None
        if isinstance(k, torch.fx.Node):
            k_val = _val(k) if "val" in k.meta else k.meta.get("example_value")
        q_val = q_val if q_val is not None else (q.meta.get("example_value") if isinstance(q, torch.fx.Node)
                                                 else None)
        if q_val is not None and k_val is not None and q_val.shape[:-2] != k_val.shape[:-2]:
            continue
        with gm.graph.inserting_before(node):
            args = (q, k, v, bound.get("attn_mask"), bound.get("is_causal", False), bound.get("scale"))
            fused = gm.graph.call_function(fused_sdpa, args)
        fused.meta.update(node.meta)
        node.replace_all_uses_with(fused)
        gm.graph.erase_node(node)
        changes.append(f"scaled_dot_product_attention -> npu.fused_attention ({fused.name})")
    if changes:
        gm.graph.lint()
        gm.recompile()
    return changes


__all__ = ["fuse_attention", "fused_sdpa", "operator", "pattern_fusion"]
