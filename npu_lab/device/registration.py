"""Turn PyTorch's PrivateUse1 dispatch key into the ``npu`` device (once per process)."""

from __future__ import annotations

import torch

from .. import _torch_private as private

_registered = False


class _Hooks(private.hooks_base()):  # type: ignore[misc]
    """The C++ hooks interface PyTorch queries for a backend, answered in Python."""

    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(private.device_guard_base()):  # type: ignore[misc]
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


def register() -> None:
    """Register the ``npu`` device, its kernels and its fallback. Idempotent."""
    global _registered
    if _registered:
        return
    name = private.backend_name()
    if name not in ("privateuseone", "npu"):
        raise RuntimeError(
            f"PrivateUse1 is already claimed by the '{name}' backend; npu-lab cannot register 'npu'"
        )
    from . import module

    if name == "privateuseone":
        private.setup_python_backend("npu", module, _Hooks(), _Guard())
    from .. import ops  # noqa: F401  (registers every kernel)
    from . import fallback

    fallback.install()
    private.install_serialization("npu")
    from . import serialization

    serialization.install()
    _registered = True
