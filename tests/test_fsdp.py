"""FSDP2 (``fully_shard``) on npu in 2 processes trains like one process and holds less memory than DDP."""

from __future__ import annotations

import functools

import pytest
import torch

from npu_lab.distributed.fsdp import TrainRun, compare_memory, memory_table, train
from npu_lab.distributed.overlap import mlp_model, random_batch

MODEL = functools.partial(mlp_model, width=128, depth=3)
BATCH = functools.partial(random_batch, batch=16, width=128)
STEPS = 3


@pytest.fixture(scope="module")
def runs() -> dict[str, list[TrainRun]]:
    return compare_memory(MODEL, BATCH, world_size=2, steps=STEPS)


@pytest.fixture(scope="module")
def single() -> TrainRun:
    return train("single", MODEL, BATCH, steps=STEPS)


@pytest.mark.parametrize("kind", ["fsdp", "ddp"])
def test_two_processes_train_like_one(runs: dict[str, list[TrainRun]], single: TrainRun, kind: str) -> None:
    ranks = runs[kind]
    assert [r.rank for r in ranks] == [0, 1]
    # equal slices and a mean loss: the ranks' mean loss is the whole batch's loss
    whole = [sum(r.losses[i] for r in ranks) / len(ranks) for i in range(STEPS)]
    assert whole == pytest.approx(single.losses, rel=1e-5)
    assert ranks[0].losses != ranks[1].losses  # each rank saw its own slice
    for r in ranks:
        assert set(r.params) == set(single.params)
        for name, want in single.params.items():
            torch.testing.assert_close(r.params[name], want, rtol=1e-5, atol=1e-5, msg=name)


def test_fsdp_uses_all_gather_and_reduce_scatter(runs: dict[str, list[TrainRun]]) -> None:
    fsdp, ddp = runs["fsdp"][0], runs["ddp"][0]
    layers = 3
    # each layer's parameters are gathered for forward and again for backward, every step
    assert fsdp.collectives.get("allgather", 0) >= 2 * layers * STEPS - layers
    assert fsdp.collectives.get("reduce_scatter", 0) >= layers * STEPS
    # DDP allreduces whole gradients (and broadcasts its rebuilt bucket order once)
    assert ddp.collectives.get("allreduce", 0) >= STEPS
    assert "allgather" not in ddp.collectives and "reduce_scatter" not in ddp.collectives
    assert fsdp.comm_bytes > 0


def test_fsdp_holds_less_memory_per_device_than_ddp(runs: dict[str, list[TrainRun]]) -> None:
    full = sum(p.numel() * p.element_size() for p in MODEL().parameters())
    for fsdp, ddp in zip(runs["fsdp"], runs["ddp"]):
        assert ddp.param_bytes == full
        assert fsdp.param_bytes == full // 2  # each rank keeps its shard (the sizes divide evenly here)
        # parameters, gradients and Adam's two moments: all sharded under FSDP
        assert fsdp.allocated_bytes <= 0.6 * ddp.allocated_bytes
        assert fsdp.peak_bytes < ddp.peak_bytes
    table = memory_table(runs)
    assert "fsdp" in table and "ddp" in table


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="kind"):
        train("zero3")
    with pytest.raises(ValueError, match="kinds"):
        compare_memory(kinds=("ddp", "deepspeed"))
    with pytest.raises(TypeError, match="importable"):
        compare_memory(lambda: torch.nn.Linear(2, 2))
