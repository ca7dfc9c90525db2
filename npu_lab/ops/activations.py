"""Activation functions and their backwards: hardswish, hardsigmoid, elu (celu, selu), leaky_relu, hardtanh
(relu6), softplus, softshrink, hardshrink, glu, log_sigmoid, mish, prelu and rrelu.

Each elementwise one is a scalar expression run by :func:`npu_lab.ops.pointwise.pointwise` (type promotion,
broadcasting, strides and ``out=`` handled there), written as PyTorch's CPU kernels write it
(``aten/src/ATen/native/cpu/Activation.cpp``) so the results agree to the last bit or two. Constants are
named scalars, so they take the tensor's dtype and a float32 kernel stays in float32. The operators with
two outputs (log_sigmoid's buffer, prelu's two gradients, glu's two halves) run one generated kernel that
writes both.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..device.rng import generator as device_generator
from ..kernels import activations as ak
from ..kernels import elementwise
from .common import NUMPY_DTYPES, as_array, check_same_device, empty, launch, nbytes, resize_out, run_elementwise
from .pointwise import check_written, pointwise
from .registry import register

#: PyTorch's short dtype names, as its "not implemented for 'Long'" errors spell them.
DTYPE_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
    torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
}

_ONE_SIXTH = float(np.float32(1.0) / np.float32(6.0))  # the CPU kernels' `1.0f / 6.0f`, in every dtype


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.int64`` -> ``"Long"``, as PyTorch's dtype errors name it."""
    return DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def check_floating(kernel: str, *tensors: torch.Tensor | None) -> None:
    """PyTorch's error for an operator whose kernel exists for floating types only."""
    for t in tensors:
        if t is not None and not t.is_floating_point():
            raise NotImplementedError(f'"{kernel}_npu" not implemented for \'{dtype_name(t.dtype)}\'')


def check_same_dtype(expected: torch.Tensor, *others: torch.Tensor | None) -> None:
    """TensorIterator's check for operators that do not promote: every tensor has ``expected``'s dtype."""
    for t in others:
        if t is not None and t.dtype != expected.dtype:
            raise RuntimeError(f"Found dtype {dtype_name(t.dtype)} but expected {dtype_name(expected.dtype)}")


def _unary(name: str, kernel: str, template: str, named: dict, self: torch.Tensor, out: torch.Tensor | None,
           inplace: bool, flops: float) -> torch.Tensor:
    """A floating-only unary activation: functional, in-place (``out is self``) or ``out=``."""
    check_floating(kernel, self)
    if out is not None and not inplace:
        check_same_device(f"aten::{name}", self, out)
        check_same_dtype(self, out)
    return pointwise(name, template, (self,), named=named, out=out, inplace=inplace, flops=flops)


def _register_unary(name: str, kernel: str, build, *, flops: float, inplace: bool = True,
                    defaults: Sequence[object] = ()) -> None:
    """Register ``name``, ``name_`` and ``name.out``; ``build(*scalars) -> (template, named)``."""

    def functional(self, *scalars):
        template, named = build(*scalars, *defaults[len(scalars):])
        return _unary(name, kernel, template, named, self, None, False, flops)

    def in_place(self, *scalars):
        template, named = build(*scalars, *defaults[len(scalars):])
        return _unary(name, kernel, template, named, self, self, True, flops)

    def out_form(self, *scalars, out):
        template, named = build(*scalars, *defaults[len(scalars):])
        return _unary(name, kernel, template, named, self, out, False, flops)

    for fn, suffix in ((functional, ""), (in_place, "_"), (out_form, ".out")):
        fn.__name__ = f"{name}{suffix.replace('.', '_')}"
        fn.__doc__ = f"aten::{name}{suffix}: {build.__doc__}"
    register(name)(functional)
    if inplace:
        register(f"{name}_")(in_place)
    register(f"{name}.out")(out_form)


