"""Predict, then run: the verdict compares with what the run measured, and progress() counts the predictions."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import torch

import npu_lab
from npu_lab.grading import predictions
from npu_lab.grading.predictions import question, same
from npu_lab.grading.progress import load as load_progress


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_LAB_HOME", str(tmp_path))
    added = []

    def declare(qid: str, **kw):
        added.append(qid)
        return question(qid, kw.pop("text", "How many?"), kw.pop("why", "because."), **kw)

    yield declare
    for qid in added:
        predictions.QUESTIONS.pop(qid, None)


def test_numbers_text_lists_and_tensors_compare_as_plain_values():
    assert same(2, 2) and not same(2, 3) and not same(True, 1)
    assert same(0.30000001, 0.3, rtol=1e-3) and not same(0.31, 0.3, rtol=1e-3)
    assert same("  Two Graphs ", "two graphs") and not same("two", "three")
    assert same([1, 2], (1, 2)) and not same([1, 2], [1, 2, 3])
    assert same({"b", "a"}, ["a", "b"])
    assert same(torch.tensor([1.0, 2.0]), [1.0, 2.0])


def test_a_prediction_is_checked_against_the_run_and_recorded(home):
    home("lab.t_count", why="one per shape")
    v = npu_lab.predict("lab.t_count", ..., 2)
    assert v.right is None and "prediction in place of ..." in str(v)
    assert "lab.t_count" not in load_progress()["predictions"]  # nothing made, nothing recorded

    v = npu_lab.predict("lab.t_count", 3, 2)
    assert v.right is False and "you predicted 3; the run gave 2. Why: one per shape" in str(v)
    assert "not quite" in v._repr_html_()
    v = npu_lab.predict("lab.t_count", 2, 2)  # a second try after the answer was shown
    assert v.right is True
    stored = load_progress()["predictions"]["lab.t_count"]
    assert stored == {"first_right": False, "right": True, "tries": 2}
    line = npu_lab.progress("lab")["lab"].predictions_line()
    assert "predictions made, 0 right at the first try" in line


def test_a_choice_outside_the_choices_is_wrong_and_a_custom_comparison_is_used(home):
    home("lab.t_unit", choices=("vector", "matrix"))
    assert npu_lab.predict("lab.t_unit", "cube", "cube").right is False  # not a choice the question offers
    assert npu_lab.predict("lab.t_unit", "Matrix", "matrix").right is True
    home("lab.t_faster")
    assert npu_lab.predict("lab.t_faster", 2.0, 2.4, compare=lambda p, a: abs(p - a) < 0.5).right is True


def test_an_unknown_question_names_the_chapters_questions(home):
    home("lab.t_known")
    with pytest.raises(KeyError, match="lab.t_known"):
        npu_lab.predict("lab.t_unknwn", 1, 1)


CHAPTER_NOTEBOOKS = sorted(p for p in (Path(__file__).resolve().parents[1] / "chapters").glob("*.ipynb"))
_CALL = re.compile(r"""npu_lab\.predict\(\s*["']([\w.]+)["']""")


def _predict_cells(path: Path) -> list[tuple[str, dict]]:
    nb = json.loads(path.read_text())
    cells = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        cells += [(qid, cell) for qid in _CALL.findall(source)]
    return cells


@pytest.mark.parametrize("path", CHAPTER_NOTEBOOKS, ids=[p.stem for p in CHAPTER_NOTEBOOKS])
def test_every_chapter_asks_three_to_five_declared_questions_answered_by_its_cells(path):
    cells = _predict_cells(path)
    ids = [qid for qid, _ in cells]
    assert 3 <= len(ids) <= 5, f"{path.name} asks {len(ids)} 'predict, then run' questions"
    assert len(set(ids)) == len(ids), f"{path.name} asks a question twice: {ids}"
    for qid, cell in cells:
        q = predictions.get(qid)  # declared beside the chapter's exercises (an unknown id raises)
        source = "".join(cell["source"])
        first = next(line for line in source.splitlines() if line.strip() and not line.startswith("#"))
        assert first.replace(" ", "").startswith("prediction=..."), f"{qid}: the cell starts with {first!r}"
        last = ast.parse(source).body[-1]  # the verdict shows only if the call is the cell's last expression
        assert isinstance(last, ast.Expr) and ast.unparse(last.value).startswith(f"npu_lab.predict('{qid}'"), (
            f"{qid}: the cell's last statement is {ast.unparse(last)[:60]!r}, so the learner never sees the verdict")
        shown = "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                        for o in cell.get("outputs", []))
        assert f"[no prediction] {qid}" in shown, f"{qid}: the committed output is not the unanswered verdict"
        assert q.why and q.text


def test_every_declared_question_is_asked_by_a_chapter():
    asked = {qid for p in CHAPTER_NOTEBOOKS for qid, _ in _predict_cells(p)}
    predictions.get(next(iter(asked)))  # loads every chapter's module
    declared = {qid for qid in predictions.QUESTIONS if not qid.startswith("lab.t_")}
    assert declared - asked == set(), "declared questions no chapter asks"
