"""Copies inside the device, as the other kernels use them.

Copies across the host/device boundary, within a device and between devices
are the native runtime's ``_copy_from`` (``csrc/aten/NpuMinimal.cpp``): it
moves the bytes (strided, broadcasting and converting dtypes as it goes) and
accounts each copy, its bytes and its time on the device clock, in the
driver's transfer statistics. Kernels that need a device-to-device copy call
:func:`device_copy`, which is that same path.
"""

from __future__ import annotations

import torch


def device_copy(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """Copy (and cast, and broadcast) one npu tensor into another (a counted device-to-device copy)."""
    return dst.copy_(src)
