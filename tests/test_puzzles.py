"""The NPU puzzles: the programming model, its counts and errors, and the checks of every puzzle.

Every reference solution (the tests' copy, tests/puzzle_solutions.py, which must be the solution notebook's)
and every correct alternative passes within its budget; for every puzzle, answers with wrong values, answers with
right values but over the cost budget, and answers that break how the work is split between blocks fail, with
feedback saying why.
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import npu_lab
from npu_lab.grading import CHAPTERS, NOT_YET, get, grade, load_all
from npu_lab.puzzles import OutOfBounds, ScratchpadOverflow, TileError, cdiv, launch, specs

from . import puzzle_solutions as solutions

_spec = importlib.util.spec_from_file_location("wrong_puzzles", Path(__file__).parent / "wrong" / "puzzles.py")
wrong = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wrong)

NAMES = list(specs.PUZZLES)


def _define(code: str, name: str):
    """The kernel ``name`` that ``code`` defines, in a namespace holding the other puzzles' kernels (as the notebook
    does)."""
    ns: dict = {"math": math, **{p.answer: solutions.SOLUTIONS[p.name] for p in specs.PUZZLES.values()}}
    exec(code, ns)  # noqa: S102 - the answers are test data written in this repository
    return ns[name]


#: The description that ends the case of the parts rule (stores in the block's part, once; loads what it needs).
PARTS_CASE = ": each block stores its own part once and loads what it needs"


def add_ten(ctx, x, out, n, B):
    offs = ctx.program_id(0) * B + ctx.arange(B)
    mask = offs < n
    ctx.store(out, offs, ctx.load(x, offs, mask) + 10.0, mask)


def test_at_least_twelve_puzzles_registered_as_chapter_p1():
    load_all()
    assert len(specs.PUZZLES) >= 12
    assert "p1" in CHAPTERS
    for p in specs.PUZZLES.values():
        assert get(p.exercise_id).names == (p.answer,)
        assert p.name in solutions.SOLUTIONS


def test_a_run_is_counted_and_timed_on_the_device_cost_model():
    x = torch.randn(100, device="npu")
    out = torch.empty_like(x)
    launches = npu_lab.device.clock.clock().launches
    stats = launch(add_ten, cdiv(100, 32), x, out, 100, 32)
    assert torch.equal(out.cpu(), x.cpu() + 10)
    assert (stats.bytes_read, stats.bytes_written, stats.flops, stats.launches) == (400, 400, 128, 1)
    assert stats.scratchpad_peak == 2 * 32 * 4  # the loaded tile and the tile of its sum
    model = npu_lab.cost_model.snapshot()
    assert stats.time_us == pytest.approx(model.kernel_us(128, 800))
    assert stats.roofline().bound == "memory"
    assert npu_lab.device.clock.clock().launches == launches + 1


def test_debug_run_traces_accesses_and_shuffles_blocks():
    x = torch.randn(100, device="npu")
    out = torch.empty_like(x)
    stats = launch(add_ten, cdiv(100, 32), x, out, 100, 32, debug=True, seed=3)
    assert torch.equal(out.cpu(), x.cpu() + 10)
    assert stats.reads["x"].tolist() == [1] * 100 and stats.writes["out"].tolist() == [1] * 100
    order = stats.trace.blocks()
    assert sorted(order) == [(0,), (1,), (2,), (3,)] and order != sorted(order)
    from npu_lab.puzzles.draw import timeline_text

    assert "load x[64:96]" in timeline_text(stats, blocks=4)


def test_unmasked_out_of_bounds_load_names_block_and_tile_position():
    def no_mask(ctx, x, out, n, B):
        offs = ctx.program_id(0) * B + ctx.arange(B)
        ctx.store(out, offs, ctx.load(x, offs))

    x = torch.randn(50, device="npu")
    with pytest.raises(OutOfBounds) as info:
        launch(no_mask, cdiv(50, 32), x, torch.empty_like(x), 50, 32, debug=True)
    msg = str(info.value)
    assert isinstance(info.value, IndexError)
    assert "block 1" in msg and "ctx.load(x" in msg and "tile position 18 has offset 50" in msg
    assert "past the end of x (shape (50,)" in msg and "mask=" in msg


def test_scratchpad_overflow_says_what_did_not_fit():
    def greedy(ctx, x, out, n, B):
        whole = ctx.load(x, ctx.arange(n))
        ctx.store(out, ctx.arange(n), whole * 2.0)

    x = torch.randn(300, device="npu")
    with pytest.raises(ScratchpadOverflow) as info:
        launch(greedy, 1, x, torch.empty_like(x), 300, 32, scratchpad=2048, debug=True)
    msg = str(info.value)
    assert isinstance(info.value, MemoryError)
    assert "block 0" in msg and "shape (300,)" in msg and "of the 2.0 KiB scratchpad" in msg


def test_device_memory_is_only_read_through_load():
    def peek(ctx, x, out, n, B):
        x[0]

    x = torch.randn(4, device="npu")
    with pytest.raises(TileError, match="ctx.load"):
        launch(peek, 1, x, torch.empty_like(x), 4, 4)


def _counters(stats):
    return (stats.launches, stats.bytes_read, stats.bytes_written, stats.flops, stats.scratchpad_peak,
            stats.block_peaks, stats.time_us)


@pytest.mark.parametrize("name", NAMES)
def test_compiled_and_debug_runs_give_identical_values_and_counts(name):
    p = specs.PUZZLES[name]
    for seed, shape in enumerate(p.shapes + p.hidden):
        fast = specs.run(p, solutions.SOLUTIONS[name], shape, debug=False, seed=seed)
        dbg = specs.run(p, solutions.SOLUTIONS[name], shape, debug=True, seed=seed)
        assert fast.stats.mode == "compiled" and dbg.stats.mode == "debug"
        assert torch.equal(fast.output, dbg.output), (shape, (fast.output - dbg.output).abs().max())
        assert _counters(fast.stats) == _counters(dbg.stats), shape
        assert fast.stats.trace is None and dbg.stats.trace is not None


def kitchen_sink(ctx, x, out, n, m, B):
    """Most of the tile API, block-dependent Python numbers included, on a 2-d grid."""
    pid, col = ctx.program_id(0), ctx.program_id(1)
    offs = (pid * ctx.num_programs(1) + col) * B + ctx.arange(B)
    mask = (offs < n) & (offs % 7 != 3)
    t = ctx.load(x, offs, mask, other=1.0)
    sq = t.reshape(B // 4, 4)
    scale = (pid + 1) / 3 * 0.1 - col  # Python floats in the per-block runner: float64 until they meet a tile
    a = (-sq).T.T + abs(sq) * scale - 2.0 / (sq * sq + 1.0)
    b = ctx.where(sq > 0, (sq + 1e-3).log(), (sq * sq).sqrt())
    c = a.sum() + b.min(axis=0)[None, :] + b.max(axis=1)[:, None] - (1.0 - a) ** 2 + a // 1.0 + sq % 0.5
    d = ctx.minimum(c, 3.0) @ ctx.full((4, 4), 0.25)
    d += ctx.zeros((B // 4, 4))
    d *= 1.5
    d -= ctx.maximum(c, -1.0).cumsum(axis=0)
    d /= 2.0
    e = d.reshape(B) + pid * 1.0 + ctx.load(x, 0) + m + ctx.where(offs > 50, scale, 0.0)
    ctx.store(out, offs, e, mask)
    ctx.store(out, pid, e[0:1].sum(), pid < 0)  # the mask is false in every block: nothing is stored


def test_compiled_runner_matches_python_runner_on_the_whole_tile_api():
    x = torch.randn(203, device="npu")
    runs = {}
    for compiled in (True, False):
        out = torch.zeros_like(x)
        runs[compiled] = (launch(kitchen_sink, (4, 2), x, out, 203, 5, 32, compiled=compiled), out.cpu())
    (fast, fast_out), (slow, slow_out) = runs[True], runs[False]
    assert fast.mode == "compiled" and slow.mode == "python"
    assert torch.equal(fast_out, slow_out)
    assert _counters(fast) == _counters(slow)


def test_a_big_grid_runs_compiled_in_chunks_with_the_same_result(monkeypatch):
    from npu_lab.puzzles import compiled

    p = specs.puzzle("online_softmax")
    shape = {"n": 30, "m": 70}  # 8 blocks
    whole = specs.run(p, solutions.online_softmax_kernel, shape, debug=False)
    monkeypatch.setattr(compiled, "CHUNK_BYTES", 3 * p.capacity)  # 3 blocks per call of the body
    chunked = specs.run(p, solutions.online_softmax_kernel, shape, debug=False)
    assert chunked.stats.mode == "compiled"
    assert torch.equal(whole.output, chunked.output) and _counters(whole.stats) == _counters(chunked.stats)


def test_a_kernel_branching_per_block_falls_back_to_python_with_the_same_result():
    def first_block_doubles(ctx, x, out, n, B):
        offs = ctx.program_id(0) * B + ctx.arange(B)
        t = ctx.load(x, offs, offs < n)
        if ctx.program_id(0) == 0:  # control flow that differs between blocks: not one schedule
            t = t * 2.0
        ctx.store(out, offs, t, offs < n)

    x = torch.randn(100, device="npu")
    out = torch.empty_like(x)
    stats = launch(first_block_doubles, cdiv(100, 32), x, out, 100, 32)
    assert stats.mode.startswith("python (not compiled")
    expected = x.cpu().clone()
    expected[:32] *= 2
    assert torch.equal(out.cpu(), expected)
    assert (stats.bytes_read, stats.bytes_written, stats.flops) == (400, 400, 32)


def test_a_failed_compiled_attempt_undoes_its_stores_before_the_python_run():
    def in_place_then_branch(ctx, x, n, B):
        offs = ctx.program_id(0) * B + ctx.arange(B)
        ctx.store(x, offs, ctx.load(x, offs) + 1.0)  # in place: a second run would add 2
        if ctx.load(x, offs).max() > 1e9:  # a data-dependent branch: the compiled runner gives up here
            ctx.store(x, offs, 0.0)

    x = torch.randn(64, device="npu")
    before = x.cpu().clone()
    stats = launch(in_place_then_branch, 2, x, 64, 32)
    assert stats.mode.startswith("python")
    assert torch.equal(x.cpu(), before + 1.0)


def test_compiled_run_raises_the_same_clear_out_of_bounds_error():
    def no_mask(ctx, x, out, n, B):
        offs = ctx.program_id(0) * B + ctx.arange(B)
        ctx.store(out, offs, ctx.load(x, offs))

    x = torch.randn(50, device="npu")
    with pytest.raises(OutOfBounds, match="block 1: ctx.load\\(x, ...\\) is out of bounds: tile position 18"):
        launch(no_mask, cdiv(50, 32), x, torch.empty_like(x), 50, 32)


@pytest.mark.parametrize("name", NAMES)
def test_solution_passes_within_budget(name):
    p = specs.PUZZLES[name]
    r = grade(get(p.exercise_id), {p.answer: solutions.SOLUTIONS[name]})
    assert r.passed, str(r)
    assert r.hidden, "every puzzle has hidden shapes"
    assert sum(c.description.endswith(": cost") for c in r.cases) == len(p.shapes) + len(p.hidden)


@pytest.mark.parametrize("name", NAMES)
def test_wrong_values_fail_with_feedback(name):
    p = specs.PUZZLES[name]
    codes = wrong.VALUES[p.exercise_id]
    assert codes
    for code in codes:
        r = grade(get(p.exercise_id), {p.answer: _define(code, p.answer)})
        assert r.status == NOT_YET, f"passed:\n{code}"
        failing = [c for c in r.cases if not c.passed]
        assert any(c.description.endswith(": values") for c in failing), str(r)
        assert all(c.hint or c.error for c in failing)


@pytest.mark.parametrize("name", NAMES)
def test_right_but_over_budget_fails_on_cost(name):
    p = specs.PUZZLES[name]
    codes = wrong.OVER_BUDGET[p.exercise_id]
    assert codes
    for code in codes:
        r = grade(get(p.exercise_id), {p.answer: _define(code, p.answer)})
        assert r.status == NOT_YET, f"passed:\n{code}"
        failing = [c for c in r.cases if not c.passed]
        assert any(c.description.endswith(": cost") or "ScratchpadOverflow" in c.error for c in failing), str(r)
        for c in failing:
            if c.description.endswith(": values"):  # acceptable: it raised (did not fit, an empty tile...)
                assert c.error, str(r)
            elif c.description.endswith(PARTS_CASE):  # e.g. the output stored twice
                assert c.hint and ("block" in c.got or "more than once" in c.got), str(r)
            else:
                assert c.description.endswith(": cost") and c.hint
                if not c.hidden:
                    assert "x the minimum" in c.got and "per element" in c.got and "-bound" in c.got
                    assert "did: load" in c.got  # which tiles the first block loaded, in order
        values = [c for c in r.cases if c.description.endswith(": values") and not c.error]
        assert all(c.passed for c in values), f"over-budget answer with wrong values:\n{r}"


@pytest.mark.parametrize("name", NAMES)
def test_right_values_from_blocks_that_break_the_split_fail_on_the_parts_rule(name):
    """A block that stores outside its part, stores an element twice, or uses input another block loaded (kept in
    Python between blocks) fails, whatever its bytes; on public shapes the feedback names the block."""
    p = specs.PUZZLES[name]
    codes = wrong.RULES[p.exercise_id]
    assert codes
    for code in codes:
        r = grade(get(p.exercise_id), {p.answer: _define(code, p.answer)})
        assert r.status == NOT_YET, f"passed:\n{code}"
        broken = [c for c in r.cases if c.description.endswith(PARTS_CASE) and not c.passed]
        assert broken, str(r)
        assert all(c.hint for c in broken)
        shown = [c for c in broken if not c.hidden]
        assert shown and all("block" in c.got or "more than once" in c.got for c in shown), str(r)


def test_the_parts_split_every_output_once_and_name_inputs_that_exist():
    for p in specs.PUZZLES.values():
        assert p.parts is not None, p.name
        for shape in p.shapes + p.hidden:
            env = p.env(shape)
            shapes = p.tensor_shapes(shape)
            parts = p.parts(env)
            assert sorted(part.pid for part in parts) == sorted(itertools.product(*map(range, p.grid(env))))
            covered = np.concatenate([part.out for part in parts]) if parts else np.zeros(0, np.int64)
            assert np.array_equal(np.sort(covered), np.arange(math.prod(shapes[p.output]))), (p.name, shape)
            for part in parts:
                assert set(part.needs) == set(p.inputs), (p.name, part.needs.keys())
                for name, idx in part.needs.items():
                    assert idx.size == 0 or 0 <= idx.min() <= idx.max() < math.prod(shapes[name])


def test_a_kernel_that_changes_the_byte_counters_fails():
    def discounted_map(ctx, x, out, n, B):
        offs = ctx.program_id(0) * B + ctx.arange(B)
        ctx.store(out, offs, ctx.load(x, offs) + 10.0)
        ctx._block.run.bytes_read -= 4 * B  # the load "did not count"

    r = grade(get("p1.map"), {"map_kernel": discounted_map})
    assert r.status == NOT_YET
    failing = [c for c in r.cases if not c.passed]
    assert failing and all(c.description.endswith("bytes counted as loaded and stored") for c in failing), str(r)
    assert "the trace of its ctx.load and ctx.store calls adds up to" in failing[0].got and failing[0].hint


def alt_map(ctx, x, out, n, B):
    offs = ctx.program_id(0) * B + ctx.arange(B)
    ctx.store(out, offs, 10.0 + ctx.load(x, offs, offs < n), offs < n)


def alt_zip(ctx, x, y, out, n, B):
    offs = ctx.program_id(0) * B + ctx.arange(B)
    ys = ctx.load(y, offs)
    ys += ctx.load(x, offs)
    ctx.store(out, offs, ys)


def alt_outer(ctx, x, y, out, n, m, B0, B1):
    rows = ctx.program_id(0) * B0 + ctx.arange(B0)
    cols = ctx.program_id(1) * B1 + ctx.arange(B1)
    tile = ctx.zeros((B0, B1)) + ctx.load(y, cols, cols < m)[None, :]
    tile += ctx.load(x, rows, rows < n)[:, None]
    ctx.store(out, rows[:, None] * m + cols[None, :], tile, (rows < n)[:, None] & (cols < m)[None, :])


def alt_relu2d(ctx, x, out, n, m, B0, B1):
    rows = ctx.program_id(0) * B0 + ctx.arange(B0)
    cols = ctx.program_id(1) * B1 + ctx.arange(B1)
    offs = rows[:, None] * m + cols[None, :]
    mask = (offs < n * m) & (cols[None, :] < m)
    t = ctx.load(x, offs, mask)
    ctx.store(out, offs, ctx.where(t > 0.0, t, 0.0), mask)


def alt_rowsum(ctx, x, out, n, m, B0, B1):
    rows = ctx.program_id(0) * B0 + ctx.arange(B0)
    acc = ctx.zeros(B0)
    for c0 in range(0, cdiv(m, B1) * B1, B1):
        cols = c0 + ctx.arange(B1)
        acc = acc + ctx.load(x, rows[:, None] * m + cols[None, :], (rows < n)[:, None] & (cols < m)[None, :]).sum(1)
    ctx.store(out, rows, acc, rows < n)


def alt_cumsum(ctx, x, out, n, m, B0, B1):
    """The carry read back from the column already stored before the tile (a few bytes more, within budget)."""
    rows = ctx.program_id(0) * B0 + ctx.arange(B0)
    for c0 in range(0, m, B1):
        cols = c0 + ctx.arange(B1)
        offs = rows[:, None] * m + cols[None, :]
        mask = (rows[:, None] < n) & (cols[None, :] < m)
        carry = ctx.load(out, rows * m + (c0 - 1), (rows < n) & (c0 > 0))
        ctx.store(out, offs, ctx.load(x, offs, mask).cumsum(axis=1) + carry[:, None], mask)


def alt_layernorm(ctx, x, w, b, out, n, m, eps, R, BM):
    rows = ctx.program_id(0) * R + ctx.arange(R)
    cols = ctx.arange(BM)
    offs = rows[:, None] * m + cols[None, :]
    mask = (rows[:, None] < n) & (cols[None, :] < m)
    ws, bs = ctx.load(w, cols, cols < m), ctx.load(b, cols, cols < m)
    t = ctx.load(x, offs, mask)
    xc = ctx.where(mask, t - (t.sum(axis=1) / m)[:, None], 0.0)
    del t
    std = ((xc * xc).sum(axis=1) / m + eps).sqrt()
    ctx.store(out, offs, xc / std[:, None] * ws[None, :] + bs[None, :], mask)


def alt_matmul(ctx, a, b, out, M, N, K, BM, BN, BK):
    rows = ctx.program_id(0) * BM + ctx.arange(BM)
    cols = ctx.program_id(1) * BN + ctx.arange(BN)
    ks = ctx.arange(K)  # exactly K wide: no mask along K
    at = ctx.load(a, rows[:, None] * K + ks[None, :], rows[:, None] < M)
    bt = ctx.load(b, ks[:, None] * N + cols[None, :], cols[None, :] < N)
    ctx.store(out, rows[:, None] * N + cols[None, :], at @ bt, (rows[:, None] < M) & (cols[None, :] < N))


def alt_matmul_tiled(ctx, a, b, out, M, N, K, BM, BN, BK):
    rows = ctx.program_id(0) * BM + ctx.arange(BM)
    cols = ctx.program_id(1) * BN + ctx.arange(BN)
    acc = ctx.zeros((BM, BN))
    for k0 in range(0, K, BK):
        ks = k0 + ctx.arange(BK)
        acc = acc + ctx.dot(ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K)),
                            ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N)))
    ctx.store(out, rows[:, None] * N + cols[None, :], acc, (rows[:, None] < M) & (cols[None, :] < N))


def alt_conv1d(ctx, x, w, out, n, k, B, BK):
    start = ctx.program_id(0) * B
    offs = start + ctx.arange(B + BK)
    xs = ctx.load(x, offs, offs < min(n, start + B + k - 1))
    ws = ctx.load(w, ctx.arange(BK), ctx.arange(BK) < k)
    acc = xs[0:B] * ws[0]
    for j in range(1, k):
        acc = acc + xs[j:j + B] * ws[j]
    outs = start + ctx.arange(B)
    ctx.store(out, outs, acc, outs < n - k + 1)


def alt_attention(ctx, q, k, v, out, n, m, d, BQ, BKV, BD):
    rows = ctx.program_id(0) * BQ + ctx.arange(BQ)
    dims = ctx.arange(BD)
    qt = ctx.load(q, rows[:, None] * d + dims[None, :], (rows[:, None] < n) & (dims[None, :] < d)) / math.sqrt(d)
    row_max = ctx.full(BQ, -math.inf)
    total = ctx.zeros(BQ)
    acc = ctx.zeros((BQ, BD))
    for k0 in range(0, m, BKV):
        keys = k0 + ctx.arange(BKV)
        kv_mask = (keys[:, None] < m) & (dims[None, :] < d)
        s = ctx.dot(qt, ctx.load(k, keys[:, None] * d + dims[None, :], kv_mask).T)
        s = s + ctx.where(keys[None, :] < m, 0.0, -math.inf)
        new_max = ctx.maximum(row_max, s.max(axis=1))
        alpha = ctx.exp(row_max - new_max)
        p = ctx.exp(s - new_max[:, None])
        total = total * alpha + p.sum(axis=1)
        acc = acc * alpha[:, None]
        ctx.dot(p, ctx.load(v, keys[:, None] * d + dims[None, :], kv_mask), acc=acc)
        row_max = new_max
    ctx.store(out, rows[:, None] * d + dims[None, :], acc * (1.0 / total)[:, None],
              (rows[:, None] < n) & (dims[None, :] < d))


def alt_linear_relu(ctx, a, b, bias, out, M, N, K, BM, BN, BK):
    rows = ctx.program_id(0) * BM + ctx.arange(BM)
    cols = ctx.program_id(1) * BN + ctx.arange(BN)
    acc = ctx.zeros((BM, BN)) + ctx.load(bias, cols, cols < N)[None, :]  # the bias first, then the products
    for k0 in range(0, K, BK):
        ks = k0 + ctx.arange(BK)
        at = ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K))
        bt = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))
        ctx.dot(at, bt, acc=acc)
    ctx.store(out, rows[:, None] * N + cols[None, :], ctx.maximum(acc, 0.0), (rows[:, None] < M) & (cols[None, :] < N))


#: puzzle -> a correct answer written otherwise than the reference (the three-pass softmax answered with the
#: online one, which moves fewer bytes than the three-pass minimum)
ALTERNATIVES = {
    "map": alt_map, "zip": alt_zip, "outer": alt_outer, "relu2d": alt_relu2d, "rowsum": alt_rowsum,
    "cumsum": alt_cumsum, "softmax": solutions.online_softmax_kernel, "online_softmax": solutions.online_softmax_kernel,
    "layernorm": alt_layernorm, "matmul": alt_matmul, "matmul_tiled": alt_matmul_tiled, "conv1d": alt_conv1d,
    "attention": alt_attention, "linear_relu": alt_linear_relu,
}


@pytest.mark.parametrize("name", NAMES)
def test_a_correct_alternative_passes(name):
    p = specs.PUZZLES[name]
    r = grade(get(p.exercise_id), {p.answer: ALTERNATIVES[name]})
    assert r.passed, str(r)


def _solution_cells() -> dict[str, str]:
    """The kernels of solutions/P1_npu_puzzles.ipynb, by name: each solution cell's code without its markers."""
    import nbformat

    nb = nbformat.read(Path(__file__).parent.parent / "solutions" / "P1_npu_puzzles.ipynb", as_version=4)
    out = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and "### BEGIN SOLUTION" in cell.source:
            code = "\n".join(line for line in cell.source.splitlines() if "### " not in line)
            tree = ast.parse(code)
            for node in tree.body:
                if isinstance(node, ast.FunctionDef):
                    out[node.name] = ast.dump(node)
    return out


