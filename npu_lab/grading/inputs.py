"""Deterministic test inputs for checks: random tensors from a fixed seed, plus edge cases.

Checks should try the sizes where code usually breaks: empty tensors, a single
element, a size-1 dimension, and non-contiguous views (a transpose or a step
slice), not only a friendly ``(4, 4)``.
"""

from __future__ import annotations

import torch

#: Shapes every elementwise check should survive.
EDGE_SHAPES: list[tuple[int, ...]] = [(0,), (1,), (1, 1), (3, 1), (2, 0, 3), (7,)]


def generator(seed: int = 0) -> torch.Generator:
    """A CPU generator with a fixed seed, so every run of a check sees the same data."""
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32, device: str = "cpu") -> torch.Tensor:
    """``torch.randn`` from a fixed seed (made on the CPU, then moved)."""
    return torch.randn(shape, generator=generator(seed), dtype=dtype).to(device)


def non_contiguous(*shape: int, seed: int = 0, device: str = "cpu") -> torch.Tensor:
    """A non-contiguous tensor of ``shape``: the transpose of a contiguous one."""
    if len(shape) < 2:
        return randn(*(s * 2 for s in shape), seed=seed, device=device)[::2]
    base = randn(*shape[:-2], shape[-1], shape[-2], seed=seed, device=device)
    return base.transpose(-1, -2)


def tensor_cases(shapes: list[tuple[int, ...]] | None = None, seed: int = 0,
                 device: str = "cpu") -> list[tuple[str, torch.Tensor]]:
    """(description, tensor) pairs: random shapes from ``seed``, the edge shapes, a non-contiguous view."""
    shapes = shapes or [(4, 5), (2, 3, 8)]
    out = [(f"randn{tuple(s)}", randn(*s, seed=seed + i, device=device)) for i, s in enumerate(shapes)]
    out += [(f"randn{s}", randn(*s, seed=seed, device=device)) for s in EDGE_SHAPES]
    out.append(("a transposed (non-contiguous) 5x3 view", non_contiguous(5, 3, seed=seed, device=device)))
    return out
