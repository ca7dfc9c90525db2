"""Masks and indexing: masked_select/fill, index_select, gather/scatter, advanced indexing,
nonzero, the embedding backward, tril/triu."""

from __future__ import annotations

import numpy as np
import torch

from ..kernels import indexing as ik
from .common import NUMPY_DTYPES, as_array, check_same_device, empty, launch, nbytes, resize_out, to_scalar
from .copy import device_copy
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
    outer = int(np.prod(shape[:dim])) if dim else 1
    inner = int(np.prod(shape[dim + 1:])) if dim + 1 < len(shape) else 1
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
        ik.index_select(x, idx, as_array(out).reshape(x.shape[0], idx.shape[0], x.shape[2]))
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
    outer = int(np.prod(shape[:dim])) if dim else 1
    inner = int(np.prod(shape[dim + 1:])) if dim + 1 < len(shape) else 1
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
        ik.gather(x3, idx, as_array(out).reshape(outer, n, inner))
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
        ik.triangle(x, as_array(res).reshape(-1, r, c), diagonal, lower)
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
