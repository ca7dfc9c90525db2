"""Scalar functions that generated elementwise kernels call.

Each is a numba function inlined into the loop that uses it, so a generated
kernel such as ``out[i] = gelu_tanh(x0)`` compiles to straight-line code.
"""

import math

import numba
import numpy as np
from numba import types
from numba.extending import overload

from .fast_math import fast_erf, fast_exp, fast_sigmoid, fast_tanh  # noqa: F401 (generated kernels call them)
from .special import *  # noqa: F403 (special functions and PyTorch-exact helpers: generated kernels call them)
from .special import div_floor

_inline = numba.njit(inline="always", cache=True)

SQRT1_2 = 0.7071067811865476
SQRT_2_OVER_PI = 0.7978845608028654


def relu(x):
    """``max(x, 0)`` as the CPU computes it: +0 for every negative (-inf too); -0.0 and NaN pass through."""
    return type(x)(0) if x < 0 else x


def sign(x):
    """-1, 0 or 1 in x's type, as the CPU computes it: sign(+-inf) = +-1, sign(-0.0) = sign(NaN) = +0."""
    return type(x)((x > 0) - (x < 0))


# ``x * 0`` is no typed zero for floats: it is -0.0 for negative x and NaN for infinite x.
@overload(relu, inline="always")
def _ov_relu(x):
    if isinstance(x, types.Float):
        zero = np.float32(0) if x.bitwidth == 32 else np.float64(0)

        def relu_float(x):
            return zero if x < 0 else x
        return relu_float
    if isinstance(x, (types.Integer, types.Boolean)):
        def relu_int(x):
            return x * 0 if x < 0 else x
        return relu_int
    return None


@overload(sign, inline="always")
def _ov_sign(x):
    if isinstance(x, types.Float):
        c = np.float32 if x.bitwidth == 32 else np.float64
        one, zero, minus_one = c(1), c(0), c(-1)

        def sign_float(x):
            return one if x > 0 else (minus_one if x < 0 else zero)
        return sign_float
    if isinstance(x, (types.Integer, types.Boolean)):
        def sign_int(x):
            if x > 0:
                return x * 0 + 1
            if x < 0:
                return x * 0 - 1
            return x * 0
        return sign_int
    return None


@_inline
def sigmoid(x):
    # branch-free so loops using it vectorise; exp(-x) = inf gives exactly 0
    return fast_sigmoid(x)


@_inline
def silu(x):
    return x * sigmoid(x)


# GELU and its gradient stay in the argument's precision: float32 kernels use the
# vectorisable float32 erf/tanh/exp (typed float32 constants, so nothing is promoted
# to float64 and sent through libm one element at a time).

def gelu_erf(x):
    """x * Phi(x), the exact GELU."""
    return 0.5 * x * (1 + math.erf(x * SQRT1_2))


def gelu_tanh(x):
    """GELU's tanh approximation."""
    return 0.5 * x * (1 + math.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


def gelu_erf_grad(g, x):
    """g * d/dx gelu_erf(x)."""
    cdf = 0.5 * (1 + math.erf(x * SQRT1_2))
    return g * (cdf + x * math.exp(-0.5 * x * x) * INV_SQRT_2PI)


def gelu_tanh_grad(g, x):
    """g * d/dx gelu_tanh(x)."""
    inner = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
    t = math.tanh(inner)
    dinner = SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
    return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * dinner)


INV_SQRT_2PI = 0.3989422804014327


def _gelu_impls(f32: bool):
    """numba implementations of the four GELU functions in float32 or float64 arithmetic."""
    c = np.float32 if f32 else np.float64
    half, one, three = c(0.5), c(1.0), c(3.0)
    s12, s2pi, k, inv = c(SQRT1_2), c(SQRT_2_OVER_PI), c(0.044715), c(INV_SQRT_2PI)

    def gelu_erf_impl(x):
        return half * x * (one + fast_erf(x * s12))

    def gelu_tanh_impl(x):
        return half * x * (one + fast_tanh(s2pi * (x + k * x * x * x)))

    def gelu_erf_grad_impl(g, x):
        cdf = half * (one + fast_erf(x * s12))
        return g * (cdf + x * fast_exp(-half * x * x) * inv)

    def gelu_tanh_grad_impl(g, x):
        t = fast_tanh(s2pi * (x + k * x * x * x))
        dinner = s2pi * (one + three * k * x * x)
        return g * (half * (one + t) + half * x * (one - t * t) * dinner)

    return gelu_erf_impl, gelu_tanh_impl, gelu_erf_grad_impl, gelu_tanh_grad_impl