def _binary(name: str, template: str, grad: torch.Tensor, x: torch.Tensor, named: dict,
            grad_input: torch.Tensor | None, flops: float) -> torch.Tensor:
    """A backward ``f(grad, x)``, promoting like TensorIterator's binary ops (or into ``grad_input``)."""
    check_same_device(f"aten::{name}", grad, x)
    return pointwise(name, template, (grad, x), named=named, out=grad_input, flops=flops)


# ---------------------------------------------------------------------------
# hardswish, hardsigmoid


def _hardswish(*_):
    """x * min(max(x + 3, 0), 6) / 6."""
    return "{0} * min(max({0} + three, zero), six) / six", {"three": 3, "zero": 0, "six": 6}


def _hardsigmoid(*_):
    """min(max(x + 3, 0), 6) / 6."""
    return "min(max({0} + three, zero), six) / six", {"three": 3, "zero": 0, "six": 6}


_register_unary("hardswish", "hardswish", _hardswish, flops=4)
_register_unary("hardsigmoid", "hardsigmoid", _hardsigmoid, flops=3)


@register("hardswish_backward")
def hardswish_backward(grad_output: torch.Tensor, self: torch.Tensor) -> torch.Tensor:
    """grad * (x / 3 + 1/2) inside (-3, 3), grad from 3 up, 0 from -3 down."""
    check_floating("hardswish_backward", grad_output, self)
    return _binary("hardswish_backward", "zero if {1} <= -three else ({0} * ({1} / three + half) if {1} < three "
                   "else {0})", grad_output, self, {"zero": 0, "three": 3, "half": 0.5}, None, 4)


@register("hardsigmoid_backward")
def hardsigmoid_backward(grad_output: torch.Tensor, self: torch.Tensor) -> torch.Tensor:
    """grad / 6 on (-3, 3), 0 elsewhere."""
    return _hardsigmoid_backward(grad_output, self, None)


@register("hardsigmoid_backward.grad_input")
def hardsigmoid_backward_out(grad_output: torch.Tensor, self: torch.Tensor, *,
                             grad_input: torch.Tensor) -> torch.Tensor:
    """hardsigmoid_backward into ``grad_input``."""
    return _hardsigmoid_backward(grad_output, self, grad_input)


def _hardsigmoid_backward(grad_output, self, grad_input):
    check_floating("hardsigmoid_backward", grad_output, self)
    return _binary("hardsigmoid_backward", "{0} * sixth if ({1} > -three and {1} < three) else zero",
                   grad_output, self, {"sixth": _ONE_SIXTH, "three": 3, "zero": 0}, grad_input, 2)


# ---------------------------------------------------------------------------
# elu (celu and selu are elu with other constants)


def _elu_coefficients(dtype: torch.dtype, alpha, scale, input_scale) -> dict:
    """elu's coefficients as the CPU forms them: ``alpha * scale`` multiplied in the tensor's dtype."""
    np_type = NUMPY_DTYPES[dtype]
    return {"negcoef": np_type(alpha) * np_type(scale), "poscoef": scale, "negiptcoef": input_scale}


def _elu_call(self, alpha, scale, input_scale, out, inplace):
    check_floating("elu", self)
    if out is not None and not inplace:
        check_same_device("aten::elu", self, out)
        check_same_dtype(self, out)
    named = {"one": 1, "zero": 0, **_elu_coefficients(self.dtype, alpha, scale, input_scale)}
    return pointwise("elu", "(fast_exp({0} * negiptcoef) - one) * negcoef if {0} <= zero else {0} * poscoef",
                     (self,), named=named, out=out, inplace=inplace, flops=6)


@register("elu")
def elu(self: torch.Tensor, alpha=1, scale=1, input_scale=1) -> torch.Tensor:
    """(exp(x * input_scale) - 1) * alpha * scale for x <= 0, x * scale above."""
    return _elu_call(self, alpha, scale, input_scale, None, False)


@register("elu_")
def elu_(self: torch.Tensor, alpha=1, scale=1, input_scale=1) -> torch.Tensor:
    """elu in place."""
    return _elu_call(self, alpha, scale, input_scale, self, True)


