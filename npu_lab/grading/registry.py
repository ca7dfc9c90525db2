"""Where exercises and chapters are declared.

An exercise is a grader function registered under an id such as
``"ch3.fuse_add_relu"``. It declares the names of the learner's answers (the
functions or values the learner defines in the notebook); ``npu_lab.check``
finds them in the calling notebook and passes them to the grader together with
a :class:`~npu_lab.grading.tester.Tester` that records every case::

    @exercise("lab.contiguous_strides", "Strides of a contiguous tensor", names=["contiguous_strides"])
    def _(t, contiguous_strides):
        for shape in [(2, 3, 4), (5,), ()]:
            t.case(f"contiguous_strides({shape})", lambda: contiguous_strides(shape),
                   expected=torch.empty(shape).stride(), hint="the last dimension has stride 1")

Chapters carry a title and a concept checklist shown by ``npu_lab.progress()``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field

from .guard import DEFAULT_TIMEOUT


@dataclass(frozen=True)
class Exercise:
    """A graded exercise: its id, title, the answer names it reads, and its grader."""

    id: str
    title: str
    names: tuple[str, ...]
    grader: Callable[..., None]
    timeout: float = DEFAULT_TIMEOUT
    #: The answer registers kernels that must stay while the check runs (``ch7.register_kernel``). Otherwise a
    #: kernel a call of the learner's code registers is removed when that call returns, so it cannot change
    #: what the check computes next.
    keeps_registrations: bool = False

    @property
    def chapter(self) -> str:
        return self.id.split(".", 1)[0]


@dataclass
class Chapter:
    """A chapter's title and the concepts a learner ticks off when done."""

    id: str
    title: str
    concepts: list[str] = field(default_factory=list)

    def exercises(self) -> list[Exercise]:
        load_all()
        return [e for e in EXERCISES.values() if e.chapter == self.id]


EXERCISES: dict[str, Exercise] = {}
CHAPTERS: dict[str, Chapter] = {}


#: Exercises whose answers register kernels the check then uses, besides those declaring
#: ``keeps_registrations=True`` themselves (ch7.register_kernel does).
KEEPS_REGISTRATIONS: set[str] = set()


def exercise(exercise_id: str, title: str, names: list[str] | tuple[str, ...], timeout: float = DEFAULT_TIMEOUT,
             keeps_registrations: bool = False) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register the decorated function as the grader of ``exercise_id``.

    ``keeps_registrations``: kernels registered by the learner's code stay registered until the
    check ends (for an exercise about registering a kernel); otherwise each is removed as soon as
    the call of the learner's code that registered it returns.
    """
    if "." not in exercise_id:
        raise ValueError(f"exercise ids look like 'chapter.name', got {exercise_id!r}")

    def register(grader: Callable[..., None]) -> Callable[..., None]:
        keeps = keeps_registrations or exercise_id in KEEPS_REGISTRATIONS
        EXERCISES[exercise_id] = Exercise(exercise_id, title, tuple(names), grader, timeout, keeps)
        return grader

    return register


def chapter(chapter_id: str, title: str, concepts: list[str]) -> Chapter:
    """Declare a chapter and its concept checklist."""
    CHAPTERS[chapter_id] = Chapter(chapter_id, title, list(concepts))
    return CHAPTERS[chapter_id]


_loaded = False


def load_all() -> None:
    """Import every module of :mod:`npu_lab.exercises` so all exercises are registered."""
    global _loaded
    if _loaded:
        return
    from .. import exercises

    for info in pkgutil.iter_modules(exercises.__path__):
        importlib.import_module(f"{exercises.__name__}.{info.name}")
    _loaded = True


def get(exercise_id: str) -> Exercise:
    """The exercise with this id; an unknown id raises with the closest known ids."""
    load_all()
    if exercise_id in EXERCISES:
        return EXERCISES[exercise_id]
    import difflib

    close = difflib.get_close_matches(exercise_id, EXERCISES, n=3)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    raise KeyError(f"no exercise {exercise_id!r}.{hint} Known chapters: {sorted(CHAPTERS)}")
