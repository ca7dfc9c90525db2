"""Scans: cumsum, cumprod, cummax/cummin, logcumsumexp.

``cumsum``/``cumprod`` are structured in ATen: their functional and in-place
forms (CompositeExplicitAutogradNonFunctional) allocate the result and call the
``.out`` kernel registered here, and ``cummax``/``cummin`` call their
``_helper`` kernels, so these few registrations give every form of each scan.
Their backwards (``cumsum_backward``, ``cumprod_backward``,
``cummaxmin_backward``, ``logcumsumexp_backward``) are composites of these and
of elementwise operators.
"""

from __future__ import annotations

import numpy as np
import torch

from ..device import fallback
from ..kernels import scans as sk
from ..kernels.threads import sized
from .common import check_same_device, empty, launch, nbytes, resize_out
from .reductions import (
    Staged,
    check_out_dtype,
    compute_view,
    dtype_name,
    input3,
    low_dtype_arg,
    split3,
    wrap_dim,
)
from .registry import register


def _cumulative(op: str, kernel, self: torch.Tensor, dim: int, dtype: torch.dtype | None,
                out: torch.Tensor) -> torch.Tensor:
    """``out`` = the running sum or product of ``self`` along ``dim`` (``self`` converted to ``out``'s dtype)."""
    check_same_device(f"aten::{op}", self, out)
    dim = wrap_dim(dim, self.dim())
    dtype, _ = low_dtype_arg(dtype, out)
    if dtype is not None:
        check_out_dtype(out, dtype)
    rdtype = out.dtype
    if rdtype.is_complex or self.dtype.is_complex:
        schema = torch.ops.aten.cumsum.out if op == "cumsum" else torch.ops.aten.cumprod.out
        return fallback.unsupported(schema, (self, dim), {"dtype": dtype, "out": out}, "complex scans")
    resize_out(out, self.shape)
    if self.numel() == 0:
        return out
    shape = split3(self.shape, dim)
    floating = rdtype.is_floating_point
    x = input3(self, dim, rdtype)
    staged = Staged(out)
    target = staged.array(shape)
    identity = (0.0 if op == "cumsum" else 1.0) if floating else (0 if op == "cumsum" else 1)
    if rdtype == torch.bool:  # a bool result keeps "any"/"all" of the prefix: count in int64, then test
        acc = np.empty(shape, np.int64)
        sized(kernel, x.size)(compute_view(x), acc, identity)
        target[...] = acc != 0
    else:
        sized(kernel, x.size)(compute_view(x), target, identity)
    staged.finish()
    launch(op, self.numel(), nbytes(self), nbytes(out))
    return out


@register("cumsum.out")
def cumsum_out(self, dim, *, dtype=None, out):
    """out[..., j, ...] = sum of self[..., :j+1, ...] along ``dim``."""
    return _cumulative("cumsum", sk.cumsum, self, dim, dtype, out)


@register("cumprod.out")
def cumprod_out(self, dim, *, dtype=None, out):
    """out[..., j, ...] = product of self[..., :j+1, ...] along ``dim``."""
    return _cumulative("cumprod", sk.cumprod, self, dim, dtype, out)


def _cumextreme(op: str, self: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, dim: int) -> None:
    check_same_device(f"aten::{op}", self, values, indices)
    dim = wrap_dim(dim, self.dim())
    if self.dtype.is_complex:
        schema = torch.ops.aten._cummax_helper if op == "cummax" else torch.ops.aten._cummin_helper
        fallback.unsupported(schema, (self, values, indices, dim), {}, "complex cummax/cummin")
        return
    resize_out(values, self.shape)
    resize_out(indices, self.shape)
    if self.numel() == 0:
        return
    shape = split3(self.shape, dim)
    x = input3(self, dim, values.dtype)
    sv, si = Staged(values), Staged(indices)
    sized(sk.cumextreme, x.size)(compute_view(x), compute_view(sv.array(shape)), si.array(shape), op == "cummax")
    sv.finish()
    si.finish()
    launch(op, self.numel(), nbytes(self), nbytes(values) + nbytes(indices))


@register("_cummax_helper")
def cummax_helper(self, values, indices, dim):
    """values/indices = the running maximum of ``self`` along ``dim`` and where it was reached."""
    _cumextreme("cummax", self, values, indices, dim)


@register("_cummin_helper")
def cummin_helper(self, values, indices, dim):
    """values/indices = the running minimum of ``self`` along ``dim`` and where it was reached."""
    _cumextreme("cummin", self, values, indices, dim)


def _logcumsumexp(self: torch.Tensor, dim: int, out: torch.Tensor | None) -> torch.Tensor:
    check_same_device("aten::_logcumsumexp", self, *(() if out is None else (out,)))
    if not self.dtype.is_floating_point:
        if self.dtype.is_complex:
            args = (self, dim)
            op = torch.ops.aten._logcumsumexp.default if out is None else torch.ops.aten._logcumsumexp.out
            return fallback.unsupported(op, args, {} if out is None else {"out": out}, "complex logcumsumexp")
        raise NotImplementedError(f"\"logcumsumexp_out_npu\" not implemented for '{dtype_name(self.dtype)}'")
    dim = wrap_dim(dim, self.dim())
    if out is None:
        out = empty(self.shape, self.dtype)
    else:
        check_out_dtype(out, self.dtype)
        resize_out(out, self.shape)
    if self.numel() == 0:
        return out
    shape = split3(self.shape, dim)
    x = input3(self, dim)
    staged = Staged(out)
    sized(sk.logcumsumexp, x.size)(x, staged.array(shape))
    staged.finish()
    launch("logcumsumexp", 4 * self.numel(), nbytes(self), nbytes(out))
    return out


@register("_logcumsumexp")
def logcumsumexp(self, dim):
    """log(cumsum(exp(self))) along ``dim``, computed stably (running log-add-exp in float64)."""
    return _logcumsumexp(self, dim, None)


@register("_logcumsumexp.out")
def logcumsumexp_out(self, dim, *, out):
    """:func:`logcumsumexp` into ``out``."""
    return _logcumsumexp(self, dim, out)

