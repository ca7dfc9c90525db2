"""Every exercise: its solution passes, its blank stub fails helpfully, plausible wrong answers fail."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from npu_lab.grading import EXERCISES, NOT_STARTED, NOT_YET, grade, load_all

from .notebook_exec import ROOT, exercise_ids, run_cells

SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))

#: For every exercise, at least one plausible wrong answer (code that defines the answer names).
WRONG: dict[str, list[str]] = {
    "lab.contiguous_strides": [
        "def contiguous_strides(shape):\n    return tuple(1 for _ in shape)",
        # forgets that PyTorch treats size-0 dimensions as size 1
        "def contiguous_strides(shape):\n    out, step = [], 1\n    for s in reversed(shape):\n"
        "        out.append(step)\n        step *= s\n    return tuple(reversed(out))",
    ],
    "lab.block_bytes": [
        "def block_bytes(shape, dtype):\n    n = 1\n    for s in shape:\n        n *= s\n"
        "    return n * torch.empty((), dtype=dtype).element_size()",  # forgets the rounding
        "def block_bytes(shape, dtype):\n    n = 1\n    for s in shape:\n        n *= s\n"
        "    return (n * 4 + 511) // 512 * 512",  # assumes float32
    ],
    "lab.leaky_relu_kernel": [
        "@numba.njit\ndef leaky_relu_kernel(x, out, slope):\n    for i in range(x.size):\n"
        "        out[i] = max(x[i], 0.0)",  # plain ReLU
        "def leaky_relu_kernel(x, out, slope):\n    out[:] = np.where(x > 0, x, slope * x)",  # not numba
    ],
    "lab.square_to_mul": [
        "def square_to_mul(gm):\n    for n in list(gm.graph.nodes):\n"
        "        if n.target == torch.ops.aten.pow.Tensor_Scalar:\n"
        "            with gm.graph.inserting_before(n):\n"
        "                m = gm.graph.call_function(torch.ops.aten.mul.Tensor, (n.args[0], n.args[0]))\n"
        "            n.replace_all_uses_with(m)\n            gm.graph.erase_node(n)\n"
        "    gm.recompile()\n    return gm",  # rewrites every exponent, also 3
        "def square_to_mul(gm):\n    for n in list(gm.graph.nodes):\n"
        "        if n.target == torch.ops.aten.pow.Tensor_Scalar and n.args[1] == 2:\n"
        "            n.target = torch.ops.aten.mul.Tensor\n            n.args = (n.args[0], n.args[0])\n"
        "    return gm",  # forgets recompile
    ],
}


@pytest.fixture(scope="module", params=SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def notebook(request) -> tuple[Path, dict, dict]:
    sol = request.param
    return sol, run_cells(sol), run_cells(ROOT / "exercises" / sol.name)


def _answers(ex, ns):
    return {n: ns.get(n) for n in ex.names}


def test_solution_passes_stub_is_not_started_wrong_answers_fail(notebook):
    path, solved, blank = notebook
    ids = exercise_ids(path)
    assert ids, f"{path.name} checks no exercise"
    for eid in ids:
        ex = EXERCISES[eid]
        r = grade(ex, _answers(ex, solved))
        assert r.passed, f"{eid}: the solution does not pass:\n{r}"
        r = grade(ex, _answers(ex, blank))
        assert r.status == NOT_STARTED, f"{eid}: the stub should be 'not started':\n{r}"
        assert "YOUR CODE HERE" in r.message or "define" in r.message
        assert eid in WRONG, f"{eid}: add plausible wrong answers to WRONG in this file"
        for code in WRONG[eid]:
            ns = dict(solved)
            exec(textwrap.dedent(code), ns)  # noqa: S102
            r = grade(ex, _answers(ex, ns))
            assert r.status == NOT_YET, f"{eid}: this wrong answer passed:\n{code}"
            assert any(c.hint or c.error for c in r.cases if not c.passed), f"{eid}: failure without a hint"


def test_every_exercise_is_in_exactly_one_solution_notebook():
    load_all()
    seen: dict[str, str] = {}
    for path in SOLUTIONS:
        for eid in exercise_ids(path):
            assert eid not in seen, f"{eid} is checked in {seen[eid]} and {path.name}"
            seen[eid] = path.name
    registered = {e for e in EXERCISES if not e.startswith("test")}
    assert registered <= set(seen), f"exercises without a notebook: {sorted(registered - set(seen))}"
