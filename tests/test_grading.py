"""The grading framework itself: results, robustness, namespaces, progress and notebook generation."""

from __future__ import annotations

import torch

import npu_lab
from npu_lab.grading import NOT_STARTED, NOT_YET, PASSED, grade, progress
from npu_lab.grading.notebooks import out_of_date, strip_solutions
from npu_lab.grading.progress import reset as reset_progress
from npu_lab.grading.registry import Exercise, exercise, get
from npu_lab.grading.tester import Tester, compare


def _ex(grader, names=("f",), timeout=1.0) -> Exercise:
    return Exercise("test.x", "a test exercise", tuple(names), grader, timeout)


def _double_grader(t: Tester, f) -> None:
    x = torch.arange(4.0)
    t.case("f(arange(4))", f, x, expected=x * 2, hint="multiply by two")
    t.case("f(ones(3))", f, torch.ones(3), expected=torch.full((3,), 2.0), hint="SECRET-HINT", hidden=True)


def test_passing_answer_says_public_and_hidden_passed():
    r = grade(_ex(_double_grader), {"f": lambda x: x * 2})
    assert r.status == PASSED and r.passed
    assert "public and hidden checks passed" in str(r)
    assert "passed" in r._repr_html_()


def test_hidden_case_shows_hint_but_never_data():
    def f(x):
        return x * 2 if x.numel() == 4 else x  # passes the public case only

    r = grade(_ex(_double_grader), {"f": f})
    assert r.status == NOT_YET
    text, page = str(r), r._repr_html_()
    assert "1/1 public checks passed, 0/1 hidden checks passed" in text
    assert "SECRET-HINT" in text and "SECRET-HINT" in page
    hidden = r.hidden[0]
    assert "hidden case" in "\n".join(hidden.lines())
    assert "ones" not in text and "2.0, 2.0" not in text and "ones" not in page


def test_public_failure_shows_expected_and_yours():
    r = grade(_ex(_double_grader), {"f": lambda x: x * 3})
    case = r.public[0]
    assert not case.passed and "max abs difference" in case.got and "multiply by two" in str(r)


def test_missing_answer_and_stub_are_not_started():
    r = grade(_ex(_double_grader), {"f": None})
    assert r.status == NOT_STARTED and "`f`" in r.message

    def f(x):
        # YOUR CODE HERE
        raise NotImplementedError("YOUR CODE HERE")

    r = grade(_ex(_double_grader), {"f": f})
    assert r.status == NOT_STARTED and "NotImplementedError" in r.message


def test_a_real_not_implemented_error_is_not_mistaken_for_a_stub():
    def f(x):
        raise NotImplementedError("Could not run 'aten::foo' with arguments from the 'npu' backend")

    r = grade(_ex(_double_grader), {"f": f})
    assert r.status == NOT_YET and "aten::foo" in r.public[0].error


def test_exceptions_are_trimmed_to_the_learners_frames():
    def f(x):
        return torch.mm(x, x)  # 1-D: raises inside torch

    r = grade(_ex(_double_grader), {"f": f})
    err = r.public[0].error
    assert "in f" in err and "torch.mm(x, x)" in err and "RuntimeError" in err
    assert "npu_lab/grading" not in err and "tester.py" not in err


def test_an_infinite_loop_times_out_once():
    def f(x):
        while True:
            pass

    import time

    start = time.perf_counter()
    r = grade(_ex(_double_grader, timeout=0.5), {"f": f})
    assert time.perf_counter() - start < 3
    assert r.status == NOT_YET and "CheckTimeout" in r.public[0].error
    assert not r.hidden  # the check stopped there: not run again after the first timeout
    assert "not run" in r.message and "ran out of time" in r.message


def test_wrong_return_type_is_explained():
    def f(x):
        x * 2  # forgot return

    r = grade(_ex(_double_grader), {"f": f})
    assert "did you forget to `return`" in r.public[0].got
    ok, why = compare(torch.ones(2), [1.0, 1.0])
    assert not ok and "expected a torch.Tensor but got a list" in why
    ok, why = compare(torch.ones(2), torch.ones(3))
    assert not ok and "shape" in why
    ok, why = compare(torch.ones(2), torch.ones(2, dtype=torch.float64))
    assert not ok and "dtype" in why


def test_learner_inputs_are_not_mutated():
    def f(x):
        x.mul_(2)  # in place: changes only the check's copy
        return x

    seen = {}

    def grader(t: Tester, f) -> None:
        x = torch.arange(3.0)
        seen["x"] = x
        t.case("f", f, x, expected=torch.arange(3.0) * 2)

    r = grade(_ex(grader), {"f": f})
    assert r.passed and torch.equal(seen["x"], torch.arange(3.0))