@register("elu.out")
def elu_out(self: torch.Tensor, alpha=1, scale=1, input_scale=1, *, out: torch.Tensor) -> torch.Tensor:
    """elu into ``out``."""
    return _elu_call(self, alpha, scale, input_scale, out, False)


def _elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result, grad_input):
    if is_result and float(alpha) < 0:
        raise RuntimeError(
            "In-place elu backward calculation is triggered with a negative slope which is not supported. "
            "This is caused by calling in-place forward function with a negative slope, please call "
            "out-of-place version instead.")
    check_floating("elu_backward", grad_output, self_or_result)
    dtype = torch.promote_types(grad_output.dtype, self_or_result.dtype)
    named = {"zero": 0, **_elu_coefficients(dtype, alpha, scale, input_scale)}
    if is_result:  # the saved output y: d/dx = input_scale * (y + alpha * scale) where y <= 0
        template = "{0} * negiptcoef * ({1} + negcoef) if {1} <= zero else {0} * poscoef"
    else:
        template = "{0} * negiptcoef * negcoef * fast_exp({1} * negiptcoef) if {1} <= zero else {0} * poscoef"
    return _binary("elu_backward", template, grad_output, self_or_result, named, grad_input, 6)


@register("elu_backward")
def elu_backward(grad_output: torch.Tensor, alpha, scale, input_scale, is_result: bool,
                 self_or_result: torch.Tensor) -> torch.Tensor:
    """grad * d elu/dx, from the input or (``is_result``) from elu's output."""
    return _elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result, None)


@register("elu_backward.grad_input")
def elu_backward_out(grad_output: torch.Tensor, alpha, scale, input_scale, is_result: bool,
                     self_or_result: torch.Tensor, *, grad_input: torch.Tensor) -> torch.Tensor:
    """elu_backward into ``grad_input``."""
    return _elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result, grad_input)


# ---------------------------------------------------------------------------
# leaky_relu


def _leaky_relu(negative_slope=0.01):
    """x for x > 0, x * negative_slope otherwise."""
    return "{0} if {0} > zero else {0} * slope", {"zero": 0, "slope": negative_slope}


_register_unary("leaky_relu", "leaky_relu", _leaky_relu, flops=1, defaults=(0.01,))


def _leaky_relu_backward(grad_output, self, negative_slope, self_is_result, grad_input):
    if self_is_result and float(negative_slope) < 0:
        raise RuntimeError(
            "In-place leakyReLu backward calculation is triggered with a negative slope which is not supported. "
            "This is caused by calling in-place forward function with a negative slope, please call "
            "out-of-place version instead. File an issue at https://github.com/pytorch/pytorch if you do "
            "require supporting in-place leakRelu backward calculation with negative slope")
    check_floating("leaky_relu_backward", grad_output, self)
    return _binary("leaky_relu_backward", "{0} if {1} > zero else {0} * slope", grad_output, self,
                   {"zero": 0, "slope": negative_slope}, grad_input, 1)


@register("leaky_relu_backward")
def leaky_relu_backward(grad_output: torch.Tensor, self: torch.Tensor, negative_slope,
                        self_is_result: bool) -> torch.Tensor:
    """grad where x > 0, grad * negative_slope elsewhere."""
    return _leaky_relu_backward(grad_output, self, negative_slope, self_is_result, None)


@register("leaky_relu_backward.grad_input")
def leaky_relu_backward_out(grad_output: torch.Tensor, self: torch.Tensor, negative_slope, self_is_result: bool,
                            *, grad_input: torch.Tensor) -> torch.Tensor:
    """leaky_relu_backward into ``grad_input``."""
    return _leaky_relu_backward(grad_output, self, negative_slope, self_is_result, grad_input)


# ---------------------------------------------------------------------------
# hardtanh (relu6 is hardtanh(0, 6)): a clamp, for integer tensors too


