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


def _worker(*args: str, timeout: float = 1500, **env_vars: str) -> dict:
    env = {**os.environ, "NPU_LAB_BARE": "1", **env_vars}
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
    for eid in r["ids"]:
        wrong = r["wrong"][eid]
        assert len(wrong) >= 4, f"{eid}: hold at least 4 wrong answers"
        for w in wrong:
            assert w["status"] == "not yet", f"{eid}: this wrong answer passed:\n{w['code']}\n{w['text']}"
            assert w["hinted"], f"{eid}: a failure without a hint:\n{w['text']}"
    assert set(r["after"]) == set(r["ids"])
    for eid, s in r["after"].items():  # graded after its wrong answers, so none of theirs is left behind
        assert s["status"] == "passed", f"{eid}: the solution does not pass:\n{s['text']}"


def test_checks_that_run_your_function_on_ranks_or_in_a_fresh_process_survive_attacks():
    """An answer that never returns, ends its process, raises SystemExit or KeyboardInterrupt, or returns nonsense:
    b5.passes, b5.step (your passes run in a forked child), b6.kernel (your tile kernel), b7.ddp, b8.desync,
    b8.module, b8.race and b8.factory each still give a verdict, within the limit, and say what happened."""
    r = _worker("function_attacks", str(ROOT / "solutions"), NPU_LAB_CHECK_TIMEOUT="8", NPU_LAB_HANG_TIMEOUT="4")
    assert len(r) == 40
    for name, v in r.items():
        assert v["status"] == "not yet", (name, v["text"])
        assert v["seconds"] < 30, (name, v["seconds"])
    assert "within 4 s" in r["b7.ddp never returns"]["text"]
    assert "within 4 s" in r["b8.desync never returns"]["text"]
    assert "within 4 s" in r["b8.module never returns"]["text"]
    assert "within 4 s" in r["b6.kernel never returns"]["text"]
    assert "within 4 s" in r["b8.race never returns"]["text"]
    assert "within 4 s" in r["b8.factory never returns"]["text"]
    assert "returned a value" in r["b6.kernel returns nonsense"]["text"], r["b6.kernel returns nonsense"]["text"]
    assert "returns the trained model" in r["b7.ddp returns nonsense"]["text"]
    # your passes run first in b5.step's child, so what they do shows before the time limit
    assert "within 4 s" in r["b5.passes never returns"]["text"] and "within 4 s" in r["b5.step never returns"]["text"]
    for eid in ("b5.passes", "b5.step", "b7.ddp"):
        assert "sys.exit()" in r[f"{eid} SystemExit"]["text"], r[f"{eid} SystemExit"]["text"]
    assert "died (exit status 3)" in r["b5.step os._exit"]["text"], r["b5.step os._exit"]["text"]
    assert "must return a list of changes" in r["b5.step returns nonsense"]["text"]
    assert "fuse_addmm_gelu returned object" in r["b5.passes returns nonsense"]["text"]


def test_correct_alternatives_in_cpp_and_as_a_tile_kernel_pass():
    """Kernels need not be numba: relu and its gradient in C++ (load_inline) pass b1.elementwise, and a puzzle tile
    kernel bridged to aten::_softmax passes b3.attention, with the solution's other kernels."""
    r = _worker("alternatives", str(ROOT / "solutions"))
    assert r["cpp"]["status"] == "passed", r["cpp"]["text"]
    assert r["cpp_used"]
    assert r["tile"]["status"] == "passed", r["tile"]["text"]
    assert r["tile_used"]


def test_conformance_runs_pytorchs_samples_and_the_openreg_tests_on_your_kernels():
    """The OpInfo samples name the failing sample and your line; the openreg tests run in a fork, say which kernel
    each failure needs, and instantiate for npu even when PyTorch's test modules were imported first."""
    r = _worker("conformance", str(ROOT / "solutions"))
    assert "missing 1" in r["none"] and "aten::sum.IntList_out" in r["none"]
    # milestone 1's sum has the 0-d bug that milestone 4 fixes
    assert r["sum"]["status"] == "error" and "rows_last" in r["sum"]["detail"], r["sum"]
    assert r["sum"]["sample"].startswith("tensor() float32, dim=0"), r["sum"]
    assert r["mm"] == "native"
    assert r["for"] == sorted(r["for"], key=r["for"].index) and {"mm", "log_softmax", "native_layer_norm",
                                                                  "nn.functional.layer_norm"} <= set(r["for"])
    assert r["opinfo_tests"] >= 15  # instantiated although common_device_type was imported before npu_lab
    assert "aten::normal_" in r["missing"] or "aten::eq.Tensor_out" in r["missing"], r["missing"]
    # four host threads launching numba kernels at once: serialized, not an abort of the whole process
    assert r["concurrent"] in ("passed", "missing"), r["concurrent"]


