"""A ten-week adaptation plan whose weeks are checked by measurements, not by the calendar.

Each week of :data:`ROADMAP` names the work and the check that turns it green: the
device registration (asked of PyTorch directly) or an item of
:func:`npu_lab.readiness`'s checklist. :func:`roadmap` evaluates the plan for one
measured :class:`~npu_lab.adaptation.readiness.Readiness`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .readiness import BARE_PERF_ITEM, PERF_ITEM

#: (weeks, the work, the readiness item that shows it done, or a special check name)
ROADMAP: tuple[tuple[str, str, str], ...] = (
    ("1", "set up; register the device (runtime: allocator, guard, hooks)", "device registered"),
    ("2-3", "kernels for the operators the target models reach", "operators covered"),
    ("4", "test every kernel against the CPU", "results match the CPU"),
    ("4", "run PyTorch's OpInfo samples on the device", "native operators in the OpInfo conformance suite"),
    ("5-6", "a torch.compile backend", "fusion enabled in the compiled graph"),
    ("7", "fusion passes: fewer launches, less traffic", "fusion enabled in the compiled graph"),
    ("8", "measure and tune against a reference", PERF_ITEM),
    ("9", "train real models end to end", "results match the CPU"),
    ("10", "documentation and release", ""),
)


@dataclass
class Week:
    """One line of the plan and whether its check passed."""

    weeks: str
    work: str
    check: str
    status: str  # "done" | "to do" | "not measured"
    evidence: str


def _device_registered() -> tuple[bool, str]:
    name = torch._C._get_privateuse1_backend_name()
    ok = name != "privateuseone" and hasattr(torch, name) and getattr(torch, name).is_available()
    acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return ok, f"PrivateUse1 is named {name!r}; torch.accelerator: {acc}, {torch.accelerator.device_count()} devices"


def roadmap(ready: Any) -> list[Week]:
    """Evaluate :data:`ROADMAP` against ``ready`` (what ``npu_lab.readiness(model, x)`` returned).

    A week is "done" when its check passed, "to do" when it failed, and "not measured" when
    nothing in the lab can check it (writing the documentation).
    """
    items = {i.name: i for i in getattr(ready, "items", ())}
    if not items:
        raise TypeError(f"roadmap() needs a Readiness with items, got {type(ready).__name__}")
    weeks = []
    for when, work, check in ROADMAP:
        if check == "device registered":
            ok, evidence = _device_registered()
            status = "done" if ok else "to do"
        elif not check:
            status, evidence = "not measured", "no check in the lab"
        elif check in items or (check == PERF_ITEM and BARE_PERF_ITEM in items):
            if check not in items:  # a bare device measures your matrix product instead
                check = BARE_PERF_ITEM
            status, evidence = items[check].status, items[check].detail
        else:
            status, evidence = "not measured", "readiness() ran without this item"
        weeks.append(Week(when, work, check, status, evidence))
    return weeks


def roadmap_table(weeks: list[Week], evidence: bool = False, width: int = 70) -> str:
    """The evaluated plan as text: a box per week, the work, and its check (or, with ``evidence``, what was measured).

    ``[x]`` done, ``[ ]`` to do, ``[-]`` nothing in the lab measures it. Evidence may hold wall
    times (the speed item), so it is off by default.
    """
    marks = {"done": "[x]", "to do": "[ ]", "not measured": "[-]"}
    lines = []
    for w in weeks:
        tail = w.evidence if evidence else (f"checked by: {w.check}" if w.check else "(no check)")
        if len(tail) > width:
            tail = tail[:width - 3] + "..."
        lines.append(f"{marks[w.status]} week {w.weeks:<4} {w.work:<62} {tail}")
    return "\n".join(lines)