def _hardtanh(self, min_val, max_val, out, inplace):
    if self.dtype == torch.bool:
        raise RuntimeError("Bool inputs not supported for hardtanh")
    if self.is_complex():
        raise NotImplementedError("clamp is not supported for complex types")
    if not self.is_floating_point():  # ATen keeps the bounds from promoting: they become integers
        min_val, max_val = int(min_val), int(max_val)
        if self.dtype == torch.uint8 and (min_val < 0 or max_val < 0):
            raise RuntimeError("cannot do hardtanh on an unsigned type with negative limits")
    if out is not None and not inplace:
        check_same_device("aten::hardtanh", self, out)
        check_same_dtype(self, out)
    return pointwise("hardtanh", "clamp({0}, lo, hi)", (self,), named={"lo": min_val, "hi": max_val},
                     out=out, inplace=inplace, flops=2)


@register("hardtanh")
def hardtanh(self: torch.Tensor, min_val=-1, max_val=1) -> torch.Tensor:
    """x clamped to [min_val, max_val]."""
    return _hardtanh(self, min_val, max_val, None, False)


@register("hardtanh_")
def hardtanh_(self: torch.Tensor, min_val=-1, max_val=1) -> torch.Tensor:
    """hardtanh in place."""
    return _hardtanh(self, min_val, max_val, self, True)


@register("hardtanh.out")
def hardtanh_out(self: torch.Tensor, min_val=-1, max_val=1, *, out: torch.Tensor) -> torch.Tensor:
    """hardtanh into ``out``."""
    return _hardtanh(self, min_val, max_val, out, False)


def _hardtanh_backward(grad_output, self, min_val, max_val, grad_input):
    check_floating("hardtanh_backward", grad_output, self)
    return _binary("hardtanh_backward", "{0} if ({1} > lo and {1} < hi) else zero", grad_output, self,
                   {"lo": min_val, "hi": max_val, "zero": 0}, grad_input, 2)


@register("hardtanh_backward")
def hardtanh_backward(grad_output: torch.Tensor, self: torch.Tensor, min_val, max_val) -> torch.Tensor:
    """grad strictly inside (min_val, max_val), 0 elsewhere."""
    return _hardtanh_backward(grad_output, self, min_val, max_val, None)


@register("hardtanh_backward.grad_input")
def hardtanh_backward_out(grad_output: torch.Tensor, self: torch.Tensor, min_val, max_val, *,
                          grad_input: torch.Tensor) -> torch.Tensor:
    """hardtanh_backward into ``grad_input``."""
    return _hardtanh_backward(grad_output, self, min_val, max_val, grad_input)


# ---------------------------------------------------------------------------
# softplus


def _softplus(beta=1, threshold=20):
    """log1p(exp(x * beta)) / beta, or x where x * beta > threshold."""
    return ("{0} if {0} * beta > threshold else math.log1p(fast_exp({0} * beta)) / beta",
            {"beta": beta, "threshold": threshold})


_register_unary("softplus", "softplus", _softplus, flops=10, inplace=False, defaults=(1, 20))


def _softplus_backward(grad_output, self, beta, threshold, grad_input):
    check_floating("softplus_backward", grad_output, self)
    return _binary("softplus_backward",
                   "{0} if {1} * beta > threshold else {0} * fast_exp({1} * beta) / (fast_exp({1} * beta) + one)",
                   grad_output, self, {"beta": beta, "threshold": threshold, "one": 1}, grad_input, 10)


@register("softplus_backward")
def softplus_backward(grad_output: torch.Tensor, self: torch.Tensor, beta, threshold) -> torch.Tensor:
    """grad * sigmoid(x * beta), or grad where x * beta > threshold."""
    return _softplus_backward(grad_output, self, beta, threshold, None)


@register("softplus_backward.grad_input")
def softplus_backward_out(grad_output: torch.Tensor, self: torch.Tensor, beta, threshold, *,
                          grad_input: torch.Tensor) -> torch.Tensor:
    """softplus_backward into ``grad_input``."""
    return _softplus_backward(grad_output, self, beta, threshold, grad_input)


# ---------------------------------------------------------------------------
# hardshrink, softshrink


def _hardshrink(lambd=0.5):
    """0 on [-lambd, lambd], x elsewhere."""
    return "zero if ({0} >= -lambd and {0} <= lambd) else {0}", {"zero": 0, "lambd": lambd}