def test_a_later_milestone_loads_the_backend_cells_of_an_earlier_one():
    r = _worker("carry", str(ROOT / "solutions" / "B1_eager_mlp.ipynb"))
    assert r["before"] == []
    assert {"aten::mm.out", "aten::relu", "aten::sum.IntList_out", "aten::_foreach_add_.List"} <= set(r["first"])
    assert r["again"] == r["first"]  # loading again replaced the kernels, it did not pile them up (or fail)
    assert r["value"] == 162.0  # (x.T @ x + 1).relu().sum() for x = [[0, 1, 2], [3, 4, 5]]
    assert r["module"] == "my_npu_B1_eager_mlp" and r["cells"] == 5 and r["same_file"]
    assert r["attempt"].startswith("NotImplementedError: Could not run 'aten::exp.out'") and r["falsy"]


def test_the_npu_backend_on_a_bare_device_compiles_your_kernels_and_runs_your_passes():
    r = _worker("compile", str(ROOT / "solutions"))
    assert r["bare"] is True
    assert r["loss"][0] == r["loss"][1] and r["grads"] < 1e-5  # the same kernels, in the same order
    assert r["graphs"] == ["forward", "backward"]
    # none of the lab's kernels: no generated fused kernel, no operator of the npu namespace
    assert r["lab_kernels"] == 0 and r["npu_namespace"] == []
    assert 0 < r["launches"][1] <= r["launches"][0]
    assert "look" in r["passes"] and "pointwise_fusion" not in r["passes"]  # the learner's pass ran, the lab's not
    # operators with a kernel of yours stay whole (gelu runs as your gelu.out), not decomposed into ones you lack
    assert {"aten.gelu.default", "aten.native_layer_norm.default", "aten._safe_softmax.default"} <= set(r["seen"])
    assert r["decomposed"] == []
    assert "ValueError" in r["asked_for_lab_fusion"] and "your passes only" in r["asked_for_lab_fusion"]


def test_readiness_on_a_bare_device_counts_only_your_measured_work():
    r = _worker("readiness", str(ROOT / "solutions"))
    before = {name: (status, detail) for name, status, detail in r["before"]}
    assert all(status == "to do" for status, _ in before.values()), before
    assert "0 with your kernels" in before["operators covered"][1]
    assert before["results match the CPU"][1].startswith("could not run on npu: NotImplementedError")
    after = {name: (status, detail) for name, status, detail in r["after"]}
    assert after["operators covered"][0] == "done" and "0 still need a kernel" in after["operators covered"][1]
    assert after["results match the CPU"][0] == "done"
    # measured on your kernels: PyTorch's first samples of each OpInfo that exercises one of them
    status, detail = after["native operators in the OpInfo conformance suite"]
    assert "OpInfos that exercise your operators pass their first 8 samples" in detail, detail
    assert (status == "done") == ("failing" not in detail), detail
    # measured: the npu backend compiles the step over your kernels, but no pass of yours fused anything yet
    status, detail = after["fusion enabled in the compiled graph"]
    assert status == "to do" and "no fused operator of yours" in detail and "eager -> " in detail, detail
    # milestone 1's matrix product declares its cost: the clock charges the ideal, so there is nothing to measure
    status, detail = after["matrix product at 80% of the roofline"]
    assert status == "to do" and "declares its cost" in detail, detail
    assert "eager step within 2x the CPU's time" not in after  # no wall time on a bare device
    # every milestone up to 6: the transformer block's checklist and the roadmap end green, each item measured
    full = {name: (status, detail) for name, status, detail in r["all"]}
    assert all(status == "done" for status, _ in full.values()), full
    assert "82.7% of the roofline" in full["matrix product at 80% of the roofline"][1]
    assert "fused operators of yours" in full["fusion enabled in the compiled graph"][1]
    weeks = {(w, check): status for w, check, status in r["roadmap"]}
    assert weeks[("8", "matrix product at 80% of the roofline")] == "done"
    assert [status for (w, _), status in weeks.items() if w != "10"] == ["done"] * (len(weeks) - 1)


def test_a_check_survives_kernels_that_attack_it():
    """A kernel that hangs, ends the process, raises what is not an Exception or changes global state: the
    check still returns a verdict that says what happened, and the notebook's process is untouched."""
    r = _worker("attacks", str(ROOT / "solutions" / "B1_eager_mlp.ipynb"), NPU_LAB_CHECK_TIMEOUT="40",
                NPU_LAB_HANG_TIMEOUT="6")
    for name in ("never returns", "os._exit", "SystemExit", "KeyboardInterrupt"):
        assert r[name]["status"] == "not yet", (name, r[name]["text"])
        assert r[name]["seconds"] < 120, (name, r[name]["seconds"])
    assert "did not finish within 6 s" in r["never returns"]["text"]
    assert "died" in r["os._exit"]["text"] or "exit" in r["os._exit"]["text"], r["os._exit"]["text"]
    # the change happened in the forked copy that ran the cases, not in the notebook's process
    assert r["changes the default dtype"]["dtype"] == "torch.float32"
    assert all(v["dtype"] == "torch.float32" for k, v in r.items() if isinstance(v, dict))
    assert r["after"] == "passed", r["after_text"]
