"""The outer-product matmul kernel (LLVM vector micro-kernel): which products take it, and its results."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from npu_lab import models
from npu_lab.kernels import matmul as mk
from npu_lab.kernels import simd


def _operands(m: int, k: int, n: int, a_t: bool, b_t: bool, dtype: type, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m) if a_t else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if b_t else (k, n)).astype(dtype)
    return (a.T if a_t else a), (b.T if b_t else b)


def test_backward_products_take_the_outer_kernel():
    out = np.empty((128, 512), np.float32)
    g, w = _operands(128, 512, 512, False, False, np.float32)  # grad @ W: W stored (out, in)
    assert mk.choose_kernel(g, w, out) == "outer"
    x, wt = _operands(128, 512, 512, False, True, np.float32)  # x @ W.T: both contiguous along K
    assert mk.choose_kernel(x, wt, out) == "packed outer"  # W.T is transposed once into a workspace
    assert mk.choose_kernel(x[:32], wt, out[:32]) == "dot"  # too few rows to pay for the transpose
    gt, h = _operands(512, 128, 512, True, False, np.float32)  # g.T @ h: a weight gradient
    assert mk.choose_kernel(gt, h, np.empty((512, 512), np.float32)) == "outer"
    # too narrow for a block, or integers: the other kernels
    assert mk.choose_kernel(g[:, :10], w[:10, :10], np.empty((128, 10), np.float32)) != "outer"
    ints = np.ones((8, 8), np.int64)
    assert mk.choose_kernel(ints, np.ones((8, 128), np.int64), np.empty((8, 128), np.int64)) != "outer"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", [(4, 1, 64), (7, 9, 130), (10, 128, 512), (33, 70, 100), (128, 64, 256)])
@pytest.mark.parametrize("a_t", [False, True])
def test_outer_kernel_matches_float64_reference(dtype, m, k, n, a_t):
    a, b = _operands(m, k, n, a_t, False, dtype)
    bias = np.random.default_rng(1).standard_normal(n).astype(dtype)
    cols = simd.TILE_COLS[np.dtype(dtype)]
    for epilogue in ("none", "bias_relu"):
        out, sums = np.full((m, n), np.nan, dtype), np.full(m, np.nan, dtype)
        assert mk.choose_kernel(a, b, out) == ("outer" if n >= cols else mk.choose_kernel(a, b, out))
        mk.mm(a, b, out, epilogue=epilogue, bias=None if epilogue == "none" else bias, a_row_sums=sums)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        if epilogue == "bias_relu":
            ref = np.maximum(ref + bias, 0)
        tol = 1e-4 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * np.sqrt(k))  # every value written
        np.testing.assert_allclose(sums, a.astype(np.float64).sum(1), rtol=tol, atol=tol * np.sqrt(k))


def test_outer_kernel_runs_generated_epilogues():
    """A compiled matmul-epilogue graph whose product has B row-contiguous: backward of a linear+tanh."""
    torch.manual_seed(0)
    x = torch.randn(16, 96)
    w = torch.randn(80, 96, requires_grad=True)

    def f(x, w):
        return torch.tanh(x @ w.T).sum()

    xn, wn = x.npu(), w.detach().npu().requires_grad_()
    compiled = torch.compile(f, backend="npu")
    compiled(xn, wn).backward()
    f(x, w).backward()
    torch.testing.assert_close(wn.grad.cpu(), w.grad, rtol=1e-4, atol=1e-4)


def test_mlp_backward_packs_nothing(monkeypatch):
    """The MLP's weight and input gradients run without a packing copy."""
    packs: list[tuple[int, ...]] = []
    real = mk.pack_rows

    def counting(x, slot=None):
        r = real(x, slot)
        if r is not x:
            packs.append(x.shape)
        return r

    torch.manual_seed(0)
    model = models.mlp(64, 128, 10).npu()
    x, y = models.example_batch(model, 32, "npu")
    loss = models.loss_fn(model, model(x), y)
    monkeypatch.setattr(mk, "pack_rows", counting)
    loss.backward()
    # only the input of the first layer is read transposed (x.T @ grad has B = grad: row-contiguous) -
    # nothing at all is packed
    assert packs == []


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", [(4, 16, 4), (9, 50, 7), (128, 512, 12), (33, 100, 65)])
@pytest.mark.parametrize("tiles", [(4, 4), (1, 2), (2, 1)])
def test_dot_kernel_folds_sums_and_finishes_the_tail(dtype, m, k, n, tiles):
    """The dot kernel's vector tile (k a multiple of the lanes) plus the scalar tail and the edge code."""
    a, b = _operands(m, k, n, False, True, dtype, seed=2)
    out = np.full((m, n), np.nan, dtype)
    assert mk.choose_kernel(a, b, out) == "dot"
    mk.mm(a, b, out, tiles, epilogue="relu")
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64), 0)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * np.sqrt(k))


def test_integer_products_keep_the_generic_kernels():
    a = np.arange(6 * 70, dtype=np.int64).reshape(6, 70) % 7
    b = (np.arange(70 * 80, dtype=np.int64).reshape(70, 80) % 5)
    for bb in (b, np.ascontiguousarray(b.T).T):
        out = np.empty((6, 80), np.int64)
        mk.mm(a, bb, out)
        np.testing.assert_array_equal(out, a @ b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,n", [(512, 512), (256, 512), (37, 70), (16, 16), (5, 3), (100, 17), (512, 10)])
def test_register_transpose_matches_numpy(dtype, m, n):
    """16 x 16 (float32) or 8 x 8 (float64) blocks transposed in registers, plus the edge rows and columns."""
    src = np.random.default_rng(3).standard_normal((m, n)).astype(dtype)
    dst = np.full((n, m), np.nan, dtype)
    simd.transpose_into(src, dst, simd.LANES_OF[np.dtype(dtype)])
    np.testing.assert_array_equal(dst, src.T)
    np.testing.assert_array_equal(mk.pack_rows(src.T), src.T)  # the packing path that uses it


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", [(64, 256, 512), (130, 50, 70), (67, 9, 200)])
def test_packed_outer_matches_float64_reference(dtype, m, k, n):
    """x @ W.T with enough rows: W.T packed into the workspace, then the outer kernel, epilogue included."""
    a, b = _operands(m, k, n, False, True, dtype, seed=4)
    bias = np.random.default_rng(5).standard_normal(n).astype(dtype)
    out, sums = np.full((m, n), np.nan, dtype), np.full(m, np.nan, dtype)
    assert mk.choose_kernel(a, b, out) == "packed outer"
    mk.mm(a, b, out, epilogue="bias_relu", bias=bias, a_row_sums=sums)
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * np.sqrt(k))
    np.testing.assert_allclose(sums, a.astype(np.float64).sum(1), rtol=tol, atol=tol * np.sqrt(k))


def test_workspace_is_reused_grown_and_per_thread():
    first = mk.workspace("test", (64, 64), np.float32)
    again = mk.workspace("test", (32, 16), np.float64)
    assert again.__array_interface__["data"][0] == first.__array_interface__["data"][0]  # same memory
    assert again.shape == (32, 16) and again.dtype == np.float64
    bigger = mk.workspace("test", (256, 256), np.float32)
    assert bigger.nbytes == 256 * 256 * 4
    seen = []
    thread = threading.Thread(target=lambda: seen.append(mk.workspace("test", (64, 64), np.float32)))
    thread.start()
    thread.join()
    assert not np.shares_memory(seen[0], mk.workspace("test", (64, 64), np.float32))
