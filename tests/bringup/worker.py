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


def _cells(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


def milestone(path: Path) -> dict[str, Any]:
    """Run the solved notebook (its check cells aside), grade its exercises, then each wrong answer."""
    from npu_lab import bringup
    from npu_lab.grading import EXERCISES, grade, load_all

    from .wrong_b1 import WRONG

    load_all()

    ns: dict[str, Any] = {"__name__": "__main__", "display": lambda *a, **k: None}
    folder = Path(tempfile.mkdtemp(prefix="bringup_cells_"))
    ids: list[str] = []
    for i, src in enumerate(_cells(path)):
        found = re.findall(r"""check\(\s*["']([\w.]+)["']""", src)
        if found:
            ids += found
            continue
        file = folder / f"cell_{i}.py"
        file.write_text(src)
        exec(compile(src, str(file), "exec"), ns)  # noqa: S102
    report: dict[str, Any] = {"ids": ids, "solution": {}, "wrong": {}, "after": {}}
    for eid in ids:
        start = time.perf_counter()
        r = grade(EXERCISES[eid], {})
        report["solution"][eid] = {"status": r.status, "text": str(r), "seconds": time.perf_counter() - start}
    for eid in ids:
        results = []
        for code in WRONG.get(eid, []):
            exec(textwrap.dedent(code), ns)  # noqa: S102
            try:
                r = grade(EXERCISES[eid], {})
            finally:
                bringup.forget("wrong")
            failing = [c for c in r.cases if not c.passed]
            results.append({"status": r.status, "hinted": any(c.hint or c.error for c in failing),
                            "text": str(r)[:3000], "code": code})
        report["wrong"][eid] = results
    for eid in ids:  # the solution's kernels are back once the wrong ones are gone
        report["after"][eid] = grade(EXERCISES[eid], {}).status
    return report


def main(argv: list[str]) -> int:
    os.environ.setdefault("NPU_LAB_HOME", tempfile.mkdtemp(prefix="npu_lab_home_"))
    if argv[0] == "registrations":
        result = registrations()
    elif argv[0] == "carry":
        result = carry(Path(argv[1]))
    elif argv[0] == "milestone":
        result = milestone(Path(argv[1]))
    else:
        raise SystemExit(f"unknown mode {argv[0]!r}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