_register_unary("hardshrink", "hardshrink", _hardshrink, flops=2, inplace=False, defaults=(0.5,))

_FLOAT_MAX = {torch.float32: "3.40282e+38", torch.float64: "1.79769e+308"}


def _softshrink(self, lambd, out):
    check_floating("softshrink_check", self)
    if not float(lambd) >= 0 or (self.dtype == torch.float32 and float(lambd) > float(np.finfo(np.float32).max)):
        raise RuntimeError(f"lambda must be in range [0, {_FLOAT_MAX.get(self.dtype, 'inf')}] for input dtype "
                           f"{dtype_name(self.dtype)}, but found {float(lambd):g}")
    return _unary("softshrink", "softshrink", "{0} - lambd if {0} > lambd else ({0} + lambd if {0} < -lambd "
                  "else zero)", {"lambd": lambd, "zero": 0}, self, out, False, 3)


@register("softshrink")
def softshrink(self: torch.Tensor, lambd=0.5) -> torch.Tensor:
    """x - lambd above lambd, x + lambd below -lambd, 0 between."""
    return _softshrink(self, lambd, None)


@register("softshrink.out")
def softshrink_out(self: torch.Tensor, lambd=0.5, *, out: torch.Tensor) -> torch.Tensor:
    """softshrink into ``out``."""
    return _softshrink(self, lambd, out)


def _shrink_backward(name, grad_out, self, lambd, grad_input):
    check_floating(name, grad_out, self)
    return _binary(name, "{0} if ({1} < -lambd or {1} > lambd) else zero", grad_out, self,
                   {"lambd": lambd, "zero": 0}, grad_input, 2)


@register("hardshrink_backward")
def hardshrink_backward(grad_out: torch.Tensor, self: torch.Tensor, lambd) -> torch.Tensor:
    """grad outside [-lambd, lambd], 0 inside."""
    return _shrink_backward("hardshrink_backward", grad_out, self, lambd, None)


@register("hardshrink_backward.grad_input")
def hardshrink_backward_out(grad_out: torch.Tensor, self: torch.Tensor, lambd, *,
                            grad_input: torch.Tensor) -> torch.Tensor:
    """hardshrink_backward into ``grad_input``."""
    return _shrink_backward("hardshrink_backward", grad_out, self, lambd, grad_input)


@register("softshrink_backward")
def softshrink_backward(grad_output: torch.Tensor, self: torch.Tensor, lambd) -> torch.Tensor:
    """grad outside [-lambd, lambd], 0 inside."""
    return _shrink_backward("softshrink_backward", grad_output, self, lambd, None)


@register("softshrink_backward.grad_input")
def softshrink_backward_out(grad_output: torch.Tensor, self: torch.Tensor, lambd, *,
                            grad_input: torch.Tensor) -> torch.Tensor:
    """softshrink_backward into ``grad_input``."""
    return _shrink_backward("softshrink_backward", grad_output, self, lambd, grad_input)


# ---------------------------------------------------------------------------
# mish and its backward (ATen's composite backward would be eight kernels: softplus, tanh, sigmoid...)


def _mish(*_):
    """x * tanh(log1p(exp(x)))."""
    return "mish({0})", {}


_register_unary("mish", "mish", _mish, flops=20)


@register("mish_backward")
def mish_backward(grad_output: torch.Tensor, self: torch.Tensor) -> torch.Tensor:
    """grad * d/dx mish(x), one kernel (the CPU and CUDA have one too)."""
    return _binary("mish_backward", "mish_grad({0}, {1})", grad_output, self, {}, None, 30)


# ---------------------------------------------------------------------------
# Two-output elementwise kernels


_KERNELS: dict[tuple, elementwise.ElementwiseKernel] = {}


