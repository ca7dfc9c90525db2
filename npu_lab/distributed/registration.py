"""Register npuccl with ``torch.distributed`` (done by ``import npu_lab``).

After it, ``dist.init_process_group("npuccl")`` builds a :class:`ProcessGroupNPUCCL`,
and ``npuccl`` is the default backend for ``npu`` tensors: a plain
``dist.init_process_group()`` (the accelerator is ``npu``) picks it, as does
``"cpu:gloo,npu:npuccl"``. The group also takes ``cpu`` tensors (over the same gloo),
so barriers and object collectives work on it alone.
"""

from __future__ import annotations

import torch.distributed as dist

from .process_group import NAME, ProcessGroupNPUCCL


def create(backend_opts: object, options: object | None = None) -> ProcessGroupNPUCCL:
    """The creator ``torch.distributed`` calls (extended API: it passes ``DistributedBackendOptions``)."""
    return ProcessGroupNPUCCL(backend_opts.store, backend_opts.group_rank, backend_opts.group_size,
                              backend_opts.timeout)


def registered() -> bool:
    return dist.is_available() and NAME in dist.Backend.backend_list


def register() -> None:
    """Make ``npuccl`` known to ``torch.distributed`` (once; later calls do nothing)."""
    if not dist.is_available() or registered():
        return
    dist.Backend.register_backend(NAME, create, extended_api=True, devices=["npu", "cpu"])
    from . import functional

    functional.register()  # the functional reduce-scatter's npu kernel (see functional.py)
