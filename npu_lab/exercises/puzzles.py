"""Puzzles P1: NPU kernels written by the learner, checked for values *and* for what they cost.

One exercise per puzzle of :mod:`npu_lab.puzzles.specs` (``p1.map``, ``p1.zip``, ...). For every
public and hidden shape of the puzzle the check

* runs the learner's kernel on ``npu`` tensors in the debug runner (bounds and scratchpad checked,
  every access traced, blocks in a shuffled order),
* compares the output with a reference the check computes itself with PyTorch on the CPU (never
  through the learner's code; the output starts as NaN, so elements never written show up),
* and holds the run to the puzzle's budget: device bytes at most 1.2x the minimum for that shape,
  the scratchpad within its capacity. The feedback gives the bytes moved against the minimum, how
  many times each input was read per element, which tiles block 0 loaded in which order, the
  scratchpad peak, and where the kernel sits on the device's roofline.

What the check trusts: the puzzles it grades are private copies taken when this module was imported
(a notebook that edits ``specs.PUZZLES`` or a puzzle's budget changes nothing here); the expected
outputs come from NumPy formulas (:mod:`npu_lab.puzzles.references`); the output tensor is made by
the check and compared with the grading code's own functions; and the code of the puzzle runner
(``npu_lab.puzzles.*``: the counters, the item size, the cost model's use) is put back as it was
first loaded before the check, and checked after every run of the learner's kernel: a kernel that
changed it fails, since its counts cannot be trusted.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable
from typing import Any

import torch

from ..grading.registry import chapter, exercise
from ..grading.tester import Tester
from ..puzzles import specs
from ..puzzles.draw import first_block_text

chapter("p1", "NPU puzzles: tiles, scratchpad, reuse and fusion, graded by the cost model", [
    "A kernel runs once per block of a grid; ctx.program_id says which block",
    "Device memory is read and written only by explicit loads and stores of tiles",
    "Masks guard the ragged edges: a block hanging over the tensor must not touch what is not there",
    "The scratchpad is small: long rows are walked in tiles with a running accumulator",
    "A numerically stable softmax subtracts the row max; the online softmax keeps max and sum in one pass",
    "Reuse: data loaded once into the scratchpad should serve every computation that needs it",
    "Tiled matmul: bigger output tiles mean fewer re-reads of the inputs; K is walked in slices",
    "Flash attention is tiled matmul plus online softmax: the score matrix never leaves the scratchpad",
    "Fusion: an epilogue applied in the scratchpad saves a round trip through device memory",
    "A kernel below the ridge point is memory-bound: only moving fewer bytes makes it faster",
])


#: The modules whose code runs and counts a kernel: what a learner's kernel must leave alone.
_RUNNER_MODULES = ("model", "runner", "compiled", "jit", "cost", "debug", "specs", "references", "draw")


def _runner_code() -> dict[str, tuple[Any, dict[str, Any]]]:
    """Every module of the puzzle runner and every class defined in it, with its attributes now."""
    out: dict[str, tuple[Any, dict[str, Any]]] = {}
    for short_name in _RUNNER_MODULES:
        name = f"npu_lab.puzzles.{short_name}"
        module = importlib.import_module(name)
        out[name] = (module, dict(vars(module)))
        for value in list(vars(module).values()):
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                out[f"{name}.{value.__name__}"] = (value, dict(vars(value)))
    return out


_PRISTINE_RUNNER = _runner_code()


def put_back_runner() -> list[str]:
    """Put the puzzle runner's code back as first loaded; return what had been changed (``module.attr``)."""
    changed = []
    for where, (obj, saved) in _PRISTINE_RUNNER.items():
        now = vars(obj)
        for key, value in saved.items():
            if key in ("__dict__", "__weakref__") or (key in now and now[key] is value):
                continue
            changed.append(f"{where}.{key}")
            setattr(obj, key, value)
        if isinstance(obj, type):
            for key in [k for k in now if k not in saved]:
                changed.append(f"{where}.{key}")
                delattr(obj, key)
    return changed


