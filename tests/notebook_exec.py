"""Run a notebook's code cells in this process (for checking exercises against their answers)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def run_cells(path: Path, *, grade: bool = True) -> dict[str, Any]:
    """Execute every code cell of ``path`` in one fresh namespace and return it.

    Each cell is written to a file first (as Jupyter does), so tracebacks show
    its lines and numba's ``cache=True`` finds a source file. With ``grade=False``
    the notebook's ``npu_lab.check(...)`` and ``npu_lab.progress(...)`` calls do
    nothing: for a caller that grades the answers itself (a solution's checks are
    the slow part of running it, and nbval runs them in the notebook already).
    """
    if not grade:
        import npu_lab

        saved = npu_lab.check, npu_lab.progress
        npu_lab.check = npu_lab.progress = lambda *args, **kwargs: None
        try:
            return run_cells(path)
        finally:
            npu_lab.check, npu_lab.progress = saved
    nb = nbformat.read(path, as_version=4)
    ns: dict[str, Any] = {"__name__": "__main__", "display": lambda *a, **k: None}
    cells_dir = Path(tempfile.mkdtemp(prefix=f"cells_{path.stem}_"))
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
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
