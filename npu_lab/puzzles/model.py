"""The kernel programming model of the NPU puzzles: blocks, a scratchpad, tiles, loads and stores.

A kernel is a Python function ``kernel(ctx, ...)``. The runner calls it once per *block* of a
grid (one block = one core of the chip); ``ctx`` is that block's view of the chip:

* ``ctx.program_id(axis)`` - which block this is; ``ctx.num_programs(axis)`` - the grid's size;
* ``ctx.arange(n)`` - the index tile ``[0, 1, ..., n-1]``, to compute addresses with;
* ``ctx.load(x, offsets, mask=None, other=0.0)`` - copy elements of ``x`` (a tensor in device
  memory) into a tile in the scratchpad: ``offsets`` is an index tile of *flat* element indices
  (for a row-major 2-d tensor: ``rows[:, None] * m + cols[None, :]``); where ``mask`` is false
  nothing is read and the tile holds ``other``;
* ``ctx.store(out, offsets, value, mask=None)`` - write a tile back to device memory;
* arithmetic on tiles as on small NumPy arrays (``+ - * / **``, comparisons, ``t[:, None]``,
  ``t.sum(axis)``, ``t.max(axis)``, ``t.cumsum(axis)``, ``t.exp()``, ``ctx.dot(a, b)``,
  ``ctx.where(mask, a, b)``, ``ctx.maximum(a, b)``, ``ctx.zeros(shape)``...).

A kernel cannot read device memory except through ``ctx.load``: the arguments that are tensors
arrive as :class:`Buffer` objects, which have a name, a shape and a size but no elements.

**The scratchpad.** Every data tile (float32) lives in the block's scratchpad while the kernel
holds it: creating one allocates its bytes, dropping the last reference frees them (as Python
frees objects). Temporaries count too: ``a * b + c`` holds ``a * b`` while adding ``c``. Going
over the capacity raises :class:`ScratchpadOverflow`. Index and mask tiles (integers and booleans,
made from ``ctx.arange``) are addresses, computed on the fly: they take no scratchpad and their
arithmetic is not counted as FLOPs.

**Counting.** Every load counts the bytes it reads (only the elements its mask lets through),
every store the bytes it writes, every operation on data tiles its FLOPs (one per output element,
one per input element of a reduction, ``2*M*N*K`` for a ``dot``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: Bytes of one element: the puzzles work in float32.
ITEMSIZE = 4
DTYPE = np.float32


class PuzzleError(Exception):
    """A kernel broke a rule of the programming model (the message says which block and where)."""


class OutOfBounds(PuzzleError, IndexError):  # noqa: N818 - reads like IndexError
    """A load or store touched an element outside its tensor, where no mask excluded it."""


class ScratchpadOverflow(PuzzleError, MemoryError):  # noqa: N818 - reads like MemoryError
    """A block held more data tiles than its scratchpad holds."""


class TileError(PuzzleError, TypeError):
    """A tile operation was used the wrong way (e.g. a Buffer indexed directly, a float offset)."""


def _fmt_bytes(n: float) -> str:
    if n < 1024:
        return f"{int(n)} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024 / 1024:.1f} MiB"


class Buffer:
    """A tensor in device memory, as a kernel sees it: a name, a shape, a size - and no elements.

    Read it with ``ctx.load(buffer, offsets, mask)`` and write it with ``ctx.store``; offsets are
    flat element indices (row-major).
    """

    __slots__ = ("name", "shape", "numel", "_flat", "reads", "writes")

    def __init__(self, name: str, array: np.ndarray, track: bool = False) -> None:
        self.name = name
        self.shape = tuple(array.shape)
        self.numel = int(array.size)
        self._flat = array.reshape(-1)
        if not np.shares_memory(self._flat, array) and array.size:
            raise TileError(f"{name}: a kernel needs a contiguous tensor")
        #: per-element read / write counts (debug runs only)
        self.reads = np.zeros(self.numel, np.int32) if track else None
        self.writes = np.zeros(self.numel, np.int32) if track else None

    def __getitem__(self, item: Any) -> Any:
        raise TileError(f"{self.name} is in device memory: a kernel reads it with ctx.load({self.name}, offsets, "
                        "mask) into a tile of its scratchpad, and indexes the tile")

    def __setitem__(self, item: Any, value: Any) -> None:
        raise TileError(f"{self.name} is in device memory: a kernel writes it with ctx.store({self.name}, offsets, "
                        "tile, mask)")

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 1

    def __repr__(self) -> str:
        return f"Buffer({self.name!r}, shape={self.shape})"

    def coords(self, flat: int) -> tuple[int, ...]:
        """The tensor coordinates of flat element index ``flat`` (for messages)."""
        if not self.shape or flat < 0 or flat >= self.numel:
            return (flat,)
        return tuple(int(i) for i in np.unravel_index(flat, self.shape))


def _data(value: Any) -> Any:
    """The NumPy value of a tile or a Python number (a Buffer is refused with the reason)."""
    if isinstance(value, Tile):
        return value.data
    if isinstance(value, Buffer):
        raise TileError(f"{value.name} is in device memory: load a tile of it with ctx.load first")
    if isinstance(value, (bool, int, float, np.number, np.bool_)):
        return value
    raise TileError(f"tiles combine with tiles and Python numbers, not with a {type(value).__name__}")


class Tile:
    """A small array in a block's scratchpad (float32 data) or an index/mask tile (int64/bool).

    Behaves like a small NumPy array: arithmetic, comparisons, ``t[:, None]``, ``t[2:5]``,
    ``t.sum(axis)``, ``t.max(axis)``, ``t.min(axis)``, ``t.cumsum(axis)``, ``t.exp()``,
    ``t.log()``, ``t.sqrt()``, ``t.T``, ``t.shape``. Data tiles count against the scratchpad
    while they are alive.
    """

    __slots__ = ("data", "_block", "_nbytes", "__weakref__")
    __array_priority__ = 100  # numbers on the left of an operator defer to the tile's methods

    def __init__(self, block: Block, data: np.ndarray) -> None:
        if data.dtype.kind == "f":
            data = data.astype(DTYPE, copy=False)
        elif data.dtype.kind in "iu":
            data = data.astype(np.int64, copy=False)
        self.data = data
        self._block = block
        self._nbytes = data.size * ITEMSIZE if data.dtype.kind == "f" else 0
        if self._nbytes:
            block.allocate(self._nbytes, data.shape)

    def __del__(self) -> None:
        try:
            if self._nbytes:
                self._block.free(self._nbytes)
        except Exception:  # noqa: BLE001,S110 - interpreter shutdown: nothing left to account
            pass

    # -- what a tile is -----------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def is_data(self) -> bool:
        """A float tile (in the scratchpad), not an index or mask tile."""
        return self.data.dtype.kind == "f"

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        kind = "data" if self.is_data else ("mask" if self.data.dtype == bool else "index")
        return f"Tile({kind}, shape={self.shape}):\n{self.data!r}"

    def __bool__(self) -> bool:
        if self.data.size != 1:
            raise TileError("the truth value of a tile of several elements is ambiguous: a kernel branches "
                            "per block, not per element (use a mask or ctx.where)")
        return bool(self.data.reshape(()))

    def __float__(self) -> float:
        return float(self.data.reshape(()))

    def __int__(self) -> int:
        return int(self.data.reshape(()))

    def __index__(self) -> int:
        if self.is_data or self.data.size != 1:
            raise TileError("only a one-element index tile can be used as a Python int")
        return int(self.data.reshape(()))

    def __iter__(self) -> Any:
        raise TileError("tiles are not iterated element by element: use tile operations (sum, max, cumsum...)")

    def numpy(self) -> np.ndarray:
        """A copy of the tile's values as a NumPy array (for printing while debugging)."""
        return self.data.copy()

    # -- operations ---------------------------------------------------------------------------
    def _new(self, data: Any, flops: float) -> Tile:
        data = np.asarray(data)
        if data.dtype.kind == "f":
            self._block.count_flops(flops)
        return Tile(self._block, data)

    def _binary(self, other: Any, fn: Callable[[Any, Any], Any], reverse: bool = False) -> Tile:
        b = _data(other)
        try:
            out = fn(b, self.data) if reverse else fn(self.data, b)
        except ValueError as exc:
            shape = other.shape if isinstance(other, Tile) else ()
            raise TileError(f"tiles of shapes {self.shape} and {shape} do not broadcast ({exc}); "
                            "use t[:, None] or t[None, :] to add an axis") from None
        out = np.asarray(out)
        return self._new(out, out.size)

    def __add__(self, o: Any) -> Tile:
        return self._binary(o, np.add)

    def __radd__(self, o: Any) -> Tile:
        return self._binary(o, np.add, True)

    def __sub__(self, o: Any) -> Tile:
        return self._binary(o, np.subtract)

    def __rsub__(self, o: Any) -> Tile:
        return self._binary(o, np.subtract, True)

    def __mul__(self, o: Any) -> Tile:
        return self._binary(o, np.multiply)

    def __rmul__(self, o: Any) -> Tile:
        return self._binary(o, np.multiply, True)

    def __truediv__(self, o: Any) -> Tile:
        return self._binary(o, np.true_divide)

    def __rtruediv__(self, o: Any) -> Tile:
        return self._binary(o, np.true_divide, True)

    def __floordiv__(self, o: Any) -> Tile:
        return self._binary(o, np.floor_divide)

    def __mod__(self, o: Any) -> Tile:
        return self._binary(o, np.mod)

    def __pow__(self, o: Any) -> Tile:
        return self._binary(o, np.power)

    def __matmul__(self, o: Any) -> Tile:
        if not isinstance(o, Tile):
            raise TileError("@ multiplies two tiles")
        return self._block.dot(self, o)

    def __lt__(self, o: Any) -> Tile:
        return self._binary(o, np.less)

    def __le__(self, o: Any) -> Tile:
        return self._binary(o, np.less_equal)

    def __gt__(self, o: Any) -> Tile:
        return self._binary(o, np.greater)

    def __ge__(self, o: Any) -> Tile:
        return self._binary(o, np.greater_equal)

    def __eq__(self, o: Any) -> Tile:  # type: ignore[override]
        return self._binary(o, np.equal)

    def __ne__(self, o: Any) -> Tile:  # type: ignore[override]
        return self._binary(o, np.not_equal)

    __hash__ = None  # type: ignore[assignment]

    def __and__(self, o: Any) -> Tile:
        return self._binary(o, np.logical_and)

    __rand__ = __and__

    def __or__(self, o: Any) -> Tile:
        return self._binary(o, np.logical_or)

    __ror__ = __or__

    def __invert__(self) -> Tile:
        return self._new(~self.data if self.data.dtype == bool else -self.data - 1, 0)

    def __neg__(self) -> Tile:
        return self._new(-self.data, self.data.size)

    def __abs__(self) -> Tile:
        return self._new(np.abs(self.data), self.data.size)

    def _inplace(self, o: Any, fn: Callable[..., Any]) -> Tile:
        b = _data(o)
        out_kind = np.result_type(self.data, b).kind
        if np.broadcast_shapes(self.shape, np.shape(b)) == self.shape and out_kind == self.data.dtype.kind:
            fn(self.data, b, out=self.data)  # in place: no new scratchpad
            if self.is_data:
                self._block.count_flops(self.data.size)
            return self
        return self._binary(o, fn)

    def __iadd__(self, o: Any) -> Tile:
        return self._inplace(o, np.add)

    def __isub__(self, o: Any) -> Tile:
        return self._inplace(o, np.subtract)

    def __imul__(self, o: Any) -> Tile:
        return self._inplace(o, np.multiply)

    def __itruediv__(self, o: Any) -> Tile:
        if not self.is_data:
            return self._binary(o, np.true_divide)
        return self._inplace(o, np.true_divide)

    def __getitem__(self, item: Any) -> Tile:
        items = item if isinstance(item, tuple) else (item,)
        for i in items:
            if isinstance(i, (Tile, list, np.ndarray)):
                raise TileError("tiles are indexed with ints, slices and None (gathers go through ctx.load)")
        try:
            view = self.data[item]
        except IndexError as exc:
            raise TileError(f"indexing a tile of shape {self.shape} with {item!r}: {exc}") from None
        return self._new(np.array(view), 0)

    def __setitem__(self, item: Any, value: Any) -> None:
        raise TileError("tiles are not changed element by element: build a new tile with ctx.where(mask, a, b)")

    @property
    def T(self) -> Tile:  # noqa: N802 - the NumPy name
        """The transposed tile."""
        return self._new(np.ascontiguousarray(self.data.T), 0)

    def reshape(self, *shape: int) -> Tile:
        """The same elements in another shape."""
        return self._new(self.data.reshape(*shape).copy(), 0)

    def _reduce(self, fn: Callable[..., Any], axis: int | None) -> Tile:
        if self.data.size == 0:
            raise TileError("reducing an empty tile")
        return self._new(fn(self.data, axis=axis), self.data.size)

    def sum(self, axis: int | None = None) -> Tile:
        """Sum over ``axis`` (all elements if None)."""
        return self._reduce(np.sum, axis)

    def max(self, axis: int | None = None) -> Tile:
        """Maximum over ``axis`` (all elements if None)."""
        return self._reduce(np.max, axis)

    def min(self, axis: int | None = None) -> Tile:
        """Minimum over ``axis`` (all elements if None)."""
        return self._reduce(np.min, axis)

    def cumsum(self, axis: int = -1) -> Tile:
        """Inclusive prefix sum along ``axis``."""
        return self._new(np.cumsum(self.data, axis=axis), self.data.size)

    def exp(self) -> Tile:
        """Elementwise e**x."""
        return self._new(np.exp(self.data), self.data.size)

    def log(self) -> Tile:
        """Elementwise natural logarithm."""
        return self._new(np.log(self.data), self.data.size)

    def sqrt(self) -> Tile:
        """Elementwise square root."""
        return self._new(np.sqrt(self.data), self.data.size)


