"""The 20-line prototype: a device registered from pure Python, and what it cannot do.

PyTorch 2.13 can register a PrivateUse1 backend from Python alone
(``torch.utils.backend_registration._setup_privateuseone_for_python_backend``):
Python objects stand in for the C++ hooks and device guard, ``torch.library``
registers the kernels, and each kernel keeps the tensor's bytes wherever it
likes. It is the quickest way to see a new device appear, and it is how this
lab's NPU started. Run this file as a script, in a fresh process that has not
imported ``npu_lab`` (both claim PrivateUse1, and ``python -m`` would import the
package first)::

    python npu_lab/device/prototype.py

It registers a device called ``proto`` whose kernels keep each storage's bytes
in a NumPy array on the side, then prints what works and what does not. The
limits all come from one fact: PyTorch sees storages with no bytes
(``data_ptr() == 0``), so anything that reads or shares storage (tied weights,
``torch.jit.save``, ``UntypedStorage``, ``param.data = ...``) breaks. The native
runtime in ``npu_lab/csrc`` exists to remove exactly these limits.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

_bytes: dict[int, np.ndarray] = {}  # id(storage) -> its bytes, kept beside PyTorch


def _empty(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    t = torch._C._acc.create_empty_tensor(tuple(size), dtype or torch.get_default_dtype())
    _bytes[id(t.untyped_storage())] = np.zeros(t.numel(), dtype=np.float32)
    return t


def _copy_from(src, dst, non_blocking=False):
    if dst.device.type == "proto":
        _bytes[id(dst.untyped_storage())] = src.detach().float().numpy().reshape(-1).copy()
    else:
        dst.copy_(torch.from_numpy(_bytes[id(src.untyped_storage())].reshape(src.shape)))
    return dst


def register() -> None:
    """The prototype: name the backend, give it hooks and a guard, register three kernels."""
    class Hooks(torch._C._acc.PrivateUse1Hooks):
        def is_available(self) -> bool:
            return True

        def has_primary_context(self, dev_id: int) -> bool:
            return True

    class Guard(torch._C._acc.DeviceGuard):
        def type_(self):
            return torch._C._autograd.DeviceType.PrivateUse1

    module = type(torch)("proto")
    module.is_available = lambda: True
    _setup_privateuseone_for_python_backend("proto", backend_module=module, hook=Hooks(), device_guard=Guard())
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", _empty, "PrivateUse1")
    lib.impl("_copy_from", _copy_from, "PrivateUse1")
    lib.impl("empty_strided", lambda size, stride, **kw: _empty(size, **kw), "PrivateUse1")
    register.lib = lib  # type: ignore[attr-defined]  (the registrations live as long as the Library)


def _try(label: str, fn) -> None:
    try:
        print(f"{label:<46} {fn()}", flush=True)
    except Exception as exc:  # noqa: BLE001 - showing the failure is the point
        print(f"{label:<46} fails: {type(exc).__name__}: {str(exc).splitlines()[0][:70]}")


def main() -> None:
    register()
    x = torch.arange(4.0).to("proto")
    _try("a tensor on the new device", lambda: f"{x.device}, back on the CPU: {x.cpu().tolist()}")
    _try("its storage: nbytes, data_ptr", lambda: (x.untyped_storage().nbytes(), x.data_ptr()))
    cpu = torch.nn.Parameter(torch.ones(2))
    _try("shallow-copy compatible with CPU tensors", lambda: torch._has_compatible_shallow_copy_type(cpu, x))
    emb = torch.nn.Embedding(5, 3)
    head = torch.nn.Linear(3, 5, bias=False)
    head.weight = emb.weight  # tied, as in GPT-2
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    before = len(list(model.parameters()))
    _try("tied weights after .to(device): parameters",
         lambda: f"{before} -> {len(list(model.to('proto').parameters()))}")
    _try("x + x (no kernel registered)", lambda: (x + x).cpu())
    print(f"{'torch.UntypedStorage(16, device=...)':<46} ", end="", flush=True)
    print(torch.UntypedStorage(16, device="proto").nbytes())  # last: on torch 2.13 this kills the process


if __name__ == "__main__":
    main()
