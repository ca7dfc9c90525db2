"""Run in a process of its own with ``NPU_LAB_BARE=1`` (tests/test_bringup.py starts it): a bare device.

    python -m tests.bringup.worker registrations
    python -m tests.bringup.worker milestone solutions/B1_eager_mlp.ipynb

Prints one JSON object on its last line of output.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import nbformat


def registrations() -> dict[str, Any]:
    import torch

    import npu_lab
    from npu_lab import bringup, models
    from npu_lab.device import fallback

    out: dict[str, Any] = {"bare": bringup.is_bare(), "registered": sorted(bringup.registered())}
    out["owners"] = {op: bringup.owner(op) for op in out["registered"]}
    x = torch.arange(6.0).reshape(2, 3).to("npu")
    out["runtime"] = [x.t().cpu().tolist(), x[1, 2].item(), str(x.t().contiguous().stride())]
    for name, fn in [("ones", lambda: torch.ones(2, device="npu")), ("add", lambda: x + 1),
                     ("fallback", lambda: fallback.set_cpu_fallback(True))]:
        try:
            fn()
            out[name] = "no error"
        except Exception as exc:  # noqa: BLE001
            out[name] = f"{type(exc).__name__}: {exc}"
    model = models.mlp(10, 32, 5)
    out["needed"] = sorted(npu_lab.coverage(model, (torch.randn(4, 10),)).needed)
    return out


def carry(path: Path) -> dict[str, Any]:
    """Load the ``# my_npu`` cells of a solved milestone (as a later milestone does), twice."""
    import torch

    from npu_lab import bringup

    before = bringup.yours()
    module = bringup.load(path.stem, folder=path.parent)
    first = bringup.yours()
    x = torch.arange(6.0).reshape(2, 3).to("npu")
    value = (x.t() @ x + 1).relu().sum().item()
    again = bringup.load(path.stem, folder=path.parent)  # replaces what the first load registered
    failed = bringup.attempt(lambda: torch.ones(2, device="npu").exp())
    return {"before": before, "first": first, "again": bringup.yours(), "value": value,
            "module": module.__name__, "cells": module.__npu_lab_cells__,
            "same_file": again.__file__ == module.__file__,
            "attempt": repr(failed), "falsy": not failed}


def readiness(folder: Path) -> dict[str, Any]:
    """readiness() on the bare device: of the MLP before any kernel and with milestone 1 loaded, then of the
    transformer block with every milestone up to 6 loaded (and the roadmap it turns green)."""
    import torch

    import npu_lab
    from npu_lab import adaptation, bringup, models

    torch.manual_seed(0)
    model = models.mlp(10, 32, 5)
    x = torch.randn(8, 10)
    before = npu_lab.readiness(model, x)
    bringup.load("B1_eager_mlp", folder=folder)
    after = npu_lab.readiness(model, x)
    for name in ("B2_cnn", "B3_transformer", "B4_conformance", "B5_compile", "B6_matmul"):
        bringup.load(name, folder=folder)
    torch.manual_seed(0)
    block = models.TransformerBlock()
    full = npu_lab.readiness(block, models.example_batch(block, 2)[0])

    def items(r: Any) -> list[tuple[str, str, str]]:
        return [(i.name, i.status, i.detail) for i in r.items]

    return {"before": items(before), "after": items(after), "all": items(full),
            "roadmap": [(w.weeks, w.check, w.status) for w in adaptation.roadmap(full)]}


#: Kernels that attack the check rather than answer it (an add.out of the learner's).
ATTACKS = {
    "never returns": "def bad(self, other, *, alpha=1, out):\n    while True:\n        pass\n",
    "os._exit": "def bad(self, other, *, alpha=1, out):\n    import os\n    os._exit(3)\n",
    "SystemExit": "def bad(self, other, *, alpha=1, out):\n    raise SystemExit(0)\n",
    "KeyboardInterrupt": "def bad(self, other, *, alpha=1, out):\n    raise KeyboardInterrupt\n",
    "changes the default dtype": ("def bad(self, other, *, alpha=1, out):\n"
                                  "    torch.set_default_dtype(torch.float64)\n"
                                  "    return add_out(self, other, alpha=alpha, out=out)\n"),
}