def test_check_reads_answers_from_the_callers_namespace():
    @exercise("testns.double", "double it", names=["double_it"])
    def _grader(t: Tester, double_it) -> None:
        t.case("double_it(3)", double_it, 3, expected=6)

    r = npu_lab.check("testns.double")
    assert r.status == NOT_STARTED

    def double_it(v):
        return 2 * v

    r = npu_lab.check("testns.double")  # found in this function's locals
    assert r.passed
    r = npu_lab.check("testns.double", double_it=lambda v: v + 2)
    assert r.status == NOT_YET
    summary = npu_lab.check(chapter="testns")
    assert [x.exercise_id for x in summary.results] == ["testns.double"] and summary.passed


def test_unknown_exercise_suggests_close_ids():
    import pytest

    with pytest.raises(KeyError, match="lab.contiguous_strides"):
        get("lab.contiguous_stride")


def test_progress_records_results_and_checklist(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_LAB_HOME", str(tmp_path))
    p = progress("lab")
    assert all(s == NOT_STARTED for _, _, s in p["lab"].exercises)

    def contiguous_strides(shape):
        out, step = [], 1
        for s in reversed(shape):
            out.append(step)
            step *= max(s, 1)
        return tuple(reversed(out))

    assert npu_lab.check("lab.contiguous_strides", contiguous_strides=contiguous_strides).passed
    p = progress("lab")
    assert dict((i, s) for i, _, s in p["lab"].exercises)["lab.contiguous_strides"] == PASSED
    assert (tmp_path / "progress.json").exists()
    cl = npu_lab.checklist("lab")
    cl.tick(0)
    assert progress("lab")["lab"].concepts[0][1] is True
    widget = cl.widget()
    widget.children[2].value = True  # the learner ticks the second concept
    assert progress("lab")["lab"].concepts[1][1] is True
    assert "1/4 exercises passed" in str(progress("lab"))
    reset_progress()
    assert not (tmp_path / "progress.json").exists()


def test_strip_solutions_markers():
    src = "def f(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n\n### BEGIN SOLUTION\ny = 3\n" \
          "### STUB y = None\n### END SOLUTION\nprint(1)"
    out = strip_solutions(src)
    assert out == ('def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError("YOUR CODE HERE")\n\n'
                   "# YOUR CODE HERE\ny = None\nprint(1)")
    import pytest

    with pytest.raises(ValueError, match="without"):
        strip_solutions("### BEGIN SOLUTION\nx = 1")


def test_exercise_notebooks_are_in_sync_with_solutions():
    assert out_of_date() == [], "run: python -m npu_lab.grading.notebooks"


def test_structure_helpers():
    import torch._dynamo
    from torch.fx.experimental.proxy_tensor import make_fx

    from npu_lab.grading.structure import CompileCounter, count_calls, graph_breaks, kernels_run

    gm = make_fx(lambda x: torch.relu(x + 1) + x)(torch.randn(3))
    aten = torch.ops.aten
    assert count_calls(gm, aten.add.Tensor) == 2 and count_calls(gm, aten.relu) == 1
    assert count_calls(gm, "relu") == 1 and count_calls(gm, aten.mul.Tensor) == 0

    x = torch.randn(3, device="npu")
    ran = kernels_run(lambda a: a + a, x)
    assert ran and ran[0][0] == "aten::add.Tensor" and ran[0][1]

    counter = CompileCounter()
    torch._dynamo.reset()
    f = torch.compile(lambda a: a.sin() + 1, backend=counter)
    f(torch.randn(4))
    f(torch.randn(4))
    assert counter.frames == 1
    torch._dynamo.reset()

    def breaks(a):
        a = a + 1
        print("side effect")  # a graph break
        return a * 2

    assert len(graph_breaks(breaks, torch.randn(2))) == 1
    assert graph_breaks(lambda a: a * 2, torch.randn(2)) == []


def test_values_are_made_plain_and_compared_by_the_check():
    import collections

    import pytest

    from npu_lab.grading.values import NotPlain, plain

    assert plain(collections.Counter(a=2)) == {"a": 2} and type(plain(collections.Counter(a=2))) is dict
    point = collections.namedtuple("Point", "x y")
    assert type(plain(point(1, 2))) is tuple
    import numpy as np

    assert type(plain(np.float32(1.5))) is float and type(plain(np.bool_(True))) is bool

    class Liar(int):
        def __eq__(self, other):
            return True

    class Sub(torch.Tensor):
        pass

    for bad in (Liar(3), [Liar(3)], {"k": Liar(3)}, torch.zeros(2).as_subclass(Sub), object()):
        with pytest.raises(NotPlain):
            plain(bad)
    ok, why = compare(3, True)
    assert not ok and "an int" in why and "a bool" in why


def test_global_state_is_put_back():
    import math

    from npu_lab.grading import isolation

    snap = isolation.snapshot()
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)
    math.tau = 6
    changed = snap.restore()
    assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled() and math.tau > 6.28
    assert any("default dtype" in c for c in changed) and "math.tau" in changed


