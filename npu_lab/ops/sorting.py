"""Sorting, selection and searching: sort, topk, kthvalue, median/nanmedian, mode, unique,
isin, bucketize/searchsorted, and the histograms (histc, histogram, histogramdd).

``sort.stable`` and ``topk`` are structured in ATen: their functional forms allocate
the outputs and call the ``.values`` kernels here. ``argsort``, ``msort``,
``quantile``/``nanquantile`` and ``torch.unique``'s Python wrapper are composites of
these. Backwards of the selections (``value_selecting_reduction_backward``) are
scatters of the incoming gradient to the returned indices.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..kernels import sorting as sk
from ..kernels.threads import sized
from .common import NUMPY_DTYPES, as_array, check_same_device, empty, launch, nbytes, resize_out, to_scalar
from .reductions import (
    Staged,
    check_out_dtype,
    compute_view,
    contiguous_as,
    dtype_name,
    input3,
    split3,
    wrap_dim,
)
from .registry import register


def _sort_flops(n: int, fibres: int) -> float:
    return fibres * n * max(1.0, math.log2(max(n, 1)))


def _reduced_shape(t: torch.Tensor, dim: int, keepdim: bool) -> list[int]:
    """``t``'s shape without ``dim`` (kept as 1 with ``keepdim``); a 0-d tensor stays 0-d."""
    if t.dim() == 0:
        return []
    shape = list(t.shape)
    if keepdim:
        shape[dim] = 1
    else:
        del shape[dim]
    return shape


def _no_identity(t: torch.Tensor, dim: int, op: str) -> None:
    if t.dim() and t.shape[dim] == 0:
        raise IndexError(f"{op}(): Expected reduction dim {dim} to have non-zero size.")


def _check_pair(op: str, self: torch.Tensor, values: torch.Tensor, indices: torch.Tensor) -> None:
    check_same_device(f"aten::{op}", self, values, indices)
    check_out_dtype(values, self.dtype)
    check_out_dtype(indices, torch.int64)


# --- sort and topk -----------------------------------------------------------------------------------------


def _sort_into(self: torch.Tensor, dim: int, k: int, values: torch.Tensor, indices: torch.Tensor, op: str,
               kernel, *flags) -> None:
    """values/indices (already of the right shape) = ``kernel``'s first ``k`` of each fibre of ``self``
    along ``dim`` in sorted order."""
    shape = split3(self.shape, dim)
    if values.numel() == 0:
        return
    x = input3(self, dim)
    sv, si = Staged(values), Staged(indices)
    out_shape = (shape[0], k, shape[2])
    sized(kernel, self.numel())(compute_view(x), *flags, compute_view(sv.array(out_shape)), si.array(out_shape))
    sv.finish()
    si.finish()
    launch(op, _sort_flops(shape[1], shape[0] * shape[2]), nbytes(self), nbytes(values) + nbytes(indices))


@register("sort.values_stable")
def sort_values_stable(self, *, stable, dim=-1, descending=False, values, indices):
    """values, indices = self sorted along ``dim`` (NaN greatest) and the source positions.

    ``stable``: equal elements keep their order (a merge sort); otherwise the CPU's std::sort, so that
    even the order of ties is the CPU's.
    """
    _check_pair("sort", self, values, indices)
    if self.dtype.is_complex:
        raise RuntimeError("Sort does not support complex dtypes on npu")
    dim = wrap_dim(dim, self.dim())
    resize_out(values, self.shape)
    resize_out(indices, self.shape)
    n = self.shape[dim] if self.dim() else 1
    if stable:
        _sort_into(self, dim, n, values, indices, "sort", sk.sort, bool(descending), n)
    else:
        _sort_into(self, dim, n, values, indices, "sort", sk.unstable_sort, bool(descending))
    return values, indices


@register("topk.values")
def topk_values(self, k, dim=-1, largest=True, sorted=True, *, values, indices):
    """The ``k`` largest (``largest``) or smallest elements along ``dim`` and their positions (ATen's CPU
    selection, so ties resolve as there)."""
    check_same_device("aten::topk", self, values, indices)
    dim = wrap_dim(dim, self.dim())
    size = self.shape[dim] if self.dim() else 1
    if not 0 <= k <= size:
        raise RuntimeError("selected index k out of range")
    if self.dtype == torch.bool:
        raise RuntimeError("topk does not support bool dtypes on npu")
    if self.dtype.is_complex:
        raise NotImplementedError(f"\"topk_npu\" not implemented for '{dtype_name(self.dtype)}'")
    check_out_dtype(values, self.dtype)
    check_out_dtype(indices, torch.int64)
    shape = list(self.shape)
    if shape:
        shape[dim] = k
    resize_out(values, shape)
    resize_out(indices, shape)
    _sort_into(self, dim, k, values, indices, "topk", sk.topk, k, bool(largest), bool(sorted))
    return values, indices


