"""The compiled runner: a kernel's tile program run once for the whole grid, memory moved by numba.

The Python runner calls the kernel once per block. For most kernels that is needless: a puzzle
kernel's *control flow* (its Python loops over tiles, the tile shapes) is the same in every block;
only the addresses depend on ``ctx.program_id``. So the compiled runner calls the kernel body
**once**, with every tile carrying a leading *block axis*: ``ctx.program_id(0)`` is the index tile
``[0, 1, ..., G-1]`` (one entry per block), a tile of shape ``(B,)`` is held as ``(G, B)`` (or
``(1, B)`` while it is the same in every block, e.g. ``ctx.arange(B)``). Running the body once
traces it into a straight-line schedule - one NumPy operation per tile operation for all blocks -
and executes it at the same time:

* loads and stores are numba loops (:mod:`~npu_lab.puzzles.jit`) over the tensors' real device
  memory, counting the bytes their masks let through;
* arithmetic is one NumPy call per operation on the ``(G, ...)`` arrays, which computes each block's
  elements exactly as the per-block call does, so values are identical;
* FLOPs and the scratchpad are counted per block (tile shapes are the same in every block, so
  every block has the same peak), then times the grid.

A kernel that is *not* straight-line - it branches on a tile (``if t.max() > 0``), turns a
block-dependent value into a Python int (``range(ctx.program_id(0) * B, ...)``), or breaks a rule -
raises :class:`NotStraightLine` or a :class:`~npu_lab.puzzles.model.PuzzleError` here; the runner
then undoes every store this attempt made and runs the kernel in the Python runner, which gives
the same values and counts (and the clear error message, if there is one). ``Stats.mode`` says
which runner ran.

Order: here every block does its first store before any block does its second. Blocks of a real
chip run in no fixed order either; a kernel whose result depends on the order is wrong, and the
debug runner (shuffled blocks) is where it shows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import jit
from .model import DTYPE, ITEMSIZE, Block, Buffer, Context, PuzzleError, Tile, TileError


class NotStraightLine(PuzzleError):  # noqa: N818 - a reason, not an error the learner sees
    """The kernel's control flow depends on its block or its data: it cannot run as one schedule for the grid."""


def _lead(value: Any) -> int:
    return value.data.shape[0] if isinstance(value, GridTile) else 1


def _logical_ndim(value: Any) -> int:
    return value.data.ndim - 1 if isinstance(value, GridTile) else 0


def _is_host(value: Any) -> bool:
    return isinstance(value, GridTile) and value._host


def _weak(data: np.ndarray, dtype: np.dtype | None) -> np.ndarray:
    """A block-dependent Python number's values cast as NumPy casts a Python number next to an array of ``dtype``.

    (NumPy treats a Python scalar as "weak": ``float32_tile * 0.1`` stays float32, ``int_tile * 0.5``
    becomes float64; the per-block runner meets these values as Python numbers, so here they must
    be cast the same way to give the same bits.)
    """
    if dtype is None:
        return data
    if dtype.kind == "f" or (dtype.kind in "iu" and data.dtype.kind in "iub"):
        return data.astype(dtype)
    return data


def _result_dtype(values: Sequence[Any]) -> np.dtype | None:
    """The dtype NumPy gives the tiles among ``values`` that are real tiles (not block-dependent numbers)."""
    arrays = [v.data for v in values if isinstance(v, GridTile) and not v._host]
    return np.result_type(*arrays) if arrays else None


def _operand(value: Any, ndim: int, dtype: np.dtype | None) -> Any:
    """``value`` ready for a NumPy call next to tiles of ``dtype``: padded; weakly cast if a block-dependent number."""
    padded = _padded(value, ndim)
    return _weak(padded, dtype) if _is_host(value) else padded


def _padded(value: Any, ndim: int) -> Any:
    """A tile's array with 1s inserted after the block axis up to ``ndim`` tile axes (numbers as they are)."""
    if isinstance(value, GridTile):
        d = value.data
        missing = ndim - (d.ndim - 1)
        return d.reshape((d.shape[0],) + (1,) * missing + d.shape[1:]) if missing > 0 else d
    if isinstance(value, Buffer):
        raise TileError(f"{value.name} is in device memory: load a tile of it with ctx.load first")
    if isinstance(value, (bool, int, float, np.number, np.bool_)):
        return value
    if isinstance(value, Tile):
        raise TileError("a tile from another launch cannot be used in this one")
    raise TileError(f"tiles combine with tiles and Python numbers, not with a {type(value).__name__}")


