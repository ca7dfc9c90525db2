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
    run_backward_on_calling_thread()
    _registered = True


def run_backward_on_calling_thread() -> None:
    """Make ``loss.backward()`` run the npu's backward kernels on the thread that calls it.

    Autograd gives every accelerator its own worker thread, so that a CUDA
    backward can keep queueing kernels while the caller waits. The simulated
    npu runs its kernels synchronously on the host, and its numba kernels use
    an OpenMP thread team *per calling thread*: a second team for autograd's
    thread competed for the same cores with the first team's spinning workers,
    and made a training step's backward matmuls about twice as slow (2 cores,
    torch 2.13). ``torch.autograd.set_multithreading_enabled(False)`` routes
    the backward to the caller's thread instead. It is thread-local, so it
    applies to the thread that imported npu_lab (a notebook's kernel thread);
    call this function again from another thread that trains on the npu.
    """
    torch.autograd.set_multithreading_enabled(False)
