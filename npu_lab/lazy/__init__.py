"""Lazy tensors on the NPU (chapter 4): record now, compile and run at a sync point.

    with npu_lab.lazy.mode():
        loss = model(x).sum()          # recorded, not run
        loss.backward()                # recorded
        opt.step()                     # recorded (parameter updates applied at the sync)
        npu_lab.lazy.mark_step()       # compile (cached by structure) and run
    print(npu_lab.lazy.metrics.report())
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from . import trace as _trace
from .trace import LazyMetrics, LazyMode, LazyTensor, Trace, _stack, materialize, metrics

__all__ = ["LazyMetrics", "LazyTensor", "Trace", "last_graph", "mark_step", "materialize", "metrics",
           "mode", "reset_metrics"]


@contextlib.contextmanager
def mode(options: dict | None = None) -> Iterator[LazyMode]:
    """Record npu operators lazily inside the block; leaving it is a sync point.

    Args:
        options: NPU compiler options for the lazy graphs (same names as
            ``torch.compile(..., options=...)``).
    """
    m = LazyMode(options)
    _stack.append(m)
    try:
        with m:
            yield m
    finally:
        _stack.remove(m)
        m.trace.flush("end of lazy mode")


def mark_step() -> None:
    """Run everything recorded so far (one training step = one graph)."""
    if _stack:
        _stack[-1].trace.flush("mark_step")


def last_graph() -> torch.fx.GraphModule | None:
    """The compiled FX module of the most recent lazy graph."""
    return _trace.last_graph


def reset_metrics() -> None:
    fresh = LazyMetrics()
    for k, v in fresh.__dict__.items():
        setattr(metrics, k, v)
