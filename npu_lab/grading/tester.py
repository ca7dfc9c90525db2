"""The object a grader writes its cases to.

Every call into the learner's code goes through :meth:`Tester.call`, which
copies the arguments (so neither the learner's objects nor the check's
reference data are changed behind anyone's back), applies the time limit,
captures what the code prints, puts back any global state it changed (see
:mod:`~npu_lab.grading.isolation`) and turns exceptions into a trimmed
message. :meth:`Tester.case` compares a value with the expected one, after
making it plain data (:mod:`~npu_lab.grading.values`); :meth:`Tester.expect`
records a structural fact (a node is gone, a kernel ran, a backend compiled
once).

Once a call has run out of time or was interrupted, the check stops: the next
:meth:`Tester.call` ends the grader (:class:`StopCheck`), and the result says
which cases did not run.

With ``NPU_LAB_CHECK_FIRST_FAILURE=1`` a check stops at its first failing case (the test suite sets it when
it grades its collections of wrong answers: one failing case with its hint is all such a test asserts).
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable
from typing import Any

import torch

from . import guard, isolation, values
from .result import CaseResult


class NotStarted(Exception):
    """The learner's answer is still the exercise stub."""


class StopCheck(BaseException):  # noqa: N818 - a signal to the grader, not an error
    """Ends a grader early: an earlier call ran out of time or was interrupted."""


#: The message of the ``raise NotImplementedError(...)`` that exercise stubs contain.
STUB_MESSAGE = "YOUR CODE HERE"


def is_stub_error(exc: BaseException | None) -> bool:
    """Whether ``exc`` is an exercise stub's ``NotImplementedError`` (not, say, a missing kernel).

    Follows wrapped exceptions too: a stub pass raising inside ``torch.compile``
    arrives as Dynamo's ``BackendCompilerFailed``.
    """
    for e in guard.causes(exc):
        if issubclass(type(e), NotImplementedError):
            text = guard.safe_text(e, str)
            if not text or STUB_MESSAGE in text:
                return True
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
    """A one-line description of a value for the results table (never runs the value's own code)."""
    if values.is_plain_tensor(value):
        text = f"tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device.type})"
        if value.numel() <= 8 and value.device.type in ("cpu", "npu") and not value.is_meta:
            try:
                text = f"tensor({value.detach().cpu().tolist()}, dtype={value.dtype}, device={value.device.type})"
            except Exception:  # noqa: BLE001,S110 - keep the shape-only description
                pass
        return text
    ok, data, _ = values.check_plain(value)
    text = _plain_text(data, limit * 4) if ok else guard.safe_text(value, repr, limit=limit * 4)
    if not ok and not text.startswith("<"):
        text = f"{text} (a {guard.type_name(value)})"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _plain_text(data: Any, limit: int) -> str:
    """``repr`` of plain data, with every tensor in it described by :func:`short` (a tensor's own ``repr``
    runs device kernels, which may compile for seconds under the formatting time limit)."""
    if values.is_plain_tensor(data):
        return short(data, limit)
    if type(data) in (list, tuple, dict):
        parts: list[str] = []
        items = data.items() if type(data) is dict else data
        for item in items:
            if sum(map(len, parts)) > limit:  # the table cuts the text anyway: do not format the rest
                parts.append("...")
                break
            parts.append(f"{_plain_text(item[0], limit)}: {_plain_text(item[1], limit)}" if type(data) is dict
                         else _plain_text(item, limit))
        inner = ", ".join(parts)
        if type(data) is dict:
            return "{" + inner + "}"
        return f"[{inner}]" if type(data) is list else f"({inner}{',' if len(data) == 1 else ''})"
    return guard.safe_text(data, repr, limit=limit)


def _kind(value: Any) -> str:
    return {bool: "a bool", int: "an int", float: "a float", str: "a str", complex: "a complex number",
            bytes: "bytes", type(None): "None"}.get(type(value), f"a {guard.type_name(value)}")


