"""Bad input fails like PyTorch; missing operators fail clearly or fall back."""

import warnings

import pytest
import torch

import npu_lab


@pytest.fixture
def no_erfinv():
    """These tests need an operator with no npu kernel: erfinv's shipped kernels are taken out."""
    names = [n for n in ("aten::erfinv", "aten::erfinv_")
             if any(c == n or c.startswith(n + ".") for c in npu_lab.claimed_ops())]
    with npu_lab.without_kernels(*names):
        yield


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


def test_unsupported_op_error_has_pytorch_text_and_hint(fallback_off, no_erfinv):
    x = torch.randn(4, device="npu")
    with pytest.raises(NotImplementedError) as err:
        torch.ops.aten.erfinv(x)
    msg = str(err.value)
    assert "Could not run 'aten::erfinv" in msg and "'npu' backend" in msg
    assert "PYTORCH_ENABLE_NPU_FALLBACK" in msg
    # the device still works and nothing leaked into the fallback record
    assert (x * 0).sum().item() == 0


def test_fallback_runs_on_cpu_records_and_warns_once(no_erfinv):
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


def test_fallback_writes_back_inplace_results(no_erfinv):
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


def test_without_kernels_takes_a_shipped_kernel_out_and_puts_it_back(fallback_off):
    import torch.nn.functional as F

    x = torch.randn(5, device="npu")
    with npu_lab.without_kernels("aten::silu") as removed:
        assert sorted(removed.names) == ["aten::silu", "aten::silu.out"]
        assert "aten::silu" not in npu_lab.claimed_ops()
        with pytest.raises(NotImplementedError, match="Could not run 'aten::silu.out'"):
            F.silu(x)
        lib = torch.library.Library("aten", "IMPL")  # the learner's own kernel fits the empty slot
        lib.impl("silu", lambda t: t * torch.sigmoid(t), "PrivateUse1")
        torch.testing.assert_close(F.silu(x).cpu(), F.silu(x.cpu()))
        lib._destroy()
    assert "aten::silu" in npu_lab.claimed_ops()
    torch.testing.assert_close(F.silu(x).cpu(), F.silu(x.cpu()))
    with pytest.raises(KeyError, match="no npu kernel from npu_lab"):
        npu_lab.without_kernels("aten::not_an_operator")


@pytest.fixture
def fallback_on():
    prev = npu_lab.cpu_fallback_enabled()
    npu_lab.set_cpu_fallback(True)
    yield
    npu_lab.set_cpu_fallback(prev)


COMPLEX_UNARY = ["abs", "sgn", "exp", "sqrt", "log", "neg", "reciprocal", "sin", "tanh", "sigmoid", "angle",
                 "isfinite", "square", "rsqrt", "expm1", "log1p"]


@pytest.mark.parametrize("name", COMPLEX_UNARY)
def test_a_kernel_that_cannot_do_complex_defers_to_the_fallback(name, fallback_on):
    """numba kernels written for real numbers decline complex inputs instead of raising a numba error."""
    z = torch.randn(7, dtype=torch.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = getattr(torch, name)(z.to("npu"))
    want = getattr(torch, name)(z)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)


def test_complex_abs_without_the_fallback_is_pytorchs_missing_kernel_error(fallback_off):
    with pytest.raises(NotImplementedError, match="(?s)Could not run 'aten::abs'.*complex tensor"):
        torch.randn(3, dtype=torch.complex64).to("npu").abs()


@pytest.mark.parametrize("reduction", [0, 1, 2])  # none, mean, sum
def test_nll_loss_backward_refuses_targets_out_of_range(reduction):
    """Called straight (a forward would have refused them first), the backward raises the CPU's IndexError and
    writes no gradient outside the tensor it returns (the kernel used to write at row * C + target). With no
    reduction the CPU's kernel (torch 2.13) does not check; the npu raises there too."""
    logp = torch.log_softmax(torch.randn(4, 3), 1)
    target = torch.tensor([0, 2, 3, -100])
    grad = torch.ones(4) if reduction == 0 else torch.tensor(1.0)
    args = (grad, logp, target, None, reduction, -100, torch.tensor(3.0))
    if reduction:
        with pytest.raises(IndexError, match="Target 3 is out of bounds"):
            torch.ops.aten.nll_loss_backward(*args)
    guard = torch.zeros(64, device="npu")  # memory a stray write past the gradient could reach
    npu_args = tuple(a.npu() if isinstance(a, torch.Tensor) else a for a in args)
    with pytest.raises(IndexError, match="Target 3 is out of bounds"):
        torch.ops.aten.nll_loss_backward(*npu_args)
    assert not guard.cpu().any()
    good = target.clone()
    good[2] = 1
    torch.testing.assert_close(torch.ops.aten.nll_loss_backward(*npu_args[:2], good.npu(), *npu_args[3:]).cpu(),
                               torch.ops.aten.nll_loss_backward(*args[:2], good, *args[3:]))
