"""``npu_lab.check()``: grade the learner's answers.

A check never raises and never prints a traceback of its own: whatever the
answer does (raise anything, loop forever, return an object that cannot be
printed, change global state), :func:`grade` returns a :class:`CheckResult`
that renders, and the process is left as the check found it.

Time limits: each call into the learner's code has the exercise's own limit
(``NPU_LAB_CHECK_TIMEOUT`` seconds overrides it for every exercise), and the
whole check has a limit too (``NPU_LAB_CHECK_DEADLINE``; by default ten
times the call limit, at least a minute), for code of the check that looks at
the learner's objects.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from . import guard, isolation
from . import progress as _progress
from .registry import EXERCISES, Exercise, get, load_all
from .result import NOT_STARTED, NOT_YET, PASSED, CaseResult, CheckResult, Summary
from .tester import NotStarted, StopCheck, Tester, is_stub_error


def _caller_namespace() -> dict[str, Any]:
    """The globals (and locals) of the first frame outside npu_lab: the learner's notebook."""
    frame = inspect.currentframe()
    try:
        while frame is not None and str(frame.f_globals.get("__name__", "")).startswith("npu_lab"):
            frame = frame.f_back
        if frame is None:
            return {}
        ns = dict(frame.f_globals)
        if frame.f_locals is not frame.f_globals:
            ns.update(frame.f_locals)
        return ns
    finally:
        del frame


def _missing(ex: Exercise, answers: dict[str, Any]) -> list[str]:
    return [n for n in ex.names if answers.get(n) is None]


def _env_seconds(name: str) -> float | None:
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return None
    return value if value > 0 else None


def timeout_override() -> float | None:
    """``NPU_LAB_CHECK_TIMEOUT`` (seconds), when set to a positive number: the limit for every exercise."""
    return _env_seconds("NPU_LAB_CHECK_TIMEOUT")


def call_timeout(ex: Exercise) -> float:
    """Seconds each call of the learner's code may take in this exercise's check."""
    return timeout_override() or ex.timeout


def check_deadline(ex: Exercise) -> float:
    """Seconds the whole check of this exercise may take."""
    return _env_seconds("NPU_LAB_CHECK_DEADLINE") or max(60.0, 10 * ex.timeout)


_CONTAINERS = (dict, list, tuple, set, frozenset, str, bytes, int, float, complex)


def _not_plain_answer(name: str, value: Any) -> str:
    """Why an answer that should be data (a dict, a list...) is not a plain one ("" if it is fine)."""
    cls = type(value)
    for base in _CONTAINERS:
        if isinstance(value, base) and cls is not base and cls is not bool:
            from .values import _TRUSTED_DICTS, _is_namedtuple_class

            if cls in _TRUSTED_DICTS or (base is tuple and _is_namedtuple_class(cls)):
                return ""
            return (f"`{name}` is a {guard.type_name(value)}, a subclass of {base.__name__}: define it as a plain "
                    f"{base.__name__} (the check does not run methods of your own classes on data answers)")
    return ""


def grade(ex: Exercise, answers: dict[str, Any], *, timeout: float | None = None,
          deadline: float | None = None) -> CheckResult:
    """Grade one exercise with the given answers (a name -> value mapping).

    ``timeout``: seconds per call of the learner's code (default: :func:`call_timeout`);
    ``deadline``: seconds for the whole check (default: :func:`check_deadline`).
    Never raises.
    """
    result = CheckResult(guard.safe_text(ex.id, str), guard.safe_text(ex.title, str))
    try:
        _grade(ex, answers, result, timeout, deadline)
    except BaseException as exc:  # noqa: BLE001 - the last line of defence: a check always returns
        result.status = NOT_YET
        result.message = ("the check stopped with an error of its own; if your answer looks right, please report "
                          f"it: {guard.trim(exc).splitlines()[-1]}")
    return result


