"""``npu_lab.check()``: grade the learner's answers."""

from __future__ import annotations

import inspect
from typing import Any

from . import progress as _progress
from .registry import EXERCISES, Exercise, get, load_all
from .result import NOT_STARTED, NOT_YET, PASSED, CheckResult, Summary
from .tester import NotStarted, Tester, is_stub_error


def _caller_namespace() -> dict[str, Any]:
    """The globals (and locals) of the first frame outside npu_lab: the learner's notebook."""
    frame = inspect.currentframe()
    try:
        while frame is not None and frame.f_globals.get("__name__", "").startswith("npu_lab"):
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


def grade(ex: Exercise, answers: dict[str, Any]) -> CheckResult:
    """Grade one exercise with the given answers (a name -> value mapping)."""
    result = CheckResult(ex.id, ex.title)
    missing = _missing(ex, answers)
    if missing:
        result.status = NOT_STARTED
        names = ", ".join(f"`{n}`" for n in missing)
        result.message = (f"not started: define {names} (write your answer where the notebook says "
                          f"# YOUR CODE HERE and run that cell).")
        return result
    tester = Tester(ex.timeout)
    try:
        ex.grader(tester, **{n: answers[n] for n in ex.names})
    except NotStarted as stub:
        result.status = NOT_STARTED
        result.message = (f"not started: {stub} still raises NotImplementedError; replace the "
                          "`# YOUR CODE HERE` stub with your code and run the cell again.")
        return result
    except Exception as exc:  # noqa: BLE001 - a grader bug must not look like the learner's
        if is_stub_error(exc):
            result.status = NOT_STARTED
            result.message = "not started: replace the `# YOUR CODE HERE` stub with your code."
            return result
        raise
    result.cases = tester.cases
    if not result.cases:
        raise RuntimeError(f"the check of {ex.id} recorded no cases (a bug in the exercise)")
    result.status = PASSED if all(c.passed for c in result.cases) else NOT_YET
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
        ex = get(exercise_id)
        merged = {n: namespace.get(n) for n in ex.names}
        merged.update(answers)
        result = grade(ex, merged)
        _progress.record(result)
        return result
    results = []
    for ex in EXERCISES.values():
        if chapter is not None and ex.chapter != chapter:
            continue
        merged = {n: answers.get(n, namespace.get(n)) for n in ex.names}
        if _missing(ex, merged):
            continue
        result = grade(ex, merged)
        _progress.record(result)
        results.append(result)
    return Summary(results)


__all__ = ["check", "grade", "NOT_STARTED", "NOT_YET", "PASSED"]
