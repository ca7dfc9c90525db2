"""Masks and indexing: masked_select, masked_fill."""

from __future__ import annotations

import numpy as np
import torch

from ..kernels import indexing as ik
from .common import NUMPY_DTYPES, as_array, check_same_device, empty, launch, nbytes, to_scalar
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


__all__ = ["NUMPY_DTYPES", "to_scalar"]
