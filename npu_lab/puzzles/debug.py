"""The debug side of the runner: the trace of every load and store, and clear error messages.

``launch(..., debug=True)`` (what the puzzle checks use) differs from a plain launch in three ways:

* it keeps a :class:`Trace`: every load and store with its block, its step within the block and
  the elements it touched, and per tensor how many times each element was read and written (so
  :mod:`~npu_lab.puzzles.draw` can show which tiles were loaded when, and the checks can say
  "w was read 5 times per element");
* it runs the blocks in a shuffled (seeded) order: blocks of a real chip run in no fixed order,
  so a kernel that only works when block 0 runs first fails here too;
* nothing else: the bounds and scratchpad checks run in both modes (they are cheap), and their
  messages, written here, name the block, the tile position and the tensor coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .model import Buffer, OutOfBounds


@dataclass
class Access:
    """One load or store of one block."""

    order: int  # the block's place in the run order
    pid: tuple[int, ...]
    step: int  # the access's number within its block
    kind: str  # "load" | "store"
    tensor: str
    flat: np.ndarray  # the flat element indices touched
    tile_shape: tuple[int, ...]


@dataclass
class Trace:
    """Every access of a debug run, in the order they happened."""

    accesses: list[Access] = field(default_factory=list)

    def of_block(self, pid: tuple[int, ...]) -> list[Access]:
        return [a for a in self.accesses if a.pid == pid]

    def blocks(self) -> list[tuple[int, ...]]:
        """Block ids in the order they ran."""
        seen: dict[tuple[int, ...], None] = {}
        for a in self.accesses:
            seen.setdefault(a.pid, None)
        return list(seen)


def region(shape: tuple[int, ...], flat: np.ndarray) -> str:
    """The bounding box of flat indices as tensor slices, e.g. ``[0:8, 32:64]`` (``+ gaps`` if not dense)."""
    if flat.size == 0:
        return "[] (nothing: masked out)"
    if not shape:
        return "[()]"
    coords = np.unravel_index(flat, shape)
    lo = [int(c.min()) for c in coords]
    hi = [int(c.max()) + 1 for c in coords]
    box = int(np.prod([h - l for l, h in zip(lo, hi)]))
    text = "[" + ", ".join(f"{l}:{h}" if h - l > 1 else f"{l}" for l, h in zip(lo, hi)) + "]"
    if box != np.unique(flat).size:
        text += f" ({np.unique(flat).size} of {box} elements)"
    return text


def describe(access: Access, shapes: dict[str, tuple[int, ...]]) -> str:
    """E.g. ``load x[0:8, 32:64]``."""
    return f"{access.kind} {access.tensor}{region(shapes.get(access.tensor, ()), access.flat)}"


def out_of_bounds(where: str, kind: str, buf: Buffer, idx: np.ndarray, bad: np.ndarray, masked: bool) -> OutOfBounds:
    """The error for a load/store that touches elements outside ``buf`` with no mask excluding them."""
    positions = np.argwhere(bad)
    first = tuple(int(p) for p in positions[0])
    off = int(idx[first])
    n_bad = len(positions)
    side = "before the start" if off < 0 else "past the end"
    tile_pos = first if len(first) != 1 else first[0]
    fix = ("the mask lets this offset through: check the mask's condition (e.g. offsets < n, rows < n and cols < m)"
           if masked else f"add mask=... so positions outside {buf.name} are left out (e.g. mask=offsets < n)")
    return OutOfBounds(
        f"{where}: ctx.{kind}({buf.name}, ...) is out of bounds: tile position {tile_pos} has offset {off}, "
        f"{side} of {buf.name} (shape {buf.shape}, flat indices 0..{buf.numel - 1})"
        + (f", and {n_bad - 1} more position{'s' if n_bad > 2 else ''} of the tile of shape {idx.shape} too"
           if n_bad > 1 else "")
        + f". {fix}.")
