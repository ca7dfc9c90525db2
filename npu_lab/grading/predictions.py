"""Predict, then run: questions a chapter asks before a cell shows the answer.

A chapter declares its questions next to its exercises (``npu_lab/exercises/<chapter>.py``)::

    question("ch1.graphs", "How many graphs does Dynamo compile for calls with 4, 8 and 16 rows?",
             why="the second shape makes the size dynamic: one graph for 4 rows, one for every other size")

and a chapter cell puts the learner's prediction beside the real run::

    prediction = ...          # your prediction here, then run the cell
    graphs = ...              # the mechanism, run for real
    npu_lab.predict("ch1.graphs", prediction, len(graphs))

:func:`predict` compares the prediction with what the run *measured* (never a stored answer), shows the
verdict at once (a wrong prediction: what the run gave and the one-line why), and records it for
:func:`npu_lab.progress`. The why lives in the chapter module, not in the cell, so reading the cell before
running it gives nothing away. A prediction left as ``...`` records nothing and says how to make one.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Exact answers of these kinds are compared as they are; numbers with a tolerance.
_NUMBER = (int, float)


@dataclass(frozen=True)
class Question:
    """A "predict, then run" question of a chapter."""

    id: str
    text: str
    why: str
    #: Relative tolerance for a numeric answer (0: exact).
    rtol: float = 0.0
    #: The answers that make sense (shown when a prediction is none of them); empty: any value.
    choices: tuple[Any, ...] = ()

    @property
    def chapter(self) -> str:
        return self.id.split(".", 1)[0]


QUESTIONS: dict[str, Question] = {}


def question(question_id: str, text: str, why: str, rtol: float = 0.0, choices: tuple[Any, ...] = ()) -> Question:
    """Declare a chapter's question: its text, the one-line why a wrong prediction shows, how answers compare."""
    if "." not in question_id:
        raise ValueError(f"question ids look like 'chapter.name', got {question_id!r}")
    q = QUESTIONS[question_id] = Question(question_id, text, why, float(rtol), tuple(choices))
    return q


def _plain(value: Any) -> Any:
    """A value as plain data to compare: tensors and numpy values as numbers or lists, sets sorted."""
    if hasattr(value, "tolist") and callable(value.tolist):
        value = value.tolist()
    if isinstance(value, bool):
        return value
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v) for v in value), key=repr)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, str):
        return " ".join(value.strip().lower().split())
    return value


def same(prediction: Any, actual: Any, rtol: float = 0.0) -> bool:
    """Whether a prediction matches the measured value (numbers within ``rtol``, text ignoring case and spaces)."""
    p, a = _plain(prediction), _plain(actual)
    if isinstance(p, bool) or isinstance(a, bool):
        return type(p) is type(a) and p == a  # True is not the answer 1
    if isinstance(p, _NUMBER) and isinstance(a, _NUMBER) and not isinstance(p, bool) and not isinstance(a, bool):
        return math.isclose(p, a, rel_tol=rtol, abs_tol=0.0) if rtol else p == a
    if isinstance(p, list) and isinstance(a, list):
        return len(p) == len(a) and all(same(x, y, rtol) for x, y in zip(p, a))
    return p == a


@dataclass
class Verdict:
    """What :func:`predict` found; renders in a notebook."""

    question: Question
    prediction: Any
    actual: Any
    right: bool | None  #: None: no prediction was made

    def _lines(self) -> tuple[str, str]:
        q = self.question
        if self.right is None:
            return ("no prediction", f"Write your prediction in place of ... and run the cell again. {q.text}")
        if self.right:
            return ("right", f"{self.actual!r}. {q.why}")
        return ("not quite", f"you predicted {self.prediction!r}; the run gave {self.actual!r}. Why: {q.why}")

    def __str__(self) -> str:
        mark, text = self._lines()
        return f"[{mark}] {self.question.id}: {text}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        mark, text = self._lines()
        colour = {"right": "#1a7f37", "not quite": "#b35900"}.get(mark, "#57606a")
        return (f"<div style=\"border-left:4px solid {colour};padding:4px 10px;margin:4px 0\">"
                f"<b style=\"color:{colour}\">{html.escape(mark)}</b> <code>{html.escape(self.question.id)}</code> "
                f"{html.escape(text)}</div>")


def get(question_id: str) -> Question:
    """The question with this id (an unknown id raises, naming the chapter's questions)."""
    from .registry import load_all

    load_all()
    if question_id not in QUESTIONS:
        chapter = question_id.split(".", 1)[0]
        known = sorted(q for q in QUESTIONS if q.startswith(chapter + "."))
        raise KeyError(f"no question {question_id!r}; {chapter}'s questions: {known}")
    return QUESTIONS[question_id]


def predict(question_id: str, prediction: Any, actual: Any,
            compare: Callable[[Any, Any], bool] | None = None) -> Verdict:
    """Check your prediction against what the cell measured, show why if it differs, and record it.

    ``prediction`` is what you wrote before running the cell (``...`` if you have not predicted yet);
    ``actual`` is what the run produced. Numbers compare within the question's tolerance, text ignoring case
    and extra spaces, lists element by element. The verdict is stored for ``npu_lab.progress()``.
    """
    from .progress import record_prediction

    q = get(question_id)
    if prediction is Ellipsis:
        return Verdict(q, prediction, actual, None)
    if q.choices and not any(same(prediction, c, q.rtol) for c in q.choices):
        verdict = Verdict(q, prediction, actual, False)
    else:
        verdict = Verdict(q, prediction, actual, bool((compare or (lambda p, a: same(p, a, q.rtol)))(prediction,
                                                                                                      actual)))
    record_prediction(q.id, verdict.right is True)
    return verdict


def chapter_questions(chapter: str) -> list[Question]:
    """A chapter's questions, in the order they were declared."""
    from .registry import load_all

    load_all()
    return [q for q in QUESTIONS.values() if q.chapter == chapter]
