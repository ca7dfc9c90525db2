"""Filling: fill_, zero_, arange, eye, linspace, logspace and autograd's zero tensors.

(Allocation and resize_ are the native runtime's.)
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..device import fallback, native
from ..device.tensors import check_dtype
from ..kernels import elementwise
from ..kernels.fill import eye as eye_kernel
from ..kernels.fill import linspace as linspace_kernel
from ..kernels.fill import logspace as logspace_kernel
from .common import (
    NUMPY_DTYPES,
    as_array,
    check_same_device,
    empty,
    launch,
    nbytes,
    resize_out,
    run_elementwise,
    to_scalar,
)
from .registry import register


def fill_value(t: torch.Tensor, value: object) -> torch.Tensor:
    check_dtype(t.dtype)
    value = to_scalar(value)
    if t.dtype == torch.bool:
        value = bool(value)
    kernel = elementwise.kernel("fill", 0, "value", ("value",))
    run_elementwise(kernel, [t], [], (NUMPY_DTYPES[t.dtype](value),), flops_per_element=0)
    return t


_FILL_FAST = {torch.float32: np.float32, torch.float64: np.float64}
_current_device = native.load().current_device
_EXACT = 2 ** 53  # integers a float64 holds exactly (larger ones take fill_value's checks)


def _fast_fill(self, value) -> torch.Tensor | None:
    """``fill_`` of a small contiguous float tensor on the current device with a Python number (the ones autograd
    starts a backward pass from, a buffer zeroed): what :func:`fill_value` does there, with less Python."""
    number = type(value) is float or type(value) is int and -_EXACT <= value <= _EXACT
    if not number or not isinstance(self, torch.Tensor):
        return None
    np_type = _FILL_FAST.get(self.dtype)
    numel = self.numel()
    if np_type is None or numel >= elementwise.PARALLEL_THRESHOLD or not self.is_contiguous() \
            or self.get_device() != _current_device():
        return None
    if numel:
        as_array(self)[...] = np_type(value)
    launch("fill", 0, 0, numel * self.element_size())
    return self


@register("fill_.Scalar", fast=_fast_fill)
def fill_scalar(self: torch.Tensor, value) -> torch.Tensor:
    return fill_value(self, value)


@register("fill_.Tensor")
def fill_tensor(self: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    if value.dim() != 0:
        raise RuntimeError(
            "fill_ only supports 0-dimension value tensor but got tensor with "
            f"{value.dim()} dimensions."
        )
    if value.device != self.device:  # a CPU scalar tensor: a plain fill, as ATen does
        return fill_value(self, value.item())
    # As ATen: a value on the same device is copied in (broadcast from 0-d), so a self-overlapping
    # (expanded) tensor is refused as on every other device; a value that is an element of self is
    # cloned first, or the copy would overwrite it before reading it.
    return self.copy_(value.clone() if torch._C._is_alias_of(self, value) else value)


@register("zero_")
def zero_(self: torch.Tensor) -> torch.Tensor:
    return fill_value(self, 0)


__all__ = ["checked_scalar", "fill_value"]


@register("arange.start_out")
def arange_out(start, end, step=1, *, out):
    start, end, step = to_scalar(start), to_scalar(end), to_scalar(step)
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (end - start) / step < 0:
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    import math

    n = max(0, math.ceil((end - start) / step))
    resize_out(out, (n,))
    run_arange(out, start, step)
    return out


def run_arange(out: torch.Tensor, start, step) -> None:
    from ..kernels.fill import arange as arange_kernel

    a = as_array(out)
    if out.is_contiguous():
        arange_kernel(a.reshape(-1), start, step)
    else:
        tmp = empty(out.shape, out.dtype)
        arange_kernel(as_array(tmp).reshape(-1), start, step)
        a[...] = as_array(tmp)
    from .common import launch

    launch("arange", out.numel(), 0, nbytes(out))


@register("_efficientzerotensor")
def efficientzerotensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """Autograd's "known zero" gradient: the NPU materialises real zeros."""
    return fill_value(empty(size, dtype or torch.get_default_dtype()), 0)


