"""Half precision on the NPU: float16 and bfloat16 operators computed in float32.

numba has no 16-bit float arithmetic (and NumPy no bfloat16 at all), so the
NPU's kernels compute in float32. PyTorch's own CPU kernels do the same for
reduced precision ("opmath": load, compute in float32, round the result on
store), so a half-precision operator on npu gives what it gives on the CPU:

1. float16/bfloat16 tensor arguments are converted to float32 on the device
   (a counted device kernel, as a chip without half units would run);
2. the float32 kernel runs;
3. in-place and ``out=`` arguments get the rounded result written back, and
   floating results are rounded to the reduced type, unless PyTorch's type
   promotion says they are float32 (an input was float32, a ``dtype=`` was
   given, ``half_to_float=True``...).

Every kernel registered through :func:`npu_lab.ops.registry.register` gets
this behaviour; ``autocast("npu")`` relies on it for its float16/bfloat16 products.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

#: The reduced-precision floating types computed in float32.
LOW = (torch.float16, torch.bfloat16)
#: In-place operators whose CPU kernels write without checking that outputs do not overlap (fills,
#: random fills): every other operator that writes an argument gets TensorIterator's overlap checks on
#: the original tensors, before they are converted (a float32 copy never overlaps anything).
_UNCHECKED = {"fill", "zero", "masked_fill", "index_fill", "uniform", "normal", "bernoulli", "random",
              "exponential", "geometric", "log_normal", "cauchy", "copy", "resize", "set"}


def _schema(qualified: str) -> Any:
    ns, name = qualified.split("::")
    op, _, overload = name.partition(".")
    try:
        return getattr(getattr(getattr(torch.ops, ns), op), overload or "default")._schema
    except (AttributeError, RuntimeError):
        return None


def low_dtype(args: tuple, kwargs: dict) -> torch.dtype | None:
    """The first float16/bfloat16 among the tensor arguments (lists included), or None."""
    for a in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(a, torch.Tensor):
            if a.dtype in LOW:
                return a.dtype
        elif type(a) in (list, tuple):
            for t in a:
                if isinstance(t, torch.Tensor) and t.dtype in LOW:
                    return t.dtype
    return None


def _tensors(values: Any) -> list[torch.Tensor]:
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif type(v) in (list, tuple):
            out.extend(t for t in v if isinstance(t, torch.Tensor))
    return out


def _overload(qualified: str) -> Any:
    ns, name = qualified.split("::")
    op, _, overload = name.partition(".")
    try:
        return getattr(getattr(getattr(torch.ops, ns), op), overload or "default")
    except (AttributeError, RuntimeError):
        return None


#: Products whose CPU kernels refuse operands of different dtypes (float32 with bfloat16...). Once every 16-bit
#: argument became float32 the npu kernel could not tell, so these are checked before the conversion.
_SAME_DTYPE = {"mm", "addmm", "mv", "addmv", "dot", "vdot", "bmm", "baddbmm", "addbmm", "addr"}


def _probe(x: Any) -> Any:
    """A CPU tensor of ``x``'s dtype and number of dimensions, every size 1 (lists of tensors alike)."""
    if isinstance(x, torch.Tensor):
        return torch.zeros((1,) * x.dim(), dtype=x.dtype)
    if type(x) in (list, tuple):
        return type(x)(_probe(t) for t in x)
    return x


def check_mixed_dtypes(overload: Any, args: tuple, kwargs: dict) -> None:
    """Raise the CPU's own error if a product refuses these dtypes together (``mm`` of float32 and bfloat16).

    The CPU operator runs on tensors of the same dtypes and dimensions with every size 1: its dtype check fires
    with PyTorch's message, and nothing else about the call can fail (a size-1 product always fits).
    """
    overload(*_probe(args), **{k: _probe(v) for k, v in kwargs.items()})


