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
from numba.core.errors import TypingError

from ..device import bare, fallback, native
from .precision import LOW, in_float32

_C = native.load()

#: qualified overload name ("aten::add.Tensor") -> Python kernel, for every kernel registered with the dispatcher.
CLAIMED: dict[str, Callable] = {}
#: On a bare device (``NPU_LAB_BARE=1``, :mod:`npu_lab.device.bare`): the kernels the lab ships but did not
#: register (CLAIMED stays empty there). :func:`register_shipped` registers some of them on purpose.
SHIPPED: dict[str, Callable] = {}
#: overloads the native runtime registers from C++.
NATIVE: tuple[str, ...] = tuple(_C.native_ops())

#: qualified overload name -> the torch.library handle that holds its npu kernel (one per operator,
#: so a single kernel can be taken out again: :func:`without_kernels`).
_libs: dict[str, torch.library.Library] = {}
#: kernels taken out by without_kernels, to put back: qualified name -> the registered callable.
_removed: dict[str, Callable] = {}


#: qualified overload name -> the kernel's fast path (see :func:`register`), for the overloads that have one.
FAST: dict[str, Callable] = {}


def _impl(qualified: str, kernel: Callable) -> None:
    ns, op = qualified.split("::")
    lib = _libs[qualified] = torch.library.Library(ns, "IMPL")
    lib.impl(op, kernel, "PrivateUse1")


def _dispatched(qualified: str, fn: Callable) -> Callable:
    """What the dispatcher calls for ``fn``: its fast path (if any), half precision, device guard, profiler."""
    return _profiled(qualified, in_float32(qualified, fn), FAST.get(qualified))


def register(*names: str, fast: Callable | None = None) -> Callable[[Callable], Callable]:
    """Register the decorated function as the ``npu`` kernel of each overload.

    Names are ``"aten::op.overload"`` or ``"op.overload"`` (``aten`` implied).

    ``fast``, if given, is tried first with the same arguments, while no profile records: a function
    that handles the common case (contiguous tensors of one dtype on the current device, say) with
    less Python than the kernel's general path, and returns None for everything else. It must give
    what the kernel gives (same values, same launches on the simulated clock) wherever it returns a
    result, and leave every check and error to the kernel.
    """

    def deco(fn: Callable) -> Callable:
        for name in names:
            qualified = name if "::" in name else f"aten::{name}"
            qualified = qualified.removesuffix(".default")
            if qualified in CLAIMED or qualified in SHIPPED:
                raise RuntimeError(f"{qualified} registered twice for npu")
            if fast is not None:
                FAST[qualified] = fast
            if bare.BARE:
                SHIPPED[qualified] = fn
                continue
            _impl(qualified, _dispatched(qualified, fn))
            CLAIMED[qualified] = fn
        return fn

    return deco


_NUMBA_MISSING_DTYPES = {"float16": "Half", "bfloat16": "BFloat16"}


def _device_of(args: tuple) -> int:
    """The npu device of the inputs (-1 if none), raising if two inputs are on different npu devices."""
    return _scan(args)[0]


def _scan(args: tuple) -> tuple[int, bool]:
    """(the npu device of the inputs or -1, is one of them float16/bfloat16?), in one pass over them (lists of
    tensors included); raises if two inputs are on different npu devices."""
    dev = -1
    low = False
    for a in args:
        if type(a) is torch.Tensor or isinstance(a, torch.Tensor):
            d = a.get_device()
            if a.dtype in LOW:
                low = True
        elif type(a) in (list, tuple) and a:
            if not isinstance(a[0], torch.Tensor):  # (a list led by None: no device from it, as before)
                low = low or any(isinstance(t, torch.Tensor) and t.dtype in LOW for t in a)
                continue
            d, low_list = _scan(tuple(a))
            low = low or low_list
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
    return dev, low


def _profiled(qualified: str, fn: Callable, fast: Callable | None = None) -> Callable:
    """``fn`` on its inputs' device, behind the profiler's hook (one flag check when nothing records).

    ``fast`` (:func:`register`) runs first when nothing records; None from it sends the call on to ``fn``.
    ``fn`` made by :func:`~npu_lab.ops.precision.in_float32` is called as the function it wraps when no
    argument is float16 or bfloat16 (one scan of the arguments finds the device and that).
    """
    from ..profiler import hooks

    current_device, exchange_device = _C.current_device, _C.exchange_device
    plain = getattr(fn, "__wrapped__", fn) if getattr(fn, "computes_in_float32", False) else fn

    def kernel(*args, **kwargs):
        try:
            if fast is not None and hooks.recorder is None:
                result = fast(*args, **kwargs)
                if result is not None:
                    return result
            dev, low = _scan(args)
            if kwargs:
                kdev, klow = _scan(tuple(kwargs.values()))
                low = low or klow
                if dev < 0:
                    dev = kdev
            target = fn if low else plain
            if dev < 0 or dev == current_device():
                if hooks.recorder is None:
                    return target(*args, **kwargs)
                return hooks.call(qualified, target, args, kwargs)
            previous = exchange_device(dev)
            try:
                if hooks.recorder is None:
                    return target(*args, **kwargs)
                return hooks.call(qualified, target, args, kwargs)
            finally:
                exchange_device(previous)
        except fallback.NotHandled as exc:
            return fallback.unsupported(_overload(qualified), args, kwargs, str(exc))
        except TypingError:
            # numba could not compile the kernel for these dtypes (complex arguments to a real
            # formula, say): nothing has been written yet, so the CPU can run the call instead
            dtypes = sorted({str(a.dtype).removeprefix("torch.") for a in args if isinstance(a, torch.Tensor)})
            return fallback.unsupported(_overload(qualified), args, kwargs,
                                        f"its numba kernel does not compile for {', '.join(dtypes)}")
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


