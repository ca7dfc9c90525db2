"""Masks and indexing: masked_select/fill, index_select/fill/copy/reduce, gather/scatter(_reduce), put/take,
roll, nonzero(_static), segment_reduce, the embedding backward, tril/triu."""

from __future__ import annotations

import math

import numpy as np
import torch

from ..device import fallback
from ..kernels import indexing as ik
from ..kernels.threads import sized
from .common import (
    NUMPY_DTYPES,
    as_array,
    check_same_device,
    empty,
    flat_array,
    launch,
    nbytes,
    resize_out,
    to_scalar,
)
from .copy import device_copy
from .factories import checked_scalar
from .pointwise import pointwise
from .registry import register


def _bool_mask(mask: torch.Tensor, op: str) -> None:
    if mask.dtype != torch.bool:
        raise RuntimeError(f"{op}: expected BoolTensor for mask")


@register("masked_select")
def masked_select(self, mask):
    check_same_device("aten::masked_select", self, mask)
    _bool_mask(mask, "masked_select")
    shape = torch.broadcast_shapes(self.shape, mask.shape)
    x = np.ascontiguousarray(np.broadcast_to(as_array(self), shape)).reshape(-1)
    m = np.ascontiguousarray(np.broadcast_to(as_array(mask), shape)).reshape(-1)
    n = ik.count_true(m)
    out = empty((n,), self.dtype)
    ik.masked_select(x, m, as_array(out))
    launch("masked_select", x.shape[0], nbytes(self) + nbytes(mask), nbytes(out))
    return out


@register("masked_fill_.Scalar", "masked_fill_.Tensor")
def masked_fill_(self, mask, value):
    check_same_device("aten::masked_fill_", self, mask)
    _bool_mask(mask, "masked_fill_")
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise RuntimeError(
                "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                f"{value.dim()} dimension(s)."
            )
        value = as_array(value).item() if value.device.type == "npu" else value.item()
    return pointwise("masked_fill", "v if {1} else {0}", (self, mask), named={"v": value},
                     out=self, inplace=True, compute_dtype=self.dtype)


@register("masked_fill.Scalar", "masked_fill.Tensor")
def masked_fill(self, mask, value):
    shape = torch.broadcast_shapes(self.shape, mask.shape)
    return masked_fill_(self.expand(shape).clone(), mask, value)



# --- index_select, gather, scatter -------------------------------------------------------

def _dim(t: torch.Tensor, dim: int) -> int:
    nd = max(t.dim(), 1)
    if not -nd <= dim < nd:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {dim})")
    return dim % nd


def _three(t: torch.Tensor, dim: int) -> np.ndarray:
    """A contiguous tensor viewed as (outer, t.shape[dim], inner)."""
    shape = list(t.shape) or [1]
    outer = math.prod(shape[:dim]) if dim else 1
    inner = math.prod(shape[dim + 1:]) if dim + 1 < len(shape) else 1
    return as_array(t.contiguous()).reshape(outer, shape[dim], inner)


def _index_array(index: torch.Tensor, size: int, error=None) -> np.ndarray:
    """The index as a flat int64 array, every entry in ``[0, size)``.

    Negative entries are out of range too: index_select, gather, scatter and index_add do not wrap
    them (only advanced indexing does). ``error(value)`` makes the exception the CPU raises.
    """
    idx = as_array(index.contiguous()).astype(np.int64).reshape(-1)
    bad = ik.check_bounds(idx, size)
    if bad >= 0:
        raise error(int(idx[bad])) if error is not None else IndexError("index out of range in self")
    return idx


def _out_of_bounds(dim: int, size: int):
    """gather/scatter's error for a bad index (the CPU's message and type)."""
    return lambda v: RuntimeError(f"index {v} is out of bounds for dimension {dim} with size {size}")


@register("index_select")
def index_select(self, dim, index):
    check_same_device("aten::index_select", self, index)
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError("index_select(): Expected dtype int32/int64 for index")
    dim = _dim(self, dim)
    size = self.shape[dim] if self.dim() else 1

    def error(v: int) -> Exception:
        if self.dim() > 1 and dim == 1:  # the CPU's dim-1 fast path words (and types) it differently
            return RuntimeError(f"INDICES element is out of DATA bounds, id={v} axis_dim={size}")
        return IndexError("index out of range in self")

    idx = _index_array(index, size, error)
    out_shape = list(self.shape)
    if self.dim():
        out_shape[dim] = idx.shape[0]
    out = empty(out_shape, self.dtype)
    if out.numel():
        x = _three(self, dim)
        sized(ik.index_select, out.numel())(x, idx, as_array(out).reshape(x.shape[0], idx.shape[0], x.shape[2]))
    launch("index_select", 0, nbytes(out) + idx.nbytes, nbytes(out))
    return out


@register("index_select.out")
def index_select_out(self, dim, index, *, out):
    res = index_select(self, dim, index)
    resize_out(out, res.shape)
    device_copy(out, res)
    return out


