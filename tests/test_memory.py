"""Simulated device memory: accounting, peaks, OOM, no leaks, transfers."""

import gc

import pytest
import torch

import npu_lab
from npu_lab.device.memory import BLOCK_ROUND, round_size


def test_allocation_is_counted(clean_memory):
    t = torch.empty(1000, device="npu")  # 4000 bytes -> one 4096-byte block
    assert torch.npu.memory_allocated() - clean_memory == round_size(4000) == 4096
    del t
    gc.collect()
    assert torch.npu.memory_allocated() == clean_memory


def test_peak_and_reset(clean_memory):
    torch.npu.reset_peak_memory_stats()
    a = torch.empty(10_000, device="npu")
    b = torch.empty(10_000, device="npu")
    peak = torch.npu.max_memory_allocated()
    assert peak >= clean_memory + 2 * 40_000
    del a, b
    assert torch.npu.max_memory_allocated() == peak
    torch.npu.reset_peak_memory_stats()
    assert torch.npu.max_memory_allocated() == torch.npu.memory_allocated()


def test_views_do_not_allocate(clean_memory):
    t = torch.empty(64, 64, device="npu")
    used = torch.npu.memory_allocated()
    v = t.t()[3:10].unsqueeze(0).expand(4, -1, -1)
    assert torch.npu.memory_allocated() == used
    del t
    gc.collect()
    assert torch.npu.memory_allocated() == used  # the view keeps the storage alive
    del v
    gc.collect()
    assert torch.npu.memory_allocated() == clean_memory


def test_caching_allocator_reuses_blocks():
    torch.npu.empty_cache()
    stats0 = torch.npu.memory_stats()
    for _ in range(5):
        t = torch.empty(4096, device="npu")
        del t
    stats = torch.npu.memory_stats()
    assert stats["num_cache_hits"] - stats0["num_cache_hits"] >= 4
    assert torch.npu.memory_reserved() >= torch.npu.memory_allocated()
    torch.npu.empty_cache()
    assert torch.npu.memory_reserved() == torch.npu.memory_allocated()


def test_out_of_memory_then_device_still_works():
    free, total = torch.npu.mem_get_info()
    with pytest.raises(torch.OutOfMemoryError) as err:
        torch.empty(total // 4 + 1024, device="npu")  # float32: > capacity bytes
    msg = str(err.value)
    assert "NPU out of memory. Tried to allocate" in msg
    assert "total capacity" in msg and "free" in msg
    assert torch.npu.memory_stats()["num_ooms"] >= 1
    x = torch.ones(10, device="npu") * 2
    assert x.sum().item() == 20.0


def test_capacity_is_configurable():
    import gc
    import re

    old = torch.npu.get_device_properties()["total_memory"]
    gc.collect()
    torch.npu.empty_cache()
    capacity = torch.npu.memory_reserved() + (1 << 20)  # what earlier tests in this process still hold, + 1 MiB
    try:
        npu_lab.set_memory_capacity(capacity)
        with pytest.raises(torch.OutOfMemoryError, match=re.escape(f"{capacity / 2**20:.2f} MiB")):
            torch.empty(1 << 20, device="npu")  # 4 MiB
        t = torch.empty(1000, device="npu")
        del t
    finally:
        npu_lab.set_memory_capacity(old)


def test_mem_get_info():
    free, total = torch.npu.mem_get_info()
    assert total == torch.npu.get_device_properties()["total_memory"]
    assert free == total - torch.npu.memory_reserved()


def test_transfers_counted():
    before = npu_lab.transfer_stats()
    x = torch.randn(256)
    a = x.to("npu")  # 1024 bytes host -> device
    b = a.cpu()  # 1024 bytes device -> host
    a.clone()  # device -> device
    after = npu_lab.transfer_stats()
    assert after["host_to_device_bytes"] - before["host_to_device_bytes"] == 1024
    assert after["host_to_device_copies"] - before["host_to_device_copies"] == 1
    assert after["device_to_host_bytes"] - before["device_to_host_bytes"] == 1024
    assert after["device_to_device_copies"] - before["device_to_device_copies"] == 1
    assert torch.equal(b, x)


def test_block_rounding():
    assert round_size(1) == BLOCK_ROUND
    assert round_size(BLOCK_ROUND) == BLOCK_ROUND
    assert round_size(BLOCK_ROUND + 1) == 2 * BLOCK_ROUND
    assert round_size(0) == 0
