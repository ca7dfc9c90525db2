"""The optimizers' multi-tensor operators (``torch._foreach_*``) for the npu: one call, one Python loop.

An optimizer's step applies the same few operations to every parameter, and PyTorch's optimizers ask
for them once for all parameters (SGD with momentum: ``torch._foreach_mul_(bufs, momentum)``,
``torch._foreach_add_(bufs, grads, alpha=1 - dampening)``, ``torch._foreach_add_(params, bufs,
alpha=-lr)``). A device without kernels of its own for them runs ATen's generic version, which calls
``add_``/``mul_`` through the dispatcher once per tensor. The kernels here run the same per-tensor
kernels (the same launches on the simulated clock) without the dispatcher round trips: the small
contiguous tensors all in one call into compiled code (the per-tensor fast path's ``many``), the others
one by one through the fast paths. CUDA goes further and updates a chunk of tensors per launch
(``multi_tensor_apply``); the simulated chip keeps one launch per tensor.

Wherever a fast path does not take a tensor (another dtype, another device, a broadcast), and whenever
the npu profiler records, the per-tensor operator goes through the dispatcher, as ATen's version does,
so a profile shows the same operators with or without these kernels. They are registered straight with
``torch.library`` (not :func:`~npu_lab.ops.registry.register`): they add no operator of their own to the
device's coverage and no event of their own to a profile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..device import bare
from ..profiler import hooks
from . import pointwise  # noqa: F401 - registers the per-tensor kernels and their fast paths first
from .registry import FAST

__all__: list[str] = []

_aten = torch.ops.aten  # the overloads ATen's generic version calls (a Python number would pick .Tensor)


def _check(self: Sequence[torch.Tensor], other: Sequence[object] | None = None) -> None:
    """ATen's ``check_foreach_api_restrictions``: a non-empty list, and lists of one length."""
    if len(self) == 0:
        raise RuntimeError("Tensor list must have at least one tensor.")
    if other is not None and len(other) != len(self):
        raise RuntimeError(f"Tensor lists must have the same number of tensors, got {len(self)} and {len(other)}")


def _fast(qualified: str) -> Callable | None:
    return FAST.get(qualified) if hooks.recorder is None else None


def _each(qualified: str, overload: Callable, self: list[torch.Tensor], other: object,
          alpha: object = None) -> None:
    """``overload(self[i], other[i] (or other)[, alpha=alpha])`` for every i, in order: through the in-place
    operator's fast path for all the tensors it takes at once (its ``many``), the dispatcher for the others."""
    fast = _fast(qualified)
    listed = isinstance(other, (list, tuple))
    extra = () if alpha is None else (alpha,)
    keywords = {} if alpha is None else {"alpha": alpha}

    def one_by_one(i: int) -> None:
        o = other[i] if listed else other
        if fast is None or fast(self[i], o, *extra) is None:
            overload(self[i], o, **keywords)

    many = getattr(fast, "many", None)
    if many is None:
        for i in range(len(self)):
            one_by_one(i)
    else:
        many(self, other, 1 if alpha is None else alpha, one_by_one)


def foreach_add_list_(self: list[torch.Tensor], other: list[torch.Tensor], *, alpha: object = 1) -> None:
    """``self[i].add_(other[i], alpha=alpha)`` for every i."""
    _check(self, other)
    _each("aten::add_.Tensor", _aten.add_.Tensor, self, list(other), alpha)


def foreach_add_scalar_(self: list[torch.Tensor], scalar: object) -> None:
    """``self[i].add_(scalar)`` for every i."""
    _check(self)
    _each("aten::add_.Scalar", _aten.add_.Scalar, self, scalar)


def foreach_mul_scalar_(self: list[torch.Tensor], scalar: object) -> None:
    """``self[i].mul_(scalar)`` for every i."""
    _check(self)
    _each("aten::mul_.Scalar", _aten.mul_.Scalar, self, scalar)


def foreach_mul_list_(self: list[torch.Tensor], other: list[torch.Tensor]) -> None:
    """``self[i].mul_(other[i])`` for every i."""
    _check(self, other)
    _each("aten::mul_.Tensor", _aten.mul_.Tensor, self, list(other))


#: overload -> kernel, registered on PrivateUse1 (not on a bare device: the learner's device runs ATen's own).
KERNELS: dict[str, Callable] = {
    "_foreach_add_.List": foreach_add_list_,
    "_foreach_add_.Scalar": foreach_add_scalar_,
    "_foreach_mul_.Scalar": foreach_mul_scalar_,
    "_foreach_mul_.List": foreach_mul_list_,
}

_lib: torch.library.Library | None = None
if not bare.BARE:
    _lib = torch.library.Library("aten", "IMPL")
    for _name, _kernel in KERNELS.items():
        _lib.impl(_name, _kernel, "PrivateUse1")
