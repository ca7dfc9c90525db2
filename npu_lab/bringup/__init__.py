"""Bring-up: the tools for bringing the bare ``npu`` device up yourself (the B track).

Start a notebook with the bare device (its runtime, none of its compute kernels)::

    import os
    os.environ["NPU_LAB_BARE"] = "1"      # before the first `import npu_lab` of the kernel
    import torch, npu_lab
    from npu_lab import bringup

    bringup.is_bare()                       # True
    torch.ones(2, device="npu")             # NotImplementedError: Could not run 'aten::fill_.Scalar' ... 'npu'
    npu_lab.coverage(model, x).needed       # every operator the model still needs

then register kernels with PyTorch's own mechanism, through a named library so that re-running a cell
replaces its kernels::

    lib = bringup.library("mlp")            # torch.library.Library("aten", "IMPL")
    lib.impl("mm", my_mm, "PrivateUse1")
    bringup.yours()                         # ['aten::mm']

A kernel tells the device it ran with :func:`launch` (the driver's launch: the simulated clock, the
profiler and the launch counters see it). What you register, and only that, is what the track's checks
grade, what :func:`npu_lab.readiness` counts on a bare device, and what ``npu_lab.progress("b1")`` shows.

:mod:`npu_lab.bringup.conformance` runs tests nobody on your team wrote against your kernels: PyTorch's OpInfo
samples (``conformance.opinfo()``) and the ported torch_openreg tests (``conformance.openreg_tests()``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import numpy as np
import torch

from ..device.bare import is_bare, owner, registered, require_bare, yours
from ..distributed.forked_ranks import run_ranks
from . import conformance
from .carry import MARKER, load
from .library import LIBRARIES, LearnerLibrary, forget, library

T = TypeVar("T")

__all__ = ["LIBRARIES", "MARKER", "LearnerLibrary", "attempt", "conformance", "forget", "is_bare", "launch",
           "library", "load", "owner", "random_bits", "registered", "require_bare", "run_ranks", "yours"]


def _bytes(tensors: Iterable[object]) -> int:
    total = 0
    for t in tensors:
        if isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
        elif isinstance(t, (list, tuple)):
            total += _bytes(t)
    return total


def launch(name: str, inputs: Iterable[object] = (), outputs: Iterable[object] = (), flops: float = 0.0) -> None:
    """Tell the device a kernel ran: it reads ``inputs`` and writes ``outputs`` (tensors) and does ``flops``.

    This is the driver's kernel launch (``npuLaunchKernel``): the kernel's time on the simulated clock is the
    cost model's ``launch + max(flops / peak, bytes / bandwidth)`` on the current stream, and the profiler
    shows it by ``name``. Call it once per kernel your operator runs, after the kernel wrote its outputs.
    """
    from ..device import clock

    if not isinstance(name, str) or not name:
        raise TypeError("launch(name, ...): name is the kernel's name, a non-empty str")
    flops = float(flops)
    if not flops >= 0:
        raise ValueError(f"launch: flops must be a number >= 0, got {flops!r}")
    clock.launch(name, flops, _bytes(inputs), _bytes(outputs))


def random_bits(n: int, generator: torch.Generator | None = None) -> np.ndarray:
    """``n`` random 64-bit integers (a numpy ``uint64`` array) from the device's generator.

    A random kernel asks the generator for the bits it needs: ``generator`` (a ``torch.Generator(device="npu")``)
    or, by default, the current device's default generator, the one ``torch.manual_seed`` seeds. Like CUDA's, it
    is counter-based (Philox): the values are a function of the seed and an offset, and each call moves the offset
    past what it handed out (``torch.npu.get_offset()``), so the same seed replays the same bits and two calls
    never share them. A uniform number in ``[0, 1)`` is ``(bits >> 11) * 2.0**-53``.
    """
    from ..device.rng import generator as device_generator

    n = int(n)
    if n < 0:
        raise ValueError(f"random_bits: n must be >= 0, got {n}")
    return device_generator(-1, generator).raw(n)


class Failed:
    """What :func:`attempt` returns when the code raised: the error's type and first line, as a notebook shows it."""

    def __init__(self, exc: BaseException) -> None:
        self.error = exc
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        self.text = f"{type(exc).__name__}: {first[:300]}"

    def __repr__(self) -> str:
        return self.text

    def __bool__(self) -> bool:
        return False


def attempt(fn: Callable[[], T]) -> T | Failed:
    """Run ``fn()`` and return its result, or, if it raises, a :class:`Failed` that shows the error's first line.

    For trying the device while it is still being brought up: ``attempt(lambda: torch.ones(2, device="npu"))``
    shows ``NotImplementedError: Could not run 'aten::fill_.Scalar' ...`` until a kernel is registered, and the
    tensor afterwards, without stopping the notebook.
    """
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - shown, not swallowed: the result says what was raised
        return Failed(exc)
