"""Puzzles P1: NPU kernels written by the learner, checked for values *and* for what they cost.

One exercise per puzzle of :mod:`npu_lab.puzzles.specs` (``p1.map``, ``p1.zip``, ...). For every
public and hidden shape of the puzzle the check

* runs the learner's kernel on ``npu`` tensors in the debug runner (bounds and scratchpad checked,
  every access traced, blocks in a shuffled order),
* compares the output with a reference the check computes itself from NumPy formulas (never
  through the learner's code; the output starts as NaN, so elements never written show up),
* holds the run's trace to the puzzle's parts (:mod:`npu_lab.puzzles.parts`): each block stores only
  its own part of the output and every output element once, and each block loads with its own
  ``ctx.load`` every input element its part needs - the least a block can read, since its scratchpad
  is its own (a kernel that reads less kept values in Python between blocks, or read around
  ``ctx.load``); the byte counters must be the trace's (a kernel that changed them fails);
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

import numpy as np
import torch

from ..grading.predictions import question
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester
from ..puzzles import specs
from ..puzzles.debug import region
from ..puzzles.draw import first_block_text
from ..puzzles.model import ITEMSIZE

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

# Chapter P0's "predict, then run" questions (chapters/P0_npu_kernels.ipynb; P0 teaches what the puzzles use).
question("p1.masked_bytes", "scale_shift on 100 elements, 32 per block: how many bytes of device memory does the "
         "masked run move, loads and stores together?",
         why="a masked-out position moves nothing: 100 elements read and 100 written, 4 bytes each, make 800 B "
             "(not 4 blocks x 32 positions x 8 B = 1,024 B)")
question("p1.b_rereads", "With panels of 16 rows per block, in a 128 x 128 x 128 product, how many times is each "
         "element of b read (all blocks together)?",
         why="every block needs all of b and has a scratchpad of its own: 128 / 16 = 8 blocks read it 8 times")
question("p1.first_compute_bound", "Of the panel heights 4, 8, 16 and 32, which is the smallest whose product is "
         "compute-bound on this chip (ridge point 5 FLOP/B)?",
         why="intensity is about 2 M N K / (4 (M K + K N M / BM + M N)) = 64 / (2 + 128 / BM) FLOP/B here: 1.9, "
             "3.6, 6.4 and 10.7 for BM = 4, 8, 16, 32, so 16 is the first above the ridge", choices=(4, 8, 16, 32))
question("p1.softmax_bytes", "The whole-row softmax as the model's aten::_softmax: how many times the bytes of the "
         "shipped softmax kernel does it move?",
         why="a row that fits the scratchpad is read once and written once, as the shipped kernel does: the same "
             "bytes, 1.0x. Rows longer than a scratchpad must be read two or three times (puzzles 7 and 8)",
         rtol=0.01)


#: The modules whose code runs and counts a kernel: what a learner's kernel must leave alone.
_RUNNER_MODULES = ("model", "runner", "compiled", "jit", "cost", "debug", "specs", "references", "draw", "parts")


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


def _counters_match_trace(result: specs.Result) -> str:
    """"" if the run's byte counters are what its trace of loads and stores adds up to, else what differs."""
    s = result.stats
    traced = {kind: ITEMSIZE * int(sum(int(np.asarray(c).sum()) for c in counts.values()))
              for kind, counts in (("read", s.reads), ("written", s.writes))}
    if (s.bytes_read, s.bytes_written) == (traced["read"], traced["written"]):
        return ""
    return (f"the counters say {s.bytes_read:,} B read and {s.bytes_written:,} B written; the trace of its "
            f"ctx.load and ctx.store calls adds up to {traced['read']:,} B and {traced['written']:,} B")


def _label(pid: tuple[int, ...]) -> str:
    return f"block {pid if len(pid) > 1 else pid[0]}"


_STORE_HINT = ("each block stores only its own part of the output (the puzzle's text says which: e.g. block (p0, p1) "
               "the tile at rows p0*B0..., columns p1*B1...), and every output element once, when its value is final")
