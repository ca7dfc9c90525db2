"""Timing helpers shared by the benchmarks (best-of-N wall time, per-call microseconds)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable


def best_of(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> float:
    """The fastest of ``repeat`` runs, in seconds, after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def per_call_us(fn: Callable[[], object], n: int = 3000, warmup: int = 200) -> float:
    """Average microseconds per call over ``n`` calls."""
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def freeze_startup_heap() -> None:
    """Move the objects that exist after start-up (torch, numba, npu_lab modules) out of the
    cyclic garbage collector's reach. The NPU's Python kernels allocate many small objects;
    without this, Python's periodic full collections (which walk ~300k long-lived objects)
    add milliseconds at random points of a step. See README, "Performance notes"."""
    gc.collect()
    gc.freeze()
