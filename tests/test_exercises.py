"""Every exercise: plausible wrong answers fail, with a hint (its solution passing is checked by nbval, its stub
reporting "not started" by tests/test_notebooks.py)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import textwrap
from pathlib import Path

import pytest

from npu_lab.grading import EXERCISES, NOT_YET, grade, load_all

from .notebook_exec import ROOT, exercise_ids, run_cells

ALL_SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
#: Run in this process; the bring-up track's (B*) need a bare device and run in one of their own
#: (tests/test_bringup.py).
SOLUTIONS = [p for p in ALL_SOLUTIONS if not p.name.startswith("B")]

#: For every exercise, plausible wrong answers (code defining the answer names), one module per
#: chapter in tests/wrong/ with a ``WRONG: dict[str, list[str]]``.
WRONG: dict[str, list[str]] = {}
for _module in sorted((Path(__file__).parent / "wrong").glob("*.py")):
    _spec = importlib.util.spec_from_file_location(f"wrong_{_module.stem}", _module)
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    WRONG.update(_mod.WRONG)


@pytest.fixture(scope="module", params=SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def notebook(request) -> tuple[Path, dict]:
    sol = request.param
    # The solution's own check cells are skipped: nbval runs them, and the test grades wrong answers below.
    return sol, run_cells(sol, grade=False)


@contextlib.contextmanager
def first_failure_only():
    """Checks stop at their first failing case (``NPU_LAB_CHECK_FIRST_FAILURE``): a wrong answer must fail, with a
    hint; the cases after its first failure would only cost time."""
    before = os.environ.get("NPU_LAB_CHECK_FIRST_FAILURE")
    os.environ["NPU_LAB_CHECK_FIRST_FAILURE"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["NPU_LAB_CHECK_FIRST_FAILURE"]
        else:
            os.environ["NPU_LAB_CHECK_FIRST_FAILURE"] = before


def _answers(ex, ns):
    return {n: ns.get(n) for n in ex.names}


def test_wrong_answers_fail(notebook):
    """(That the solution passes, nbval shows: it runs the solution's check cells and compares their committed
    "[passed]" with what they print now; test_every_solution_check_is_committed_passed sees they say so. That the
    stubs are "not started", tests/test_notebooks.py shows, from the exercise notebooks run in a kernel.)"""
    path, solved = notebook
    load_all()  # run alone (-k <stem>), nothing else has imported the exercises' modules
    ids = exercise_ids(path)
    assert ids, f"{path.name} checks no exercise"
    for eid in ids:
        ex = EXERCISES[eid]
        assert eid in WRONG, f"{eid}: add plausible wrong answers to WRONG in this file"
        for code in WRONG[eid]:
            ns = dict(solved)
            exec(textwrap.dedent(code), ns)  # noqa: S102
            with first_failure_only():  # a wrong answer's check stops at its first failing case
                r = grade(ex, _answers(ex, ns))
            assert r.status == NOT_YET, f"{eid}: this wrong answer passed:\n{code}"
            assert any(c.hint or c.error for c in r.cases if not c.passed), f"{eid}: failure without a hint"


def test_every_exercise_is_in_exactly_one_solution_notebook():
    load_all()
    seen: dict[str, str] = {}
    for path in ALL_SOLUTIONS:
        for eid in exercise_ids(path):
            assert eid not in seen, f"{eid} is checked in {seen[eid]} and {path.name}"
            seen[eid] = path.name
    registered = {e for e in EXERCISES if not e.startswith("test")}
    assert registered <= set(seen), f"exercises without a notebook: {sorted(registered - set(seen))}"


@pytest.mark.parametrize("path", ALL_SOLUTIONS, ids=[p.stem for p in ALL_SOLUTIONS])
def test_every_solution_check_is_committed_passed(path):
    """Each exercise a solution notebook checks shows "[passed] <id>" in the committed output of its check cell, so
    nbval, which runs the cell again and compares, fails the day the solution stops passing."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    shown = "\n".join(str(out.get("text", "")) + str(out.get("data", {}).get("text/plain", ""))
                      for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", []))
    for eid in exercise_ids(path):
        assert f"[passed] {eid}" in shown, f"{path.name}: the committed output does not show '[passed] {eid}'"
