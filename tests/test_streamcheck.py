"""npu_lab.streamcheck: races between streams, found on the streams' simulated clocks."""

from __future__ import annotations

import pytest
import torch

import npu_lab


@pytest.fixture
def side():
    torch.npu.synchronize()  # every stream's clock at the same time: what follows is ordered by the test alone
    return torch.npu.Stream()


def _product_on(side: torch.Stream, x: torch.Tensor) -> torch.Tensor:
    with torch.npu.stream(side):
        return x @ x


def test_reading_a_side_streams_result_without_waiting_is_a_race(side):
    x = torch.randn(128, 128, device="npu")
    torch.npu.synchronize()
    with pytest.raises(npu_lab.StreamRaceError, match=r"aten::add.Tensor on stream 0 reads .* aten::mm on stream"):
        with npu_lab.streamcheck():
            y = _product_on(side, x)
            y + 1


@pytest.mark.parametrize("how", ["wait_stream", "event", "synchronize"])
def test_waiting_for_the_side_stream_removes_the_race(side, how):
    x = torch.randn(128, 128, device="npu")
    torch.npu.synchronize()
    with npu_lab.streamcheck() as check:
        y = _product_on(side, x)
        if how == "wait_stream":
            torch.npu.current_stream().wait_stream(side)
        elif how == "event":
            done = torch.npu.Event()
            done.record(side)
            done.wait(torch.npu.current_stream())
        else:
            torch.npu.synchronize()
        z = (y + 1).sum().item()
    assert check.races == []
    assert z == pytest.approx(((x @ x) + 1).sum().item(), rel=1e-5)


def test_a_copy_to_the_host_reads_on_the_current_stream(side):
    x = torch.randn(128, 128, device="npu")
    torch.npu.synchronize()
    with pytest.raises(npu_lab.StreamRaceError, match="aten::_to_copy"):
        with npu_lab.streamcheck():
            _product_on(side, x).cpu()


def test_writing_what_another_stream_still_reads_is_a_race(side):
    a = torch.randn(256, 256, device="npu")
    torch.npu.synchronize()
    with npu_lab.streamcheck(raise_on_race=False) as check:
        b = a @ a  # the default stream reads a for a while
        with torch.npu.stream(side):
            a.mul_(2)  # the side stream's clock stands before the product ends
    assert len(check.races) == 1 and "aten::mul_.Tensor on stream" in check.races[0] and "reads until" in check.races[0]
    assert b.shape == (256, 256)


def test_views_are_not_accesses_and_one_stream_never_races():
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to("npu")
    x = torch.randn(8, 32, device="npu")
    with npu_lab.streamcheck() as check:
        loss = model(x.t().contiguous().t()).sum()
        loss.backward()
        torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert check.races == []