# --- kthvalue, median, mode --------------------------------------------------------------------------------


def _select(op: str, kernel, self: torch.Tensor, dim: int, keepdim: bool, values: torch.Tensor,
            indices: torch.Tensor, *extra) -> tuple[torch.Tensor, torch.Tensor]:
    """values/indices = ``kernel``'s pick from each fibre of ``self`` along ``dim`` (reduced shape)."""
    shape = _reduced_shape(self, dim, keepdim)
    resize_out(values, shape)
    resize_out(indices, shape)
    if values.numel() == 0:
        return values, indices
    outer, n, inner = split3(self.shape, dim)
    x = input3(self, dim)
    sv, si = Staged(values), Staged(indices)
    kernel_args = (*extra, compute_view(sv.array((outer, inner))), si.array((outer, inner)))
    sized(kernel, self.numel())(compute_view(x), *kernel_args)
    sv.finish()
    si.finish()
    launch(op, _sort_flops(n, outer * inner), nbytes(self), nbytes(values) + nbytes(indices))
    return values, indices


@register("kthvalue.values")
def kthvalue_values(self, k, dim=-1, keepdim=False, *, values, indices):
    """The k-th smallest element along ``dim`` (NaN greatest) and its position (ATen's quickselect)."""
    check_same_device("aten::kthvalue", self, values, indices)
    dim = wrap_dim(dim, self.dim())
    _no_identity(self, dim, "kthvalue")
    size = self.shape[dim] if self.dim() else 1
    if not 0 < k <= size:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {dim}")
    if self.dtype == torch.bool or self.dtype.is_complex:
        raise NotImplementedError(f"\"kthvalue_npu\" not implemented for '{dtype_name(self.dtype)}'")
    check_out_dtype(values, self.dtype)
    check_out_dtype(indices, torch.int64)
    return _select("kthvalue", sk.kthvalue, self, dim, keepdim, values, indices, k - 1)


def _median_all(self: torch.Tensor, ignore_nan: bool) -> torch.Tensor:
    check_same_device("aten::median", self)
    if self.dtype == torch.bool or self.dtype.is_complex:
        raise NotImplementedError(f"\"median_npu\" not implemented for '{dtype_name(self.dtype)}'")
    out = empty((), self.dtype)
    if self.numel() == 0:  # NaN, converted to the dtype as C++ converts it (integers: the CPU's garbage too)
        with np.errstate(invalid="ignore"):
            as_array(out)[...] = np.array(np.nan, np.float32).astype(NUMPY_DTYPES[self.dtype])
        return out
    flat = self.reshape(-1)
    idx = empty((), torch.int64)
    _select("nanmedian" if ignore_nan else "median", sk.median, flat, 0, False, out, idx, ignore_nan)
    return out


@register("median")
def median_all(self):
    """The lower median of all elements (NaN if any is NaN)."""
    return _median_all(self, False)


@register("nanmedian")
def nanmedian_all(self):
    """The lower median of the non-NaN elements (NaN if there are none)."""
    return _median_all(self, True)


def _median_dim(self, dim, keepdim, values, indices, ignore_nan: bool):
    op = "nanmedian" if ignore_nan else "median"
    check_same_device(f"aten::{op}", self, values, indices)
    dim = wrap_dim(dim, self.dim())
    _no_identity(self, dim, "median")
    if self.dtype == torch.bool or self.dtype.is_complex:
        raise NotImplementedError(f"\"median_out\" not implemented for '{dtype_name(self.dtype)}'")
    check_out_dtype(values, self.dtype)
    check_out_dtype(indices, torch.int64)
    return _select(op, sk.median, self, dim, keepdim, values, indices, ignore_nan)


@register("median.dim_values")
def median_dim_values(self, dim, keepdim=False, *, values, indices):
    """The lower median along ``dim`` and its position (ties: the earlier position ranks lower;
    a fibre holding NaN gives its first NaN)."""
    return _median_dim(self, dim, keepdim, values, indices, False)


@register("nanmedian.dim_values")
def nanmedian_dim_values(self, dim, keepdim=False, *, values, indices):
    """The lower median of the non-NaN elements along ``dim`` and its position."""
    return _median_dim(self, dim, keepdim, values, indices, True)


