"""Make PyTorch's PrivateUse1 dispatch key the ``npu`` device (once per process).

The device itself is the native runtime (``npu_lab/csrc``): loading it registers
the allocator, device guard, hooks, generators, the C++ kernels, autocast and the
profiler plugin with PyTorch. What is left is the Python side, exactly as a
chip vendor's package does it: rename the backend, give ``torch.npu`` its module,
generate the ``.npu()`` / ``.is_npu`` methods, and register the numba kernels.
"""

from __future__ import annotations

import torch

from .. import _torch_private as private

_registered = False


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
    from . import bare, native

    runtime = native.load()
    if not bare.BARE:
        runtime.register_compute_kernels()  # the C++ sparse and quantized kernels; a bare device has none
    if name == "privateuseone":
        torch.utils.rename_privateuse1_backend("npu")
    from . import module

    if not hasattr(torch, "npu"):
        torch._register_device_module("npu", module)
    if not hasattr(torch.Tensor, "is_npu"):
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    private.export_dlpack_device("npu")
    private.after_import("torch._dynamo.device_interface", _register_device_interface)
    from .. import ops  # noqa: F401  (registers every numba kernel)
    from . import amp, fallback  # noqa: F401  (amp: GradScaler's two kernels)

    fallback.install()
    run_backward_on_calling_thread()
    start_kernel_threads()
    _registered = True


def start_kernel_threads() -> None:
    """Start numba's thread pool now, leaving torch's CPU thread count as it was.

    The npu's parallel kernels run on numba's OpenMP pool (``NUMBA_NUM_THREADS`` threads, default: the
    machine's cores). Starting that pool sets the thread count of the OpenMP runtime torch's CPU kernels
    use too (checked with numba 0.61-0.68 and torch 2.13), so without this the first npu kernel of a
    process would silently change ``torch.get_num_threads()`` whenever the two counts differ.
    """
    import os

    import numba
    import numba.np.ufunc.parallel as numba_parallel

    from .bare import BARE

    if BARE and numba_parallel._is_initialized is False and not os.environ.get("NUMBA_THREADING_LAYER"):
        # the bring-up checks run the learner's kernels in a forked child (killed when it hangs); GNU OpenMP
        # refuses to run after a fork, numba's own workqueue pool does not
        numba.config.THREADING_LAYER = "workqueue"
    threads = torch.get_num_threads()
    numba_parallel._launch_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def _register_device_interface(device_interface) -> None:
    """Tell Dynamo how to query and switch npu devices and streams (torch._dynamo's DeviceInterface)."""
    from ..inductor.interface import NpuInterface

    device_interface.register_interface_for_device("npu", NpuInterface)


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

    Autograd still starts its per-device worker threads (``pt_autograd_<i>``) at
    the first backward; one backward of a CPU scalar here starts them now, so
    they exist (and have their names) before the first npu backward returns.
    """
    torch.autograd.set_multithreading_enabled(False)
    global _engine_started
    if not _engine_started:
        from . import bare, native

        runtime = native.load()
        # a bare device: autograd's engine starts without device threads, so forked children can run backward
        runtime.hide_devices_from_autograd(bare.BARE)
        try:
            torch.ones((), requires_grad=True).backward()
        finally:
            runtime.hide_devices_from_autograd(False)
        _engine_started = True


_engine_started = False
