"""The puzzles: what each kernel computes, on which shapes, and what it may cost.

A :class:`Puzzle` gives the kernel's signature, its grid, the shapes it is checked on (public ones
and hidden ones, ragged sizes included), a reference computed with NumPy in float64
(:mod:`~npu_lab.puzzles.references`, never through PyTorch operators a notebook may have replaced),
the scratchpad capacity of each block, the *minimum device-memory bytes* for each shape (what the
puzzle's way of computing must at least move, e.g. three passes over ``x`` for the three-pass
softmax), and the :mod:`~npu_lab.puzzles.parts`: which part of the output each block computes and
which input elements that part needs. A solution passes when its values match the reference, each
block stores only its part (every output element once) and loads everything its part needs, and it
moves at most ``budget`` (1.2) times the minimum.

:func:`run` runs a kernel on one shape and returns its outputs, the reference and the
:class:`~npu_lab.puzzles.cost.Stats`; the checks (``npu_lab/exercises/puzzles.py``) and the
notebook's ``show`` use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from . import parts as P
from . import references as R
from .cost import Stats
from .model import ITEMSIZE, cdiv, next_power_of_2
from .references import reference
from .runner import launch

Shape = dict[str, int]


@dataclass(frozen=True)
class Puzzle:
    """One puzzle.

    Attributes:
        name: short name; its exercise is ``p1.<name>``.
        title: one line.
        answer: the name of the learner's kernel function.
        params: the kernel's arguments after ``ctx``, in order (tensor names and size names).
        inputs: the names of the input tensors; their shapes come from ``tensor_shapes``.
        output: the name of the output tensor.
        tensor_shapes: shape -> {tensor name: tensor shape} for inputs and output.
        consts: tile sizes and other fixed arguments, from the shape (e.g. ``{"B": 32}``).
        grid: shape and consts -> the grid.
        reference: the inputs (CPU tensors) and the shape -> the expected output (CPU, float32), from NumPy.
        min_bytes: shape and consts -> the minimum device bytes on this grid.
        capacity: scratchpad bytes per block.
        shapes / hidden: the public and hidden shapes checked.
        description: what to compute, for the notebook and the check's hints.
        hint: what to look at when the values are wrong.
        cost_hint: what to look at when the kernel moves too many bytes.
        scale: per shape, how to scale the random inputs (``{"x": (scale, shift)}``), e.g. large logits.
        parts: shape and consts -> each block's :class:`~npu_lab.puzzles.parts.Part` (the output it computes,
            the input elements that needs).
    """

    name: str
    title: str
    answer: str
    params: tuple[str, ...]
    inputs: tuple[str, ...]
    output: str
    tensor_shapes: Callable[[Shape], dict[str, tuple[int, ...]]]
    consts: Callable[[Shape], dict[str, Any]]
    grid: Callable[[dict[str, Any]], tuple[int, ...]]
    reference: Callable[..., torch.Tensor]
    min_bytes: Callable[[dict[str, Any]], int]
    capacity: int
    shapes: tuple[Shape, ...]
    hidden: tuple[Shape, ...]
    description: str
    hint: str
    cost_hint: str
    budget: float = 1.2
    rtol: float = 1e-4
    atol: float = 1e-5
    scale: Callable[[Shape], dict[str, tuple[float, float]]] = field(default=lambda s: {})
    parts: Callable[[dict[str, Any]], list[P.Part]] | None = None

    @property
    def exercise_id(self) -> str:
        return f"p1.{self.name}"

    def env(self, shape: Shape) -> dict[str, Any]:
        """The shape's sizes with the puzzle's constants."""
        return {**shape, **self.consts(shape)}

    def signature(self) -> str:
        """E.g. ``map_kernel(ctx, x, out, n, B)``."""
        return f"{self.answer}(ctx, {', '.join(self.params)})"


def make_inputs(p: Puzzle, shape: Shape, seed: int = 0) -> dict[str, torch.Tensor]:
    """The puzzle's random inputs for ``shape``, as CPU float32 tensors (fixed by ``seed``)."""
    gen = torch.Generator().manual_seed(1000 * seed + sum(shape.values()))
    shapes = p.tensor_shapes(shape)
    scale = p.scale(shape)
    out = {}
    for name in p.inputs:
        s, shift = scale.get(name, (1.0, 0.0))
        out[name] = torch.randn(shapes[name], generator=gen, dtype=torch.float32) * s + shift
    return out


