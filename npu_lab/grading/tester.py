"""The object a grader writes its cases to.

Every call into the learner's code goes through :meth:`Tester.call`, which
copies the arguments (so neither the learner's objects nor the check's
reference data are changed behind anyone's back), applies the time limit and
turns exceptions into a trimmed message. :meth:`Tester.case` compares a value
with the expected one; :meth:`Tester.expect` records a structural fact (a node
is gone, a kernel ran, a backend compiled once).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch

from . import guard
from .result import CaseResult


class NotStarted(Exception):
    """The learner's answer is still the exercise stub."""


#: The message of the ``raise NotImplementedError(...)`` that exercise stubs contain.
STUB_MESSAGE = "YOUR CODE HERE"


def is_stub_error(exc: BaseException | None) -> bool:
    """Whether ``exc`` is an exercise stub's ``NotImplementedError`` (not, say, a missing kernel).

    Follows wrapped exceptions too: a stub pass raising inside ``torch.compile``
    arrives as Dynamo's ``BackendCompilerFailed``.
    """
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, NotImplementedError) and (not str(exc) or STUB_MESSAGE in str(exc)):
            return True
        exc = getattr(exc, "inner_exception", None) or exc.__cause__ or exc.__context__
        seen += 1
    return False


def clone(obj: Any) -> Any:
    """A copy the learner's code may change freely (tensors keep their device)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone().requires_grad_(obj.requires_grad)
    if isinstance(obj, (list, tuple)):
        return type(obj)(clone(o) for o in obj)
    if isinstance(obj, dict):
        return {k: clone(v) for k, v in obj.items()}
    if isinstance(obj, (torch.nn.Module, torch.fx.Graph)):
        return copy.deepcopy(obj)
    return obj


def short(value: Any, limit: int = 160) -> str:
    """A one-line description of a value for the results table."""
    if isinstance(value, torch.Tensor):
        text = f"tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device.type})"
        if value.numel() <= 8 and value.device.type in ("cpu", "npu"):
            text = f"tensor({value.detach().cpu().tolist()}, dtype={value.dtype}, device={value.device.type})"
        return text
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def compare(expected: Any, got: Any, rtol: float = 1e-5, atol: float = 1e-6) -> tuple[bool, str]:
    """Whether ``got`` matches ``expected``; if not, a sentence saying how it differs."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return False, f"expected a torch.Tensor but got {type(got).__name__}" + (
                " (did you forget to `return` it?)" if got is None else "")
        if got.device.type != expected.device.type:
            return False, f"the tensor is on {got.device.type!r} but should be on {expected.device.type!r}"
        if tuple(got.shape) != tuple(expected.shape):
            return False, f"shape {tuple(got.shape)} but expected {tuple(expected.shape)}"
        if got.dtype != expected.dtype:
            return False, f"dtype {got.dtype} but expected {expected.dtype}"
        e, g = expected.detach().cpu(), got.detach().cpu()
        if e.dtype.is_floating_point or e.dtype.is_complex:
            if torch.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True):
                return True, ""
            diff = (g.double() - e.double()).abs()
            diff = torch.nan_to_num(diff, nan=float("inf"))
            worst = diff.max().item()
            return False, f"values differ: max abs difference {worst:.3g} (tolerance {atol:g} + {rtol:g}*|x|)"
        return (True, "") if torch.equal(g, e) else (False, "values differ")
    if isinstance(expected, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        ok = math.isclose(got, expected, rel_tol=rtol, abs_tol=atol)
        return ok, "" if ok else f"{got!r} is not close to {expected!r}"
    if isinstance(expected, (list, tuple)) and not isinstance(expected, torch.Size):
        if not isinstance(got, (list, tuple)):
            return False, f"expected a {type(expected).__name__} but got {type(got).__name__}" + (
                " (did you forget to `return` it?)" if got is None else "")
        if len(got) != len(expected):
            return False, f"{len(got)} items but expected {len(expected)}"
        for i, (e, g) in enumerate(zip(expected, got)):
            ok, why = compare(e, g, rtol, atol)
            if not ok:
                return False, f"item {i}: {why}" if why else f"item {i} differs"
        return True, ""
    if got is None and expected is not None:
        return False, "got None (did you forget to `return` the result?)"
    try:
        ok = bool(got == expected)
    except Exception:  # noqa: BLE001 - e.g. comparing a tensor to an int
        ok = False
    return ok, "" if ok else ""


class Tester:
    """Collects the cases of one check (see :mod:`npu_lab.grading.registry`)."""

    __test__ = False  # not a pytest test class

    def __init__(self, timeout: float = guard.DEFAULT_TIMEOUT):
        self.timeout = timeout
        self.cases: list[CaseResult] = []
        self.timed_out = False
        self._last_error = ""

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> guard.Outcome:
        """Call the learner's ``fn`` with copies of the arguments, under the time limit.

        A stub that still raises ``NotImplementedError`` stops the check with
        "not started"; other exceptions come back in the outcome as a trimmed message.
        """
        if self.timed_out:
            return guard.Outcome(error="not run: an earlier case already ran out of time",
                                 exception=guard.CheckTimeout())
        args, kwargs = clone(args), clone(kwargs)
        outcome = guard.call(lambda: fn(*args, **kwargs), self.timeout)
        if isinstance(outcome.exception, guard.CheckTimeout):
            self.timed_out = True
        if outcome.error and outcome.error == self._last_error:
            outcome.error = "the same error as the case above"
        elif outcome.error:
            self._last_error = outcome.error
        if is_stub_error(outcome.exception):
            raise NotStarted(getattr(fn, "__name__", "your function"))
        return outcome

    def case(self, description: str, fn: Callable[..., Any], *args: Any, expected: Any, hint: str = "",
             hidden: bool = False, rtol: float = 1e-5, atol: float = 1e-6,
             check: Callable[[Any], tuple[bool, str]] | None = None, **kwargs: Any) -> bool:
        """Call ``fn(*args, **kwargs)`` (through :meth:`call`) and compare the result with ``expected``.

        ``fn`` is the learner's function, or a small lambda of the grader that
        drives it. ``check`` replaces the default comparison: it receives the
        value and returns ``(ok, why)``. Returns whether the case passed.
        """
        outcome = self.call(fn, *args, **kwargs)
        if not outcome.ok:
            self.cases.append(CaseResult(description, False, short(expected), "", hint, hidden, outcome.error))
            return False
        ok, why = check(outcome.value) if check is not None else compare(expected, outcome.value, rtol, atol)
        got = short(outcome.value) + (f"  ({why})" if why else "")
        self.cases.append(CaseResult(description, ok, short(expected), got, hint, hidden))
        return ok

    def expect(self, description: str, ok: bool, *, expected: str = "", got: str = "", hint: str = "",
               hidden: bool = False) -> bool:
        """Record a structural fact about the answer (e.g. "no aten.relu node is left")."""
        self.cases.append(CaseResult(description, bool(ok), expected, got, hint, hidden))
        return bool(ok)

    def error(self, description: str, outcome: guard.Outcome, hint: str = "", hidden: bool = False) -> None:
        """Record that calling the learner's code failed, with its trimmed error."""
        self.cases.append(CaseResult(description, False, "", "", hint, hidden, outcome.error))