def _gather_views(self: torch.Tensor, dim: int, index: torch.Tensor):
    if index.dim() != self.dim() and not (index.dim() <= 1 and self.dim() <= 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    idx = index.contiguous()
    shape = list(idx.shape) or [1]
    outer = math.prod(shape[:dim]) if dim else 1
    inner = math.prod(shape[dim + 1:]) if dim + 1 < len(shape) else 1
    return outer, shape[dim], inner


@register("gather")
def gather(self, dim, index, *, sparse_grad=False):
    check_same_device("aten::gather", self, index)
    if index.numel() and index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
    dim = _dim(self, dim)
    out = empty(index.shape, self.dtype)
    if index.numel():
        outer, n, inner = _gather_views(self, dim, index)
        size = self.shape[dim] if self.dim() else 1
        idx = _index_array(index, size, _out_of_bounds(dim, size)).reshape(outer, n, inner)
        # the input restricted to the index's extent in the other dimensions
        sl = tuple(slice(0, index.shape[d]) if d != dim else slice(None) for d in range(self.dim()))
        x = self[sl] if self.dim() else self.reshape(1)
        x3 = _three(x, dim)
        sized(ik.gather, out.numel())(x3, idx, as_array(out).reshape(outer, n, inner))
    launch("gather", 0, nbytes(out) + nbytes(index), nbytes(out))
    return out


@register("gather.out")
def gather_out(self, dim, index, *, sparse_grad=False, out):
    res = gather(self, dim, index)
    resize_out(out, res.shape)
    device_copy(out, res)
    return out


_REDUCE = {None: 0, "add": 1, "sum": 1, "multiply": 2}


def _scatter_into(dst: torch.Tensor, dim: int, index: torch.Tensor, src, accumulate: bool,
                  reduce: str | None = None) -> torch.Tensor:
    """In place on ``dst`` (contiguous working copy written back if needed)."""
    check_same_device("aten::scatter", dst, index, src)
    if index.numel() and index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
    if reduce not in _REDUCE:
        raise RuntimeError(f"reduce argument must be either add or multiply. Got {reduce}")
    mode = 1 if accumulate else _REDUCE[reduce]
    dim = _dim(dst, dim)
    if index.numel() == 0:
        return dst
    work = dst if dst.is_contiguous() else dst.contiguous()
    outer, n, inner = _gather_views(dst, dim, index)
    size = dst.shape[dim] if dst.dim() else 1
    idx = _index_array(index, size, _out_of_bounds(dim, size)).reshape(outer, n, inner)
    # dst restricted to the index's extent outside ``dim``: a strided view of the working copy
    sl = tuple(slice(0, index.shape[d]) if d != dim else slice(None) for d in range(dst.dim()))
    view = as_array(work)[sl] if dst.dim() else as_array(work).reshape(1)
    d3 = view.reshape(outer, size, inner) if view.flags.c_contiguous else _strided3(view, dim, outer, size, inner)
    if isinstance(src, torch.Tensor) and src.dim() > 0:
        s = src[tuple(slice(0, index.shape[d]) for d in range(src.dim()))] if src.shape != index.shape else src
        s3 = as_array(s.contiguous()).reshape(outer, n, inner).astype(d3.dtype)
        ik.scatter(d3, idx, s3, mode)
    else:
        value = to_scalar(src) if not isinstance(src, torch.Tensor) or src.device.type == "cpu" \
            else as_array(src).item()
        if mode:
            ik.scatter(d3, idx, np.full((outer, n, inner), value, dtype=d3.dtype), mode)
        else:
            ik.scatter_value(d3, idx, NUMPY_DTYPES[dst.dtype](value))
    if not np.may_share_memory(d3, view):  # _strided3 had to copy: the result goes back into dst
        view[...] = d3.reshape(view.shape)
    if work is not dst:
        device_copy(dst, work)
    launch("scatter_add" if mode == 1 else "scatter", index.numel(), nbytes(index), index.numel() * 4)
    return dst


def _strided3(a: np.ndarray, dim: int, outer: int, size: int, inner: int) -> np.ndarray:
    """An (outer, size, inner) strided view of an N-d array slice without copying."""
    shape = a.shape
    if a.ndim == 1:
        return a.reshape(1, size, 1)
    # collapse dims before and after ``dim``; valid because the slice keeps each run of dims regular
    before = shape[:dim]
    after = shape[dim + 1:]
    st = a.strides
    s_outer = st[dim - 1] if before else 0
    s_inner = st[-1] if after else 0
    if len(before) > 1 or len(after) > 1:
        return np.ascontiguousarray(a).reshape(outer, size, inner)  # rare: fall back to a copy
    return np.lib.stride_tricks.as_strided(a, (outer, size, inner), (s_outer, st[dim], s_inner))


@register("scatter.src_out", "scatter.value_out")
def scatter_out(self, dim, index, src, *, out):
    if out is not self:
        resize_out(out, self.shape)
        device_copy(out, self)
    return _scatter_into(out, dim, index, src, False)


@register("scatter.reduce_out", "scatter.value_reduce_out")
def scatter_reduce_out(self, dim, index, src, *, reduce, out):
    if out is not self:
        resize_out(out, self.shape)
        device_copy(out, self)
    return _scatter_into(out, dim, index, src, False, reduce)


@register("index_add.out")
def index_add_out(self, dim, index, source, *, alpha=1, out):
    check_same_device("aten::index_add", self, index, source)
    if out is not self:
        resize_out(out, self.shape)
        device_copy(out, self)
    dim = _dim(self, dim)
    size = self.shape[dim] if self.dim() else 1
    idx = _index_array(index, size)
    work = out if out.is_contiguous() else out.contiguous()
    if source.numel():
        d3 = _three(work, dim) if work is not out else as_array(work).reshape(_three(work, dim).shape)
        src3 = _three(source if source.dim() else source.reshape(1), dim if source.dim() else 0)
        ik.index_add(d3, idx, src3.astype(d3.dtype), NUMPY_DTYPES[out.dtype](alpha))
    if work is not out:
        device_copy(out, work)
    launch("index_add", source.numel(), nbytes(source), nbytes(source))
    return out


@register("masked_scatter_")
def masked_scatter_(self, mask, source):
    check_same_device("aten::masked_scatter_", self, mask, source)
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_scatter_ only supports boolean masks, but got mask with dtype "
                           f"{mask.dtype}")
    work = self.contiguous()
    flat = as_array(work).reshape(-1)
    m = np.ascontiguousarray(np.broadcast_to(as_array(mask), self.shape)).reshape(-1)
    src = np.ascontiguousarray(as_array(source)).reshape(-1)
    if ik.count_true(m) > src.shape[0]:
        raise RuntimeError("masked_scatter: expected source to have at least as many elements as ones in mask")
    ik.masked_scatter(flat, m, src.astype(flat.dtype))
    if work is not self:
        device_copy(self, work)
    launch("masked_scatter", flat.shape[0], nbytes(source), nbytes(self))
    return self