@dataclass
class Result:
    """One run of a kernel on one shape of a puzzle."""

    puzzle: Puzzle
    shape: Shape
    output: torch.Tensor  # on the CPU
    expected: torch.Tensor
    stats: Stats
    min_bytes: int

    @property
    def ratio(self) -> float:
        """Bytes moved / minimum bytes."""
        return self.stats.bytes / self.min_bytes if self.min_bytes else float("inf")

    @property
    def within_budget(self) -> bool:
        return self.stats.bytes <= self.puzzle.budget * self.min_bytes and \
            self.stats.scratchpad_peak <= self.puzzle.capacity

    def values_ok(self) -> bool:
        return bool(torch.allclose(self.output, self.expected, rtol=self.puzzle.rtol, atol=self.puzzle.atol,
                                   equal_nan=True))

    def cost_text(self) -> str:
        """Bytes against the minimum, what was read how often, scratchpad and the roofline."""
        from .draw import reads_summary

        s = self.stats
        reads = reads_summary(s)
        return (f"{s.bytes:,} B moved = {self.ratio:.2f}x the minimum {self.min_bytes:,} B (budget "
                f"{self.puzzle.budget:g}x)" + (f"; {reads}" if reads else "")
                + f"; scratchpad peak {s.scratchpad_peak:,} of {self.puzzle.capacity:,} B; "
                f"{s.time_us:.3f} us, {s.roofline().verdict()}")

    def _repr_html_(self) -> str:
        from .draw import stats_html

        ok = "within" if self.within_budget else "OVER"
        return (f"<p><b>{self.puzzle.exercise_id}</b> on {self.shape}: values "
                f"{'match' if self.values_ok() else 'DIFFER'}; {ok} budget ({self.ratio:.2f}x the minimum "
                f"{self.min_bytes:,} B)</p>" + stats_html(self.stats))

    def __repr__(self) -> str:
        return (f"{self.puzzle.exercise_id} on {self.shape}: values {'match' if self.values_ok() else 'DIFFER'}; "
                f"{self.cost_text()}")


def run(p: Puzzle, kernel: Callable[..., None], shape: Shape, debug: bool = True, seed: int = 0) -> Result:
    """Run ``kernel`` on ``shape`` of puzzle ``p`` (on ``npu`` tensors) and compare with the reference.

    The output starts as NaN, so elements the kernel never writes show up in the comparison.
    """
    env = p.env(shape)
    cpu = make_inputs(p, shape, seed)
    expected = p.reference(**cpu, **env)
    dev = {name: t.to("npu") for name, t in cpu.items()}
    dev[p.output] = torch.full(p.tensor_shapes(shape)[p.output], float("nan"), device="npu")
    args = [dev[a] if a in dev else env[a] for a in p.params]
    stats = launch(kernel, p.grid(env), *args, scratchpad=p.capacity, debug=debug, seed=seed)
    return Result(p, shape, dev[p.output].cpu(), expected, stats, p.min_bytes(env))


def _fourbytes(n: float) -> int:
    return int(n) * ITEMSIZE


def _mm_min(e: dict[str, Any]) -> int:
    M, N, K = e["M"], e["N"], e["K"]
    return _fourbytes(M * K * cdiv(N, e["BN"]) + K * N * cdiv(M, e["BM"]) + M * N)


_ROWS = ("rows < n and cols < m, the same mask for the load and the store")

PUZZLES: dict[str, Puzzle] = {}


def _add(p: Puzzle) -> None:
    PUZZLES[p.name] = p


_add(Puzzle(
    "map", "Map: add 10 to every element", "map_kernel", ("x", "out", "n", "B"), ("x",), "out",
    lambda s: {"x": (s["n"],), "out": (s["n"],)}, lambda s: {"B": 32}, lambda e: (cdiv(e["n"], e["B"]),),
    reference(R.map_add_ten), lambda e: _fourbytes(2 * e["n"]), 1024,
    ({"n": 64}, {"n": 128}), ({"n": 96}, {"n": 256}, {"n": 32}),
    "out[i] = x[i] + 10. Block b handles elements b*B ... b*B+B-1 (n is a multiple of B here).",
    "offsets = ctx.program_id(0) * B + ctx.arange(B); load x there, add 10, store to out there",
    "load each element of x once and store each element of out once",
    parts=lambda e: P.vector(e["n"], e["B"], ("x",))))