@register("mode")
def mode(self, dim=-1, keepdim=False):
    """The most frequent value along ``dim`` (the smallest among equally frequent ones) and a position of it."""
    check_same_device("aten::mode", self)
    dim = wrap_dim(dim, self.dim())
    if self.dtype.is_complex:
        raise NotImplementedError(f"\"mode_npu\" not implemented for '{dtype_name(self.dtype)}'")
    _no_identity(self, dim, "mode")
    values = empty(_reduced_shape(self, dim, keepdim), self.dtype)
    indices = empty(_reduced_shape(self, dim, keepdim), torch.int64)
    return _select("mode", sk.mode, self, dim, keepdim, values, indices)


# --- unique ------------------------------------------------------------------------------------------------


def _host(t: torch.Tensor) -> np.ndarray:
    """The device array of ``t`` (contiguous), flattened; bool as uint8."""
    return compute_view(as_array(contiguous_as(t)).reshape(-1))


def _device(a: np.ndarray, dtype: torch.dtype, shape=None) -> torch.Tensor:
    """A new npu tensor of ``dtype`` holding ``a`` (written through its device array)."""
    out = empty(a.shape if shape is None else shape, dtype)
    if out.numel():
        as_array(out)[...] = a.reshape(as_array(out).shape)
    return out


_NOTHING = np.zeros(0, np.int64)


def _no_complex_unique(t: torch.Tensor) -> None:
    if t.dtype.is_complex:
        raise NotImplementedError(f"\"unique\" not implemented for '{dtype_name(t.dtype)}'")


def _unique_flat(self: torch.Tensor, consecutive: bool, want_inverse: bool, want_counts: bool, op: str):
    """(values, inverse, counts) of the flattened ``self``: sorted unique values (``consecutive``: runs of
    equal neighbours in input order), each element's group, each group's size (empty when not wanted)."""
    check_same_device(f"aten::{op}", self)
    _no_complex_unique(self)
    x = _host(self)
    n = x.shape[0]
    perm = np.arange(n) if consecutive else np.argsort(x, kind="stable")
    s = x[perm]
    first = np.ones(n, np.bool_)
    first[1:] = s[1:] != s[:-1]  # NaN != NaN: every NaN is its own value, as on the CPU
    starts = np.flatnonzero(first)
    values = _device(s[starts].view(NUMPY_DTYPES[self.dtype]), self.dtype)
    inverse = counts = _NOTHING
    if want_inverse:
        inverse = np.empty(n, np.int64)
        inverse[perm] = np.cumsum(first) - 1
    if want_counts:
        counts = np.diff(np.append(starts, n))
    inv = _device(inverse, torch.int64, self.shape if want_inverse else None)
    launch(op, _sort_flops(n, 1), nbytes(self), nbytes(values) + 8 * (inverse.size + counts.size))
    return values, inv, _device(counts, torch.int64)


@register("_unique2")
def unique2(self, sorted=True, return_inverse=False, return_counts=False):
    """torch.unique without ``dim``: sorted unique values, inverse indices (input's shape), counts."""
    return _unique_flat(self, False, return_inverse, return_counts, "_unique2")


@register("_unique")
def unique(self, sorted=True, return_inverse=False):
    """Sorted unique values and (if asked) each element's index into them."""
    values, inverse, _ = _unique_flat(self, False, return_inverse, False, "_unique")
    return values, inverse


def _unique_dim(self: torch.Tensor, dim: int, consecutive: bool, op: str):
    """Unique slices of ``self`` along ``dim`` (sorted lexicographically unless ``consecutive``), each
    slice's group and each group's size."""
    check_same_device(f"aten::{op}", self)
    _no_complex_unique(self)
    dim = wrap_dim(dim, self.dim())
    if self.numel() == 0:
        zero_dims = sum(1 for s in self.shape if s == 0)
        if zero_dims != 1:
            raise RuntimeError("Number of zero sized dimensions is more than one, so unique cannot be applied ")
        if self.shape[dim] != 0:
            raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
        return empty(self.shape, self.dtype), empty((0,), torch.int64), empty((0,), torch.int64)
    moved = self.movedim(dim, 0) if self.dim() else self.reshape(1)
    rows = _host(moved).reshape(moved.shape[0], -1)
    n = rows.shape[0]
    perm = np.arange(n) if consecutive else np.lexsort(rows.T[::-1])
    s = rows[perm]
    first = np.ones(n, np.bool_)
    first[1:] = np.any(s[1:] != s[:-1], axis=1)
    starts = np.flatnonzero(first)
    inverse = np.empty(n, np.int64)
    inverse[perm] = np.cumsum(first) - 1
    counts = np.diff(np.append(starts, n))
    kept = s[starts].view(NUMPY_DTYPES[self.dtype])
    shape = [len(starts), *moved.shape[1:]]
    values = _device(kept, self.dtype, shape)
    if self.dim():
        values = values.movedim(0, dim).contiguous()
    launch(op, _sort_flops(n, rows.shape[1]), nbytes(self), nbytes(values) + 8 * (inverse.size + counts.size))
    return values, _device(inverse, torch.int64), _device(counts, torch.int64)


