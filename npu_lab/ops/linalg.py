"""Matrix products: mm, addmm, bmm, baddbmm, dot, mv.

``torch.matmul`` and ``nn.functional.linear`` are CompositeImplicitAutograd in
ATen: they decompose into these operators, so registering these is enough for
every ``@`` and ``nn.Linear`` on the NPU.
"""

from __future__ import annotations

import numpy as np
import torch

from ..device import native
from ..kernels import matmul as mk
from .common import as_array, check_same_device, empty, launch, nbytes, resize_out
from .copy import device_copy
from .pointwise import _short, pointwise
from .registry import register

#: Tile sizes used by mm when no autotuned choice exists for a shape.
tiles = {"default": mk.DEFAULT_TILES}

_C = native.load()
_empty, _current_device, _launch = _C.empty, _C.current_device, _C.launch
_Tensor = torch.Tensor
_layout = mk._blas.layout


def _blas_entry(dtype: torch.dtype) -> tuple | None:
    """(PyTorch's BLAS product for ``dtype``, a zero of it), or None where there is no such BLAS."""
    np_dtype = {torch.float32: np.float32, torch.float64: np.float64}[dtype]
    gemm = mk._blas.gemm_for(np_dtype)
    return None if gemm is None else (gemm, np_dtype(0))


#: float dtype -> :func:`_blas_entry` for the fast paths, filled at import (read-only afterwards)
_BLAS: dict[torch.dtype, tuple | None] = {dt: _blas_entry(dt) for dt in (torch.float32, torch.float64)}


def _fast_product(a, b, bias=None) -> torch.Tensor | None:
    """``a @ b`` (plus a bias row) with BLAS straight on the tensors' memory: two matrices of one float dtype on
    the current device, none empty, each readable by BLAS as it is; None for anything else (the kernel's
    general path then runs, checks and all)."""
    if not (isinstance(a, _Tensor) and isinstance(b, _Tensor) and mk._blas.ENABLED):
        return None
    dtype = a.dtype
    entry = _BLAS.get(dtype)
    if entry is None or b.dtype is not dtype or a.dim() != 2 or b.dim() != 2:
        return None
    dev = a.get_device()
    if dev != _current_device() or b.get_device() != dev:
        return None
    m, k = a.shape
    k2, n = b.shape
    if k != k2 or not (m and n and k):
        return None
    sa, sb = a.stride(), b.stride()
    la = _layout(m, k, sa[0], sa[1])
    lb = _layout(k, n, sb[0], sb[1])
    if la is None or lb is None:
        return None
    if bias is not None and not (bias.stride()[-1] == 1 or n == 1):
        return None
    out = _empty((m, n), dtype, dev)
    entry[0](m, n, k, a.data_ptr(), la, b.data_ptr(), lb, out.data_ptr())
    if bias is not None:
        mk.add_bias_rows(m, n, out.data_ptr(), bias.data_ptr(), entry[1])
    return out


def _fast_mm(self, mat2):
    out = _fast_product(self, mat2)
    if out is not None:
        m, k = self.shape
        n = mat2.shape[1]
        size = out.element_size()
        _launch("mm", 2.0 * m * n * k, (m * k + k * n) * size, m * n * size, -1, 32)
    return out


def _fast_addmm(self, mat1, mat2, *, beta=1, alpha=1):
    """nn.Linear's ``addmm``: a bias row of the product's dtype (1-D, or 1 x n), beta = alpha = 1."""
    if not (beta == 1 and alpha == 1 and isinstance(self, _Tensor) and isinstance(mat2, _Tensor)
            and self.dtype is mat2.dtype and self.get_device() == mat2.get_device()):
        return None
    n = mat2.shape[-1] if mat2.dim() == 2 else -1
    if tuple(self.shape) not in ((n,), (1, n)):
        return None
    out = _fast_product(mat1, mat2, self)
    if out is not None:
        m, k = mat1.shape
        size = out.element_size()
        _launch("addmm", 2.0 * m * n * k + m * n, (m * k + k * n + n) * size, m * n * size, -1, 32)
    return out