@register("scatter.src", "scatter.value")
def scatter_functional(self, dim, index, src):
    return _scatter_into(self.clone(), dim, index, src, False)


@register("scatter_.src", "scatter_.value")
def scatter_inplace(self, dim, index, src):
    return _scatter_into(self, dim, index, src, False)


@register("scatter_add.out")
def scatter_add_out(self, dim, index, src, *, out):
    if out is not self:
        resize_out(out, self.shape)
        device_copy(out, self)
    return _scatter_into(out, dim, index, src, True)


@register("scatter_add")
def scatter_add(self, dim, index, src):
    return _scatter_into(self.clone(), dim, index, src, True)


@register("scatter_add_")
def scatter_add_inplace(self, dim, index, src):
    return _scatter_into(self, dim, index, src, True)


# --- nonzero, advanced indexing ----------------------------------------------------------

@register("nonzero")
def nonzero(self):
    check_same_device("aten::nonzero", self)
    flat = np.ascontiguousarray(as_array(self)).reshape(-1)
    n = ik.count_true(flat != 0) if flat.dtype != np.bool_ else ik.count_true(flat)
    coords = np.empty((n, 1), dtype=np.int64)
    ik.nonzero(flat, coords)
    idx = np.stack(np.unravel_index(coords[:, 0], self.shape), axis=1) if self.dim() else np.zeros((n, 0), np.int64)
    out = empty((n, self.dim()), torch.int64)
    as_array(out)[...] = idx
    launch("nonzero", flat.shape[0], nbytes(self), nbytes(out))
    return out


@register("nonzero.out")
def nonzero_out(self, *, out):
    res = nonzero(self)
    resize_out(out, res.shape)
    device_copy(out, res)
    return out


def _np_indices(self: torch.Tensor, indices) -> tuple:
    """PyTorch's index list as a NumPy index tuple (None = full slice; bool masks kept)."""
    out = []
    for ix in indices:
        if ix is None:
            out.append(slice(None))
        else:
            if ix.device.type == "npu":  # indices may also be CPU tensors, as with CUDA
                check_same_device("aten::index", self, ix)
            a = as_array(ix) if ix.device.type == "npu" else ix.numpy()
            if a.dtype != np.bool_:
                a = a.astype(np.int64)
            out.append(a)
    return tuple(out)


@register("index.Tensor")
def index(self, indices):
    """Advanced indexing. NumPy computes the addresses (its rules are PyTorch's); the NPU moves the data."""
    try:
        picked = as_array(self)[_np_indices(self, indices)]
    except IndexError as e:
        raise IndexError(f"index out of range in self ({e})") from None
    out = empty(picked.shape, self.dtype)
    as_array(out)[...] = picked
    launch("index", 0, nbytes(out), nbytes(out))
    return out


@register("index.Tensor_out")
def index_out(self, indices, *, out):
    res = index(self, indices)
    resize_out(out, res.shape)
    device_copy(out, res)
    return out


@register("index_put_", "_index_put_impl_")
def index_put_(self, indices, values, accumulate=False, unsafe=False):
    check_same_device("aten::index_put_", self, values)
    a = as_array(self)
    key = _np_indices(self, indices)
    v = as_array(values) if values.device.type == "npu" else values.numpy()
    if accumulate:
        np.add.at(a, key, v.astype(a.dtype))
    else:
        a[key] = v
    launch("index_put", 0, nbytes(values), nbytes(values))
    return self


@register("index_put")
def index_put(self, indices, values, accumulate=False):
    return index_put_(self.clone(), indices, values, accumulate)


# --- embedding backward, triangles -----------------------------------------------------

@register("embedding_dense_backward")
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    check_same_device("aten::embedding_dense_backward", grad_output, indices)
    d = grad_output.shape[-1]
    idx = as_array(indices.contiguous()).astype(np.int64).reshape(-1)
    g = as_array(grad_output.contiguous()).reshape(-1, d).astype(np.float64)
    counts = np.bincount(idx, minlength=num_weights).astype(np.float64) if scale_grad_by_freq \
        else np.ones(1, np.float64)
    acc = np.zeros((num_weights, d), dtype=np.float64)
    ik.embedding_backward(g, idx, acc, padding_idx, counts, scale_grad_by_freq)
    out = empty((num_weights, d), grad_output.dtype)
    as_array(out)[...] = acc
    launch("embedding_backward", idx.shape[0] * d, nbytes(grad_output), nbytes(out))
    return out


def _triangle(self: torch.Tensor, diagonal: int, lower: bool, out: torch.Tensor | None = None):
    check_same_device("aten::tril" if lower else "aten::triu", self)
    if self.dim() < 2:
        raise RuntimeError(f"{'tril' if lower else 'triu'}: input tensor must have at least 2 dimensions")
    res = empty(self.shape, self.dtype)
    if self.numel():
        r, c = self.shape[-2:]
        x = as_array(self.contiguous()).reshape(-1, r, c)
        sized(ik.triangle, x.size)(x, as_array(res).reshape(-1, r, c), diagonal, lower)
    launch("tril" if lower else "triu", 0, nbytes(self), nbytes(res))
    if out is not None:
        resize_out(out, res.shape)
        device_copy(out, res)
        return out
    return res


@register("tril")
def tril(self, diagonal=0):
    return _triangle(self, diagonal, True)


@register("triu")
def triu(self, diagonal=0):
    return _triangle(self, diagonal, False)