_add(Puzzle(
    "zip", "Zip: add two vectors", "zip_kernel", ("x", "y", "out", "n", "B"), ("x", "y"), "out",
    lambda s: {"x": (s["n"],), "y": (s["n"],), "out": (s["n"],)}, lambda s: {"B": 32},
    lambda e: (cdiv(e["n"], e["B"]),), reference(R.zip_add), lambda e: _fourbytes(3 * e["n"]), 1024,
    ({"n": 64}, {"n": 160}), ({"n": 32}, {"n": 224}),
    "out[i] = x[i] + y[i]; B elements per block (n is a multiple of B).",
    "load a tile of x and a tile of y at the same offsets and store their sum",
    "each element of x and y is needed once",
    parts=lambda e: P.vector(e["n"], e["B"], ("x", "y"))))

_add(Puzzle(
    "outer", "Broadcast: an outer sum", "outer_kernel", ("x", "y", "out", "n", "m", "B0", "B1"), ("x", "y"), "out",
    lambda s: {"x": (s["n"],), "y": (s["m"],), "out": (s["n"], s["m"])}, lambda s: {"B0": 16, "B1": 16},
    lambda e: (cdiv(e["n"], e["B0"]), cdiv(e["m"], e["B1"])), reference(R.outer_sum),
    lambda e: _fourbytes(e["n"] + e["m"] + e["n"] * e["m"]), 4096,
    ({"n": 32, "m": 64}, {"n": 64, "m": 48}), ({"n": 16, "m": 16}, {"n": 48, "m": 96}),
    "out[i, j] = x[i] + y[j] for an n x m out (row-major: element (i, j) at flat index i*m + j). Block "
    "(p0, p1) computes the B0 x B1 tile at rows p0*B0..., columns p1*B1...; n and m are multiples of the tile.",
    "load B0 elements of x and B1 of y; x_tile[:, None] + y_tile[None, :] is the B0 x B1 tile; its offsets are "
    "rows[:, None] * m + cols[None, :]",
    "a block needs only B0 elements of x and B1 of y: load those two small tiles once and broadcast them",
    parts=lambda e: [P.Part(pid, P.box(r, c, e["m"]), {"x": r, "y": c})
                     for pid, r, c in P.tiles(e["n"], e["m"], e["B0"], e["B1"])]))

_add(Puzzle(
    "relu2d", "Guards: a 2-d ReLU on ragged sizes", "relu2d_kernel", ("x", "out", "n", "m", "B0", "B1"), ("x",),
    "out", lambda s: {"x": (s["n"], s["m"]), "out": (s["n"], s["m"])}, lambda s: {"B0": 16, "B1": 16},
    lambda e: (cdiv(e["n"], e["B0"]), cdiv(e["m"], e["B1"])), reference(R.relu),
    lambda e: _fourbytes(2 * e["n"] * e["m"]), 4096,
    ({"n": 50, "m": 37}, {"n": 7, "m": 100}), ({"n": 33, "m": 17}, {"n": 1, "m": 1}, {"n": 16, "m": 15}),
    "out = relu(x) for an n x m tensor whose sizes are *not* multiples of the B0 x B1 tile: the blocks at the "
    "right and bottom edges hang over the tensor, so their loads and stores need a mask.",
    f"mask = {_ROWS}; a mask that lets a row index >= n through reads past the end of x",
    "read each element once and write it once; masked-out positions move no bytes (a mask on the flat offset "
    "only, offs < n * m, lets columns >= m through: they read and write the next row's elements a second time)",
    parts=lambda e: [P.Part(pid, P.box(r, c, e["m"]), {"x": P.box(r, c, e["m"])})
                     for pid, r, c in P.tiles(e["n"], e["m"], e["B0"], e["B1"])]))

