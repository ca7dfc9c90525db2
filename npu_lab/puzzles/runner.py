"""Run a puzzle kernel on a grid of blocks, on real ``npu`` tensors, and count what it cost.

``launch(kernel, grid, *args)`` calls ``kernel(ctx, *args)`` once per block of ``grid``; tensor
arguments become :class:`~npu_lab.puzzles.model.Buffer` objects over the tensors' device memory
(``npu_lab.device_array``), so stores write the tensors. It returns the run's
:class:`~npu_lab.puzzles.cost.Stats` and advances the device's simulated clock by the kernel's
roofline time (the profiler sees the launch).

Two runners, the same values and the same counts:

* **compiled** (the default): :mod:`~npu_lab.puzzles.compiled` calls the kernel body *once* for the
  whole grid, every tile carrying a leading block axis, so the body is traced into one straight-line
  schedule of tile operations for all blocks; loads and stores are numba loops
  (:mod:`~npu_lab.puzzles.jit`) over the tensors' device memory. A kernel whose control flow
  depends on its block or its data falls back to the Python runner (``Stats.mode`` says so).
* **Python** (``compiled=False``, and ``debug=True``): one block after the other, each tile
  operation one NumPy call on that block's tile. ``debug=True`` adds a trace of every access and
  runs the blocks in a shuffled order (see :mod:`~npu_lab.puzzles.debug`); its out-of-bounds and
  scratchpad errors name the block, the tile position and the tensor coordinates.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from . import debug as _debug
from .compiled import NotStraightLine, run_grid
from .cost import Stats, kernel_us
from .model import Block, Buffer, Context, TileError

#: A block's scratchpad, bytes, unless the launch says otherwise.
DEFAULT_SCRATCHPAD = 16 * 1024

#: The lists :func:`watch` is filling: every launch that reached the device's clock is appended to each.
_WATCHERS: list[list[Stats]] = []


@contextlib.contextmanager
def watch() -> Iterator[list[Stats]]:
    """Collect the :class:`Stats` of every tile-kernel launch that advances the device's clock in the block.

    A grader tells a kernel whose cost the tile model *counted* (its loads and stores) from one that
    *declared* its cost (``npu_lab.bringup.launch``) by matching the profiler's launches with these::

        with watch() as tiles, npu_lab.profile() as prof:
            torch.mm(a, b)
        # every kernel event of prof is one of tiles
    """
    seen: list[Stats] = []
    _WATCHERS.append(seen)
    try:
        yield seen
    finally:
        _WATCHERS.remove(seen)


class _Run:
    """The counters of one launch, shared by its blocks."""

    def __init__(self, debug: bool) -> None:
        self.debug = debug
        self.flops = 0.0
        self.bytes_read = 0
        self.bytes_written = 0
        self.order = 0
        self.trace = _debug.Trace() if debug else None

    def record(self, block: Block, kind: str, buf: Buffer, flat: np.ndarray, shape: tuple[int, ...]) -> None:
        block.step += 1
        if not self.debug:
            return
        counts = buf.reads if kind == "load" else buf.writes
        np.add.at(counts, flat, 1)
        self.trace.accesses.append(_debug.Access(self.order, block.pid, block.step, kind, buf.name,
                                                 flat.astype(np.int64), shape))

    def raise_out_of_bounds(self, block: Block, kind: str, buf: Buffer, idx: np.ndarray, bad: np.ndarray,
                            masked: bool) -> None:
        raise _debug.out_of_bounds(block.where(), kind, buf, idx, bad, masked)


def _grid(grid: int | Sequence[int]) -> tuple[int, ...]:
    g = (int(grid),) if isinstance(grid, (int, np.integer)) else tuple(int(v) for v in grid)
    if not 1 <= len(g) <= 3 or any(v < 0 for v in g):
        raise TileError(f"a grid is 1 to 3 non-negative ints, got {grid!r}")
    return g


def _array(name: str, value: Any) -> np.ndarray | None:
    """The device memory behind a tensor argument (None for a scalar argument)."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.device.type != "npu":
            raise TileError(f"{name}: a kernel runs on the npu; move the tensor there first ({name}.to('npu'))")
        if value.dtype != torch.float32:
            raise TileError(f"{name}: the puzzles work in float32, got {value.dtype}")
        if not value.is_contiguous():
            raise TileError(f"{name}: a kernel needs a contiguous tensor (call .contiguous())")
        from .. import device_array

        return device_array(value)
    if isinstance(value, np.ndarray):
        if value.dtype != np.float32 or not value.flags.c_contiguous:
            raise TileError(f"{name}: NumPy arguments must be contiguous float32 arrays")
        return value
    return None


