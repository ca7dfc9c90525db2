"""The registry of operators the NPU claims, and how kernels reach the dispatcher.

Every ATen operator the NPU implements is registered through :func:`register`,
which does two things:

1. ``torch.library`` registration of the Python kernel on the ``PrivateUse1``
   dispatch key, so PyTorch's dispatcher calls it for ``npu`` tensors;
2. an entry in :data:`CLAIMED`, the single list that the coverage report and
   the OpInfo conformance tests read, so the claimed set cannot silently shrink.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

#: qualified overload name ("aten::add.Tensor") -> Python kernel.
CLAIMED: dict[str, Callable] = {}

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
            _library(ns).impl(op, _profiled(qualified, fn), "PrivateUse1")
            CLAIMED[qualified] = fn
        return fn

    return deco


_NUMBA_MISSING_DTYPES = {"float16": "Half", "bfloat16": "BFloat16"}


def _profiled(qualified: str, fn: Callable) -> Callable:
    """``fn`` behind the profiler's hook (one flag check when nothing records)."""
    from ..profiler import hooks

    def kernel(*args, **kwargs):
        try:
            if hooks.recorder is None:
                return fn(*args, **kwargs)
            return hooks.call(qualified, fn, args, kwargs)
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
    """Sorted list of every ATen overload the NPU implements natively."""
    return sorted(CLAIMED)
