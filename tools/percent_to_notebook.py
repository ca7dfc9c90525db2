"""Turn a script in "percent" format into a notebook (an authoring aid, like jupytext's).

    python tools/percent_to_notebook.py draft.py chapters/C1_torch_compile.ipynb

Cells start with ``# %%`` (code) or ``# %% [markdown]`` (markdown; each line's
leading ``# `` is removed). ``# %% tags=["nbval-ignore-output"]`` sets cell tags.
Execute the result with ``tools/execute_notebooks.py``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat

_HEADER = re.compile(r"^# %%\s*(\[markdown\])?\s*(?:tags=(\[.*\]))?\s*$")


def convert(text: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    cells: list[tuple[bool, list[str], list[str]]] = []
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            cells.append((bool(m.group(1)), json.loads(m.group(2)) if m.group(2) else [], []))
        elif cells:
            cells[-1][2].append(line)
    for markdown, tags, lines in cells:
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        if markdown:
            body = "\n".join(re.sub(r"^# ?", "", ln) for ln in lines)
            cell = nbformat.v4.new_markdown_cell(body)
        else:
            cell = nbformat.v4.new_code_cell("\n".join(lines))
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"c{i:03d}"
    return nb


def main(argv: list[str]) -> int:
    src, dst = Path(argv[0]), Path(argv[1])
    nbformat.write(convert(src.read_text()), dst)
    print(f"wrote {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