def test_the_tests_copy_of_the_solutions_is_the_notebooks():
    cells = _solution_cells()
    copy = ast.parse(Path(solutions.__file__).read_text())
    mine = {node.name: ast.dump(node) for node in copy.body if isinstance(node, ast.FunctionDef)}
    assert set(cells) == {p.answer for p in specs.PUZZLES.values()}
    for name, dump in cells.items():
        assert mine.get(name) == dump, f"tests/puzzle_solutions.py's {name} is not the notebook's"


def test_a_kernel_that_changes_the_runner_fails_and_the_runner_is_put_back():
    import npu_lab.puzzles.model as model_module

    def cheating_map(ctx, x, out, n, B):
        model_module.ITEMSIZE = 1  # bytes counted a quarter of what they are
        offs = ctx.program_id(0) * B + ctx.arange(B)
        ctx.store(out, offs, ctx.load(x, offs) + 10.0)

    r = grade(get("p1.map"), {"map_kernel": cheating_map})
    assert r.status == NOT_YET
    failing = [c for c in r.cases if not c.passed]
    assert failing and "model.ITEMSIZE" in failing[0].got and failing[0].hint
    assert model_module.ITEMSIZE == 4


def test_a_kernel_reading_around_ctx_load_fails():
    def peeking_zip(ctx, x, y, out, n, B):
        offs = ctx.program_id(0) * B + ctx.arange(B)
        ys = ctx.zeros(B)
        ys.data[:] = y._flat[B * ctx.program_id(0):B * (ctx.program_id(0) + 1)]  # y's memory read directly
        ctx.store(out, offs, ctx.load(x, offs) + ys)

    r = grade(get("p1.zip"), {"zip_kernel": peeking_zip})
    assert r.status == NOT_YET
    failing = [c for c in r.cases if not c.passed]
    assert failing and all("loaded with ctx.load" in c.description for c in failing), str(r)
    assert "y: 64 of 64 elements" in failing[0].got