def _up(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.float() if x.dtype in LOW else x
    if type(x) in (list, tuple) and any(isinstance(t, torch.Tensor) and t.dtype in LOW for t in x):
        return type(x)(_up(t) for t in x)
    return x


def _check_overlaps(written: list[tuple[int, str]], args: tuple, kwargs: dict) -> None:
    """TensorIterator's checks on each written tensor: not written twice, no partial overlap with an input."""
    from ..device import native

    _C = native.load()
    inputs = _tensors((*args, *kwargs.values()))
    for i, name in written:
        out = args[i] if i < len(args) else kwargs.get(name)
        if not isinstance(out, torch.Tensor):
            continue
        _C.assert_no_internal_overlap(out)
        for t in inputs:
            if t is not out and t.device == out.device:
                _C.assert_no_partial_overlap(out, t)


def _write_back(orig: torch.Tensor, new: torch.Tensor) -> None:
    """Round the float32 result ``new`` into the written argument ``orig``.

    An expanded ``orig`` (a zero stride: several elements share one memory location) cannot take a
    ``copy_``, which refuses to write one location twice; its distinct locations are one slice along
    each expanded dimension, and that slice is what is copied.
    """
    if orig.shape != new.shape:
        orig.resize_(new.shape)
    if torch._debug_has_internal_overlap(orig) == 1:
        index = tuple(slice(0, 1) if stride == 0 and size > 1 else slice(None)
                      for size, stride in zip(orig.shape, orig.stride()))
        orig, new = orig[index], new[index]
    orig.copy_(new)


def _driver() -> Any:
    from ..device import native

    return native.load()


class _unaccounted:  # noqa: N801 - a context manager used like a function
    """Pause the driver's accounting on this thread (when ``pause`` is true)."""

    def __init__(self, pause: bool) -> None:
        self.pause = pause

    def __enter__(self) -> None:
        if self.pause:
            _driver().accounting_pause(True)

    def __exit__(self, *exc: object) -> None:
        if self.pause:
            _driver().accounting_pause(False)


def _byte_scale(args: tuple, kwargs: dict) -> float:
    """The bytes of the tensor arguments over their bytes once float16/bfloat16 became float32."""
    real = up = 0
    for t in _tensors((*args, *kwargs.values())):
        n = t.numel() * t.element_size()
        real += n
        up += 2 * n if t.dtype in LOW else n
    return real / up if up else 1.0


#: Operators that update arguments their schema does not mark as written (``Tensor?`` without ``(a!)``):
#: ``native_batch_norm`` updates its running statistics in place (checked on torch 2.13).
_WRITES_UNANNOTATED = {"native_batch_norm": ("running_mean", "running_var")}
#: Results that are float32 whatever the inputs' precision (by position in the operator's returns): a fused
#: attention's log-sum-exp, which its backward reads (rounded to 16 bits, its gradients were off by up to 0.2).
_FLOAT32_RESULTS = {"_scaled_dot_product_fused_attention_overrideable": (1,)}


def in_float32(qualified: str, fn: Callable) -> Callable:
    """``fn`` made to take float16/bfloat16 arguments by computing in float32 (see the module docstring)."""
    schema = _schema(qualified)
    overload = _overload(qualified)
    same_dtype = overload is not None and qualified.split("::")[-1].split(".")[0].rstrip("_") in _SAME_DTYPE
    checks_overlap = qualified.split("::")[-1].split(".")[0].rstrip("_") not in _UNCHECKED
    written = []  # (position, name) of the arguments the operator writes
    explicit_dtype = False
    unannotated = _WRITES_UNANNOTATED.get(qualified.split("::")[-1], ())
    float32_results = _FLOAT32_RESULTS.get(qualified.split("::")[-1], ())
    if schema is not None:
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write or arg.name in unannotated:
                written.append((i, arg.name))
            if arg.name in ("dtype", "half_to_float"):
                explicit_dtype = True

    def kernel(*args: Any, **kwargs: Any) -> Any:
        low = low_dtype(args, kwargs)
        if low is None:
            return fn(*args, **kwargs)
        # type promotion by priority: tensors with dimensions decide; 0-d tensors only when there are no others
        tensors = [t for t in _tensors((*args, *kwargs.values())) if t.is_floating_point()]
        ranked = [t for t in tensors if t.dim() > 0] or tensors
        floating = {t.dtype for t in ranked}
        if same_dtype and len({t.dtype for t in tensors}) > 1:
            check_mixed_dtypes(overload, args, kwargs)
        if checks_overlap:
            _check_overlaps(written, args, kwargs)
        # On a chip with 16-bit units, the float32 stand-ins are the simulator's business, not the
        # chip's: the conversions are not accounted, and the kernels are costed on 16-bit operands.
        native = _driver().low_precision_begin(_byte_scale(args, kwargs))
        try:
            with _unaccounted(native):
                up_args = tuple(_up(a) for a in args)
                up_kwargs = {k: _up(v) for k, v in kwargs.items()}
            result = fn(*up_args, **up_kwargs)
            with _unaccounted(native):
                return _finish(result, args, kwargs, up_args, up_kwargs, low, floating)
        finally:
            _driver().low_precision_end()

    def _finish(result, args, kwargs, up_args, up_kwargs, low, floating):
        mutated: dict[int, torch.Tensor] = {}
        for i, name in written:
            orig, new = (args[i], up_args[i]) if i < len(args) else (kwargs.get(name), up_kwargs.get(name))
            if isinstance(orig, torch.Tensor) and new is not orig:
                _write_back(orig, new)
                mutated[id(new)] = orig
            elif type(orig) in (list, tuple) and new is not orig:  # a written list (foreach operators)
                for o, n in zip(orig, new):
                    if isinstance(o, torch.Tensor) and n is not o:
                        _write_back(o, n)
        dtype_given = explicit_dtype and (
            kwargs.get("dtype") is not None or kwargs.get("half_to_float") is True
            or any(isinstance(a, torch.dtype) for a in args)
            or (schema is not None and any(
                a.name == "half_to_float" and i < len(args) and args[i] is True
                for i, a in enumerate(schema.arguments))))
        downcast = floating == {low} and not dtype_given

        def back(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                if id(x) in mutated:
                    return mutated[id(x)]
                if downcast and x.dtype == torch.float32:
                    return x.to(low)
                return x
            if type(x) in (list, tuple):
                return type(x)(back(t) for t in x)
            return x

        if float32_results and type(result) is tuple:
            return tuple(r if i in float32_results else back(r) for i, r in enumerate(result))
        return back(result)

    wrapped = functools.wraps(fn)(kernel)  # profilers and the dispatch inspector name the kernel, not this wrapper
    #: the registry calls ``__wrapped__`` (``fn``) itself when no argument is float16/bfloat16
    wrapped.computes_in_float32 = True  # type: ignore[attr-defined]
    return wrapped
