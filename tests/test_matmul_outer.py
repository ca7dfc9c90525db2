"""The matmul kernels: BLAS for float32/float64, and the numba kernels (``blas=False``, integers): the
outer-product kernel (LLVM vector micro-kernel), which products take it, and their results."""

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
    assert mk.choose_kernel(g, w, out, blas=False) == "outer"
    x, wt = _operands(128, 512, 512, False, True, np.float32)  # x @ W.T: both contiguous along K
    assert mk.choose_kernel(x, wt, out, blas=False) == "packed outer"  # W.T is transposed once into a workspace
    assert mk.choose_kernel(x[:32], wt, out[:32], blas=False) == "dot"  # too few rows to pay for the transpose
    gt, h = _operands(512, 128, 512, True, False, np.float32)  # g.T @ h: a weight gradient
    assert mk.choose_kernel(gt, h, np.empty((512, 512), np.float32), blas=False) == "outer"
    # too narrow for a block, or integers: the other kernels
    assert mk.choose_kernel(g[:, :10], w[:10, :10], np.empty((128, 10), np.float32), blas=False) != "outer"
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
        assert mk.choose_kernel(a, b, out, blas=False) == ("outer" if n >= cols else
                                                           mk.choose_kernel(a, b, out, blas=False))
        mk.mm(a, b, out, epilogue=epilogue, bias=None if epilogue == "none" else bias, a_row_sums=sums, blas=False)
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
    """The MLP's weight and input gradients run without a packing copy (numba's kernels, as with BLAS off)."""
    monkeypatch.setattr(mk._blas, "ENABLED", False)
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
    assert mk.choose_kernel(a, b, out, blas=False) == "dot"
    mk.mm(a, b, out, tiles, epilogue="relu", blas=False)
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
    assert mk.choose_kernel(a, b, out, blas=False) == "packed outer"
    mk.mm(a, b, out, epilogue="bias_relu", bias=bias, a_row_sums=sums, blas=False)
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


def test_float_products_take_blas_and_others_the_numba_kernels(monkeypatch):
    f32 = np.empty((8, 8), np.float32)
    assert mk.choose_kernel(f32, f32, f32) == "blas"
    assert mk.choose_kernel(f32.astype(np.float64), f32.astype(np.float64), f32.astype(np.float64)) == "blas"
    ints = np.ones((8, 8), np.int64)
    assert mk.choose_kernel(ints, ints, ints) != "blas"
    assert mk.choose_kernel(f32, f32, np.empty((8, 8), np.float32, order="F")) != "blas"  # out not C-contiguous
    assert mk.choose_kernel(f32, f32.astype(np.float64), f32) != "blas"  # mixed dtypes
    monkeypatch.setattr(mk._blas, "ENABLED", False)
    assert mk.choose_kernel(f32, f32, f32) != "blas"