@register("tril.out")
def tril_out(self, diagonal=0, *, out):
    return _triangle(self, diagonal, True, out)


@register("triu.out")
def triu_out(self, diagonal=0, *, out):
    return _triangle(self, diagonal, False, out)


@register("tril_")
def tril_inplace(self, diagonal=0):
    return _triangle(self, diagonal, True, self)


@register("triu_")
def triu_inplace(self, diagonal=0):
    return _triangle(self, diagonal, False, self)


# --- scatter_reduce, index_reduce --------------------------------------------------------

#: reduce name -> kernel mode (see :func:`npu_lab.kernels.indexing.scatter_reduce`).
_REDUCE_MODES = {"sum": 0, "prod": 1, "mean": 2, "amax": 3, "amin": 4}


def _identity(mode: int, dtype: torch.dtype) -> object:
    """The value a target starts from when ``include_self=False``: the reduction's identity."""
    if mode == 1:
        return 1
    if mode in (3, 4):
        if dtype == torch.bool:
            return mode == 4
        if dtype.is_floating_point:
            return -np.inf if mode == 3 else np.inf
        info = torch.iinfo(dtype)
        return info.min if mode == 3 else info.max
    return 0


def _contiguous_strides(shape) -> np.ndarray:
    strides = np.ones(max(len(shape), 1), np.int64)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * max(int(shape[d + 1]), 1)
    return strides[:len(shape)]


def _finish_mean(work: torch.Tensor, counts: np.ndarray) -> None:
    """Divide the mean's sums by their counts (at least 1): floor division for integer tensors, as the CPU."""
    ik.divide_counts(as_array(work).reshape(-1), counts.reshape(-1), not work.dtype.is_floating_point)


def _scatter_reduce_checks(self, dim: int, index, src, reduce: str) -> int:
    check_same_device("aten::scatter_reduce", self, index, src)
    dim = _dim(self, dim)
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
    if self.dtype != src.dtype:
        raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
    if index.numel():
        nd = max(self.dim(), 1)
        if max(index.dim(), 1) != nd:
            raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
        if max(src.dim(), 1) != nd:
            raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
        ish, ssh, dsh = (list(t.shape) or [1] for t in (index, self, src))
        if any(ish[d] > dsh[d] or (d != dim and ish[d] > ssh[d]) for d in range(nd)):
            raise RuntimeError(
                f"Expected index {ish} to be no larger than self {ssh} apart from dimension {dim} and to be no "
                f"larger size than src {dsh}")
    if reduce not in _REDUCE_MODES:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    return dim


@register("scatter_reduce.two_out")
def scatter_reduce_two_out(self, dim, index, src, reduce, *, include_self=True, out):
    """out = self with src reduced (sum, prod, mean, amax, amin) into the positions the index names along dim."""
    dim = _scatter_reduce_checks(self, dim, index, src, reduce)
    if self.dtype not in NUMPY_DTYPES or self.is_complex() or (self.dtype == torch.bool and reduce == "mean"):
        return fallback.unsupported(torch.ops.aten.scatter_reduce.two_out, (self, dim, index, src, reduce),
                                    {"include_self": include_self, "out": out}, f"scatter_reduce of {self.dtype}")
    check_same_device("aten::scatter_reduce", out)
    _check_out_dtype(out, self.dtype)
    mode = _REDUCE_MODES[reduce]
    size = self.shape[dim] if self.dim() else 1
    work = empty(self.shape, self.dtype)
    device_copy(work, self)
    counts = np.full(max(self.numel(), 1), 1 if include_self else 0, np.int64)
    if index.numel():
        idx = _index_array(index, size, _out_of_bounds(dim, size))
        flat = as_array(work).reshape(-1)
        # 0-d tensors as 1-d ones (the rank checks above allow mixing them)
        shape = np.array(list(index.shape) or [1], np.int64)
        src_strides = np.array(list(src.stride()) or [1], np.int64)
        ik.scatter_reduce(flat, _contiguous_strides(list(self.shape) or [1]), idx, shape, dim, flat_array(src),
                          src.storage_offset(), src_strides, mode,
                          NUMPY_DTYPES[self.dtype](_identity(mode, self.dtype)), include_self, counts)
        if mode == 2:
            _finish_mean(work, counts)
    launch(f"scatter_reduce_{reduce}", index.numel(), nbytes(index) + nbytes(src), nbytes(work))
    resize_out(out, work.shape)
    device_copy(out, work)
    return out


@register("scatter_reduce.two")
def scatter_reduce_two(self, dim, index, src, reduce, *, include_self=True):
    """Functional scatter_reduce (a new tensor)."""
    return scatter_reduce_two_out(self, dim, index, src, reduce, include_self=include_self,
                                  out=empty(self.shape, self.dtype))


@register("scatter_reduce_.two")
def scatter_reduce_two_(self, dim, index, src, reduce, *, include_self=True):
    """In-place scatter_reduce."""
    return scatter_reduce_two_out(self, dim, index, src, reduce, include_self=include_self, out=self)


def _index_dim_checks(op: str, self, dim: int, index, source) -> tuple[int, torch.Tensor]:
    """dim wrapped and ``source`` as a tensor of self's rank (0-d tensors as 1-d)."""
    dim = _dim(self, dim)
    if self.dim() and source.dim() and source.dim() != self.dim():
        raise IndexError(
            f"{op}(): When source and destination are not scalars, their dimensionality must match. Source "
            f"dimensionality ({source.dim()}), destination dimensionality ({self.dim()})")
    return dim, source if source.dim() else source.reshape(1)


