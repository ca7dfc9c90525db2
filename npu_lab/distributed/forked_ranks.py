"""Run a function on N ranks, each a forked copy of this process joined to the others by npuccl.

``torchrun`` and :func:`npu_lab.distributed.launch.launch` start every rank as a *fresh* Python
process: the function must be importable, and every rank must load your backend itself. From a
notebook you often want the opposite while you work: run the function you just defined, with the
kernels you just registered, on two ranks, now::

    from npu_lab import bringup

    def body(rank, world_size):
        t = torch.full((2,), float(rank + 1), device=f"npu:{rank}")
        dist.all_reduce(t)
        return t.cpu()

    bringup.run_ranks(body, world_size=2)      # [tensor([3., 3.]), tensor([3., 3.])]

Each rank is a ``fork()`` of this process, so it has everything the notebook defined, your kernels
included. In it, :func:`run_ranks` joins the default process group (``init_process_group("npuccl")``,
rank ``rank`` of ``world_size``, through a file store), calls ``fn(rank, world_size)`` and sends back
its value as plain data (tensors come back on the CPU). A rank that raises stops the others (they would
wait for it in their next collective) and its exception is raised here, naming the rank.

This process itself must not have a default process group already (a forked rank would inherit it):
call ``dist.destroy_process_group()`` first. Checked with torch 2.13 on Linux.
"""

from __future__ import annotations

import datetime
import os
import tempfile
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from ..grading import forked


def run_ranks(fn: Callable[[int, int], Any], world_size: int = 2, timeout: float = 120.0,
              collective_timeout: float = 30.0) -> list[Any]:
    """``[fn(rank, world_size) for each rank]``, the ranks running at once as forked processes over npuccl.

    ``timeout``: seconds for all ranks together (then every rank is stopped and ``TimeoutError`` is raised);
    ``collective_timeout``: how long a collective waits for a peer that does not take part.
    """
    if type(world_size) is not int or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not callable(fn):
        raise TypeError(f"run_ranks(fn, world_size): fn must be a function of (rank, world_size), got {fn!r}")
    if dist.is_initialized():
        raise RuntimeError("this process already has a default process group, which every forked rank would "
                           "inherit: call torch.distributed.destroy_process_group() first")
    with tempfile.TemporaryDirectory(prefix="npu_lab_ranks_") as folder:
        store_file = os.path.join(folder, "store")

        def rank_main(rank: int) -> Any:
            store = dist.FileStore(store_file, world_size)
            dist.init_process_group("npuccl", store=store, rank=rank, world_size=world_size,
                                    timeout=datetime.timedelta(seconds=collective_timeout))
            result = fn(rank, world_size)
            # No rank leaves before every rank is done: a rank that exits closes its connections, and
            # a peer still completing gloo's connection mesh (or a collective) with it would fail with
            # "Connection closed by peer".
            dist.barrier()
            dist.destroy_process_group()
            return result

        try:
            return forked.call_forked_all([lambda r=r: rank_main(r) for r in range(world_size)], timeout)
        except BaseException as exc:
            rank = getattr(exc, "rank", None)
            if rank is not None and exc.args and isinstance(exc.args[0], str):
                exc.args = (f"rank {rank}: {exc.args[0]}", *exc.args[1:])
            raise