def attacks(path: Path) -> dict[str, Any]:
    """Grade b1.elementwise with each attack registered over the solved notebook's add.out."""
    import torch

    from npu_lab import bringup
    from npu_lab.grading import EXERCISES, grade, load_all

    load_all()
    module = bringup.load(path.stem, folder=path.parent)
    out: dict[str, Any] = {}
    # a kernel that spins takes a core until the limit: a short one for it, room for the others' cases to run
    limit = os.environ.get("NPU_LAB_CHECK_TIMEOUT", "40")
    hang = os.environ.get("NPU_LAB_HANG_TIMEOUT", limit)
    for name, code in ATTACKS.items():
        os.environ["NPU_LAB_CHECK_TIMEOUT"] = hang if name == "never returns" else limit
        exec(code, module.__dict__)  # noqa: S102
        bringup.library("wrong").impl("add.out", module.__dict__["bad"], "PrivateUse1")
        start = time.perf_counter()
        try:
            r = grade(EXERCISES["b1.elementwise"], {})
        finally:
            bringup.forget("wrong")
        out[name] = {"status": r.status, "text": str(r)[:2000], "seconds": time.perf_counter() - start,
                     "dtype": str(torch.get_default_dtype())}
    os.environ.pop("NPU_LAB_CHECK_TIMEOUT", None)  # the attacks' short limit is not the solution's
    final = grade(EXERCISES["b1.elementwise"], {})
    out["after"], out["after_text"] = final.status, str(final)[:3000]
    return out


#: relu and its gradient in C++, operators of a namespace of their own built with torch.utils.cpp_extension.load_inline
#: (ATen and torch/library.h only, no Python bindings): a correct alternative to the numba kernels of milestone 1
#: (they read and write the npu tensors' memory through data_ptr), registered for aten's relu from Python.
CPP_RELU = r"""
#include <ATen/ATen.h>
#include <torch/library.h>

at::Tensor relu(const at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() == at::kFloat, "relu: float32 only, got ", self.scalar_type());
  auto x = self.contiguous();
  auto out = at::empty_like(x, at::MemoryFormat::Contiguous);
  const float* src = x.const_data_ptr<float>();
  float* dst = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = src[i] > 0.0f ? src[i] : 0.0f;
  return out;
}

at::Tensor threshold_backward(const at::Tensor& grad, const at::Tensor& self, double threshold) {
  TORCH_CHECK(grad.sizes() == self.sizes(), "threshold_backward: grad and self differ in shape");
  auto g = grad.contiguous();
  auto x = self.contiguous();
  auto out = at::empty_like(g, at::MemoryFormat::Contiguous);
  const float* gp = g.const_data_ptr<float>();
  const float* xp = x.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < g.numel(); ++i) op[i] = xp[i] > threshold ? gp[i] : 0.0f;
  return out;
}

TORCH_LIBRARY(bringup_cpp, m) {
  m.def("relu(Tensor self) -> Tensor", &relu);
  m.def("threshold_backward(Tensor grad, Tensor self, float threshold) -> Tensor", &threshold_backward);
}
"""