_add(Puzzle(
    "rowsum", "Reduction: the sum of each row", "rowsum_kernel", ("x", "out", "n", "m", "B0", "B1"), ("x",), "out",
    lambda s: {"x": (s["n"], s["m"]), "out": (s["n"],)}, lambda s: {"B0": 8, "B1": 32},
    lambda e: (cdiv(e["n"], e["B0"]),), reference(R.row_sum),
    lambda e: _fourbytes(e["n"] * e["m"] + e["n"]), 4096,
    ({"n": 20, "m": 100}, {"n": 8, "m": 32}), ({"n": 13, "m": 257}, {"n": 1, "m": 5}, {"n": 5, "m": 0}),
    "out[i] = x[i, 0] + ... + x[i, m-1] (an empty row sums to 0). A block owns B0 rows; a row is longer than "
    "fits the scratchpad, so walk along it B1 columns at a time, adding each tile's row sums into an accumulator.",
    f"acc = ctx.zeros(B0); for c0 in range(0, m, B1): acc += tile.sum(axis=1); masks: {_ROWS}",
    "each element of x is read once: one pass along the rows",
    parts=lambda e: P.whole_rows(e["n"], e["m"], e["B0"], out_width=1)))

_add(Puzzle(
    "cumsum", "Scan: the prefix sum of each row", "cumsum_kernel", ("x", "out", "n", "m", "B0", "B1"), ("x",), "out",
    lambda s: {"x": (s["n"], s["m"]), "out": (s["n"], s["m"])}, lambda s: {"B0": 4, "B1": 32},
    lambda e: (cdiv(e["n"], e["B0"]),), reference(R.row_cumsum),
    lambda e: _fourbytes(2 * e["n"] * e["m"]), 2048,
    ({"n": 6, "m": 100}, {"n": 4, "m": 32}), ({"n": 9, "m": 257}, {"n": 1, "m": 3}),
    "out[i, j] = x[i, 0] + ... + x[i, j]. Rows are longer than a tile: carry each row's running total from one "
    "column tile to the next (tile.cumsum(axis=1) + carry[:, None]).",
    "within a tile use t.cumsum(axis=1); the carry is the sum of all earlier tiles of the row",
    "do not re-read earlier tiles to get the carry: keep it in the scratchpad as a running total",
    parts=lambda e: P.whole_rows(e["n"], e["m"], e["B0"])))

#: Hidden shapes of both softmaxes: large logits (about 80 +- 30) on two, logits spread over +-600 on the last,
#: where only the row's true max keeps exp from overflowing.
_SOFTMAX_HIDDEN = ({"n": 9, "m": 257}, {"n": 3, "m": 1}, {"n": 5, "m": 70}, {"n": 6, "m": 150})


def _large_logits(s: Shape) -> dict[str, tuple[float, float]]:
    if s == {"n": 6, "m": 150}:
        return {"x": (200.0, 0.0)}
    return {"x": (30.0, 80.0)} if s in ({"n": 9, "m": 257}, {"n": 5, "m": 70}) else {}


_add(Puzzle(
    "softmax", "Stable softmax in three passes", "softmax_kernel", ("x", "out", "n", "m", "B0", "B1"), ("x",), "out",
    lambda s: {"x": (s["n"], s["m"]), "out": (s["n"], s["m"])}, lambda s: {"B0": 4, "B1": 32},
    lambda e: (cdiv(e["n"], e["B0"]),), reference(R.softmax),
    lambda e: _fourbytes(4 * e["n"] * e["m"]), 2048,
    ({"n": 6, "m": 100}, {"n": 4, "m": 64}), _SOFTMAX_HIDDEN,
    "out[i, :] = softmax(x[i, :]) = exp(x - max) / sum(exp(x - max)), rows longer than a tile. Three passes "
    "along each row: the max, the sum of exp(x - max), then the output. The minimum here is three reads of x "
    "and one write.",
    "subtract the row max before exp (large logits overflow float32); load with other=-math.inf so masked "
    "positions add exp(-inf) = 0 to the sum",
    "three passes over x: max, sum, output (not more)",
    scale=_large_logits, parts=lambda e: P.whole_rows(e["n"], e["m"], e["B0"])))

