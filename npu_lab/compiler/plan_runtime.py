"""What a launch plan's generated code calls at run time.

A launch plan (:mod:`npu_lab.compiler.launch_plan`) is straight-line Python
that calls numba kernels on NumPy arrays aliasing device memory. These few
helpers are all it needs besides the kernels: raw device buffers for
intermediates, the device block behind a tensor, the device clock, and the
checks that keep the plan honest about layouts.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import _torch_private as private
from ..device import clock, native
from ..device.tensors import block_of, empty, empty_strided

_C = native.load()

__all__ = ["alloc", "block", "bump", "conform", "empty", "empty_strided", "launch", "modes_active", "nd",
           "view"]

#: ``nd(shape, dtype, block, byte_offset, byte_strides)``: an array aliasing device memory (plans pass the
#: arguments by position: NumPy parses them in about half the time of keywords).
nd = np.ndarray

#: Account one kernel on the simulated device clock (see :func:`npu_lab.device.clock.launch`).
launch = clock.launch


def alloc(nbytes: int, index: int = -1) -> np.ndarray:
    """A device buffer for an intermediate no tensor ever wraps, as a ``uint8`` array: allocated and
    counted like a tensor's (``torch.npu.memory_allocated`` sees it), freed when the array is dropped."""
    return _C.alloc_block(nbytes, index)


#: ``block(t)``: the device memory (a ``uint8`` array) behind ``t``'s storage.
block = block_of


def conform(t: torch.Tensor, shape: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
    """``t`` if it has the layout the plan was built for, else a copy in that layout.

    Kernels the plan calls through the dispatcher choose their outputs' strides
    themselves; the plan's array code was generated for the strides the graph
    recorded, so a tensor laid out differently is copied once to match.
    """
    if t.shape == shape and t.stride() == stride:
        return t
    out = empty_strided(shape, stride, t.dtype)
    out.copy_(t)
    return out


def bump(*tensors: torch.Tensor) -> None:
    """Record an in-place write on ``tensors`` (autograd's version counter), as ``Tensor.copy_`` would."""
    torch.autograd.graph.increment_version([t for t in tensors if not t.is_inference()])


def modes_active() -> bool:
    """Is a ``TorchDispatchMode`` active? (It must see every operator, so the plan steps aside.)"""
    return private.dispatch_modes_active()


def view(base: torch.Tensor, size: tuple[int, ...], stride: tuple[int, ...], offset: int, op: object,
         args: tuple) -> torch.Tensor:
    """The view ``op(base, *args)``, whose geometry the plan worked out when it was built.

    Made straight from that geometry, without the view operator's trip through
    autograd and the npu's Python view kernel, unless autograd would record it.
    """
    if base.requires_grad and torch.is_grad_enabled():
        return op(base, *args)
    return private.strided_view_below_autograd(base, size, stride, offset)