def _multi(name: str, exprs: Sequence[str], outs: Sequence[torch.Tensor], ins: Sequence[torch.Tensor],
           named: dict, flops: float, prelude: Sequence[str] = ()) -> None:
    """Run one generated kernel writing every ``outs[k] = exprs[k]`` (inputs broadcast to ``outs[0]``).

    ``prelude`` statements run per element first (temporaries the expressions share)."""
    dtype = outs[0].dtype
    np_type = NUMPY_DTYPES[dtype]
    ins = [t if t.dtype == dtype else t.to(dtype) for t in ins]
    key = (name, len(ins), tuple(exprs), tuple(named), tuple(prelude))
    kernel = _KERNELS.get(key)
    if kernel is None:
        kernel = _KERNELS[key] = elementwise.ElementwiseKernel(name, len(ins), tuple(exprs), tuple(named),
                                                               tuple(prelude))
    run_elementwise(kernel, outs, ins, [np_type(v) for v in named.values()], flops_per_element=flops)


_LOG_SIGMOID = ("min(x0, zero) - math.log1p(b)", "b")
_LOG_SIGMOID_PRELUDE = ("b = fast_exp(-abs(x0))",)


@register("log_sigmoid_forward")
def log_sigmoid_forward(self: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), the buffer exp(-|x|) the backward reads)."""
    check_floating("log_sigmoid", self)
    output, buffer = empty(self.shape, self.dtype), empty(self.shape, self.dtype)
    _multi("log_sigmoid", _LOG_SIGMOID, (output, buffer), (self,), {"zero": 0}, 12, _LOG_SIGMOID_PRELUDE)
    return output, buffer


@register("log_sigmoid_forward.output")
def log_sigmoid_forward_out(self: torch.Tensor, *, output: torch.Tensor,
                            buffer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log_sigmoid_forward into ``output`` and ``buffer``."""
    check_floating("log_sigmoid", self)
    check_same_device("aten::log_sigmoid_forward", self, output, buffer)
    check_same_dtype(self, output, buffer)
    check_written("log_sigmoid", output, (self,))
    check_written("log_sigmoid", buffer, (self,))
    resize_out(output, self.shape)
    resize_out(buffer, self.shape)
    if not buffer.is_contiguous():
        raise RuntimeError("Contiguous buffer required for log_sigmoid with out parameter")
    _multi("log_sigmoid", _LOG_SIGMOID, (output, buffer), (self,), {"zero": 0}, 12, _LOG_SIGMOID_PRELUDE)
    return output, buffer


def _log_sigmoid_backward(grad_output, self, buffer, grad_input):
    check_floating("log_sigmoid_backward", grad_output, self)
    check_same_device("aten::log_sigmoid_backward", grad_output, self, buffer)
    check_same_dtype(self, buffer, grad_output, grad_input)
    shape = torch.broadcast_shapes(grad_output.shape, self.shape, buffer.shape)
    if grad_input is None:
        grad_input = empty(shape, self.dtype)
    else:
        check_written("log_sigmoid_backward", grad_input, (grad_output, self, buffer))
        resize_out(grad_input, shape)
    # d/dx log(sigmoid(x)) = 1 - sigmoid(x) = b / (1 + b) for x >= 0, 1 - b / (1 + b) below, b = exp(-|x|)
    template = "((one if {0} < zero else zero) - (one if {0} < zero else -one) * ({1} / (one + {1}))) * {2}"
    _multi("log_sigmoid_backward", (template.format("x0", "x1", "x2"),), (grad_input,),
           (self, buffer, grad_output), {"one": 1, "zero": 0}, 5)
    return grad_input


@register("log_sigmoid_backward")
def log_sigmoid_backward(grad_output: torch.Tensor, self: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    """grad * d log(sigmoid(x))/dx, from log_sigmoid_forward's buffer."""
    return _log_sigmoid_backward(grad_output, self, buffer, None)


@register("log_sigmoid_backward.grad_input")
def log_sigmoid_backward_out(grad_output: torch.Tensor, self: torch.Tensor, buffer: torch.Tensor, *,
                             grad_input: torch.Tensor) -> torch.Tensor:
    """log_sigmoid_backward into ``grad_input``."""
    return _log_sigmoid_backward(grad_output, self, buffer, grad_input)


# ---------------------------------------------------------------------------
# glu: the first half of ``dim`` gated by the sigmoid of the second


def _glu_split(self: torch.Tensor, dim: int) -> tuple[int, int]:
    """(wrapped dim, half size), with ATen's errors."""
    if self.dim() == 0:
        raise RuntimeError("glu does not support 0-dimensional tensors")
    nd = self.dim()
    if not -nd <= dim < nd:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {dim})")
    dim %= nd
    n = self.shape[dim]
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim} is size {n}")
    return dim, n // 2


