"""Which part of the output each block of a puzzle's grid computes, and which input elements that part needs.

A puzzle's text says how the work is split: "block b handles elements b*B ... b*B+B-1", "block (p0, p1)
computes the B0 x B1 tile at rows p0*B0...", "a block owns B0 rows". A :class:`Part` is that split for one
block, as flat element indices: the elements of the output the block must store, and for every input the
elements those outputs are computed from. The checks hold a debug run's trace against the parts:

* each block stores only its own part of the output, and every output element is stored once;
* each block loads, with its own ``ctx.load``, every input element its part needs. A block's scratchpad
  is its own, so this is the least a block must read: a kernel that reads less got the values some
  other way (from Python variables kept between blocks, or from device memory around ``ctx.load``),
  and its byte count does not hold what a chip would move.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .model import cdiv


@dataclass(frozen=True)
class Part:
    """One block's share of a launch: the output elements it computes and the input elements they need."""

    pid: tuple[int, ...]
    out: np.ndarray  #: flat indices of the output
    needs: dict[str, np.ndarray]  #: input name -> flat indices of that input


def span(start: int, stop: int, limit: int) -> np.ndarray:
    """The indices ``start ... stop-1`` that are below ``limit``."""
    return np.arange(max(0, start), max(0, min(stop, limit)), dtype=np.int64)


def box(rows: np.ndarray, cols: np.ndarray, width: int) -> np.ndarray:
    """Flat indices of the ``rows`` x ``cols`` elements of a row-major matrix ``width`` columns wide."""
    return (rows[:, None] * width + cols[None, :]).reshape(-1)


def everything(numel: int) -> np.ndarray:
    """Every flat index of a tensor of ``numel`` elements."""
    return np.arange(numel, dtype=np.int64)


def vector(n: int, block: int, inputs: Sequence[str]) -> list[Part]:
    """Blocks of ``block`` consecutive elements; output element i needs element i of every input."""
    parts = []
    for b in range(cdiv(n, block)):
        idx = span(b * block, (b + 1) * block, n)
        parts.append(Part((b,), idx, {name: idx for name in inputs}))
    return parts


def tiles(n: int, m: int, b0: int, b1: int) -> list[tuple[tuple[int, int], np.ndarray, np.ndarray]]:
    """The ``(pid, rows, cols)`` of a 2-d grid of ``b0`` x ``b1`` tiles over an ``n`` x ``m`` output."""
    return [((p0, p1), span(p0 * b0, (p0 + 1) * b0, n), span(p1 * b1, (p1 + 1) * b1, m))
            for p0, p1 in itertools.product(range(cdiv(n, b0)), range(cdiv(m, b1)))]


def row_blocks(n: int, rows_per_block: int) -> list[tuple[tuple[int], np.ndarray]]:
    """The ``(pid, rows)`` of a 1-d grid of blocks that own ``rows_per_block`` rows each."""
    return [((b,), span(b * rows_per_block, (b + 1) * rows_per_block, n)) for b in range(cdiv(n, rows_per_block))]


def whole_rows(n: int, m: int, rows_per_block: int, inputs: dict[str, int] | None = None,
               out_width: int | None = None) -> list[Part]:
    """Blocks owning whole rows of an ``n`` x ``m`` input ``x`` (and of the output, ``out_width`` wide: ``m``
    unless the output has one value per row); ``inputs`` adds inputs every block needs whole (name -> numel)."""
    width = m if out_width is None else out_width
    parts = []
    for pid, rows in row_blocks(n, rows_per_block):
        needs = {"x": box(rows, everything(m), m)}
        needs.update({name: everything(numel) for name, numel in (inputs or {}).items()})
        parts.append(Part(pid, box(rows, everything(width), width) if width != 1 else rows, needs))
    return parts


def matmul(m: int, n: int, k: int, bm: int, bn: int, bias: bool = False) -> list[Part]:
    """Blocks owning ``bm`` x ``bn`` tiles of ``a @ b`` (M x N): rows of ``a`` and columns of ``b``, all of K."""
    parts = []
    for pid, rows, cols in tiles(m, n, bm, bn):
        needs = {"a": box(rows, everything(k), k), "b": box(everything(k), cols, n)}
        if bias:
            needs["bias"] = cols
        parts.append(Part(pid, box(rows, cols, n), needs))
    return parts


def conv1d(n: int, k: int, block: int) -> list[Part]:
    """Blocks of ``block`` outputs of a valid 1-d convolution; output i needs x[i : i + k] and all of w."""
    n_out = n - k + 1
    parts = []
    for b in range(cdiv(n_out, block)):
        out = span(b * block, (b + 1) * block, n_out)
        x = span(b * block, b * block + len(out) + k - 1, n) if len(out) else out
        parts.append(Part((b,), out, {"x": x, "w": everything(k)}))
    return parts


def attention(n: int, m: int, d: int, rows_per_block: int) -> list[Part]:
    """Blocks owning query rows: their rows of q, and every key and value."""
    return [Part(pid, box(rows, everything(d), d),
                 {"q": box(rows, everything(d), d), "k": everything(m * d), "v": everything(m * d)})
            for pid, rows in row_blocks(n, rows_per_block)]