class Block:
    """The running state of one block: its id, scratchpad use and the run it counts into."""

    def __init__(self, run: Any, pid: tuple[int, ...], capacity: int) -> None:
        self.run = run
        self.pid = pid
        self.capacity = capacity
        self.used = 0
        self.peak = 0
        self.step = 0  # loads and stores so far, for the trace

    def where(self) -> str:
        return f"block {self.pid if len(self.pid) > 1 else self.pid[0]}"

    def allocate(self, nbytes: int, shape: tuple[int, ...]) -> None:
        if self.used + nbytes > self.capacity:
            raise ScratchpadOverflow(
                f"{self.where()}: scratchpad overflow: a new tile of shape {shape} ({_fmt_bytes(nbytes)}) does not "
                f"fit: {_fmt_bytes(self.used)} of the {_fmt_bytes(self.capacity)} scratchpad are already held by "
                "live tiles. Use smaller tiles, loop over the data in pieces, or drop tiles you no longer need "
                "(del t, or reuse a name)")
        self.used += nbytes
        self.peak = max(self.peak, self.used)

    def free(self, nbytes: int) -> None:
        self.used -= nbytes

    def count_flops(self, n: float) -> None:
        self.run.flops += n

    def dot(self, a: Tile, b: Tile, acc: Tile | None = None) -> Tile:
        if not (isinstance(a, Tile) and isinstance(b, Tile)):
            raise TileError("ctx.dot multiplies two tiles")
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
            raise TileError(f"ctx.dot needs (M, K) and (K, N) tiles, got {a.shape} and {b.shape}")
        m, k = a.shape
        n = b.shape[1]
        self.count_flops(2.0 * m * n * k)
        prod = a.data.astype(DTYPE) @ b.data.astype(DTYPE)
        if acc is None:
            return Tile(self, prod)
        if acc.shape != (m, n):
            raise TileError(f"ctx.dot(a, b, acc): acc has shape {acc.shape}, the product {(m, n)}")
        acc.data += prod  # accumulate in place: no new scratchpad
        self.count_flops(m * n)
        return acc


