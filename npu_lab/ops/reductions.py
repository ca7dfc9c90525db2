"""Reductions: sum, mean, max/min (+indices), argmax/argmin, var/std, softmax."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
import torch

from ..device import fallback, native
from ..kernels import reduction as rk
from ..kernels.threads import PARALLEL_MIN_WORK, sized
from .common import (
    NUMPY_DTYPES,
    as_array,
    check_same_device,
    empty,
    launch,
    nbytes,
    resize_out,
    to_scalar,
)
from .copy import device_copy
from .registry import register

_DTYPE_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
    torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
    torch.uint16: "UInt16", torch.uint32: "UInt32", torch.uint64: "UInt64",
}


def dtype_name(dtype: torch.dtype) -> str:
    """The name ATen's messages give a dtype ("Float", "Long"...)."""
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def wrap_dim(dim: int, ndim: int) -> int:
    """``dim`` wrapped into ``[0, ndim)`` (a 0-d tensor takes 0 and -1), raising PyTorch's IndexError."""
    nd = max(ndim, 1)
    if not -nd <= dim < nd:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {dim})")
    return dim % nd


def split3(shape: Sequence[int], dim: int) -> tuple[int, int, int]:
    """(outer, n, inner): a contiguous tensor of ``shape`` viewed around dimension ``dim``."""
    shape = list(shape) or [1]
    return (math.prod(shape[:dim]), int(shape[dim]),
            math.prod(shape[dim + 1:]))