def _overload(qualified: str) -> torch._ops.OpOverload:
    """``"aten::add.Tensor"`` -> ``torch.ops.aten.add.Tensor``."""
    ns, name = qualified.split("::")
    op, _, overload = name.partition(".")
    return getattr(getattr(getattr(torch.ops, ns), op), overload or "default")


class without_kernels:  # noqa: N801 - used like a function, as torch.no_grad is
    """Take the NPU's own kernels for some operators out of the dispatcher, until :meth:`restore`.

    The NPU ships kernels for most operators; to practise what a chip team does on day one,
    remove one and register your own (chapters 7 and 8a)::

        removed = npu_lab.without_kernels("aten::hardswish", "aten::hardswish_backward")
        F.hardswish(x_npu)        # now: "Could not run 'aten::hardswish' ... 'npu' backend"
        ...                        # torch.library.Library("aten", "IMPL").impl("hardswish", mine, "PrivateUse1")
        removed.restore()          # (destroy your library first) the shipped kernels come back

    A name with no overload (``"aten::silu"``) removes every overload the NPU has (``silu``,
    ``silu.out``); ``"aten::silu.out"`` only that one. Also a context manager
    (``with npu_lab.without_kernels(...):``). While removed, the
    operators are not in :func:`claimed_ops`, so coverage reports list them as missing.
    ``missing_ok=True`` skips names that are already out (a grader that must work whether or
    not the notebook took the kernel out first restores only what it removed itself).
    """

    def __init__(self, *names: str, missing_ok: bool = False) -> None:
        self.names: list[str] = []
        for name in names:
            qualified = (name if "::" in name else f"aten::{name}").removesuffix(".default")
            # "aten::silu" means every overload (silu, silu.out); "aten::silu.out" only that one.
            matches = [q for q in CLAIMED if q == qualified or "." not in qualified.split("::")[1]
                       and q.startswith(qualified + ".")]
            if not matches:
                if missing_ok:
                    continue
                raise KeyError(f"{qualified} has no npu kernel from npu_lab to remove (claimed_ops() lists them)")
            for q in matches:
                _libs.pop(q)._destroy()
                _removed[q] = CLAIMED.pop(q)
                self.names.append(q)

    def restore(self) -> None:
        """Put the removed kernels back (once; raises if another kernel now holds the operator's npu entry)."""
        for qualified in self.names:
            fn = _removed.pop(qualified, None)
            if fn is not None:
                _impl(qualified, _dispatched(qualified, fn))
                CLAIMED[qualified] = fn
        self.names = []

    def __enter__(self) -> without_kernels:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def __repr__(self) -> str:
        return f"without_kernels({', '.join(self.names) or 'restored'})"


def claimed_ops() -> list[str]:
    """Sorted list of every ATen overload the NPU implements (numba kernels and the runtime's C++ ones).

    On a bare device (``NPU_LAB_BARE=1``) only the runtime's own: the lab's kernels are not registered.
    """
    return sorted({*CLAIMED, *NATIVE})


def is_shipped_registration(qualified: str) -> bool:
    """Is ``qualified``'s npu kernel registered now one of the lab's own (not the runtime's, not the learner's)?"""
    qualified = qualified.removesuffix(".default")
    if qualified in _libs:
        return True
    if bare.BARE:
        return False
    # the lab's fused operators (npu::...), FSDP2's copy kernels and the quantize kernel register outside _libs
    return qualified.startswith(("npu::", "fsdp::")) or qualified == "aten::quantize_per_tensor"


class register_shipped:  # noqa: N801 - used like a function
    """On a bare device, register some of the lab's own kernels for a while (to compare with the learner's).

    ``with register_shipped("aten::mm", "aten::addmm"):`` the learner's kernels for those operators (if any)
    step aside and the shipped ones run; afterwards the learner's are back. The grading uses this to measure
    a step with the shipped kernels beside the learner's.
    """

    def __init__(self, *names: str) -> None:
        bare.require_bare("register_shipped")
        self.names = [(n if "::" in n else f"aten::{n}").removesuffix(".default") for n in names]
        unknown = [n for n in self.names if n not in SHIPPED]
        if unknown:
            raise KeyError(f"the lab ships no npu kernel for {', '.join(unknown)}")
        self._aside: list[object] = []

    def __enter__(self) -> register_shipped:
        from ..bringup.library import step_aside  # (``npu_lab.bringup.library`` the name is a function)

        self._aside = step_aside(self.names)
        try:
            for q in self.names:
                _impl(q, _dispatched(q, SHIPPED[q]))
                CLAIMED[q] = SHIPPED[q]
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        from ..bringup.library import step_back

        for q in self.names:
            lib = _libs.pop(q, None)
            if lib is not None:
                lib._destroy()
            CLAIMED.pop(q, None)
        step_back(self._aside)
        self._aside = []


def custom_op(name: str, mutates_args: tuple = ()) -> Callable[[Callable], object]:
    """``torch.library.custom_op(name, device_types="npu")`` for the lab's fused operators (``npu::...``).

    On a bare device the operator is defined (its schema, and the fake implementation registered on the
    result) with no kernel at all, so its name exists for graphs but nothing runs it on the npu.
    """
    return torch.library.custom_op(name, mutates_args=mutates_args, device_types=() if bare.BARE else "npu")