_LOAD_HINT = ("a block's scratchpad is its own: what another block loaded, or what Python variables kept from one "
              "block to the next, is not there on a chip. Each block loads with ctx.load every input element its "
              "part of the output is computed from")


def _parts_problems(p: specs.Puzzle, result: specs.Result) -> tuple[list[str], str]:
    """What the run's trace shows against the puzzle's parts: the problems found and the hint for the first."""
    stats, env = result.stats, p.env(result.shape)
    trace = stats.trace
    if trace is None or p.parts is None:
        return [], ""
    parts = {part.pid: part for part in p.parts(env)}
    shapes = p.tensor_shapes(result.shape)
    numel = {name: int(np.prod(shape)) for name, shape in shapes.items()}
    owner = np.full(numel[p.output], -1, np.int64)
    index = {pid: i for i, pid in enumerate(parts)}
    for pid, part in parts.items():
        owner[part.out] = index[pid]
    stores, loaded = [], {}
    for a in trace.accesses:
        if a.kind == "store":
            stores.append(a)
        elif a.tensor in numel:
            mask = loaded.setdefault((a.pid, a.tensor), np.zeros(numel[a.tensor], bool))
            mask[a.flat] = True
    problems: list[str] = []
    hints: list[str] = []
    for a in stores:
        if a.tensor != p.output:
            problems.append(f"{_label(a.pid)} stored into {a.tensor}{region(shapes[a.tensor], a.flat)}, an input")
            hints.append(f"a kernel stores only into {p.output}")
            break
    outside: dict[tuple[int, ...], list[np.ndarray]] = {}
    for a in stores:
        if a.tensor == p.output:
            bad = a.flat[owner[a.flat] != index.get(a.pid, -2)]
            if bad.size:
                outside.setdefault(a.pid, []).append(bad)
    for pid, bad_list in list(outside.items())[:2]:
        bad = np.unique(np.concatenate(bad_list))
        problems.append(f"{_label(pid)} stored {bad.size} element{'s' if bad.size != 1 else ''} outside its part: "
                        f"{p.output}{region(shapes[p.output], bad)}")
        hints.append(_STORE_HINT)
    writes = stats.writes.get(p.output)
    if writes is not None and (np.asarray(writes) > 1).any():
        w = np.asarray(writes)
        first = int(np.argmax(w > 1))
        problems.append(f"{int((w > 1).sum())} elements of {p.output} were stored more than once (up to "
                        f"{int(w.max())} times), e.g. {p.output}{region(shapes[p.output], np.array([first]))}")
        hints.append(_STORE_HINT)
    for pid, part in parts.items():
        for name, need in part.needs.items():
            have = loaded.get((pid, name))
            missing = need if have is None else need[~have[need]]
            if missing.size:
                problems.append(f"{_label(pid)} never loaded {missing.size} of the {need.size} elements of {name} its "
                                f"part needs: {name}{region(shapes[name], missing)}")
                hints.append(_LOAD_HINT)
                break
        if len(problems) >= 3:
            break
    return problems, (hints[0] if hints else "")


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
        tampered = _counters_match_trace(result)
        if tampered:
            t.expect(f"{p.answer} with {sizes}: bytes counted as loaded and stored", False,
                     expected="the counters of the run equal the bytes its ctx.load and ctx.store calls moved",
                     got=tampered, hint="the runner counts every ctx.load and ctx.store: a kernel must not change "
                                        "the counts (or anything else of ctx but its tiles)", hidden=hidden)
            continue
        problems, hint = _parts_problems(p, result)
        t.expect(f"{p.answer} with {sizes}: each block stores its own part once and loads what it needs",
                 not problems, expected="stores: only the block's own part of the output, each element once; loads: "
                                        "every input element the block's part needs, by that block",
                 got="; ".join(problems) if problems else "as expected", hint=hint, hidden=hidden)
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
