"""Helpers every NPU kernel wrapper uses: device checks, outputs, launches."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .. import _torch_private as private
from ..device import clock
from ..device.tensors import (
    NUMPY_DTYPES,
    as_array,
    empty,
    empty_strided,
    flat_array,
)
from ..kernels.elementwise import ElementwiseKernel, Operand

__all__ = [
    "NUMPY_DTYPES",
    "as_array",
    "broadcast_strides",
    "check_same_device",
    "empty",
    "empty_like",
    "empty_strided",
    "flat_array",
    "launch",
    "nbytes",
    "resize_out",
    "run_elementwise",
    "to_scalar",
]


def nbytes(t: torch.Tensor) -> int:
    n = t.numel()
    if isinstance(n, torch.Tensor):
        # Under torch.jit.trace sizes come back as traced tensors, which must not leak into the
        # device's counters and clock; int() of one would also raise a TracerWarning pointing
        # here. Read the plain number with tracing paused instead.
        with private.tracing_paused():
            n = t.numel()
    return int(n) * t.element_size()


def launch(name: str, flops: float, read: int, written: int, matrix: torch.dtype | None = None) -> None:
    """Account a kernel on the simulated clock (and notify the profiler).

    ``matrix``: for a matrix product (mm, bmm, convolution, attention), the dtype of its operands:
    the kernel's arithmetic then runs on the chip's matrix unit at that precision.
    """
    if matrix is None:
        clock.launch(name, flops, read, written)
    else:
        clock.launch(name, flops, read, written, matrix=clock.matrix_unit(matrix))


def check_same_device(op: str, *tensors: object) -> None:
    """Raise PyTorch's device-mismatch error if a tensor is not on ``npu``.

    Zero-dimensional CPU tensors are allowed: PyTorch treats them as scalars.
    """
    first = None
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        if t.device.type == "npu":
            if first is None:
                first = t.device
            elif t.device != first:
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but found at least two "
                    f"devices, {first} and {t.device}! (when checking argument for {op})"
                )
            continue
        if t.device.type == "cpu" and t.dim() == 0:
            continue
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two "
            f"devices, {first or 'npu:' + str(torch.npu.current_device())} and {t.device}! "
            f"(when checking argument for {op})"
        )


def is_scalar_like(x: object) -> bool:
    return not isinstance(x, torch.Tensor) or (x.device.type == "cpu" and x.dim() == 0)


def to_scalar(x: object) -> object:
    """A Python number from a number or a zero-dim CPU tensor."""
    if isinstance(x, torch.Tensor):
        return x.item()
    return x


def empty_like(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    return empty(t.shape, dtype or t.dtype)


def dense_strides_like(t: torch.Tensor) -> tuple[int, ...] | None:
    """Strides of a dense tensor whose dimensions are laid out in ``t``'s memory order.

    PyTorch's elementwise operators give their output the memory layout of their
    input (a transposed input gives a transposed-layout output), so later views
    that rely on that layout keep working. None when ``t`` is contiguous already.
    """
    if t.is_contiguous() or t.dim() < 2:
        return None
    key = (tuple(t.shape), t.stride())
    strides = _DENSE_STRIDES.get(key)
    if strides is None:
        if len(_DENSE_STRIDES) >= 4096:  # (layouts repeat from step to step; keep the table small)
            _DENSE_STRIDES.clear()
        size, stride = key
        dense = [0] * len(size)
        acc = 1
        for d in _memory_order(size, stride):
            dense[d] = acc
            acc *= max(int(size[d]), 1)
        strides = _DENSE_STRIDES[key] = tuple(dense)
    return strides


def _memory_order(size: Sequence[int], stride: Sequence[int]) -> list[int]:
    """``t``'s dimensions, innermost first, as ATen's TensorIterator orders them for one operand
    (``reorder_dimensions``): an insertion sort from the natural order (last dimension innermost) that moves a
    dimension inwards only past one with a larger stride (or an equal stride and a larger size), and never
    past a broadcast dimension (stride 0), so an expanded tensor's elementwise result is contiguous."""
    def should_swap(d0: int, d1: int) -> bool:
        s0, s1 = stride[d0], stride[d1]
        if s0 == 0 or s1 == 0:
            return False
        return s0 > s1 or s0 == s1 and size[d0] > size[d1]

    perm = list(range(len(size) - 1, -1, -1))
    for i in range(1, len(perm)):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            s0, s1 = stride[perm[d0]], stride[perm[d1]]
            if should_swap(perm[d0], perm[d1]):
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif s0 != 0 and s1 != 0 and s0 < s1:
                break
    return perm


