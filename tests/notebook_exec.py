"""Run a notebook's code cells in this process (for checking exercises against their answers)."""

from __future__ import annotations

import ast
import tempfile
from pathlib import Path
from typing import Any

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def needed_cells(cells: list[str]) -> list[bool]:
    """Which of a notebook's code cells its answers may need.

    A ``# my_npu`` cell, one that imports, defines a function or class or loads a milestone
    (``bringup.load``), and one that assigns a name a needed cell after it reads. The others only show
    something (a sweep, a training run, a table): nbval runs those, in the notebook.
    """
    kinds = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    trees = [ast.parse(src) for src in cells]
    needed = [False] * len(cells)
    later: set[str] = set()  # the names the needed cells after this one read
    for i in reversed(range(len(cells))):
        tree = trees[i]
        assigned = {n.id for node in tree.body for n in ast.walk(node)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        needed[i] = (cells[i].lstrip().startswith("# my_npu") or bool(assigned & later)
                     or any(isinstance(node, kinds) or "bringup.load" in ast.unparse(node) for node in tree.body))
        if needed[i]:
            later |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return needed


def _names(tree: ast.AST, ctx: type) -> set[str]:
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}
    if ctx is ast.Store:  # a def or a class binds its name too
        names |= {n.name for n in ast.walk(tree)
                  if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    return names


def cells_an_exercise_changes(exercise: list[str], solution: list[str]) -> list[bool]:
    """Which code cells of an exercise notebook can behave differently from its solution's.

    The exercise is generated from the solution (``npu_lab.grading.notebooks``), so the two differ only in
    the answer cells. A cell can behave differently when it is an answer cell, when it grades
    (``check(`` / ``progress(``), or when it reads a name that such a cell binds, directly or through another
    such cell. Those cells, and the cells they need (:func:`needed_cells`), are what an exercise run must
    execute; every other cell is the same code on the same inputs as in the solution, which nbval runs.
    """
    if len(exercise) != len(solution):
        raise ValueError(f"the exercise has {len(exercise)} code cells, its solution {len(solution)}")
    trees = [ast.parse(src) for src in exercise]
    changed = [False] * len(exercise)
    tainted: set[str] = set()
    for i, (ex, sol) in enumerate(zip(exercise, solution)):
        grades = "check(" in ex or "progress(" in ex
        if ex != sol or grades or _names(trees[i], ast.Load) & tainted:
            changed[i] = True
            tainted |= _names(trees[i], ast.Store)
    kinds = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    keep = [False] * len(exercise)
    later: set[str] = set()  # the names the kept cells after this one read
    for i in reversed(range(len(exercise))):
        tree = trees[i]
        keep[i] = (changed[i] or bool(_names(tree, ast.Store) & later) or exercise[i].lstrip().startswith("# my_npu")
                   or any(isinstance(node, kinds) or "bringup.load" in ast.unparse(node) for node in tree.body))
        if keep[i]:
            later |= _names(tree, ast.Load)
    return keep


def run_cells(path: Path, *, grade: bool = True, needed_only: bool = False) -> dict[str, Any]:
    """Execute every code cell of ``path`` in one fresh namespace and return it.

    Each cell is written to a file first (as Jupyter does), so tracebacks show
    its lines and numba's ``cache=True`` finds a source file. With ``grade=False``
    the notebook's ``npu_lab.check(...)`` and ``npu_lab.progress(...)`` calls do
    nothing: for a caller that grades the answers itself (a solution's checks are
    the slow part of running it, and nbval runs them in the notebook already). With
    ``needed_only``, only the cells :func:`needed_cells` keeps run.
    """
    if not grade:
        import npu_lab

        saved = npu_lab.check, npu_lab.progress
        npu_lab.check = npu_lab.progress = lambda *args, **kwargs: None
        try:
            return run_cells(path, needed_only=needed_only)
        finally:
            npu_lab.check, npu_lab.progress = saved
    nb = nbformat.read(path, as_version=4)
    ns: dict[str, Any] = {"__name__": "__main__", "display": lambda *a, **k: None}
    cells_dir = Path(tempfile.mkdtemp(prefix=f"cells_{path.stem}_"))
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    keep = needed_cells([cell.source for cell in code]) if needed_only else [True] * len(code)
    for i, (cell, kept) in enumerate(zip(code, keep)):
        if not kept:
            continue
        cell_file = cells_dir / f"cell_{i}.py"
        cell_file.write_text(cell.source)
        exec(compile(cell.source, str(cell_file), "exec"), ns)  # noqa: S102
    return ns


def exercise_ids(path: Path) -> list[str]:
    """The exercise ids a notebook checks (from its ``npu_lab.check("...")`` calls)."""
    import re

    nb = nbformat.read(path, as_version=4)
    ids: list[str] = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            for m in re.finditer(r"""check\(\s*["']([\w.]+)["']""", cell.source):
                if m.group(1) not in ids:
                    ids.append(m.group(1))
    return ids
