"""Vectorisable float32 ``exp``, ``tanh`` and ``erf`` for generated kernels.

LLVM cannot vectorise a loop that calls the C library's ``expf``/``tanhf`` (numba
has no vector math library unless Intel's SVML is installed), so a kernel such
as ``sigmoid(x) * tanh(x)`` runs one element at a time, several times slower than
PyTorch's CPU kernels, which use SLEEF's vector functions. The functions here are
the classic Cephes single-precision algorithms written branch-free (selects,
not jumps), so the loops that inline them vectorise:

* ``exp``: ``x = k·ln2 + r`` with ``|r| <= ln2/2``, a degree-6 polynomial for
  ``e^r``, and ``2^k`` built from the exponent bits (in two halves, so results
  near overflow and in the subnormal range are exact too). Error <= 1 ulp.
* ``tanh``: an odd polynomial for ``|x| < 0.625``, ``1 - 2/(e^{2|x|} + 1)``
  above, with the sign restored. Error about 2 ulp.
* ``erf``: the input clamped to ``[-4, 4]`` (beyond, erf is ±1 in float32) and
  an odd degree-13 over even degree-8 rational function, the approximation
  Eigen and XLA use for float32. Absolute error below 5e-7 (GELU needs it).

Both propagate NaN and give PyTorch's results at ±inf. :func:`fast_exp`,
:func:`fast_tanh` and :func:`fast_sigmoid` use them for float32 arguments and ``math.exp``/``math.tanh``
for everything else, so float64 kernels keep libm's accuracy.
"""

from __future__ import annotations

import math
import warnings

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core.errors import NumbaIRAssumptionWarning
from numba.extending import intrinsic, overload

__all__ = ["fast_erf", "fast_exp", "fast_sigmoid", "fast_tanh"]

# The helpers below are inlined at numba's IR level (inline="always"), not left to LLVM: a
# cached numba function is linked as object code, which LLVM cannot inline, and a loop that
# calls a function does not vectorise, so kernels would be fast or slow depending on what
# happened to be in numba's cache. numba's IR inliner then trips its own "pedantic" SSA check
# on the selects inside these helpers (numba 0.68: NumbaIRAssumptionWarning "variable ...
# is not in scope"); the code it produces is correct (tests/test_fast_math.py), so that one
# warning is silenced for these helpers only.
warnings.filterwarnings("ignore", message=r"variable '.*_(exp|tanh|erf)_f32.*' is not in scope",
                        category=NumbaIRAssumptionWarning)

_f = np.float32

_LOG2E = _f(1.4426950408889634)
_LN2_HI = _f(0.693359375)  # ln 2 split in two so k·ln2 is exact for the k that occur
_LN2_LO = _f(-2.12194440e-4)
_E0, _E1, _E2, _E3, _E4, _E5 = (_f(1.9875691500e-4), _f(1.3981999507e-3), _f(8.3334519073e-3),
                                _f(4.1665795894e-2), _f(1.6666665459e-1), _f(5.0000001201e-1))
_T0, _T1, _T2, _T3, _T4 = (_f(-5.70498872745e-3), _f(2.06390887954e-2), _f(-5.37397155531e-2),
                           _f(1.33314422036e-1), _f(-3.33332819422e-1))
_EXP_HI = _f(88.72283)   # above: +inf
_EXP_LO = _f(-103.97208)  # below: 0 (the smallest subnormal is e^-103.28)
_TANH_SMALL = _f(0.625)
_ONE, _TWO, _HALF, _ZERO, _INF = _f(1.0), _f(2.0), _f(0.5), _f(0.0), _f(np.inf)
# erf(x) ~ x P(x^2) / Q(x^2) on [-4, 4]
_ERF_CLAMP = _f(4.0)
_EA0, _EA1, _EA2, _EA3, _EA4, _EA5, _EA6 = (
    _f(-2.72614225801306e-10), _f(2.77068142495902e-08), _f(-2.10102402082508e-06), _f(-5.69250639462346e-05),
    _f(-7.34990630326855e-04), _f(-2.95459980854025e-03), _f(-1.60960333262415e-02))