_add(Puzzle(
    "online_softmax", "Online softmax in two passes", "online_softmax_kernel", ("x", "out", "n", "m", "B0", "B1"),
    ("x",), "out", lambda s: {"x": (s["n"], s["m"]), "out": (s["n"], s["m"])}, lambda s: {"B0": 4, "B1": 32},
    lambda e: (cdiv(e["n"], e["B0"]),), reference(R.softmax),
    lambda e: _fourbytes(3 * e["n"] * e["m"]), 2048,
    ({"n": 6, "m": 100}, {"n": 4, "m": 64}), _SOFTMAX_HIDDEN,
    "The same softmax with one pass fewer: keep a running max *and* a running sum together; when a tile raises "
    "the max from m_old to m_new, the sum so far is rescaled by exp(m_old - m_new). A second pass writes the "
    "output. The minimum is two reads of x and one write.",
    "total = total * exp(old_max - new_max) + exp(t - new_max[:, None]).sum(axis=1); start the max at -inf",
    "the max and the sum must come from the same pass over x (the online trick): two passes in all",
    scale=_large_logits, parts=lambda e: P.whole_rows(e["n"], e["m"], e["B0"])))

#: Rows of nearly equal values (variance about 1e-6, below eps): where eps, and where it goes, decide the result;
#: a one-pass variance (mean of squares minus the squared mean) loses it to rounding.
_FLAT_ROWS = {"n": 12, "m": 48}


def _nearly_flat(s: Shape) -> dict[str, tuple[float, float]]:
    return {"x": (1e-3, 0.5)} if s == _FLAT_ROWS else {}


_add(Puzzle(
    "layernorm", "Layer norm, R rows per block", "layernorm_kernel",
    ("x", "w", "b", "out", "n", "m", "eps", "R", "BM"), ("x", "w", "b"), "out",
    lambda s: {"x": (s["n"], s["m"]), "w": (s["m"],), "b": (s["m"],), "out": (s["n"], s["m"])},
    lambda s: {"eps": 1e-5, "R": 8, "BM": next_power_of_2(s["m"])}, lambda e: (cdiv(e["n"], e["R"]),),
    reference(R.layer_norm),
    lambda e: _fourbytes(2 * e["n"] * e["m"] + 2 * e["m"]), 32 * 1024,
    ({"n": 16, "m": 64}, {"n": 40, "m": 100}),
    ({"n": 9, "m": 33}, {"n": 3, "m": 128}, {"n": 1, "m": 1}, _FLAT_ROWS),
    "out[i, :] = (x[i, :] - mean) / sqrt(var + eps) * w + b, mean and (biased) variance over the row, eps inside "
    "the square root (it matters for a row whose values are nearly equal). A block handles R rows; a row "
    "(m <= BM columns) fits the scratchpad whole.",
    "mean = sum / m over the real columns only; zero the padded columns (ctx.where(mask, t - mean[:, None], 0.0)) "
    "before summing the squares",
    "load w and b once per block, not once per row: R rows share them",
    rtol=1e-4, atol=1e-4, scale=_nearly_flat,
    parts=lambda e: P.whole_rows(e["n"], e["m"], e["R"], inputs={"w": e["m"], "b": e["m"]})))

_add(Puzzle(
    "matmul", "Matmul: one output tile per block", "matmul_kernel",
    ("a", "b", "out", "M", "N", "K", "BM", "BN", "BK"), ("a", "b"), "out",
    lambda s: {"a": (s["M"], s["K"]), "b": (s["K"], s["N"]), "out": (s["M"], s["N"])},
    lambda s: {"BM": 16, "BN": 16, "BK": next_power_of_2(s["K"])},
    lambda e: (cdiv(e["M"], e["BM"]), cdiv(e["N"], e["BN"])), reference(R.matmul), _mm_min, 8192,
    ({"M": 32, "N": 32, "K": 16}, {"M": 40, "N": 24, "K": 30}),
    ({"M": 17, "N": 33, "K": 7}, {"M": 1, "N": 5, "K": 3}),
    "out = a @ b, a (M, K), b (K, N). Block (p0, p1) computes the BM x BN tile of out from a BM x K strip of a and "
    "a K x BN strip of b (K <= BK fits whole). The minimum: every block reads its two strips once.",
    "ctx.dot(a_tile, b_tile) multiplies (BM, BK) by (BK, BN); mask K too (ks < K) so padding adds zeros",
    "load each strip once per block and multiply the whole tiles: reloading b for every row of the tile reads "
    "it BM times",
    parts=lambda e: P.matmul(e["M"], e["N"], e["K"], e["BM"], e["BN"])))

