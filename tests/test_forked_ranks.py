"""bringup.run_ranks: ranks as forked copies of this process, joined by npuccl."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

import npu_lab  # noqa: F401 - the npu device and npuccl
from npu_lab.distributed.forked_ranks import run_ranks
from npu_lab.grading.forked import ChildTimeout


def _all_reduce(rank: int, world: int) -> torch.Tensor:
    t = torch.full((2,), float(rank + 1)).to(f"npu:{rank % torch.npu.device_count()}")
    dist.all_reduce(t)
    return t.cpu()


def test_every_rank_returns_its_value_and_the_collective_joined_them():
    got = run_ranks(_all_reduce, world_size=2)
    assert [t.tolist() for t in got] == [[3.0, 3.0], [3.0, 3.0]]
    assert run_ranks(lambda rank, world: (rank, world, dist.get_world_size()), 3) == [(0, 3, 3), (1, 3, 3), (2, 3, 3)]


def test_a_rank_that_raises_stops_the_others_and_is_named():
    def body(rank: int, world: int) -> None:
        if rank == 1:
            raise ValueError("rank one gives up")
        _all_reduce(rank, world)  # waits for rank 1, which never comes

    start = time.monotonic()
    with pytest.raises(ValueError, match="rank 1: rank one gives up"):
        run_ranks(body, 2, collective_timeout=60)
    assert time.monotonic() - start < 30  # stopped, not left to wait out the collective's timeout


def test_ranks_that_do_not_finish_are_stopped():
    with pytest.raises(ChildTimeout, match="did not finish within 2 s"):
        run_ranks(lambda rank, world: time.sleep(600), 2, timeout=2)


def test_bad_arguments_and_an_inherited_process_group_are_refused():
    with pytest.raises(ValueError, match="positive int"):
        run_ranks(_all_reduce, 0)
    with pytest.raises(TypeError, match="function of"):
        run_ranks(None, 2)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with pytest.raises(RuntimeError, match="destroy_process_group"):
            run_ranks(_all_reduce, 2)
    finally:
        dist.destroy_process_group()
