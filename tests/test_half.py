"""float16 on npu: storage, copies and elementwise kernels work (computed in float32, like CPU);
operators without a half kernel fail with PyTorch's style of message and leave inputs intact."""

from __future__ import annotations

import pytest
import torch


def test_half_elementwise_matches_cpu():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(7, 5, generator=g).half(), torch.randn(5, generator=g).half()
    an, bn = a.to("npu"), b.to("npu")
    for fn in (lambda x, y: x + y, lambda x, y: (x * y).sin(), lambda x, y: torch.where(x > 0, x, y) / 3):
        assert torch.equal(fn(an, bn).cpu(), fn(a, b))
    t = an.t()  # non-contiguous
    assert torch.equal((t * 2).cpu(), a.t() * 2)
    c = torch.empty(7, 5, dtype=torch.float16, device="npu")
    c.copy_(an)
    assert torch.equal(c.cpu(), a)
    assert torch.equal(an.float().cpu(), a.float()) and torch.equal(an.float().half().cpu(), a)
    an.add_(bn)
    assert torch.equal(an.cpu(), a + b)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reduced_precision_matches_cpu_with_its_dtypes(dtype):
    """Every kernel takes float16/bfloat16 by computing in float32 and rounding, as the CPU does."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(6, 8, generator=g).to(dtype), torch.randn(8, 5, generator=g).to(dtype)
    w = torch.randn(8, generator=g)  # float32: promotes
    cases = {
        "sum": lambda x, y, v: x.sum(),
        "sum(dtype=float32)": lambda x, y, v: x.sum(dtype=torch.float32),
        "matmul": lambda x, y, v: x @ y,
        "softmax": lambda x, y, v: torch.softmax(x, -1),
        "layer_norm": lambda x, y, v: torch.nn.functional.layer_norm(x, (8,)),
        "mixed add (promotes to float32)": lambda x, y, v: x + v,
        "argmax": lambda x, y, v: x.argmax(1),
        "mse": lambda x, y, v: torch.nn.functional.mse_loss(x, x.flip(0)),
    }
    for name, fn in cases.items():
        want = fn(a, b, w)
        got = fn(a.npu(), b.npu(), w.npu()).cpu()
        assert got.dtype == want.dtype, name
        torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2, msg=name)


def test_reduced_precision_in_place_and_out_write_back():
    x = torch.linspace(-2, 2, 10, dtype=torch.bfloat16)
    xn = x.npu()
    ptr = xn.data_ptr()
    xn.mul_(3).add_(1)
    assert xn.data_ptr() == ptr and xn.dtype == torch.bfloat16
    assert torch.equal(xn.cpu(), x.mul(3).add(1))
    out = torch.empty(0, dtype=torch.float16, device="npu")
    torch.exp(x.half().npu(), out=out)
    assert out.dtype == torch.float16 and torch.equal(out.cpu(), torch.exp(x.half()))


@pytest.mark.parametrize("low", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", ["mm", "matmul", "addmm_bias", "addmm_mat", "bmm", "mv", "dot", "mm_out"])
def test_products_of_mixed_dtypes_raise_the_cpus_error(op, low):
    """The npu computes 16-bit products in float32: it must still refuse float32 @ bfloat16 as the CPU does."""
    a, b = torch.randn(3, 4), torch.randn(4, 5).to(low)
    calls = {
        "mm": lambda d: torch.mm(a.to(d), b.to(d)),
        "matmul": lambda d: a.to(d) @ b.to(d),
        "addmm_bias": lambda d: torch.addmm(torch.zeros(5, device=d, dtype=low), a.to(d), a.T[:, :5].to(d)),
        "addmm_mat": lambda d: torch.addmm(torch.zeros(5, device=d), a.to(d), b.to(d)),
        "bmm": lambda d: torch.bmm(a[None].to(d), b[None].to(d)),
        "mv": lambda d: torch.mv(a.to(d), b[:, 0].to(d)),
        "dot": lambda d: torch.dot(a[0].to(d), b[:, 0].to(d)),
        "mm_out": lambda d: torch.mm(a.to(d), a.T.to(d), out=torch.empty(3, 3, device=d, dtype=low)),
    }
    with pytest.raises(RuntimeError) as cpu:
        calls[op]("cpu")
    with pytest.raises(RuntimeError) as npu:
        calls[op]("npu")
    assert str(npu.value) == str(cpu.value)


def test_products_of_one_16_bit_dtype_still_run():
    a, b = torch.randn(3, 4).bfloat16(), torch.randn(4, 5).bfloat16()
    assert torch.equal(torch.mm(a.to("npu"), b.to("npu")).cpu(), torch.mm(a, b))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_batch_norm_in_half_precision_updates_its_running_statistics(dtype):
    """native_batch_norm writes running_mean/var though its schema does not mark them written: computing in
    float32 must still write the new statistics back into the 16-bit buffers, as the CPU does."""
    torch.manual_seed(0)
    x = torch.randn(6, 3, 4, dtype=dtype) * 2 + 1
    stats = {dev: (torch.zeros(3, dtype=dtype, device=dev), torch.ones(3, dtype=dtype, device=dev))
             for dev in ("cpu", "npu")}
    for dev, (mean, var) in stats.items():
        torch.nn.functional.batch_norm(x.to(dev), mean, var, training=True, momentum=0.5)
    for cpu, npu in zip(stats["cpu"], stats["npu"]):
        torch.testing.assert_close(npu.cpu(), cpu, rtol=2e-2, atol=2e-2)
    assert stats["npu"][0].abs().sum() > 0  # the mean moved from zero
