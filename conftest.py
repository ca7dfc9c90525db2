"""Repository-wide pytest set-up (tests/ and the notebooks nbval checks).

* Learner progress goes to a throw-away directory, never to ``~/.npu_lab``.
* After the run, say how many notebook cells nbval does not compare, so the
  number stays visible and small.
* Test files run longest first (``tests/durations.json``), so ``./run test``'s
  workers finish together.
* With ``NPU_LAB_NOTEBOOK_CPU=varied`` (what ``./run test`` sets unless told otherwise), the kernels
  nbval starts for chapters/ and solutions/ run other CPU code paths than the machine's own
  (:data:`VARIED_CPU`): the committed outputs were made with the machine's own, so a compared
  output that depends on the CPU (rounding noise, a thread count) fails here, not on a learner's
  machine. (``./run test`` has numba compile for the generic CPU in the whole run, so the tests and
  the notebooks share compiled kernels; the committed outputs are made with the machine's own,
  by ``tools/execute_notebooks.py``.)
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from pathlib import Path

import nbformat
import pytest

os.environ["NPU_LAB_HOME"] = tempfile.mkdtemp(prefix="npu_lab_home_")

#: Other CPU code paths for the notebooks: numba's generic CPU model instead of this CPU's (another
#: instruction schedule and vector cost model), ATen's plain C++ kernels instead of its AVX2/AVX-512
#: ones, and thread counts other than the machine's: 1 for torch's kernels and, for the npu's, 1 (2 on a
#: one-core machine), so a parallel reduction splits its work otherwise than with the default (one thread
#: a core). Fewer threads than cores, not more: with two test workers, more numba threads than cores
#: leave OpenMP's spinning threads waiting on each other (CI's run with 3 took 2448 s, the run before 1124 s).
VARIED_CPU = {"NUMBA_CPU_NAME": "generic", "ATEN_CPU_CAPABILITY": "default",
              "NUMBA_NUM_THREADS": "1" if (os.cpu_count() or 1) > 1 else "2", "OMP_NUM_THREADS": "1"}


def _vary_notebook_cpu() -> None:
    """Start nbval's kernels with :data:`VARIED_CPU` in their environment (not this process's)."""
    import nbval.kernel

    start = nbval.kernel.start_new_kernel
    if getattr(start, "_npu_lab_varied", False):
        return

    def start_new_kernel(*args, **kwargs):
        kwargs["env"] = {**os.environ, **VARIED_CPU}
        return start(*args, **kwargs)

    start_new_kernel._npu_lab_varied = True  # type: ignore[attr-defined]
    nbval.kernel.start_new_kernel = start_new_kernel


if os.environ.get("NPU_LAB_NOTEBOOK_CPU") == "varied":
    _vary_notebook_cpu()

_IGNORE_MARKERS = ("NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP")
_IGNORE_TAGS = {"nbval-ignore-output", "nbval-skip"}


def uncompared_cells(paths: list[Path]) -> tuple[int, int, list[str]]:
    """(cells whose output nbval ignores, code cells with output, where) over ``paths``."""
    ignored, total, where = 0, 0, []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            total += 1
            tags = set(cell.metadata.get("tags", []))
            if tags & _IGNORE_TAGS or any(m in cell.source for m in _IGNORE_MARKERS):
                ignored += 1
                where.append(f"{path.name}#{i}")
    return ignored, total, where


#: Words in a skip's reason that mean "a tool or package is missing" (not "does not apply here").
_MISSING_TOOL = ("needs ", "install", "not installed", "could not import", "no module named")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI (NPU_LAB_CI=1, set by .ci/run) a test skipped because a tool is missing fails instead."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("NPU_LAB_CI") != "1" or not report.skipped:
        return
    reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
    if any(word in reason.lower() for word in _MISSING_TOOL):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI for a missing tool (CI must run every test): {reason}"


#: Seconds each test file took in a full run (written by tools/test_durations.py).
_DURATIONS = Path(__file__).parent / "tests" / "durations.json"


def pytest_collection_modifyitems(session, config, items) -> None:
    """Order the test files longest first, each file's tests in their own order.

    ``--dist loadfile`` hands whole files to the workers in collection order (``./run test`` turns
    xdist's own reordering by test count off), so the longest files start first and the short ones
    fill in at the end, instead of one worker starting a long file when the other is nearly done.
    """
    try:
        table = json.loads(_DURATIONS.read_text())
    except (OSError, ValueError):
        return
    default = statistics.median(table.values()) if table else 0.0
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(item.nodeid.split("::")[0], i)
    items.sort(key=lambda it: (-table.get(it.nodeid.split("::")[0], default), first[it.nodeid.split("::")[0]]))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not (config.option.nbval or config.option.nbval_lax):
        return
    reports = terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", [])
    files = {r.nodeid.split("::")[0] for r in reports if hasattr(r, "nodeid")}
    paths = sorted(config.rootpath / f for f in files if f.endswith(".ipynb"))
    if not paths:
        return
    ignored, total, where = uncompared_cells(paths)
    terminalreporter.write_line(
        f"nbval: {ignored} of {total} code cells in {len(paths)} notebooks are not compared: {', '.join(where)}")
    if os.environ.get("NPU_LAB_NOTEBOOK_CPU") == "varied":
        terminalreporter.write_line("nbval: the notebooks ran with other CPU code paths than this machine's: "
                                    + " ".join(f"{k}={v}" for k, v in VARIED_CPU.items()))
