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

Savers that read a storage's raw bytes in C++ (``torch.jit.save`` and
``ScriptModule.save``, ``torch.export.save``) cannot see device memory: left
alone they would write zeros or nothing for ``npu`` weights, without a word.
:func:`install` puts a check in front of each that refuses ``npu`` tensors with
a clear error (and writes nothing); move the module or program to the CPU first.
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


def _npu_names(tensors: dict[str, object]) -> list[str]:
    return [name for name, t in tensors.items() if isinstance(t, torch.Tensor) and t.device.type == "npu"]


def _refuse(saver: str, names: list[str], fix: str) -> None:
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    raise RuntimeError(
        f"{saver} cannot save npu tensors ({shown}): it reads tensor bytes directly from storage, "
        f"and npu storages live in the simulated device memory, so it would write empty weights. "
        f"{fix} (torch.save works for npu tensors as they are)."
    )


def _script_module_guard(method):
    def save(self, *args, **kwargs):
        names = _npu_names(self.state_dict())
        if names:
            _refuse("torch.jit.save", names, "Move the module to the CPU first: torch.jit.save(m.cpu(), f), "
                    "then load with map_location and move the weights back")
        return method(self, *args, **kwargs)

    save.__name__, save.__doc__, save.__wrapped__ = method.__name__, method.__doc__, method
    return save


def _export_guard(export_save):
    def save(ep, *args, **kwargs):
        tensors = {**getattr(ep, "state_dict", {}), **getattr(ep, "constants", {})}
        names = _npu_names(tensors)
        if names:
            _refuse("torch.export.save", names, "Export the model on the CPU and save that program")
        return export_save(ep, *args, **kwargs)

    save.__name__, save.__doc__, save.__wrapped__ = export_save.__name__, export_save.__doc__, export_save
    return save


def _guard_raw_byte_savers() -> None:
    """Wrap the savers that would silently lose npu weights (checked on torch 2.13)."""
    from torch.jit import RecursiveScriptModule

    for name in ("save", "save_to_buffer"):  # torch.jit.save(m, f) calls one of these
        setattr(RecursiveScriptModule, name, _script_module_guard(getattr(RecursiveScriptModule, name)))
    torch.export.save = _export_guard(torch.export.save)


def install() -> None:
    global _installed
    if not _installed:
        torch.serialization.register_package(9, _tag, _deserialize)
        _guard_raw_byte_savers()
        _installed = True
