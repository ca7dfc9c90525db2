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


def test_fast_and_debug_runs_agree():
    p = specs.puzzle("attention")
    shape = p.shapes[0]
    fast = specs.run(p, solutions.attention_kernel, shape, debug=False)
    dbg = specs.run(p, solutions.attention_kernel, shape, debug=True)
    assert torch.allclose(fast.output, dbg.output, atol=1e-6)
    assert (fast.stats.bytes, fast.stats.flops) == (dbg.stats.bytes, dbg.stats.flops)
    assert fast.stats.trace is None and dbg.stats.trace is not None


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