def test_the_check_grades_its_own_copy_of_the_puzzle():
    import dataclasses

    p = specs.PUZZLES["map"]
    specs.PUZZLES["map"] = dataclasses.replace(p, budget=100.0, reference=lambda x, **e: x * 0)
    try:
        r = grade(get("p1.map"), {"map_kernel": solutions.map_kernel})
    finally:
        specs.PUZZLES["map"] = p
    assert r.passed, str(r)


def test_references_are_numpy_formulas_not_torch_operators(monkeypatch):
    p = specs.puzzle("softmax")
    x = specs.make_inputs(p, p.shapes[0])["x"]
    want = p.reference(x=x, **p.env(p.shapes[0]))
    monkeypatch.setattr(torch, "softmax", lambda *a, **k: torch.zeros(1))
    monkeypatch.setattr(torch.Tensor, "exp", lambda self: self)
    assert torch.equal(p.reference(x=x, **p.env(p.shapes[0])), want)
    assert torch.allclose(want, torch.nn.functional.softmax(x, 1), atol=1e-6)


def test_cost_feedback_is_shown_in_the_result():
    p = specs.puzzle("online_softmax")
    r = grade(get(p.exercise_id), {p.answer: solutions.softmax_kernel})
    text = str(r)
    assert "1.33x the minimum" in text and "x read 3x per element" in text and "memory-bound" in text


