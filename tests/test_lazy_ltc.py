"""PyTorch's lazy tensor core with its TorchScript backend (npu_lab/lazy/ltc.py), next to npu_lab.lazy."""

import copy

import pytest
import torch

from npu_lab import lazy, models
from npu_lab.lazy import ltc


@pytest.fixture(scope="module")
def batch():
    torch.manual_seed(0)
    base = models.mlp()
    return base, *models.example_batch(base, 8, "cpu")


def test_ltc_training_matches_eager_and_hits_the_cache(batch):
    base, data, target = batch
    run = ltc.train(copy.deepcopy(base), data, target, 4, 0.05, momentum=0.9)
    eager = models.train(copy.deepcopy(base), 4, "cpu", lr=0.05)  # SGD with momentum 0.9, same batch
    torch.testing.assert_close(torch.tensor(run.losses), torch.tensor(eager))
    assert len(set(run.hashes[1:])) == 1 and run.hashes[0] != run.hashes[1]
    assert [c - run.cached[1] for c in run.cached[1:]] == [0, 1, 2]  # steps 3 and 4 come from the cache
    assert run.uncached[-1] == run.uncached[1]


def test_ltc_uploads_python_numbers_as_data(batch):
    base, data, target = batch
    fixed = ltc.train(copy.deepcopy(base), data, target, 3, 0.05)
    schedule = ltc.train(copy.deepcopy(base), data, target, 3, [0.1, 0.05, 0.02])
    assert schedule.hashes == fixed.hashes  # the learning rate is a graph input, not part of the key
    assert schedule.losses[1] != fixed.losses[1]


def test_ir_and_fx_op_counts(batch):
    base, data, target = batch
    run = ltc.train(copy.deepcopy(base), data, target, 1, 0.05)
    ops = ltc.ir_ops(run.ir[0])
    assert ops["aten::addmm"] == 3 and ops["aten::mm"] == 5 and ops["lazy_tensors::device_data"] > 6
    model = copy.deepcopy(base).npu()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with lazy.mode(options={"pattern_fusion": False, "pointwise_fusion": False}):
        opt.zero_grad()
        models.loss_fn(model, model(data.npu()), target.npu()).backward()
        opt.step()
        lazy.mark_step()
    lab = ltc.fx_ops(lazy.last_graph())
    assert lab["aten::addmm"] == 3 and lab["aten::mm"] == 5


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least 1"):
        ltc.train(models.mlp(), torch.randn(2, 10), torch.zeros(2, dtype=torch.long), 0, 0.1)
    with pytest.raises(ValueError, match="learning rates"):
        ltc.train(models.mlp(), torch.randn(2, 10), torch.zeros(2, dtype=torch.long), 2, [0.1])
