"""FFT operators: the ATen primitives every ``torch.fft`` function reaches (``_fft_c2c``, ``_fft_r2c``,
``_fft_c2r``), computed by the numba kernels of :mod:`npu_lab.kernels.fft`.

PyTorch's ``torch.fft`` front end (fft, rfft, hfft, fftn, the inverse transforms...) resizes
the input and picks the primitive; the backend only does the transforms:

* ``_fft_c2c(x, dim, normalization, forward)``: complex to complex over every dim in ``dim``;
* ``_fft_r2c(x, dim, normalization, onesided)``: real input, forward; the last dim in ``dim``
  keeps ``n // 2 + 1`` frequencies when ``onesided``;
* ``_fft_c2r(x, dim, normalization, last_dim_size)``: inverse of ``r2c``: complex inverse over
  the leading dims, then a Hermitian half-spectrum to ``last_dim_size`` real values on the last.

``normalization`` is ATen's ``fft_norm_mode``: 0 none, 1 ``1/sqrt(n)``, 2 ``1/n`` (n the
signal length of each transformed dim). Outputs are contiguous, as the CPU's.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..device import fallback
from ..kernels import fft as fk
from .common import as_array, check_same_device, empty, launch, nbytes, resize_out
from .copy import device_copy
from .registry import register

_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128,
            torch.complex64: torch.complex64, torch.complex128: torch.complex128}
_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def _scale(n: int, normalization: int) -> float:
    """The factor one transformed dim of length ``n`` contributes."""
    if normalization == 1:
        return 1.0 / math.sqrt(n) if n else 1.0
    if normalization == 2:
        return 1.0 / n if n else 1.0
    return 1.0


def _dims(x: torch.Tensor, dim) -> list[int]:
    nd = max(x.dim(), 1)
    out = []
    for d in dim:
        if not -nd <= d < nd:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {d})")
        out.append(d % nd)
    return out


def _three(a: np.ndarray, d: int) -> np.ndarray:
    """A contiguous array viewed as (outer, shape[d], inner)."""
    shape = a.shape
    outer = math.prod(shape[:d]) if d else 1
    inner = math.prod(shape[d + 1:]) if d + 1 < len(shape) else 1
    return a.reshape(outer, shape[d], inner)


def _readable(x: torch.Tensor) -> torch.Tensor:
    """``x`` contiguous with its conjugate/negative bits applied (the kernels read raw bytes)."""
    if x.is_complex():
        x = x.resolve_conj()
    return x.resolve_neg().contiguous()


def _account(name: str, shape, d: int, out: torch.Tensor, src: torch.Tensor) -> None:
    n = int(shape[d])
    lines = math.prod(shape) // max(n, 1)
    launch(name, lines * fk.plan(max(n, 1)).flops, nbytes(src), nbytes(out))


def _c2c_pass(x: torch.Tensor, d: int, inverse: bool, normalization: int) -> torch.Tensor:
    """One complex transform of contiguous ``x`` along ``d`` into a new contiguous tensor."""
    out = empty(x.shape, x.dtype)
    n = x.shape[d]
    if out.numel():
        p = fk.plan(n)
        src, dst = _three(as_array(x), d), _three(as_array(out), d)
        fk.c2c(src, dst, inverse, _scale(n, normalization), *p.tables, fk.chunks(src.shape[0] * src.shape[2]))
    _account("fft_c2c", x.shape, d, out, x)
    return out


def _c2c(x: torch.Tensor, dims: list[int], normalization: int, forward: bool) -> torch.Tensor:
    cur = _readable(x)
    for d in dims:
        cur = _c2c_pass(cur, d, not forward, normalization)
    if cur is x:  # no dims: still a new tensor
        cur = x.clone()
    return cur


def _unsupported(op, args: tuple, x: torch.Tensor, want) -> object | None:
    if x.dtype not in want:
        return fallback.unsupported(op, args, {}, f"FFT of {x.dtype}")
    return None


@register("_fft_c2c")
def fft_c2c(self, dim, normalization, forward):
    """Complex-to-complex DFT over ``dim`` (``forward`` or inverse sign), normalised per ``normalization``."""
    check_same_device("aten::_fft_c2c", self)
    deferred = _unsupported(torch.ops.aten._fft_c2c.default, (self, dim, normalization, forward), self, _REAL)
    if deferred is not None:
        return deferred
    return _c2c(self, _dims(self, dim), normalization, forward)


@register("_fft_r2c")
def fft_r2c(self, dim, normalization, onesided):
    """Real-to-complex forward DFT over ``dim``; the last dim keeps n // 2 + 1 frequencies if ``onesided``."""
    check_same_device("aten::_fft_r2c", self)
    deferred = _unsupported(torch.ops.aten._fft_r2c.default, (self, dim, normalization, onesided), self,
                            (torch.float32, torch.float64))
    if deferred is not None:
        return deferred
    dims = _dims(self, dim)
    x = _readable(self)
    if not dims:
        return x.to(_COMPLEX[x.dtype])
    last = dims[-1]
    n = x.shape[last]
    shape = list(x.shape)
    shape[last] = n // 2 + 1 if onesided else n
    out = empty(shape, _COMPLEX[x.dtype])
    if out.numel():
        p = fk.plan(n)
        src, dst = _three(as_array(x), last), _three(as_array(out), last)
        fk.r2c(src, dst, _scale(n, normalization), *p.tables, fk.chunks(src.shape[0] * src.shape[2]))
    _account("fft_r2c", x.shape, last, out, x)
    for d in dims[:-1]:
        out = _c2c_pass(out, d, False, normalization)
    return out


