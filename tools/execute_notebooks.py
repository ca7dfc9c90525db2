"""Execute notebooks in place so their committed outputs are fresh (what nbval compares against).

    python tools/execute_notebooks.py chapters/*.ipynb solutions/*.ipynb

Runs each notebook top to bottom in a fresh ``python3`` kernel of this
environment, with ``NPU_LAB_HOME`` pointed at an empty temporary directory
(as in CI) so stored progress does not leak into outputs. Prints the time each
notebook took; fails on the first error.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def execute(path: Path, timeout: int = 300) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as home:
        os.environ["NPU_LAB_HOME"] = home
        # as ./run test: numba's OpenMP threads sleep when a parallel kernel ends instead of spinning, which on a
        # busy machine inflated every host-time cell several times (a training step of C9's MLP: 300 ms -> 6-24 ms)
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        NotebookClient(nb, timeout=timeout, kernel_name="python3", coalesce_streams=True,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    nbformat.write(nb, path)
    return time.perf_counter() - start


def main(paths: list[str]) -> int:
    for p in paths:
        took = execute(Path(p))
        print(f"{p}: {took:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