@register("unique_dim")
def unique_dim(self, dim, sorted=True, return_inverse=False, return_counts=False):
    """Unique slices along ``dim`` (sorted), with inverse indices and counts."""
    return _unique_dim(self, dim, False, "unique_dim")


@register("unique_dim_consecutive")
def unique_dim_consecutive(self, dim, return_inverse=False, return_counts=False):
    """Runs of equal neighbouring slices along ``dim`` collapsed to one, with inverse indices and counts."""
    return _unique_dim(self, dim, True, "unique_dim_consecutive")


@register("unique_consecutive")
def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    """Runs of equal neighbours collapsed to one (of the flattened tensor, or of slices along ``dim``)."""
    if dim is None or (dim in (0, -1) and self.dim() == 1):
        return _unique_flat(self, True, return_inverse, return_counts, "unique_consecutive")
    return _unique_dim(self, dim, True, "unique_consecutive")


# --- isin --------------------------------------------------------------------------------------------------


def _isin(elements, test_elements, invert: bool, out: torch.Tensor) -> torch.Tensor:
    """out = (each element equals some test element) != invert, compared in the promoted dtype."""
    tensors = [t for t in (elements, test_elements) if isinstance(t, torch.Tensor)]
    check_same_device("aten::isin", *tensors, out)
    for t in tensors:
        if t.dtype.is_complex or t.dtype == torch.bool:
            raise RuntimeError(f"Unsupported input type encountered for isin(): {dtype_name(t.dtype)}")
    common = torch.result_type(elements, test_elements)
    if not isinstance(elements, torch.Tensor):
        elements = _device(np.array(elements, NUMPY_DTYPES[common]), common, ())
    if not isinstance(test_elements, torch.Tensor):
        test_elements = _device(np.array(test_elements, NUMPY_DTYPES[common]), common, ())
    check_out_dtype(out, torch.bool)
    resize_out(out, elements.shape)
    if elements.numel() == 0:
        return out
    e = as_array(contiguous_as(elements, common)).reshape(-1)
    tests = np.sort(as_array(contiguous_as(test_elements, common)).reshape(-1), kind="stable")
    staged = Staged(out)
    sized(sk.isin, e.size)(e, tests, bool(invert), staged.array((e.size,)))
    staged.finish()
    launch("isin", e.size * max(1.0, math.log2(max(tests.size, 1))), nbytes(elements) + nbytes(test_elements),
           nbytes(out))
    return out


@register("isin.Tensor_Tensor_out")
def isin_tensor_tensor_out(elements, test_elements, *, assume_unique=False, invert=False, out):
    """out[i] = elements[i] in test_elements (negated with ``invert``)."""
    return _isin(elements, test_elements, invert, out)


@register("isin.Tensor_Scalar_out")
def isin_tensor_scalar_out(elements, test_element, *, assume_unique=False, invert=False, out):
    """out[i] = elements[i] == test_element (!= with ``invert``)."""
    return _isin(elements, to_scalar(test_element), invert, out)


@register("isin.Scalar_Tensor_out")
def isin_scalar_tensor_out(element, test_elements, *, assume_unique=False, invert=False, out):
    """out (0-d) = element in test_elements (negated with ``invert``)."""
    return _isin(to_scalar(element), test_elements, invert, out)


# --- searchsorted and bucketize ----------------------------------------------------------------------------


