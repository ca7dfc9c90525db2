"""The vectorisable float32 exp/tanh/sigmoid/erf that generated kernels call, against the exact values and
PyTorch's CPU."""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest
import torch

from npu_lab.kernels.fast_math import fast_erf, fast_exp, fast_sigmoid, fast_tanh

SPECIAL = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-30, -1e-30, 0.624, -0.626, 9.5, -20.0,
           88.7, 88.8, -87.3, -100.0, -104.0, 1e-8]


@numba.njit(cache=True)
def _apply(which, x, out):
    for i in range(x.shape[0]):
        if which == 0:
            out[i] = fast_exp(x[i])
        elif which == 1:
            out[i] = fast_tanh(x[i])
        else:
            out[i] = fast_sigmoid(x[i])


CASES = [(0, torch.exp), (1, torch.tanh), (2, torch.sigmoid)]


def _inputs(dtype: np.dtype) -> np.ndarray:
    rng = np.random.default_rng(0)
    body = np.concatenate([rng.standard_normal(20000) * s for s in (0.1, 1.0, 10.0, 40.0)])
    return np.concatenate([np.array(SPECIAL), body]).astype(dtype)


def _ulps(got: np.ndarray, want: np.ndarray) -> float:
    finite = np.isfinite(want)
    spacing = np.spacing(np.abs(want[finite]).astype(np.float32))
    return float(np.max(np.abs(got[finite].astype(np.float64) - want[finite].astype(np.float64)) / spacing))


@pytest.mark.parametrize("which,ref", CASES, ids=["exp", "tanh", "sigmoid"])
def test_float32_within_two_ulps_of_the_exact_value(which, ref):
    """Against the float64 value rounded to float32, not against torch's float32 kernels: those are 1-3 ulps
    from it themselves, and which ulps depends on the CPU (torch's AVX2 sigmoid is 2 ulps from this one, its
    plain C++ one 3 ulps)."""
    x = _inputs(np.float32)
    out = np.empty_like(x)
    _apply(which, x, out)
    want = ref(torch.from_numpy(x)).numpy()
    # NaN where torch has NaN, the same infinities and signed zeros
    assert np.array_equal(np.isnan(out), np.isnan(want))
    assert np.array_equal(out[np.isinf(want)], want[np.isinf(want)])
    assert np.array_equal(np.signbit(out[want == 0]), np.signbit(want[want == 0]))
    exact = ref(torch.from_numpy(x).double()).float().numpy()
    tiny = np.finfo(np.float32).tiny
    normal = np.isfinite(exact) & (np.abs(exact) >= tiny)
    assert _ulps(out[normal], exact[normal]) <= 2.0
    # below the normal range an ulp is a fixed step: within one of the smallest normal number
    small = np.isfinite(exact) & ~normal
    assert np.all(np.abs(out[small].astype(np.float64) - exact[small]) <= tiny)


@pytest.mark.parametrize("which,ref", CASES, ids=["exp", "tanh", "sigmoid"])
def test_float64_keeps_libm_accuracy(which, ref):
    x = _inputs(np.float64)
    out = np.empty_like(x)
    _apply(which, x, out)
    want = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-14, atol=0)


def test_subnormal_and_overflow_edges_of_exp():
    x = np.array([-103.0, -95.0, -87.5, 88.72, 88.73], dtype=np.float32)
    out = np.empty_like(x)
    _apply(0, x, out)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)
    assert out[0] > 0 and out[1] > 0  # gradual underflow, not flushed to zero
    np.testing.assert_allclose(out[:4], want[:4], rtol=3e-7)
    assert np.isinf(out[4]) and np.isinf(want[4])


def test_a_loop_calling_them_vectorises():
    """The point of the module: LLVM turns the loop into vector code (libm's expf would stop it)."""

    @numba.njit(error_model="numpy")  # as the lab's kernels: no Python ZeroDivisionError checks
    def kernel(x, out):
        for i in range(x.shape[0]):
            out[i] = fast_tanh(x[i]) * fast_sigmoid(x[i])

    x = np.zeros(64, dtype=np.float32)
    kernel(x, np.empty_like(x))
    llvm = next(iter(kernel.inspect_llvm().values()))
    assert "x float>" in llvm  # vector-of-float instructions such as <4 x float> / <8 x float>
    assert "@expf" not in llvm and "@tanhf" not in llvm


@numba.njit(cache=True)
def _erf(x, out):
    for i in range(x.shape[0]):
        out[i] = fast_erf(x[i])


def test_float32_erf_close_to_torch_and_exact_at_the_edges():
    x = _inputs(np.float32)
    out = np.empty_like(x)
    _erf(x, out)
    want = torch.erf(torch.from_numpy(x)).numpy()
    assert np.array_equal(np.isnan(out), np.isnan(want))
    finite = ~np.isnan(want)
    # absolute error below 5e-7 everywhere (GELU multiplies it by x/2); +-1 exactly in the tails
    assert np.max(np.abs(out[finite].astype(np.float64) - want[finite])) < 5e-7
    tails = np.abs(x) >= 4
    np.testing.assert_array_equal(out[tails], np.sign(x[tails]))
    small = np.abs(x) < 1e-3  # erf(x) ~ 2x/sqrt(pi) near zero: relative accuracy there too
    np.testing.assert_allclose(out[small & (x != 0)], want[small & (x != 0)], rtol=2e-6)


def test_float64_erf_is_libm():
    x = _inputs(np.float64)
    out = np.empty_like(x)
    _erf(x, out)
    np.testing.assert_allclose(out, torch.erf(torch.from_numpy(x)).numpy(), rtol=1e-14, atol=0)


def test_gelu_kernels_vectorise_in_float32():
    from npu_lab.kernels.scalar_math import gelu_erf, gelu_erf_grad

    @numba.njit(error_model="numpy")
    def kernel(g, x, out):
        for i in range(x.shape[0]):
            out[i] = gelu_erf(x[i]) + gelu_erf_grad(g[i], x[i])

    x = np.linspace(-5, 5, 64).astype(np.float32)
    out = np.empty_like(x)
    kernel(x, x, out)
    llvm = next(iter(kernel.inspect_llvm().values()))
    assert "x float>" in llvm and "@erf" not in llvm  # vector code, no libm erf call per element
    xt = torch.from_numpy(x).requires_grad_()
    ref = torch.nn.functional.gelu(xt)
    (gx,) = torch.autograd.grad(ref, xt, torch.from_numpy(x))
    np.testing.assert_allclose(out, (ref + gx).detach().numpy(), rtol=1e-5, atol=2e-6)