# --- eye, linspace, logspace ---------------------------------------------------------------

#: C++ names of the types, as PyTorch's conversion errors print them.
_CPP_NAMES = {torch.float32: "float", torch.float64: "double", torch.int64: "int64_t", torch.int32: "int",
              torch.int16: "int16_t", torch.int8: "int8_t", torch.uint8: "uint8_t", torch.uint16: "uint16_t",
              torch.uint32: "uint32_t", torch.uint64: "uint64_t", torch.complex64: "c10::complex<float>",
              torch.complex128: "c10::complex<double>", torch.bool: "bool"}


def checked_scalar(value: object, dtype: torch.dtype) -> object:
    """A Python number as a ``dtype`` scalar, as ``Scalar::to<scalar_t>()`` converts it (``c10::checked_convert``).

    Out of the type's range raises PyTorch's overflow error; negative integers wrap into unsigned types
    when their magnitude fits; floating values truncate into integer types; infinities and NaN are kept
    by floating types and overflow integer ones.
    """
    value = to_scalar(value)
    np_t = NUMPY_DTYPES[dtype]
    if isinstance(value, complex) and not dtype.is_complex:
        value = value.real
    if dtype == torch.bool:
        return np.bool_(bool(value))
    overflow = RuntimeError(f"value cannot be converted to type {_CPP_NAMES.get(dtype, dtype)} without overflow")
    if dtype.is_floating_point or dtype.is_complex:
        limit = float(np.finfo(np.float32 if dtype in (torch.float32, torch.complex64) else np.float64).max)
        parts = (value.real, value.imag) if isinstance(value, complex) else (value,)
        if any(math.isfinite(p) and abs(p) > limit for p in parts):
            raise overflow
        return np_t(value)
    info = np.iinfo(np_t)
    if isinstance(value, float):
        if not math.isfinite(value) or value < info.min or value > info.max:
            raise overflow
        value = int(value)
    elif info.min == 0 and value < 0:  # two's complement wrap, if the magnitude fits
        if -value > info.max:
            raise overflow
        return np_t(value + info.max + 1)
    elif value < info.min or value > info.max:
        raise overflow
    return np_t(value)


def _write_1d(out: torch.Tensor, kernel, *args) -> None:
    """Run a 1-D index kernel into ``out`` (through a contiguous temporary if ``out`` is strided)."""
    a = as_array(out)
    if out.is_contiguous():
        kernel(a.reshape(-1), *args)
    else:
        tmp = empty(out.shape, out.dtype)
        kernel(as_array(tmp).reshape(-1), *args)
        a[...] = as_array(tmp)


def _check_range_out(op: str, out: torch.Tensor) -> bool:
    """True if ``out``'s dtype has a kernel (bool has none on the CPU either: PyTorch's error is the fallback's)."""
    check_dtype(out.dtype)
    return out.dtype != torch.bool


@register("eye.m_out")
def eye_m_out(n, m, *, out):
    """The n x m identity matrix into ``out``."""
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    check_dtype(out.dtype)
    resize_out(out, (n, m))
    if out.numel():
        one = NUMPY_DTYPES[out.dtype](1)
        eye_kernel(as_array(out), one)
    launch("eye", 0, 0, nbytes(out))
    return out


@register("eye.out")
def eye_out(n, *, out):
    """The n x n identity matrix into ``out``."""
    return eye_m_out(n, n, out=out)


