"""The bare device: the npu's runtime without its compute kernels (the bring-up track).

With ``NPU_LAB_BARE=1`` in the environment when ``npu_lab`` is first imported, the ``npu`` device
keeps what its native runtime provides (memory and the caching allocator, the device guard, hooks,
streams and events, the generator, copies across devices and dtypes, views, ``.item()``,
serialization) and registers **no compute kernel**: ``torch.ones(2, device="npu")`` raises PyTorch's
own "Could not run 'aten::fill_.Scalar' with arguments from the 'npu' backend" error. The CPU
fallback is off and cannot be switched on, so every operator that runs is one somebody registered.

In a notebook, set the variable in the first cell, before the import::

    import os
    os.environ["NPU_LAB_BARE"] = "1"
    import npu_lab

(A kernel that imported ``npu_lab`` already has its kernels: restart it first.) The lab's shipped
kernels are still importable as Python code (``npu_lab.ops``), so its tools keep working, but none of
them is registered with the dispatcher; :func:`owner` tells the learner's registrations from the
runtime's own.
"""

from __future__ import annotations

import os

#: Read once, when npu_lab is first imported: the device cannot change its nature in a running process.
BARE: bool = os.environ.get("NPU_LAB_BARE", "0") not in ("", "0", "false", "False")


def is_bare() -> bool:
    """Is this process's ``npu`` device the bare one (``NPU_LAB_BARE=1`` at import)?"""
    return BARE


#: Operator namespaces whose PrivateUse1 kernels PyTorch or the runtime provide on a bare device too:
#: torch.distributed's own collectives (``c10d``), npuccl's functional collective (the device's collective
#: library, like NCCL for CUDA) and FSDP2's copy operators, which torch registers for every device type.
RUNTIME_NAMESPACES = ("c10d::", "_c10d_functional::", "fsdp::")


def registered() -> set[str]:
    """Every operator with a kernel for the ``npu`` dispatch key now (``"aten::mm"``, ``"npu::f"``...)."""
    import torch

    return set(torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1"))


def owner(op: str) -> str:
    """Who provides ``op``'s npu kernel: ``"runtime"``, ``"shipped"`` (the lab's), ``"yours"`` or ``"none"``.

    ``op`` is a qualified overload name such as ``"aten::add.Tensor"`` (``.default`` may be left off).
    """
    from ..ops import registry

    op = op.removesuffix(".default")
    if op in registry.NATIVE or op.startswith(RUNTIME_NAMESPACES):
        return "runtime"
    if op not in registered():
        return "none"
    return "shipped" if registry.is_shipped_registration(op) else "yours"


def yours() -> list[str]:
    """The operators whose npu kernel the learner registered (not the runtime's, not the lab's), sorted."""
    return sorted(op for op in registered() if owner(op) == "yours")


def require_bare(what: str) -> None:
    """Raise a clear error when ``what`` needs the bare device and this one has its kernels."""
    if not BARE:
        raise RuntimeError(
            f"{what} needs the bare npu device: set NPU_LAB_BARE=1 before the first `import npu_lab` "
            "(in a notebook: `import os; os.environ['NPU_LAB_BARE'] = '1'` in the first cell, then restart the "
            "kernel and run it again)")
