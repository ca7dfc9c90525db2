"""The pytest plugin that records each ported torch_openreg test's outcome (``tests/openreg``) on your device.

:func:`npu_lab.bringup.conformance.openreg_tests` runs pytest in a forked copy of the notebook's process (your
kernels, as registered now, and nothing else) with a :class:`Recorder`. It keeps, per test, ``passed``,
``skipped``, or a failure, and for a failure whether its cause is an operator with no kernel of yours ("Could not
run 'aten::...' with arguments from the 'npu' backend") or something else (a wrong value, a kernel's error, a
runtime API).
"""

from __future__ import annotations

import re
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_MISSING = re.compile(r"Could not run '([\w:.]+)' with arguments from the '\w+' backend")


def cause(longrepr: str, crash: str | None) -> tuple[str, str]:
    """("missing", "aten::abs.out") or ("failed", the error's first line), from a failure's report."""
    # the first error line that names a missing kernel (a later one may come from printing the tensors)
    for line in _ANSI.sub("", longrepr).splitlines():
        found = _MISSING.search(line) if line.startswith("E ") else None
        if found:
            return "missing", found.group(1)
    message = _ANSI.sub("", crash) if crash is not None else (longrepr.strip().splitlines() or [""])[-1]
    lines = message.strip().splitlines()
    return "failed", lines[0][:300] if lines else ""


class Recorder:
    """Collects ``{test id: {"outcome": ..., "detail": ...}}`` as pytest reports each test."""

    def __init__(self) -> None:
        self.results: dict[str, dict[str, str]] = {}

    def pytest_runtest_logreport(self, report: Any) -> None:
        nodeid = report.nodeid.split("openreg/")[-1]
        if report.skipped:
            self.results.setdefault(nodeid, {"outcome": "skipped", "detail": ""})
        elif report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            outcome, detail = cause(str(report.longrepr), crash.message if crash is not None else None)
            if self.results.get(nodeid, {}).get("outcome") in (None, "passed", "skipped"):
                self.results[nodeid] = {"outcome": outcome, "detail": detail}
        elif report.when == "call":
            self.results.setdefault(nodeid, {"outcome": "passed", "detail": ""})