def _check_mm(op: str, a: torch.Tensor, b: torch.Tensor) -> None:
    check_same_device(f"aten::{op}", a, b)
    if a.dim() != 2:
        raise RuntimeError("self must be a matrix")
    if b.dim() != 2:
        raise RuntimeError("mat2 must be a matrix")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x{a.shape[1]} and "
            f"{b.shape[0]}x{b.shape[1]})"
        )
    if a.dtype != b.dtype:
        raise RuntimeError(
            f"expected m1 and m2 to have the same dtype, but got: {_short(a.dtype)} != {_short(b.dtype)}"
        )


def mm_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """out[:] = a @ b with the tiled numba kernel (out must be contiguous)."""
    m, k = a.shape
    n = b.shape[1]
    c = as_array(out)
    if m and n:
        if k == 0:
            c[...] = 0
        else:
            # any strides: the kernel packs an operand only when its layout needs it
            mk.mm(as_array(a), as_array(b), c, tiles.get((m, n, k), tiles["default"]))
    launch("mm", 2.0 * m * n * k, nbytes(a) + nbytes(b), nbytes(out), matrix=a.dtype)
    return out


@register("mm", fast=_fast_mm)
def mm(self, mat2):
    _check_mm("mm", self, mat2)
    out = empty((self.shape[0], mat2.shape[1]), self.dtype)
    return mm_into(out, self, mat2)


@register("mm.out")
def mm_out(self, mat2, *, out):
    _check_mm("mm", self, mat2)
    resize_out(out, (self.shape[0], mat2.shape[1]))
    if out.is_contiguous():
        return mm_into(out, self, mat2)
    tmp = mm(self, mat2)
    device_copy(out, tmp)
    return out


def _epilogue(prod: torch.Tensor, bias: torch.Tensor, beta, alpha) -> torch.Tensor:
    """prod = beta * bias + alpha * prod, in place on prod."""
    if beta == 0:
        if alpha != 1:
            pointwise("scale", "alpha * {0}", (prod,), named={"alpha": alpha}, out=prod, inplace=True)
        return prod
    if alpha == 1 and beta == 1:
        return pointwise("add_bias", "{0} + {1}", (prod, bias), out=prod, inplace=True)
    return pointwise("addmm_epilogue", "alpha * {0} + beta * {1}", (prod, bias),
                     named={"alpha": alpha, "beta": beta}, out=prod, inplace=True, flops=3)


@register("addmm", fast=_fast_addmm)
def addmm(self, mat1, mat2, *, beta=1, alpha=1):
    _check_mm("addmm", mat1, mat2)
    check_same_device("aten::addmm", self)
    m, k = mat1.shape
    n = mat2.shape[1]
    if beta == 1 and alpha == 1 and self.dtype == mat1.dtype and tuple(self.shape) in ((n,), (1, n)) and m and n and k:
        # nn.Linear's case: the bias add is fused into the matmul's final write (an epilogue)
        out = empty((m, n), mat1.dtype)
        mk.mm(as_array(mat1), as_array(mat2), as_array(out),
              tiles.get((m, n, k), tiles["default"]), epilogue="bias", bias=as_array(self).reshape(n))
        launch("addmm", 2.0 * m * n * k + m * n, nbytes(mat1) + nbytes(mat2) + nbytes(self), nbytes(out),
               matrix=mat1.dtype)
        return out
    prod = mm(mat1, mat2)
    torch.broadcast_shapes(self.shape, prod.shape)
    return _epilogue(prod, self, beta, alpha)