def launch(kernel: Callable[..., None], grid: int | Sequence[int], *args: Any, scratchpad: int = DEFAULT_SCRATCHPAD,
           debug: bool = False, name: str | None = None, seed: int = 0, account: bool = True,
           compiled: bool = True) -> Stats:
    """Run ``kernel(ctx, *args)`` on every block of ``grid`` and return what it cost.

    Args:
        kernel: ``kernel(ctx, *args)``, written with the tile API of :mod:`npu_lab.puzzles.model`.
        grid: blocks per axis, e.g. ``cdiv(n, B)`` or ``(cdiv(n, B0), cdiv(m, B1))``.
        args: ``npu`` float32 tensors (contiguous; stores write them) and Python numbers.
        scratchpad: capacity of each block's scratchpad, bytes.
        debug: keep a trace of every access and shuffle the block order (see :mod:`.debug`).
        name: the kernel's name on the device's timeline (default: the function's name).
        seed: the seed of the shuffled block order (debug only).
        account: advance the device's simulated clock (and tell the profiler) when tensors are npu tensors.
        compiled: without ``debug``, run the compiled runner (falling back to Python when the kernel's
            control flow depends on its block or data); False runs the Python runner.
    """
    g = _grid(grid)
    name = name or getattr(kernel, "__name__", "kernel")
    try:
        params = [p for p in inspect.signature(kernel).parameters][1:]
    except (TypeError, ValueError):
        params = []
    buffers: list[Any] = []
    on_device = False
    for i, value in enumerate(args):
        arg_name = params[i] if i < len(params) else f"arg{i}"
        arr = _array(arg_name, value)
        if arr is None:
            buffers.append(value)
        else:
            on_device = on_device or not isinstance(value, np.ndarray)
            buffers.append(Buffer(arg_name, arr, track=debug))
    mode = "debug" if debug else "python"
    if compiled and not debug:
        try:
            moves, peak = run_grid(kernel, g, buffers, int(scratchpad), name)
        except Exception as exc:  # noqa: BLE001 - any failure: the Python runner gives the real error
            why = str(exc) if isinstance(exc, NotStraightLine) else type(exc).__name__
            mode = f"python (not compiled: {why})"
        else:
            blocks = list(itertools.product(*(range(v) for v in g)))
            stats = Stats(name, g, 1, moves.bytes_read, moves.bytes_written, moves.flops, peak if blocks else 0,
                          int(scratchpad), dict.fromkeys(blocks, peak), mode="compiled")
            return _finish(stats, buffers, debug, None, account and on_device)
    run = _Run(debug)
    pids = list(itertools.product(*(range(v) for v in g)))
    if debug and len(pids) > 1:
        pids = [pids[i] for i in np.random.default_rng(seed).permutation(len(pids))]
    peaks: dict[tuple[int, ...], int] = {}
    with np.errstate(all="ignore"):
        for order, pid in enumerate(pids):
            run.order = order
            block = Block(run, pid, int(scratchpad))
            result = kernel(Context(block, g), *buffers)
            if result is not None:
                raise TileError(f"{name} returned a value; a kernel writes its results with ctx.store and returns "
                                "nothing")
            peaks[pid] = block.peak
    stats = Stats(name, g, 1, run.bytes_read, run.bytes_written, run.flops, max(peaks.values(), default=0),
                  int(scratchpad), peaks, mode=mode)
    return _finish(stats, buffers, debug, run.trace, account and on_device)


def _finish(stats: Stats, buffers: list[Any], debug: bool, trace: Any, account: bool) -> Stats:
    """Shapes, read/write counts, the simulated time; the device clock advanced when ``account``."""
    for b in buffers:
        if isinstance(b, Buffer):
            stats.shapes[b.name] = b.shape
            if debug:
                stats.reads[b.name] = b.reads
                stats.writes[b.name] = b.writes
    stats.time_us = kernel_us(stats.flops, stats.bytes)
    stats.trace = trace
    if account:
        from ..device import clock

        clock.launch(f"puzzle:{stats.name}", stats.flops, stats.bytes_read, stats.bytes_written)
        for seen in _WATCHERS:
            seen.append(stats)
    return stats


def debug_launch(kernel: Callable[..., None], grid: int | Sequence[int], *args: Any, **kwargs: Any) -> Stats:
    """:func:`launch` with ``debug=True``: a trace of every access, blocks in a shuffled order."""
    return launch(kernel, grid, *args, debug=True, **kwargs)
