"""npu-lab: a simulated NPU for learning the PyTorch 2 compile stack.

``import npu_lab`` registers the ``npu`` device with PyTorch (once; re-running
the import in a notebook is safe): it loads the native runtime (built from
``npu_lab/csrc`` on first use) and registers the numba kernels. Then use it as
you would use ``cuda``::

    import torch, npu_lab
    x = torch.randn(3, device="npu")
    model = torch.nn.Linear(3, 2).to("npu")
    torch.npu.memory_allocated()
"""

from __future__ import annotations

import sys as _sys

from .device import native as _native
from .device import registration as _registration

#: Why the native runtime could not be built, when ``python -m npu_lab doctor`` runs anyway.
build_error: _native.BuildError | None = None
try:
    _registration.register()
except _native.BuildError as _exc:
    # ``python -m npu_lab doctor`` imports this package first: let it run and report the problem.
    if _sys.argv[:1] != ["-m"]:
        raise
    build_error = _exc

if build_error is None:  # else only the doctor runs: everything below needs the device
    from . import _torch_private

    _torch_private.keep_dynamo_out_of_the_runtime()
    _torch_private.key_inductor_cache_by_cpu()

    from .device.chips import Chip, chips, current_chip, use_chip
    from .device.chips import apply_environment as _apply_chip_environment
    from .device.clock import CostModel, cost_model
    from .device.fallback import cpu_fallback_enabled, set_cpu_fallback
    from .device.fallback import report as fallback_report
    from .device.memcheck import MemcheckError, memcheck
    from .device.memory import set_capacity as _set_capacity
    from .device.streamcheck import StreamRaceError, streamcheck
    from .distributed import register as _register_npuccl
    from .distributed.data_parallel import install as _install_data_parallel
    from .grading import check, checklist, predict, progress
    from .ops.registry import claimed_ops, without_kernels
    from .profiler import coverage, profile

    _apply_chip_environment()  # NPU_LAB_CHIP=<name> picks a preset chip
    _register_npuccl()  # the npuccl collective backend for torch.distributed
    _install_data_parallel()  # the copies torch.nn.DataParallel makes between npu devices

__version__ = "0.1.0"

__all__ = [
    "Chip",
    "CostModel",
    "MemcheckError",
    "check",
    "checklist",
    "chips",
    "current_chip",
    "compiler",
    "claimed_ops",
    "coverage",
    "predict",
    "profile",
    "progress",
    "readiness",
    "cost_model",
    "cpu_fallback_enabled",
    "device_array",
    "doctor",
    "fallback_report",
    "host_time",
    "memcheck",
    "set_cpu_fallback",
    "set_memory_capacity",
    "StreamRaceError",
    "streamcheck",
    "transfer_stats",
    "use_chip",
    "verify",
    "without_kernels",
]


def device_array(tensor):
    """The NumPy view of an ``npu`` tensor's device memory, with the tensor's shape and strides.

    This is what a kernel works on: writing into the array writes the tensor.
    Use it to write your own numba kernels for ``npu`` (chapters 7 and 8a).
    """
    from .device.tensors import as_array

    if tensor.device.type != "npu":
        raise ValueError(f"device_array needs an npu tensor, got one on {tensor.device}")
    return as_array(tensor)


def verify(model, *inputs, **kwargs):
    """Compare ``model`` on ``npu`` with the CPU: outputs and gradients, with error statistics.

    See :func:`npu_lab.adaptation.verify` for the options (``loss_fn``, ``rtol``, ``atol``, ``run``).
    """
    from .adaptation import verify as _verify

    return _verify(model, *inputs, **kwargs)


def readiness(model, *inputs, compile: bool = True):
    """Chapter 8b's adaptation checklist, measured live for ``model`` on ``inputs``."""
    from .adaptation import readiness as _readiness

    return _readiness(model, *inputs, compile=compile)


def doctor():
    """Check that this machine is ready for the lab and say how to fix what is not.

    The same as ``python -m npu_lab doctor`` on the command line.
    """
    from .diagnose import doctor as _doctor

    return _doctor()


def set_memory_capacity(nbytes: int, device: int = 0) -> None:
    """Set the simulated device memory capacity, in bytes (default 4 GiB).

    The environment variable ``NPU_LAB_MEMORY_GB`` sets it at start-up.
    """
    _set_capacity(nbytes, device)


def host_time() -> float:
    """Where the simulated host's time line stands, in microseconds: ``time.perf_counter()`` for the
    simulated machine. The host spends the chip's ``host_launch_us`` issuing each kernel or copy, and
    moves on to the device's time only when it waits for it (``torch.npu.synchronize()``, ``.item()``...)."""
    from .device import clock

    return clock.host_time()


def transfer_stats(device: int = 0) -> dict[str, int]:
    """Bytes and copies that crossed host<->device, within the device and between devices so far."""
    from .device import native

    return native.load().transfer_stats(device)


def __getattr__(name: str):
    # The compiler imports torch._dynamo (about a second), so it loads on first use:
    # ``npu_lab.compiler`` here, or torch.compile(backend="npu") through the
    # ``torch_dynamo_backends`` entry point declared in pyproject.toml.
    if name == "compiler":
        import importlib

        return importlib.import_module(".compiler", __name__)
    raise AttributeError(f"module 'npu_lab' has no attribute {name!r}")
