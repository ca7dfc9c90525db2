"""The functional collectives' reduce-scatter for ``npu`` tensors, registered with the dispatcher.

``torch.distributed._functional_collectives`` (used by FSDP2, DTensor and ``torch.compile``)
runs C++ kernels that find the group by name and call its C++ methods. A Python process group
(npuccl is one) gets most of those calls forwarded to its Python methods, but the functional
``reduce_scatter_tensor`` calls ``_reduce_scatter_base``, which PyTorch does not forward: it
asks the group for a C++ backend for the device type, which npuccl (its own backend) has not.

So npuccl adds, the way any out-of-tree device adds kernels, a ``PrivateUse1`` kernel for
``_c10d_functional::reduce_scatter_tensor`` (and its ``out`` form). It runs the group's own
reduce-scatter and registers the work against the output, so ``wait_tensor`` (or the first
use of the result) waits for it: a stream wait on npuccl's communication stream.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ReduceScatterOptions, _register_work, _resolve_process_group

_lib: torch.library.Library | None = None


def _group(group_name: object) -> dist.ProcessGroup:
    return group_name if isinstance(group_name, dist.ProcessGroup) else _resolve_process_group(group_name)


def _reduce_op(name: str) -> dist.ReduceOp:
    try:
        return getattr(dist.ReduceOp, name.upper())
    except AttributeError:
        raise ValueError(f"reduce_scatter_tensor: unknown reduce op {name!r}") from None


def reduce_scatter_tensor_out(input: torch.Tensor, reduce_op: str, group_size: int, group_name: object, *,
                              out: torch.Tensor) -> torch.Tensor:
    """Reduce ``input`` over the group and keep this rank's slice of dim 0 in ``out`` (asynchronously)."""
    if input.dim() == 0 or input.shape[0] % group_size:
        raise ValueError(f"reduce_scatter_tensor: dim 0 of the input ({tuple(input.shape)}) must divide by the "
                         f"group size {group_size}")
    opts = ReduceScatterOptions()
    opts.reduceOp = _reduce_op(reduce_op)
    work = _group(group_name)._reduce_scatter_base(out, input.contiguous(), opts)
    _register_work(out, work)
    return out


def reduce_scatter_tensor(input: torch.Tensor, reduce_op: str, group_size: int, group_name: object) -> torch.Tensor:
    """The functional reduce-scatter: a new tensor holding this rank's slice of the reduced ``input``."""
    shape = list(input.shape)
    if shape:
        shape[0] //= group_size
    out = input.new_empty(shape)
    return reduce_scatter_tensor_out(input, reduce_op, group_size, group_name, out=out)


def register() -> None:
    """Register the kernels (once)."""
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("_c10d_functional", "IMPL")
    lib.impl("reduce_scatter_tensor", reduce_scatter_tensor, "PrivateUse1")
    lib.impl("reduce_scatter_tensor_out", reduce_scatter_tensor_out, "PrivateUse1")
    _lib = lib