_F32_IMPLS, _F64_IMPLS = _gelu_impls(True), _gelu_impls(False)


def _pick(x, i: int):
    if isinstance(x, types.Float):
        return (_F32_IMPLS if x.bitwidth == 32 else _F64_IMPLS)[i]
    return None


@overload(gelu_erf, inline="always")
def _ov_gelu_erf(x):
    return _pick(x, 0)


@overload(gelu_tanh, inline="always")
def _ov_gelu_tanh(x):
    return _pick(x, 1)


@overload(gelu_erf_grad, inline="always")
def _ov_gelu_erf_grad(g, x):
    return _pick(x, 2)


@overload(gelu_tanh_grad, inline="always")
def _ov_gelu_tanh_grad(g, x):
    return _pick(x, 3)


# Mish, ``x * tanh(softplus(x))``, and its gradient. With ``u = e**x``, ``tanh(log1p(u))`` is
# ``(u*u + 2*u) / (u*u + 2*u + 2)``: float32 kernels use that form (one vectorisable exp, no libm
# log1p); float64 ones keep libm's log1p and tanh. Above x = 20 the ratio is 1 in float32.

def mish(x):
    """x * tanh(log1p(exp(x)))."""
    return x * math.tanh(math.log1p(math.exp(x)))


def mish_grad(g, x):
    """g * d/dx mish(x) = g * (t + x * sigmoid(x) * (1 - t*t)) with t = tanh(softplus(x))."""
    t = math.tanh(math.log1p(math.exp(x)))
    return g * (t + x * (1 / (1 + math.exp(-x))) * (1 - t * t))


_ONE32, _TWO32, _TWENTY32 = np.float32(1), np.float32(2), np.float32(20)


@_inline
def _tanh_softplus_f32(x):
    u = fast_exp(x)
    n = u * (u + _TWO32)
    return _ONE32 if x > _TWENTY32 else n / (n + _TWO32)


def _mish_impls(f32: bool):
    if not f32:
        def mish_f64(x):
            return x * math.tanh(math.log1p(math.exp(x)))

        def mish_grad_f64(g, x):
            t = math.tanh(math.log1p(math.exp(x)))
            return g * (t + x * (1 / (1 + math.exp(-x))) * (1 - t * t))
        return mish_f64, mish_grad_f64
    def mish_f32(x):
        return x * _tanh_softplus_f32(x)

    def mish_grad_f32(g, x):
        t = _tanh_softplus_f32(x)
        return g * (t + x * fast_sigmoid(x) * (_ONE32 - t * t))
    return mish_f32, mish_grad_f32


_MISH = {32: _mish_impls(True), 64: _mish_impls(False)}


@overload(mish, inline="always")
def _ov_mish(x):
    return _MISH[x.bitwidth][0] if isinstance(x, types.Float) else None


@overload(mish_grad, inline="always")
def _ov_mish_grad(g, x):
    return _MISH[x.bitwidth][1] if isinstance(x, types.Float) else None


@_inline
def rsqrt(x):
    return 1 / math.sqrt(x)


@_inline
def clamp(x, lo, hi):
    if x != x:
        return x
    if x < lo:
        x = lo
    if x > hi:
        x = hi
    return x


@_inline
def where(c, a, b):
    return a if c else b


@_inline
def floor_div(a, b):
    """Floor division of floats, PyTorch's way (see :func:`npu_lab.kernels.special.div_floor`)."""
    return div_floor(a, b)


@_inline
def trunc_div(a, b):
    """Truncating division of floats: trunc(a / b), a float (inf and NaN stay what they are)."""
    return np.trunc(a / b)


@_inline
def int_floor_div(a, b):
    return a // b


@_inline
def int_trunc_div(a, b):
    q = a // b
    if q < 0 and q * b != a:
        q += 1
    return q


@_inline
def dropout_keep(bits, threshold):
    """Does dropout keep an element with these 64 random bits? ``(bits >> 11) / 2**53 >= p``, with
    ``threshold = ceil(p * 2**53)``: the test eager dropout makes, in exact integers."""
    return (np.uint64(bits) >> np.uint64(11)) >= np.uint64(threshold)
