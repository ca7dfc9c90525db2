"""Scalar functions that generated elementwise kernels call.

Each is a numba function inlined into the loop that uses it, so a generated
kernel such as ``out[i] = gelu_tanh(x0)`` compiles to straight-line code.
"""

import math

import numba

from .fast_math import fast_exp, fast_sigmoid, fast_tanh  # noqa: F401 (generated kernels call them)

_inline = numba.njit(inline="always", cache=True)

SQRT1_2 = 0.7071067811865476
SQRT_2_OVER_PI = 0.7978845608028654


@_inline
def relu(x):
    return x if x > 0 else x * 0


@_inline
def sigmoid(x):
    # branch-free so loops using it vectorise; exp(-x) = inf gives exactly 0
    return fast_sigmoid(x)


@_inline
def silu(x):
    return x * sigmoid(x)


@_inline
def gelu_erf(x):
    return 0.5 * x * (1 + math.erf(x * SQRT1_2))


@_inline
def gelu_tanh(x):
    return 0.5 * x * (1 + math.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


@_inline
def gelu_erf_grad(g, x):
    cdf = 0.5 * (1 + math.erf(x * SQRT1_2))
    pdf = math.exp(-0.5 * x * x) * 0.3989422804014327
    return g * (cdf + x * pdf)


@_inline
def gelu_tanh_grad(g, x):
    x3 = x * x * x
    inner = SQRT_2_OVER_PI * (x + 0.044715 * x3)
    t = math.tanh(inner)
    left = 0.5 * x
    right = 1 + t
    left_d = 0.5 * right
    dinner = SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
    right_d = left * (1 - t * t) * dinner
    return g * (left_d + right_d)


@_inline
def rsqrt(x):
    return 1 / math.sqrt(x)


@_inline
def sign(x):
    if x > 0:
        return x * 0 + 1
    if x < 0:
        return x * 0 - 1
    return x * 0


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
    return math.floor(a / b)


@_inline
def trunc_div(a, b):
    return math.trunc(a / b)


@_inline
def int_floor_div(a, b):
    return a // b


@_inline
def int_trunc_div(a, b):
    q = a // b
    if q < 0 and q * b != a:
        q += 1
    return q
