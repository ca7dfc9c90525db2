"""Fused NPU kernels (npu:: namespace), attention, and the tiled matmul."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.library import opcheck

import npu_lab
from npu_lab.kernels import matmul as mk
from npu_lab.ops.fused import scaled_dot_product_attention as fused_sdpa


def _grads_match(fn_cpu, fn_npu, *inputs, atol=1e-5):
    cpu = [t.clone().requires_grad_() for t in inputs]
    npu = [t.to("npu").requires_grad_() for t in inputs]
    ref = fn_cpu(*cpu)
    out = fn_npu(*npu)
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-5, atol=atol)
    g = torch.randn(ref.shape)
    ref.backward(g)
    out.backward(g.to("npu"))
    for a, b in zip(npu, cpu):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=atol)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_relu(bias):
    x, w, b = torch.randn(6, 10), torch.randn(7, 10), torch.randn(7)
    if bias:
        _grads_match(lambda x, w, b: F.relu(F.linear(x, w, b)),
                     lambda x, w, b: torch.ops.npu.linear_relu(x, w, b), x, w, b)
    else:
        _grads_match(lambda x, w: F.relu(F.linear(x, w)),
                     lambda x, w: torch.ops.npu.linear_relu(x, w, None), x, w)


def test_linear_relu_passes_opcheck():
    args = (torch.randn(4, 5, device="npu"), torch.randn(3, 5, device="npu"), torch.randn(3, device="npu"))
    result = opcheck(torch.ops.npu.linear_relu, args)
    assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_matches_math(causal):
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 4)
    _grads_match(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                 lambda q, k, v: fused_sdpa(q, k, v, is_causal=causal), q, k, v)


def test_fused_attention_masks_and_scale():
    q, k, v = torch.randn(2, 2, 4, 6), torch.randn(2, 2, 7, 6), torch.randn(2, 2, 7, 6)
    bias = torch.randn(2, 1, 4, 7)
    _grads_match(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3),
                 lambda q, k, v, m: fused_sdpa(q, k, v, m, scale=0.3), q, k, v, bias)
    keep = torch.rand(4, 7) > 0.4
    keep[:, 0] = True
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    out = fused_sdpa(q.npu(), k.npu(), v.npu(), keep.npu())
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)


def test_sdpa_functional_on_npu_uses_fused_kernel_by_default():
    """PyTorch asks the device's C++ choice stub (csrc/aten/NpuAttention.cpp), which asks the npu's
    ``_fused_sdp_choice``: the fused kernel by default, the math path when ``sdpa_kernel`` says so or the
    fused kernel cannot take the call, and PyTorch's error when neither is allowed."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4, requires_grad=True) for _ in range(3))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref.sum().backward()
    leaves = [t.detach().npu().requires_grad_() for t in (q, k, v)]

    def kernels(**kw):
        with npu_lab.profile() as prof:
            out = F.scaled_dot_product_attention(*leaves, is_causal=True, **kw)
        return out, [e.name for e in prof.kernels]

    out, names = kernels()
    assert names == ["fused_attention"]
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)
    out.sum().backward()
    for leaf, t in zip(leaves, (q, k, v)):
        torch.testing.assert_close(leaf.grad.cpu(), t.grad, rtol=1e-5, atol=1e-5)
    with sdpa_kernel(SDPBackend.MATH):
        out, names = kernels()
    assert "fused_attention" not in names and len(names) > 3
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)
    out, names = kernels(dropout_p=0.5)  # the fused kernel has no dropout: the math path
    assert "fused_attention" not in names
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), pytest.raises(RuntimeError, match="No viable backend"):
        F.scaled_dot_product_attention(*leaves)
    x = q.detach().npu()
    assert torch.ops.aten._fused_sdp_choice(x, x, x) == int(SDPBackend.OVERRIDEABLE)
    assert torch.ops.aten._fused_sdp_choice(x, x, x, dropout_p=0.1) == int(SDPBackend.MATH)
    # 16-bit inputs: the operator says the fused kernel can take them (float32 inside; torch_openreg's tests ask
    # it so), but F.scaled_dot_product_attention keeps them on the math path, which rounds as the CPU's does
    h = x.bfloat16()
    assert torch.ops.aten._fused_sdp_choice(h, h, h) == int(SDPBackend.OVERRIDEABLE)
    with npu_lab.profile() as prof:
        F.scaled_dot_product_attention(h, h, h)
    assert not [e.name for e in prof.kernels if "fused_attention" in e.name]
    res = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(h, h, h)
    assert res[0].dtype == torch.bfloat16 and res[1].dtype == torch.float32  # the log-sum-exp stays float32
    hc = q.detach().bfloat16()
    torch.testing.assert_close(F.scaled_dot_product_attention(h, h, h).cpu(),
                               F.scaled_dot_product_attention(hc, hc, hc), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("tiles", [(4, 4), (2, 4), (4, 1), (1, 1)])
@pytest.mark.parametrize("shape", [(1, 1, 1), (5, 3, 9), (37, 50, 29), (64, 64, 64), (130, 70, 300)])
def test_matmul_tiles(tiles, shape):
    m, k, n = shape
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    out = np.empty((m, n), np.float32)
    mk.mm(a, b, out, tiles)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m", [3, 40])  # below and above PACK_MIN_ROWS: row-by-row and packed kernels
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt", "sliced"])
def test_matmul_any_operand_layout(m, layout):
    """Operands of any strides: transposed views, column slices; nothing is assumed contiguous."""
    rng = np.random.default_rng(2)
    k, n = 33, 21
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    if layout in ("tn", "tt"):
        a = np.ascontiguousarray(a.T).T
    if layout in ("nt", "tt"):
        b = np.ascontiguousarray(b.T).T  # like nn.Linear's weight.T
    if layout == "sliced":
        a = rng.standard_normal((m, 2 * k), dtype=np.float32)[:, ::2]
        b = rng.standard_normal((k, n + 5), dtype=np.float32)[:, 2:n + 2]
    out = np.empty((m, n), np.float32)
    mk.mm(a, b, out, (4, 4))
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_packs_only_what_needs_it():
    w = np.ones((6, 5), np.float32)  # nn.Linear weight (N, K): its transpose view needs no packing
    assert np.shares_memory(mk.pack_rows(w.T.T), w)
    packed = mk.pack_rows(w.T)
    assert packed.flags.c_contiguous and np.array_equal(packed, w.T)


@pytest.mark.parametrize("shape", [(1, 1), (7, 33), (16, 16), (130, 17), (300, 260)])
def test_blocked_transposes_serial_and_parallel(shape):
    """Partial 16 x 16 blocks at both edges; both kernels (pack_rows picks by size) agree with NumPy."""
    src = np.arange(shape[0] * shape[1], dtype=np.float32).reshape(shape)
    for kernel in (mk._transpose_into, mk._transpose_into_parallel):
        dst = np.full(shape[::-1], -1.0, np.float32)
        kernel(src, dst)
        assert np.array_equal(dst, src.T)
    assert np.array_equal(mk.pack_rows(src.T), src.T)


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_matmul_other_dtypes(dtype):
    rng = np.random.default_rng(3)
    a = rng.integers(-5, 5, (19, 23)).astype(dtype)
    b = rng.integers(-5, 5, (23, 11)).astype(dtype)
    for m in (2, 19):  # row-by-row and packed kernels
        out = np.empty((m, 11), dtype)
        mk.mm(a[:m], b, out)
        np.testing.assert_array_equal(out, a[:m] @ b)


def test_matmul_rejects_unknown_tiles():
    with pytest.raises(ValueError, match="no matmul kernel for tiles"):
        mk.source((8, 128))


@pytest.mark.parametrize("epilogue", ["bias", "relu", "bias_relu"])
def test_matmul_epilogues(epilogue):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((33, 20), dtype=np.float32)
    b = rng.standard_normal((20, 17), dtype=np.float32)
    bias = rng.standard_normal(17, dtype=np.float32)
    out = np.empty((33, 17), np.float32)
    mk.mm(a, b, out, epilogue=epilogue, bias=bias)
    ref = a @ b + (bias if "bias" in epilogue else 0)
    ref = np.maximum(ref, 0) if "relu" in epilogue else ref
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_matmul_source_is_printable():
    src = mk.source((4, 4), "bias_relu")
    assert "prange" in src and "max(v + bias[j], zero)" in src and "s3_3 += a3[kk] * w3[kk]" in src


def test_large_matmul_parallel_path():
    a, b = torch.randn(256, 300), torch.randn(300, 200)
    torch.testing.assert_close((a.npu() @ b.npu()).cpu(), a @ b, rtol=1e-4, atol=1e-3)
    x, y = torch.randn(4, 64, 96), torch.randn(4, 96, 80)
    torch.testing.assert_close(torch.bmm(x.npu(), y.npu()).cpu(), torch.bmm(x, y), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("groups", [1, 2])
def test_conv_bn_relu_folds_batch_norm_for_inference(relu, groups):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 8, 3, padding=1, stride=2, groups=groups)
    bn = torch.nn.BatchNorm2d(8).eval()
    with torch.no_grad():
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2)
        bn.weight.normal_()
        bn.bias.normal_()
    x = torch.randn(2, 4, 9, 9)
    with torch.no_grad():
        ref = bn(conv(x))
        ref = torch.relu(ref) if relu else ref
        args = [t.npu() if t is not None else None for t in (x, conv.weight, conv.bias, bn.weight, bn.bias,
                                                              bn.running_mean, bn.running_var)]
        out = torch.ops.npu.conv_bn_relu(*args, bn.eps, [2, 2], [1, 1], [1, 1], groups, relu)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-5)
    result = opcheck(torch.ops.npu.conv_bn_relu, (*args, bn.eps, [2, 2], [1, 1], [1, 1], groups, relu),
                     test_utils=("test_schema", "test_faketensor"))
    assert all(v == "SUCCESS" for v in result.values())


def test_fused_attention_reads_strided_heads_in_place():
    """Heads split off a projection by reshape+transpose are read where they lie: one launch, no copies."""
    from npu_lab.device import clock

    torch.manual_seed(0)
    proj = torch.randn(3, 7, 3 * 8)
    q, k, v = (z.reshape(3, 7, 2, 4).transpose(1, 2) for z in proj.split(8, dim=-1))
    qn, kn, vn = (z.reshape(3, 7, 2, 4).transpose(1, 2) for z in proj.npu().split(8, dim=-1))
    assert not qn.is_contiguous()
    before = clock.clock(0).launches
    out, lse = torch.ops.npu.fused_attention(qn, kn, vn, None, True, None)
    assert clock.clock(0).launches - before == 1
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.cpu(), torch.logsumexp((q @ k.transpose(-1, -2) / 2).masked_fill(
        torch.ones(7, 7, dtype=torch.bool).triu(1), float("-inf")), -1), rtol=1e-5, atol=1e-5)
