"""The NPU puzzles: the programming model, its counts and errors, and the checks of every puzzle.

Every reference solution passes within its budget; for every puzzle, answers with wrong values and
answers with right values but over the cost budget fail, with feedback saying why.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import npu_lab
from npu_lab.grading import CHAPTERS, NOT_YET, get, grade, load_all
from npu_lab.puzzles import (
    OutOfBounds,
    ScratchpadOverflow,
    TileError,
    cdiv,
    launch,
    solutions,
    specs,
)

_spec = importlib.util.spec_from_file_location("wrong_puzzles", Path(__file__).parent / "wrong" / "puzzles.py")
wrong = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wrong)

NAMES = list(specs.PUZZLES)


def _define(code: str, name: str):
    ns: dict = {"math": math}
    exec(code, ns)  # noqa: S102 - the answers are test data written in this repository
    return ns[name]


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
        for c in failing:
            if c.description.endswith(": values"):  # the only acceptable value failure: it did not fit
                assert "ScratchpadOverflow" in c.error, str(r)
            else:
                assert c.description.endswith(": cost") and c.hint
                if not c.hidden:
                    assert "x the minimum" in c.got and "per element" in c.got and "-bound" in c.got
                    assert "did: load" in c.got  # which tiles the first block loaded, in order
        values = [c for c in r.cases if c.description.endswith(": values") and not c.error]
        assert all(c.passed for c in values), f"over-budget answer with wrong values:\n{r}"


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
