"""``torch.save``/``torch.load`` for ``npu`` tensors.

Saving: an ``npu`` tensor pickles as a CPU copy plus the instruction to rebuild
it on its device (see :func:`npu_lab._torch_private.install_serialization`),
so ``torch.load(..., map_location="cpu")`` gives CPU tensors and a plain
``torch.load`` gives ``npu`` tensors again.

Loading with ``map_location="npu"``: PyTorch restores each saved storage
through the deserializers registered with ``torch.serialization.register_package``.
Ours copies the bytes into device memory (counted as a host-to-device copy)
and hands back that device storage; PyTorch then builds each tensor on it
with ``set_``, so tensors that shared a storage when saved share it again.
"""

from __future__ import annotations

import numpy as np
import torch

_installed = False


def _tag(obj: object) -> str | None:
    if getattr(obj, "device", None) is not None and obj.device.type == "npu":
        return f"npu:{obj.device.index or 0}"
    return None


def _deserialize(obj: torch.UntypedStorage, location: str) -> torch.UntypedStorage | None:
    if not location.startswith("npu"):
        return None
    if obj.device.type == "npu":
        return obj
    from .memory import memory
    from .tensors import as_array, empty

    nbytes = obj.nbytes()
    host = np.frombuffer(bytes(obj), dtype=np.uint8) if nbytes else np.empty(0, np.uint8)
    dev = empty((nbytes,), torch.uint8)
    as_array(dev)[...] = host
    tr = memory(0).counters.transfers
    tr.host_to_device_bytes += nbytes
    tr.host_to_device_copies += 1
    return dev.untyped_storage()


def install() -> None:
    global _installed
    if not _installed:
        torch.serialization.register_package(9, _tag, _deserialize)
        _installed = True
