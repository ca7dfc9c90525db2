"""What the network engine sees of an ``npu`` tensor: a CPU tensor over the same bytes.

A real collective library hands the NIC the device buffer itself (GPUDirect RDMA):
nothing is staged through host memory. The simulated NPU's memory *is* host memory
of this process, so the same holds here: :func:`host_view` makes a CPU tensor that
aliases the ``npu`` tensor's storage, gloo reads and writes it, and the result is in
the ``npu`` tensor in place, with no host<->device copy on the device clock.

Gloo needs dense tensors. A non-contiguous ``npu`` tensor is staged through a
contiguous CPU buffer, and :meth:`HostBuffer.finish` copies the result back.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..device import native

_C = native.load()


@dataclass
class HostBuffer:
    """The CPU tensor a collective runs on, for one caller's tensor."""

    tensor: torch.Tensor  # the caller's tensor (npu or cpu)
    host: torch.Tensor  # dense CPU tensor handed to gloo
    alias: torch.Tensor | None  # CPU alias of ``tensor``'s bytes when ``host`` is a staging copy

    def finish(self) -> None:
        """Make the collective's result visible in ``tensor`` (copies back a staged buffer)."""
        if self.alias is not None:
            self.alias.copy_(self.host)


def alias(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over ``t``'s device bytes, with ``t``'s dtype, shape, strides and offset (no copy)."""
    if t.device.type != "npu":
        return t
    if t.untyped_storage().nbytes() == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
    raw = torch.from_numpy(_C.block(t))  # uint8 over the whole storage; keeps the storage alive
    return raw.view(t.dtype).as_strided(t.shape, t.stride(), t.storage_offset())


def host_view(t: torch.Tensor) -> HostBuffer:
    """The dense CPU tensor gloo works on for ``t``: an alias when ``t`` is contiguous, else a staging copy."""
    a = alias(t)
    if a.is_contiguous():
        return HostBuffer(t, a, None)
    return HostBuffer(t, a.contiguous(), a)
