"""Random operators on the device generator (reproducible under a seed)."""

from __future__ import annotations

import math

import numpy as np
import torch

from ..device import fallback
from ..device.rng import generator as device_generator
from ..kernels import random as rk
from .common import as_array, broadcast_shape, empty, launch, nbytes, resize_out
from .registry import register


def _fill_contiguous(t: torch.Tensor, fill) -> torch.Tensor:
    """Run ``fill(flat_array)`` on t, through a contiguous temporary if t is strided."""
    if t.is_contiguous():
        fill(as_array(t).reshape(-1))
    else:
        tmp = empty(t.shape, t.dtype)
        fill(as_array(tmp).reshape(-1))
        as_array(t)[...] = as_array(tmp)
    launch("random", t.numel() * 4, 0, nbytes(t))
    return t


def _check_float(t: torch.Tensor, op: str) -> None:
    if not t.is_floating_point():
        raise NotImplementedError(f'"{op}" not implemented for \'{_type_name(t.dtype)}\'')


@register("uniform_")
def uniform_(self, from_=0.0, to=1.0, *, generator=None):
    _check_float(self, "check_uniform_bounds")
    g = device_generator(-1, generator)
    kern = rk.uniform53 if self.dtype == torch.float64 else rk.uniform

    def fill(a):
        kern(g.raw(a.shape[0]), a, a.dtype.type(from_), a.dtype.type(to))

    return _fill_contiguous(self, fill)


@register("normal_")
def normal_(self, mean=0.0, std=1.0, *, generator=None):
    _check_float(self, "normal_kernel_cpu")
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    g = device_generator(-1, generator)

    def fill(a):
        n = a.shape[0]
        rk.normal(g.raw(n + (n & 1)), a, float(mean), float(std))

    return _fill_contiguous(self, fill)


@register("bernoulli_.float")
def bernoulli_float(self, p=0.5, *, generator=None):
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
    g = device_generator(-1, generator)
    return _fill_contiguous(self, lambda a: rk.bernoulli_scalar(g.raw(a.shape[0]), a, float(p)))


@register("bernoulli_.Tensor")
def bernoulli_tensor_(self, p, *, generator=None):
    g = device_generator(-1, generator)
    probs = np.ascontiguousarray(np.broadcast_to(as_array(p), self.shape)).reshape(-1)
    return _fill_contiguous(self, lambda a: rk.bernoulli_tensor(g.raw(a.shape[0]), a, probs))


@register("bernoulli")
def bernoulli(self, *, generator=None):
    out = empty(self.shape, self.dtype)
    return bernoulli_tensor_(out, self, generator=generator)


@register("random_.from")
def random_from(self, from_, to=None, *, generator=None):
    if to is None:
        to = 2**63 - 1 if not self.is_floating_point() else 2**24
    if to <= from_:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={from_} >= to={to}")
    g = device_generator(-1, generator)
    span = int(to - from_)
    return _fill_contiguous(self, lambda a: rk.random_range(g.raw(a.shape[0]), a, int(from_), span))


@register("random_.to")
def random_to(self, to, *, generator=None):
    return random_from(self, 0, to, generator=generator)


@register("random_")
def random_(self, *, generator=None):
    to = 2**24 if self.dtype == torch.float32 else (2**53 if self.dtype == torch.float64 else 2**31)
    if self.dtype == torch.bool:
        to = 2
    return random_from(self, 0, to, generator=generator)


@register("randperm.generator_out")
def randperm_out(n, *, generator=None, out):
    from .common import resize_out

    resize_out(out, (n,))
    g = device_generator(-1, generator)
    tmp = np.empty(n, dtype=np.int64)
    rk.randperm(g.raw(n), tmp)
    as_array(out)[...] = tmp
    launch("randperm", n, 0, nbytes(out))
    return out


@register("native_dropout")
def native_dropout(input, p, train):
    if not train or p == 0:
        return input.clone(), torch.ones_like(input, dtype=torch.bool)
    out = empty(input.shape, input.dtype)
    mask = empty(input.shape, torch.bool)
    if p >= 1:
        out.zero_()
        mask.zero_()
        return out, mask
    x = as_array(input.contiguous()).reshape(-1)
    g = device_generator()
    scale = input.new_tensor(1.0 / (1.0 - p), device="cpu").item()
    rk.dropout(g.raw(x.shape[0]), x, as_array(out).reshape(-1), as_array(mask).reshape(-1),
               float(p), x.dtype.type(scale))
    launch("dropout", 2 * x.shape[0], nbytes(input), nbytes(out) + nbytes(mask))
    return out, mask


@register("native_dropout_backward")
def native_dropout_backward(grad_output, mask, scale):
    return grad_output * mask * scale


# --- more distributions ----------------------------------------------------------------------

def _type_name(dtype: torch.dtype) -> str:
    """PyTorch's C++ name of a dtype (Float, Long...), as its error messages print it."""
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
            torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}.get(
                dtype, str(dtype).replace("torch.", ""))


def _continuous(t: torch.Tensor, what: str, cpp_name: str) -> None:
    """The CPU's error for a continuous distribution asked to fill an integer tensor."""
    if not t.is_floating_point():
        raise RuntimeError(f"{what} distribution is a continuous probability distribution. dtype must be a floating "
                           f"point but you specified {cpp_name}")


@register("exponential_")
def exponential_(self, lambd=1.0, *, generator=None):
    """Fill with Exponential(lambd) draws (rate lambd)."""
    if not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={_num(lambd)}")
    _continuous(self, "Exponential", _type_name(self.dtype))
    g = device_generator(-1, generator)
    return _fill_contiguous(self, lambda a: rk.exponential(g.raw(a.shape[0]), a, float(lambd)))