def _sizes(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def _searchsorted(boundaries: torch.Tensor, values, out_int32: bool, right: bool, side, sorter,
                  out: torch.Tensor | None) -> torch.Tensor:
    """Insertion points of ``values`` in the (last-dimension) sorted ``boundaries``, with ATen's checks."""
    op = "aten::searchsorted"
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
        if right and side != "right":
            raise RuntimeError(f"torch.searchsorted(): side and right can't be set to opposites, got side of {side} "
                               "while right was True")
        right = side == "right"
    scalar = not isinstance(values, torch.Tensor)
    if scalar:
        values = to_scalar(values)
        common = torch.result_type(boundaries, values)
        values = _device(np.array(values, NUMPY_DTYPES[common]), common, ())
    check_same_device(op, boundaries, values, *(t for t in (sorter, out) if t is not None))
    if sorter is not None:
        if sorter.shape != boundaries.shape:
            raise RuntimeError(f"torch.searchsorted(): boundary and sorter must have the same size, but got boundary "
                               f"tensor {_sizes(boundaries)}and got sorter tensor {_sizes(sorter)}")
        if sorter.dtype != torch.int64:
            raise RuntimeError(f"torch.searchsorted(): sorter must be a tensor of long dtype but got dtype "
                               f"{dtype_name(sorter.dtype)}")
        if sorter.numel():
            s = as_array(sorter)
            if s.max() >= sorter.shape[-1] or s.min() < 0:
                raise RuntimeError("torch.searchsorted(): sorter index out of range")
    if not (values.dim() > 0 or (values.numel() == 1 and boundaries.dim() == 1)):
        raise RuntimeError("torch.searchsorted(): input value can be a scalar only when boundaries tensor dimension "
                           f"is 1, but we got boundaries tensor dim({boundaries.dim()}) and input value's "
                           f"dim({values.dim()}) numel({values.numel()})")
    if boundaries.dim() == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 "
                           "dimension")
    if boundaries.dim() != 1 and (boundaries.dim() != values.dim() or boundaries.shape[:-1] != values.shape[:-1]):
        raise RuntimeError("torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
                           "dimensions of boundaries tensor and input value tensor must match, but we got boundaries "
                           f"tensor {_sizes(boundaries)} and input value tensor {_sizes(values)}")
    rdtype = torch.int32 if out_int32 else torch.int64
    if out is None:
        out = empty(values.shape, rdtype)
    else:
        if out.dtype != rdtype:
            raise RuntimeError("torch.searchsorted(): output tensor's dtype is wrong, it can only be Int(int32) or "
                               "Long(int64) depending on whether out_int32 flag is True, but we got output tensor's "
                               f"dtype {dtype_name(out.dtype)} and out_int32 flag is {bool(out_int32)}")
        resize_out(out, values.shape)
    if values.numel() == 0:
        return out
    common = torch.promote_types(boundaries.dtype, values.dtype)
    m = boundaries.shape[-1]
    if m == 0:
        as_array(out)[...] = 0
        return out
    seq = compute_view(as_array(contiguous_as(boundaries, common)).reshape(-1, m))
    vals = compute_view(as_array(contiguous_as(values, common)).reshape(seq.shape[0] if boundaries.dim() > 1 else 1,
                                                                         -1))
    order = as_array(contiguous_as(sorter)).reshape(seq.shape) if sorter is not None else np.zeros((1, 1), np.int64)
    res = np.empty(vals.shape, np.int64)
    sized(sk.searchsorted, vals.size)(seq, vals, res, bool(right), order, sorter is not None)
    as_array(out)[...] = res.reshape(as_array(out).shape)
    launch("searchsorted", vals.size * max(1.0, math.log2(max(m, 1))), nbytes(boundaries) + nbytes(values),
           nbytes(out))
    return out


@register("searchsorted.Tensor")
def searchsorted(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    """Indices where ``self``'s values would be inserted into ``sorted_sequence`` to keep it sorted."""
    return _searchsorted(sorted_sequence, self, out_int32, right, side, sorter, None)


@register("searchsorted.Tensor_out")
def searchsorted_out(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None, out):
    """:func:`searchsorted` into ``out``."""
    return _searchsorted(sorted_sequence, self, out_int32, right, side, sorter, out)


@register("searchsorted.Scalar")
def searchsorted_scalar(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    """:func:`searchsorted` of one number (a 0-d result)."""
    return _searchsorted(sorted_sequence, self, out_int32, right, side, sorter, None)


@register("searchsorted.Scalar_out")
def searchsorted_scalar_out(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None, out):
    """:func:`searchsorted_scalar` into ``out``."""
    return _searchsorted(sorted_sequence, self, out_int32, right, side, sorter, out)


def _bucketize(self, boundaries: torch.Tensor, out_int32: bool, right: bool, out: torch.Tensor | None):
    if boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.dim()})")
    return _searchsorted(boundaries, self, out_int32, right, None, None, out)


