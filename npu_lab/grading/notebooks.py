"""Generate the learner notebooks in ``exercises/`` from the answer notebooks in ``solutions/``.

In a solution notebook, answers sit between markers in code cells::

    def contiguous_strides(shape):
        ### BEGIN SOLUTION
        ...
        ### END SOLUTION

The exercise notebook gets, in place of each block, ``# YOUR CODE HERE`` and a
stub: inside a function, ``raise NotImplementedError("YOUR CODE HERE")``, which
the checks recognise and report as "not started"; at the top level of a cell,
nothing (so the answer's name stays undefined, also "not started"). A block
can choose its own stub with lines starting ``### STUB`` (e.g.
``### STUB predicted_ops = None``), which appear only in the exercise version.
Outputs and execution counts are cleared.

Run ``python -m npu_lab.grading.notebooks`` to regenerate, ``--check`` to fail
when ``exercises/`` is out of date (CI does).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

from .tester import STUB_MESSAGE

BEGIN = re.compile(r"^(\s*)### BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*### END SOLUTION\s*$")
STUB = re.compile(r"^(\s*)### STUB ?(.*)$")

ROOT = Path(__file__).resolve().parents[2]


def strip_solutions(source: str) -> str:
    """The exercise version of one cell's source."""
    out: list[str] = []
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        m = BEGIN.match(lines[i])
        if not m:
            if STUB.match(lines[i]) or END.match(lines[i]):
                raise ValueError(f"marker outside a solution block: {lines[i]!r}")
            out.append(lines[i] if lines[i].strip() else "")
            i += 1
            continue
        indent = m.group(1)
        stubs: list[str] = []
        i += 1
        while i < len(lines) and not END.match(lines[i]):
            s = STUB.match(lines[i])
            if s:
                stubs.append((s.group(1) + s.group(2)).rstrip())
            if BEGIN.match(lines[i]):
                raise ValueError("nested ### BEGIN SOLUTION")
            i += 1
        if i == len(lines):
            raise ValueError("### BEGIN SOLUTION without ### END SOLUTION")
        i += 1  # skip END
        out.append(f"{indent}# YOUR CODE HERE")
        if stubs:
            out += stubs
        elif indent:
            out.append(f'{indent}raise NotImplementedError("{STUB_MESSAGE}")')
    return "\n".join(out)




def make_exercise(solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The exercise notebook of one solution notebook."""
    nb = nbformat.from_dict(solution)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = strip_solutions(cell.source)
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    return nb


def pairs(root: Path = ROOT) -> list[tuple[Path, Path]]:
    """(solution, exercise) paths for every solution notebook."""
    return [(p, root / "exercises" / p.name) for p in sorted((root / "solutions").glob("*.ipynb"))]


def render(solution_path: Path) -> str:
    nb = make_exercise(nbformat.read(solution_path, as_version=4))
    return nbformat.writes(nb) + "\n"


def out_of_date(root: Path = ROOT) -> list[Path]:
    """Exercise notebooks that differ from what their solutions generate (or are missing/orphaned)."""
    stale = []
    for sol, ex in pairs(root):
        if not ex.exists() or ex.read_text() != render(sol):
            stale.append(ex)
    solutions = {p.name for p in (root / "solutions").glob("*.ipynb")}
    stale += [p for p in (root / "exercises").glob("*.ipynb") if p.name not in solutions]
    return stale


def generate(root: Path = ROOT) -> list[Path]:
    """Write every exercise notebook; return those that changed."""
    changed = []
    for sol, ex in pairs(root):
        text = render(sol)
        if not ex.exists() or ex.read_text() != text:
            ex.parent.mkdir(exist_ok=True)
            ex.write_text(text)
            changed.append(ex)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if exercises/ is out of date")
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    if args.check:
        stale = out_of_date(args.root)
        for p in stale:
            print(f"out of date: {p} (run: python -m npu_lab.grading.notebooks)", file=sys.stderr)
        return 1 if stale else 0
    for p in generate(args.root):
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
