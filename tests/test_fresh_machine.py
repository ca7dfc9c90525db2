"""The README's two commands work on a fresh clone with an empty virtual environment.

Runs tools/fresh_machine_check.sh (clone, ``./run lab`` until JupyterLab answers, then ``./run test``).
The inner ``./run test`` runs a smoke selection (the device and its runtime, one chapter, one solution,
the exercises' grading), not the whole suite again: this suite is that run, and CI runs it on a fresh
machine already. The inner run skips this test, so it does not recurse.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: What the fresh clone's ``./run test`` runs: the device end to end with the shipped kernels (test_device), and one
#: notebook under nbval, the bare device's chapter (the runtime alone). Notebooks there run on this machine's own
#: CPU code paths, so every kernel they use compiles cold: a heavier notebook would cost minutes and prove nothing
#: more than nbval's run of every notebook in the outer suite. (The native runtime's and ``npu_lab doctor``'s own
#: tests run in the outer suite, on the same installation steps.)
SMOKE = ["tests/test_device.py", "chapters/B0_bring_up.ipynb"]


@pytest.mark.skipif(os.environ.get("NPU_LAB_FRESH_CHECK") == "1", reason="already inside the fresh-machine check")
@pytest.mark.skipif(not (shutil.which("git") and shutil.which("curl")), reason="needs git and curl")
def test_readme_commands_work_on_a_fresh_clone():
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout
    if dirty.strip():
        pytest.skip("the working tree has uncommitted changes; the fresh-machine check clones the last commit")
    out = subprocess.run(["bash", str(ROOT / "tools" / "fresh_machine_check.sh"), str(ROOT), *SMOKE],
                         capture_output=True, text=True, timeout=3600)
    tail = (out.stdout[-4000:] + "\n" + out.stderr[-4000:])
    assert out.returncode == 0, tail
    assert "fresh-machine check: OK" in out.stdout
    print(tail)
