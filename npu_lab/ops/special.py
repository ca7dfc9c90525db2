"""Special functions: the gamma family, Bessel and Airy functions, error functions, orthogonal polynomials.

Each operator is a template for :func:`npu_lab.ops.pointwise.pointwise` calling a
numba function from :mod:`npu_lab.kernels.special` (re-exported to generated kernels by
:mod:`npu_lab.kernels.scalar_math`). Those functions compute in float64 and the kernel
rounds on store, so float32 results are at least as accurate as the CPU's.

``torch.special.*`` names that PyTorch implements by calling other operators
(``special.polygamma``, ``special.gammainc``, ``special.xlogy``, ``special.digamma``...)
need nothing here: they reach the ATen operators registered below.
"""

from __future__ import annotations

import torch

from .pointwise import _binary_family, _promote, pointwise
from .registry import register


def _special_unary(name: str, template: str, flops: float) -> None:
    """Register ``name`` and ``name.out`` (the ``special_*`` operators have no in-place form)."""

    def functional(self):
        return pointwise(name, template, (self,), to_float=True, flops=flops)

    def out_form(self, *, out):
        return pointwise(name, template, (self,), out=out, to_float=True, flops=flops)

    functional.__doc__ = f"Elementwise ``{template.format('x')}``."
    register(name)(functional)
    register(f"{name}.out")(out_form)


#: ATen name -> template (numba functions of one float64 argument)
SPECIAL_UNARY: dict[str, tuple[str, float]] = {
    "special_i0e": ("i0e(float({0}))", 40),
    "special_i1": ("i1(float({0}))", 40),
    "special_i1e": ("i1e(float({0}))", 40),
    "special_ndtri": ("ndtri(float({0}))", 30),
    "special_log_ndtr": ("log_ndtr(float({0}))", 30),
    "special_erfcx": ("erfcx(float({0}))", 30),
    "special_entr": ("entr(float({0}))", 10),
    "special_airy_ai": ("airy_ai(float({0}))", 60),
    "special_bessel_j0": ("bessel_j0(float({0}))", 40),
    "special_bessel_j1": ("bessel_j1(float({0}))", 40),
    "special_bessel_y0": ("bessel_y0(float({0}))", 50),
    "special_bessel_y1": ("bessel_y1(float({0}))", 50),
    "special_modified_bessel_i0": ("i0(float({0}))", 40),
    "special_modified_bessel_i1": ("i1(float({0}))", 40),
    "special_modified_bessel_k0": ("modified_k0(float({0}))", 60),
    "special_modified_bessel_k1": ("modified_k1(float({0}))", 60),
    "special_scaled_modified_bessel_k0": ("scaled_k0(float({0}))", 60),
    "special_scaled_modified_bessel_k1": ("scaled_k1(float({0}))", 60),
    "special_spherical_bessel_j0": ("spherical_j0(float({0}))", 12),
}
for _name, (_template, _flops) in SPECIAL_UNARY.items():
    _special_unary(_name, _template, _flops)


# Two-argument functions: zeta(x, q), xlog1py(x, y), the incomplete gamma functions, and the
# polynomials p_n(x) (ATen's x_scalar/n_scalar overloads wrap the scalar and call these).
_binary_family("special_zeta", "zeta(float({0}), float({1}))", overloads=("default",), to_float=True,
               inplace=False, flops=100)
_binary_family("special_xlog1py", "xlog1py({0}, {1})", overloads=("default",), to_float=True, inplace=False,
               flops=10)
_binary_family("igamma", "igamma(float({0}), float({1}))", overloads=("default",), flops=200)
_binary_family("igammac", "igammac(float({0}), float({1}))", overloads=("default",), flops=200)

POLYNOMIALS: dict[str, str] = {
    "special_chebyshev_polynomial_t": "chebyshev_t",
    "special_chebyshev_polynomial_u": "chebyshev_u",
    "special_chebyshev_polynomial_v": "chebyshev_v",
    "special_chebyshev_polynomial_w": "chebyshev_w",
    "special_shifted_chebyshev_polynomial_t": "shifted_chebyshev_t",
    "special_shifted_chebyshev_polynomial_u": "shifted_chebyshev_u",
    "special_shifted_chebyshev_polynomial_v": "shifted_chebyshev_v",
    "special_shifted_chebyshev_polynomial_w": "shifted_chebyshev_w",
    "special_laguerre_polynomial_l": "laguerre_l",
    "special_legendre_polynomial_p": "legendre_p",
}
for _name, _fn in POLYNOMIALS.items():
    _binary_family(_name, f"{_fn}(float({{0}}), float({{1}}))", overloads=("default",), to_float=True,
                   inplace=False, flops=20)


def _hermite(name: str, fn: str) -> None:
    """Hermite polynomials give NaN above a degree that depends on the dtype (128 for float32, 512 above)."""

    def template(x, n) -> str:
        limit = 128 if _promote((x, n)) in (torch.float32, torch.float16, torch.bfloat16) else 512
        return f"{fn}(float({{0}}), float({{1}}), {limit})"

    def functional(x, n):
        return pointwise(name, template(x, n), (x, n), to_float=True, flops=20)

    def out_form(x, n, *, out):
        return pointwise(name, template(x, n), (x, n), out=out, to_float=True, flops=20)

    functional.__doc__ = f"The Hermite polynomial of degree ``n`` at ``x`` ({fn})."
    register(name)(functional)
    register(f"{name}.out")(out_form)


_hermite("special_hermite_polynomial_h", "hermite_h")
_hermite("special_hermite_polynomial_he", "hermite_he")


def _polygamma(n: int, self: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    return pointwise("polygamma", f"polygamma({int(n)}, float({{0}}))", (self,), out=out, to_float=True, flops=100)


@register("polygamma")
def polygamma(n, self):
    """The n-th derivative of digamma (n = 0: digamma, 1: trigamma, then through Hurwitz's zeta)."""
    return _polygamma(n, self)


@register("polygamma.out")
def polygamma_out(n, self, *, out):
    return _polygamma(n, self, out=out)