@register("cauchy_")
def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    """Fill with Cauchy(median, sigma) draws."""
    if not sigma > 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={_num(sigma)}")
    _continuous(self, "Cauchy", {torch.int64: "long int", torch.int32: "int"}.get(self.dtype, _type_name(self.dtype)))
    g = device_generator(-1, generator)
    return _fill_contiguous(self, lambda a: rk.cauchy(g.raw(a.shape[0]), a, float(median), float(sigma)))


@register("geometric_")
def geometric_(self, p, *, generator=None):
    """Fill with Geometric(p) draws: the number of Bernoulli(p) trials up to the first success (1, 2, ...)."""
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={_num(p)}")
    if self.dtype == torch.bool or self.dtype.is_complex:
        return fallback.unsupported(torch.ops.aten.geometric_.default, (self, p), {"generator": generator},
                                    f"geometric_ of {self.dtype}")
    g = device_generator(-1, generator)
    return _fill_contiguous(self, lambda a: rk.geometric(g.raw(a.shape[0]), a, math.log1p(-float(p))))


@register("log_normal_")
def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    """Fill with LogNormal(mean, std) draws (exp of a normal with that mean and std)."""
    if not std > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={_num(std)}")
    if not self.is_floating_point():
        raise NotImplementedError(f'"log_normal_cpu" not implemented for \'{_type_name(self.dtype)}\'')
    g = device_generator(-1, generator)

    def fill(a):
        n = a.shape[0]
        rk.log_normal(g.raw(n + (n & 1)), a, float(mean), float(std))

    return _fill_contiguous(self, fill)


def _num(x: float) -> str:
    """A number as C++ streams it in error messages (0 not 0.0)."""
    return f"{x:g}"


def _normal_out(out: torch.Tensor, mean, std, generator) -> torch.Tensor:
    """out = mean + std * N(0, 1) for tensor and/or float mean and std, broadcast (the CPU's normal_out_impl)."""
    if isinstance(std, torch.Tensor):
        if std.is_complex():
            raise RuntimeError("normal expects standard deviation to be non-complex")
        values = as_array(std) if std.device.type == "npu" else std.numpy()
        if std.numel() and not bool((values >= 0).all()):
            raise RuntimeError("normal expects all elements of std >= 0.0")
    elif std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {_num(std)}")
    shape = broadcast_shape(*(t.shape for t in (mean, std) if isinstance(t, torch.Tensor)))
    resize_out(out, shape)
    normal_(out, 0.0, 1.0, generator=generator)
    return out.mul_(std).add_(mean)


@register("normal.Tensor_Tensor")
def normal_tensor_tensor(mean, std, *, generator=None):
    """Normal draws with elementwise mean and std tensors (broadcast)."""
    out = empty(broadcast_shape(mean.shape, std.shape), mean.dtype)
    return _normal_out(out, mean, std, generator)


@register("normal.Tensor_float")
def normal_tensor_float(mean, std=1.0, *, generator=None):
    """Normal draws with an elementwise mean tensor and one std."""
    return _normal_out(empty(mean.shape, mean.dtype), mean, std, generator)


@register("normal.float_Tensor")
def normal_float_tensor(mean, std, *, generator=None):
    """Normal draws with one mean and an elementwise std tensor."""
    return _normal_out(empty(std.shape, std.dtype), mean, std, generator)


@register("normal.Tensor_Tensor_out", "normal.Tensor_float_out", "normal.float_Tensor_out")
def normal_out(mean, std=1.0, *, generator=None, out):
    """The normal draws into ``out``."""
    return _normal_out(out, mean, std, generator)


@register("multinomial.out")
def multinomial_out(self, num_samples, replacement=False, *, generator=None, out):
    """Category indices drawn from each row of unnormalised probabilities (with or without replacement)."""
    if self.dim() not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not self.is_floating_point():
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{_type_name(self.dtype)}")
    if out.dtype != torch.int64:
        raise RuntimeError(f"multinomial expects Long tensor out, got: {_type_name(out.dtype)}")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    k = self.shape[-1]
    if not replacement and num_samples > k:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if k > 2**24:
        raise RuntimeError("number of categories cannot exceed 2^24")
    resize_out(out, (num_samples,) if self.dim() == 1 else (self.shape[0], num_samples))
    if out.numel() == 0:
        return out
    probs = np.ascontiguousarray(as_array(self), dtype=np.float64).reshape(-1, k)
    sums = probs.sum(axis=1) if k else np.zeros(probs.shape[0])
    if not replacement or num_samples == 1:
        if not (np.isfinite(probs).all() and (probs >= 0).all()):
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    else:
        bad = ~(np.isfinite(probs) & (probs >= 0)).reshape(-1)
        if bad.any():  # the CPU checks element by element: the first bad one names the error
            if not probs.reshape(-1)[np.argmax(bad)] >= 0:
                raise RuntimeError("invalid multinomial distribution (encountering probability entry < 0)")
            raise RuntimeError("invalid multinomial distribution (encountering probability entry = infinity or NaN)")
    if (sums <= 0).any():
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    g = device_generator(-1, generator)
    res = np.empty((probs.shape[0], num_samples), np.int64)
    if replacement:
        rk.multinomial_replacement(g.raw(res.size), probs, res)
    else:
        rk.multinomial_no_replacement(g.raw(probs.size), probs, res)
    as_array(out)[...] = res.reshape(out.shape)
    launch("multinomial", probs.size + res.size * max(1, int(math.log2(k + 1))), nbytes(self), nbytes(out))
    return out


@register("multinomial")
def multinomial(self, num_samples, replacement=False, *, generator=None):
    """Category indices drawn from each row of unnormalised probabilities."""
    return multinomial_out(self, num_samples, replacement, generator=generator, out=empty((0,), torch.int64))
