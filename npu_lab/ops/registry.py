"""The registry of operators the NPU claims, and how kernels reach the dispatcher.

Every ATen operator the NPU implements in Python is registered through
:func:`register`, which does two things:

1. ``torch.library`` registration of the Python kernel on the ``PrivateUse1``
   dispatch key, so PyTorch's dispatcher calls it for ``npu`` tensors; the
   kernel runs with its inputs' device as the current device (what CUDA's
   generated kernels do with a device guard), so the tensors it allocates land
   there, and inputs on two different npu devices raise PyTorch's own error;
2. an entry in :data:`CLAIMED`, the single list that the coverage report and
   the OpInfo conformance tests read, so the claimed set cannot silently shrink.

The operators the native runtime registers from C++ (memory, views, copies:
``csrc/aten/NpuMinimal.cpp``) are listed in :data:`NATIVE`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..device import native
from .precision import in_float32

_C = native.load()

#: qualified overload name ("aten::add.Tensor") -> Python kernel.
CLAIMED: dict[str, Callable] = {}
#: overloads the native runtime registers from C++.
NATIVE: tuple[str, ...] = tuple(_C.native_ops())

_libs: dict[str, torch.library.Library] = {}


def _library(namespace: str) -> torch.library.Library:
    lib = _libs.get(namespace)
    if lib is None:
        lib = _libs[namespace] = torch.library.Library(namespace, "IMPL")
    return lib


def register(*names: str) -> Callable[[Callable], Callable]:
    """Register the decorated function as the ``npu`` kernel of each overload.

    Names are ``"aten::op.overload"`` or ``"op.overload"`` (``aten`` implied).
    """

    def deco(fn: Callable) -> Callable:
        for name in names:
            qualified = name if "::" in name else f"aten::{name}"
            qualified = qualified.removesuffix(".default")
            ns, op = qualified.split("::")
            if qualified in CLAIMED:
                raise RuntimeError(f"{qualified} registered twice for npu")
            _library(ns).impl(op, _profiled(qualified, in_float32(qualified, fn)), "PrivateUse1")
            CLAIMED[qualified] = fn
        return fn

    return deco


_NUMBA_MISSING_DTYPES = {"float16": "Half", "bfloat16": "BFloat16"}


def _device_of(args: tuple) -> int:
    """The npu device of the inputs (-1 if none), raising if two inputs are on different npu devices."""
    dev = -1
    for a in args:
        if type(a) is torch.Tensor or isinstance(a, torch.Tensor):
            d = a.get_device()
        elif type(a) in (list, tuple) and a and isinstance(a[0], torch.Tensor):
            d = _device_of(tuple(a))
        else:
            continue
        if d < 0 or d == dev:
            continue
        if dev >= 0 and a.device.type == "npu":
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found at least two devices, npu:{dev} and "
                f"npu:{d}!"
            )
        if dev < 0:
            dev = d
    return dev


def _profiled(qualified: str, fn: Callable) -> Callable:
    """``fn`` on its inputs' device, behind the profiler's hook (one flag check when nothing records)."""
    from ..profiler import hooks

    current_device, exchange_device = _C.current_device, _C.exchange_device

    def call(args, kwargs):
        if hooks.recorder is None:
            return fn(*args, **kwargs)
        return hooks.call(qualified, fn, args, kwargs)

    def kernel(*args, **kwargs):
        try:
            dev = _device_of(args)
            if dev < 0 and kwargs:
                dev = _device_of(tuple(kwargs.values()))
            if dev < 0 or dev == current_device():
                return call(args, kwargs)
            previous = exchange_device(dev)
            try:
                return call(args, kwargs)
            finally:
                exchange_device(previous)
        except NotImplementedError as exc:
            # numba has no half-precision arithmetic: say so the way PyTorch does for CPU kernels.
            if str(exc) in _NUMBA_MISSING_DTYPES:
                raise RuntimeError(
                    f'"{qualified}" not implemented for \'{_NUMBA_MISSING_DTYPES[str(exc)]}\' on npu '
                    "(its numba kernel has no half-precision arithmetic; compute in float32 with .float())"
                ) from None
            raise

    kernel.__name__ = getattr(fn, "__name__", qualified)
    kernel.__doc__ = fn.__doc__
    kernel.__wrapped__ = fn  # type: ignore[attr-defined]
    return kernel


def claimed_ops() -> list[str]:
    """Sorted list of every ATen overload the NPU implements (numba kernels and the runtime's C++ ones)."""
    return sorted({*CLAIMED, *NATIVE})
