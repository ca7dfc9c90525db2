"""Scaled-dot-product attention on the NPU through PyTorch's "overrideable" hook.

``F.scaled_dot_product_attention`` asks the device which implementation to use
(``aten::_fused_sdp_choice``; PyTorch 2.13 asks through a C++ dispatch stub,
which ``csrc/aten/NpuAttention.cpp`` forwards to this operator). The NPU answers
``OVERRIDEABLE`` when its fused kernel can handle the call (no dropout, same
number of query and key heads, floating point: float16 and bfloat16 are
computed in float32 inside the kernel) and ``sdpa_kernel()`` allows it, and
``MATH`` otherwise, in which case PyTorch composes attention from matmul,
softmax and friends, which the NPU also runs. The C++ stub keeps float16 and
bfloat16 attention on that math path, so that it rounds every step to 16 bits
as the CPU does; the fused kernel still takes them when called directly. The
fused kernel is registered as
``aten::_scaled_dot_product_fused_attention_overrideable`` (+ backward), the
slot PyTorch keeps for out-of-tree accelerators.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from ..kernels import attention as ak
from .common import as_array, check_same_device, dense_strides_like, empty, empty_strided, launch, nbytes
from .registry import register

MATH, OVERRIDEABLE = 0, 4


def _fusable(query, key, value, attn_mask, dropout_p, enable_gqa) -> bool:
    if dropout_p > 0.0 or query.dim() not in (3, 4):
        return False
    if key.dim() != query.dim() or value.dim() != query.dim():
        return False
    if query.shape[:-2] != key.shape[:-2] or key.shape[:-2] != value.shape[:-2]:
        return False  # grouped-query attention and broadcasting go the math way
    if query.dtype not in (torch.float32, torch.float64):  # (float16/bfloat16 arrive as their float32 stand-ins)
        return False
    return attn_mask is None or attn_mask.device.type == "npu"


@register("_fused_sdp_choice")
def fused_sdp_choice(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
                     scale=None, enable_gqa=False):
    fused = torch._C._get_overrideable_sdp_enabled() and _fusable(query, key, value, attn_mask, dropout_p,
                                                                  enable_gqa)
    if not fused and not torch._C._get_math_sdp_enabled():
        raise RuntimeError("No viable backend for scaled_dot_product_attention was found. This is likely due to "
                           "turning off both the math kernel and the fused kernels.")
    return OVERRIDEABLE if fused else MATH


def _heads(t: torch.Tensor) -> np.ndarray:
    """(B, H, L, E) or (H, L, E) -> a (B, H, L, E) array view of the device bytes (no copy)."""
    a = as_array(t)
    return a if a.ndim == 4 else a[None]


def _bias(attn_bias, q: np.ndarray, k: np.ndarray):
    """The additive bias as a (B, H, L, S) array (broadcast by strides), and whether there is one."""
    if attn_bias is None:
        return np.zeros((1, 1, 1, 1), dtype=q.dtype), False
    b = as_array(attn_bias)
    if b.dtype == np.bool_:
        b = np.where(b, 0.0, -np.inf).astype(q.dtype)
    shape = (*q.shape[:3], k.shape[2])
    b = b.reshape((1,) * (4 - b.ndim) + b.shape)
    return np.broadcast_to(b, shape), True


def layout_strides(ref: torch.Tensor, shape=None) -> tuple[int, ...] | None:
    """Strides of a dense tensor of ``shape`` laid out in ``ref``'s dimension order (None: contiguous).

    The attention kernels give their outputs and gradients their input's memory
    layout, as ``empty_like`` would; the fake (meta) implementation of
    ``npu.fused_attention`` uses this too, so compiled graphs plan their views
    for the layout the kernel really produces.
    """
    shape = tuple(ref.shape) if shape is None else tuple(shape)
    strides = dense_strides_like(ref) if tuple(ref.shape) == shape or ref.dim() == len(shape) else None
    if strides is not None and tuple(ref.shape) != shape:
        order = sorted(range(ref.dim()), key=lambda d: (-ref.stride(d), -d))
        acc, new = 1, [0] * len(shape)
        for d in reversed(order):
            new[d] = acc
            acc *= max(shape[d], 1)
        strides = tuple(new)
    return strides


def _like_layout(ref: torch.Tensor, shape=None) -> torch.Tensor:
    """A new tensor with ``ref``'s memory layout (dimension order), like ``empty_like``."""
    shape = tuple(ref.shape) if shape is None else tuple(shape)
    strides = layout_strides(ref, shape)
    return empty(shape, ref.dtype) if strides is None else empty_strided(shape, strides, ref.dtype)