def _grade(ex: Exercise, answers: dict[str, Any], result: CheckResult, timeout: float | None,
           deadline: float | None) -> None:
    missing = _missing(ex, answers)
    if missing:
        result.status = NOT_STARTED
        names = ", ".join(f"`{n}`" for n in missing)
        result.message = (f"not started: define {names} (write your answer where the notebook says "
                          f"# YOUR CODE HERE and run that cell).")
        return
    answers = {n: answers[n] for n in ex.names}
    for name, value in answers.items():
        why = _not_plain_answer(name, value)
        if why:
            result.cases = [CaseResult(f"`{name}` is plain data", False, got=guard.type_name(value), hint=why)]
            result.status = NOT_YET
            return
    tampered = isolation.reset_grading_code()  # a patch of the grading code made before the check
    if tampered:
        result.notes.append("the grading code had been changed in this notebook; the check used its own: "
                            + "; ".join(tampered[:3]))
    seconds = timeout if timeout is not None else call_timeout(ex)
    total = deadline if deadline is not None else check_deadline(ex)
    tester = Tester(seconds, probe=any(guard.calls_compiled_code(v) for v in answers.values()),
                    keep_registrations=ex.keeps_registrations)
    state = isolation.snapshot()
    limiter = guard.time_limit(total)
    stub = None
    try:
        with limiter:
            ex.grader(tester, **answers)
    except NotStarted as exc:
        stub = exc
    except StopCheck:
        pass
    except BaseException as exc:  # noqa: BLE001 - the learner's objects can make the check's own code fail
        if is_stub_error(exc):
            stub = exc
        elif isinstance(exc, guard.CheckTimeout):
            result.message = (f"the check ran out of time ({total:g} s in all) while it looked at what your code "
                              "returned; the cases after that were not run")
        elif isinstance(exc, KeyboardInterrupt):
            result.message = "the check was interrupted; the cases after that were not run"
        elif isinstance(exc, SystemExit):
            result.message = (f"your code called exit() or sys.exit() ({guard.trim(exc).splitlines()[-1]}): a check "
                              "runs your code and looks at what it returns, so return instead; the cases after that "
                              "were not run")
        else:
            result.message = ("the check stopped while it looked at what your code returned: "
                              f"{guard.trim(exc).splitlines()[-1]} (the cases after that were not run; if your "
                              "answer looks right, this may be a bug in the check: please report it)")
    finally:
        changed = state.restore()
        # kernels the learner's code registered and kept alive; never the libraries the check itself made
        # (putting back kernels it took out, as ch7 and ch8 do)
        changed += [f"a kernel registration ({k})" for k in isolation.destroy_libraries(tester.libraries)]
    changes = list(dict.fromkeys(tester.changed + changed))
    if changes:
        result.notes.append("your code changed global state, which the check put back afterwards: "
                            + ", ".join(changes[:6]) + (" ..." if len(changes) > 6 else ""))
    if stub is not None:
        result.status = NOT_STARTED
        result.cases = []
        if isinstance(stub, NotStarted):
            result.message = (f"not started: {stub} still raises NotImplementedError; replace the "
                              "`# YOUR CODE HERE` stub with your code and run the cell again.")
        else:
            result.message = "not started: replace the `# YOUR CODE HERE` stub with your code."
        return
    result.cases = tester.cases
    if tester.timed_out:
        result.message = result.message or (f"your code ran out of time ({seconds:g} s for one call); the check "
                                            "stopped there, and the cases after it were not run")
    elif tester.interrupted:
        result.message = result.message or "interrupted: the check stopped there; the cases after it were not run"
    if not result.cases and not result.message:
        result.message = "the check recorded no cases (a bug in the exercise: please report it)"
    ok = bool(result.cases) and all(c.passed for c in result.cases) and not result.message
    result.status = PASSED if ok else NOT_YET


def _record(result: CheckResult) -> None:
    try:
        _progress.record(result)
    except Exception:  # noqa: BLE001,S110 - progress is a convenience: never worth a failed check
        pass


def _unknown(exercise_id: Any, error: BaseException) -> CheckResult:
    result = CheckResult(guard.safe_text(exercise_id, str), "unknown exercise", status=NOT_STARTED)
    result.message = guard.safe_text(error, str).strip("'\"")
    return result


def check(exercise_id: str | None = None, /, *, chapter: str | None = None, **answers: Any) -> CheckResult | Summary:
    """Grade an exercise and say what passed, what did not, and a hint for each failure.

    ``npu_lab.check("lab.contiguous_strides")`` grades one exercise, reading your
    answer from the notebook by the names the exercise declares (or pass them:
    ``check("lab.contiguous_strides", contiguous_strides=my_fn)``).

    ``npu_lab.check()`` grades every exercise whose answers are defined in the
    notebook so far (optionally only those of ``chapter``) and shows a summary.
    Results are saved for :func:`npu_lab.progress`.
    """
    load_all()
    namespace = _caller_namespace()
    if exercise_id is not None:
        try:
            ex = get(exercise_id)
        except KeyError as exc:
            return _unknown(exercise_id, exc)
        merged = {n: namespace.get(n) for n in ex.names}
        merged.update({k: v for k, v in answers.items() if k in ex.names})
        result = grade(ex, merged)
        _record(result)
        return result
    results = []
    for ex in list(EXERCISES.values()):
        if chapter is not None and ex.chapter != chapter:
            continue
        if not ex.names and chapter is None:
            continue  # a device exercise (the bring-up track) grades the device: only when its chapter is named
        merged = {n: answers.get(n, namespace.get(n)) for n in ex.names}
        if _missing(ex, merged):
            continue
        result = grade(ex, merged)
        _record(result)
        results.append(result)
    return Summary(results)


__all__ = ["check", "grade", "NOT_STARTED", "NOT_YET", "PASSED"]