_add(Puzzle(
    "matmul_tiled", "Matmul tiled over K, with reuse", "matmul_tiled_kernel",
    ("a", "b", "out", "M", "N", "K", "BM", "BN", "BK"), ("a", "b"), "out",
    lambda s: {"a": (s["M"], s["K"]), "b": (s["K"], s["N"]), "out": (s["M"], s["N"])},
    lambda s: {"BM": 32, "BN": 32, "BK": 16},
    lambda e: (cdiv(e["M"], e["BM"]), cdiv(e["N"], e["BN"])), reference(R.matmul), _mm_min, 24 * 1024,
    ({"M": 64, "N": 64, "K": 128}, {"M": 50, "N": 70, "K": 100}),
    ({"M": 33, "N": 31, "K": 257}, {"M": 8, "N": 8, "K": 8}, {"M": 1, "N": 1, "K": 1}, {"M": 9, "N": 7, "K": 0}),
    "out = a @ b with K too long for the strips to fit the scratchpad: keep a BM x BN accumulator and walk K "
    "in slices of BK, acc += a[rows, k0:k0+BK] @ b[k0:k0+BK, cols]. Bigger output tiles mean fewer re-reads: "
    "a is read N/BN times, b M/BM times. Any K >= 0 is checked (with K = 0, a @ b is all zeros).",
    "ctx.dot(a_tile, b_tile, acc=acc) adds into acc in place; mask the last K slice (ks < K)",
    "compute the whole BM x BN tile from each pair of slices: splitting it into smaller sub-tiles reloads the "
    "slices once per sub-tile",
    parts=lambda e: P.matmul(e["M"], e["N"], e["K"], e["BM"], e["BN"])))

_add(Puzzle(
    "conv1d", "1-d convolution with a halo", "conv1d_kernel", ("x", "w", "out", "n", "k", "B", "BK"), ("x", "w"),
    "out", lambda s: {"x": (s["n"],), "w": (s["k"],), "out": (s["n"] - s["k"] + 1,)},
    lambda s: {"B": 64, "BK": next_power_of_2(s["k"])}, lambda e: (cdiv(e["n"] - e["k"] + 1, e["B"]),),
    reference(R.conv1d_valid),
    lambda e: _fourbytes(e["n"] + e["k"] + e["n"] - e["k"] + 1), 2048,
    ({"n": 130, "k": 3}, {"n": 300, "k": 7}),
    ({"n": 67, "k": 5}, {"n": 5, "k": 5}, {"n": 200, "k": 1}, {"n": 1, "k": 1}),
    "out[i] = x[i] w[0] + x[i+1] w[1] + ... + x[i+k-1] w[k-1] for i < n - k + 1 ('valid' convolution, as "
    "torch's conv1d). Block b computes out[b*B : b*B+B], which needs x[b*B : b*B+B+k-1]: its tile plus a halo "
    "of k-1 elements.",
    "load the tile and its halo once (ctx.arange(B + BK), masked to the B + k - 1 needed and to n); then "
    "acc += xs[j:j + B] * ws[j] for j in range(k)",
    "load x once per block, halo included, and slice the tile in the scratchpad: k shifted loads read x k times",
    parts=lambda e: P.conv1d(e["n"], e["k"], e["B"])))

