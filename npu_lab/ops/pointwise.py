"""Elementwise operators: arithmetic, activations, comparisons, their backwards.

Each operator is one line in a table: a scalar expression template in which
``{0}``, ``{1}``... stand for the operator's inputs. :func:`pointwise` does what
ATen's TensorIterator does for a CPU kernel: checks devices, applies PyTorch's
type promotion, broadcasts, allocates (or checks) the output, and then runs
the generated numba kernel for the template.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ..device import fallback, native
from ..device.clock import launch
from ..kernels import elementwise
from .common import (
    NUMPY_DTYPES,
    as_array,
    broadcast_shape,
    check_same_device,
    dense_strides_like,
    empty,
    empty_strided,
    resize_out,
    run_elementwise,
)
from .copy import device_copy
from .registry import register

_float_default = torch.get_default_dtype
_C = native.load()
_no_internal_overlap, _no_partial_overlap = _C.assert_no_internal_overlap, _C.assert_no_partial_overlap
_empty, _flat_view, _empty_strided = _C.empty, _C.flat_view, _C.empty_strided
_Tensor = torch.Tensor
#: (name, template, dtype, number of inputs, bool_result) -> (kernel, result dtype) for the fast path.
_FAST: dict[tuple, tuple[elementwise.ElementwiseKernel, torch.dtype]] = {}


def _is_tensor_operand(x: object) -> bool:
    return isinstance(x, torch.Tensor) and not (x.device.type == "cpu" and x.dim() == 0)


def _promote(args: Sequence[object]) -> torch.dtype:
    if len(args) == 1:
        a = args[0]
        return a.dtype if isinstance(a, torch.Tensor) else torch.result_type(torch.tensor(0.0), a)
    dtype = torch.result_type(args[0], args[1])
    for a in args[2:]:
        # fold further operands in (exact for the operators that use three)
        other = a.dtype if isinstance(a, torch.Tensor) else torch.result_type(torch.empty(0, dtype=dtype), a)
        dtype = torch.promote_types(dtype, other)
    return dtype


def _bool_sub(args: Sequence[object]) -> None:
    kinds = [a.dtype == torch.bool if isinstance(a, torch.Tensor) else isinstance(a, bool) for a in args[:2]]
    if all(kinds):
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                           "Use the `^` or `logical_xor()` operator instead.")
    if any(kinds):
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. "
                           "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.")


def _not_for(kinds: str, dtypes: Callable[[torch.dtype], bool]) -> Callable[[str, Sequence[object]], None]:
    def check(name: str, args: Sequence[object]) -> None:
        for a in args:
            if isinstance(a, torch.Tensor) and dtypes(a.dtype):
                raise NotImplementedError(f'"{name}_npu" not implemented for \'{_short(a.dtype)}\' ({kinds})')
    return check


def _not_bool(message: str) -> Callable[[str, Sequence[object]], None]:
    def check(name: str, args: Sequence[object]) -> None:
        if isinstance(args[0], torch.Tensor) and args[0].dtype == torch.bool:
            raise RuntimeError(message)
    return check


# Operand dtypes an operator refuses, with PyTorch's error, checked where the CPU checks them: some in
# the operator's own argument checks (before anything else), some only when the kernel is picked for the
# dtype (after the overlap checks).
_ARGUMENT_RULES: dict[str, Callable[[str, Sequence[object]], None]] = {
    "neg": _not_bool("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
                     "invert a mask, use the `~` or `logical_not()` operator instead."),
    "sub": lambda name, args: _bool_sub(args),
    "relu": _not_bool("Boolean inputs not supported for relu"),
}
def _promoted_not(kinds: str, dtypes: Callable[[torch.dtype], bool]) -> Callable[[str, Sequence[object]], None]:
    """A rule on the dtype the operands promote to (the dtype the CPU picks its kernel for)."""
    def check(name: str, args: Sequence[object]) -> None:
        dtype = _promote(args)
        if dtypes(dtype):
            raise NotImplementedError(f'"{name}_npu" not implemented for \'{_short(dtype)}\' ({kinds})')
    return check


def _abs_rule(name: str, args: Sequence[object]) -> None:
    _not_for("abs of a bool tensor", lambda d: d == torch.bool)(name, args)
    if isinstance(args[0], torch.Tensor) and args[0].dtype.is_complex:
        raise fallback.NotHandled("abs of a complex tensor (its result is real: a kernel the NPU does not have)")


_FLOAT_ONLY = _promoted_not("floating-point only", lambda d: not d.is_floating_point)
_KERNEL_RULES: dict[str, Callable[[str, Sequence[object]], None]] = {
    "abs": _abs_rule,
    **{op: _FLOAT_ONLY for op in ("frac", "logaddexp", "logaddexp2", "nextafter", "hypot", "round_decimals",
                                  "igamma", "igammac")},
    **{op: _promoted_not("integer and floating-point only", lambda d: d == torch.bool or d.is_complex)
       for op in ("fmod", "div_floor", "div_trunc")},
    **{op: _not_for("bitwise operators take integer and bool tensors",
                    lambda d: d.is_floating_point or d.is_complex)
       for op in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not")},
}
#: operators whose CPU kernels write without TensorIterator's overlap checks (an expanded output is fine)
_NO_OVERLAP_CHECK = {"masked_fill"}


def check_written(name: str, out: torch.Tensor, args: Sequence[object]) -> None:
    """What TensorIterator checks before a kernel writes ``out``: no element of ``out`` written twice, and
    no input sharing some (but not all) of ``out``'s bytes."""
    if name in _NO_OVERLAP_CHECK:
        return
    _no_internal_overlap(out)
    for a in args:
        if isinstance(a, torch.Tensor) and a.device == out.device:
            _no_partial_overlap(out, a)


def check_arguments(name: str, args: Sequence[object], out: torch.Tensor | None = None) -> None:
    """Every check ``pointwise`` makes before computing, in the CPU's order (used by the float32 wrapper too)."""
    rule = _ARGUMENT_RULES.get(name)
    if rule is not None:
        rule(name, args)
    if out is not None:
        check_written(name, out, args)
    rule = _KERNEL_RULES.get(name)
    if rule is not None:
        rule(name, args)


def _np_value(value: object, np_type: type) -> object:
    """``value`` as a NumPy scalar of ``np_type``, wrapping out-of-range integers as a C++ cast does."""
    try:
        return np_type(value)
    except OverflowError:
        return np.array(value, dtype=np.int64).astype(np_type)[()]