@register("index_reduce.out")
def index_reduce_out(self, dim, index, source, reduce, *, include_self=True, out):
    """out = self with source's slices reduced (prod, mean, amax, amin) into the slices index names along dim."""
    check_same_device("aten::index_reduce", self, index, source)
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.")
    dim = _dim(self, dim)
    if index.dim() > 1:
        raise IndexError(f"index_reduce_(): Index is supposed to be a vector, but got dim: {index.dim()} with type: "
                         f"{_type_name(index.dtype)} and size: {list(index.shape)}")
    if index.dtype not in (torch.int64, torch.int32):
        raise IndexError(f"index_reduce_(): Expected dtype int32/int64 for index but got: {_type_name(index.dtype)}")
    if self.dtype != source.dtype:
        raise RuntimeError(f"index_reduce_(): self ({_type_name(self.dtype)}) and source "
                           f"({_type_name(source.dtype)}) must have the same scalar type")
    nsrc = source.shape[dim] if source.dim() else 1
    if index.numel() != nsrc:
        raise RuntimeError(f"index_reduce_(): Number of indices ({index.numel()}) should be equal to "
                           f"source.size(dim): ({nsrc}), for dim: {dim}")
    s_other = [s for d, s in enumerate(self.shape) if d != dim]
    src_other = [s for d, s in enumerate(source.shape) if d != dim]
    if (self.dim() or source.dim()) and (source.dim() != max(self.dim(), 1) or s_other != src_other):
        raise RuntimeError("source tensor shape must match self tensor shape, excluding the specified dimension. "
                           f"Got self.shape = {list(self.shape)} source.shape = {list(source.shape)}")
    if self.dtype not in NUMPY_DTYPES or self.dtype in (torch.bool, torch.complex64, torch.complex128):
        return fallback.unsupported(torch.ops.aten.index_reduce.out, (self, dim, index, source, reduce),
                                    {"include_self": include_self, "out": out}, f"index_reduce of {self.dtype}")
    check_same_device("aten::index_reduce", out)
    _check_out_dtype(out, self.dtype)
    mode = _REDUCE_MODES[reduce]
    size = self.shape[dim] if self.dim() else 1
    idx = _index_array(index, size)
    work = empty(self.shape, self.dtype)
    device_copy(work, self)
    if index.numel():
        d3 = _three(work, dim) if self.dim() else as_array(work).reshape(1, 1, 1)
        counts = np.full(d3.shape, 1 if include_self else 0, np.int64)
        s3 = _three(source, dim) if source.dim() else as_array(source).reshape(1, 1, 1)
        ik.index_reduce(d3, idx, s3, mode, NUMPY_DTYPES[self.dtype](_identity(mode, self.dtype)), include_self,
                        counts)
        if mode == 2:
            _finish_mean(work, counts)
    launch(f"index_reduce_{reduce}", source.numel(), nbytes(index) + nbytes(source), nbytes(work))
    resize_out(out, work.shape)
    device_copy(out, work)
    return out


@register("index_reduce")
def index_reduce(self, dim, index, source, reduce, *, include_self=True):
    """Functional index_reduce."""
    return index_reduce_out(self, dim, index, source, reduce, include_self=include_self,
                            out=empty(self.shape, self.dtype))


@register("index_reduce_")
def index_reduce_(self, dim, index, source, reduce, *, include_self=True):
    """In-place index_reduce."""
    return index_reduce_out(self, dim, index, source, reduce, include_self=include_self, out=self)


#: caffe2::TypeMeta names, as structured kernels' out= dtype errors print them.
_META_NAMES = {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half",
               torch.bfloat16: "c10::BFloat16", torch.int64: "long int", torch.int32: "int", torch.int16: "short int",
               torch.int8: "signed char", torch.uint8: "unsigned char", torch.bool: "bool",
               torch.complex64: "c10::complex<float>", torch.complex128: "c10::complex<double>"}


def _check_out_dtype(out: torch.Tensor, dtype: torch.dtype) -> None:
    """A structured kernel's check that ``out=`` has the result's dtype."""
    if out.dtype != dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {_META_NAMES.get(dtype, dtype)}, but got "
                           f"{_META_NAMES.get(out.dtype, out.dtype)} instead")


def _type_name(dtype: torch.dtype) -> str:
    """PyTorch's C++ name of a dtype (Float, Long...), as its error messages print it."""
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
            torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}.get(
                dtype, str(dtype).replace("torch.", ""))


# --- index_fill, index_copy -----------------------------------------------------------------

def _wrapped_index(index: torch.Tensor, size: int, error) -> np.ndarray:
    """The index as a flat int64 array with negative entries wrapped; ``error(value)`` for one out of range."""
    idx = np.array(as_array(index.contiguous()), dtype=np.int64).reshape(-1)
    bad = ik.wrap_check(idx, size)
    if bad >= 0:
        raise error(int(as_array(index.contiguous()).reshape(-1)[bad]))
    return idx


def _strided3_view(t: torch.Tensor, dim: int) -> np.ndarray | None:
    """``t``'s memory as an (outer, t.shape[dim], inner) strided view, or None when the layout does not allow it."""
    a = as_array(t) if t.dim() else as_array(t).reshape(1)
    shape = a.shape
    outer = math.prod(shape[:dim]) if dim else 1
    inner = math.prod(shape[dim + 1:]) if dim + 1 < len(shape) else 1
    try:
        return a.reshape(outer, shape[dim], inner, copy=False)
    except (ValueError, TypeError):
        return None