def test_result_renders_html_with_roofline_and_reads_map():
    p = specs.puzzle("outer")
    res = specs.run(p, solutions.outer_kernel, p.shapes[0])
    html = res._repr_html_()
    assert "<svg" in html and "ridge" in html and "read" in html
    assert np.asarray(res.stats.reads["x"]).max() == p.shapes[0]["m"] // 16


def test_softmax_puzzle_kernel_runs_a_model_as_aten_softmax():
    from npu_lab.puzzles.bridge import register_softmax

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 40), torch.nn.Softmax(dim=-1), torch.nn.Linear(40, 3))
    x = torch.randn(6, 8)
    expected = model(x)
    npu_model = model.to("npu")
    with register_softmax(solutions.online_softmax_kernel) as mine:
        got = npu_model(x.to("npu"))
        assert mine.calls == 1 and mine.stats.bytes_read == 2 * 6 * 40 * 4
        assert torch.allclose(got.cpu(), expected, atol=1e-5)
        assert "aten::_softmax" not in npu_lab.claimed_ops()
    assert "aten::_softmax" in npu_lab.claimed_ops()
    npu_model(x.to("npu"))
    assert mine.calls == 1  # the shipped kernel is back


@pytest.mark.parametrize("stem, chapter", [("P0_npu_kernels", "p1"), ("B0_bring_up", "b0")])
def test_the_chapter_asks_each_of_its_questions_once_before_running_the_mechanism(stem, chapter):
    """Each question declared for the chapter is asked by one code cell that starts with the prediction and ends
    by handing the measured value to npu_lab.predict; the committed output shows no prediction was made."""
    import nbformat

    from npu_lab.grading.predictions import chapter_questions

    nb = nbformat.read(Path(__file__).parent.parent / "chapters" / f"{stem}.ipynb", as_version=4)
    asked = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and "npu_lab.predict(" in cell.source:
            assert cell.source.startswith("prediction = ...  # your prediction: "), cell.source[:60]
            last = ast.parse(cell.source).body[-1]  # the cell ends with npu_lab.predict("<id>", prediction, <measured>)
            assert isinstance(last, ast.Expr) and ast.unparse(last.value.func) == "npu_lab.predict"
            qid = last.value.args[0].value
            assert ast.unparse(last.value.args[1]) == "prediction" and len(last.value.args) == 3
            shown = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in cell.outputs)
            assert f"[no prediction] {qid}:" in shown
            asked[qid] = asked.get(qid, 0) + 1
    declared = [q.id for q in chapter_questions(chapter)]  # the puzzles' exercise notebook asks none of them
    assert sorted(asked) == sorted(declared) and all(n == 1 for n in asked.values()), (asked, declared)
    assert 3 <= len(asked) <= 5


