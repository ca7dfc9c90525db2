"""What each puzzle's kernel must compute, as NumPy formulas in float64.

The checks compute the expected output with these, never with a PyTorch operator: a learner's
notebook may have replaced ``torch.softmax`` or registered a kernel for the CPU, and the
reference must not change with it (see :mod:`npu_lab.grading.references`). Each formula takes the
inputs as float64 arrays and the puzzle's sizes as keywords.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

Formula = Callable[..., np.ndarray]


def _softmax_rows(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def map_add_ten(x: np.ndarray, **e: Any) -> np.ndarray:
    """x + 10."""
    return x + 10.0


def zip_add(x: np.ndarray, y: np.ndarray, **e: Any) -> np.ndarray:
    """x + y."""
    return x + y


def outer_sum(x: np.ndarray, y: np.ndarray, **e: Any) -> np.ndarray:
    """out[i, j] = x[i] + y[j]."""
    return x[:, None] + y[None, :]


def relu(x: np.ndarray, **e: Any) -> np.ndarray:
    """max(x, 0)."""
    return np.maximum(x, 0.0)


def row_sum(x: np.ndarray, **e: Any) -> np.ndarray:
    """The sum of each row."""
    return x.sum(axis=1)


def row_cumsum(x: np.ndarray, **e: Any) -> np.ndarray:
    """The inclusive prefix sum of each row."""
    return np.cumsum(x, axis=1)


def softmax(x: np.ndarray, **e: Any) -> np.ndarray:
    """The softmax of each row."""
    return _softmax_rows(x)


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float, **e: Any) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * w + b over each row (biased variance)."""
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w[None, :] + b[None, :]


def matmul(a: np.ndarray, b: np.ndarray, **e: Any) -> np.ndarray:
    """a @ b."""
    return a @ b


def conv1d_valid(x: np.ndarray, w: np.ndarray, **e: Any) -> np.ndarray:
    """out[i] = sum_j x[i + j] w[j] for i < n - k + 1 (a 'valid' cross-correlation, like torch's conv1d)."""
    return np.lib.stride_tricks.sliding_window_view(x, w.shape[0]) @ w


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, d: int, **e: Any) -> np.ndarray:
    """softmax(q k^T / sqrt(d)) v."""
    return _softmax_rows(q @ k.T / np.sqrt(d)) @ v


def linear_relu(a: np.ndarray, b: np.ndarray, bias: np.ndarray, **e: Any) -> np.ndarray:
    """relu(a @ b + bias)."""
    return np.maximum(a @ b + bias[None, :], 0.0)


def reference(formula: Formula) -> Callable[..., torch.Tensor]:
    """``formula`` as a puzzle's reference: CPU tensors and sizes in, a float32 CPU tensor out."""
    from ..grading.references import array

    def expected(**kw: Any) -> torch.Tensor:
        args = {k: array(v) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
        out = np.ascontiguousarray(formula(**args), dtype=np.float64)
        return torch.from_numpy(out).to(torch.float32)

    expected.__name__ = formula.__name__
    expected.__doc__ = formula.__doc__
    return expected
