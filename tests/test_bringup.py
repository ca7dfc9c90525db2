"""The bring-up track (B): a bare device, and milestones graded on the learner's own kernels.

A bare device is chosen at import, so each test runs a worker process of its own (tests/bringup/worker.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .notebook_exec import ROOT

SOLVED = sorted((ROOT / "solutions").glob("B*.ipynb"))


def _worker(*args: str, timeout: float = 1500) -> dict:
    env = {**os.environ, "NPU_LAB_BARE": "1"}
    proc = subprocess.run([sys.executable, "-m", "tests.bringup.worker", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_bare_device_has_its_runtime_and_no_compute_kernel():
    r = _worker("registrations")
    assert r["bare"] is True
    # Everything registered for PrivateUse1 is the runtime's (memory, copies, views, the device's collectives)
    assert {op: o for op, o in r["owners"].items() if o != "runtime"} == {}
    for op in ("aten::empty.memory_format", "aten::empty_strided", "aten::_copy_from", "aten::as_strided",
               "aten::_local_scalar_dense", "aten::view"):
        assert op in r["registered"], op
    for op in ("aten::add.out", "aten::mm.out", "aten::fill_.Scalar", "aten::relu", "aten::sum.IntList_out"):
        assert op not in r["registered"], op
    assert r["runtime"] == [[[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]], 5.0, "(2, 1)"]
    assert r["ones"].startswith("NotImplementedError: Could not run 'aten::fill_.Scalar'")
    assert "'npu' backend" in r["ones"]
    assert r["add"].startswith("NotImplementedError: Could not run 'aten::add.out'")
    assert r["fallback"].startswith("RuntimeError") and "bare" in r["fallback"]
    assert {"aten::mm.out", "aten::addmm.out", "aten::relu", "aten::fill_.Scalar"} <= set(r["needed"])


@pytest.mark.parametrize("path", SOLVED, ids=[p.stem for p in SOLVED])
def test_milestone_solution_passes_and_wrong_answers_fail(path):
    r = _worker("milestone", str(path))
    assert r["ids"], f"{path.name} checks nothing"
    for eid, s in r["solution"].items():
        assert s["status"] == "passed", f"{eid}: the solution does not pass:\n{s['text']}"
    for eid in r["ids"]:
        wrong = r["wrong"][eid]
        assert len(wrong) >= 4, f"{eid}: hold at least 4 wrong answers"
        for w in wrong:
            assert w["status"] == "not yet", f"{eid}: this wrong answer passed:\n{w['code']}\n{w['text']}"
            assert w["hinted"], f"{eid}: a failure without a hint:\n{w['text']}"
    assert r["after"] == {eid: "passed" for eid in r["ids"]}


def test_a_later_milestone_loads_the_backend_cells_of_an_earlier_one():
    r = _worker("carry", str(ROOT / "solutions" / "B1_eager_mlp.ipynb"))
    assert r["before"] == []
    assert {"aten::mm.out", "aten::relu", "aten::sum.IntList_out", "aten::_foreach_add_.List"} <= set(r["first"])
    assert r["again"] == r["first"]  # loading again replaced the kernels, it did not pile them up (or fail)
    assert r["value"] == 162.0  # (x.T @ x + 1).relu().sum() for x = [[0, 1, 2], [3, 4, 5]]
    assert r["module"] == "my_npu_B1_eager_mlp" and r["cells"] == 5 and r["same_file"]
    assert r["attempt"].startswith("NotImplementedError: Could not run 'aten::exp.out'") and r["falsy"]