class GridTile(Tile):
    """A tile of every block at once: ``data`` has a leading block axis of length G (or 1 when equal in all)."""

    __slots__ = ("_host",)

    def __init__(self, block: GridBlock, data: np.ndarray, host: bool = False) -> None:
        #: a Python number in the per-block runner (``ctx.program_id(0) * B``...): not a tile there, so
        #: it takes no scratchpad, its arithmetic is not counted and it keeps Python's float64
        self._host = host
        if not host:
            if data.dtype.kind == "f":
                data = data.astype(DTYPE, copy=False)
            elif data.dtype.kind in "iu":
                data = data.astype(np.int64, copy=False)
        self.data = data
        self._block = block
        per_block = math.prod(data.shape[1:])
        self._nbytes = per_block * ITEMSIZE if data.dtype.kind == "f" and not host else 0
        if self._nbytes:
            block.allocate(self._nbytes, data.shape[1:])

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape[1:])

    @property
    def ndim(self) -> int:
        return self.data.ndim - 1

    def __len__(self) -> int:
        return self.data.shape[1]

    def _one(self) -> np.ndarray:
        if self.data.shape[0] != 1:
            raise NotStraightLine("a Python value taken from a tile that differs from block to block")
        return self.data[0]

    def __bool__(self) -> bool:
        d = self._one()
        if d.size != 1:
            raise TileError("the truth value of a tile of several elements is ambiguous: a kernel branches "
                            "per block, not per element (use a mask or ctx.where)")
        return bool(d.reshape(()))

    def __float__(self) -> float:
        return float(self._one().reshape(()))

    def __int__(self) -> int:
        return int(self._one().reshape(()))

    def __index__(self) -> int:
        if self.is_data or math.prod(self.shape) != 1:
            raise TileError("only a one-element index tile can be used as a Python int")
        return int(self._one().reshape(()))

    def numpy(self) -> np.ndarray:
        return self._one().copy()

    def _new(self, data: Any, flops: float) -> GridTile:
        """A new tile from ``data`` (block axis first); ``flops`` per block (a block-dependent number stays one)."""
        data = np.asarray(data)
        if self._host:
            return GridTile(self._block, data, host=True)
        if data.dtype.kind == "f":
            self._block.count_flops(flops)
        return GridTile(self._block, data)

    def _not_a_tile(self, what: str) -> None:
        if self._host:
            raise NotStraightLine(f"{what} of a block-dependent Python number")

    def _per_block(self, data: np.ndarray) -> int:
        return math.prod(data.shape[1:])

    def _binary(self, other: Any, fn: Callable[[Any, Any], Any], reverse: bool = False) -> GridTile:
        nd = max(self.ndim, _logical_ndim(other))
        dtype = _result_dtype((self, other))
        a, b = _operand(self, nd, dtype), _operand(other, nd, dtype)
        try:
            out = np.asarray(fn(b, a) if reverse else fn(a, b))
        except ValueError as exc:
            shape = other.shape if isinstance(other, Tile) else ()
            raise TileError(f"tiles of shapes {self.shape} and {shape} do not broadcast ({exc})") from None
        if self._host and (not isinstance(other, GridTile) or other._host):
            return GridTile(self._block, out, host=True)  # number op number: still a number
        if out.dtype.kind == "f":
            self._block.count_flops(self._per_block(out))
        return GridTile(self._block, out)

    def __matmul__(self, o: Any) -> GridTile:
        if not isinstance(o, Tile):
            raise TileError("@ multiplies two tiles")
        return self._block.dot(self, o)

    def __invert__(self) -> GridTile:
        self._not_a_tile("~")
        return self._new(~self.data if self.data.dtype == bool else -self.data - 1, 0)

    def __neg__(self) -> GridTile:
        return self._new(-self.data, self._per_block(self.data))

    def __abs__(self) -> GridTile:
        return self._new(np.abs(self.data), self._per_block(self.data))

    def _inplace(self, o: Any, fn: Callable[..., Any]) -> GridTile:
        if self._host:
            return self._binary(o, fn)  # Python numbers are not changed in place: the name is rebound
        b = _operand(o, self.ndim, self.data.dtype)
        o_shape = o.shape if isinstance(o, Tile) else ()
        out_kind = np.result_type(self.data, b).kind
        if np.broadcast_shapes(self.shape, o_shape) == self.shape and out_kind == self.data.dtype.kind \
                and _logical_ndim(o) <= self.ndim:
            if _lead(o) > self.data.shape[0]:  # the same in every block until now: give each block its own
                self.data = np.repeat(self.data, _lead(o), axis=0)
            fn(self.data, b, out=self.data)
            if self.is_data:
                self._block.count_flops(self._per_block(self.data))
            return self
        return self._binary(o, fn)

    def __getitem__(self, item: Any) -> GridTile:
        self._not_a_tile("__getitem__")
        items = item if isinstance(item, tuple) else (item,)
        for i in items:
            if isinstance(i, (Tile, list, np.ndarray)):
                raise TileError("tiles are indexed with ints, slices and None (gathers go through ctx.load)")
        if any(i is Ellipsis for i in items):
            raise NotStraightLine("an Ellipsis index")
        if sum(i is not None for i in items) > self.ndim:
            raise TileError(f"indexing a tile of shape {self.shape} with {item!r}: too many indices")
        try:
            view = self.data[(slice(None),) + items]
        except IndexError as exc:
            raise TileError(f"indexing a tile of shape {self.shape} with {item!r}: {exc}") from None
        return self._new(np.array(view), 0)

    @property
    def T(self) -> GridTile:  # noqa: N802 - the NumPy name
        self._not_a_tile("T")
        axes = (0,) + tuple(range(self.data.ndim - 1, 0, -1))
        return self._new(np.ascontiguousarray(self.data.transpose(axes)), 0)

    def reshape(self, *shape: Any) -> GridTile:
        self._not_a_tile("reshape")
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return self._new(self.data.reshape((self.data.shape[0],) + tuple(int(s) for s in shape)).copy(), 0)

    def _axis(self, axis: int) -> int:
        if not -self.ndim <= axis < self.ndim:
            raise TileError(f"axis {axis} is out of range for a tile of shape {self.shape}")
        return axis % self.ndim + 1

    def _reduce(self, fn: Callable[..., Any], axis: int | None) -> GridTile:
        self._not_a_tile("_reduce")
        if math.prod(self.shape) == 0:
            raise TileError("reducing an empty tile")
        n = self._per_block(self.data)
        if axis is None:
            return self._new(fn(self.data.reshape(self.data.shape[0], -1), axis=1), n)
        return self._new(fn(self.data, axis=self._axis(axis)), n)

    def cumsum(self, axis: int = -1) -> GridTile:
        self._not_a_tile("cumsum")
        return self._new(np.cumsum(self.data, axis=self._axis(axis)), self._per_block(self.data))

    def exp(self) -> GridTile:
        self._not_a_tile("exp")
        return self._new(np.exp(self.data), self._per_block(self.data))

    def log(self) -> GridTile:
        self._not_a_tile("log")
        return self._new(np.log(self.data), self._per_block(self.data))

    def sqrt(self) -> GridTile:
        self._not_a_tile("sqrt")
        return self._new(np.sqrt(self.data), self._per_block(self.data))