def _strided(x: np.ndarray, how: str) -> np.ndarray:
    """``x`` (2-D) in another layout with the same values: transposed storage, a step of 2, or a broadcast row."""
    if how == "t":
        return np.ascontiguousarray(x.T).T
    if how == "step":
        wide = np.zeros((x.shape[0], 2 * x.shape[1]), x.dtype)
        wide[:, ::2] = x
        return wide[:, ::2]  # no unit stride: BLAS cannot read it, so it is copied first
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 7, 5), (5, 7, 1), (7, 9, 130), (64, 256, 512), (33, 1, 65)])
@pytest.mark.parametrize("layout", [("c", "c"), ("t", "c"), ("c", "t"), ("step", "t"), ("t", "step")])
def test_blas_products_and_epilogue_pass_match_float64_reference(dtype, m, k, n, layout):
    """BLAS's product in every operand layout, then the epilogue as a pass over the output, and the row sums."""
    rng = np.random.default_rng(7)
    a0, b0 = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    a, b = _strided(a0, layout[0]), _strided(b0, layout[1])
    bias = rng.standard_normal(n).astype(dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    for epilogue in ("none", "bias", "relu", "bias_relu"):
        out, sums = np.full((m, n), np.nan, dtype), np.full(m, np.nan, dtype)
        assert mk.choose_kernel(a, b, out) == "blas"
        mk.mm(a, b, out, epilogue=epilogue, bias=None if epilogue in ("none", "relu") else bias, a_row_sums=sums)
        ref = a0.astype(np.float64) @ b0.astype(np.float64)
        if "bias" in epilogue:
            ref = ref + bias
        if "relu" in epilogue:
            ref = np.maximum(ref, 0)
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * np.sqrt(k))
        np.testing.assert_allclose(sums, a0.astype(np.float64).sum(1), rtol=tol, atol=tol * np.sqrt(k))
        # the numba kernels give the same values (to rounding)
        again = np.full((m, n), np.nan, dtype)
        mk.mm(a, b, again, epilogue=epilogue, bias=None if epilogue in ("none", "relu") else bias, blas=False)
        np.testing.assert_allclose(again, out, rtol=tol, atol=tol * np.sqrt(k))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blas_batched_products_in_any_layout(dtype):
    rng = np.random.default_rng(8)
    a = rng.standard_normal((6, 5, 7)).astype(dtype)
    b = rng.standard_normal((6, 7, 4)).astype(dtype)
    for bb in (b, np.ascontiguousarray(b.transpose(0, 2, 1)).transpose(0, 2, 1), np.repeat(b[:1], 6, 0)):
        out = np.full((6, 5, 4), np.nan, dtype)
        mk.bmm(a, bb, out)
        np.testing.assert_allclose(out, a.astype(np.float64) @ bb.astype(np.float64), rtol=1e-4, atol=1e-4)
    expanded = np.broadcast_to(b[:1], b.shape)  # a zero batch stride (an expanded tensor)
    out = np.full((6, 5, 4), np.nan, dtype)
    mk.bmm(a, expanded, out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ expanded.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_blas_threads_follow_numba(monkeypatch):
    """NumPy's BLAS gets numba's thread count before each product; PyTorch's BLAS is asked for it per call
    (for the calling thread only); PyTorch's own CPU thread count stays as it was."""
    import numba

    from npu_lab.kernels import blas

    torch_threads = torch.get_num_threads()
    before = numba.get_num_threads()
    monkeypatch.setattr(blas, "_threads", -1)  # forget the last count given
    assert blas.sync_threads() == before
    assert blas._controllers, "threadpoolctl found no BLAS library in NumPy"
    assert all(lc.num_threads == before for lc in blas._controllers)
    a = np.ones((64, 64), np.float32)
    numba.set_num_threads(1)
    try:
        out = np.empty_like(a)
        blas._numpy_matmul(a, a, out)  # NumPy's product syncs the count first
        assert all(lc.num_threads == 1 for lc in blas._controllers)
        np.testing.assert_array_equal(out, np.full_like(a, 64))
        out = np.empty_like(a)
        mk.mm(a, a, out)  # whichever BLAS the machine has
        np.testing.assert_array_equal(out, np.full_like(a, 64))
    finally:
        numba.set_num_threads(before)
    blas.sync_threads()
    assert all(lc.num_threads == before for lc in blas._controllers)
    assert torch.get_num_threads() == torch_threads  # PyTorch's own CPU threads are not BLAS's to change


def test_blas_state_is_found_at_import():
    """Nothing about the BLAS libraries is looked up lazily: importing threadpoolctl sets an environment
    variable, which a graded check would report as the learner's doing."""
    import os
    import sys

    from npu_lab.kernels import blas

    assert "threadpoolctl" in sys.modules and "KMP_DUPLICATE_LIB_OK" in os.environ
    assert set(blas._torch_blas) == set(blas.DTYPES)
    before = dict(os.environ)
    out = np.empty((64, 64), np.float64)
    blas.matmul(np.ones((64, 64)), np.ones((64, 64)), out)
    blas._numpy_matmul(np.ones((64, 64)), np.ones((64, 64)), out)
    assert dict(os.environ) == before


def test_blas_compiles_once_under_threads(monkeypatch):
    """The lazily compiled signatures of the BLAS caller are added under a lock (several threads at once)."""
    import threading

    from npu_lab.kernels import blas

    if blas.backend() != "torch":
        pytest.skip("PyTorch exports no BLAS here")
    monkeypatch.setattr(blas, "_signatures", set())
    errors: list[BaseException] = []
    a = np.ones((2, 8, 8), np.float32)

    def run() -> None:
        try:
            out = np.empty_like(a)
            blas.matmul(a, a, out)
            np.testing.assert_array_equal(out, np.full_like(a, 8))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and (np.dtype(np.float32), 3) in blas._signatures



def test_first_products_inside_a_check_change_no_global_state():
    """A learner's first float products (BLAS: PyTorch's or NumPy's, whose thread pool threadpoolctl sets) run
    inside a check without changing global state (an environment variable set by a lazy import would be
    reported as the learner's doing). In a fresh process, so that they really are the first."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import numpy as np, torch, npu_lab
        from npu_lab.grading import isolation
        from npu_lab.kernels import blas
        snap = isolation.snapshot()
        a = torch.randn(64, 32, device="npu", requires_grad=True)
        lin = torch.nn.Linear(32, 16).to("npu")
        lin(a).relu().sum().backward()
        torch.mm(a.detach().double(), a.detach().double().T)
        blas._numpy_matmul(np.ones((8, 8)), np.ones((8, 8)), np.empty((8, 8)))
        blas.sync_threads()
        print("CHANGED", snap.restore())
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CHANGED []" in proc.stdout, proc.stdout[-2000:]
