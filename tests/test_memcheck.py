"""npu_lab.memcheck: guard bytes after every block catch a kernel that writes past its output."""

from __future__ import annotations

import ctypes

import pytest
import torch

import npu_lab
from npu_lab.ops.sweep import sweep


def test_an_honest_computation_leaves_every_guard_intact():
    x = torch.randn(300, 7).to("npu")
    with npu_lab.memcheck() as mc:
        y = torch.sort(x, dim=0).values.cumsum(1)
        del y
    assert mc.damaged == 0 and mc.checked >= 2


def test_a_write_one_element_past_the_end_is_caught_at_free_and_by_scan():
    with pytest.raises(npu_lab.MemcheckError, match="block of 40 bytes: byte 40"):
        with npu_lab.memcheck() as mc:
            t = torch.empty(10, device="npu")
            ctypes.memset(t.data_ptr() + t.nbytes, 0, 4)  # what an off-by-one kernel does
            assert mc.scan() == 1
            del t


def _neg_one_too_far(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    npu_lab.device_array(out)[...] = -npu_lab.device_array(x)
    ctypes.memset(out.data_ptr() + out.nbytes, 0, 4)
    return out


def test_the_opinfo_sweep_reports_an_out_of_bounds_kernel_as_wrong():
    with npu_lab.without_kernels("aten::neg"):
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("neg", _neg_one_too_far, "PrivateUse1")
        try:
            (status,) = sweep(False, names=["neg"], grads=False).ops
        finally:
            lib._destroy()
    assert status.status == "wrong"
    assert "wrote outside a tensor's storage" in status.detail
    (status,) = sweep(False, names=["neg"], grads=False).ops
    assert status.status == "native"