class GridBlock(Block):
    """The scratchpad and counters of every block at once (each block's own count, times the grid)."""

    def __init__(self, run: Any, blocks: int, capacity: int) -> None:
        super().__init__(run, (0,), capacity)
        self.blocks = blocks

    def count_flops(self, n: float) -> None:
        self.run.flops += n * self.blocks

    def dot(self, a: Tile, b: Tile, acc: Tile | None = None) -> GridTile:
        if not (isinstance(a, GridTile) and isinstance(b, GridTile)):
            raise TileError("ctx.dot multiplies two tiles")
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
            raise TileError(f"ctx.dot needs (M, K) and (K, N) tiles, got {a.shape} and {b.shape}")
        m, k = a.shape
        n = b.shape[1]
        self.count_flops(2.0 * m * n * k)
        prod = np.matmul(a.data.astype(DTYPE), b.data.astype(DTYPE))
        if acc is None:
            return GridTile(self, prod)
        if not isinstance(acc, GridTile) or acc.shape != (m, n):
            raise TileError(f"ctx.dot(a, b, acc): acc has shape {getattr(acc, 'shape', None)}, the product {(m, n)}")
        if prod.shape[0] > acc.data.shape[0]:
            acc.data = np.repeat(acc.data, prod.shape[0], axis=0)
        acc.data += prod
        self.count_flops(m * n)
        return acc