_add(Puzzle(
    "attention", "Flash attention: online softmax over key tiles", "attention_kernel",
    ("q", "k", "v", "out", "n", "m", "d", "BQ", "BKV", "BD"), ("q", "k", "v"), "out",
    lambda s: {"q": (s["n"], s["d"]), "k": (s["m"], s["d"]), "v": (s["m"], s["d"]), "out": (s["n"], s["d"])},
    lambda s: {"BQ": 16, "BKV": 16, "BD": next_power_of_2(s["d"])}, lambda e: (cdiv(e["n"], e["BQ"]),),
    reference(R.attention),
    lambda e: _fourbytes(2 * e["n"] * e["d"] + 2 * e["m"] * e["d"] * cdiv(e["n"], e["BQ"])), 24 * 1024,
    ({"n": 32, "m": 48, "d": 16}, {"n": 20, "m": 70, "d": 8}),
    ({"n": 5, "m": 130, "d": 32}, {"n": 1, "m": 1, "d": 4}, {"n": 40, "m": 33, "d": 16}, {"n": 3, "m": 400, "d": 8},
     {"n": 7, "m": 21, "d": 12}),
    "out = softmax(q k^T / sqrt(d)) v, q (n, d), k and v (m, d); BD is the smallest power of two >= d, so a row "
    "of q may be narrower than its tile. A block owns BQ query rows and walks the keys BKV at a time, never "
    "holding the whole n x m score matrix: s = q_tile @ k_tile.T * scale, then the online "
    "softmax of puzzle 8 on s, with the output accumulator rescaled like the sum.",
    "mask scores of keys >= m to -inf (ctx.where(keys[None, :] < m, s, -math.inf)); "
    "acc = acc * alpha[:, None] + ctx.dot(p, v_tile); divide by the sum at the end",
    "one pass over k and v per block: the max, the sum and the output accumulate together (online softmax)",
    parts=lambda e: P.attention(e["n"], e["m"], e["d"], e["BQ"])))

_add(Puzzle(
    "linear_relu", "Matmul with a fused epilogue: relu(a @ b + bias)", "linear_relu_kernel",
    ("a", "b", "bias", "out", "M", "N", "K", "BM", "BN", "BK"), ("a", "b", "bias"), "out",
    lambda s: {"a": (s["M"], s["K"]), "b": (s["K"], s["N"]), "bias": (s["N"],), "out": (s["M"], s["N"])},
    lambda s: {"BM": 32, "BN": 32, "BK": 16},
    lambda e: (cdiv(e["M"], e["BM"]), cdiv(e["N"], e["BN"])),
    reference(R.linear_relu),
    lambda e: _mm_min(e) + _fourbytes(e["N"] * cdiv(e["M"], e["BM"])), 24 * 1024,
    ({"M": 64, "N": 64, "K": 32}, {"M": 50, "N": 40, "K": 20}),
    ({"M": 33, "N": 65, "K": 48}, {"M": 3, "N": 5, "K": 7}, {"M": 5, "N": 40, "K": 0}),
    "out = relu(a @ b + bias[None, :]): the tiled matmul of puzzle 11, with the bias and the ReLU applied to the "
    "accumulator in the scratchpad before the one store (the epilogue fused into the matmul). Any K >= 0 is "
    "checked (with K = 0, every row of out is relu(bias)).",
    "add the bias row (bias_tile[None, :]) before ctx.maximum(acc, 0.0); mask the bias load (cols < N)",
    "apply the bias and ReLU to acc before storing: storing the product and loading it back moves M*N*8 extra "
    "bytes",
    parts=lambda e: P.matmul(e["M"], e["N"], e["K"], e["BM"], e["BN"], bias=True)))


def puzzle(name: str) -> Puzzle:
    """The puzzle called ``name`` (or ``p1.<name>``)."""
    return PUZZLES[name.removeprefix("p1.")]


def min_bytes(p: Puzzle, shape: Shape) -> int:
    """The minimum device bytes of ``p`` on ``shape``."""
    return p.min_bytes(p.env(shape))


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor's values as a NumPy array (for drawing)."""
    return t.detach().cpu().numpy()


class Note(str):
    """A short message shown as text in a notebook (e.g. "not started yet")."""

    def __repr__(self) -> str:
        return str(self)


def show(name: str, kernel: Callable[..., None], shape: Shape | None = None) -> Result | Note:
    """Run ``kernel`` on a shape of puzzle ``name`` (its first public one) and show what it did.

    In a notebook the result draws the reads per element of every input and the roofline; a
    kernel that raises shows its error as a message (a stub: "not started yet").
    """
    p = puzzle(name)
    try:
        return run(p, kernel, shape or p.shapes[0])
    except NotImplementedError:
        return Note(f"{p.answer} is not written yet: replace the # YOUR CODE HERE stub, then show it again")
    except Exception as exc:  # noqa: BLE001 - shown to the learner, who is debugging their kernel
        return Note(f"{type(exc).__name__}: {exc}")
