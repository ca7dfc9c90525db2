"""A learner's progress: which exercises pass, and which concepts they have ticked off.

Stored as a small JSON file, ``progress.json`` in ``$NPU_LAB_HOME`` (default
``~/.npu_lab``). Test runs point ``NPU_LAB_HOME`` at a temporary directory so
they never touch a learner's file.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .predictions import chapter_questions
from .registry import CHAPTERS, load_all
from .result import NOT_STARTED, PASSED, CheckResult


def home() -> Path:
    """The directory holding the progress file."""
    return Path(os.environ.get("NPU_LAB_HOME", Path.home() / ".npu_lab"))


def path() -> Path:
    return home() / "progress.json"


def load() -> dict[str, Any]:
    """The stored progress (empty if there is none or the file is unreadable)."""
    try:
        data = json.loads(path().read_text())
    except (OSError, ValueError):
        data = {}
    data.setdefault("exercises", {})
    data.setdefault("concepts", {})
    data.setdefault("predictions", {})
    return data


def _save(data: dict[str, Any]) -> None:
    p = path()
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(p)


def record(result: CheckResult) -> None:
    """Store the outcome of a check (the newest status, and whether it ever passed)."""
    if result.status == NOT_STARTED:
        return
    data = load()
    entry = data["exercises"].setdefault(result.exercise_id, {"ever_passed": False})
    entry["status"] = result.status
    entry["ever_passed"] = entry["ever_passed"] or result.passed
    entry["when"] = _dt.datetime.now().isoformat(timespec="seconds")
    _save(data)


def record_prediction(question_id: str, right: bool) -> None:
    """Store a "predict, then run" answer: whether the first prediction was right (a second try, made after the
    run showed the answer, does not change that), and how many were made."""
    data = load()
    entry = data["predictions"].setdefault(question_id, {"first_right": right, "tries": 0})
    entry["right"] = right
    entry["tries"] += 1
    _save(data)


def tick(chapter: str, concept: str | int, done: bool = True) -> None:
    """Mark a concept of ``chapter``'s checklist as understood (or not)."""
    load_all()
    concepts = CHAPTERS[chapter].concepts
    name = concepts[concept] if isinstance(concept, int) else concept
    if name not in concepts:
        raise KeyError(f"{chapter!r} has no concept {name!r}; its checklist: {concepts}")
    data = load()
    ticked = set(data["concepts"].get(chapter, []))
    (ticked.add if done else ticked.discard)(name)
    data["concepts"][chapter] = sorted(ticked)
    _save(data)


@dataclass
class ChapterProgress:
    chapter: str
    title: str
    exercises: list[tuple[str, str, str]]  # (id, title, status)
    concepts: list[tuple[str, bool]]
    #: (question id, made, right at the first try): a "predict, then run" question of the chapter
    predictions: list[tuple[str, bool, bool]] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(s == PASSED for _, _, s in self.exercises)

    def predictions_line(self) -> str:
        """'3/4 predictions made, 2 right', or '' for a chapter without questions."""
        if not self.predictions:
            return ""
        made = sum(m for _, m, _ in self.predictions)
        right = sum(r for _, _, r in self.predictions)
        return f"{made}/{len(self.predictions)} predictions made, {right} right at the first try"


class Progress:
    """Every chapter's exercises and checklist; renders as a table in Jupyter."""

    def __init__(self, chapters: list[ChapterProgress]):
        self.chapters = chapters

    def __getitem__(self, chapter: str) -> ChapterProgress:
        for c in self.chapters:
            if c.chapter == chapter:
                return c
        raise KeyError(chapter)

    def __str__(self) -> str:
        lines = []
        for c in self.chapters:
            made = f", {c.predictions_line()}" if c.predictions else ""
            lines.append(f"{c.chapter} {c.title}: {c.passed}/{len(c.exercises)} exercises passed, "
                         f"{sum(d for _, d in c.concepts)}/{len(c.concepts)} concepts ticked{made}")
            lines += [f"  [{'x' if s == PASSED else ' '}] {i} {t} ({s})" for i, t, s in c.exercises]
            lines += [f"  ({'x' if d else ' '}) {name}" for name, d in c.concepts]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        rows = ["<table><tr><th>chapter</th><th>exercises</th><th>concepts</th></tr>"]
        for c in self.chapters:
            ex = "<br>".join(f"{'&#10004;' if s == PASSED else '&#9675;'} <code>{html.escape(i)}</code> "
                             f"{html.escape(t)} <i>({html.escape(s)})</i>" for i, t, s in c.exercises)
            co = "<br>".join(f"{'&#9745;' if d else '&#9744;'} {html.escape(n)}" for n, d in c.concepts)
            rows.append(f"<tr><td style='vertical-align:top'><b>{html.escape(c.chapter)}</b> "
                        f"{html.escape(c.title)}<br>{c.passed}/{len(c.exercises)} passed"
                        + (f"<br>{html.escape(c.predictions_line())}" if c.predictions else "") + "</td>"
                        f"<td style='text-align:left'>{ex}</td><td style='text-align:left'>{co}</td></tr>")
        rows.append("</table>")
        return "".join(rows)


