"""View operators: metadata only, sharing the input's device memory.

A view kernel must not copy: it returns a tensor that shares the input's
storage with new sizes, strides and offset. PyTorch's Meta kernels compute
exactly that geometry, so the NPU runs them on its own tensors. The result
shares the same storage object, hence the same device block.

Most view operators (``transpose``, ``permute``, ``select``, ``slice``,
``expand``, ``unsqueeze``...) are CompositeExplicitAutograd in ATen and end in
``as_strided``, so these few registrations cover them all.
"""

from __future__ import annotations

import torch

from .. import _torch_private as private
from .registry import register

aten = torch.ops.aten


def _meta_view(op):
    def kernel(*args, **kwargs):
        return private.meta_redispatch(op, *args, **kwargs)

    kernel.__name__ = f"npu_{op.__name__.replace('.', '_')}"
    kernel.__doc__ = f"npu view kernel for {op}: the Meta kernel's geometry on the same storage."
    return kernel


for _name, _op in {
    "view": aten.view.default,
    "as_strided": aten.as_strided.default,
    "_reshape_alias": aten._reshape_alias.default,
    "unfold": aten.unfold.default,
    "view_as_real": aten.view_as_real.default,
    "view.dtype": aten.view.dtype,
}.items():
    register(_name)(_meta_view(_op))


@register("as_strided_")
def as_strided_(self, size, stride, storage_offset=None):
    """In-place geometry change (``squeeze_``, ``t_``, ``unsqueeze_`` end here).

    The storage objects of npu tensors report zero bytes to PyTorch (the bytes
    live in the simulated memory), so this re-points the tensor at its own
    storage with ``set_``, whose Meta kernel does not bounds-check them.
    """
    offset = self.storage_offset() if storage_offset is None else storage_offset
    return private.meta_redispatch(
        aten.set_.source_Storage_storage_offset, self, self.untyped_storage(), offset, size, stride
    )
