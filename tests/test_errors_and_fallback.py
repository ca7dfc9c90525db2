"""Bad input fails like PyTorch; missing operators fail clearly or fall back."""

import warnings

import pytest
import torch

import npu_lab


def test_mixing_devices_raises():
    a = torch.ones(3, device="npu")
    b = torch.ones(3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + b
    with pytest.raises(RuntimeError, match="same device"):
        b * a
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(torch.ones(2, 2, device="npu"), torch.ones(2, 2))


def test_cpu_zero_dim_scalars_are_allowed():
    a = torch.ones(3, device="npu")
    out = a * torch.tensor(2.0) + torch.tensor(1)
    assert out.device.type == "npu" and out.cpu().tolist() == [3.0, 3.0, 3.0]


def test_shape_errors_are_pytorch_errors():
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.ones(2, 3, device="npu") @ torch.ones(2, 3, device="npu")
    with pytest.raises(RuntimeError):
        torch.ones(2, 3, device="npu") + torch.ones(4, device="npu")
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch.ones(3, device="npu").add_(torch.ones(2, 3, device="npu"))


def test_inplace_type_error():
    a = torch.ones(3, dtype=torch.int64, device="npu")
    with pytest.raises(RuntimeError, match="can't be cast"):
        a.add_(torch.ones(3, device="npu") * 0.5)


def test_unsupported_op_error_has_pytorch_text_and_hint(fallback_off):
    x = torch.randn(4, device="npu")
    with pytest.raises(NotImplementedError) as err:
        torch.ops.aten.erfinv(x)
    msg = str(err.value)
    assert "Could not run 'aten::erfinv" in msg and "'npu' backend" in msg
    assert "PYTORCH_ENABLE_NPU_FALLBACK" in msg
    # the device still works and nothing leaked into the fallback record
    assert (x * 0).sum().item() == 0


def test_fallback_runs_on_cpu_records_and_warns_once():
    npu_lab.set_cpu_fallback(True)
    try:
        x_cpu = torch.rand(6) * 1.8 - 0.9
        x = x_cpu.npu()
        def erfinv_count():
            return sum(v for k, v in npu_lab.fallback_report().items() if k.startswith("aten::erfinv"))

        before = erfinv_count()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = torch.erfinv(x)
            y2 = torch.erfinv(x)
        fallback_warnings = [w for w in caught if "fall back to run on the CPU" in str(w.message)]
        assert len(fallback_warnings) <= 1
        assert y.device.type == "npu"
        assert torch.allclose(y.cpu(), torch.erfinv(x_cpu))
        assert torch.equal(y.cpu(), y2.cpu())
        assert erfinv_count() == before + 2
    finally:
        npu_lab.set_cpu_fallback(False)


def test_fallback_writes_back_inplace_results():
    npu_lab.set_cpu_fallback(True)
    try:
        x_cpu = torch.linspace(-0.5, 0.5, 5)
        x = x_cpu.npu()
        ret = x.erfinv_()
        assert ret is x
        assert torch.allclose(x.cpu(), torch.erfinv(x_cpu))
    finally:
        npu_lab.set_cpu_fallback(False)


def test_bad_dtype_is_clear():
    x = torch.empty(2, dtype=torch.float8_e4m3fn, device="npu")  # storage of any dtype is fine...
    with pytest.raises(TypeError, match="npu kernels cannot work on float8_e4m3fn tensors"):
        x.fill_(1)  # ...but no kernel computes in it


def test_oom_loses_nothing():
    keep = torch.arange(10.0, device="npu")
    _, total = torch.npu.mem_get_info()
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(total, dtype=torch.uint8, device="npu") + 1
    assert keep.cpu().tolist() == list(map(float, range(10)))