def pointwise(
    name: str,
    template: str,
    args: Sequence[object],
    *,
    named: dict[str, object] | None = None,
    out: torch.Tensor | None = None,
    inplace: bool = False,
    to_float: bool = False,
    bool_result: bool = False,
    compute_dtype: torch.dtype | None = None,
    flops: float = 1.0,
) -> torch.Tensor:
    """Run one elementwise operator on npu tensors.

    Args:
        name: kernel name for the profiler.
        template: scalar expression, ``{k}`` is the k-th argument.
        args: tensors and/or Python scalars (zero-dim CPU tensors count as scalars).
        named: extra scalar parameters the template names (``alpha``...).
        out: write here (``out=`` or in-place) instead of allocating.
        inplace: ``out`` is ``args[0]``: its shape may not grow by broadcasting.
        to_float: integer inputs compute in the default float dtype (``exp``...).
        bool_result: the result is ``torch.bool`` (comparisons, logical ops).
        compute_dtype: force the dtype the expression computes in.
    """
    check_arguments(name, args, out)
    if out is None and not named and compute_dtype is None:
        res = _fast(name, template, args, to_float, bool_result, flops)
        if res is not None:
            return res
    check_same_device(f"aten::{name}", *args)
    if out is not None:
        check_same_device(f"aten::{name}", out)
    named = named or {}
    dtype = compute_dtype or _promote(args)
    if to_float and not (dtype.is_floating_point or dtype.is_complex):
        dtype = _float_default()
    tensors: list[torch.Tensor] = []
    names: list[str] = []
    scalar_names: list[str] = []
    scalar_values: list[object] = []
    np_type = NUMPY_DTYPES.get(dtype)
    if np_type is None:
        raise TypeError(f"npu {name} does not support dtype {dtype}")
    for k, a in enumerate(args):
        if _is_tensor_operand(a):
            if a.dtype != dtype:
                cast = empty(a.shape, dtype)
                device_copy(cast, a)
                a = cast
            names.append(f"x{len(tensors)}")
            tensors.append(a)
        else:
            v = a.item() if isinstance(a, torch.Tensor) else a
            names.append(f"c{k}")
            scalar_names.append(f"c{k}")
            scalar_values.append(_np_value(v, np_type))
    for key, v in named.items():
        scalar_names.append(key)
        scalar_values.append(_np_value(v, np_type))
    shapes = [tuple(t.shape) for t in tensors]
    shape = shapes[0] if len(set(shapes)) <= 1 and shapes else broadcast_shape(*shapes)
    result_dtype = torch.bool if bool_result else dtype
    if out is None:
        like = next((t for t in tensors if tuple(t.shape) == shape), None)
        strides = dense_strides_like(like) if like is not None else None
        out = empty(shape, result_dtype) if strides is None else empty_strided(shape, strides, result_dtype)
    else:
        if inplace:
            grown = broadcast_shape(out.shape, shape)
            if tuple(out.shape) != shape and grown != tuple(out.shape):
                raise RuntimeError(
                    f"output with shape {list(out.shape)} doesn't match the broadcast shape "
                    f"{list(grown)}"
                )
            shape = tuple(out.shape)
        else:
            resize_out(out, shape)
        if not torch.can_cast(result_dtype, out.dtype):
            raise RuntimeError(
                f"result type {_short(result_dtype)} can't be cast to the desired output "
                f"type {_short(out.dtype)}"
            )
    expr = template.format(*names)
    if out.dtype == torch.bool and not bool_result:
        expr = f"({expr}) != 0"
    kernel = elementwise.kernel(name, len(tensors), expr, tuple(scalar_names))
    run_elementwise(kernel, [out], tensors, scalar_values, flops_per_element=flops)
    return out


def _fast(name: str, template: str, args: Sequence[object], to_float: bool, bool_result: bool,
          flops: float) -> torch.Tensor | None:
    """The common case at a fraction of the cost: npu tensors of one dtype, shape and device, all contiguous.

    Nothing to promote, broadcast or cast, so the kernel runs on the operands' memory as flat
    arrays (:meth:`~npu_lab.kernels.elementwise.ElementwiseKernel.ptr_kernels`); None sends every
    other case down the general path.
    """
    a0 = args[0]
    if type(a0) is not _Tensor:
        return None
    dtype, shape, dev = a0.dtype, a0.shape, a0.get_device()
    if dev < 0:
        return None
    strides = None if a0.is_contiguous() else a0.stride()
    if strides is not None and not _permuted_dense(a0):
        return None
    for a in args[1:]:
        if type(a) is not _Tensor or a.dtype != dtype or a.shape != shape or a.get_device() != dev \
                or not (a.is_contiguous() if strides is None else a.stride() == strides):
            return None
    n = a0.numel()
    if n == 0:
        return None
    key = (name, template, dtype, len(args), bool_result)
    entry = _FAST.get(key)
    if entry is None:
        if to_float and not (dtype.is_floating_point or dtype.is_complex) or dtype not in _NP:
            return None
        expr = template.format(*[f"x{k}" for k in range(len(args))])
        if dtype == torch.bool and not bool_result:
            expr = f"({expr}) != 0"  # as the general path: a bool result of arithmetic is "non-zero"
        kernel = elementwise.kernel(name, len(args), expr, ())
        result_dtype = torch.bool if bool_result else dtype
        entry = _FAST[key] = (*kernel.ptr_kernels(_NP[result_dtype], _NP[dtype]), kernel.name, result_dtype)
    serial, parallel, kname, result_dtype = entry
    out = _new(shape, result_dtype, dev, strides)
    (parallel if n >= _PARALLEL else serial)(n, out.data_ptr(), *[a.data_ptr() for a in args])
    itemsize = a0.element_size()
    launch(kname, flops * n, len(args) * n * itemsize, n * out.element_size(), dev)
    return out


# ---------------------------------------------------------------------------
# Fast paths (``register(..., fast=...)``): the operators a training step calls most, for contiguous
# tensors of one dtype on the current device, without the general path's promotion, broadcasting and
# checks. Each returns None for anything else (the general path then runs and raises what it raises).

#: The dtypes the fast paths take, with their NumPy dtypes.
_NP: dict[torch.dtype, np.dtype] = {
    dt: np.dtype(NUMPY_DTYPES[dt]) for dt in (torch.float32, torch.float64, torch.int64, torch.int32, torch.int16,
                                              torch.int8, torch.uint8, torch.bool)
}
_FLOATS = (torch.float32, torch.float64)
_INTEGERS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
_PARALLEL = elementwise.PARALLEL_THRESHOLD
_current_device = _C.current_device


def _permuted_dense(t: torch.Tensor) -> bool:
    """Is ``t`` (not contiguous) a dense tensor in another dimension order (a transpose, channels-last)?
    Its elements then fill one block of memory from ``data_ptr()``, and an elementwise result with the
    same strides (the layout PyTorch gives it) lines up with it element for element, so the flat
    kernels run on both as on contiguous tensors."""
    key = (t.shape, t.stride())
    known = _PERMUTED_DENSE.get(key)
    if known is None:
        if len(_PERMUTED_DENSE) >= 4096:  # (shapes repeat from step to step; keep the table small)
            _PERMUTED_DENSE.clear()
        known = _PERMUTED_DENSE[key] = t.dim() >= 2 and dense_strides_like(t) == key[1]
    return known


#: (shape, strides) -> :func:`_permuted_dense`'s answer.
_PERMUTED_DENSE: dict[tuple, bool] = {}


def _new(shape, dtype: torch.dtype, dev: int, strides: tuple[int, ...] | None) -> torch.Tensor:
    return _empty(shape, dtype, dev) if strides is None else _empty_strided(shape, strides, dtype, dev)


def _overlaps_partly(out: torch.Tensor, other: torch.Tensor, nbytes: int) -> bool:
    """Do two contiguous tensors of ``nbytes`` each share some, but not all, of their bytes?"""
    p, q = out.data_ptr(), other.data_ptr()
    return p != q and p < q + nbytes and q < p + nbytes


def _scalar_fits(dtype: torch.dtype, value: object) -> bool:
    """Does a Python number ``value`` keep ``dtype`` as the result type (no promotion)?"""
    kind = type(value)
    return kind is float and dtype in _FLOATS or kind is int and dtype in _NP and dtype is not torch.bool


def _fast_unary(name: str, template: str, *, to_float: bool = False, bool_result: bool = False,
                flops: float = 1.0, inplace: bool = False) -> Callable | None:
    """The fast path of a one-input operator (functional, or in place with ``inplace``)."""
    if name in _ARGUMENT_RULES or name in _KERNEL_RULES:
        return None
    table: dict[torch.dtype, tuple | None] = {}

    def entry(dtype: torch.dtype) -> tuple | None:
        if dtype not in _NP or to_float and dtype not in _FLOATS \
                or inplace and bool_result and dtype is not torch.bool:
            return None
        expr = template.format("x0")
        result_dtype = torch.bool if bool_result else dtype
        if result_dtype is torch.bool and not bool_result:
            expr = f"({expr}) != 0"
        kernel = elementwise.kernel(name, 1, expr, ())
        return (*kernel.ptr_kernels(_NP[result_dtype], _NP[dtype]), kernel.name, result_dtype,
                _NP[dtype].itemsize, _NP[result_dtype].itemsize)

    def fast(a):
        if not isinstance(a, _Tensor):
            return None
        dtype = a.dtype
        e = table.get(dtype, False)
        if e is False:
            e = table[dtype] = entry(dtype)
        dev = a.get_device()
        if e is None or dev != _current_device():
            return None
        strides = None if a.is_contiguous() else a.stride()
        if strides is not None and not _permuted_dense(a):
            return None
        n = a.numel()
        if not n:
            return None
        serial, parallel, kname, result_dtype, in_size, out_size = e
        out = a if inplace else _new(a.shape, result_dtype, dev, strides)
        (parallel if n >= _PARALLEL else serial)(n, out.data_ptr(), a.data_ptr())
        launch(kname, flops * n, n * in_size, n * out_size, dev)
        return out

    return fast