def compare(expected: Any, got: Any, rtol: float = 1e-5, atol: float = 1e-6) -> tuple[bool, str]:
    """Whether ``got`` matches ``expected``; if not, a sentence saying how it differs.

    ``got`` should be plain data (see :func:`~npu_lab.grading.values.plain`); the
    comparison uses only the check's own functions and exact types.
    """
    if got is None and expected is not None:
        return False, "got None (did you forget to `return` the result?)"
    if isinstance(expected, torch.Tensor):
        if not values.is_plain_tensor(got):
            return False, f"expected a torch.Tensor but got {_kind(got)}"
        if got.device.type != expected.device.type:
            return False, f"the tensor is on {got.device.type!r} but should be on {expected.device.type!r}"
        if tuple(got.shape) != tuple(expected.shape):
            return False, f"shape {tuple(got.shape)} but expected {tuple(expected.shape)}"
        if got.dtype != expected.dtype:
            return False, f"dtype {got.dtype} but expected {expected.dtype}"
        with torch._C.DisableTorchFunction():
            e, g = expected.detach().cpu(), got.detach().cpu()
            if e.dtype.is_floating_point or e.dtype.is_complex:
                if values.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True):
                    return True, ""
                diff = (g.double() - e.double()).abs()
                diff = torch.nan_to_num(diff, nan=float("inf"))
                worst = diff.max().item()
                return False, f"values differ: max abs difference {worst:.3g} (tolerance {atol:g} + {rtol:g}*|x|)"
            return (True, "") if values.equal(g, e) else (False, "values differ")
    if type(expected) is float:
        if type(got) not in (int, float):
            return False, f"expected a float but got {_kind(got)}"
        if math.isnan(expected) and math.isnan(got):
            return True, ""
        ok = values.isclose(got, expected, rel_tol=rtol, abs_tol=atol)
        return ok, "" if ok else f"{got!r} is not close to {expected!r}"
    if type(expected) in (bool, int, str, bytes, complex) or expected is None:
        if type(got) is not type(expected):
            return False, f"expected {_kind(expected)} but got {_kind(got)}"
        return (True, "") if got == expected else (False, "")
    if type(expected) in (list, tuple):
        if type(got) not in (list, tuple):
            return False, f"expected a {type(expected).__name__} but got {_kind(got)}"
        if len(got) != len(expected):
            return False, f"{len(got)} items but expected {len(expected)}"
        for i, (e, g) in enumerate(zip(expected, got)):
            ok, why = compare(e, g, rtol, atol)
            if not ok:
                return False, f"item {i}: {why}" if why else f"item {i} differs"
        return True, ""
    if type(expected) is dict:
        if type(got) is not dict:
            return False, f"expected a dict but got {_kind(got)}"
        if set(got) != set(expected):
            missing, extra = sorted(map(str, set(expected) - set(got))), sorted(map(str, set(got) - set(expected)))
            return False, "; ".join(p for p in (f"missing keys {missing}" if missing else "",
                                                f"unexpected keys {extra}" if extra else "") if p)
        for k in expected:
            ok, why = compare(expected[k], got[k], rtol, atol)
            if not ok:
                return False, f"[{k!r}]: {why}" if why else f"[{k!r}] differs"
        return True, ""
    if type(expected) is torch.Size or type(expected) in (set, frozenset, torch.dtype, torch.device):
        return (True, "") if type(got) is type(expected) and got == expected else (False, "")
    # anything else the grader expects is compared by the grader's own object, never by the learner's
    try:
        ok = bool(expected == got)
    except Exception:  # noqa: BLE001
        ok = False
    return ok, ""


def _may_run_answer(fn: Any, args: tuple, kwargs: dict) -> bool:
    """Whether a call could run the learner's (compiled) code, to be probed first.

    Not a function of the check's own that calls nothing and is given nothing callable (``lambda o=out: o``
    hands back a value it already has); anything else may (``F.elu(x)`` runs the learner's registered kernel).
    """
    import types

    given = (*args, *kwargs.values())
    if guard.calls_compiled_code(fn) or any(guard.calls_compiled_code(a) for a in given):
        return True
    if not (isinstance(fn, types.FunctionType) and str(fn.__module__).startswith("npu_lab.")):
        return True  # the learner's function, or an object of theirs: it may run anything
    if fn.__code__.co_names:
        return True  # it calls or looks something up: a registered kernel of the learner's may run
    cells = []
    for cell in fn.__closure__ or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:
            pass
    return any(callable(v) for v in (*given, *(fn.__defaults__ or ()), *cells))


def _truth(value: Any) -> bool:
    """``bool(value)`` for the check's own values; a learner's object (whose ``__bool__`` could say
    anything) counts as false."""
    if type(value) is bool:
        return value
    if type(value) in (int, float, str, list, tuple, dict, set, type(None)) or type(value).__module__ == "numpy":
        try:
            return bool(value)
        except Exception:  # noqa: BLE001 - e.g. a NumPy array of several values
            return False
    return False


def first_failure_only() -> bool:
    """``NPU_LAB_CHECK_FIRST_FAILURE=1``: checks stop at their first failing case (see the module's docstring)."""
    return os.environ.get("NPU_LAB_CHECK_FIRST_FAILURE") == "1"