@register("index_fill_.int_Scalar", "index_fill_.int_Tensor")
def index_fill_(self, dim, index, value):
    """self[..., index[j], ...] = value along dim (negative indices wrap), in place."""
    check_same_device("aten::index_fill_", self, index)
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise RuntimeError("index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                               f"{value.dim()} dimension(s).")
        value = value.item()
    dim = _dim(self, dim)
    if index.dim() > 1:
        raise RuntimeError("Index has to be a vector/scalar")
    if index.dtype != torch.int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index.")
    if self.dtype not in NUMPY_DTYPES:
        return fallback.unsupported(torch.ops.aten.index_fill_.int_Scalar, (self, dim, index, value), {},
                                    f"index_fill_ of {self.dtype}")
    size = self.shape[dim] if self.dim() else 1
    idx = _wrapped_index(index, size, lambda v: IndexError(
        f"index {v} is out of bounds for dimension {dim} with size {size}"))
    if not self.numel() or not idx.shape[0]:
        return self
    if isinstance(value, complex) and not self.is_complex():
        raise RuntimeError("index_fill_(): Converting complex Scalar to non-complex type is not supported")
    np_value = checked_scalar(value, self.dtype)
    view = _strided3_view(self, dim)
    if view is not None:
        ik.index_fill(view, idx, np_value)
    else:
        work = self.contiguous()
        ik.index_fill(_three(work, dim), idx, np_value)
        device_copy(self, work)
    launch("index_fill", 0, idx.nbytes, idx.shape[0] * self.numel() // max(size, 1) * self.element_size())
    return self


@register("index_fill.int_Scalar", "index_fill.int_Tensor")
def index_fill(self, dim, index, value):
    """Functional index_fill."""
    return index_fill_(self.clone(), dim, index, value)


@register("index_copy.out")
def index_copy_out(self, dim, index, source, *, out):
    """out = self with self[..., index[j], ...] = source[..., j, ...] along dim."""
    check_same_device("aten::index_copy", self, index, source, out)
    dim = _dim(self, dim)
    if index.dim() >= 2:
        raise IndexError(f"index_copy_(): Index should have dimension 1 or 0 (got {index.dim()})")
    nsrc = source.shape[dim] if source.dim() else 1
    if index.numel() != nsrc:
        raise IndexError(f"index_copy_(): Number of indices ({index.numel()}) should be equal to source.size(dim) "
                         f"({nsrc})")
    if index.dtype != torch.int64:
        raise RuntimeError(f"index_copy_(): Expected a long tensor for index, but got {_type_name(index.dtype)}")
    if self.dtype != source.dtype:
        raise RuntimeError(f"index_copy_(): self and source expected to have the same dtype, but got (self) "
                           f"{_type_name(self.dtype)} and (source) {_type_name(source.dtype)}")
    _check_out_dtype(out, self.dtype)
    dim, source = _index_dim_checks("index_copy_", self, dim, index, source)
    for d in range(self.dim()):
        if d != dim and self.shape[d] != source.shape[d]:
            raise RuntimeError(
                f"index_copy_(): Source/destination tensor must have same slice shapes. Destination slice shape: "
                f"{_slice_shape(self, dim)} at dimension {dim} and source slice shape: {_slice_shape(source, dim)} "
                f"at dimension {dim}.")
    if self.dtype not in NUMPY_DTYPES:
        return fallback.unsupported(torch.ops.aten.index_copy.out, (self, dim, index, source), {"out": out},
                                    f"index_copy of {self.dtype}")
    size = self.shape[dim] if self.dim() else 1
    idx = _index_array(index, size, lambda v: IndexError(
        f"index_copy_(): index {v} is out of bounds for dimension {dim} with size {size}"))
    work = empty(self.shape, self.dtype)
    device_copy(work, self)
    if source.numel():
        ik.index_copy(_three(work, dim) if self.dim() else as_array(work).reshape(1, 1, 1), idx, _three(source, dim))
    launch("index_copy", 0, nbytes(source) + idx.nbytes, nbytes(source))
    resize_out(out, work.shape)
    device_copy(out, work)
    return out


def _slice_shape(t: torch.Tensor, dim: int) -> str:
    """The shape of one slice along ``dim``, as the CPU's message prints it (sizes separated by ``x``)."""
    return "x".join(str(s) for d, s in enumerate(t.shape) if d != dim) or ""


@register("index_copy")
def index_copy(self, dim, index, source):
    """Functional index_copy."""
    return index_copy_out(self, dim, index, source, out=empty(self.shape, self.dtype))


@register("index_copy_")
def index_copy_(self, dim, index, source):
    """In-place index_copy."""
    return index_copy_out(self, dim, index, source, out=self)


# --- put, take -----------------------------------------------------------------------------

def _flat_index(index: torch.Tensor, numel: int) -> np.ndarray:
    """put/take's index into the flattened tensor, negative entries wrapped; the CPU's IndexError otherwise."""
    return _wrapped_index(index, numel, lambda v: IndexError(
        f"out of range: tried to access index {v} on a tensor of {numel} elements."))


@register("put_")
def put_(self, index, source, accumulate=False):
    """self.flatten()[index[k]] = source[k] (or += with accumulate), in place."""
    check_same_device("aten::put_", self, index, source)
    if index.numel() != source.numel():
        raise IndexError(f"put_(): Expected source and index to have the same number of elements, but got "
                         f"source.numel() = {source.numel()}, index.numel() = {index.numel()}")
    if index.dtype != torch.int64:
        raise RuntimeError(f"put_(): Expected a long tensor for index, but got {_type_name(index.dtype)}")
    if self.dtype != source.dtype:
        raise RuntimeError(f"put_(): self and source expected to have the same dtype, but got self.dtype = "
                           f"{_type_name(self.dtype)} and source.dtype = {_type_name(source.dtype)}")
    if not index.numel():
        return self
    if self.numel() == 0:
        raise IndexError("put_(): Tried to put elements into an empty tensor")
    if self.dtype not in NUMPY_DTYPES:
        return fallback.unsupported(torch.ops.aten.put_.default, (self, index, source, accumulate), {},
                                    f"put_ of {self.dtype}")
    idx = _flat_index(index, self.numel())
    work = self if self.is_contiguous() else self.contiguous()
    src = np.ascontiguousarray(as_array(source)).reshape(-1)
    ik.put(as_array(work).reshape(-1), idx, src, bool(accumulate))
    if work is not self:
        device_copy(self, work)
    launch("put", idx.shape[0], nbytes(index) + nbytes(source), nbytes(source))
    return self


@register("put")
def put(self, index, source, accumulate=False):
    """Functional put."""
    return put_(self.clone(), index, source, accumulate)


@register("take")
def take(self, index):
    """self.flatten()[index] in the index's shape (negative indices wrap)."""
    check_same_device("aten::take", self, index)
    if index.dtype != torch.int64:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got {_type_name(index.dtype)}")
    out = empty(index.shape, self.dtype)
    if index.numel():
        if self.numel() == 0:
            raise IndexError("take(): tried to take from an empty tensor")
        idx = _flat_index(index, self.numel())
        x = np.ascontiguousarray(as_array(self)).reshape(-1)
        ik.take(x, idx, as_array(out).reshape(-1))
    launch("take", 0, nbytes(out) + nbytes(index), nbytes(out))
    return out


@register("take.out")
def take_out(self, index, *, out):
    """take into ``out``."""
    if out.dtype != self.dtype:
        raise RuntimeError(f"take(): self and out expected to have the same dtype, but got self.dtype = "
                           f"{_type_name(self.dtype)} and out.dtype = {_type_name(out.dtype)}")
    res = take(self, index)
    resize_out(out, res.shape)
    device_copy(out, res)
    return out


# --- roll ----------------------------------------------------------------------------------

@register("roll")
def roll(self, shifts, dims=()):
    """Elements shifted circularly by shifts[k] along dims[k] (the flattened tensor when dims is empty)."""
    check_same_device("aten::roll", self)
    shifts, dims = [int(s) for s in shifts], [int(d) for d in dims]
    if not shifts:
        raise RuntimeError("`shifts` required")
    if not dims and len(shifts) == 1:
        return roll(self.flatten(), shifts, [0]).view(self.shape)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    if self.dim() == 0:
        raise IndexError(f"Dimension specified as {dims[0]} but tensor has no dimensions")
    dims = [_dim(self, d) for d in dims]
    if self.dtype not in NUMPY_DTYPES:
        return fallback.unsupported(torch.ops.aten.roll.default, (self, shifts, dims), {}, f"roll of {self.dtype}")
    out = empty(self.shape, self.dtype)
    if self.numel() == 0:
        return out
    passes = [(shift % self.shape[d], d) for shift, d in zip(shifts, dims) if shift % self.shape[d]]
    if not passes:
        device_copy(out, self)
    cur = self.contiguous()
    for k, (shift, d) in enumerate(passes):
        nxt = out if k == len(passes) - 1 else empty(cur.shape, cur.dtype)
        src = _three(cur, d)
        ik.roll3(src, as_array(nxt).reshape(src.shape), shift)
        cur = nxt
    launch("roll", 0, nbytes(self) * max(len(passes), 1), nbytes(out) * max(len(passes), 1))
    return out


# --- nonzero_static, segment_reduce -------------------------------------------------------

@register("nonzero_static")
def nonzero_static(self, *, size, fill_value=-1):
    """The coordinates of the first ``size`` non-zero elements (row-major), padded with ``fill_value``."""
    check_same_device("aten::nonzero_static", self)
    if size < 0:
        raise RuntimeError("nonzero_static: 'size' must be an non-negative integer")
    if self.dtype not in NUMPY_DTYPES:
        return fallback.unsupported(torch.ops.aten.nonzero_static.default, (self,), {"size": size,
                                    "fill_value": fill_value}, f"nonzero_static of {self.dtype}")
    out = empty((size, self.dim()), torch.int64)
    flat = np.ascontiguousarray(as_array(self)).reshape(-1)
    ik.nonzero_static(flat, np.array(self.shape, np.int64), as_array(out), fill_value)
    launch("nonzero_static", flat.shape[0], nbytes(self), nbytes(out))
    return out


@register("nonzero_static.out")
def nonzero_static_out(self, *, size, fill_value=-1, out):
    """nonzero_static into ``out``."""
    if out.dtype != torch.int64:
        raise RuntimeError(f"nonzero_static: Expected out tensor to have scalar type Long but got scalar type"
                           f"{_type_name(out.dtype)}")
    res = nonzero_static(self, size=size, fill_value=fill_value)
    resize_out(out, res.shape)
    device_copy(out, res)
    return out


_SEGMENT_MODES = {"sum": 0, "prod": 1, "mean": 2, "max": 3, "min": 4}


def _segment_bounds(data, lengths, offsets, axis: int):
    """(rows, segments + 1) int64 start offsets of each segment, or None if they leave the data (unchecked input)."""
    seg = lengths if lengths is not None else offsets
    a = np.ascontiguousarray(as_array(seg)).astype(np.int64)
    if lengths is not None:
        a = a.reshape(-1, a.shape[-1] if a.ndim else 1)
        bounds = np.zeros((a.shape[0], a.shape[1] + 1), np.int64)
        np.cumsum(a, axis=1, out=bounds[:, 1:])
        if (a < 0).any():
            return None
    else:
        bounds = a.reshape(-1, a.shape[-1] if a.ndim else 1)
        if bounds.shape[1] < 1 or (np.diff(bounds, axis=1) < 0).any():
            return None
    if bounds.size and (bounds.min() < 0 or bounds.max() > data.shape[axis]):
        return None
    return bounds


def _segment_prepare(data, reduce, lengths, indices, offsets, axis, unsafe):
    """The CPU's checks of segment_reduce, then (axis, bounds): bounds None for an unchecked input leaving the data."""
    axis = _dim(data, axis)
    if indices is not None:
        raise RuntimeError("segment_reduce(): indices based reduction is not supported yet.")
    if lengths is None and offsets is None:
        raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined.")
    if reduce not in _SEGMENT_MODES:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    seg = offsets if offsets is not None else lengths
    check_same_device("aten::segment_reduce", data, seg)
    if data.dim() < seg.dim():
        raise RuntimeError("Expected data.dim() >= lengths_value.dim() to be true, but got false.")
    if axis != seg.dim() - 1:
        raise RuntimeError(f"segment_reduce(): Expected axis to be the last dimension of "
                           f"{'offsets' if offsets is not None else 'lengths'} but got {axis}.")
    if offsets is None and not unsafe and lengths.numel():
        la = as_array(lengths)
        if la.min() < 0:
            raise RuntimeError("lengths contains negative value!")
        if (la.sum(axis=-1) != data.shape[axis]).any():
            raise RuntimeError("segment_reduce(): Expected all rows of lengths along axis to sum to "
                               "data.size(lengths.dim()-1) when !unsafe.")
    return axis, _segment_bounds(data, lengths, offsets, axis)


def _segment_dtype_ok(t: torch.Tensor, seg: torch.Tensor) -> bool:
    return t.dtype in (torch.float32, torch.float64) and seg.dtype in (torch.int32, torch.int64)


@register("segment_reduce")
def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False, initial=None):
    """Reduce (sum, prod, mean, max, min) consecutive segments of data along axis, given their lengths or offsets."""
    args = (data, reduce)
    kwargs = {"lengths": lengths, "indices": indices, "offsets": offsets, "axis": axis, "unsafe": unsafe,
              "initial": initial}
    axis, bounds = _segment_prepare(data, reduce, lengths, indices, offsets, axis, unsafe)
    seg = offsets if offsets is not None else lengths
    outer = math.prod(data.shape[:axis]) if axis else 1
    if bounds is None or bounds.shape[0] != outer or not _segment_dtype_ok(data, seg):
        return fallback.unsupported(torch.ops.aten.segment_reduce.default, args, kwargs,
                                    "segment bounds outside the data or a dtype without a kernel")
    mode = _SEGMENT_MODES[reduce]
    nseg = bounds.shape[1] - 1
    shape = list(data.shape)
    shape[axis] = nseg
    out = empty(shape, data.dtype)
    if out.numel():
        x = _three(data, axis)
        np_t = NUMPY_DTYPES[data.dtype]
        start = {3: -np.inf, 4: np.inf, 1: 1.0}.get(mode, 0.0) if initial is None else to_scalar(initial)
        ik.segment_reduce(x, bounds, as_array(out).reshape(x.shape[0], nseg, x.shape[2]), mode, np_t(start),
                          initial is not None)
    launch(f"segment_reduce_{reduce}", data.numel(), nbytes(data), nbytes(out))
    return out


@register("_segment_reduce_backward")
def segment_reduce_backward(grad, output, data, reduce, *, lengths=None, offsets=None, axis=0, initial=None):
    """The gradient of segment_reduce with respect to data (the CPU's formulas, see the kernel)."""
    check_same_device("aten::_segment_reduce_backward", grad, output, data)
    axis, bounds = _segment_prepare(data, reduce, lengths, None, offsets, axis, True)
    seg = offsets if offsets is not None else lengths
    outer = math.prod(data.shape[:axis]) if axis else 1
    if bounds is None or bounds.shape[0] != outer or not _segment_dtype_ok(data, seg):
        return fallback.unsupported(torch.ops.aten._segment_reduce_backward.default, (grad, output, data, reduce),
                                    {"lengths": lengths, "offsets": offsets, "axis": axis, "initial": initial},
                                    "segment bounds outside the data or a dtype without a kernel")
    mode = _SEGMENT_MODES[reduce]
    grad_input = empty(data.shape, data.dtype)
    gi = as_array(grad_input)
    gi[...] = 0
    if data.numel() and grad.numel():
        x = _three(data, axis)
        g = _three(grad.to(data.dtype), axis)
        o = _three(output.to(data.dtype), axis)
        start = 1 if initial is None else to_scalar(initial)
        ik.segment_reduce_backward(g, o, x, bounds, gi.reshape(x.shape), mode, NUMPY_DTYPES[data.dtype](start))
    launch(f"segment_reduce_backward_{reduce}", data.numel(), nbytes(grad) + nbytes(data), nbytes(grad_input))
    return grad_input


@register("unfold_backward")
def unfold_backward(grad_in, input_sizes, dim, size, step):
    """Functional form of :func:`unfold_backward_out`."""
    return unfold_backward_out(grad_in, input_sizes, dim, size, step, out=empty(list(input_sizes), grad_in.dtype))


@register("unfold_backward.out")
def unfold_backward_out(grad_in, input_sizes, dim, size, step, *, out):
    """The gradient of ``x.unfold(dim, size, step)``: each window's gradient added back where it was read.

    ``grad_in`` has ``x``'s shape with ``dim`` replaced by the number of windows and a last
    dimension of length ``size``; overlapping windows (``step < size``) add up.
    """
    check_same_device("aten::unfold_backward", grad_in, out)
    nd = max(len(input_sizes), 1)
    dim = dim % nd
    resize_out(out, list(input_sizes))
    res = np.zeros([int(s) for s in input_sizes] or [1], dtype=NUMPY_DTYPES[out.dtype])
    g = as_array(grad_in)
    g = g.reshape(1, *g.shape[-1:]) if len(input_sizes) == 0 else g
    acc = np.moveaxis(res, dim, -1)  # a view: windows are slices of the last axis
    for w in range(g.shape[dim]):
        acc[..., w * step:w * step + size] += np.take(g, w, axis=dim)
    as_array(out)[...] = res.reshape(as_array(out).shape)
    launch("unfold_backward", g.size, nbytes(grad_in), nbytes(out))
    return out