def _fast_binary(name: str, template: str, alpha_template: str | None = None, *, to_float: bool = False,
                 bool_result: bool = False, flops: float = 1.0, inplace: bool = False) -> Callable | None:
    """The fast path of a two-input operator ``op(self, other[, alpha])``: ``other`` a tensor like
    ``self``, a Python number or a zero-dim CPU tensor that does not change the result's dtype."""
    if name in _ARGUMENT_RULES or name in _KERNEL_RULES:
        return None
    table: dict[tuple, tuple | None] = {}

    def entry(dtype: torch.dtype, scalar: bool, alpha: bool) -> tuple | None:
        if dtype not in _NP or to_float and dtype not in _FLOATS \
                or inplace and bool_result and dtype is not torch.bool:
            return None
        names = ("x0", "c1") if scalar else ("x0", "x1")
        expr = (alpha_template if alpha else template).format(*names)
        result_dtype = torch.bool if bool_result else dtype
        if result_dtype is torch.bool and not bool_result:
            expr = f"({expr}) != 0"
        kernel = elementwise.kernel(name, 1 if scalar else 2, expr, ("c1",) * scalar + ("alpha",) * alpha)
        return (*kernel.ptr_kernels(_NP[result_dtype], _NP[dtype]), kernel.name, result_dtype,
                NUMPY_DTYPES[dtype], _NP[dtype].itemsize, _NP[result_dtype].itemsize, kernel)

    def fast(a, b, alpha=1):
        if not isinstance(a, _Tensor):
            return None
        dtype = a.dtype
        dev = a.get_device()
        if dev != _current_device():
            return None
        strides = None if a.is_contiguous() else a.stride()
        if strides is not None and not _permuted_dense(a):
            return None
        n = a.numel()
        if not n:
            return None
        scaled = alpha != 1
        if scaled and (alpha_template is None or not _scalar_fits(dtype, alpha)):
            return None
        shape = a.shape
        if isinstance(b, _Tensor):
            if b.get_device() == dev:
                if b.dtype is not dtype or b.shape != shape \
                        or not (b.is_contiguous() if strides is None else b.stride() == strides):
                    return None
                scalar = False
            elif b.dim() == 0 and b.device.type == "cpu" and (b.dtype is dtype or a.dim() and (
                    dtype in _FLOATS and not b.dtype.is_complex
                    or dtype in _INTEGERS and not (b.dtype.is_floating_point or b.dtype.is_complex))):
                scalar = True  # a number given as a tensor (``x * 2`` passes 2 this way): the CPU's promotion
                b = b.item()   # keeps self's dtype, as for a Python number of the same kind
            else:
                return None
        elif _scalar_fits(dtype, b):
            scalar = True
        else:
            return None
        key = (dtype, scalar, scaled)
        e = table.get(key, False)
        if e is False:
            e = table[key] = entry(dtype, scalar, scaled)
        if e is None:
            return None
        serial, parallel, kname, result_dtype, np_type, in_size, out_size, _ = e
        if inplace:
            if not scalar and _overlaps_partly(a, b, n * in_size):
                return None
            out = a
        else:
            out = _new(shape, result_dtype, dev, strides)
        run = parallel if n >= _PARALLEL else serial
        try:
            if scalar:
                if scaled:
                    run(n, out.data_ptr(), a.data_ptr(), np_type(b), np_type(alpha))
                else:
                    run(n, out.data_ptr(), a.data_ptr(), np_type(b))
            elif scaled:
                run(n, out.data_ptr(), a.data_ptr(), b.data_ptr(), np_type(alpha))
            else:
                run(n, out.data_ptr(), a.data_ptr(), b.data_ptr())
        except OverflowError:  # an integer scalar out of the dtype's range: the general path wraps it
            return None
        launch(kname, flops * n, (1 if scalar else 2) * n * in_size, n * out_size, dev)
        return out

    def many(selfs: Sequence, others: object, alpha: object, one_by_one: Callable[[int], None]) -> None:
        """The in-place operator on every pair ``(selfs[i], others[i])`` (``others`` a list of tensors, or one
        Python number for every ``selfs[i]``), in order, as ``torch._foreach_*`` asks for it. Runs of pairs the
        fast path would take as small contiguous tensors go to the compiled code in one call (each tensor's
        launch accounted as the fast path accounts it); every other pair is left to ``one_by_one(i)``."""
        scalar = not isinstance(others, (list, tuple))
        first = selfs[0]
        dtype = first.dtype if isinstance(first, _Tensor) else None
        dev = _current_device()
        scaled = alpha != 1
        e = None
        if dtype is not None and not (scaled and (alpha_template is None or not _scalar_fits(dtype, alpha))) \
                and not (scalar and not _scalar_fits(dtype, others)):
            key = (dtype, scalar, scaled)
            e = table.get(key, False)
            if e is False:
                e = table[key] = entry(dtype, scalar, scaled)
        if e is None:
            for i in range(len(selfs)):
                one_by_one(i)
            return
        _, _, kname, result_dtype, np_type, in_size, out_size, kernel = e
        try:
            values = ([] if not scalar else [np_type(others)]) + ([np_type(alpha)] if scaled else [])
        except OverflowError:
            values = None
        run: list[int] = []
        sizes: list[int] = []
        others_at: list[int] = []

        def flush() -> None:
            if not run:
                return
            addresses = np.array(run, np.int64)
            operands = [addresses, addresses] + ([] if scalar else [np.array(others_at, np.int64)])
            kernel.ptr_many(_NP[result_dtype], _NP[dtype])(np.array(sizes, np.int64), *operands, *values)
            for n in sizes:
                launch(kname, flops * n, (1 if scalar else 2) * n * in_size, n * out_size, dev)
            run.clear(), sizes.clear(), others_at.clear()

        for i, a in enumerate(selfs):
            n = a.numel() if isinstance(a, _Tensor) else 0
            ok = values is not None and 0 < n < _PARALLEL and a.dtype is dtype and a.get_device() == dev \
                and a.is_contiguous()
            if ok:
                p = a.data_ptr()
                if scalar:
                    run.append(p)
                    sizes.append(n)
                    continue
                b = others[i]
                if isinstance(b, _Tensor) and b.dtype is dtype and b.get_device() == dev and b.is_contiguous() \
                        and b.shape == a.shape:
                    q = b.data_ptr()
                    if p == q or not (p < q + n * in_size and q < p + n * in_size):  # (no partial overlap)
                        run.append(p)
                        sizes.append(n)
                        others_at.append(q)
                        continue
            flush()
            one_by_one(i)
        flush()

    if inplace:
        fast.many = many
    return fast