def _glu(self, dim, out):
    check_floating("glu", self)
    dim, half = _glu_split(self, dim)
    a, b = self.narrow(dim, 0, half), self.narrow(dim, half, half)
    if out is not None:  # computed in the input's dtype, cast into out's (a binary TensorIterator op)
        check_same_device("aten::glu", self, out)
    return pointwise("glu", "{0} * (one / (one + fast_exp(-{1})))", (a, b), named={"one": 1}, out=out, flops=10)


@register("glu")
def glu(self: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """a * sigmoid(b), where a and b are the two halves of ``dim``."""
    return _glu(self, dim, None)


@register("glu.out")
def glu_out(self: torch.Tensor, dim: int = -1, *, out: torch.Tensor) -> torch.Tensor:
    """glu into ``out``."""
    return _glu(self, dim, out)


def _glu_backward(grad_output, self, dim, grad_input):
    check_floating("glu_backward", grad_output, self)
    check_same_device("aten::glu_backward", grad_output, self)
    dim, half = _glu_split(self, dim)
    check_same_dtype(self, grad_output, grad_input)
    if grad_input is None:
        grad_input = empty(self.shape, self.dtype)
    else:
        check_written("glu_backward", grad_input, (grad_output, self))
        resize_out(grad_input, self.shape)
    half_shape = list(self.shape)
    half_shape[dim] = half
    grown = list(torch.broadcast_shapes(grad_output.shape, half_shape))  # raises if they cannot broadcast
    if grown != half_shape:
        raise RuntimeError(f"output with shape {half_shape} doesn't match the broadcast shape {grown}")
    a, b = self.narrow(dim, 0, half), self.narrow(dim, half, half)
    ga, gb = grad_input.narrow(dim, 0, half), grad_input.narrow(dim, half, half)
    # ga = sigmoid(b) * g, gb = (1 - sigmoid(b)) * sigmoid(b) * a * g (sigmoid rounded to the dtype first)
    _multi("glu_backward", ("s * x2", "(one - s) * s * x0 * x2"), (ga, gb), (a, b, grad_output), {"one": 1}, 12,
           prelude=("s = one / (one + fast_exp(-x1))",))
    return grad_input


@register("glu_backward")
def glu_backward(grad_output: torch.Tensor, self: torch.Tensor, dim: int) -> torch.Tensor:
    """(sigmoid(b) * g, sigmoid(b) * (1 - sigmoid(b)) * a * g) for the halves a, b of ``dim``."""
    return _glu_backward(grad_output, self, dim, None)


@register("glu_backward.grad_input")
def glu_backward_out(grad_output: torch.Tensor, self: torch.Tensor, dim: int, *,
                     grad_input: torch.Tensor) -> torch.Tensor:
    """glu_backward into ``grad_input``."""
    return _glu_backward(grad_output, self, dim, grad_input)


# ---------------------------------------------------------------------------
# prelu: the weight broadcasts over the input (ATen's prelu reshapes it to (1, C, 1, ...) first)


@register("_prelu_kernel")
def prelu_kernel(self: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x for x > 0, weight * x elsewhere."""
    check_same_device("aten::_prelu_kernel", self, weight)
    check_floating("prelu", self, weight)
    check_same_dtype(self, weight)
    shape = torch.broadcast_shapes(self.shape, weight.shape)
    if tuple(shape) != tuple(self.shape):
        raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(shape)}")
    return pointwise("prelu", "{0} if {0} > zero else {1} * {0}", (self, weight), named={"zero": 0}, flops=2)


@register("_prelu_kernel_backward")
def prelu_kernel_backward(grad_output: torch.Tensor, self: torch.Tensor,
                          weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad where x > 0 else weight * grad, 0 where x > 0 else x * grad), both of the broadcast shape
    (autograd sums the weight's gradient down to the weight's shape)."""
    check_same_device("aten::_prelu_kernel_backward", grad_output, self, weight)
    check_floating("prelu_backward", self, weight, grad_output)
    check_same_dtype(self, weight, grad_output)
    shape = torch.broadcast_shapes(self.shape, weight.shape, grad_output.shape)
    grad_self, grad_weight = empty(shape, self.dtype), empty(shape, self.dtype)
    _multi("prelu_backward", ("x2 if x0 > zero else x1 * x2", "zero if x0 > zero else x0 * x2"),
           (grad_self, grad_weight), (self, weight, grad_output), {"zero": 0}, 3)
    return grad_self, grad_weight


# ---------------------------------------------------------------------------
# rrelu: leaky_relu whose negative slope is drawn from U(lower, upper) per element in training


def _rrelu_with_noise(self, noise, lower, upper, training, generator, out):
    check_same_device("aten::rrelu_with_noise", self, noise)
    if tuple(self.shape) != tuple(noise.shape):
        raise RuntimeError("noise tensor shape must match self tensor shape. Got self.shape = "
                           f"{list(self.shape)} noise.shape = {list(noise.shape)}")
    if not training:
        # ATen: the slope is (lower + upper) / 2 computed in double, then leaky_relu
        slope = (float(lower) + float(upper)) / 2
        _, named = _leaky_relu(slope)
        return _unary("leaky_relu", "leaky_relu", "{0} if {0} > zero else {0} * slope", named, self, out,
                      out is self, 1)
    check_floating("rrelu_with_noise_out_npu", self)
    check_same_dtype(self, noise)
    if out is None:
        out = empty(self.shape, self.dtype)
    elif out is not self:
        check_same_dtype(self, out)
        resize_out(out, self.shape)
    n = self.numel()
    x = as_array(self.contiguous()).reshape(-1)
    y = as_array(out).reshape(-1) if out.is_contiguous() else np.empty(n, dtype=x.dtype)
    r = as_array(noise).reshape(-1) if noise.is_contiguous() else np.empty(n, dtype=x.dtype)
    bits = device_generator(-1, generator).raw(n)
    ak.rrelu_train(bits, x, y, r, float(lower), float(upper) - float(lower))
    if not out.is_contiguous():
        as_array(out)[...] = y.reshape(tuple(self.shape))
    if not noise.is_contiguous():
        as_array(noise)[...] = r.reshape(tuple(self.shape))
    launch("rrelu_with_noise", 4 * n, nbytes(self), nbytes(out) + nbytes(noise))
    return out


@register("rrelu_with_noise")
def rrelu_with_noise(self: torch.Tensor, noise: torch.Tensor, lower=0.125, upper=1.0 / 3, training: bool = False,
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """Training: x * r with r ~ U(lower, upper) where x <= 0 (r, or 1, written to ``noise``); evaluation:
    leaky_relu with slope (lower + upper) / 2."""
    return _rrelu_with_noise(self, noise, lower, upper, training, generator, None)


@register("rrelu_with_noise_")
def rrelu_with_noise_(self: torch.Tensor, noise: torch.Tensor, lower=0.125, upper=1.0 / 3, training: bool = False,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """rrelu_with_noise in place."""
    return _rrelu_with_noise(self, noise, lower, upper, training, generator, self)


@register("rrelu_with_noise.out")
def rrelu_with_noise_out(self: torch.Tensor, noise: torch.Tensor, lower=0.125, upper=1.0 / 3,
                         training: bool = False, generator: torch.Generator | None = None, *,
                         out: torch.Tensor) -> torch.Tensor:
    """rrelu_with_noise into ``out``."""
    return _rrelu_with_noise(self, noise, lower, upper, training, generator, out)