@register("bucketize.Tensor")
def bucketize(self, boundaries, *, out_int32=False, right=False):
    """The bucket of each element of ``self`` among the 1-D sorted ``boundaries``."""
    return _bucketize(self, boundaries, out_int32, right, None)


@register("bucketize.Tensor_out")
def bucketize_out(self, boundaries, *, out_int32=False, right=False, out):
    """:func:`bucketize` into ``out``."""
    return _bucketize(self, boundaries, out_int32, right, out)


@register("bucketize.Scalar")
def bucketize_scalar(self, boundaries, *, out_int32=False, right=False):
    """:func:`bucketize` of one number (a 0-d result)."""
    return _bucketize(self, boundaries, out_int32, right, None)


# --- histograms ----------------------------------------------------------------------------------------------

_LINEAR, _LOCAL_SEARCH, _BINARY_SEARCH = 0, 1, 2


def _linspace(start: float, end: float, steps: int, dtype: np.dtype) -> np.ndarray:
    """``torch.linspace`` as ATen's CPU kernel computes it, in ``dtype``: the first half counted up from
    ``start``, the second half down from ``end``."""
    start_t, end_t = dtype.type(start), dtype.type(end)
    if steps == 1:
        return np.array([start_t], dtype)
    step = dtype.type((end_t - start_t) / dtype.type(steps - 1))
    i = np.arange(steps)
    half = steps // 2
    up = start_t + step * i.astype(dtype)
    down = end_t - step * (steps - i - 1).astype(dtype)
    return np.where(i < half, up, down).astype(dtype)


def _check_float(t: torch.Tensor, name: str) -> None:
    if not t.dtype.is_floating_point:
        raise NotImplementedError(f"\"{name}\" not implemented for '{dtype_name(t.dtype)}'")


def _hist_kernel(x: np.ndarray, weight: torch.Tensor | None, edges: list[np.ndarray], algorithm: int,
                 density: bool, dtype: torch.dtype, op: str) -> torch.Tensor:
    """The histogram of the rows of ``x[M, D]`` over ``edges`` (one increasing array per dimension)."""
    counts = [len(e) - 1 for e in edges]
    hist = np.zeros(int(np.prod(counts, dtype=np.int64)) if counts else 0)
    npdtype = x.dtype
    if x.shape[0] and x.shape[1] and hist.size:
        table = np.zeros((len(edges), max(len(e) for e in edges)), npdtype)
        for d, e in enumerate(edges):
            table[d, :len(e)] = e
        strides = np.array([int(np.prod(counts[d + 1:], dtype=np.int64)) for d in range(len(counts))], np.int64)
        w = as_array(contiguous_as(weight)).reshape(-1) if weight is not None else np.zeros(0, npdtype)
        sized(sk.histogramdd, x.size)(x, w, table, np.array([len(e) for e in edges], np.int64),
                                      np.array(counts, npdtype), strides, hist, algorithm)
    if density:
        with np.errstate(divide="ignore", invalid="ignore"):
            hist = hist / hist.sum()
        for d, e in enumerate(edges):
            shape = [1] * len(edges)
            shape[d] = len(e) - 1
            with np.errstate(divide="ignore", invalid="ignore"):
                hist = hist.reshape(counts) / np.diff(e).astype(np.float64).reshape(shape)
    out = _device(np.asarray(hist).reshape(-1).astype(npdtype), dtype, counts)
    launch(op, x.size, x.nbytes, nbytes(out))
    return out


def _check_weight(x: torch.Tensor, weight: torch.Tensor | None, rows: int) -> None:
    if weight is None:
        return
    check_same_device("aten::histogram", x, weight)
    if weight.dtype != x.dtype:
        raise RuntimeError("torch.histogramdd: if weight tensor is provided, input tensor and weight tensor should "
                           f"have the same dtype, but got input({x.dtype}), and weight({weight.dtype})")
    if weight.numel() != rows:
        raise RuntimeError("torch.histogramdd: if weight tensor is provided it should have the same shape as the "
                           "input tensor excluding its innermost dimension, but got input with shape "
                           f"{_sizes(x)} and weight with shape {_sizes(weight)}")