#: (shape, strides) -> :func:`dense_strides_like`'s answer for a tensor that is not contiguous.
_DENSE_STRIDES: dict[tuple, tuple[int, ...]] = {}


def resize_out(out: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Resize an ``out=`` tensor the way ATen does (the runtime's ``resize_``: reallocating only if it must).

    The old contents are kept where they overlap, as ``resize_`` promises.
    """
    shape = tuple(int(s) for s in shape)
    if tuple(out.shape) != shape:
        out.resize_(shape)
    return out


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    """Broadcast shapes like ``torch.broadcast_shapes`` (a fast path for kernels)."""
    if len(shapes) == 1:
        return tuple(shapes[0])
    nd = max(len(s) for s in shapes)
    out = [1] * nd
    for s in shapes:
        off = nd - len(s)
        for i, n in enumerate(s):
            cur = out[off + i]
            if n != cur:
                if cur == 1:
                    out[off + i] = n
                elif n != 1:
                    raise RuntimeError(
                        f"The size of tensor a ({cur}) must match the size of tensor b ({n}) at "
                        f"non-singleton dimension {off + i}"
                    )
    return tuple(out)


def _np_scalar(value: object, dtype: torch.dtype) -> object:
    return NUMPY_DTYPES[dtype](value)


def broadcast_strides(size: Sequence[int], stride: Sequence[int], shape: Sequence[int]) -> tuple[int, ...]:
    """The strides of a tensor of ``size``/``stride`` broadcast to ``shape`` (zero where expanded)."""
    nd = len(shape)
    pad = nd - len(size)
    strides = [0] * pad + [0 if size[i] == 1 and shape[pad + i] != 1 else stride[i] for i in range(len(size))]
    return tuple(strides) if nd else (0,)


def operand(t: torch.Tensor, shape: Sequence[int]) -> Operand:
    """``t`` broadcast to ``shape`` as a strided operand (zero strides where expanded)."""
    return Operand(flat_array(t), broadcast_strides(t.shape, t.stride(), shape), t.storage_offset())


def _flat(t: torch.Tensor) -> np.ndarray:
    return as_array(t).reshape(-1)


def _run_half(kernel: ElementwiseKernel, outs: Sequence[torch.Tensor], ins: Sequence[torch.Tensor],
              scalars: Sequence, shape: tuple[int, ...]) -> None:
    def staged(t: torch.Tensor) -> Operand:
        op = operand(t, shape)
        flat = op.flat.astype(np.float32) if op.flat.dtype == np.float16 else op.flat
        return Operand(flat, op.strides, op.offset)

    out_ops = [staged(t) for t in outs]
    scalars = [np.float32(s) if isinstance(s, np.float16) else s for s in scalars]
    kernel.run_strided(shape, out_ops, [staged(t) for t in ins], scalars)
    for t, op in zip(outs, out_ops):
        target = flat_array(t)
        if target is not op.flat:
            target[...] = op.flat.astype(target.dtype)


def run_elementwise(
    kernel: ElementwiseKernel,
    outs: Sequence[torch.Tensor],
    ins: Sequence[torch.Tensor],
    scalars: Sequence = (),
    flops_per_element: float = 1.0,
    uncounted: int = 0,
) -> None:
    """Run a generated elementwise kernel over npu tensors (inputs broadcast to outs[0]).

    The last ``uncounted`` inputs are not device-memory reads (random bits a real chip makes inside
    the kernel); the launch does not count their bytes.

    float16 operands are computed in float32 (numba has no half arithmetic) and
    rounded back on store, as PyTorch's CPU kernels do for Half.
    """
    shape = tuple(outs[0].shape)
    numel = outs[0].numel()
    if numel and any(t.dtype == torch.float16 for t in (*outs, *ins)):
        _run_half(kernel, outs, ins, scalars, shape)
    elif numel:
        fast = all(t.is_contiguous() for t in outs) and all(
            t.is_contiguous() and tuple(t.shape) == shape for t in ins
        )
        if fast:
            kernel.run_flat([_flat(t) for t in outs], [_flat(t) for t in ins], scalars)
        else:
            kernel.run_strided(
                shape, [operand(t, shape) for t in outs], [operand(t, shape) for t in ins], scalars
            )
    launch(
        kernel.name,
        flops_per_element * numel,
        sum(nbytes(t) for t in ins[:len(ins) - uncounted]),
        sum(nbytes(t) for t in outs),
    )
