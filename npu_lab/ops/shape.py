"""Joining and rearranging: cat (and so stack/hstack/vstack), flip."""

from __future__ import annotations

import torch

from ..device.tensors import as_array
from .common import check_same_device, empty, launch, nbytes, resize_out
from .copy import device_copy
from .registry import register


def _cat_dtype(tensors) -> torch.dtype:
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _cat(tensors, dim: int, out: torch.Tensor | None = None) -> torch.Tensor:
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    check_same_device("aten::cat", *tensors)
    # legacy rule: 1-D empty tensors are skipped whatever their size
    parts = [t for t in tensors if not (t.dim() == 1 and t.numel() == 0)]
    dtype = _cat_dtype(tensors) if out is None else out.dtype
    if not parts:
        res = empty((0,), dtype)
    else:
        ref = parts[0]
        nd = ref.dim()
        if nd == 0:
            raise RuntimeError("zero-dimensional tensor (at position 0) cannot be concatenated")
        if not -nd <= dim < nd:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {dim})")
        dim %= nd
        for i, t in enumerate(parts):
            if t.dim() != nd:
                raise RuntimeError(
                    f"Tensors must have same number of dimensions: got {nd} and {t.dim()}")
            for d in range(nd):
                if d != dim and t.shape[d] != ref.shape[d]:
                    raise RuntimeError(
                        f"Sizes of tensors must match except in dimension {dim}. Expected size {ref.shape[d]} "
                        f"but got size {t.shape[d]} for tensor number {i} in the list.")
        shape = list(ref.shape)
        shape[dim] = sum(t.shape[dim] for t in parts)
        res = empty(shape, dtype)
        offset = 0
        for t in parts:  # one kernel: every part copied into its slice (casting as it goes)
            n = t.shape[dim]
            if n and t.numel():
                as_array(res.narrow(dim, offset, n))[...] = as_array(t)
            offset += n
    launch("cat", 0, sum(nbytes(t) for t in tensors), nbytes(res))
    if out is not None:
        resize_out(out, res.shape)
        device_copy(out, res)
        return out
    return res


@register("cat")
def cat(tensors, dim=0):
    return _cat(tensors, dim)


@register("cat.out")
def cat_out(tensors, dim=0, *, out):
    return _cat(tensors, dim, out)


_RAW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _flip_dims(dims, nd: int) -> tuple[int, ...]:
    """``dims`` wrapped into ``[0, nd)`` with PyTorch's errors for out-of-range and repeated entries."""
    rank = max(nd, 1)
    wrapped = []
    for d in dims:
        if not -rank <= d < rank:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {d})")
        d %= rank
        if d in wrapped:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        wrapped.append(d)
    return tuple(wrapped)


@register("flip")
def flip(self, dims):
    """One copy that reads ``self`` backwards along ``dims`` (the bits of any dtype, so half precision too)."""
    check_same_device("aten::flip", self)
    axes = _flip_dims(dims, self.dim())
    res = empty(self.shape, self.dtype)
    if self.numel():
        raw = _RAW.get(self.element_size()) if self.dtype not in (torch.float32, torch.float64) else None
        src, dst = (self, res) if raw is None or self.is_complex() else (self.view(raw), res.view(raw))
        if self.is_complex():  # complex: its (real, imag) pairs as a trailing dimension of floats
            src, dst = torch.view_as_real(self), torch.view_as_real(res)
        flipped = as_array(src.contiguous())
        if self.dim() and axes:
            flipped = flipped[tuple(slice(None, None, -1) if d in axes else slice(None) for d in range(self.dim()))]
        as_array(dst)[...] = flipped
    launch("flip", 0, nbytes(self), nbytes(res))
    return res