@register("_fft_c2r")
def fft_c2r(self, dim, normalization, last_dim_size):
    """Complex-to-real inverse DFT: inverse over the leading dims, then a Hermitian half-spectrum to
    ``last_dim_size`` real values along the last dim."""
    check_same_device("aten::_fft_c2r", self)
    deferred = _unsupported(torch.ops.aten._fft_c2r.default, (self, dim, normalization, last_dim_size), self, _REAL)
    if deferred is not None:
        return deferred
    dims = _dims(self, dim)
    if not dims:
        raise RuntimeError("_fft_c2r needs at least one dimension")
    x = _c2c(self, dims[:-1], normalization, False) if len(dims) > 1 else _readable(self)
    last = dims[-1]
    n = int(last_dim_size)
    half = n // 2 + 1
    if x.shape[last] != half:  # the kernel reads exactly n // 2 + 1 frequencies: cut, or pad with zeros
        keep = min(half, x.shape[last])
        sized = empty([half if d == last else s for d, s in enumerate(x.shape)], x.dtype)
        as_array(sized)[...] = 0
        if keep:
            device_copy(sized.narrow(last, 0, keep), x.narrow(last, 0, keep))
        x = sized
    shape = list(x.shape)
    shape[last] = n
    out = empty(shape, _REAL[x.dtype])
    if out.numel():
        p = fk.plan(n)
        src, dst = _three(as_array(x), last), _three(as_array(out), last)
        fk.c2r(src, dst, _scale(n, normalization), *p.tables, fk.chunks(dst.shape[0] * dst.shape[2]))
    _account("fft_c2r", out.shape, last, out, x)
    return out


def _into(out: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
    """``res`` resized and copied into ``out`` (cast to its dtype, as the CPU's out= kernels do)."""
    check_same_device("aten::_fft", out)
    resize_out(out, res.shape)
    device_copy(out, res)
    return out


@register("_fft_c2c.out")
def fft_c2c_out(self, dim, normalization, forward, *, out):
    """:func:`fft_c2c` into ``out``."""
    return _into(out, fft_c2c(self, dim, normalization, forward))


@register("_fft_r2c.out")
def fft_r2c_out(self, dim, normalization, onesided, *, out):
    """:func:`fft_r2c` into ``out``."""
    return _into(out, fft_r2c(self, dim, normalization, onesided))


@register("_fft_c2r.out")
def fft_c2r_out(self, dim, normalization, last_dim_size, *, out):
    """:func:`fft_c2r` into ``out``."""
    return _into(out, fft_c2r(self, dim, normalization, last_dim_size))
