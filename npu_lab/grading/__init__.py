"""Grading: exercises with checks, learner progress, and exercise-notebook generation.

* :func:`check` grades answers in the calling notebook;
* :func:`progress` shows which exercises pass and the concept checklists;
* :func:`checklist` shows one chapter's checklist as tick boxes;
* :func:`exercise` and :func:`chapter` declare exercises (see :mod:`npu_lab.exercises`);
* ``python -m npu_lab.grading.notebooks`` writes ``exercises/`` from ``solutions/``.
"""

from .check import check, grade
from .progress import Progress, checklist, progress
from .registry import CHAPTERS, EXERCISES, Chapter, Exercise, chapter, exercise, get, load_all
from .result import NOT_STARTED, NOT_YET, PASSED, CaseResult, CheckResult, Summary
from .tester import Tester

__all__ = [
    "CHAPTERS", "EXERCISES", "NOT_STARTED", "NOT_YET", "PASSED", "CaseResult", "Chapter", "CheckResult",
    "Exercise", "Progress", "Summary", "Tester", "chapter", "check", "checklist", "exercise", "get", "grade",
    "load_all", "progress",
]