def _as_index(offsets: Any, what: str) -> np.ndarray:
    if isinstance(offsets, Tile):
        if offsets.is_data or offsets.data.dtype == bool:
            raise TileError(f"{what}: offsets must be an index tile (integers from ctx.arange), got a "
                            f"{'data' if offsets.is_data else 'mask'} tile")
        return offsets.data
    if isinstance(offsets, (int, np.integer)):
        return np.asarray(offsets, np.int64)
    raise TileError(f"{what}: offsets must be an index tile made with ctx.arange, got {type(offsets).__name__}")


def _as_mask(mask: Any, shape: tuple[int, ...], what: str) -> np.ndarray | None:
    if mask is None:
        return None
    if isinstance(mask, Tile) and mask.data.dtype == bool:
        m = mask.data
    elif isinstance(mask, (bool, np.bool_)):
        m = np.asarray(mask)
    else:
        raise TileError(f"{what}: mask must be a boolean tile (e.g. offsets < n)")
    try:
        return np.broadcast_to(m, shape)
    except ValueError:
        raise TileError(f"{what}: a mask of shape {m.shape} does not fit offsets of shape {shape}") from None


class Context:
    """What a kernel receives as ``ctx``: one block's view of the chip (see the module docstring)."""

    def __init__(self, block: Block, grid: tuple[int, ...]) -> None:
        self._block = block
        self._grid = grid

    # -- where am I ---------------------------------------------------------------------------
    def program_id(self, axis: int = 0) -> int:
        """This block's index along ``axis`` of the grid."""
        if not 0 <= axis < len(self._grid):
            raise TileError(f"the grid has {len(self._grid)} axes, no axis {axis}")
        return self._block.pid[axis]

    def num_programs(self, axis: int = 0) -> int:
        """How many blocks the grid has along ``axis``."""
        return self._grid[axis]

    @property
    def scratchpad(self) -> int:
        """The capacity of this block's scratchpad, bytes."""
        return self._block.capacity

    @property
    def scratchpad_used(self) -> int:
        """Bytes of the scratchpad held by live tiles now."""
        return self._block.used

    # -- making tiles -------------------------------------------------------------------------
    def arange(self, start: int, stop: int | None = None) -> Tile:
        """The index tile ``[start, ..., stop-1]`` (or ``[0, ..., start-1]``)."""
        if stop is None:
            start, stop = 0, start
        return Tile(self._block, np.arange(int(start), int(stop), dtype=np.int64))

    def zeros(self, shape: int | Sequence[int]) -> Tile:
        """A data tile of zeros."""
        return self.full(shape, 0.0)

    def full(self, shape: int | Sequence[int], value: float) -> Tile:
        """A data tile filled with ``value`` (e.g. ``-math.inf`` to start a running max)."""
        return Tile(self._block, np.full(shape, value, DTYPE))

    # -- device memory ------------------------------------------------------------------------
    def load(self, x: Buffer, offsets: Tile | int, mask: Tile | bool | None = None, other: float = 0.0) -> Tile:
        """Read ``x`` at the flat indices ``offsets`` into a new data tile of the offsets' shape.

        Where ``mask`` is false nothing is read and the tile holds ``other`` (0.0 unless you say
        otherwise; ``-math.inf`` suits a max). Without a mask every offset must be inside ``x``.
        """
        return self._access("load", x, offsets, mask, other=other)

    def store(self, out: Buffer, offsets: Tile | int, value: Tile | float, mask: Tile | bool | None = None) -> None:
        """Write ``value`` (a tile of the offsets' shape, or broadcastable to it) to ``out`` at ``offsets``."""
        self._access("store", out, offsets, mask, value=value)

    def _access(self, kind: str, buf: Buffer, offsets: Any, mask: Any, other: float = 0.0,
                value: Any = None) -> Tile | None:
        what = f"ctx.{kind}({getattr(buf, 'name', '?')}, ...)"
        if not isinstance(buf, Buffer):
            raise TileError(f"ctx.{kind} needs a tensor argument of the kernel (a Buffer), got {type(buf).__name__}")
        idx = _as_index(offsets, what)
        m = _as_mask(mask, idx.shape, what)
        run = self._block.run
        inside = (idx >= 0) & (idx < buf.numel)
        bad = ~inside if m is None else (~inside & m)
        if bad.any():
            run.raise_out_of_bounds(self._block, kind, buf, idx, bad, m is not None)
        sel = inside if m is None else (inside & m)
        flat = idx[sel]
        if kind == "load":
            data = np.full(idx.shape, other, DTYPE)
            data[sel] = buf._flat[flat]
            run.bytes_read += flat.size * ITEMSIZE
            run.record(self._block, kind, buf, flat, idx.shape)
            return Tile(self._block, data)
        v = _data(value)
        if isinstance(value, Tile) and not value.is_data:
            v = v.astype(DTYPE)
        try:
            v = np.broadcast_to(np.asarray(v, DTYPE), idx.shape)
        except ValueError:
            raise TileError(f"{what}: a value of shape {np.shape(v)} does not fit offsets of shape "
                            f"{idx.shape}") from None
        buf._flat[flat] = v[sel]
        run.bytes_written += flat.size * ITEMSIZE
        run.record(self._block, kind, buf, flat, idx.shape)
        return None

    # -- arithmetic -----------------------------------------------------------------------------
    def dot(self, a: Tile, b: Tile, acc: Tile | None = None) -> Tile:
        """Matrix product of an (M, K) and a (K, N) tile; with ``acc``, added into ``acc`` in place."""
        return self._block.dot(a, b, acc)

    def where(self, mask: Tile, a: Tile | float, b: Tile | float) -> Tile:
        """Elementwise ``a`` where ``mask`` else ``b``."""
        m = _data(mask)
        out = np.asarray(np.where(m, _data(a), _data(b)))
        if out.dtype.kind == "f":
            self._block.count_flops(out.size)
        return Tile(self._block, out)

    def maximum(self, a: Tile | float, b: Tile | float) -> Tile:
        """Elementwise maximum (``ctx.maximum(t, 0.0)`` is a ReLU)."""
        return self._elementwise(np.maximum, a, b)

    def minimum(self, a: Tile | float, b: Tile | float) -> Tile:
        """Elementwise minimum."""
        return self._elementwise(np.minimum, a, b)

    def exp(self, t: Tile) -> Tile:
        """Elementwise e**t."""
        return t.exp()

    def log(self, t: Tile) -> Tile:
        """Elementwise natural log."""
        return t.log()

    def sqrt(self, t: Tile) -> Tile:
        """Elementwise square root."""
        return t.sqrt()

    def _elementwise(self, fn: Callable[..., Any], a: Any, b: Any) -> Tile:
        out = np.asarray(fn(_data(a), _data(b)))
        if out.dtype.kind == "f":
            self._block.count_flops(out.size)
        return Tile(self._block, out)

    def __repr__(self) -> str:
        return f"<ctx of {self._block.where()} of a grid {self._grid}, scratchpad {self._block.capacity} B>"


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive ints: how many tiles of ``b`` cover ``a`` elements."""
    return -(-int(a) // int(b))


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (tile widths are usually powers of two)."""
    return 1 << max(0, math.ceil(math.log2(max(1, n))))
