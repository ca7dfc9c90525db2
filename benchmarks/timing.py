"""Timing helpers shared by the benchmarks (best-of-N wall time, per-call microseconds)."""

from __future__ import annotations

import gc
import statistics
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


def interleaved(fns: dict[str, Callable[[], object]], rounds: int = 30,
                warmup: int = 3) -> dict[str, tuple[float, float]]:
    """(fastest, median) seconds per call of each function, timed in alternating rounds.

    Running the contenders one after another in every round, instead of one
    block each, exposes them all to the same slow spells of a shared machine.
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: (min(ts), statistics.median(ts)) for name, ts in times.items()}


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
