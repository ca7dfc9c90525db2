"""Random operators on the device generator (reproducible under a seed)."""

from __future__ import annotations

import numpy as np
import torch

from ..device.rng import generator as device_generator
from ..kernels import random as rk
from .common import as_array, empty, launch, nbytes
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
        raise NotImplementedError(f'"{op}" not implemented for \'{str(t.dtype).split(".")[-1]}\'')


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