def test_references_are_pure_numpy():
    from npu_lab.grading import references

    x = torch.linspace(-4, 4, 9)
    assert torch.allclose(references.expected(references.hardswish, x), torch.nn.functional.hardswish(x))
    assert torch.allclose(references.expected(references.elu, x, 0.5), torch.nn.functional.elu(x, 0.5))
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("hardswish", lambda t: t, "CPU")
        assert references.foreign_keys(lib) == ["aten/hardswish/CPU"]
    finally:
        lib._destroy()


def test_numpy_conv_and_batch_norm_references_match_pytorch():
    from npu_lab.grading import references

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 7, 6, generator=g)
    for stride, padding, groups in [(1, 0, 1), (2, 1, 2), (1, 2, 4)]:
        w = torch.randn(8, 4 // groups, 3, 3, generator=g)
        b = torch.randn(8, generator=g)
        want = torch.nn.functional.conv2d(x, w, b, stride=stride, padding=padding, groups=groups)
        got = references.conv2d(references.array(x), references.array(w), references.array(b), stride, padding, groups)
        assert torch.allclose(torch.from_numpy(got).float(), want, atol=1e-4)
    mean, var = torch.randn(4, generator=g), torch.rand(4, generator=g) + 0.5
    weight, bias = torch.randn(4, generator=g), torch.randn(4, generator=g)
    want = torch.nn.functional.batch_norm(x, mean, var, weight, bias, training=False, eps=1e-3)
    got = references.batch_norm(*(references.array(t) for t in (x, mean, var, weight, bias)), 1e-3)
    assert torch.allclose(torch.from_numpy(got).float(), want, atol=1e-5)
    got = references.batch_norm(references.array(x), references.array(mean), references.array(var), None, None, 1e-5)
    want = torch.nn.functional.batch_norm(x, mean, var, training=False)
    assert torch.allclose(torch.from_numpy(got).float(), want, atol=1e-5)


def test_dynamos_own_module_patch_is_not_blamed_on_the_learner():
    from npu_lab.grading import isolation

    snap = isolation.snapshot()
    init = torch.nn.Module.__init__

    def patched_init(self, *args, **kwargs):  # what torch._dynamo.mutation_guard installs on its first compile
        init(self, *args, **kwargs)

    patched_init.__module__ = "torch._dynamo.mutation_guard"
    torch.nn.Module.__init__ = patched_init
    try:
        changed = snap.restore()
        assert not any("Module.__init__" in c for c in changed) and torch.nn.Module.__init__ is patched_init
    finally:
        torch.nn.Module.__init__ = init
    snap = isolation.snapshot()
    torch.nn.Module.__init__ = lambda self, *a, **k: init(self, *a, **k)  # anyone else's patch is undone
    assert "torch.nn.Module.__init__" in snap.restore() and torch.nn.Module.__init__ is init


def test_first_failure_only_stops_a_check_at_its_first_failing_case(monkeypatch):
    calls = []

    def f(x):
        calls.append(x.numel())
        return x * 3

    assert len(grade(_ex(_double_grader), {"f": f}).cases) == 2 and calls == [4, 3]
    monkeypatch.setenv("NPU_LAB_CHECK_FIRST_FAILURE", "1")  # what the suite sets for its wrong answers
    calls.clear()
    r = grade(_ex(_double_grader), {"f": f})
    assert r.status == NOT_YET and [c.passed for c in r.cases] == [False] and calls == [4]
    assert "multiply by two" in str(r)
    assert grade(_ex(_double_grader), {"f": lambda x: x * 2}).status == PASSED  # a right answer runs every case


def test_a_stub_is_told_from_a_kernel_begun():
    from npu_lab.bringup.library import is_stub

    def stub(self, other, *, alpha=1, out):
        """A docstring and comments do not count."""
        # YOUR CODE HERE
        raise NotImplementedError("YOUR CODE HERE")

    def begun(self, other, *, alpha=1, out):
        if alpha == 1:
            out.copy_(self)
        raise NotImplementedError("YOUR CODE HERE")

    def other_message(self):
        raise NotImplementedError("not for float16")

    assert is_stub(stub) and not is_stub(begun) and not is_stub(other_message) and not is_stub(print)