def _outer_edges(x: np.ndarray, rng, dims: int) -> list[tuple[float, float]]:
    """Each dimension's leftmost and rightmost edges: ``rng`` or the data's min and max (numpy's rules)."""
    if rng is not None:
        if len(rng) != 2 * dims:
            raise RuntimeError(f"torch.histogramdd: for a {dims}-dimensional histogram range should have {2 * dims} "
                               f"elements, but got {len(rng)}")
        edges = [(float(rng[2 * d]), float(rng[2 * d + 1])) for d in range(dims)]
    elif x.shape[0]:
        edges = [(float(x[:, d].min()) if not np.isnan(x[:, d]).any() else math.nan,
                  float(x[:, d].max()) if not np.isnan(x[:, d]).any() else math.nan) for d in range(dims)]
    else:
        edges = [(0.0, 1.0)] * dims
    result = []
    for d, (lo, hi) in enumerate(edges):
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise RuntimeError(f"torch.histogramdd: dimension {d}'s range [{_num(lo)}, {_num(hi)}] is not finite")
        if lo > hi:
            raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {_num(lo)} max {_num(hi)} "
                               f"for dimension {d}")
        result.append((lo - 0.5, hi + 0.5) if lo == hi else (lo, hi))
    return result


def _num(v: float) -> str:
    return str(int(v)) if math.isfinite(v) and v == int(v) else str(v)


def _points(self: torch.Tensor, name: str) -> np.ndarray:
    """``self`` as the (M, D) array of points the histogramdd kernels read."""
    _check_float(self, name)
    if self.dim() < 2:
        raise RuntimeError(f"torch.histogramdd: input tensor should have at least 2 dimensions, but got {self.dim()}")
    return as_array(contiguous_as(self)).reshape(-1, self.shape[-1])


@register("histc")
def histc(self, bins=100, min=0, max=0):
    """Counts of ``self``'s elements in ``bins`` equal-width bins over [min, max] (the data's range when equal)."""
    check_same_device("aten::histc", self)
    return _histc(self, bins, min, max)


def _histc(self: torch.Tensor, bins: int, lo, hi) -> torch.Tensor:
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    _check_float(self, "histogram_cpu")
    x = as_array(contiguous_as(self)).reshape(-1, 1)
    lo, hi = float(to_scalar(lo)), float(to_scalar(hi))
    if lo == hi and x.size:
        lo, hi = (float(x.min()), float(x.max())) if not np.isnan(x).any() else (math.nan, math.nan)
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"torch.histc: range of [{_num(lo)}, {_num(hi)}] is not finite")
    if not lo < hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    edges = _linspace(lo, hi, bins + 1, x.dtype)
    return _hist_kernel(x, None, [edges], _LINEAR, False, self.dtype, "histc")


@register("histc.out")
def histc_out(self, bins=100, min=0, max=0, *, out):
    """:func:`histc` into ``out``."""
    check_same_device("aten::histc", self, out)
    if out.dtype != self.dtype:
        raise RuntimeError(f"torch.histogram: input tensor and hist tensor should have the same dtype, but got input "
                           f"{self.dtype} and hist {out.dtype}")
    res = _histc(self, bins, min, max)
    resize_out(out, res.shape)
    as_array(out)[...] = as_array(res)
    return out


def _histogram_ct(self: torch.Tensor, bins: int, rng, weight, density: bool):
    check_same_device("aten::histogram", self)
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    _check_float(self, "histogram_cpu")
    x = as_array(contiguous_as(self)).reshape(-1, 1)
    lo, hi = _outer_edges(x, rng, 1)[0]
    edges = _linspace(lo, hi, bins + 1, x.dtype)
    _check_weight(self.reshape(-1, 1), weight, x.shape[0])
    hist = _hist_kernel(x, weight, [edges], _LOCAL_SEARCH, density, self.dtype, "histogram")
    return hist, _device(edges, self.dtype)


def _histogram_edges(self: torch.Tensor, bins: torch.Tensor, weight, density: bool):
    check_same_device("aten::histogram", self, bins)
    _check_float(self, "histogram_cpu")
    _check_bins(self, [bins])
    x = as_array(contiguous_as(self)).reshape(-1, 1)
    _check_weight(self.reshape(-1, 1), weight, x.shape[0])
    edges = as_array(contiguous_as(bins)).reshape(-1).copy()
    hist = _hist_kernel(x, weight, [edges], _BINARY_SEARCH, density, self.dtype, "histogram")
    return hist, _device(edges, self.dtype)