def _fast_named(name: str, template: str, keys: Sequence[str], *, tensors: int = 2, to_float: bool = False,
                flops: float = 1.0) -> Callable:
    """The fast path of an operator ``op(t0[, t1], *values)``: one or two tensors of one dtype, shape and
    device (contiguous), and Python numbers for the template's named scalars ``keys``, in order."""
    table: dict[torch.dtype, tuple | None] = {}

    def entry(dtype: torch.dtype) -> tuple | None:
        if dtype not in _NP or dtype is torch.bool or to_float and dtype not in _FLOATS:
            return None
        kernel = elementwise.kernel(name, tensors, template.format(*[f"x{i}" for i in range(tensors)]), tuple(keys))
        return (*kernel.ptr_kernels(_NP[dtype], _NP[dtype]), kernel.name, NUMPY_DTYPES[dtype], _NP[dtype].itemsize)

    def fast(a, *rest):
        if not isinstance(a, _Tensor) or len(rest) != tensors - 1 + len(keys):
            return None
        dtype = a.dtype
        dev = a.get_device()
        if dev != _current_device():
            return None
        strides = None if a.is_contiguous() else a.stride()
        if strides is not None and not _permuted_dense(a):
            return None
        n = a.numel()
        if not n:
            return None
        shape = a.shape
        addresses = [a.data_ptr()]
        for b in rest[:tensors - 1]:
            if not isinstance(b, _Tensor) or b.dtype is not dtype or b.get_device() != dev or b.shape != shape \
                    or not (b.is_contiguous() if strides is None else b.stride() == strides):
                return None
            addresses.append(b.data_ptr())
        values = rest[tensors - 1:]
        for v in values:
            if not _scalar_fits(dtype, v):
                return None
        e = table.get(dtype, False)
        if e is False:
            e = table[dtype] = entry(dtype)
        if e is None:
            return None
        serial, parallel, kname, np_type, size = e
        try:
            scalars = [np_type(v) for v in values]
        except OverflowError:
            return None
        out = _new(shape, dtype, dev, strides)
        (parallel if n >= _PARALLEL else serial)(n, out.data_ptr(), *addresses, *scalars)
        launch(kname, flops * n, tensors * n * size, n * size, dev)
        return out

    return fast


def _short(dtype: torch.dtype) -> str:
    return {
        torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
        torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
        torch.uint8: "Byte", torch.bool: "Bool", torch.complex64: "ComplexFloat",
    }.get(dtype, str(dtype))


# ---------------------------------------------------------------------------
# Registration helpers: one call registers the functional, in-place and out= forms.


# ATen names the out= overloads of some operators differently.
_TENSOR_OUT_NAMES = {"bitwise_and", "bitwise_or", "bitwise_xor", "eq", "ne", "lt", "le", "gt", "ge"}
_SCALAR_OUT_NAMES = {"bitwise_and", "bitwise_or", "bitwise_xor", "eq", "ne", "lt", "le", "gt", "ge", "copysign"}


def _binary_family(base: str, template: Callable[[object], tuple[str, dict]] | str, *,
                   overloads: Sequence[str] = ("Tensor", "Scalar"), to_float: bool = False,
                   bool_result: bool = False, flops: float = 1.0, with_alpha: bool = False,
                   inplace: bool = True, out: bool = True) -> None:
    def build(alpha):
        if isinstance(template, str):
            return template, {}
        return template(alpha)

    def functional(self, other, *, alpha=1):
        t, named = build(alpha)
        return pointwise(base, t, (self, other), named=named, to_float=to_float,
                         bool_result=bool_result, flops=flops)

    def in_place(self, other, *, alpha=1):
        t, named = build(alpha)
        return pointwise(base, t, (self, other), named=named, out=self, inplace=True,
                         to_float=to_float, bool_result=bool_result, flops=flops)

    def out_form(self, other, *, alpha=1, out):
        t, named = build(alpha)
        return pointwise(base, t, (self, other), named=named, out=out, to_float=to_float,
                         bool_result=bool_result, flops=flops)

    if not with_alpha:
        f0, i0, o0 = functional, in_place, out_form

        def functional(self, other):  # noqa: F811
            return f0(self, other)

        def in_place(self, other):  # noqa: F811
            return i0(self, other)

        def out_form(self, other, *, out):  # noqa: F811
            return o0(self, other, out=out)

    simple = template if isinstance(template, str) else template(1)[0]
    alpha_template = None if isinstance(template, str) else template(2)[0]
    flags = {"to_float": to_float, "bool_result": bool_result, "flops": flops}
    fast = _fast_binary(base, simple, alpha_template, **flags)
    fast_in_place = _fast_binary(base, simple, alpha_template, inplace=True, **flags)
    for ov in overloads:
        register(f"{base}.{ov}", fast=fast)(functional)
        if inplace:
            register(f"{base}_.{ov}", fast=fast_in_place)(in_place)
    if out:
        if "Tensor" in overloads:
            register(f"{base}.Tensor_out" if base in _TENSOR_OUT_NAMES else f"{base}.out")(out_form)
            if "Scalar" in overloads and base in _SCALAR_OUT_NAMES:
                register(f"{base}.Scalar_out")(out_form)
        else:
            register(f"{base}.out")(out_form)


def _alpha(op: str) -> Callable[[object], tuple[str, dict]]:
    def build(alpha):
        if alpha == 1:
            return f"{{0}} {op} {{1}}", {}
        return f"{{0}} {op} alpha * {{1}}", {"alpha": alpha}

    return build


_binary_family("add", _alpha("+"), with_alpha=True)
_binary_family("sub", _alpha("-"), with_alpha=True)
_binary_family("mul", "{0} * {1}")
_binary_family("div", "{0} / {1}", to_float=True)
_binary_family("maximum", "max({0}, {1}) if {0} == {0} and {1} == {1} else {0} + {1}",
               overloads=("default",), inplace=False)
_binary_family("minimum", "min({0}, {1}) if {0} == {0} and {1} == {1} else {0} + {1}",
               overloads=("default",), inplace=False)
_binary_family("logical_and", "({0} != 0) and ({1} != 0)", overloads=("default",),
               bool_result=True, inplace=False)
_binary_family("logical_or", "({0} != 0) or ({1} != 0)", overloads=("default",),
               bool_result=True, inplace=False)
_binary_family("logical_xor", "({0} != 0) != ({1} != 0)", overloads=("default",),
               bool_result=True, inplace=False)
_binary_family("bitwise_and", "{0} & {1}", overloads=("Tensor", "Scalar"))
_binary_family("bitwise_or", "{0} | {1}", overloads=("Tensor", "Scalar"))
_binary_family("bitwise_xor", "{0} ^ {1}", overloads=("Tensor", "Scalar"))
for _cmp, _sym in (("eq", "=="), ("ne", "!="), ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">=")):
    _binary_family(_cmp, f"{{0}} {_sym} {{1}}", bool_result=True, inplace=False)


@register("rsub.Tensor", "rsub.Scalar")
def rsub(self, other, alpha=1):
    if alpha == 1:
        return pointwise("rsub", "{1} - {0}", (self, other))
    return pointwise("rsub", "{1} - alpha * {0}", (self, other), named={"alpha": alpha})


_ROUNDING = {
    "trunc": ("trunc_div({0}, {1})", "int_trunc_div({0}, {1})"),
    "floor": ("div_floor({0}, {1})", "int_floor_div({0}, {1})"),
}


def check_int_divisor(dtype: torch.dtype, divisor: object) -> None:
    """The CPU's integer division kernels raise on a zero divisor (floats give inf/NaN instead)."""
    if dtype.is_floating_point or dtype.is_complex:
        return
    if _is_tensor_operand(divisor):
        if divisor.numel() and bool(np.any(as_array(divisor) == 0)):
            raise RuntimeError("ZeroDivisionError")
    elif (divisor.item() if isinstance(divisor, torch.Tensor) else divisor) == 0:
        raise RuntimeError("ZeroDivisionError")