def alternatives(folder: Path) -> dict[str, Any]:
    """Grade milestone checks with some of the solution's numba kernels replaced by C++ and by a tile kernel."""
    from torch.utils.cpp_extension import load_inline

    from npu_lab import bringup
    from npu_lab.grading import EXERCISES, grade, load_all
    from npu_lab.puzzles.bridge import register_softmax

    load_all()
    for name in ("B1_eager_mlp", "B2_cnn", "B3_transformer"):
        bringup.load(name, folder=folder)
    import torch

    # built once into PyTorch's extensions folder (~/.cache/torch_extensions), then loaded from there
    load_inline("bringup_cpp_relu", CPP_RELU, is_python_module=False, no_implicit_headers=True)
    cpp = torch.ops.bringup_cpp
    lib = bringup.library("cpp")
    lib.impl("relu", cpp.relu, "PrivateUse1")
    lib.impl("threshold_backward", lambda g, x, threshold: cpp.threshold_backward(g, x, float(threshold)),
             "PrivateUse1")
    out: dict[str, Any] = {}
    r = grade(EXERCISES["b1.elementwise"], {})
    out["cpp"] = {"status": r.status, "text": str(r)[:3000]}
    failed = bringup.attempt(lambda: torch.relu(torch.ones(2, dtype=torch.float64).to("npu")))
    out["cpp_used"] = "relu: float32 only" in repr(failed)  # the C++ kernel's own check: it is the one that ran
    from tests.puzzle_solutions import online_softmax_kernel  # a row softmax as a tile kernel (puzzle 8's answer)

    with register_softmax(online_softmax_kernel) as mine:
        r = grade(EXERCISES["b3.attention"], {})
        out["tile"] = {"status": r.status, "text": str(r)[:3000]}
        x = torch.randn(3, 5).to("npu")
        before = mine.calls
        got = torch.softmax(x, dim=-1).cpu()
        out["tile_used"] = mine.calls > before and bool(torch.allclose(got, torch.softmax(x.cpu(), -1), atol=1e-6))
    return out


#: Answers that attack a check that runs the learner's function on forked ranks or in a fresh process.
FUNCTION_ATTACKS = {
    "never returns": "def answer(*args, **kwargs):\n    while True:\n        pass\n",
    "os._exit": "def answer(*args, **kwargs):\n    import os\n    os._exit(3)\n",
    "SystemExit": "def answer(*args, **kwargs):\n    raise SystemExit(0)\n",
    "KeyboardInterrupt": "def answer(*args, **kwargs):\n    raise KeyboardInterrupt\n",
    "returns nonsense": "def answer(*args, **kwargs):\n    return object()\n",
}
#: The checks of that kind (b5's run your passes in a forked child, b6.kernel your tile kernel): each runs every attack
#: as its answer, as every name the check grades.
PROCESS_CHECKS = ("b5.passes", "b5.step", "b6.kernel", "b7.ddp", "b8.desync", "b8.module", "b8.race",
                  "b8.factory")


def function_attacks(folder: Path) -> dict[str, Any]:
    """Grade each check of :data:`PROCESS_CHECKS` with each of :data:`FUNCTION_ATTACKS` as the answer."""
    from npu_lab import bringup
    from npu_lab.grading import EXERCISES, grade, load_all

    load_all()
    # DDP's cat is milestone 3's; b5's checks need the fused operators of milestone 5 and what its step runs on
    for milestone in ("B1_eager_mlp", "B2_cnn", "B3_transformer", "B4_conformance", "B5_compile"):
        bringup.load(milestone, folder=folder)
    files = Path(tempfile.mkdtemp(prefix="npu_lab_attacks_"))
    out: dict[str, Any] = {}
    limit = os.environ.get("NPU_LAB_CHECK_TIMEOUT", "40")
    hang = os.environ.get("NPU_LAB_HANG_TIMEOUT", limit)
    for eid in PROCESS_CHECKS:
        names = EXERCISES[eid].names
        for attack, code in FUNCTION_ATTACKS.items():
            # an answer that never returns holds the check until its limit: a short one for it (NPU_LAB_HANG_TIMEOUT)
            os.environ["NPU_LAB_CHECK_TIMEOUT"] = hang if attack == "never returns" else limit
            file = files / f"{eid}_{len(out)}.py"
            file.write_text("\n".join(code.replace("def answer", f"def {name}") for name in names))
            scope: dict[str, Any] = {}
            exec(compile(file.read_text(), str(file), "exec"), scope)  # noqa: S102
            start = time.perf_counter()
            r = grade(EXERCISES[eid], {name: scope[name] for name in names})
            out[f"{eid} {attack}"] = {"status": r.status, "text": str(r)[:1500],
                                      "seconds": time.perf_counter() - start}
    return out


