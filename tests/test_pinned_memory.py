"""Pinned host memory from the npu runtime, and DataLoader workers feeding the npu (chapter A1, section 11)."""

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

import npu_lab
from npu_lab.device import native

_C = native.load()


def _where(t: torch.Tensor) -> tuple[str, int]:
    kind, device, _, _ = _C.pointer_attributes(t.data_ptr())
    return kind, device


def test_pin_memory_uses_the_npu_pinned_allocator():
    assert str(torch.accelerator.current_accelerator()) == "npu"
    plain = torch.randn(1000)
    pinned = plain.pin_memory()
    assert pinned.is_pinned() and not plain.is_pinned()
    assert _where(pinned) == ("pinned", -1) and _where(plain)[0] == "unregistered"
    assert torch.equal(pinned, plain)
    empty = torch.empty(64, pin_memory=True)
    assert empty.is_pinned() and _where(empty) == ("pinned", -1)


def test_non_blocking_copy_from_pinned_memory():
    pinned = torch.arange(4096, dtype=torch.float32).pin_memory()
    before = npu_lab.transfer_stats()["host_to_device_bytes"]
    on_npu = pinned.to("npu", non_blocking=True)
    torch.npu.synchronize()
    assert npu_lab.transfer_stats()["host_to_device_bytes"] - before == pinned.numel() * 4
    assert on_npu.device.type == "npu" and torch.equal(on_npu.cpu(), pinned)
    back = torch.empty(4096, pin_memory=True)
    back.copy_(on_npu, non_blocking=True)
    torch.npu.synchronize()
    assert torch.equal(back, pinned)


class _Numbered(Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        info = get_worker_info()
        return torch.full((3,), float(i)), -1 if info is None else info.id


def test_dataloader_workers_and_pin_memory_feed_the_npu():
    loader = DataLoader(_Numbered(), batch_size=6, num_workers=2, pin_memory=True)
    seen, workers = [], []
    for x, worker in loader:
        assert x.is_pinned() and _where(x) == ("pinned", -1)
        seen.append(x.to("npu", non_blocking=True)[:, 0].cpu())
        workers.append(int(worker[0]))
    assert torch.equal(torch.cat(seen), torch.arange(24, dtype=torch.float32))  # in order
    assert workers == [0, 1, 0, 1]  # two worker processes take turns