def _type_meta(dtype: torch.dtype) -> str:
    """A dtype as PyTorch's C++ messages print it (caffe2::TypeMeta: "float", "double", "c10::Half")."""
    return {torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16"}.get(dtype, _short(dtype).lower())


@register("addmm.out")
def addmm_out(self, mat1, mat2, *, beta=1, alpha=1, out):
    # Inductor calls products with an ``out=`` buffer it planned: nn.Linear's case writes straight into it
    # (no temporary and no device copy) when ``out`` is contiguous and shares no memory with an input.
    _check_mm("addmm", mat1, mat2)
    check_same_device("aten::addmm", self)
    if out.dtype != mat1.dtype:  # PyTorch's own check and message
        raise RuntimeError(f"Expected out tensor to have dtype {_type_meta(mat1.dtype)}, "
                           f"but got {_type_meta(out.dtype)} instead")
    m, k = mat1.shape
    n = mat2.shape[1]
    out_ptr = out.untyped_storage().data_ptr()
    if (beta == 1 and alpha == 1 and self.dtype == mat1.dtype == out.dtype and tuple(self.shape) in ((n,), (1, n))
            and m and n and k and out.device == mat1.device
            and all(t.untyped_storage().data_ptr() != out_ptr for t in (self, mat1, mat2))):
        resize_out(out, (m, n))
        if out.is_contiguous():
            mk.mm(as_array(mat1), as_array(mat2), as_array(out),
                  tiles.get((m, n, k), tiles["default"]), epilogue="bias", bias=as_array(self).reshape(n))
            launch("addmm", 2.0 * m * n * k + m * n, nbytes(mat1) + nbytes(mat2) + nbytes(self), nbytes(out),
               matrix=mat1.dtype)
            return out
    res = addmm(self, mat1, mat2, beta=beta, alpha=alpha)
    resize_out(out, res.shape)
    device_copy(out, res)
    return out


@register("addmm_")
def addmm_(self, mat1, mat2, *, beta=1, alpha=1):
    res = addmm(self, mat1, mat2, beta=beta, alpha=alpha)
    device_copy(self, res)
    return self


def _check_bmm(op: str, a: torch.Tensor, b: torch.Tensor) -> None:
    check_same_device(f"aten::{op}", a, b)
    if a.dim() != 3 or b.dim() != 3:
        raise RuntimeError("batch1 must be a 3D tensor" if a.dim() != 3 else "batch2 must be a 3D tensor")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: "
            f"[{a.shape[0]}, {a.shape[2]}] but got: [{b.shape[0]}, {b.shape[1]}]."
        )
    if a.dtype != b.dtype:
        raise RuntimeError(
            f"expected scalar type {_short(a.dtype)} but found {_short(b.dtype)}"
        )


@register("bmm")
def bmm(self, mat2):
    _check_bmm("bmm", self, mat2)
    bsz, m, k = self.shape
    n = mat2.shape[2]
    out = empty((bsz, m, n), self.dtype)
    c = as_array(out)
    if out.numel():
        if k == 0:
            c[...] = 0
        else:
            mk.bmm(as_array(self), as_array(mat2), c, tiles["default"])
    launch("bmm", 2.0 * bsz * m * n * k, nbytes(self) + nbytes(mat2), nbytes(out), matrix=self.dtype)
    return out


@register("bmm.out")
def bmm_out(self, mat2, *, out):
    res = bmm(self, mat2)
    resize_out(out, res.shape)
    device_copy(out, res)
    return out


@register("baddbmm")
def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
    prod = bmm(batch1, batch2)
    return _epilogue(prod, self, beta, alpha)


@register("dot")
def dot(self, tensor):
    check_same_device("aten::dot", self, tensor)
    if self.dim() != 1 or tensor.dim() != 1:
        raise RuntimeError(
            f"1D tensors expected, but got {self.dim()}D and {tensor.dim()}D tensors"
        )
    if self.shape[0] != tensor.shape[0]:
        raise RuntimeError(
            f"inconsistent tensor size, expected tensor [{self.shape[0]}] and src "
            f"[{tensor.shape[0]}] to have the same number "
            f"of elements, but got {self.shape[0]} and {tensor.shape[0]} elements respectively"
        )
    return mm(self.reshape(1, -1), tensor.reshape(-1, 1)).reshape(())


@register("mv")
def mv(self, vec):
    check_same_device("aten::mv", self, vec)
    return mm(self, vec.reshape(-1, 1)).reshape(-1)


__all__ = ["mm_into", "tiles", "np"]
