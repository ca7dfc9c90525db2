"""What happens when the NPU has no kernel for an operator.

By default: PyTorch's own "Could not run ... with arguments from the 'npu'
backend" error, plus a one-line hint. Opt in to a CPU fallback (like MPS's
``PYTORCH_ENABLE_MPS_FALLBACK``) with ``PYTORCH_ENABLE_NPU_FALLBACK=1`` or
``npu_lab.set_cpu_fallback(True)``: the operator then runs on the CPU, its
results are copied back, a warning is given once per operator, and every
fallback is recorded so the profiler and the coverage report can list them.

The mechanism is a *backend fallback* on the PrivateUse1 dispatch key (and its
sparse twins): one boxed kernel the dispatcher calls for any operator with no npu kernel.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from collections.abc import Callable

import torch
from torch.utils._pytree import tree_flatten, tree_map

from .bare import BARE

#: On a bare device (NPU_LAB_BARE=1) every operator that runs is one somebody registered: no CPU fallback.
_enabled = not BARE and os.environ.get("PYTORCH_ENABLE_NPU_FALLBACK", "0") not in ("", "0", "false", "False")
#: operator name -> number of times it fell back to the CPU.
counts: Counter[str] = Counter()
_warned: set[str] = set()
listeners: list[Callable[[str], None]] = []
_lib: torch.library.Library | None = None


def set_cpu_fallback(enabled: bool) -> None:
    """Turn the CPU fallback for operators the NPU lacks on or off (a bare device has none: it raises)."""
    global _enabled
    if enabled and BARE:
        raise RuntimeError("the bare npu device has no CPU fallback: every operator that runs on it is a kernel "
                           "somebody registered (npu_lab.coverage(model) lists what a model still needs)")
    _enabled = bool(enabled)


class listing_fallback:  # noqa: N801 - used like a function
    """Let missing operators run on the CPU for a moment, to list them (``npu_lab.coverage`` on any device)."""

    def __enter__(self) -> None:
        global _enabled
        self._was, _enabled = _enabled, True

    def __exit__(self, *exc: object) -> None:
        global _enabled
        _enabled = self._was


def cpu_fallback_enabled() -> bool:
    return _enabled


def op_name(op: torch._ops.OpOverload) -> str:
    name = op._schema.name
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


def not_implemented_message(name: str) -> str:
    from . import bare

    if bare.BARE:
        hint = (f"this bare npu has no kernel for {name} yet: register yours with torch.library "
                "(npu_lab.bringup.library); npu_lab.coverage(model, inputs) lists every operator a model still needs")
    else:
        hint = (f"the simulated NPU has no kernel for {name}; register one with torch.library (chapter 7) or set "
                "PYTORCH_ENABLE_NPU_FALLBACK=1 (npu_lab.set_cpu_fallback(True)) to run it on the CPU.")
    return (
        f"Could not run '{name}' with arguments from the 'npu' backend. This could be because "
        "the operator doesn't exist for this backend, or was omitted during the selective/custom "
        "build process (if using custom build).\n"
        f"npu-lab hint: {hint}"
    )


def _to_cpu(x: object) -> object:
    if isinstance(x, torch.Tensor) and x.device.type == "npu":
        y = x.to("cpu")
        # A few CPU kernels look at requires_grad below autograd (sparse.mm's "amax" keeps its argmax
        # only then, and its backward reads it): the CPU copy must look as the npu tensor does.
        # Autograd is already handled above this key, so nothing is recorded on the copy.
        if x.requires_grad and (y.is_floating_point() or y.is_complex()):
            y.requires_grad_(True)
        return y
    if isinstance(x, torch.device) and x.type == "npu":
        return torch.device("cpu")
    return x


def _npu_device(values: object) -> torch.device:
    """The device of the first npu tensor (or ``device=`` argument) among the arguments, else the current one."""
    for x in tree_flatten(values)[0]:
        if isinstance(x, torch.Tensor) and x.device.type == "npu":
            return x.device
        if isinstance(x, torch.device) and x.type == "npu":
            return x if x.index is not None else torch.device("npu", torch.npu.current_device())
    return torch.device("npu", torch.npu.current_device())


def _cpu_equivalent(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
    """Run ``op`` on CPU arguments; the ``*_overrideable`` hooks a new backend implements (the CPU has none)
    run as the operator they stand for."""
    aten = torch.ops.aten
    if op is aten.convolution_overrideable.default:
        return aten.convolution.default(*args, **kwargs)
    if op is aten.convolution_backward_overrideable.default:
        grad, x, w, stride, padding, dilation, transposed, output_padding, groups, mask = args
        channels = w.shape[1] * groups if transposed else w.shape[0]
        return aten.convolution_backward.default(grad, x, w, [channels], stride, padding, dilation, transposed,
                                                  output_padding, groups, mask)
    return op(*args, **kwargs)


def run_on_cpu(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
    """Run ``op`` on CPU copies of its npu arguments; write back what it mutated; results back on the npu."""
    device = _npu_device((args, kwargs))
    cpu_args = tree_map(_to_cpu, args)
    cpu_kwargs = tree_map(_to_cpu, kwargs)
    result = _cpu_equivalent(op, cpu_args, cpu_kwargs)
    # Write back arguments the operator mutated (in-place and out= forms).
    schema = op._schema
    mutated = {}
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            src = cpu_kwargs.get(arg.name) if arg.kwarg_only or i >= len(args) else cpu_args[i]
            dst = kwargs.get(arg.name) if arg.kwarg_only or i >= len(args) else args[i]
            if isinstance(dst, torch.Tensor) and dst.device.type == "npu":
                if dst.shape != src.shape:
                    dst.resize_(src.shape)
                dst.copy_(src)
                mutated[id(src)] = dst

    def back(x: object) -> object:
        if isinstance(x, torch.Tensor) and id(x) in mutated:
            return mutated[id(x)]
        if isinstance(x, torch.Tensor) and x.device.type == "cpu":
            return x.to(device)
        return x

    return tree_map(back, result)


def _fallback_kernel(op: torch._ops.OpOverload, *args: object, **kwargs: object) -> object:
    name = op_name(op)
    if not _enabled:
        raise NotImplementedError(not_implemented_message(name))
    counts[name] += 1
    for fn in listeners:
        fn(name)
    if name not in _warned:
        _warned.add(name)
        warnings.warn(
            f"The operator '{name}' is not implemented for npu and will fall back to run on "
            "the CPU. This may have performance implications.",
            UserWarning,
            stacklevel=3,
        )
    return run_on_cpu(op, args, kwargs)


class NotHandled(Exception):  # noqa: N818 - a signal to the registry, not an error a user sees
    """Raised by an npu kernel, before it writes anything, for a case it does not implement.

    The registry's wrapper turns it into :func:`unsupported` for the kernel's own operator
    (the CPU fallback, or PyTorch's "Could not run" error with the fallback off), so a kernel
    deep in a helper can decline a case without knowing which overload called it.
    """


def unsupported(op: torch._ops.OpOverload, args: tuple, kwargs: dict, why: str) -> object:
    """What an npu kernel does with a case it does not implement (say, a 5-D convolution).

    With the CPU fallback on, ``op(*args, **kwargs)`` runs on the CPU like any operator
    without an npu kernel (counted in :func:`report`, warned about once); with it off,
    PyTorch's "Could not run ..." error, naming the case. So a kernel never raises where the
    fallback could have run the call. ``op`` is the operator the CPU runs: the kernel's own,
    or its CPU equivalent when it has no CPU kernel (``convolution_overrideable`` defers to
    ``convolution``).
    """
    if not _enabled:
        raise NotImplementedError(not_implemented_message(op_name(op)) + f"\n(npu-lab: the npu kernel does not "
                                                                          f"handle this case: {why})")
    return _fallback_kernel(op, *args, **kwargs)


def install() -> None:
    """Register the PrivateUse1 backend fallback (once per process)."""
    global _lib
    if _lib is None:
        _lib = torch.library.Library("_", "IMPL")
        # Dense npu tensors, and sparse ones (COO; CSR and the other compressed layouts): the runtime
        # registers PyTorch's device-generic sparse kernels (csrc/aten/NpuSparse.cpp), the rest falls back.
        for key in ("PrivateUse1", "SparsePrivateUse1", "SparseCsrPrivateUse1"):
            _lib.fallback(_fallback_kernel, key)


def report() -> dict[str, int]:
    """Operators that fell back to the CPU so far, with their counts."""
    return dict(counts)


def reset() -> None:
    counts.clear()
    _warned.clear()
