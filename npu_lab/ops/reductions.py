"""Reductions: sum, mean, max/min (+indices), argmax/argmin, var/std, softmax."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..kernels import reduction as rk
from ..kernels.threads import sized
from .common import (
    NUMPY_DTYPES,
    as_array,
    check_same_device,
    empty,
    launch,
    nbytes,
    resize_out,
)
from .copy import device_copy
from .registry import register


def _dims(t: torch.Tensor, dim) -> list[int]:
    nd = max(t.dim(), 1)
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(t.dim()))
    if isinstance(dim, int):
        dim = [dim]
    out = []
    for d in dim:
        if not -nd <= d < nd:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {d})"
            )
        d = d % nd
        if d in out:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        out.append(d)
    return [d for d in out if d < t.dim()] if t.dim() else []


def _rows(
    t: torch.Tensor, dims: Sequence[int], dtype: torch.dtype | None = None
) -> tuple[np.ndarray, list[int], list[int]]:
    """``t`` as a contiguous ``(outer, inner)`` array reducing ``dims``.

    Returns (rows, out_shape without reduced dims, out_shape with keepdim).
    """
    keep = [d for d in range(t.dim()) if d not in dims]
    perm = keep + list(dims)
    x = t.permute(perm) if perm != list(range(t.dim())) else t
    dtype = dtype or t.dtype
    if not x.is_contiguous() or x.dtype != dtype:
        c = empty(x.shape, dtype)
        device_copy(c, x)
        x = c
    kept_shape = [t.shape[d] for d in keep]
    keep_shape = [1 if d in dims else t.shape[d] for d in range(t.dim())]
    outer = int(np.prod(kept_shape)) if kept_shape else 1
    inner = int(np.prod([t.shape[d] for d in dims])) if dims else 1
    return as_array(x).reshape(outer, inner), kept_shape, keep_shape


def _sum_dtype(t: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype:
    if dtype is not None:
        return dtype
    if t.dtype == torch.bool or not (t.dtype.is_floating_point or t.dtype.is_complex):
        return torch.int64
    return t.dtype


def _reduce_sum(t: torch.Tensor, dim, keepdim: bool, dtype, mean: bool = False,
                out: torch.Tensor | None = None) -> torch.Tensor:
    check_same_device("aten::sum", t)
    dims = _dims(t, dim)
    rdtype = _sum_dtype(t, dtype)
    if mean and not (rdtype.is_floating_point or rdtype.is_complex):
        raise RuntimeError(
            "mean(): could not infer output dtype. Input dtype must be either a floating "
            f"point or complex dtype. Got: {str(t.dtype).split('.')[-1].capitalize()}"
        )
    compute = rdtype if rdtype.is_floating_point else torch.int64
    nd = t.dim()
    if (dims and len(dims) < nd and sorted(dims) == list(range(len(dims))) and t.is_contiguous()
            and t.dtype == compute and compute.is_floating_point and t.numel()):
        return _sum_leading(t, len(dims), keepdim, rdtype, mean, out)
    rows, kept, keep_shape = _rows(t, dims, compute)
    shape = keep_shape if keepdim else kept
    if out is None:
        out = empty(shape, rdtype)
    else:
        resize_out(out, shape)
    res = np.empty(rows.shape[0], dtype=np.float64 if compute.is_floating_point else np.int64)
    if rows.shape[1] == 0:
        res[:] = 0
    elif rows.shape[0] == 1 and rows.shape[1] >= 1 << 16 and compute.is_floating_point:
        res[0] = rk.sum_all(rows.reshape(-1), 8)
    elif compute.is_floating_point:
        sized(rk.sum_rows, rows.size)(rows, res)
    else:
        sized(rk.sum_rows_int, rows.size)(rows, res)
    if mean:
        res = res / rows.shape[1] if rows.shape[1] else np.full_like(res, np.nan)
    as_array(out)[...] = res.reshape(as_array(out).shape).astype(NUMPY_DTYPES[out.dtype])
    launch("mean" if mean else "sum", rows.size, nbytes(t), nbytes(out))
    return out


def _sum_leading(t: torch.Tensor, n: int, keepdim: bool, rdtype: torch.dtype, mean: bool,
                 out: torch.Tensor | None) -> torch.Tensor:
    """Sum (or mean) of a contiguous tensor over its first ``n`` dimensions, without a transpose."""
    shape = [1] * n + list(t.shape[n:]) if keepdim else list(t.shape[n:])
    if out is None:
        out = empty(shape, rdtype)
    else:
        resize_out(out, shape)
    x = as_array(t).reshape(int(np.prod(t.shape[:n])), -1)
    res = np.empty(x.shape[1], dtype=np.float64)
    sized(rk.sum_cols, x.size)(x, res)
    if mean:
        res /= x.shape[0]
    as_array(out)[...] = res.reshape(as_array(out).shape).astype(NUMPY_DTYPES[out.dtype])
    launch("mean" if mean else "sum", x.size, nbytes(t), nbytes(out))
    return out


@register("sum.dim_IntList")
def sum_dim(self, dim, keepdim=False, *, dtype=None):
    return _reduce_sum(self, dim, keepdim, dtype)


@register("sum")
def sum_all(self, *, dtype=None):
    return _reduce_sum(self, None, False, dtype)


@register("sum.IntList_out")
def sum_out(self, dim, keepdim=False, *, dtype=None, out):
    return _reduce_sum(self, dim, keepdim, dtype, out=out)


@register("mean.dim")
def mean_dim(self, dim, keepdim=False, *, dtype=None):
    return _reduce_sum(self, dim, keepdim, dtype, mean=True)


@register("mean")
def mean_all(self, *, dtype=None):
    return _reduce_sum(self, None, False, dtype, mean=True)


@register("mean.out")
def mean_out(self, dim, keepdim=False, *, dtype=None, out):
    return _reduce_sum(self, dim, keepdim, dtype, mean=True, out=out)


def _extreme(t: torch.Tensor, dim: int | None, keepdim: bool, largest: bool, op: str):
    check_same_device(f"aten::{op}", t)
    if t.numel() == 0:
        raise IndexError(
            f"{op}(): Expected reduction dim to be specified for input.numel() == 0. "
            "Specify the reduction dim with the 'dim' argument."
        ) if dim is None else RuntimeError(f"{op}(): cannot reduce over a zero-size dimension")
    dims = _dims(t, dim) if dim is not None else list(range(t.dim()))
    rows, kept, keep_shape = _rows(t, dims)
    values = np.empty(rows.shape[0], dtype=rows.dtype)
    idx = np.empty(rows.shape[0], dtype=np.int64)
    sized(rk.max_rows if largest else rk.min_rows, rows.size)(rows, values, idx)
    shape = keep_shape if (keepdim and dim is not None) else (kept if dim is not None else [])
    v = empty(shape, t.dtype)
    i = empty(shape, torch.int64)
    as_array(v)[...] = values.reshape(as_array(v).shape)
    as_array(i)[...] = idx.reshape(as_array(i).shape)
    launch(op, rows.size, nbytes(t), nbytes(v) + nbytes(i))
    return v, i


@register("max.dim")
def max_dim(self, dim, keepdim=False):
    return _extreme(self, dim, keepdim, True, "max")


@register("min.dim")
def min_dim(self, dim, keepdim=False):
    return _extreme(self, dim, keepdim, False, "min")


@register("max")
def max_all(self):
    return _extreme(self, None, False, True, "max")[0]


@register("min")
def min_all(self):
    return _extreme(self, None, False, False, "min")[0]


@register("amax")
def amax(self, dim=(), keepdim=False):
    dims = _dims(self, dim)
    if len(dims) <= 1 and dims:
        return _extreme(self, dims[0], keepdim, True, "amax")[0]
    flat = _flatten_dims(self, dims)
    v = _extreme(flat, flat.dim() - 1, False, True, "amax")[0]
    return v.reshape(_keep(self, dims, keepdim))


@register("amin")
def amin(self, dim=(), keepdim=False):
    dims = _dims(self, dim)
    if len(dims) <= 1 and dims:
        return _extreme(self, dims[0], keepdim, False, "amin")[0]
    flat = _flatten_dims(self, dims)
    v = _extreme(flat, flat.dim() - 1, False, False, "amin")[0]
    return v.reshape(_keep(self, dims, keepdim))


def _flatten_dims(t: torch.Tensor, dims: list[int]) -> torch.Tensor:
    keep = [d for d in range(t.dim()) if d not in dims]
    x = t.permute(keep + dims).contiguous()
    return x.reshape([t.shape[d] for d in keep] + [-1])


def _keep(t: torch.Tensor, dims: list[int], keepdim: bool) -> list[int]:
    if keepdim:
        return [1 if d in dims else t.shape[d] for d in range(t.dim())]
    return [t.shape[d] for d in range(t.dim()) if d not in dims]


@register("argmax")
def argmax(self, dim=None, keepdim=False):
    if dim is None:
        idx = _extreme(self.reshape(-1), 0, False, True, "argmax")[1]
        return idx.reshape([1] * self.dim() if keepdim else [])
    return _extreme(self, dim, keepdim, True, "argmax")[1]


@register("argmin")
def argmin(self, dim=None, keepdim=False):
    if dim is None:
        idx = _extreme(self.reshape(-1), 0, False, False, "argmin")[1]
        return idx.reshape([1] * self.dim() if keepdim else [])
    return _extreme(self, dim, keepdim, False, "argmin")[1]


def _var(self, dim, correction, keepdim, sqrt: bool):
    check_same_device("aten::var", self)
    dims = _dims(self, dim)
    corr = 1 if correction is None else correction
    corr = corr.item() if isinstance(corr, torch.Tensor) else corr
    rows, kept, keep_shape = _rows(self, dims)
    res = np.empty(rows.shape[0], dtype=np.float64)
    sized(rk.var_rows, rows.size)(rows, res, float(corr))
    if sqrt:
        res = np.sqrt(res)
    out = empty(keep_shape if keepdim else kept, self.dtype)
    as_array(out)[...] = res.reshape(as_array(out).shape)
    launch("std" if sqrt else "var", 3 * rows.size, nbytes(self), nbytes(out))
    return out


@register("var.correction")
def var(self, dim=None, *, correction=None, keepdim=False):
    return _var(self, dim, correction, keepdim, False)


@register("std.correction")
def std(self, dim=None, *, correction=None, keepdim=False):
    return _var(self, dim, correction, keepdim, True)


def _softmax_impl(x: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    check_same_device("aten::_softmax", x)
    if x.dim() == 0:
        x1 = x.reshape(1)
        return _softmax_impl(x1, 0, log).reshape(())
    dim = dim % x.dim()
    xt = x.movedim(dim, -1).contiguous()
    out = empty(xt.shape, x.dtype)
    if x.numel():
        n = xt.shape[-1]
        sized(rk.softmax_rows, x.numel())(as_array(xt).reshape(-1, n), as_array(out).reshape(-1, n), log)
    launch("log_softmax" if log else "softmax", 5 * x.numel(), nbytes(x), nbytes(out))
    return out.movedim(-1, dim).contiguous() if dim != x.dim() - 1 else out


def _softmax_bwd(grad: torch.Tensor, output: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    check_same_device("aten::_softmax_backward_data", grad, output)
    if grad.dim() == 0:
        return _softmax_bwd(grad.reshape(1), output.reshape(1), 0, log).reshape(())
    dim = dim % grad.dim()
    g = grad.movedim(dim, -1).contiguous()
    o = output.movedim(dim, -1).contiguous()
    res = empty(g.shape, grad.dtype)
    if grad.numel():
        n = g.shape[-1]
        sized(rk.softmax_backward_rows, grad.numel())(as_array(g).reshape(-1, n), as_array(o).reshape(-1, n),
                                                      as_array(res).reshape(-1, n), log)
    launch("log_softmax_backward" if log else "softmax_backward", 4 * grad.numel(),
           nbytes(grad) + nbytes(output), nbytes(res))
    return res.movedim(-1, dim).contiguous() if dim != grad.dim() - 1 else res


@register("_softmax")
def softmax(self, dim, half_to_float):
    return _softmax_impl(self, dim, False)


@register("_log_softmax")
def log_softmax(self, dim, half_to_float):
    return _softmax_impl(self, dim, True)


@register("_softmax_backward_data")
def softmax_backward(grad_output, output, dim, input_dtype):
    return _softmax_bwd(grad_output, output, dim, False)


@register("_log_softmax_backward_data")
def log_softmax_backward(grad_output, output, dim, input_dtype):
    return _softmax_bwd(grad_output, output, dim, True)


def _all_any(t: torch.Tensor, dim, keepdim: bool, is_all: bool, out: torch.Tensor | None = None):
    check_same_device("aten::all" if is_all else "aten::any", t)
    dims = _dims(t, dim)
    rows, kept, keep_shape = _rows(t, dims, torch.int64 if t.dtype == torch.bool else t.dtype)
    nz = np.empty(rows.shape[0], dtype=np.int64)
    sized(rk.count_nonzero_rows, rows.size)(rows, nz)
    res = nz == rows.shape[1] if is_all else nz > 0
    shape = keep_shape if keepdim else kept
    if out is None:
        out = empty(shape, torch.bool)
    else:
        resize_out(out, shape)
    as_array(out)[...] = res.reshape(as_array(out).shape)
    launch("all" if is_all else "any", rows.size, nbytes(t), nbytes(out))
    return out


@register("all")
def all_full(self):
    return _all_any(self, None, False, True)


@register("any")
def any_full(self):
    return _all_any(self, None, False, False)


@register("all.dim", "all.dims")
def all_dim(self, dim=None, keepdim=False):
    return _all_any(self, dim, keepdim, True)


@register("any.dim", "any.dims")
def any_dim(self, dim=None, keepdim=False):
    return _all_any(self, dim, keepdim, False)


@register("all.out", "all.all_out")
def all_out(self, dim=None, keepdim=False, *, out):
    return _all_any(self, dim, keepdim, True, out=out)


@register("any.out", "any.all_out")
def any_out(self, dim=None, keepdim=False, *, out):
    return _all_any(self, dim, keepdim, False, out=out)