class _Moves:
    """The byte counters of a compiled run and the undo log of its stores."""

    def __init__(self) -> None:
        self.flops = 0.0
        self.bytes_read = 0
        self.bytes_written = 0
        self.undo: list[tuple[np.ndarray, np.ndarray, np.ndarray, bool, np.ndarray]] = []

    def rollback(self) -> None:
        """Put back every element the stores of this attempt overwrote, last store first."""
        for flat, idx, mask, has_mask, old in reversed(self.undo):
            jit.unscatter(flat, idx, mask, has_mask, old)
        self.undo.clear()


def _read_only(a: np.ndarray) -> np.ndarray:
    """``a`` marked read-only: the numba loops then see one array type and compile once (and are cached)."""
    a.setflags(write=False)
    return a


_NO_MASK = _read_only(np.zeros(0, np.bool_))


class GridContext(Context):
    """``ctx`` of the compiled runner: the same API as :class:`~npu_lab.puzzles.model.Context`, for all blocks."""

    def __init__(self, block: GridBlock, grid: tuple[int, ...], pids: np.ndarray) -> None:
        super().__init__(block, grid)
        self._pids = pids  # (G, axes) int64

    def program_id(self, axis: int = 0) -> GridTile:  # type: ignore[override]
        """This block's index along ``axis`` (here: an index tile holding every block's index)."""
        if not 0 <= axis < len(self._grid):
            raise TileError(f"the grid has {len(self._grid)} axes, no axis {axis}")
        return GridTile(self._block, np.ascontiguousarray(self._pids[:, axis]), host=True)

    def arange(self, start: int, stop: int | None = None) -> GridTile:
        if stop is None:
            start, stop = 0, start
        return GridTile(self._block, np.arange(int(start), int(stop), dtype=np.int64)[None, :])

    def full(self, shape: int | Sequence[int], value: float) -> GridTile:
        s = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(v) for v in shape)
        return GridTile(self._block, np.full((1,) + s, value, DTYPE))

    def _flat_access(self, what: str, buf: Any, offsets: Any, mask: Any,
                     value: Any = None) -> tuple[tuple[int, ...], np.ndarray, np.ndarray, bool, np.ndarray | None]:
        """Indices, mask and values of one access broadcast to ``(G or 1, *tile shape)`` and flattened."""
        if not isinstance(buf, Buffer):
            raise TileError(f"{what} needs a tensor argument of the kernel (a Buffer), got {type(buf).__name__}")
        if isinstance(offsets, GridTile):
            if offsets.is_data or offsets.data.dtype == bool:
                raise TileError(f"{what}: offsets must be an index tile (integers from ctx.arange)")
            idx, shape = offsets.data, offsets.shape
        elif isinstance(offsets, (int, np.integer)):
            idx, shape = np.asarray([offsets], np.int64), ()
        else:
            raise TileError(f"{what}: offsets must be an index tile made with ctx.arange, got "
                            f"{type(offsets).__name__}")
        parts: list[Any] = [idx]
        if mask is not None:
            if isinstance(mask, GridTile) and mask.data.dtype == bool:
                if np.broadcast_shapes(mask.shape, shape) != shape:
                    raise TileError(f"{what}: a mask of shape {mask.shape} does not fit offsets of shape {shape}")
                parts.append(_padded(mask, len(shape)))
            elif isinstance(mask, (bool, np.bool_)):
                parts.append(np.asarray([mask]).reshape((1,) + (1,) * len(shape)))
            else:
                raise TileError(f"{what}: mask must be a boolean tile (e.g. offsets < n)")
        if value is not None:
            if isinstance(value, GridTile):
                if np.broadcast_shapes(value.shape, shape) != shape:
                    raise TileError(f"{what}: a value of shape {value.shape} does not fit offsets of shape {shape}")
                parts.append(_padded(value, len(shape)).astype(DTYPE, copy=False))
            else:
                v = _padded(value, 0)
                parts.append(np.asarray([v], DTYPE).reshape((1,) + (1,) * len(shape)))
        lead = max(p.shape[0] for p in parts)
        full = (lead,) + shape
        flat = [_read_only(np.ascontiguousarray(np.broadcast_to(p, full)).reshape(-1)) for p in parts]
        has_mask = mask is not None
        m = flat[1] if has_mask else _NO_MASK
        v = flat[-1] if value is not None else None
        return full, flat[0], m, has_mask, v

    def _copies(self, full: tuple[int, ...]) -> int:
        """How many blocks one moved element stands for: all of them when the access is the same in every block."""
        return self._block.blocks if full[0] == 1 else 1

    def load(self, x: Buffer, offsets: Tile | int, mask: Tile | bool | None = None, other: float = 0.0) -> GridTile:
        full, idx, m, has_mask, _ = self._flat_access(f"ctx.load({getattr(x, 'name', '?')}, ...)", x, offsets, mask)
        out = np.empty(idx.shape[0], DTYPE)
        count = jit.gather(x._flat, idx, m, has_mask, float(other), out)
        if count < 0:
            raise NotStraightLine(f"ctx.load({x.name}, ...) out of bounds")
        moves: _Moves = self._block.run
        moves.bytes_read += count * ITEMSIZE * self._copies(full)
        return GridTile(self._block, out.reshape(full))

    def store(self, out: Buffer, offsets: Tile | int, value: Tile | float, mask: Tile | bool | None = None) -> None:
        what = f"ctx.store({getattr(out, 'name', '?')}, ...)"
        if value is None:
            raise TileError(f"{what}: nothing to store")
        full, idx, m, has_mask, v = self._flat_access(what, out, offsets, mask, value)
        old = np.empty(idx.shape[0], DTYPE)
        count = jit.scatter(out._flat, idx, m, has_mask, v, old)
        if count < 0:
            raise NotStraightLine(f"{what} out of bounds")
        moves: _Moves = self._block.run
        moves.undo.append((out._flat, idx, m, has_mask, old))
        moves.bytes_written += count * ITEMSIZE * self._copies(full)

    def dot(self, a: Tile, b: Tile, acc: Tile | None = None) -> GridTile:
        return self._block.dot(a, b, acc)

    def where(self, mask: Tile, a: Tile | float, b: Tile | float) -> GridTile:
        nd = max(_logical_ndim(mask), _logical_ndim(a), _logical_ndim(b))
        dtype = _result_dtype((a, b))
        out = np.asarray(np.where(_padded(mask, nd), _operand(a, nd, dtype), _operand(b, nd, dtype)))
        if out.ndim == 0:
            out = out.reshape(1)
        if out.dtype.kind == "f":
            self._block.count_flops(math.prod(out.shape[1:]))
        return GridTile(self._block, out)

    def _elementwise(self, fn: Callable[..., Any], a: Any, b: Any) -> GridTile:
        nd = max(_logical_ndim(a), _logical_ndim(b))
        dtype = _result_dtype((a, b))
        out = np.asarray(fn(_operand(a, nd, dtype), _operand(b, nd, dtype)))
        if out.ndim == 0:
            out = out.reshape(1)
        if out.dtype.kind == "f":
            self._block.count_flops(math.prod(out.shape[1:]))
        return GridTile(self._block, out)