def conformance_tools(folder: Path) -> dict[str, Any]:
    """bringup.conformance with PyTorch's test modules imported *before* npu_lab (as a careless notebook does)."""
    from torch.testing._internal.common_methods_invocations import op_db  # noqa: F401 - the import order is the point

    from npu_lab import bringup
    from npu_lab.bringup import conformance

    out: dict[str, Any] = {"none": repr(conformance.opinfo(["sum"]))}
    bringup.load("B1_eager_mlp", folder=folder)
    report = conformance.opinfo(["sum", "mm"])
    out["sum"] = {"status": report["sum"].status, "detail": report["sum"].detail, "sample": report["sum"].sample}
    out["mm"] = report["mm"].status
    out["for"] = conformance.opinfos_for(["aten::mm.out", "aten::native_layer_norm", "aten::_log_softmax.out"])
    tests = conformance.openreg_tests(["test_opinfo.py", "test_device.py"])
    out["opinfo_tests"] = sum(1 for k in tests.tests if k.startswith("test_opinfo.py"))
    out["missing"] = dict(tests.missing())
    out["concurrent"] = tests.outcome("test_device.py::TestDevice::test_concurrent_device_operations")
    return out


def _cells(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


def milestone(path: Path) -> dict[str, Any]:
    """Run the solved notebook's cells that define something (not its check cells), grade its exercises, then each
    wrong answer."""
    from npu_lab import bringup
    from npu_lab.grading import EXERCISES, grade, load_all

    from ..notebook_exec import needed_cells
    from . import wrong_b1, wrong_b2, wrong_b3, wrong_b4, wrong_b5, wrong_b6, wrong_b7, wrong_b8

    wrong = {**wrong_b1.WRONG, **wrong_b2.WRONG, **wrong_b3.WRONG, **wrong_b4.WRONG, **wrong_b5.WRONG,
             **wrong_b6.WRONG, **wrong_b7.WRONG, **wrong_b8.WRONG}
    load_all()
    os.chdir(path.parent)  # as Jupyter runs a notebook: bringup.load() finds the milestones next to it

    ns: dict[str, Any] = {"__name__": "__main__", "display": lambda *a, **k: None}
    folder = Path(tempfile.mkdtemp(prefix="bringup_cells_"))
    ids: list[str] = []
    cells = _cells(path)
    for i, (src, needed) in enumerate(zip(cells, needed_cells(cells))):
        found = re.findall(r"""check\(\s*["']([\w.]+)["']""", src)
        if found:
            ids += found
            continue
        if not needed:
            continue
        file = folder / f"cell_{i}.py"
        file.write_text(src)
        exec(compile(src, str(file), "exec"), ns)  # noqa: S102
    # The solution is graded once, after its wrong answers: it must pass then, which also shows that a wrong answer's
    # kernels are gone once it is graded. (nbval grades it again in solutions/, where its committed "[passed]" is.)
    report: dict[str, Any] = {"ids": ids, "wrong": {}, "after": {}}

    def answers(eid: str, scope: dict[str, Any] = ns) -> dict[str, Any]:
        """A device check's answer is the device ({}); a function's, that function of ``scope``."""
        return {n: scope.get(n) for n in EXERCISES[eid].names}

    for eid in ids:
        results = []
        for code in wrong.get(eid, []):
            scope = dict(ns)  # the solution's answers stay in ns for the grading after
            file = folder / f"wrong_{eid}_{len(results)}.py"  # a file, so inspect.getsource finds the answer's code
            file.write_text(textwrap.dedent(code))
            start = time.perf_counter()
            exec(compile(file.read_text(), str(file), "exec"), scope)  # noqa: S102
            os.environ["NPU_LAB_CHECK_FIRST_FAILURE"] = "1"  # one failing case with its hint is what the test asserts
            try:
                r = grade(EXERCISES[eid], answers(eid, scope))
            finally:
                del os.environ["NPU_LAB_CHECK_FIRST_FAILURE"]
                bringup.forget("wrong")
            failing = [c for c in r.cases if not c.passed]
            results.append({"status": r.status, "hinted": any(c.hint or c.error for c in failing),
                            "text": str(r)[:3000], "code": code, "seconds": time.perf_counter() - start})
        report["wrong"][eid] = results
    for eid in ids:  # the solution's kernels are back once the wrong ones are gone
        start = time.perf_counter()
        r = grade(EXERCISES[eid], answers(eid))
        report["after"][eid] = {"status": r.status, "text": str(r), "seconds": time.perf_counter() - start}
    return report


def compile_bare(folder: Path) -> dict[str, Any]:
    """The npu backend on a bare device: the transformer block's training step compiled over the track's kernels."""
    import torch

    import npu_lab
    from npu_lab import bringup, models
    from npu_lab.compiler import backend, record, register_pass, unregister_pass
    from npu_lab.profiler import profile

    for name in ("B1_eager_mlp", "B2_cnn", "B3_transformer", "B4_conformance"):
        bringup.load(name, folder)
    torch.manual_seed(0)
    block = models.TransformerBlock().to("npu")
    x, y = models.example_batch(block, 2, "npu")

    def step() -> torch.Tensor:
        block.zero_grad(set_to_none=True)
        loss = models.loss_fn(block, block(x), y)
        loss.backward()
        return loss

    def measured(fn) -> tuple[float, list, int, float]:
        fn()  # warm-up: numba compiles, Dynamo traces
        with profile() as prof:
            loss = fn()
            torch.npu.synchronize()
        return loss.item(), [p.grad.cpu() for p in block.parameters()], prof.launches, prof.sim_time_us

    seen: list[str] = []

    def look(gm: torch.fx.GraphModule) -> list[str]:
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return []

    out: dict[str, Any] = {}
    eager = measured(step)
    register_pass(look)
    try:
        compiled = measured(torch.compile(step, backend="npu"))
    finally:
        unregister_pass("look")
    out["loss"] = [eager[0], compiled[0]]
    out["grads"] = max((a - b).abs().max().item() for a, b in zip(eager[1], compiled[1]))
    out["launches"] = [eager[2], compiled[2]]
    graphs = record.last_compile().graphs
    out["graphs"] = [g.kind for g in graphs]
    out["lab_kernels"] = sum(len(g.kernels) for g in graphs)
    out["npu_namespace"] = sorted({t for t in seen if t.startswith("npu.")})
    out["seen"] = sorted(set(seen))
    out["passes"] = sorted({s.name for g in graphs for s in g.snapshots})
    torch._dynamo.reset()
    try:
        torch.compile(step, backend="npu", options={"pointwise_fusion": True})()
        out["asked_for_lab_fusion"] = "no error"
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out["asked_for_lab_fusion"] = f"{type(exc).__name__}: {exc}"
    out["decomposed"] = sorted(str(op) for op in backend.decompositions()
                               if str(op).split(".")[1] in ("gelu", "native_layer_norm", "_softmax", "addmm"))
    out["bare"] = npu_lab.bringup.is_bare()
    return out


def main(argv: list[str]) -> int:
    os.environ.setdefault("NPU_LAB_HOME", tempfile.mkdtemp(prefix="npu_lab_home_"))
    if argv[0] == "registrations":
        result = registrations()
    elif argv[0] == "attacks":
        result = attacks(Path(argv[1]))
    elif argv[0] == "readiness":
        result = readiness(Path(argv[1]))
    elif argv[0] == "function_attacks":
        result = function_attacks(Path(argv[1]))
    elif argv[0] == "alternatives":
        result = alternatives(Path(argv[1]))
    elif argv[0] == "conformance":
        result = conformance_tools(Path(argv[1]))
    elif argv[0] == "carry":
        result = carry(Path(argv[1]))
    elif argv[0] == "compile":
        result = compile_bare(Path(argv[1]))
    elif argv[0] == "milestone":
        result = milestone(Path(argv[1]))
    else:
        raise SystemExit(f"unknown mode {argv[0]!r}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
