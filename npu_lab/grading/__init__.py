"""Grading: exercises with checks, learner progress, and exercise-notebook generation.

* :func:`check` grades answers in the calling notebook;
* :func:`progress` shows which exercises pass and the concept checklists;
* :func:`checklist` shows one chapter's checklist as tick boxes;
* :func:`predict` checks a "predict, then run" answer against what the cell measured (:mod:`.predictions`);
* :func:`exercise` and :func:`chapter` declare exercises (see :mod:`npu_lab.exercises`);
* ``python -m npu_lab.grading.notebooks`` writes ``exercises/`` from ``solutions/``.

A check can be trusted whatever the answer does (see the modules for how):

* :mod:`.guard` - every call of the learner's code ends within its time limit (a timeout that is
  not an ``Exception`` and comes back, a watchdog, a child process for compiled code), its output
  is captured and capped, and whatever it raises comes back as a trimmed message;
* :mod:`.forked` - code that runs on threads of its own (chapter 9's ranks) runs in a forked copy of
  the process, killed with every thread when it runs out of time; only plain data comes back;
* :mod:`.isolation` - global state the learner's code changes is put back after each call and
  each check (dtype, device, grad mode, seeds, flags, modes, patched modules, kernel registrations);
* :mod:`.values` - values are compared as plain data by the check's own functions, never by the
  learner's objects;
* :mod:`.references` - expected values from formulas the learner cannot change;
* :func:`check` never raises: it always returns a result that renders, failures first.
"""

from .check import check, grade
from .predictions import QUESTIONS, Question, predict, question
from .progress import Progress, checklist, progress
from .registry import CHAPTERS, EXERCISES, Chapter, Exercise, chapter, exercise, get, load_all
from .result import NOT_STARTED, NOT_YET, PASSED, CaseResult, CheckResult, Summary
from .tester import Tester

__all__ = [
    "CHAPTERS", "EXERCISES", "NOT_STARTED", "NOT_YET", "PASSED", "CaseResult", "Chapter", "CheckResult",
    "Exercise", "Progress", "Summary", "Tester", "chapter", "check", "checklist", "exercise", "get", "grade",
    "load_all", "predict", "progress", "question", "QUESTIONS", "Question",
]
