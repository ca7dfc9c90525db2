"""torch.nn.DataParallel across npu:0 and npu:1 in one process trains like one device."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch.nn.parallel import DataParallel, comm

import npu_lab


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _train(model: torch.nn.Module, batches, device: str) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_data_parallel_over_two_npus_trains_like_one(fallback_off):
    assert torch.npu.device_count() >= 2
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(7, 8, generator=g), torch.randint(0, 3, (7,), generator=g)) for _ in range(3)]
    single = _model().to("npu:0")
    replicated = copy.deepcopy(single)
    dp = DataParallel(replicated, device_ids=[0, 1])
    peer_before = npu_lab.transfer_stats(0)["peer_bytes"] + npu_lab.transfer_stats(1)["peer_bytes"]
    torch.npu.reset_peak_memory_stats(1)
    want = _train(single, batches, "npu:0")
    got = _train(dp, batches, "npu:0")
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    for p, q in zip(single.parameters(), replicated.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    # the second device did work: the replica's weights and half the batch went there
    assert torch.npu.max_memory_allocated(1) > 0
    assert npu_lab.transfer_stats(0)["peer_bytes"] + npu_lab.transfer_stats(1)["peer_bytes"] > peer_before


def test_scatter_and_gather_split_and_join_unevenly():
    x = torch.arange(14.0).reshape(7, 2).to("npu:0")
    a, b = comm.scatter(x, [0, 1], chunk_sizes=[3, 4])
    assert (a.device, b.device) == (torch.device("npu", 0), torch.device("npu", 1))
    assert a.shape == (3, 2) and b.shape == (4, 2)
    back = comm.gather([a, b], dim=0, destination=0)
    torch.testing.assert_close(back.cpu(), x.cpu())
    torch.testing.assert_close(comm.gather([a, b], dim=0, destination="cpu"), x.cpu())
    with pytest.raises(RuntimeError, match="do not add up"):
        comm.scatter(x, [0, 1], chunk_sizes=[3, 3])


def test_broadcast_coalesced_keeps_the_source_and_copies_to_the_others():
    ts = [torch.randn(3).to("npu:0"), torch.randn(2, 2).to("npu:0")]
    out = comm.broadcast_coalesced(ts, [0, 1])
    assert out[0][0] is ts[0]
    assert [t.device for t in out[1]] == [torch.device("npu", 1)] * 2
    torch.testing.assert_close(out[1][1].cpu(), ts[1].cpu())