@register("linspace.out")
def linspace_out(start, end, steps, *, out):
    """``steps`` values evenly spaced from start to end (both included), computed as the CPU does."""
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    check_same_device("aten::linspace", out)
    if not _check_range_out("linspace", out):
        return fallback.unsupported(torch.ops.aten.linspace.out, (start, end, steps), {"out": out},
                                    f"linspace of {out.dtype}")
    resize_out(out, (steps,))
    if steps == 1:
        return fill_value(out, to_scalar(start))
    if steps:
        s, e = checked_scalar(start, out.dtype), checked_scalar(end, out.dtype)
        if out.dtype.is_floating_point or out.dtype.is_complex:
            step = (e - s) / NUMPY_DTYPES[out.dtype](steps - 1)
        else:  # integers step in double (their range may not fit the type)
            step = (float(e) - float(s)) / (steps - 1)
            s, e = np.int64(s), np.int64(e)
        _write_1d(out, linspace_kernel, s, e, step)
    launch("linspace", 2 * steps, 0, nbytes(out))
    return out


@register("logspace.out")
def logspace_out(start, end, steps, base=10.0, *, out):
    """``steps`` powers ``base ** x`` for x evenly spaced from start to end, computed as the CPU does."""
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    check_same_device("aten::logspace", out)
    if not _check_range_out("logspace", out):
        return fallback.unsupported(torch.ops.aten.logspace.out, (start, end, steps, base), {"out": out},
                                    f"logspace of {out.dtype}")
    resize_out(out, (steps,))
    if steps == 1:
        first = to_scalar(start)
        if out.dtype.is_complex:
            return fill_value(out, complex(base) ** complex(first))
        return fill_value(out, float(base) ** float(first.real if isinstance(first, complex) else first))
    if steps:
        s, e = checked_scalar(start, out.dtype), checked_scalar(end, out.dtype)
        if out.dtype.is_complex:  # everything in the complex type, the base too
            step = (e - s) / NUMPY_DTYPES[out.dtype](steps - 1)
            b = NUMPY_DTYPES[out.dtype](base)
        elif out.dtype.is_floating_point:
            # the exponent in the tensor's type, the power in double (std::pow(double, scalar_t))
            step = (e - s) / NUMPY_DTYPES[out.dtype](steps - 1)
            b = float(base)
        else:  # integers: the exponent and the power in float (the CPU avoids promoting to double)
            step = np.float32(np.float32(int(e) - int(s)) / np.float32(steps - 1))
            s, e, b = np.float32(int(s)), np.float32(int(e)), np.float32(base)
        _write_1d(out, logspace_kernel, s, e, step, b)
    launch("logspace", 3 * steps, 0, nbytes(out))
    return out


# --- tril_indices, triu_indices ----------------------------------------------------------------

def _triangle_indices(name: str, row: int, col: int, offset: int, dtype, device) -> torch.Tensor:
    """The (2, N) index tensor of a triangle, as ATen's ``tril_indices_cpu`` and ``triu_indices_cpu`` make it."""
    from ..kernels import fill
    from .reductions import dtype_name

    if row < 0:
        raise RuntimeError(f"row must be non-negative, got{row}")
    if col < 0:
        raise RuntimeError(f"col must be non-negative, got{col}")
    dtype = torch.int64 if dtype is None else dtype
    if dtype not in (torch.int32, torch.int64):
        raise RuntimeError(f'"{name}_indices" not implemented for \'{dtype_name(dtype)}\'')
    index = -1 if device is None or torch.device(device).index is None else torch.device(device).index
    if name == "tril":
        n = fill.tril_count(row, col, offset)
    else:
        n = row * col - fill.tril_count(row, col, offset - 1)
    out = empty((2, n), dtype, index)
    if n:
        (fill.tril_indices if name == "tril" else fill.triu_indices)(as_array(out), row, col, offset)
    launch(f"{name}_indices", 0, 0, nbytes(out))
    return out


@register("tril_indices")
def tril_indices(row, col, offset=0, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _triangle_indices("tril", row, col, offset, dtype, device)  # a layout other than strided never gets here


@register("triu_indices")
def triu_indices(row, col, offset=0, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _triangle_indices("triu", row, col, offset, dtype, device)