def test_the_figures_draw_measured_runs_and_refuse_what_they_cannot_draw():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from npu_lab.puzzles.figures import roofline_figure, walk_figure

    p = specs.puzzle("matmul_tiled")
    shape = {"M": 40, "N": 40, "K": 32}
    dbg = specs.run(p, solutions.matmul_tiled_kernel, shape, debug=True).stats
    fast = specs.run(p, solutions.matmul_tiled_kernel, shape, debug=False).stats
    x = torch.randn(64, device="npu")
    copy = launch(lambda ctx, x, out, B: ctx.store(out, ctx.arange(B), ctx.load(x, ctx.arange(B))), 1, x,
                  torch.empty_like(x), 64)
    fig = roofline_figure({"product": fast, "a copy": copy})
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(t.startswith("product (") for t in labels) and not any("a copy" in t for t in labels)  # 0 FLOPs
    assert fig.axes[0].get_xscale() == fig.axes[0].get_yscale() == "log"
    fig = walk_figure({"tiled": dbg})
    assert len(fig.axes) == 4  # a, b, out and the colour bar
    assert "each element read 2x" in fig.axes[0].get_title(loc="left")  # a: once per column of blocks (N / BN = 2)
    with pytest.raises(ValueError, match="debug runs"):
        walk_figure({"no trace": fast})
    plt.close("all")
