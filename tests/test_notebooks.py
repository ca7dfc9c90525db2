"""The learner notebooks in exercises/ run top to bottom and report "not started" cleanly.

(chapters/ and solutions/ are run and compared by nbval; see pyproject.toml.) An exercise notebook is its
solution with the answers taken out, so only the cells that can behave differently run here: the answer
cells, the checks, the cells that read what those define, and what all of them need
(``notebook_exec.cells_an_exercise_changes``). The rest is the solution's code, which nbval runs.
"""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from .notebook_exec import ROOT, cells_an_exercise_changes, exercise_ids

EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))


@pytest.mark.parametrize("path", EXERCISES, ids=[p.stem for p in EXERCISES])
def test_exercise_notebook_runs_and_reports_not_started(path):
    nb = nbformat.read(path, as_version=4)
    solution = nbformat.read(ROOT / "solutions" / path.name, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    keep = cells_an_exercise_changes([c.source for c in code],
                                     [c.source for c in solution.cells if c.cell_type == "code"])
    for cell, kept in zip(code, keep):
        if not kept:
            cell.source = ""  # nbclient skips an empty cell
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.output_type != "error", f"{path.name}: {out.get('ename')}: {out.get('evalue')}"
            texts.append(out.get("data", {}).get("text/plain", ""))
    joined = "\n".join(texts)
    for eid in exercise_ids(path):
        assert f"[not started] {eid}" in joined, f"{path.name}: {eid} should report 'not started'"
        said = joined.split(f"[not started] {eid}", 1)[1].split("\n[", 1)[0]
        assert "YOUR CODE HERE" in said or "define" in said, f"{path.name}: {eid} should say what to write:\n{said}"
    assert "[passed]" not in joined


def test_an_exercise_run_keeps_the_cells_that_read_an_answer():
    exercise = ["import torch", "x = torch.ones(2)", "table = slow_sweep(x)",
                "def f(t):\n    raise NotImplementedError", "y = f(x)", "plot(y)", "plot(table)",
                "npu_lab.check('a.f', f)"]
    solution = list(exercise)
    solution[3] = "def f(t):\n    return t + 1"
    keep = cells_an_exercise_changes(exercise, solution)
    # the answer, the cells that read what it defines (directly or not), the check, and what they need
    assert keep == [True, True, False, True, True, True, False, True]


def test_committed_notebooks_are_executed_and_clean():
    """Solutions and chapters are committed with outputs; exercises without."""
    for folder in ("chapters", "solutions"):
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            code = [c for c in nb.cells if c.cell_type == "code"]
            assert all(c.execution_count is not None for c in code), f"{path} has unexecuted cells"
            assert not any(o.output_type == "error" for c in code for o in c.outputs), f"{path} has errors"
    for path in EXERCISES:
        nb = nbformat.read(path, as_version=4)
        assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), f"{path} has outputs"