def contiguous_as(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``t`` itself if contiguous and of ``dtype``, else a contiguous device copy converted to it."""
    dtype = dtype or t.dtype
    if t.is_contiguous() and t.dtype == dtype:
        return t
    c = empty(t.shape, dtype)
    device_copy(c, t)
    return c


def input3(t: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> np.ndarray:
    """``t`` (converted to ``dtype``) as a contiguous ``(outer, n, inner)`` array around ``dim``."""
    return as_array(contiguous_as(t, dtype)).reshape(split3(t.shape, dim))


def compute_view(a: np.ndarray) -> np.ndarray:
    """The array numba kernels compute on: bool arrays as uint8 (same bytes, written through)."""
    return a.view(np.uint8) if a.dtype == np.bool_ else a


class Staged:
    """Where a kernel writes an output: ``out`` itself when contiguous, else a contiguous
    device buffer copied into ``out`` by :meth:`finish` (so writes land only in ``out``'s own elements)."""

    def __init__(self, out: torch.Tensor) -> None:
        self.out = out
        self.buf = out if out.is_contiguous() else empty(out.shape, out.dtype)

    def array(self, shape: Sequence[int]) -> np.ndarray:
        return as_array(self.buf).reshape(tuple(shape))

    def finish(self) -> torch.Tensor:
        if self.buf is not self.out:
            device_copy(self.out, self.buf)
        return self.out


_CPP_NAMES = {
    torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
    torch.int64: "long int", torch.int32: "int", torch.int16: "short int", torch.int8: "signed char",
    torch.uint8: "unsigned char", torch.bool: "bool", torch.complex64: "c10::complex<float>",
    torch.complex128: "c10::complex<double>",
}


def check_out_dtype(out: torch.Tensor, dtype: torch.dtype) -> None:
    """Structured kernels' check that an ``out=`` tensor has the result's dtype (their message)."""
    if out.dtype != dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {_CPP_NAMES.get(dtype, dtype)}, but got "
                           f"{_CPP_NAMES.get(out.dtype, out.dtype)} instead")


#: reduced-precision floating types: the float32 wrapper (ops/precision.py) computes them in float32.
LOW = (torch.float16, torch.bfloat16)


def low_dtype_arg(dtype: torch.dtype | None, out: torch.Tensor | None) -> tuple[torch.dtype | None, torch.dtype | None]:
    """(dtype to compute in, dtype to convert the result to or None) for a ``dtype=`` argument.

    numba has no half arithmetic: a float16/bfloat16 ``dtype`` computes in float32. With ``out=``, the
    float32 wrapper has already replaced a half ``out`` by a float32 one (and rounds it back), so the
    dtype follows it; a functional result is converted at the end.
    """
    if dtype not in LOW:
        return dtype, None
    if out is not None:
        return (torch.float32 if out.dtype == torch.float32 else dtype), None
    return torch.float32, dtype


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
    outer = math.prod(kept_shape) if kept_shape else 1
    inner = math.prod([t.shape[d] for d in dims]) if dims else 1
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
    dtype, convert = low_dtype_arg(dtype, out)
    if convert is not None:
        return _reduce_sum(t, dim, keepdim, dtype, mean).to(convert)
    dims = _dims(t, dim)
    rdtype = _sum_dtype(t, dtype)
    if mean and not (rdtype.is_floating_point or rdtype.is_complex):
        raise RuntimeError(
            "mean(): could not infer output dtype. Input dtype must be either a floating "
            f"point or complex dtype. Got: {str(t.dtype).split('.')[-1].capitalize()}"
        )
    compute = rdtype if rdtype.is_floating_point or rdtype.is_complex else torch.int64
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
    if compute.is_complex:  # the real and imaginary parts summed as two float rows
        res = np.zeros(rows.shape[0], dtype=np.complex128)
        if rows.size:
            re, im = np.empty(rows.shape[0]), np.empty(rows.shape[0])
            sized(rk.sum_rows, rows.size)(rows.real, re)
            sized(rk.sum_rows, rows.size)(rows.imag, im)
            res = re + 1j * im
    elif rows.shape[1] == 0:
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
    x = as_array(t).reshape(math.prod(t.shape[:n]), -1)
    res = np.empty(x.shape[1], dtype=np.float64)
    sized(rk.sum_cols, x.size)(x, res)
    if mean:
        res /= x.shape[0]
    as_array(out)[...] = res.reshape(as_array(out).shape).astype(NUMPY_DTYPES[out.dtype])
    launch("mean" if mean else "sum", x.size, nbytes(t), nbytes(out))
    return out


_C = native.load()
_empty, _current_device = _C.empty, _C.current_device
#: float dtypes of the sum's fast path, with a value of each (its dtype for the kernel)
_SUM_FAST = {torch.float32: np.float32(0), torch.float64: np.float64(0)}


def _fast_sum_dim(self, dim, keepdim=False, *, dtype=None):
    """A bias gradient's sum: a small contiguous float tensor summed over its leading dimensions (what
    :func:`_sum_leading` computes, the same way); None for anything else."""
    if dtype is not None or not isinstance(self, torch.Tensor) or type(dim) not in (list, tuple) or not dim:
        return None
    like = _SUM_FAST.get(self.dtype)
    dev = self.get_device()
    if like is None or dev != _current_device() or not self.is_contiguous():
        return None
    nd = self.dim()
    count = len(dim)
    if count >= nd:
        return None
    for i, d in enumerate(dim):
        if type(d) is not int or d % nd != i or not -nd <= d < nd:
            return None
    shape = self.shape
    numel = self.numel()
    if not numel or numel >= PARALLEL_MIN_WORK:
        return None
    rest = list(shape[count:])
    cols = 1
    for s in rest:
        cols *= s
    out = _empty([1] * count + rest if keepdim else rest, self.dtype, dev)
    rk.sum_leading(numel // cols, cols, self.data_ptr(), out.data_ptr(), like)
    size = self.element_size()
    launch("sum", numel, numel * size, cols * size)
    return out


@register("sum.dim_IntList", fast=_fast_sum_dim)
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


def _no_identity(t: torch.Tensor, op: str, dims: list[int] | None) -> None:
    """PyTorch's errors for max/min-like reductions over nothing (they have no identity)."""
    if dims is None:
        if t.numel() == 0:
            if op.startswith("arg"):
                raise IndexError(f"{op}(): Expected reduction dim to be specified for input.numel() == 0.")
            raise RuntimeError(f"{op}(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        return
    for d in dims:
        if t.shape[d] == 0:
            raise IndexError(f"{op}(): Expected reduction dim {d} to have non-zero size.")


def _extreme(t: torch.Tensor, dim, keepdim: bool, largest: bool, op: str):
    """(values, indices) of the max (``largest``) or min over ``dim`` (an int, a list, or None: everything
    to a 0-d result); the index is the first occurrence within the flattened reduced dimensions; NaN wins."""
    check_same_device(f"aten::{op}", t)
    if dim is None:
        _no_identity(t, op, None)
        dims = list(range(t.dim()))
    else:
        dims = _dims(t, dim)
        _no_identity(t, op, dims)
    rows, kept, keep_shape = _rows(t, dims)
    values = np.empty(rows.shape[0], dtype=rows.dtype)
    idx = np.empty(rows.shape[0], dtype=np.int64)
    if rows.size:
        sized(rk.max_rows if largest else rk.min_rows, rows.size)(compute_view(rows), compute_view(values), idx)
    shape = keep_shape if (keepdim and dim is not None) else (kept if dim is not None else [])
    v = empty(shape, t.dtype)
    i = empty(shape, torch.int64)
    as_array(v)[...] = values.reshape(as_array(v).shape)
    as_array(i)[...] = idx.reshape(as_array(i).shape)
    launch(op, rows.size, nbytes(t), nbytes(v) + nbytes(i))
    return v, i


@register("max.dim")
def max_dim(self, dim, keepdim=False):
    """(values, indices) of the maximum along ``dim``."""
    return _extreme(self, dim, keepdim, True, "max")


@register("min.dim")
def min_dim(self, dim, keepdim=False):
    """(values, indices) of the minimum along ``dim``."""
    return _extreme(self, dim, keepdim, False, "min")


@register("max")
def max_all(self):
    """The maximum of all elements."""
    return _extreme(self, None, False, True, "max")[0]


@register("min")
def min_all(self):
    """The minimum of all elements."""
    return _extreme(self, None, False, False, "min")[0]


def _amax_amin(self: torch.Tensor, dim, keepdim: bool, largest: bool, out: torch.Tensor | None = None):
    op = "amax" if largest else "amin"
    if out is not None and out.dtype != self.dtype:
        raise RuntimeError(f"Expected the dtype for input and out to match, but got {dtype_name(self.dtype)} for "
                           f"input's dtype and {dtype_name(out.dtype)} for out's dtype.")
    if isinstance(dim, int):
        dim = [dim]
    if not dim:  # () reduces everything
        _no_identity(self, op, None)
    v = _extreme(self, list(dim) if dim else list(range(self.dim())), keepdim, largest, op)[0]
    if out is None:
        return v
    check_same_device(f"aten::{op}", out)
    resize_out(out, v.shape)
    as_array(out)[...] = as_array(v)
    return out


@register("amax")
def amax(self, dim=(), keepdim=False):
    """The maximum over the dimensions ``dim`` (all of them when empty)."""
    return _amax_amin(self, dim, keepdim, True)


@register("amin")
def amin(self, dim=(), keepdim=False):
    """The minimum over the dimensions ``dim`` (all of them when empty)."""
    return _amax_amin(self, dim, keepdim, False)


@register("amax.out")
def amax_out(self, dim=(), keepdim=False, *, out):
    """:func:`amax` into ``out``."""
    return _amax_amin(self, dim, keepdim, True, out)


@register("amin.out")
def amin_out(self, dim=(), keepdim=False, *, out):
    """:func:`amin` into ``out``."""
    return _amax_amin(self, dim, keepdim, False, out)


def _arg_extreme(self: torch.Tensor, dim, keepdim: bool, largest: bool) -> torch.Tensor:
    op = "argmax" if largest else "argmin"
    if dim is None:
        _no_identity(self, op, None)
        idx = _extreme(self.reshape(-1), 0, False, largest, op)[1]
        return idx.reshape([1] * self.dim() if keepdim else [])
    return _extreme(self, dim, keepdim, largest, op)[1]


@register("argmax")
def argmax(self, dim=None, keepdim=False):
    """Index of the (first) maximum along ``dim``, or in the flattened tensor."""
    return _arg_extreme(self, dim, keepdim, True)


@register("argmin")
def argmin(self, dim=None, keepdim=False):
    """Index of the (first) minimum along ``dim``, or in the flattened tensor."""
    return _arg_extreme(self, dim, keepdim, False)


_VAR_OPS = {
    "var": torch.ops.aten.var.correction, "std": torch.ops.aten.std.correction,
    "var_mean": torch.ops.aten.var_mean.correction, "std_mean": torch.ops.aten.std_mean.correction,
}


def _var(self: torch.Tensor, dim, correction, keepdim: bool, op: str, out: torch.Tensor | None = None):
    """Variance (``var*``) or standard deviation (``std*``) over ``dim`` divided by ``max(0, n - correction)``;
    with the mean too for ``*_mean``."""
    check_same_device(f"aten::{op}", self)
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise RuntimeError(f"{op} only support floating point and complex dtypes" if op.endswith("_mean")
                           else "std and var only support floating point and complex dtypes")
    if self.dtype.is_complex:
        kwargs = {"correction": correction, "keepdim": keepdim} | ({} if out is None else {"out": out})
        schema = _VAR_OPS[op] if out is None else getattr(torch.ops.aten, op).correction_out
        return fallback.unsupported(schema, (self, dim), kwargs, "complex variance")
    dims = _dims(self, dim)
    corr = 1 if correction is None else correction
    corr = float(corr.item() if isinstance(corr, torch.Tensor) else corr)
    rows, kept, keep_shape = _rows(self, dims)
    if rows.shape[1] - corr <= 0:
        warnings.warn(f"{op}(): degrees of freedom is <= 0. Correction should be strictly less than the reduction "
                      "factor (input numel divided by output numel).", UserWarning, stacklevel=3)
    var = np.empty(rows.shape[0], dtype=np.float64)
    mean = np.empty(rows.shape[0], dtype=np.float64)
    sized(rk.var_mean_rows, rows.size)(rows, var, mean, corr)
    if op.startswith("std"):
        var = np.sqrt(var)
    shape = keep_shape if keepdim else kept
    if out is None:
        out = empty(shape, self.dtype)
    else:
        check_same_device(f"aten::{op}", out)
        check_out_dtype(out, self.dtype)
        resize_out(out, shape)
    as_array(out)[...] = var.reshape(as_array(out).shape)
    if not op.endswith("_mean"):
        launch(op, 3 * rows.size, nbytes(self), nbytes(out))
        return out
    m = empty(shape, self.dtype)
    as_array(m)[...] = mean.reshape(as_array(m).shape)
    launch(op, 3 * rows.size, nbytes(self), 2 * nbytes(out))
    return out, m


@register("var.correction")
def var(self, dim=None, *, correction=None, keepdim=False):
    """Variance over ``dim`` (Bessel-corrected by ``correction``, default 1)."""
    return _var(self, dim, correction, keepdim, "var")


@register("std.correction")
def std(self, dim=None, *, correction=None, keepdim=False):
    """Standard deviation over ``dim`` (Bessel-corrected by ``correction``, default 1)."""
    return _var(self, dim, correction, keepdim, "std")


@register("var.correction_out")
def var_out(self, dim=None, *, correction=None, keepdim=False, out):
    """:func:`var` into ``out``."""
    return _var(self, dim, correction, keepdim, "var", out)


@register("std.correction_out")
def std_out(self, dim=None, *, correction=None, keepdim=False, out):
    """:func:`std` into ``out``."""
    return _var(self, dim, correction, keepdim, "std", out)


@register("var_mean.correction")
def var_mean(self, dim=None, *, correction=None, keepdim=False):
    """(variance, mean) over ``dim`` in one pass over the data's rows."""
    return _var(self, dim, correction, keepdim, "var_mean")


@register("std_mean.correction")
def std_mean(self, dim=None, *, correction=None, keepdim=False):
    """(standard deviation, mean) over ``dim``."""
    return _var(self, dim, correction, keepdim, "std_mean")


def _softmax_impl(x: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    check_same_device("aten::_softmax", x)
    if x.dim() == 0:
        x1 = x.reshape(1)
        return _softmax_impl(x1, 0, log).reshape(())
    dim = dim % x.dim()
    last = dim == x.dim() - 1
    xt = x.contiguous() if last else x.movedim(dim, -1).contiguous()
    out = empty(xt.shape, x.dtype)
    if x.numel():
        n = xt.shape[-1]
        sized(rk.softmax_rows, x.numel())(as_array(xt).reshape(-1, n), as_array(out).reshape(-1, n), log)
    launch("log_softmax" if log else "softmax", 5 * x.numel(), nbytes(x), nbytes(out))
    return out if last else out.movedim(-1, dim).contiguous()


def _softmax_bwd(grad: torch.Tensor, output: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    check_same_device("aten::_softmax_backward_data", grad, output)
    if grad.dim() == 0:
        return _softmax_bwd(grad.reshape(1), output.reshape(1), 0, log).reshape(())
    dim = dim % grad.dim()
    last = dim == grad.dim() - 1
    g = grad.contiguous() if last else grad.movedim(dim, -1).contiguous()
    o = output.contiguous() if last else output.movedim(dim, -1).contiguous()
    res = empty(g.shape, grad.dtype)
    if grad.numel():
        n = g.shape[-1]
        sized(rk.softmax_backward_rows, grad.numel())(as_array(g).reshape(-1, n), as_array(o).reshape(-1, n),
                                                      as_array(res).reshape(-1, n), log)
    launch("log_softmax_backward" if log else "softmax_backward", 4 * grad.numel(),
           nbytes(grad) + nbytes(output), nbytes(res))
    return res if last else res.movedim(-1, dim).contiguous()


def _fast_rows(dim, *tensors) -> tuple[int, int] | None:
    """(rows, row length) when every tensor is a contiguous float32/float64 npu tensor of one shape and dtype on
    the current device, not empty, and ``dim`` is the last dimension; None otherwise."""
    first = tensors[0]
    if not isinstance(first, torch.Tensor) or first.dtype not in _SUM_FAST:
        return None
    nd = first.dim()
    if not nd or type(dim) is not int or dim not in (-1, nd - 1) or first.get_device() != _current_device():
        return None
    shape = first.shape
    for t in tensors:
        if t is not first and not (isinstance(t, torch.Tensor) and t.dtype is first.dtype and t.shape == shape
                                   and t.get_device() == first.get_device()):
            return None
        if not t.is_contiguous():
            return None
    numel = first.numel()
    return (numel // shape[-1], shape[-1]) if numel else None


def _fast_softmax_impl(self, dim, half_to_float, log: bool) -> torch.Tensor | None:
    """A model's softmax: over the last dimension of a contiguous float tensor (what :func:`_softmax_impl` does
    there, with less Python); None for anything else."""
    rows = None if half_to_float else _fast_rows(dim, self)
    if rows is None:
        return None
    out = _empty(list(self.shape), self.dtype, self.get_device())
    sized(rk.softmax_rows, self.numel())(as_array(self).reshape(rows), as_array(out).reshape(rows), log)
    nb = self.numel() * self.element_size()
    launch("log_softmax" if log else "softmax", 5 * self.numel(), nb, nb)
    return out


def _fast_softmax_bwd(grad_output, output, dim, input_dtype, log: bool) -> torch.Tensor | None:
    """:func:`_softmax_bwd` over the last dimension of contiguous float tensors; None for anything else."""
    rows = _fast_rows(dim, grad_output, output) if input_dtype is grad_output.dtype else None
    if rows is None:
        return None
    res = _empty(list(grad_output.shape), grad_output.dtype, grad_output.get_device())
    sized(rk.softmax_backward_rows, grad_output.numel())(as_array(grad_output).reshape(rows),
                                                         as_array(output).reshape(rows), as_array(res).reshape(rows),
                                                         log)
    nb = grad_output.numel() * grad_output.element_size()
    launch("log_softmax_backward" if log else "softmax_backward", 4 * grad_output.numel(), 2 * nb, nb)
    return res


@register("_softmax", fast=lambda self, dim, half_to_float: _fast_softmax_impl(self, dim, half_to_float, False))
def softmax(self, dim, half_to_float):
    return _softmax_impl(self, dim, False)


@register("_log_softmax", fast=lambda self, dim, half_to_float: _fast_softmax_impl(self, dim, half_to_float, True))
def log_softmax(self, dim, half_to_float):
    return _softmax_impl(self, dim, True)


@register("_softmax_backward_data",
          fast=lambda grad_output, output, dim, input_dtype: _fast_softmax_bwd(grad_output, output, dim, input_dtype,
                                                                              False))
def softmax_backward(grad_output, output, dim, input_dtype):
    return _softmax_bwd(grad_output, output, dim, False)


@register("_log_softmax_backward_data",
          fast=lambda grad_output, output, dim, input_dtype: _fast_softmax_bwd(grad_output, output, dim, input_dtype,
                                                                              True))
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


# --- norms -------------------------------------------------------------------------------------------------


def _ord_text(p: float) -> str:
    """A norm order as ATen prints a Scalar (``2``, ``0.5``, ``inf``)."""
    return str(int(p)) if math.isfinite(p) and p == int(p) else str(p)


def _norm_rows(self: torch.Tensor, p: float, dims: list[int], compute: torch.dtype):
    """The p-norm of each row of ``self`` reduced over ``dims`` (float64 results) and the kept shapes."""
    rows, kept, keep_shape = _rows(self, dims, compute)
    if rows.dtype.kind == "c":
        rows = np.abs(rows)
    res = np.empty(rows.shape[0], dtype=np.float64)
    if rows.shape[0]:
        sized(rk.norm_rows, rows.size)(rows, res, p)
    return res, kept, keep_shape, rows.size


@register("linalg_vector_norm.out")
def linalg_vector_norm_out(self, ord=2, dim=None, keepdim=False, *, dtype=None, out):
    """out = (sum over ``dim`` of |self|^ord)^(1/ord): ord 0 counts non-zeros, +-inf is the max/min of |self|.

    The functional form (structured in ATen) allocates ``out`` and calls this kernel.
    """
    check_same_device("aten::linalg_vector_norm", self, out)
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise RuntimeError("linalg.vector_norm: Expected a floating point or complex tensor as input. "
                           f"Got {dtype_name(self.dtype)}")
    compute = self.dtype
    if dtype is not None:
        if not (dtype.is_floating_point or dtype.is_complex):
            raise RuntimeError(f"linalg.vector_norm: dtype should be floating point or complex, but got "
                               f"{dtype_name(dtype)}")
        dtype, _ = low_dtype_arg(dtype, out)
        if torch.promote_types(self.dtype, dtype) != dtype:
            raise RuntimeError(f"linalg.vector_norm: the dtype of the input ({dtype_name(self.dtype)}) should be "
                               f"convertible without narrowing to the specified dtype ({dtype_name(dtype)})")
        compute = dtype
    p = float(ord.item() if isinstance(ord, torch.Tensor) else ord)
    dims = _dims(self, dim)
    if self.numel() == 0 and (p < 0 or p == math.inf):
        if dim is None or (isinstance(dim, (list, tuple)) and not dim):
            raise RuntimeError(f"linalg.vector_norm cannot compute the {_ord_text(p)} norm on an empty tensor "
                               "because the operation does not have an identity")
        for d in dims:
            if self.shape[d] == 0:
                raise RuntimeError(f"linalg.vector_norm cannot compute the {_ord_text(p)} norm on the dimension "
                                   f"{d}because this dimension is empty and the operation does not have an identity")
    real = compute.to_real() if compute.is_complex else compute
    check_out_dtype(out, real)
    res, kept, keep_shape, work = _norm_rows(self, p, dims, compute)
    resize_out(out, keep_shape if keepdim else kept)
    as_array(out)[...] = res.reshape(as_array(out).shape)
    launch("linalg_vector_norm", 2 * work, nbytes(self), nbytes(out))
    return out


@register("norm.out", "norm.dtype_out", "norm.Scalar_out", "norm.ScalarOpt_dtype_out")
def norm_out(self, p=2, dim=None, keepdim=False, *, dtype=None, out):
    """torch.norm: the p-norm over ``dim`` (all dimensions if none), ``linalg.vector_norm``'s kernel.

    ``p=None`` means 2. Complex inputs give real norms, as on the CPU.
    """
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise RuntimeError(f"norm(): input dtype should be either floating point or complex. Got "
                           f"{str(self.dtype).removeprefix('torch.').capitalize()} instead.")
    return linalg_vector_norm_out(self, 2 if p is None else p, dim, keepdim, dtype=dtype, out=out)


@register("hash_tensor.out")
def hash_tensor_out(self, dim=(), *, keepdim=False, mode=0, out):
    """XOR of the elements' 64-bit patterns over ``dim`` (floats as float64 bits, integers as int64): uint64."""
    check_same_device("aten::hash_tensor", self, out)
    if mode != 0:
        raise RuntimeError(f"hash_tensor only supports mode=0 (xor_sum), got mode={mode}")
    if self.dtype.is_complex:
        raise RuntimeError("hash_tensor: complex inputs are not supported")
    dims = _dims(self, dim)
    rows, kept, keep_shape = _rows(self, dims)
    bits = rows.astype(np.float64 if self.dtype.is_floating_point else np.int64).view(np.uint64)
    res = np.bitwise_xor.reduce(bits, axis=1) if bits.shape[1] else np.zeros(bits.shape[0], np.uint64)
    resize_out(out, keep_shape if keepdim else kept)
    as_array(out)[...] = res.reshape(as_array(out).shape)
    launch("hash_tensor", rows.size, nbytes(self), nbytes(out))
    return out


@register("renorm.out")
def renorm_out(self, p, dim, maxnorm, *, out):
    """out = self with each slice along ``dim`` whose p-norm exceeds ``maxnorm`` scaled to maxnorm/(norm+1e-7)."""
    check_same_device("aten::renorm", self, out)
    p, maxnorm = float(to_scalar(p)), float(to_scalar(maxnorm))
    if p <= 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {_ord_text(maxnorm)}")
    if self.dim() <= 1:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {self.dim()} dimensions")
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise RuntimeError("linalg.vector_norm: Expected a floating point or complex tensor as input. "
                           f"Got {dtype_name(self.dtype)}")
    check_out_dtype(out, self.dtype)
    dim = wrap_dim(dim, self.dim())
    norms, _, _, work = _norm_rows(self, p, [d for d in range(self.dim()) if d != dim], self.dtype)
    factor = np.where(norms > maxnorm, maxnorm / (norms + 1e-7), 1.0).astype(NUMPY_DTYPES[self.dtype])
    x = as_array(self)
    shape = [1] * self.dim()
    shape[dim] = self.shape[dim]
    result = x * factor.reshape(shape)
    resize_out(out, self.shape)
    as_array(out)[...] = result
    launch("renorm", 3 * work, nbytes(self), nbytes(out))
    return out


# --- products, NaN-skipping sums, counts ------------------------------------------------------------------


def _prod(self: torch.Tensor, dim, keepdim: bool, dtype, out: torch.Tensor | None = None) -> torch.Tensor:
    """Product over ``dim`` (all when None) in the result dtype (integers and bool give int64)."""
    check_same_device("aten::prod", self, *(() if out is None else (out,)))
    dtype, convert = low_dtype_arg(dtype, out)
    if convert is not None:
        return _prod(self, dim, keepdim, dtype).to(convert)
    if out is not None and dtype is None:
        rdtype = out.dtype
    else:
        rdtype = _sum_dtype(self, dtype)
    if out is not None:
        check_out_dtype(out, rdtype)
    if rdtype.is_complex or self.dtype.is_complex:
        if out is None:
            if dim is None:
                return fallback.unsupported(torch.ops.aten.prod.default, (self,), {"dtype": dtype}, "complex prod")
            return fallback.unsupported(torch.ops.aten.prod.dim_int, (self, dim, keepdim), {"dtype": dtype},
                                        "complex prod")
        return fallback.unsupported(torch.ops.aten.prod.int_out, (self, dim, keepdim), {"dtype": dtype, "out": out},
                                    "complex prod")
    dims = _dims(self, dim)
    floating = rdtype.is_floating_point
    rows, kept, keep_shape = _rows(self, dims, rdtype if floating else torch.int64)
    res = np.empty(rows.shape[0], dtype=np.float64 if floating else np.int64)
    if rows.shape[0]:
        sized(rk.prod_rows if floating else rk.prod_rows_int, rows.size)(rows, res)
    shape = keep_shape if keepdim else kept
    if out is None:
        out = empty(shape, rdtype)
    else:
        resize_out(out, shape)
    target = as_array(out)
    target[...] = (res != 0 if rdtype == torch.bool else res).reshape(target.shape)
    launch("prod", rows.size, nbytes(self), nbytes(out))
    return out


@register("prod")
def prod(self, *, dtype=None):
    """The product of all elements."""
    return _prod(self, None, False, dtype)


@register("prod.int_out")
def prod_int_out(self, dim, keepdim=False, *, dtype=None, out):
    """The product along ``dim`` into ``out`` (the dim form, structured in ATen, calls this)."""
    return _prod(self, dim, keepdim, dtype, out)


def _nansum(self: torch.Tensor, dim, keepdim: bool, dtype, out: torch.Tensor | None = None) -> torch.Tensor:
    """Sum over ``dim`` treating NaN as zero (integers: the plain sum)."""
    check_same_device("aten::nansum", self, *(() if out is None else (out,)))
    if self.dtype.is_complex or (dtype is not None and dtype.is_complex):
        raise RuntimeError("nansum does not support complex inputs")
    dtype, convert = low_dtype_arg(dtype, out)
    if convert is not None:
        return _nansum(self, dim, keepdim, dtype).to(convert)
    rdtype = _sum_dtype(self, dtype) if out is None or dtype is not None else out.dtype
    if out is not None:
        check_out_dtype(out, rdtype)
    if not (self.dtype.is_floating_point and rdtype.is_floating_point):
        return _reduce_sum(self, dim, keepdim, rdtype, out=out)
    dims = _dims(self, dim)
    rows, kept, keep_shape = _rows(self, dims, rdtype)
    res = np.empty(rows.shape[0], dtype=np.float64)
    if rows.shape[0]:
        sized(rk.nansum_rows, rows.size)(rows, res)
    shape = keep_shape if keepdim else kept
    if out is None:
        out = empty(shape, rdtype)
    else:
        resize_out(out, shape)
    as_array(out)[...] = res.reshape(as_array(out).shape)
    launch("nansum", rows.size, nbytes(self), nbytes(out))
    return out


@register("nansum")
def nansum(self, dim=None, keepdim=False, *, dtype=None):
    """Sum over ``dim`` (all when None) treating NaN as zero."""
    return _nansum(self, dim, keepdim, dtype)


@register("nansum.out")
def nansum_out(self, dim=None, keepdim=False, *, dtype=None, out):
    """:func:`nansum` into ``out``."""
    return _nansum(self, dim, keepdim, dtype, out)


@register("count_nonzero.dim_IntList")
def count_nonzero(self, dim):
    """Number of non-zero elements over the dimensions ``dim`` (all when empty), as int64."""
    check_same_device("aten::count_nonzero", self)
    dims = _dims(self, dim)
    rows, kept, _ = _rows(self, dims, torch.uint8 if self.dtype == torch.bool else None)
    res = np.empty(rows.shape[0], dtype=np.int64)
    if rows.shape[0]:
        sized(rk.count_nonzero_rows, rows.size)(rows, res)
    out = empty(kept, torch.int64)
    as_array(out)[...] = res.reshape(as_array(out).shape)
    launch("count_nonzero", rows.size, nbytes(self), nbytes(out))
    return out


@register("aminmax.out")
def aminmax_out(self, *, dim=None, keepdim=False, min, max):
    """(min, max) over ``dim`` (everything when None) in one pass; NaN wins both."""
    check_same_device("aten::aminmax", self, min, max)
    if dim is None:
        if self.numel() == 0:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation has "
                               "no identity.")
        dims = list(range(self.dim()))
    else:
        dims = [wrap_dim(dim, self.dim())] if self.dim() else []
        if dims and self.shape[dims[0]] == 0:
            raise IndexError(f"aminmax: Expected reduction dim {dims[0]} to have non-zero size.")
    check_out_dtype(min, self.dtype)
    check_out_dtype(max, self.dtype)
    rows, kept, keep_shape = _rows(self, dims)
    lo = np.empty(rows.shape[0], dtype=rows.dtype)
    hi = np.empty(rows.shape[0], dtype=rows.dtype)
    if rows.size:
        sized(rk.minmax_rows, rows.size)(compute_view(rows), compute_view(lo), compute_view(hi))
    shape = keep_shape if keepdim else kept
    if dim is None:
        shape = [1] * self.dim() if keepdim else []
    for t, res in ((min, lo), (max, hi)):
        resize_out(t, shape)
        as_array(t)[...] = res.reshape(as_array(t).shape)
    launch("aminmax", 2 * rows.size, nbytes(self), nbytes(min) + nbytes(max))
    return min, max


# --- trace, vdot, equal ------------------------------------------------------------------------------------


def _acc_zero(dtype: torch.dtype) -> object:
    """The accumulator a sum of ``dtype`` values starts from (its type is the accumulator's)."""
    if dtype.is_complex:
        return 0j
    return 0.0 if dtype.is_floating_point else 0


@register("trace")
def trace(self):
    """The sum of the main diagonal of a matrix (integers give int64)."""
    check_same_device("aten::trace", self)
    if self.dim() != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {self.dim()}")
    if self.dtype == torch.bool:
        raise NotImplementedError("\"trace\" not implemented for 'Bool'")
    rdtype = _sum_dtype(self, None)
    value = rk.trace(as_array(self), _acc_zero(self.dtype))
    out = empty((), rdtype)
    as_array(out)[...] = value
    launch("trace", min(self.shape), min(self.shape) * self.element_size(), nbytes(out))
    return out


@register("vdot")
def vdot(self, other):
    """sum(conj(self) * other) of two vectors of the same dtype and length."""
    check_same_device("aten::vdot", self, other)
    if self.dim() != 1 or other.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {self.dim()}D and {other.dim()}D tensors")
    if self.dtype != other.dtype:
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found {dtype_name(self.dtype)} and "
                           f"{dtype_name(other.dtype)}")
    if self.numel() != other.numel():
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{self.numel()}] and src [{other.numel()}] to "
                           f"have the same number of elements, but got {self.numel()} and {other.numel()} elements "
                           "respectively")
    if self.dtype == torch.bool:
        raise NotImplementedError("\"dot\" not implemented for 'Bool'")
    a, b = as_array(self), as_array(other)
    if self.dtype.is_complex:
        a = np.conj(a)
    value = rk.dot(a, b, _acc_zero(self.dtype))
    out = empty((), self.dtype)
    as_array(out)[...] = value
    launch("vdot", 2 * self.numel(), nbytes(self) + nbytes(other), nbytes(out))
    return out


@register("equal")
def equal(self, other):
    """True when both tensors have the same shape and equal elements (compared in their promoted dtype)."""
    check_same_device("aten::equal", self, other)
    if self.shape != other.shape:
        return False
    if self.numel() == 0:
        return True
    common = torch.promote_types(self.dtype, other.dtype)
    a = as_array(contiguous_as(self, common)).reshape(-1)
    b = as_array(contiguous_as(other, common)).reshape(-1)
    launch("equal", self.numel(), nbytes(self) + nbytes(other), 1)
    return bool(sized(rk.all_equal, a.size)(compute_view(a), compute_view(b)))