def _div_mode(self, other, rounding_mode, out=None, inplace=False):
    if rounding_mode is None:
        return pointwise("div", "{0} / {1}", (self, other), to_float=True, out=out, inplace=inplace)
    if rounding_mode not in _ROUNDING:
        raise RuntimeError("div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                           f"'{rounding_mode}'")
    dtype = _promote((self, other))
    fl, it = _ROUNDING[rounding_mode]
    if not dtype.is_floating_point and dtype != torch.bool:
        check_int_divisor(dtype, other)
    template = fl if dtype.is_floating_point else it
    if dtype == torch.bool:
        template = "{0}"  # the kernel rule raises the CPU's error first
    return pointwise(f"div_{rounding_mode}", template, (self, other), out=out, inplace=inplace)


@register("div.Tensor_mode", "div.Scalar_mode")
def div_mode(self, other, *, rounding_mode=None):
    """``a / b`` rounded toward zero (``trunc``) or down (``floor``), or true division."""
    return _div_mode(self, other, rounding_mode)


@register("div_.Tensor_mode", "div_.Scalar_mode")
def div_mode_(self, other, *, rounding_mode=None):
    return _div_mode(self, other, rounding_mode, out=self, inplace=True)


@register("div.out_mode")
def div_mode_out(self, other, *, rounding_mode=None, out):
    return _div_mode(self, other, rounding_mode, out=out)


@register("floor_divide", "floor_divide.Scalar")
def floor_divide(self, other):
    """``a // b``: division rounded down (Python's semantics; integers raise on a zero divisor)."""
    return _div_mode(self, other, "floor")


@register("floor_divide_.Tensor", "floor_divide_.Scalar")
def floor_divide_(self, other):
    return _div_mode(self, other, "floor", out=self, inplace=True)


@register("floor_divide.out", "floor_divide.Scalar_out")
def floor_divide_out(self, other, *, out):
    return _div_mode(self, other, "floor", out=out)


@register("remainder.Tensor", "remainder.Scalar", "remainder.Scalar_Tensor")
def remainder(self, other):
    """``a mod b`` with the divisor's sign (numba's % follows Python, as PyTorch does)."""
    check_int_divisor(_promote((self, other)), other)
    return pointwise("remainder", "{0} % {1}", (self, other))


# pow: three overloads with different argument kinds
@register("pow.Tensor_Tensor", "pow.Tensor_Scalar")
def pow_(self, exponent):
    if not isinstance(exponent, torch.Tensor):
        if exponent == 2:
            return pointwise("pow2", "{0} * {0}", (self, exponent))
        if exponent == 0.5:
            return pointwise("sqrt", "math.sqrt({0})", (self,), to_float=True)
    return pointwise("pow", "{0} ** {1}", (self, exponent), flops=10)


@register("pow.Scalar")
def pow_scalar(self, exponent):
    return pointwise("pow", "{0} ** {1}", (self, exponent), flops=10)


@register("pow_.Scalar", "pow_.Tensor")
def pow_inplace(self, exponent):
    return pointwise("pow", "{0} ** {1}", (self, exponent), out=self, inplace=True, flops=10)


@register("pow.Tensor_Scalar_out", "pow.Tensor_Tensor_out")
def pow_out(self, exponent, *, out):
    return pointwise("pow", "{0} ** {1}", (self, exponent), out=out, flops=10)


# ---------------------------------------------------------------------------
# Unary operators: name -> (template, integer inputs compute in float?, flops)

UNARY: dict[str, tuple[str, bool, float]] = {
    "neg": ("-{0}", False, 1),
    "abs": ("abs({0})", False, 1),
    "exp": ("fast_exp({0})", True, 8),
    "log": ("math.log({0}) if {0} > 0 else (-math.inf if {0} == 0 else math.nan)", True, 8),
    "log2": ("math.log2({0}) if {0} > 0 else (-math.inf if {0} == 0 else math.nan)", True, 8),
    "log1p": ("math.log1p({0}) if {0} > -1 else (-math.inf if {0} == -1 else math.nan)", True, 8),
    "expm1": ("math.expm1({0})", True, 8),
    "sqrt": ("math.sqrt({0}) if {0} >= 0 else math.nan", True, 4),
    "rsqrt": ("1 / math.sqrt({0}) if {0} >= 0 else math.nan", True, 5),
    "reciprocal": ("1 / {0}", True, 1),
    "relu": ("relu({0})", False, 1),
    "sigmoid": ("sigmoid({0})", True, 8),
    "tanh": ("fast_tanh({0})", True, 8),
    "sin": ("math.sin({0})", True, 8),
    "cos": ("math.cos({0})", True, 8),
    "erf": ("math.erf({0})", True, 8),
    "sign": ("sign({0})", False, 1),
    "sgn": ("sign({0})", False, 1),
    "floor": ("np.floor({0})", False, 1),  # math.floor returns an int: wrong for -0.0, inf, nan, 2**70
    "ceil": ("np.ceil({0})", False, 1),
    "trunc": ("np.trunc({0})", False, 1),
    "round": ("np.round({0})", False, 1),
    "silu": ("silu({0})", True, 9),
    "logical_not": ("{0} == 0", False, 1),
    "bitwise_not": ("not {0}", False, 1),
    # trigonometric and hyperbolic functions (libm's, in the argument's precision)
    "tan": ("math.tan({0})", True, 8),
    "asin": ("math.asin({0})", True, 8),
    "acos": ("math.acos({0})", True, 8),
    "atan": ("math.atan({0})", True, 8),
    "sinh": ("math.sinh({0})", True, 8),
    "cosh": ("math.cosh({0})", True, 8),
    "asinh": ("math.asinh({0})", True, 8),
    "acosh": ("math.acosh({0})", True, 8),
    "atanh": ("math.atanh({0})", True, 8),
    # exponentials, logarithms, error and gamma functions
    "exp2": ("np.exp2({0})", True, 8),
    "log10": ("np.log10({0})", True, 8),
    "erfc": ("math.erfc({0})", True, 8),
    "erfinv": ("erfinv(float({0}))", True, 40),
    "lgamma": ("math.lgamma({0})", True, 20),
    "digamma": ("digamma(float({0}))", True, 40),
    "i0": ("i0(float({0}))", True, 40),
    "frac": ("{0} - np.trunc({0})", False, 2),
}


def _unary(name: str, template: str, to_float: bool, flops: float) -> None:
    bool_result = name == "logical_not"
    if name == "bitwise_not":
        int_template = "~{0}"

        def pick(t: torch.Tensor) -> str:
            return template if t.dtype == torch.bool else int_template
    else:

        def pick(t: torch.Tensor) -> str:
            return template

    def functional(self):
        return pointwise(name, pick(self), (self,), to_float=to_float, bool_result=bool_result,
                         flops=flops)

    def in_place(self):
        return pointwise(name, pick(self), (self,), out=self, inplace=True, to_float=to_float,
                         bool_result=bool_result, flops=flops)

    def out_form(self, *, out):
        return pointwise(name, pick(self), (self,), out=out, to_float=to_float,
                         bool_result=bool_result, flops=flops)

    flags = {"to_float": to_float, "bool_result": bool_result, "flops": flops}
    register(name, fast=_fast_unary(name, template, **flags))(functional)
    register(f"{name}_", fast=_fast_unary(name, template, inplace=True, **flags))(in_place)
    register(f"{name}.out")(out_form)


for _n, (_t, _f, _fl) in UNARY.items():
    _unary(_n, _t, _f, _fl)


_GELU_FAST = {a: _fast_unary(f"gelu_{a}", f"gelu_{f}({{0}})", to_float=True, flops=12)
              for a, f in (("none", "erf"), ("tanh", "tanh"))}
_GELU_BACKWARD_FAST = {a: _fast_binary(f"gelu_backward_{a}", f"gelu_{f}_grad({{0}}, {{1}})", flops=20)
                       for a, f in (("none", "erf"), ("tanh", "tanh"))}


def _fast_gelu(self, *, approximate="none"):
    fast = _GELU_FAST.get(approximate) if type(approximate) is str else None
    return None if fast is None else fast(self)


def _fast_gelu_backward(grad_output, self, *, approximate="none"):
    fast = _GELU_BACKWARD_FAST.get(approximate) if type(approximate) is str else None
    if fast is None or not isinstance(self, _Tensor):
        return None
    return fast(grad_output, self)


@register("gelu", fast=_fast_gelu)
def gelu(self, *, approximate="none"):
    fn = "gelu_tanh" if approximate == "tanh" else "gelu_erf"
    return pointwise(f"gelu_{approximate}", f"{fn}({{0}})", (self,), to_float=True, flops=12)


@register("gelu_")
def gelu_inplace(self, *, approximate="none"):
    fn = "gelu_tanh" if approximate == "tanh" else "gelu_erf"
    return pointwise(f"gelu_{approximate}", f"{fn}({{0}})", (self,), out=self, inplace=True, flops=12)


@register("gelu_backward", fast=_fast_gelu_backward)
def gelu_backward(grad_output, self, *, approximate="none"):
    fn = "gelu_tanh_grad" if approximate == "tanh" else "gelu_erf_grad"
    return pointwise(f"gelu_backward_{approximate}", f"{fn}({{0}}, {{1}})", (grad_output, self), flops=20)


@register("threshold_backward", fast=_fast_named("threshold_backward", "{0} * 0 if {1} <= threshold else {0}",
                                                 ("threshold",)))
def threshold_backward(grad_output, self, threshold):
    return pointwise("threshold_backward", "{0} * 0 if {1} <= threshold else {0}",
                     (grad_output, self), named={"threshold": threshold})


@register("threshold")
def threshold(self, threshold, value):
    return pointwise("threshold", "value if {0} <= threshold else {0}", (self,),
                     named={"threshold": threshold, "value": value})


@register("sigmoid_backward")
def sigmoid_backward(grad_output, output):
    return pointwise("sigmoid_backward", "{0} * {1} * (1 - {1})", (grad_output, output), flops=3)


@register("tanh_backward")
def tanh_backward(grad_output, output):
    return pointwise("tanh_backward", "{0} * (1 - {1} * {1})", (grad_output, output), flops=3)


@register("silu_backward")
def silu_backward(grad_output, self):
    return pointwise("silu_backward", "{0} * sigmoid({1}) * (1 + {1} * (1 - sigmoid({1})))",
                     (grad_output, self), flops=12)


def _clamp_template(lo, hi) -> tuple[str, dict]:
    if lo is not None and hi is not None:
        return "clamp({0}, lo, hi)", {"lo": lo, "hi": hi}
    if lo is not None:
        return "lo if {0} < lo else {0}", {"lo": lo}
    if hi is not None:
        return "hi if {0} > hi else {0}", {"hi": hi}
    raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")


def _clamp(self, lo, hi, out=None, inplace=False):
    lo = lo.item() if isinstance(lo, torch.Tensor) and lo.device.type == "cpu" else lo
    hi = hi.item() if isinstance(hi, torch.Tensor) and hi.device.type == "cpu" else hi
    if isinstance(lo, torch.Tensor) or isinstance(hi, torch.Tensor):
        args: list[object] = [self]
        t = "{0}"
        if lo is not None:
            args.append(lo)
            t = f"max({t}, {{{len(args) - 1}}})"
        if hi is not None:
            args.append(hi)
            t = f"min({t}, {{{len(args) - 1}}})"
        return pointwise("clamp", t, args, out=out, inplace=inplace)
    template, named = _clamp_template(lo, hi)
    return pointwise("clamp", template, (self,), named=named, out=out, inplace=inplace,
                     compute_dtype=_promote([self] + [v for v in (lo, hi) if v is not None]))


@register("clamp", "clamp.Tensor")
def clamp(self, min=None, max=None):
    return _clamp(self, min, max)


@register("clamp_", "clamp_.Tensor")
def clamp_inplace(self, min=None, max=None):
    return _clamp(self, min, max, out=self, inplace=True)


@register("clamp.out", "clamp.Tensor_out")
def clamp_out(self, min=None, max=None, *, out):
    return _clamp(self, min, max, out=out)


@register("clamp_min", "clamp_min.Tensor")
def clamp_min(self, min):
    return _clamp(self, min, None)


@register("clamp_min_", "clamp_min_.Tensor")
def clamp_min_inplace(self, min):
    return _clamp(self, min, None, out=self, inplace=True)


@register("clamp_max", "clamp_max.Tensor")
def clamp_max(self, max):
    return _clamp(self, None, max)


@register("clamp_max_", "clamp_max_.Tensor")
def clamp_max_inplace(self, max):
    return _clamp(self, None, max, out=self, inplace=True)


@register("where.self_out")
def where_out(condition, self, other, *, out):
    check_written("where", out, (condition, self, other))
    res = where(condition, self, other)
    if out.dtype != res.dtype:
        raise RuntimeError(f"Expected out type to be {_short(res.dtype)} but got {_short(out.dtype)}")
    resize_out(out, res.shape)
    device_copy(out, res)
    return out


@register("where.self")
def where(condition, self, other):
    """``where``: the condition keeps its bool dtype; the values are promoted."""
    check_same_device("aten::where", condition, self, other)
    if condition.dtype != torch.bool:
        raise RuntimeError(
            "where expected condition to be a boolean tensor, but got a tensor with dtype "
            f"{_short(condition.dtype)}"
        )
    dtype = _promote((self, other))
    vals = []
    for v in (self, other):
        if _is_tensor_operand(v) and v.dtype != dtype:
            c = empty(v.shape, dtype)
            device_copy(c, v)
            v = c
        vals.append(v)
    names = ["x0"]
    tensors = [condition]
    scalar_names: list[str] = []
    scalar_values: list[object] = []
    for k, v in enumerate(vals, start=1):
        if _is_tensor_operand(v):
            names.append(f"x{len(tensors)}")
            tensors.append(v)
        else:
            names.append(f"c{k}")
            scalar_names.append(f"c{k}")
            scalar_values.append(NUMPY_DTYPES[dtype](v.item() if isinstance(v, torch.Tensor) else v))
    shape = broadcast_shape(*[t.shape for t in tensors])
    out = empty(shape, dtype)
    kernel = elementwise.kernel(
        "where", len(tensors), f"{names[1]} if {names[0]} else {names[2]}", tuple(scalar_names)
    )
    run_elementwise(kernel, [out], tensors, scalar_values)
    return out


def _ternary(name: str, template: str) -> None:
    def functional(self, t1, t2, *, value=1):
        return pointwise(name, template, (self, t1, t2), named={"value": value}, flops=3)

    def in_place(self, t1, t2, *, value=1):
        return pointwise(name, template, (self, t1, t2), named={"value": value}, out=self,
                         inplace=True, flops=3)

    def out_form(self, t1, t2, *, value=1, out):
        return pointwise(name, template, (self, t1, t2), named={"value": value}, out=out, flops=3)

    register(name)(functional)
    register(f"{name}_")(in_place)
    register(f"{name}.out")(out_form)


_ternary("addcmul", "{0} + value * {1} * {2}")
_ternary("addcdiv", "{0} + value * {1} / {2}")


# PyTorch's lerp: from the nearer end, so that weight 1 gives `end` exactly (and rounding matches the CPU)
_LERP = "{0} + w * ({1} - {0}) if abs(w) < 0.5 else {1} - ({1} - {0}) * (1 - w)"
_LERP_T = "{0} + {2} * ({1} - {0}) if abs({2}) < 0.5 else {1} - ({1} - {0}) * (1 - {2})"


@register("lerp.Scalar")
def lerp(self, end, weight):
    return pointwise("lerp", _LERP, (self, end), named={"w": weight}, flops=3)


@register("lerp_.Scalar")
def lerp_inplace(self, end, weight):
    return pointwise("lerp", _LERP, (self, end), named={"w": weight}, out=self, inplace=True, flops=3)


@register("lerp.Tensor")
def lerp_tensor(self, end, weight):
    return pointwise("lerp_t", _LERP_T, (self, end, weight), flops=3)


@register("lerp_.Tensor")
def lerp_tensor_inplace(self, end, weight):
    return pointwise("lerp_t", _LERP_T, (self, end, weight), out=self, inplace=True, flops=3)


@register("isnan")
def isnan(self):
    return pointwise("isnan", "{0} != {0}", (self,), bool_result=True)


@register("isinf")
def isinf(self):
    if not self.is_floating_point():
        return pointwise("isinf", "{0} != {0}", (self,), bool_result=True)
    return pointwise("isinf", "abs({0}) == math.inf", (self,), bool_result=True)


@register("isfinite")
def isfinite(self):
    if not self.is_floating_point():
        return pointwise("isfinite", "{0} == {0}", (self,), bool_result=True)
    return pointwise("isfinite", "abs({0}) < math.inf", (self,), bool_result=True)


@register("isneginf", "isneginf.out")
def isneginf(self, *, out=None):
    return pointwise("isneginf", "{0} == -math.inf", (self,), bool_result=True, out=out)


@register("isposinf", "isposinf.out")
def isposinf(self, *, out=None):
    return pointwise("isposinf", "{0} == math.inf", (self,), bool_result=True, out=out)


# ---------------------------------------------------------------------------
# Binary math: atan2, hypot, copysign, fmod, fmax/fmin, logaddexp, heaviside, nextafter, xlogy

_binary_family("atan2", "math.atan2({0}, {1})", overloads=("default",), to_float=True, flops=20)
_binary_family("hypot", "math.hypot({0}, {1})", overloads=("default",), flops=4)
_binary_family("copysign", "np.copysign({0}, {1})", to_float=True)
_binary_family("logaddexp", "logaddexp({0}, {1})", overloads=("default",), inplace=False, flops=20)
_binary_family("logaddexp2", "logaddexp2({0}, {1})", overloads=("default",), inplace=False, flops=20)
_binary_family("nextafter", "np.nextafter({0}, {1})", overloads=("default",), flops=2)
# fmax/fmin ignore NaN (maximum/minimum propagate it)
_binary_family("fmax", "{1} if {0} != {0} else ({0} if {1} != {1} else max({0}, {1}))",
               overloads=("default",), inplace=False)
_binary_family("fmin", "{1} if {0} != {0} else ({0} if {1} != {1} else min({0}, {1}))",
               overloads=("default",), inplace=False)


def _fmod(self, other, out=None, inplace=False):
    dtype = _promote((self, other))
    if dtype.is_floating_point:
        template = "np.fmod({0}, {1})"
    else:
        template = "int_fmod({0}, {1})"
        if dtype != torch.bool:
            check_int_divisor(dtype, other)
    return pointwise("fmod", template, (self, other), out=out, inplace=inplace)


@register("fmod.Tensor", "fmod.Scalar")
def fmod(self, other):
    """C's fmod: the remainder of truncating division (the dividend's sign)."""
    return _fmod(self, other)


@register("fmod_.Tensor", "fmod_.Scalar")
def fmod_(self, other):
    return _fmod(self, other, out=self, inplace=True)


@register("fmod.Tensor_out", "fmod.Scalar_out")
def fmod_out(self, other, *, out):
    return _fmod(self, other, out=out)


_XLOGY = "xlogy({0}, {1})"


@register("xlogy.Tensor", "xlogy.Scalar_Self", "xlogy.Scalar_Other")
def xlogy(self, other):
    """x * log(y), 0 where x == 0 (NaN where y is NaN)."""
    return pointwise("xlogy", _XLOGY, (self, other), to_float=True, flops=10)


@register("xlogy_.Tensor", "xlogy_.Scalar_Other")
def xlogy_(self, other):
    return pointwise("xlogy", _XLOGY, (self, other), out=self, inplace=True, to_float=True, flops=10)


@register("xlogy.OutTensor", "xlogy.OutScalar_Self", "xlogy.OutScalar_Other")
def xlogy_out(self, other, *, out):
    return pointwise("xlogy", _XLOGY, (self, other), out=out, to_float=True, flops=10)


_HEAVISIDE = "{1} if {0} == 0 else ({0} > 0)"


def _heaviside(self, values, out=None, inplace=False):
    if self.dtype != values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
    return pointwise("heaviside", _HEAVISIDE, (self, values), out=out, inplace=inplace)


@register("heaviside")
def heaviside(self, values):
    """The step function: 0 below 0, 1 above, ``values`` at 0 (NaN counts as below)."""
    return _heaviside(self, values)


@register("heaviside_")
def heaviside_(self, values):
    return _heaviside(self, values, out=self, inplace=True)


@register("heaviside.out")
def heaviside_out(self, values, *, out):
    return _heaviside(self, values, out=out)


# ---------------------------------------------------------------------------
# Unary operators with arguments or special results: round(decimals), signbit, nan_to_num, angle, sinc, logit


def _round_decimals(self, decimals, out=None, inplace=False):
    if decimals > 0:
        template = "np.rint({0} * ten_pow) / ten_pow"
    else:
        template = "np.rint({0} / ten_pow) * ten_pow"
    return pointwise("round_decimals", template, (self,), named={"ten_pow": 10.0 ** abs(decimals)}, out=out,
                     inplace=inplace, flops=3)


@register("round.decimals")
def round_decimals(self, *, decimals):
    """Round half to even at ``decimals`` decimal places (negative: to tens, hundreds...)."""
    return _round_decimals(self, decimals)


@register("round_.decimals")
def round_decimals_(self, *, decimals):
    return _round_decimals(self, decimals, out=self, inplace=True)


@register("round.decimals_out")
def round_decimals_out(self, *, decimals, out):
    return _round_decimals(self, decimals, out=out)


def _signbit_template(t: torch.Tensor) -> str:
    return "np.signbit({0})" if t.is_floating_point() else "{0} < 0"


@register("signbit")
def signbit(self):
    """Whether the sign bit is set (True for -0.0 and negative NaN)."""
    return pointwise("signbit", _signbit_template(self), (self,), bool_result=True)


@register("signbit.out")
def signbit_out(self, *, out):
    return pointwise("signbit", _signbit_template(self), (self,), bool_result=True, out=out)


_NAN_TO_NUM = "nan_ if {0} != {0} else (posinf_ if {0} == math.inf else (neginf_ if {0} == -math.inf else {0}))"


def _nan_to_num(self, nan, posinf, neginf, out=None, inplace=False):
    if not self.is_floating_point():
        return pointwise("nan_to_num", "{0}", (self,), out=out, inplace=inplace)
    info = torch.finfo(self.dtype)
    named = {"nan_": 0.0 if nan is None else nan, "posinf_": info.max if posinf is None else posinf,
             "neginf_": info.min if neginf is None else neginf}
    return pointwise("nan_to_num", _NAN_TO_NUM, (self,), named=named, out=out, inplace=inplace, flops=3)


@register("nan_to_num")
def nan_to_num(self, nan=None, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced by ``nan`` (0), ``posinf`` and ``neginf`` (the dtype's extremes)."""
    return _nan_to_num(self, nan, posinf, neginf)


@register("nan_to_num_")
def nan_to_num_(self, nan=None, posinf=None, neginf=None):
    return _nan_to_num(self, nan, posinf, neginf, out=self, inplace=True)


@register("nan_to_num.out")
def nan_to_num_out(self, nan=None, posinf=None, neginf=None, *, out):
    return _nan_to_num(self, nan, posinf, neginf, out=out)


_ANGLE = "pi_ if {0} < 0 else ({0} if {0} != {0} else zero_)"


def _angle(self, out=None):
    if self.is_complex():
        check_same_device("aten::angle", self)
        real = torch.empty(0, dtype=self.dtype).real.dtype
        if out is None:
            out = empty(self.shape, real)
        else:
            if out.dtype != real:
                raise RuntimeError(f"Expected out tensor to have dtype {real}, but got {out.dtype} instead")
            resize_out(out, self.shape)
        kernel = elementwise.kernel("angle_complex", 1, "math.atan2(x0.imag, x0.real)")
        run_elementwise(kernel, [out], [self], flops_per_element=20)
        return out
    return pointwise("angle", _ANGLE, (self,), named={"pi_": math.pi, "zero_": 0}, to_float=True, out=out)


@register("angle")
def angle(self):
    """The argument of a complex number: atan2(imag, real); for real numbers pi below 0, else 0 (NaN stays)."""
    return _angle(self)


@register("angle.out")
def angle_out(self, *, out):
    return _angle(self, out=out)


# sin(pi x) / (pi x) with pi x rounded in the argument's precision, as the CPU computes it
_SINC = "one_ if {0} == 0 else math.sin(pi_ * {0}) / (pi_ * {0})"


def _sinc(self, out=None, inplace=False):
    return pointwise("sinc", _SINC, (self,), named={"pi_": math.pi, "one_": 1}, to_float=True, out=out,
                     inplace=inplace, flops=12)


@register("sinc")
def sinc(self):
    """The normalized sinc function sin(pi x) / (pi x), 1 at 0."""
    return _sinc(self)


@register("sinc_")
def sinc_(self):
    return _sinc(self, out=self, inplace=True)


@register("sinc.out")
def sinc_out(self, *, out):
    return _sinc(self, out=out)


def _logit(self, eps, out=None, inplace=False):
    if eps is None or eps < 0:
        return pointwise("logit", "math.log({0} / (1 - {0}))", (self,), to_float=True, out=out, inplace=inplace,
                         flops=10)
    # the clamp bounds in the computing precision, as the CPU computes them
    dtype = _promote((self,))
    np_type = NUMPY_DTYPES[dtype if dtype.is_floating_point else _float_default()]
    lo, hi = np_type(eps), np_type(1) - np_type(eps)
    template = "math.log(clamp({0}, lo_, hi_) / (1 - clamp({0}, lo_, hi_)))"
    return pointwise("logit_eps", template, (self,), named={"lo_": lo, "hi_": hi}, to_float=True, out=out,
                     inplace=inplace, flops=12)


@register("logit")
def logit(self, eps=None):
    """log(x / (1 - x)), x first clamped to [eps, 1 - eps] when ``eps`` is given."""
    return _logit(self, eps)


@register("logit_")
def logit_(self, eps=None):
    return _logit(self, eps, out=self, inplace=True)


@register("logit.out")
def logit_out(self, eps=None, *, out):
    return _logit(self, eps, out=out)


def _logit_backward(grad_output, self, eps, out=None):
    if eps is None or eps < 0:
        template = "math.nan if {1} < 0 or {1} > 1 else {0} / ({1} * (1 - {1}))"
        return pointwise("logit_backward", template, (grad_output, self), out=out, flops=4)
    dtype = _promote((grad_output, self))
    np_type = NUMPY_DTYPES[dtype]
    lo, hi = np_type(eps), np_type(1) - np_type(eps)
    template = "zero_ if {1} < lo_ or {1} > hi_ else {0} / ({1} * (1 - {1}))"
    return pointwise("logit_backward_eps", template, (grad_output, self), named={"lo_": lo, "hi_": hi, "zero_": 0},
                     out=out, flops=5)


@register("logit_backward")
def logit_backward(grad_output, self, eps=None):
    """grad / (x (1 - x)); 0 outside [eps, 1 - eps] when ``eps`` is given, NaN outside [0, 1] when not."""
    return _logit_backward(grad_output, self, eps)


@register("logit_backward.grad_input")
def logit_backward_out(grad_output, self, eps=None, *, grad_input):
    return _logit_backward(grad_output, self, eps, out=grad_input)


# ---------------------------------------------------------------------------
# frexp (two outputs), complex and polar (complex outputs)

#: C++ names of dtypes, as ATen's frexp messages print them
_TYPE_META = {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half",
              torch.bfloat16: "c10::BFloat16", torch.int32: "int", torch.int64: "long int"}


@register("frexp.Tensor_out")
def frexp_out(self, *, mantissa, exponent):
    """``self = mantissa * 2**exponent`` with ``0.5 <= |mantissa| < 1`` (inf, NaN and 0 keep exponent 0)."""
    if not self.is_floating_point():
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    if mantissa.dtype != self.dtype:
        raise RuntimeError(f"torch.frexp() expects mantissa to have dtype {_TYPE_META.get(self.dtype, self.dtype)} "
                           f"but got {_TYPE_META.get(mantissa.dtype, mantissa.dtype)}")
    if exponent.dtype != torch.int32:
        raise RuntimeError(f"torch.frexp() expects exponent to have int dtype but got "
                           f"{_TYPE_META.get(exponent.dtype, exponent.dtype)}")
    check_same_device("aten::frexp", self, mantissa, exponent)
    for out in (mantissa, exponent):
        check_written("frexp", out, (self,))
        resize_out(out, self.shape)
    kernel = elementwise.kernel("frexp", 1, ("math.frexp(x0)[0]", "math.frexp(x0)[1]"))
    run_elementwise(kernel, [mantissa, exponent], [self], flops_per_element=2)
    return mantissa, exponent


def _complex_operands(op: str, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """ATen's checks for complex/polar (two floating tensors of one dtype), then the output."""
    floating = (torch.float16, torch.float32, torch.float64)
    if a.dtype not in floating or b.dtype not in floating:
        raise RuntimeError(f"Expected both inputs to be Half, Float or Double tensors but got {_short(a.dtype)} "
                           f"and {_short(b.dtype)}")
    if a.dtype != b.dtype:
        raise RuntimeError(f"Expected object of scalar type {_short(a.dtype)} but got scalar type "
                           f"{_short(b.dtype)} for second argument")
    check_same_device(f"aten::{op}", a, b)
    dtype = torch.complex128 if a.dtype == torch.float64 else torch.complex64
    shape = broadcast_shape(a.shape, b.shape)
    if out is None:
        return empty(shape, dtype)
    check_same_device(f"aten::{op}", out)
    if out.dtype != dtype:
        raise RuntimeError(f"Expected object of scalar type {_short(dtype)} but got scalar type {_short(out.dtype)} "
                           "for argument 'out'")
    check_written(op, out, (a, b))
    return resize_out(out, shape)


def _on_device(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A zero-dim CPU tensor (a scalar operand) copied to ``like``'s npu device; npu tensors as they are."""
    return t.to(like.device) if t.device.type == "cpu" and like.device.type == "npu" else t


def _complex_kernel(op: str, expr: str, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None,
                    flops: float) -> torch.Tensor:
    out = _complex_operands(op, a, b, out)
    a, b = _on_device(a, b), _on_device(b, a)
    run_elementwise(elementwise.kernel(op, 2, expr), [out], [a, b], flops_per_element=flops)
    return out


@register("complex")
def complex_(real, imag):
    """The complex tensor ``real + i imag``."""
    return _complex_kernel("complex", "complex(x0, x1)", real, imag, None, 1)


@register("complex.out")
def complex_out(real, imag, *, out):
    return _complex_kernel("complex", "complex(x0, x1)", real, imag, out, 1)


_POLAR = "complex(x0 * math.cos(x1), x0 * math.sin(x1))"


@register("polar")
def polar(abs, angle):  # noqa: A002 - ATen's argument names (callers may pass them by keyword)
    """The complex tensor with modulus ``abs`` and argument ``angle``."""
    return _complex_kernel("polar", _POLAR, abs, angle, None, 20)


@register("polar.out")
def polar_out(abs, angle, *, out):  # noqa: A002
    return _complex_kernel("polar", _POLAR, abs, angle, out, 20)


@register("conj_physical.out")
def conj_physical_out(self, *, out):
    """out = the complex conjugate of ``self``, materialised (a copy for real tensors)."""
    check_same_device("aten::conj_physical", self, out)
    resize_out(out, self.shape)
    src = as_array(self)
    as_array(out)[...] = np.conj(src) if src.dtype.kind == "c" else src
    launch("conj_physical", self.numel(), self.numel() * self.element_size(), out.numel() * out.element_size(),
           out.get_device())
    return out