def _check_bins(self: torch.Tensor, bins: list[torch.Tensor]) -> None:
    for d, b in enumerate(bins):
        if b.dtype != self.dtype:
            raise RuntimeError("torch.histogramdd: input tensor and bins tensors should have the same dtype, but got "
                               f"input with dtype {self.dtype} and bins for dimension {d} with dtype {b.dtype}")
        if b.dim() != 1:
            raise RuntimeError(f"torch.histogramdd: bins tensor should have one dimension, but got {b.dim()} "
                               f"dimensions in the bins tensor for dimension {d}")
        if b.numel() == 0:
            raise RuntimeError("torch.histogramdd: bins tensor should have at least 1 element, but got 0 elements in "
                               f"the bins tensor for dimension {d}")


def _write_pair(res: tuple[torch.Tensor, torch.Tensor], hist: torch.Tensor, bin_edges: torch.Tensor):
    for src, dst in zip(res, (hist, bin_edges)):
        check_out_dtype(dst, src.dtype)
        resize_out(dst, src.shape)
        as_array(dst)[...] = as_array(src)
    return hist, bin_edges


@register("histogram.bin_ct")
def histogram_bin_ct(self, bins=100, *, range=None, weight=None, density=False):
    """(hist, bin_edges) of ``self`` over ``bins`` equal-width bins (over ``range`` or the data's)."""
    return _histogram_ct(self, bins, range, weight, density)


@register("histogram.bin_ct_out")
def histogram_bin_ct_out(self, bins=100, *, range=None, weight=None, density=False, hist, bin_edges):
    """:func:`histogram_bin_ct` into ``hist``/``bin_edges``."""
    return _write_pair(_histogram_ct(self, bins, range, weight, density), hist, bin_edges)


@register("histogram.bins_tensor")
def histogram_bins_tensor(self, bins, *, weight=None, density=False):
    """(hist, bin_edges) of ``self`` over the increasing edges ``bins``."""
    return _histogram_edges(self, bins, weight, density)


@register("histogram.bins_tensor_out")
def histogram_bins_tensor_out(self, bins, *, weight=None, density=False, hist, bin_edges):
    """:func:`histogram_bins_tensor` into ``hist``/``bin_edges``."""
    return _write_pair(_histogram_edges(self, bins, weight, density), hist, bin_edges)


def _dd_edges(self: torch.Tensor, bins, rng) -> list[np.ndarray]:
    x = _points(self, "histogramdd")
    dims = x.shape[1]
    if len(bins) != dims:
        raise RuntimeError(f"torch.histogramdd: expected {dims} sequences of bin edges for a {dims}-dimensional "
                           f"histogram but got {len(bins)}")
    for d, ct in enumerate(bins):
        if ct <= 0:
            raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {ct} for dimension {d}")
    return [_linspace(lo, hi, ct + 1, x.dtype) for (lo, hi), ct in zip(_outer_edges(x, rng, dims), bins)]


@register("_histogramdd_bin_edges")
def histogramdd_bin_edges(self, bins, *, range=None, weight=None, density=False):
    """The equal-width bin edges of each dimension of the points ``self[..., D]``."""
    check_same_device("aten::_histogramdd_bin_edges", self)
    return [_device(e, self.dtype) for e in _dd_edges(self, bins, range)]


@register("_histogramdd_from_bin_cts")
def histogramdd_from_bin_cts(self, bins, *, range=None, weight=None, density=False):
    """The D-dimensional histogram of the points ``self[..., D]`` over equal-width bins."""
    check_same_device("aten::_histogramdd_from_bin_cts", self)
    edges = _dd_edges(self, bins, range)
    x = _points(self, "histogramdd")
    _check_weight(self, weight, x.shape[0])
    return _hist_kernel(x, weight, edges, _LOCAL_SEARCH, density, self.dtype, "histogramdd")


@register("_histogramdd_from_bin_tensors")
def histogramdd_from_bin_tensors(self, bins, *, weight=None, density=False):
    """The D-dimensional histogram of the points ``self[..., D]`` over the edges ``bins`` (one per dimension)."""
    check_same_device("aten::_histogramdd_from_bin_tensors", self, *bins)
    x = _points(self, "histogramdd")
    if len(bins) != x.shape[1]:
        raise RuntimeError(f"torch.histogramdd: expected {x.shape[1]} sequences of bin edges for a {x.shape[1]}-"
                           f"dimensional histogram but got {len(bins)}")
    _check_bins(self, list(bins))
    _check_weight(self, weight, x.shape[0])
    edges = [as_array(contiguous_as(b)).reshape(-1).copy() for b in bins]
    return _hist_kernel(x, weight, edges, _BINARY_SEARCH, density, self.dtype, "histogramdd")