def _order(chapter_id: str) -> tuple[int, str]:
    """Reading order: getting started, architecture, chapters 0-7 (5a, the primer on modes and fake tensors, before
    Dynamo), the kernel puzzles, chapters 8a, 8b and 9, the bring-up track, then the rest."""
    fixed = (["lab", "arch", "ch0", "ch1", "ch2", "ch3", "ch4", "ch5a", "ch5", "ch6", "ch7", "p1", "ch8a", "ch8b",
              "ch9"] + [f"b{i}" for i in range(0, 9)])
    return (fixed.index(chapter_id), "") if chapter_id in fixed else (len(fixed), chapter_id)


def progress(chapter: str | None = None) -> Progress:
    """Which exercises pass and which concepts are ticked, per chapter.

    Pass a chapter id (``"lab"``, ``"ch3"``...) to see only that chapter.
    """
    load_all()
    data = load()
    chapters = []
    for cid, ch in sorted(CHAPTERS.items(), key=lambda kv: _order(kv[0])):
        if chapter is not None and cid != chapter:
            continue
        exercises = [(e.id, e.title, data["exercises"].get(e.id, {}).get("status", NOT_STARTED))
                     for e in ch.exercises()]
        ticked = set(data["concepts"].get(cid, []))
        answered = data["predictions"]
        predictions = [(q.id, q.id in answered, bool(answered.get(q.id, {}).get("first_right")))
                       for q in chapter_questions(cid)]
        chapters.append(ChapterProgress(cid, ch.title, exercises, [(c, c in ticked) for c in ch.concepts],
                                        predictions))
    if chapter is not None and not chapters:
        raise KeyError(f"no chapter {chapter!r}; chapters: {sorted(CHAPTERS)}")
    return Progress(chapters)


class Checklist:
    """A chapter's concept checklist: tick boxes in Jupyter, saved to the progress file."""

    def __init__(self, chapter: str):
        load_all()
        if chapter not in CHAPTERS:
            raise KeyError(f"no chapter {chapter!r}; chapters: {sorted(CHAPTERS)}")
        self.chapter = chapter

    @property
    def items(self) -> list[tuple[str, bool]]:
        ticked = set(load()["concepts"].get(self.chapter, []))
        return [(c, c in ticked) for c in CHAPTERS[self.chapter].concepts]

    def tick(self, concept: str | int, done: bool = True) -> None:
        tick(self.chapter, concept, done)

    def __str__(self) -> str:
        return "\n".join(f"[{'x' if d else ' '}] {c}" for c, d in self.items)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return "<br>".join(f"{'&#9745;' if d else '&#9744;'} {html.escape(c)}" for c, d in self.items)

    def widget(self):
        """Check boxes that save each change (needs ipywidgets)."""
        import ipywidgets as w

        boxes = []
        for concept, done in self.items:
            box = w.Checkbox(value=done, description=concept, indent=False,
                             layout=w.Layout(width="auto"))
            box.observe(lambda change, c=concept: self.tick(c, change["new"]), names="value")
            boxes.append(box)
        title = w.HTML(f"<b>Concept checklist: {html.escape(CHAPTERS[self.chapter].title)}</b>")
        return w.VBox([title, *boxes])

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        try:
            display(self.widget())
        except ImportError:
            display(HTML(self._repr_html_()))  # no ipywidgets: a static list


def checklist(chapter: str) -> Checklist:
    """The concept checklist of ``chapter``, as tick boxes that feed :func:`progress`."""
    return Checklist(chapter)


def reset() -> None:
    """Forget all stored progress."""
    try:
        path().unlink()
    except FileNotFoundError:
        pass