#: At most this many scratchpad bytes (over all blocks) per call of the kernel body: a big grid runs in
#: chunks of ``CHUNK_BYTES // scratchpad`` blocks, so its tiles never take more host memory than this.
CHUNK_BYTES = 64 * 1024 * 1024


def run_grid(kernel: Callable[..., None], grid: tuple[int, ...], args: list[Any], capacity: int,
             name: str) -> tuple[_Moves, int]:
    """Run ``kernel`` once for every block of ``grid``; returns the counters and the scratchpad peak per block.

    The body is called once per chunk of at most ``CHUNK_BYTES // capacity`` blocks (once for a
    puzzle's grid). Raises (after undoing its stores) when the kernel cannot run this way; the
    caller falls back to the Python runner.
    """
    moves = _Moves()
    pids = np.array(list(np.ndindex(*grid)), dtype=np.int64).reshape(-1, len(grid))
    per_call = max(1, CHUNK_BYTES // max(1, capacity))
    peak = 0
    try:
        for start in range(0, pids.shape[0], per_call):
            chunk = pids[start:start + per_call]
            block = GridBlock(moves, chunk.shape[0], capacity)
            with np.errstate(all="ignore"):
                result = kernel(GridContext(block, grid, chunk), *args)
            if result is not None:
                raise TileError(f"{name} returned a value; a kernel writes its results with ctx.store and returns "
                                "nothing")
            peak = max(peak, block.peak)
    except BaseException:
        moves.rollback()
        raise
    moves.undo.clear()
    return moves, peak