_EB0, _EB1, _EB2, _EB3, _EB4 = (_f(-1.45660718464996e-05), _f(-2.13374055278905e-04), _f(-1.68282697438203e-03),
                                _f(-7.37332916720468e-03), _f(-1.42647390514189e-02))
_BIAS, _MANT = np.int32(127), np.int32(23)


@intrinsic
def _pow2_bits(typingctx, k):
    """The float32 whose bits are ``(k + 127) << 23``: ``2**k`` for -126 <= k <= 127."""
    if not isinstance(k, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        k32 = context.cast(builder, args[0], signature.args[0], types.int32)
        bits = builder.shl(builder.add(k32, ir.Constant(ir.IntType(32), 127)), ir.Constant(ir.IntType(32), 23))
        return builder.bitcast(bits, ir.FloatType())

    return types.float32(k), codegen


@numba.njit(inline="always", cache=True)
def _exp_f32(x):
    xc = _EXP_HI if x > _EXP_HI else (_EXP_LO if x < _EXP_LO else x)
    k = np.floor(xc * _LOG2E + _HALF)
    r = xc - k * _LN2_HI - k * _LN2_LO
    y = (((((_E0 * r + _E1) * r + _E2) * r + _E3) * r + _E4) * r + _E5) * (r * r) + r + _ONE
    ki = np.int32(k)
    half = ki >> np.int32(1)
    y = y * _pow2_bits(half) * _pow2_bits(ki - half)
    y = _INF if x > _EXP_HI else y
    y = _ZERO if x < _EXP_LO else y
    return x if x != x else y


@numba.njit(inline="always", cache=True)
def _tanh_f32(x):
    ax = abs(x)
    z = x * x
    small = ((((_T0 * z + _T1) * z + _T2) * z + _T3) * z + _T4) * z * x + x
    small = x if z == _ZERO else small  # keeps the sign of -0.0
    e = _exp_f32(_TWO * ax)
    big = _ONE - _TWO / (e + _ONE)
    big = -big if x < _ZERO else big
    return small if ax < _TANH_SMALL else big


@numba.njit(inline="always", cache=True)
def _erf_f32(x):
    xc = _ERF_CLAMP if x > _ERF_CLAMP else (-_ERF_CLAMP if x < -_ERF_CLAMP else x)
    z = xc * xc
    p = ((((((_EA0 * z + _EA1) * z + _EA2) * z + _EA3) * z + _EA4) * z + _EA5) * z + _EA6) * xc
    q = (((_EB0 * z + _EB1) * z + _EB2) * z + _EB3) * z + _EB4
    return x if x != x else p / q


def fast_erf(x):
    """``erf(x)``: vectorisable for float32, ``math.erf`` otherwise."""
    return math.erf(x)


def fast_exp(x):
    """``e**x``: vectorisable for float32, ``math.exp`` otherwise."""
    return math.exp(x)


def fast_tanh(x):
    """``tanh(x)``: vectorisable for float32, ``math.tanh`` otherwise."""
    return math.tanh(x)


def fast_sigmoid(x):
    """``1 / (1 + e**-x)``: vectorisable and computed in float32 for float32 ``x``."""
    return 1 / (1 + math.exp(-x))


def _is_f32(x) -> bool:
    return isinstance(x, types.Float) and x.bitwidth == 32


@overload(fast_exp, inline="always")
def _fast_exp(x):
    if _is_f32(x):
        return lambda x: _exp_f32(x)
    return lambda x: math.exp(x)


@overload(fast_erf, inline="always")
def _fast_erf(x):
    if _is_f32(x):
        return lambda x: _erf_f32(x)
    return lambda x: math.erf(x)


@overload(fast_tanh, inline="always")
def _fast_tanh(x):
    if _is_f32(x):
        return lambda x: _tanh_f32(x)
    return lambda x: math.tanh(x)


@overload(fast_sigmoid, inline="always")
def _fast_sigmoid(x):
    if _is_f32(x):
        return lambda x: _ONE / (_ONE + _exp_f32(-x))
    return lambda x: 1 / (1 + math.exp(-x))