def _values_check(p: specs.Puzzle, expected: torch.Tensor, ran: dict) -> Callable[[Any], tuple[bool, str]]:
    """Compare with the reference; first say how many elements were never written (from the run's trace)."""
    from ..grading.tester import compare

    def check(value: Any) -> tuple[bool, str]:
        result = ran.get("result")
        writes = result.stats.writes.get(p.output) if result is not None else None
        if writes is not None:
            missing = int((writes == 0).sum())
            if missing:
                return False, (f"{missing} of {expected.numel()} elements of {p.output} were never written (check "
                               "the offsets of your stores and the grid's coverage)")
        if isinstance(value, torch.Tensor) and value.shape == expected.shape:
            bad = int((~torch.isfinite(value) & torch.isfinite(expected)).sum())
            if bad:
                return False, f"{bad} of {expected.numel()} elements are inf or NaN (an overflow?)"
        return compare(expected, value, p.rtol, p.atol)

    return check


def _unread_inputs(p: specs.Puzzle, result: specs.Result) -> list[str]:
    """Inputs with elements the (debug) run never loaded, e.g. ``x: 64 of 64 elements``.

    Every element of every puzzle's inputs is needed for its output, so right values with an input
    element never loaded mean the kernel read device memory some other way.
    """
    out = []
    for name in p.inputs:
        counts = result.stats.reads.get(name)
        if counts is None:
            continue
        missing = int((counts == 0).sum())
        if missing:
            out.append(f"{name}: {missing} of {counts.size} elements")
    return out


def grade_puzzle(t: Tester, p: specs.Puzzle, kernel: Callable[..., None]) -> None:
    """Check ``kernel`` on every public and hidden shape of ``p``: values, then the cost budget."""
    put_back_runner()  # a notebook cell may have changed it before the check
    cases = [(s, False) for s in p.shapes] + [(s, True) for s in p.hidden]
    for seed, (shape, hidden) in enumerate(cases):
        env = p.env(shape)
        expected = p.reference(**specs.make_inputs(p, shape, seed), **env)
        ran: dict[str, specs.Result] = {}

        def attempt(shape: specs.Shape = shape, seed: int = seed, ran: dict = ran) -> torch.Tensor:
            ran["result"] = specs.run(p, kernel, shape, debug=True, seed=seed)
            return ran["result"].output

        sizes = ", ".join(f"{k}={v}" for k, v in shape.items())
        values_ok = t.case(f"{p.answer} with {sizes}: values", attempt, expected=expected, hint=p.hint,
                           hidden=hidden, check=_values_check(p, expected, ran))
        changed = put_back_runner()
        if changed:
            t.expect(f"{p.answer} with {sizes}: the puzzle runner left as it is", False,
                     expected="a kernel that only uses ctx", got="it changed " + ", ".join(changed[:4]),
                     hint="the runner counts your kernel's bytes and FLOPs: a kernel must not change it (the check "
                          "put it back)", hidden=hidden)
            return
        result = ran.get("result")
        if result is None:
            continue  # the run raised: its error is the case above
        unread = _unread_inputs(p, result) if values_ok else []
        if unread:  # right values from inputs never loaded: read around ctx.load, so the bytes are not counted
            t.expect(f"{p.answer} with {sizes}: every input element loaded with ctx.load", False,
                     expected="each element of every input read by ctx.load at least once (the output needs it)",
                     got="never loaded: " + "; ".join(unread),
                     hint="a kernel reads device memory only through ctx.load: that is what the cost counts",
                     hidden=hidden)
            continue
        over = result.stats.bytes > p.budget * result.min_bytes
        got = result.cost_text()
        if over:
            got += "; " + first_block_text(result.stats)
        t.expect(f"{p.answer} with {sizes}: cost", not over and result.stats.scratchpad_peak <= p.capacity,
                 expected=f"at most {p.budget:g}x the minimum {result.min_bytes:,} B of device memory, "
                          f"scratchpad within {p.capacity:,} B",
                 got=got, hint=p.cost_hint, hidden=hidden)


def _register(p: specs.Puzzle) -> None:
    p = copy.copy(p)  # the check's own copy: edits to specs.PUZZLES made later do not reach it

    def grader(t: Tester, **answers: Any) -> None:
        grade_puzzle(t, p, answers[p.answer])

    exercise(p.exercise_id, p.title, names=[p.answer], timeout=20)(grader)


for _p in specs.PUZZLES.values():
    _register(_p)
