"""References a learner cannot change: pure NumPy formulas, and what the learner registered.

A check that registers (or lets the learner register) a kernel for an operator
must not compute its expected values with that operator afterwards: a wrong
kernel registered for the CPU as well would be its own reference. Either
compute the expected values before the learner's code runs, or with the
formulas here, which call no PyTorch operator at all::

    from npu_lab.grading import references
    want = references.expected(references.hardswish, x)        # a CPU tensor, from NumPy

and check what the learner's library registered (:func:`registrations`,
:func:`foreign_keys`): an npu exercise's library should hold PrivateUse1
kernels only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch


def _np(x: torch.Tensor) -> np.ndarray:
    with torch._C.DisableTorchFunction():
        return x.detach().cpu().numpy().astype(np.float64)


def array(x: torch.Tensor) -> np.ndarray:
    """``x`` as a float64 NumPy array (read without any ``__torch_function__`` override)."""
    return _np(x)


def expected(formula: Callable[..., np.ndarray], x: torch.Tensor, *args: Any) -> torch.Tensor:
    """``formula`` applied to ``x`` (made a float64 NumPy array), returned as a CPU tensor of ``x``'s dtype."""
    out = np.asarray(formula(_np(x), *args))
    return torch.from_numpy(out.astype(np.float64)).to(x.dtype)


def hardswish(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


def hardsigmoid(x: np.ndarray) -> np.ndarray:
    return np.clip(x / 6.0 + 0.5, 0.0, 1.0)


def elu(x: np.ndarray, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> np.ndarray:
    return scale * np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0) * input_scale))


def leaky_relu(x: np.ndarray, slope: float = 0.01) -> np.ndarray:
    return np.where(x > 0, x, slope * x)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def silu(x: np.ndarray) -> np.ndarray:
    return x * sigmoid(x)


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


def conv2d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None, stride: int = 1, padding: int = 0,
           groups: int = 1) -> np.ndarray:
    """A 2-d convolution (cross-correlation, as ``F.conv2d``) of ``x`` (N, C, H, W), in NumPy."""
    n, c, h, w = x.shape
    o, cg, kh, kw = weight.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    ho, wo = (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1
    out = np.zeros((n, o, ho, wo))
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = weight[g * og:(g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride]  # (n, cg, ho, wo)
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    if bias is not None:
        out += bias.reshape(1, -1, 1, 1)
    return out


def batch_norm(x: np.ndarray, mean: np.ndarray, var: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None,
               eps: float) -> np.ndarray:
    """Inference batch norm over dimension 1 with running statistics, in NumPy."""
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def registrations(library: torch.library.Library) -> list[str]:
    """What ``library`` registered: ``"ns/op/DispatchKey"`` strings (empty for anything that is not a library)."""
    if not issubclass(type(library), torch.library.Library):
        return []
    try:
        return sorted(str(k) for k in library._op_impls)
    except Exception:  # noqa: BLE001
        return []


def foreign_keys(library: torch.library.Library, allowed: Iterable[str] = ("PrivateUse1",)) -> list[str]:
    """The registrations of ``library`` for dispatch keys other than ``allowed`` (e.g. a CPU kernel)."""
    allowed = set(allowed)
    return [r for r in registrations(library) if r.rsplit("/", 1)[-1] not in allowed]


def new_registrations(before: frozenset[str]) -> list[str]:
    """Kernel registrations made (through ``torch.library``) since ``before = snapshot()``."""
    return sorted(set(torch.library._impls) - set(before))


def snapshot() -> frozenset[str]:
    """The kernel registrations made through ``torch.library`` so far."""
    return frozenset(torch.library._impls)


# --- measured references, kept while the settings they depend on stay the same -----------------------

_MEASURED: dict[tuple, Any] = {}


def settings_key() -> tuple:
    """The compile-stack settings a measured reference depends on (Dynamo's, AOTAutograd's, Inductor's)."""
    import sys

    parts = []
    for name in ("torch._dynamo.config", "torch._functorch.config", "torch._inductor.config"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "get_config_copy"):
            parts.append(repr(sorted((k, repr(v)) for k, v in module.get_config_copy().items())))
    return tuple(parts)


def measured(key: Any, measure: Callable[[], Any]) -> Any:
    """``measure()``, remembered for ``key`` while :func:`settings_key` is unchanged (a deep copy each time).

    For references that take long to measure (graphs compiled, bytes saved) and depend only on the
    check's own inputs and PyTorch's settings: a notebook that changes a setting gets them measured again.
    """
    import copy

    full = (key, settings_key())
    if full not in _MEASURED:
        _MEASURED[full] = measure()
    return copy.deepcopy(_MEASURED[full])