def _scale(scale, q: torch.Tensor) -> float:
    return float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])


def _int64_zero() -> torch.Tensor:
    z = empty((), torch.int64)
    as_array(z)[...] = 0
    return z


@register("_scaled_dot_product_fused_attention_overrideable")
def sdpa_fused(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False,
               return_debug_mask=False, *, scale=None):
    check_same_device("aten::scaled_dot_product_attention", query, key, value, attn_bias)
    if dropout_p > 0:
        raise RuntimeError("the npu fused attention kernel does not implement dropout")
    q, k, v = _heads(query), _heads(key), _heads(value)
    bias, has_bias = _bias(attn_bias, q, k)
    out_shape = (*query.shape[:-1], value.shape[-1])
    out = _like_layout(query, out_shape)
    lead = query.shape[:-2] if query.dim() == 4 else (1, query.shape[0])
    lse = empty((*lead, query.shape[-2]), torch.float32)
    ak.forward(q, k, v, bias, has_bias, bool(is_causal), _scale(scale, query), _heads(out),
               as_array(lse).reshape(q.shape[:3]), 4 * numba.get_num_threads())
    length, s = q.shape[2], k.shape[2]
    g, e = q.shape[0] * q.shape[1], q.shape[3]
    launch("fused_attention", 4.0 * g * length * s * e, nbytes(query) + nbytes(key) + nbytes(value),
           nbytes(out) + nbytes(lse), matrix=query.dtype)
    # philox seed and offset (no dropout: zeros), written by the host as PyTorch's CPU kernels do
    return out, lse, empty((0,), torch.int64), empty((0,), torch.int64), length, s, _int64_zero(), \
        _int64_zero(), empty((0,), query.dtype)


@register("_scaled_dot_product_fused_attention_overrideable_backward")
def sdpa_fused_backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp,
                        cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
                        philox_offset, *, scale=None):
    check_same_device("aten::scaled_dot_product_attention_backward", grad_out, query, key, value)
    q, k, v = _heads(query), _heads(key), _heads(value)
    bias, has_bias = _bias(attn_bias, q, k)
    lse = as_array(logsumexp).reshape(q.shape[:3])
    want_dbias = attn_bias is not None and bool(grad_input_mask[3]) and attn_bias.dtype != torch.bool
    dbias = np.empty((*q.shape[:3], k.shape[2]), dtype=q.dtype) if want_dbias else np.zeros((1, 1, 1, 1), q.dtype)
    # gradients take their input's memory layout, as PyTorch's meta kernel promises
    dq, dk, dv = _like_layout(query), _like_layout(key), _like_layout(value)
    ak.backward(_heads(grad_out), q, k, v, bias, has_bias, bool(is_causal), _scale(scale, query), _heads(out),
                lse, _heads(dq), _heads(dk), _heads(dv), dbias, want_dbias)
    grad_bias = None
    if want_dbias:
        full = dbias.reshape(*query.shape[:-1], key.shape[-2])
        # sum over dimensions the bias was broadcast along
        b = as_array(attn_bias)
        lead = full.ndim - b.ndim
        red = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(b.shape) if n == 1)
        summed = full.sum(axis=red, keepdims=True).reshape(b.shape) if red else full
        grad_bias = empty(attn_bias.shape, attn_bias.dtype)
        as_array(grad_bias)[...] = summed
    length, s = q.shape[2], k.shape[2]
    g, e = q.shape[0] * q.shape[1], q.shape[3]
    launch("fused_attention_backward", 10.0 * g * length * s * e,
           3 * nbytes(query) + nbytes(key) + nbytes(value), nbytes(query) + nbytes(key) + nbytes(value),
           matrix=query.dtype)
    return dq, dk, dv, grad_bias