class Tester:
    """Collects the cases of one check (see :mod:`npu_lab.grading.registry`).

    ``probe``: run every call in a forked child process first (see :func:`guard.probe`),
    for answers that call compiled code, which no signal can stop. ``keep_registrations``:
    kernels the learner's code registers stay until the end of the check (otherwise each
    call's registrations are removed when it returns).
    """

    __test__ = False  # not a pytest test class

    def __init__(self, timeout: float = guard.DEFAULT_TIMEOUT, probe: bool = False,
                 keep_registrations: bool = False):
        self.timeout = timeout
        self.probe = probe
        self.keep_registrations = keep_registrations
        self.cases: list[CaseResult] = []
        self.timed_out = False
        self.interrupted = False
        self.changed: list[str] = []  # global state the learner's code changed (and the check put back)
        self.libraries: list[Any] = []  # libraries the learner's code made and the check keeps until its end
        self._last_error = ""
        self._first_failure = first_failure_only()

    def _add(self, result: CaseResult) -> None:
        self.cases.append(result)
        if self._first_failure and not result.passed:
            raise StopCheck()

    @property
    def stopped(self) -> bool:
        return self.timed_out or self.interrupted

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> guard.Outcome:
        """Call the learner's ``fn`` with copies of the arguments, under the time limit.

        A stub that still raises ``NotImplementedError`` stops the check with
        "not started"; other exceptions come back in the outcome as a trimmed message.
        After a call that ran out of time or was interrupted, the next call ends the check.
        """
        if self.stopped:
            raise StopCheck()
        args, kwargs = clone(args), clone(kwargs)
        state = isolation.snapshot(per_call=True)
        outcome = None
        watch = isolation.LibraryWatch()
        try:
            if self.probe and _may_run_answer(fn, args, kwargs):
                outcome = guard.probe(lambda: fn(*args, **kwargs), self.timeout)
            if outcome is None:
                with watch:
                    outcome = guard.call(lambda: fn(*args, **kwargs), self.timeout)
        finally:
            changed = state.restore()
            if self.keep_registrations:
                self.libraries += watch.alive()  # destroyed when the check ends (if the check has not)
            else:
                changed += [f"a kernel registration ({k})" for k in isolation.destroy_libraries(watch.alive())]
            for what in changed:
                if what not in self.changed:
                    self.changed.append(what)
        self.timed_out = self.timed_out or outcome.timed_out
        self.interrupted = self.interrupted or outcome.interrupted
        if outcome.error and outcome.error == self._last_error:
            outcome.error = "the same error as the case above"
        elif outcome.error:
            self._last_error = outcome.error
        if is_stub_error(outcome.exception):
            raise NotStarted(guard.safe_text(getattr(fn, "__name__", "your function"), str))
        return outcome

    def case(self, description: str, fn: Callable[..., Any], *args: Any, expected: Any, hint: str = "",
             hidden: bool = False, rtol: float = 1e-5, atol: float = 1e-6,
             check: Callable[[Any], tuple[bool, str]] | None = None, **kwargs: Any) -> bool:
        """Call ``fn(*args, **kwargs)`` (through :meth:`call`) and compare the result with ``expected``.

        ``fn`` is the learner's function, or a small lambda of the grader that
        drives it. The value is made plain data first (an object of another
        type fails, saying what it is); ``check`` replaces the default
        comparison: it receives the plain value and returns ``(ok, why)``.
        Returns whether the case passed.
        """
        outcome = self.call(fn, *args, **kwargs)
        output = "" if hidden else outcome.output  # a hidden case shows nothing of its run
        if not outcome.ok:
            self._add(CaseResult(description, False, short(expected), "", hint, hidden, outcome.error,
                                         output))
            return False
        ok, value, why_not = values.check_plain(outcome.value)
        if not ok:
            self._add(CaseResult(description, False, short(expected), f"{why_not} (not plain data)", hint,
                                         hidden, output=output))
            return False
        try:
            ok, why = check(value) if check is not None else compare(expected, value, rtol, atol)
        except Exception as exc:  # noqa: BLE001 - a value the comparison cannot handle is a wrong value
            ok, why = False, f"cannot be compared ({guard.type_name(exc)})"
        got = short(value) + (f"  ({why})" if why else "")
        self._add(CaseResult(description, bool(ok), short(expected), got, hint, hidden,
                                     output=output if not ok else ""))
        return bool(ok)

    def expect(self, description: str, ok: bool, *, expected: str = "", got: str = "", hint: str = "",
               hidden: bool = False) -> bool:
        """Record a structural fact about the answer (e.g. "no aten.relu node is left")."""
        ok = _truth(ok)
        self._add(CaseResult(description, ok, expected, got, hint, hidden))
        return ok

    def error(self, description: str, outcome: guard.Outcome, hint: str = "", hidden: bool = False) -> None:
        """Record that calling the learner's code failed, with its trimmed error."""
        self._add(CaseResult(description, False, "", "", hint, hidden, outcome.error,
                                     "" if hidden else outcome.output))
