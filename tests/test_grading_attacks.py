"""Attacks on every exercise's check, one family of answers per class of defect (issue 23).

The plausible wrong answers of ``tests/wrong/`` are mistakes; these are answers built to break the
grading itself, generated for every exercise of the lab's chapters from the exercise's answer names
(no notebook runs, so they stay fast):

1. timeouts that would not end: loops that swallow ``Exception`` or everything, that ignore, block
   or replace SIGALRM or cancel the timer, a sleep, an ``@numba.njit`` loop no signal can stop;
2. answers that make a check raise: exceptions whose ``__str__`` raises or never returns, objects
   whose ``__repr__`` raises, ``KeyboardInterrupt``, ``SystemExit``, a lying ``__class__``...;
3. state leaks: default dtype and device, grad mode, seeds, backends flags, the CPU fallback, NumPy
   print options, warnings filters, signal handlers, modes and lazy mode left on, patched modules...;
4. references computed through the learner's code: kernels registered for the CPU, patched
   comparison functions;
5. values compared by the learner's objects: ``__eq__`` always true, int/str/float/tuple/dict
   subclasses, a tensor subclass whose ``__torch_function__`` makes ``allclose`` true;
7. correct alternative answers pass;
8. long results: failures first, passing cases counted, printed output captured and capped.

Rules the exercises state (class 6) are attacked by the wrong answers in ``tests/wrong/``.

By default each exercise meets a rotating share of each family (every member still meets several
exercises, and the whole family meets one cheap exercise), to keep this file under a minute;
``NPU_LAB_ATTACKS=full`` runs every member against every exercise.
"""

from __future__ import annotations

import io
import logging
import math
import mmap
import os
import signal
import sys
import time
import warnings
from collections import Counter, namedtuple
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import pytest
import torch
from torch.nn import functional as F

import npu_lab
import npu_lab.lazy
from npu_lab.grading import EXERCISES, NOT_STARTED, NOT_YET, PASSED, CheckResult, grade, guard, isolation, load_all
from npu_lab.grading import tester as tester_module

load_all()

CHAPTERS = ("lab", "arch", "ch0", "ch1", "ch2", "ch3", "ch4", "ch5a", "ch5", "ch6", "ch7", "ch8a", "ch8b", "ch9", "p1")
IDS = sorted(e for e in EXERCISES if e.split(".", 1)[0] in CHAPTERS)
FULL = os.environ.get("NPU_LAB_ATTACKS", "") == "full"
#: Seconds each call of an attacking answer may take (the checks' own limits are 5 to 120 s).
TIMEOUT = 0.15
#: Seconds a whole attacked check may take (a backstop: none should come near it).
DEADLINE = 60.0

#: Answers that are data or classes, not functions: (exercise, name) -> kind.
KINDS = {("ch0.who_captures", "captures"): "dict", ("ch4.count_graphs", "graphs"): "dict",
         ("ch9.grad_buckets", "GradBuckets"): "object",
         ("ch3.shape_interpreter", "ShapeInterpreter"): "class",
         ("lab.leaky_relu_kernel", "leaky_relu_kernel"): "numba", ("ch7.dispatch_mode", "StepLog"): "mode",
         ("arch.custom_function", "SlopedSwish"): "class", ("ch4.step_closures", "StepClosures"): "class"}


def _data_keys(eid: str) -> list[str]:
    from npu_lab.exercises import ch0, ch4

    return {"ch0.who_captures": list(ch0.SNIPPETS), "ch4.count_graphs": list(ch4.SNIPPETS)}.get(eid, [])


def _share(family: dict[str, Any], eid: str, per_exercise: int = 2) -> list[str]:
    """The members of ``family`` this exercise meets: all of them with NPU_LAB_ATTACKS=full, else a rotating share."""
    names = list(family)
    if FULL:
        return names
    start = IDS.index(eid) if eid in IDS else 0
    return [names[(start * per_exercise + k) % len(names)] for k in range(min(per_exercise, len(names)))]


def _attack_params(family: dict[str, Any], per_exercise: int = 2) -> list[Any]:
    return [pytest.param(eid, member, id=f"{eid}-{member}") for eid in IDS for member in _share(family, eid,
                                                                                                 per_exercise)]


class _Poisoned(dict):
    """A dict whose every method runs the attack (the check must never call them)."""

    def __init__(self, act: Callable[[], Any]) -> None:
        super().__init__()
        self._act = act

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        return self._act()

    __getitem__ = get = items = keys = values = __iter__ = __len__ = __contains__ = __eq__ = __bool__ = _run


def _attack_mode(act: Callable[[], Any], ops: Callable[[], Any] | None = None) -> type:
    """A TorchDispatchMode class that does ``act()`` on every ATen call (or, given ``ops``, passes the calls
    through and holds ``ops()`` as its log and its byte count)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    def init(self):
        TorchDispatchMode.__init__(self)
        if ops is not None:
            self.ops, self.copied = ops(), ops()

    def dispatch(self, func, types, args=(), kwargs=None):
        if ops is not None:
            return func(*args, **(kwargs or {}))
        return act()

    return type("AttackMode", (TorchDispatchMode,), {"__init__": init, "__torch_dispatch__": dispatch})


class Ran:
    """Whether an attacking answer ran, also when it ran in a process the check forked (chapter 9's ranks,
    compiled code): a flag in memory shared with every child."""

    def __init__(self) -> None:
        self._flag = mmap.mmap(-1, 1)

    def append(self, _: Any) -> None:
        self._flag[0] = 1

    def __bool__(self) -> bool:
        return self._flag[0] == 1


def answers(eid: str, act: Callable[[], Any]) -> dict[str, Any]:
    """Every answer of ``eid`` made to do ``act()`` whenever the check uses it."""
    ex = EXERCISES[eid]
    out: dict[str, Any] = {}
    for name in ex.names:
        kind = KINDS.get((eid, name), "function")
        if kind == "list":
            out[name] = []  # compile_log: the compilers are the attacked functions
        elif kind == "dict":
            out[name] = _Poisoned(act)
        elif kind == "class":
            out[name] = type("Attack", (torch.fx.Interpreter,), {"run_node": lambda self, n: act()})
        elif kind == "mode":
            out[name] = _attack_mode(act)
        elif kind == "object":  # a class the check instantiates and whose methods it calls (ch9's GradBuckets)
            out[name] = type("Attack", (), {"__init__": lambda self, *a, **k: (act(), None)[1],
                                            "finish": lambda self: act()})
        else:
            out[name] = lambda *a, **k: act()
    return out


def _render(result: CheckResult) -> str:
    text = str(result)
    page = result._repr_html_()
    assert isinstance(text, str) and isinstance(page, str)
    assert "Traceback (most recent call last)" not in text + page
    return text


# ---------------------------------------------------------------------------------------------
# the state a check must leave as it found it (read independently of npu_lab.grading.isolation)
# ---------------------------------------------------------------------------------------------

def _attacked_registrations() -> frozenset[str]:
    """The live registrations of the operators the attacks register kernels for (PyTorch itself registers
    others on first use, legitimately)."""
    return frozenset(k for k in isolation.live_registrations()
                     if k.split("/")[1] in ("relu", "hardswish", "hardswish.out", "sigmoid", "silu", "mm",
                                            "softplus", "softplus.out", "softplus_backward"))


def world() -> dict[str, Any]:
    from npu_lab.compiler import custom_passes

    return {
        "default dtype": torch.get_default_dtype(), "default device": str(torch.get_default_device()),
        "grad mode": torch.is_grad_enabled(), "torch rng": torch.get_rng_state(),
        "npu rng": torch.npu.get_rng_state(), "numpy rng": np.random.get_state()[1].copy(),
        "cpu fallback": npu_lab.cpu_fallback_enabled(), "deterministic": torch.are_deterministic_algorithms_enabled(),
        "anomaly": torch.is_anomaly_enabled(), "matmul precision": torch.get_float32_matmul_precision(),
        "threads": torch.get_num_threads(), "mkldnn": torch.backends.mkldnn.enabled,
        "numpy print": np.get_printoptions()["precision"], "torch print": torch._tensor_str.PRINT_OPTS.precision,
        "warnings": list(warnings.filters), "stdout": sys.stdout, "stderr": sys.stderr, "cwd": os.getcwd(),
        "env": dict(os.environ), "SIGINT": signal.getsignal(signal.SIGINT),
        "SIGALRM": signal.getsignal(signal.SIGALRM), "timer": signal.getitimer(signal.ITIMER_REAL),
        "blocked": signal.pthread_sigmask(signal.SIG_BLOCK, []), "function modes": torch._C._len_torch_function_stack(),
        "dispatch modes": torch._C._len_torch_dispatch_stack(), "autocast": torch.is_autocast_enabled("cpu"),
        "lazy": len(npu_lab.lazy.trace._stack), "allclose": torch.allclose, "equal": torch.equal,
        "isclose": math.isclose, "assert_close": torch.testing.assert_close, "pi": math.pi,
        "compare": tester_module.compare, "passes": dict(custom_passes.REGISTERED),
        "recompile limit": torch._dynamo.config.recompile_limit, "recursion": sys.getrecursionlimit(),
        "registrations": _attacked_registrations(), "launch us": npu_lab.cost_model.launch_us,
        "logging": logging.root.manager.disable, "trace": sys.gettrace(), "profile": sys.getprofile(),
        "relu": torch.relu(torch.tensor([-1.0, 2.0])).tolist(),
    }


def assert_same_world(before: dict[str, Any], after: dict[str, Any]) -> None:
    changed = []
    for k, v in before.items():
        w = after[k]
        same = torch.equal(v, w) if isinstance(v, torch.Tensor) else (
            np.array_equal(v, w) if isinstance(v, np.ndarray) else (v is w or v == w))
        if not same:
            changed.append(k)
    assert not changed, f"the check left changed: {changed}"


@pytest.fixture(scope="module", autouse=True)
def _loaded():
    import torch._dynamo  # noqa: F401 - loaded before the first world() so it is part of it

    import npu_lab.compiler  # noqa: F401
    yield


# ---------------------------------------------------------------------------------------------
# correct answers of cheap exercises (the process must still grade them after every attack)
# ---------------------------------------------------------------------------------------------

def good_contiguous_strides(shape):
    out, step = [], 1
    for s in reversed(shape):
        out.append(step)
        step *= max(s, 1)
    return tuple(reversed(out))


def good_contiguity(size, stride):
    if any(s == 0 for s in size):
        return True
    expected = 1
    for s, st in zip(reversed(size), reversed(stride)):
        if s == 1:
            continue
        if st != expected:
            return False
        expected *= s
    return True


GOOD = {"lab.contiguous_strides": {"contiguous_strides": good_contiguous_strides},
        "arch.contiguity": {"is_contiguous_by_strides": good_contiguity}}


def assert_still_grades() -> None:
    for eid, ans in GOOD.items():
        r = grade(EXERCISES[eid], ans)
        assert r.status == PASSED, f"a correct answer no longer passes after the attack:\n{r}"


# ---------------------------------------------------------------------------------------------
# 2. the check never raises, and always renders (first: it also warms every check up)
# ---------------------------------------------------------------------------------------------

class _StrRaises(Exception):
    def __str__(self):
        raise RuntimeError("__str__ fails")

    def __repr__(self):
        raise RuntimeError("__repr__ fails")


class _StrNeverReturns(Exception):
    def __str__(self):
        while True:
            pass


class _StrNotAString(Exception):
    def __str__(self):
        return 42  # type: ignore[return-value]


class _NameRaises(type):
    @property
    def __name__(cls):  # noqa: PLW3201
        raise RuntimeError("no name")


class _Nameless(Exception, metaclass=_NameRaises):
    pass


class _NotAnException(BaseException):
    pass


class _Unprintable:
    def __repr__(self):
        raise RuntimeError("__repr__ fails")

    __str__ = __repr__

    def __eq__(self, other):
        raise RuntimeError("__eq__ fails")

    def __bool__(self):
        raise RuntimeError("__bool__ fails")

    def __len__(self):
        raise RuntimeError("__len__ fails")

    def __iter__(self):
        raise RuntimeError("__iter__ fails")

    def __getattr__(self, name):
        raise RuntimeError(f"no {name}")

    __hash__ = object.__hash__


class _Chameleon:
    """Claims to be a GraphModule (and a tensor, and callable), answers every attribute with itself."""

    @property
    def __class__(self):  # noqa: PLW3201
        return torch.fx.GraphModule

    def __getattr__(self, name):
        return self

    def __call__(self, *args, **kwargs):
        return self

    def __iter__(self):
        raise RuntimeError("not iterable after all")

    def __repr__(self):
        raise RuntimeError("__repr__ fails")


def _raise(exc: BaseException) -> Callable[[], Any]:
    def act():
        raise exc
    return act


def _big_print_then_fail():
    print("x" * 1_000_000)
    raise ValueError("after a megabyte of output")


CRASHES = {"exception whose __str__ raises": _raise(_StrRaises()),
           "exception whose __str__ never returns": _raise(_StrNeverReturns()),
           "exception whose __str__ is not a string": _raise(_StrNotAString()),
           "exception class whose __name__ raises": _raise(_Nameless()),
           "a BaseException that is no Exception": _raise(_NotAnException()),
           "KeyboardInterrupt": _raise(KeyboardInterrupt()), "SystemExit": _raise(SystemExit(3)),
           "returns an unprintable object": lambda: _Unprintable(), "returns a chameleon": lambda: _Chameleon(),
           "prints a megabyte": _big_print_then_fail, "RecursionError": lambda: _recurse(0),
           # these end the process at once: a notebook's kernel would die with no verdict
           "os._exit": lambda: os._exit(3), "os.abort": lambda: os.abort()}


def _recurse(n):
    return _recurse(n + 1)


@pytest.mark.parametrize(("eid", "member"), _attack_params(CRASHES, per_exercise=1))
def test_a_check_returns_a_result_whatever_the_answer_raises_or_returns(eid, member, capsys):
    before = world()
    ran = Ran()
    crash = CRASHES[member]

    def act():
        ran.append(True)
        return crash()

    r = grade(EXERCISES[eid], answers(eid, act), timeout=2.0, deadline=DEADLINE)
    text = _render(r)
    assert r.status in (NOT_YET, NOT_STARTED) and r.status != PASSED
    assert len(text) < 60_000, "a long output must be capped"
    if member == "KeyboardInterrupt" and ran:
        assert "interrupted" in text
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert "x" * 10_000 not in captured.out + captured.err, "the answer's output must be captured"
    assert_same_world(before, world())


@pytest.mark.parametrize("member", list(CRASHES))
def test_every_crash_is_reported_in_one_cheap_exercise(member):
    r = grade(EXERCISES["lab.contiguous_strides"], answers("lab.contiguous_strides", CRASHES[member]), timeout=2.0)
    text = _render(r)
    assert r.status == NOT_YET
    case = r.public[0]
    assert not case.passed and (case.error or case.got)
    if member == "exception whose __str__ raises":
        assert "_StrRaises" in case.error and "its str() raised" in case.error
    if member == "SystemExit":
        assert "exit()" in case.error
    if member in ("os._exit", "os.abort"):
        assert "ProcessExit: your code called os." in case.error and "ends the whole process" in case.error
    if member == "prints a megabyte":
        assert "more characters not shown" in case.output and len(text) < 5_000


def test_check_itself_never_raises_for_an_unknown_id_or_a_broken_progress_file(tmp_path, monkeypatch):
    r = npu_lab.check("lab.contiguous_stride")
    assert r.status == NOT_STARTED and "lab.contiguous_strides" in str(r)
    monkeypatch.setenv("NPU_LAB_HOME", str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("not a directory")
    r = npu_lab.check("lab.contiguous_strides", contiguous_strides=good_contiguous_strides)
    assert r.passed  # the progress file cannot be written; the check does not care


# ---------------------------------------------------------------------------------------------
# 1. timeouts that end
# ---------------------------------------------------------------------------------------------

def _bare_except_loop():
    while True:
        try:
            while True:
                pass
        except BaseException:  # noqa: BLE001 - the attack
            pass


def _swallow_exception():
    while True:
        try:
            sum(range(100))
        except Exception:  # noqa: BLE001,S112 - the attack: the old timeout was an Exception
            continue


def _ignore_alarm():
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    _bare_except_loop()


def _replace_handler():
    signal.signal(signal.SIGALRM, lambda *a: None)
    _bare_except_loop()


def _cancel_timer():
    signal.setitimer(signal.ITIMER_REAL, 0)
    _bare_except_loop()


def _block_alarm():
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
    _bare_except_loop()


def _sleep():
    time.sleep(3600)


def _swallow_and_return():
    try:
        while True:
            pass
    except BaseException:  # noqa: BLE001 - the attack: swallow, then return as if nothing happened
        return None


@numba.njit
def _spin(n):
    s = 0
    while True:
        s += n
    return s


def _numba_loop():
    return _spin(1)


@numba.njit
def _leaky_spin(x, out, slope):
    while True:
        out[0] += slope


TIMEOUTS = {"swallows Exception": _swallow_exception, "bare except": _bare_except_loop,
            "ignores SIGALRM": _ignore_alarm, "replaces the SIGALRM handler": _replace_handler,
            "cancels the timer": _cancel_timer, "blocks SIGALRM": _block_alarm, "sleeps": _sleep,
            "swallows and returns": _swallow_and_return, "numba loop": _numba_loop}

def _raise_value_error():
    raise ValueError("an ordinary wrong answer")


@pytest.mark.parametrize(("eid", "member"), _attack_params(TIMEOUTS, per_exercise=1))
def test_a_check_ends_within_its_limit_and_says_so(eid, member):
    ran = Ran()
    loop = TIMEOUTS[member]

    def act():
        ran.append(True)
        return loop()

    ans = answers(eid, act)
    if KINDS.get((eid, EXERCISES[eid].names[0])) == "numba" and member == "numba loop":
        ans = {"leaky_relu_kernel": _leaky_spin}
        ran.append(True)
    before = world()
    start = time.perf_counter()
    r = grade(EXERCISES[eid], ans, timeout=TIMEOUT, deadline=DEADLINE)
    elapsed = time.perf_counter() - start
    text = _render(r)
    assert r.status != PASSED
    if ran:  # (a check may refuse an answer without running it: a dict subclass, a function not a custom op)
        in_thread = "signal only works in main thread" in text  # chapter 9's ranks are threads: no handlers
        assert in_thread or ("CheckTimeout" in text and "ran longer than" in text), text
    # the checks were warmed up by the tests above: what is left is the check's own work and the time limit
    assert elapsed < TIMEOUT + 2.5, f"{elapsed:.2f} s"
    assert_same_world(before, world())
    assert_still_grades()


@pytest.mark.parametrize("member", list(TIMEOUTS))
def test_every_kind_of_endless_loop_is_stopped_in_one_cheap_exercise(member):
    before = world()
    start = time.perf_counter()
    r = grade(EXERCISES["lab.contiguous_strides"], answers("lab.contiguous_strides", TIMEOUTS[member]),
              timeout=TIMEOUT)
    assert time.perf_counter() - start < TIMEOUT + 1.5
    assert r.status == NOT_YET and "CheckTimeout" in r.public[0].error and "not run" in r.message
    assert len(r.cases) == 1  # the check stops at the first case that ran out of time
    assert_same_world(before, world())
    assert_still_grades()


def test_the_whole_check_has_a_limit_too():
    """Code of the check that looks at a returned object is limited too (here its attribute never returns)."""
    class Endless:
        def __getattr__(self, name):
            while True:
                pass

    def fw(gm, example_inputs):
        return Endless()

    start = time.perf_counter()
    r = grade(EXERCISES["ch6.compiler_pair"], {"fw_compiler": fw, "bw_compiler": fw},
              timeout=5, deadline=1.0)
    assert time.perf_counter() - start < 4
    assert r.status == NOT_YET and _render(r)


def test_the_check_timeout_is_not_an_exception_and_comes_back():
    assert not issubclass(guard.CheckTimeout, Exception) and issubclass(guard.CheckTimeout, BaseException)
    seen = []

    def stubborn():
        for _ in range(3):  # swallows the timeout twice; it is raised again each time
            try:
                while True:
                    pass
            except BaseException as exc:  # noqa: BLE001
                seen.append(type(exc).__name__)
        return "finished"

    outcome = guard.call(stubborn, 0.2)
    assert outcome.timed_out and outcome.value is None and seen and set(seen) == {"CheckTimeout"}


def test_the_environment_variable_sets_every_calls_limit(monkeypatch):
    monkeypatch.setenv("NPU_LAB_CHECK_TIMEOUT", "0.2")
    start = time.perf_counter()
    r = grade(EXERCISES["ch1.count_graphs"], answers("ch1.count_graphs", _bare_except_loop))  # its own limit: 60 s
    assert time.perf_counter() - start < 3 and "0.2 s" in str(r)


# ---------------------------------------------------------------------------------------------
# 3. state leaks are put back
# ---------------------------------------------------------------------------------------------

class _FunctionMode(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _DispatchMode(torch.utils._python_dispatch.TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


_KEEP: list[Any] = []  # what a leaking answer keeps alive (a library, a lazy mode)


def _register_zero_relu():
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("relu", lambda x: torch.zeros_like(x), "CPU")
    _KEEP.append(lib)


def _enter_lazy_mode():
    ctx = npu_lab.lazy.mode()
    ctx.__enter__()
    _KEEP.append(ctx)


LEAKS = {
    "default dtype": lambda: torch.set_default_dtype(torch.float64),
    "default device": lambda: torch.set_default_device("npu"),
    "grad mode": lambda: torch.set_grad_enabled(False),
    "torch seed": lambda: torch.manual_seed(1234),
    "npu seed": lambda: torch.npu.manual_seed(77),
    "numpy seed": lambda: np.random.seed(5),
    "cpu fallback": lambda: npu_lab.set_cpu_fallback(not npu_lab.cpu_fallback_enabled()),
    "deterministic algorithms": lambda: torch.use_deterministic_algorithms(True),
    "anomaly detection": lambda: torch.set_anomaly_enabled(True),
    "matmul precision": lambda: torch.set_float32_matmul_precision("medium"),
    "threads": lambda: torch.set_num_threads(1),
    "mkldnn flag": lambda: _KEEP.append(ctx := torch.backends.mkldnn.flags(enabled=not torch.backends.mkldnn.enabled))
    or ctx.__enter__(),
    "numpy print options": lambda: np.set_printoptions(precision=1),
    "torch print options": lambda: torch.set_printoptions(precision=1),
    "warnings filter": lambda: warnings.simplefilter("error"),
    "sys.stdout": lambda: setattr(sys, "stdout", io.StringIO()),
    "working directory": lambda: os.chdir("/"),
    "environment": lambda: os.environ.__setitem__("NPU_LAB_HOME", "/nonexistent"),
    # a handler of its own, not SIG_IGN: a process started in the background already ignores SIGINT
    "SIGINT handler": lambda: signal.signal(signal.SIGINT, lambda signum, frame: None),
    "function mode left on": lambda: _FunctionMode().__enter__(),
    "dispatch mode left on": lambda: _DispatchMode().__enter__(),
    "autocast left on": lambda: torch.set_autocast_enabled("cpu", True),
    "lazy mode left on": _enter_lazy_mode,
    "torch.allclose patched": lambda: setattr(torch, "allclose", lambda *a, **k: True),
    "torch.testing.assert_close patched": lambda: setattr(torch.testing, "assert_close", lambda *a, **k: None),
    "math.isclose patched": lambda: setattr(math, "isclose", lambda *a, **k: True),
    "math.pi changed": lambda: setattr(math, "pi", 3.0),
    "grading code patched": lambda: setattr(tester_module, "compare", lambda *a, **k: (True, "")),
    "compiler pass registered": lambda: npu_lab.compiler.custom_passes.register_pass(lambda gm: [], "leak"),
    "dynamo config": lambda: setattr(torch._dynamo.config, "recompile_limit", 1),
    "recursion limit": lambda: sys.setrecursionlimit(900),
    "kernel registered for the CPU": _register_zero_relu,
    "cost model": lambda: setattr(npu_lab.cost_model, "launch_us", 999.0),
    "logging disabled": lambda: logging.disable(logging.CRITICAL),
}


def _release() -> None:
    """Let go of what leaking answers kept (a lazy mode the check already took off its stack)."""
    for kept in reversed(_KEEP):  # innermost first, as nested contexts unwind
        gen = getattr(kept, "gen", None)
        if gen is not None:
            try:
                gen.close()
            except ValueError:  # its finally block looks for itself on a stack the check restored
                pass
    _KEEP.clear()


def _leak_all():
    for leak in LEAKS.values():
        leak()
    return None


@pytest.mark.parametrize("eid", IDS)
def test_no_state_leaks_from_any_check(eid):
    before = world()
    r = grade(EXERCISES[eid], answers(eid, _leak_all), timeout=5.0, deadline=DEADLINE)
    _render(r)
    assert r.status != PASSED
    assert_same_world(before, world())
    _release()


def test_correct_answers_pass_after_every_check_was_attacked_with_every_leak():
    assert_still_grades()


@pytest.mark.parametrize("member", list(LEAKS))
def test_each_leak_is_put_back_and_a_correct_answer_still_passes(member):
    before = world()

    def leaky(shape):
        LEAKS[member]()
        return good_contiguous_strides(shape)

    r = grade(EXERCISES["lab.contiguous_strides"], {"contiguous_strides": leaky})
    after = world()
    _release()
    assert_same_world(before, after)
    assert r.status == PASSED, f"a correct answer that also changed {member} should still pass:\n{r}"
    if member not in ("torch seed", "npu seed", "numpy seed", "sys.stdout"):  # put back silently
        assert "put back" in str(r), str(r)
    assert_still_grades()


# ---------------------------------------------------------------------------------------------
# 4. references the learner cannot change
# ---------------------------------------------------------------------------------------------

def test_a_kernel_registered_by_an_answer_is_gone_when_its_call_returns():
    """An answer registers a wrong relu for the CPU and npu; the check's references after it are unchanged."""
    libs = []

    def fuse_add_relu(gm):
        lib = torch.library.Library("aten", "IMPL")
        for key in ("CPU", "PrivateUse1"):
            lib.impl("relu", lambda x: torch.zeros_like(x), key)
        libs.append(lib)
        return gm  # not fused: the check's values must still be the real relu's

    r = grade(EXERCISES["ch3.fuse_add_relu"], {"fuse_add_relu": fuse_add_relu})
    assert r.status == NOT_YET
    assert all(lib.m is None for lib in libs)
    assert torch.relu(torch.tensor([-1.0, 2.0])).tolist() == [0.0, 2.0]


def test_patched_comparison_functions_do_not_make_a_wrong_answer_pass():
    def patch_everything():
        torch.allclose = lambda *a, **k: True
        torch.equal = lambda *a, **k: True
        torch.testing.assert_close = lambda *a, **k: None
        math.isclose = lambda *a, **k: True
        np.allclose = lambda *a, **k: True

    def softmax_rows(x):
        patch_everything()
        return torch.zeros_like(x)

    before = world()
    r = grade(EXERCISES["arch.fix_inplace"], {"softmax_rows": softmax_rows})
    assert r.status == NOT_YET
    assert_same_world(before, world())


def _hardswish_registered_for_cpu_too():
    lib = torch.library.Library("aten", "IMPL")
    wrong = lambda x: x * 0.5  # noqa: E731 - the same wrong kernel on both devices
    lib.impl("hardswish", wrong, "PrivateUse1")
    lib.impl("hardswish", wrong, "CPU")
    return lib


def test_ch7_a_wrong_kernel_registered_for_the_cpu_too_is_not_its_own_reference():
    r = grade(EXERCISES["ch7.register_kernel"], {"register_hardswish": _hardswish_registered_for_cpu_too})
    values = [c for c in r.cases if c.description.startswith("F.hardswish(") and "(0, 3)" not in c.description]
    assert values and not any(c.passed for c in values), str(r)
    assert any(not c.passed and "PrivateUse1) key only" in c.description for c in r.cases), str(r)
    assert r.status == NOT_YET and F.hardswish(torch.tensor([4.0])).tolist() == [4.0]


def test_ch7_a_right_kernel_registered_for_the_cpu_too_fails_only_that_rule():
    from npu_lab.inspect.dispatch import dispatch_table

    @numba.njit
    def loop(x, out):
        for i in range(x.size):
            out[i] = x[i] * min(max(x[i] + 3.0, 0.0), 6.0) / 6.0

    def kernel(self):
        src = self.contiguous()
        out = torch.empty_like(src)
        loop(npu_lab.device_array(src).reshape(-1), npu_lab.device_array(out).reshape(-1))
        return out

    def register_hardswish():
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("hardswish", kernel, "PrivateUse1")
        lib.impl("hardswish", lambda x: x * (x + 3).clamp(0, 6) / 6, "CPU")
        return lib

    def only_npu():
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("hardswish", kernel, "PrivateUse1")
        return lib

    before = world()
    r = grade(EXERCISES["ch7.register_kernel"], {"register_hardswish": register_hardswish})
    failed = [c.description for c in r.cases if not c.passed]
    assert failed == ["your code registers kernels for the npu (PrivateUse1) key only"], str(r)
    assert grade(EXERCISES["ch7.register_kernel"], {"register_hardswish": only_npu}).passed
    assert_same_world(before, world())
    table = dispatch_table("aten::hardswish")
    assert table["PrivateUse1"].kind == "kernel" and "CPU" in table  # the lab's kernel is back, the CPU's own
    assert F.hardswish(torch.tensor([4.0], device="npu")).cpu().tolist() == [4.0]


def test_ch7_a_notebook_level_cpu_kernel_cannot_make_a_wrong_custom_op_pass():
    """A wrong aten::silu registered for the CPU and npu before the check: swiglu built on it computes zeros,
    and so would a reference computed with F.silu; the check's reference is NumPy's."""
    lib = torch.library.Library("aten", "IMPL")
    for key in ("CPU", "PrivateUse1"):
        lib.impl("silu", lambda x: torch.zeros_like(x), key)
    try:
        @torch.library.custom_op("ch7attack::swiglu", mutates_args=())
        def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return F.silu(a) * b

        swiglu.register_fake(lambda a, b: torch.empty_like(a))
        r = grade(EXERCISES["ch7.custom_op"], {"swiglu": swiglu})
    finally:
        lib._destroy()
    values = [c for c in r.cases if c.description.startswith("swiglu(a, b) for") and "(0, 3)" not in c.description]
    assert values and not any(c.passed for c in values), str(r)


def test_ch8b_fold_bn_references_are_computed_before_the_answer_runs():
    """The answer patches the grading code's NumPy references and the comparison, then returns a module with
    the BatchNorms simply dropped (wrong values): it must fail, and leave the grading code as it was."""
    from npu_lab.grading import references, values

    def fold_bn(model):
        references.batch_norm = lambda x, *a, **k: x
        references.conv2d = lambda *a, **k: 0
        values.tensors_close = lambda *a, **k: True
        gm = torch.fx.symbolic_trace(model)
        for node in list(gm.graph.nodes):
            if node.op == "call_module" and "BatchNorm" in type(gm.get_submodule(node.target)).__name__:
                node.replace_all_uses_with(node.args[0])
                gm.graph.erase_node(node)
        gm.recompile()
        return gm

    before = world()
    r = grade(EXERCISES["ch8b.fold_bn"], {"fold_bn": fold_bn})
    assert r.status == NOT_YET
    assert any(not c.passed and "computes what the model did" in c.description for c in r.cases), str(r)
    assert references.batch_norm.__module__ == "npu_lab.grading.references"
    assert values.tensors_close.__module__ == "npu_lab.grading.values"
    assert_same_world(before, world())


def test_ch8b_a_kernel_registered_by_a_pass_does_not_change_the_reference():
    """The pass leaves the graph alone and registers an mm that returns zeros for the CPU and npu (kept alive): a
    reference computed on the CPU afterwards would be zeros too. The check's references come first, the
    registration is gone after the check, and the CPU's mm is as it was."""
    kept = []

    def merge_projections(gm):
        lib = torch.library.Library("aten", "IMPL")
        for key in ("CPU", "PrivateUse1"):
            lib.impl("mm", lambda a, b: torch.zeros(a.shape[0], b.shape[1], device=a.device), key)
        kept.append(lib)
        return []

    before = world()
    r = grade(EXERCISES["ch8b.merge_projections"], {"merge_projections": merge_projections})
    assert r.status == NOT_YET and kept and all(lib.m is None for lib in kept)
    eager = [c for c in r.cases if c.description.endswith("the compiled result equals eager's")]
    assert eager, str(r)
    assert torch.mm(torch.eye(2), torch.eye(2)).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert_same_world(before, world())


def test_ch8a_planted_kernels_and_the_harness_are_put_back():
    """Whatever a gate does, the lab's hardsigmoid/hardtanh kernels and its own conformance harness are as they
    were after the check (the check plants kernels and switches the harness off while the gate runs)."""
    from npu_lab.ops import conformance as ops_conformance

    code = ops_conformance.check_opinfo.__code__
    r = grade(EXERCISES["ch8a.conformance"], {"conformance": lambda op: []})
    assert r.status == NOT_YET
    assert ops_conformance.check_opinfo.__code__ is code
    assert "aten::hardsigmoid" in npu_lab.claimed_ops() and "aten::hardtanh" in npu_lab.claimed_ops()
    x = torch.linspace(-4, 4, 9)
    assert torch.equal(F.hardsigmoid(x.to("npu")).cpu(), F.hardsigmoid(x))


# ---------------------------------------------------------------------------------------------
# 5. values compared by the check, never by the learner's objects
# ---------------------------------------------------------------------------------------------

class AlwaysEqual:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__


class EqInt(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


class EqStr(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


class EqFloat(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


class EqTuple(tuple):
    def __eq__(self, other):
        return True

    __hash__ = tuple.__hash__


class EqDict(dict):
    def __eq__(self, other):
        return True

    def get(self, key, default=None):
        return AlwaysEqual()

    __hash__ = None


class LyingTensor(torch.Tensor):
    """Every comparison says "equal", every other operation returns a LyingTensor."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal, torch.Tensor.equal):
            return True
        if func in (torch.isclose, torch.eq, torch.Tensor.__eq__, torch.Tensor.eq):
            return torch.ones((), dtype=torch.bool)
        return super().__torch_function__(func, types, args, kwargs)


class ClaimsToBeATensor:
    @property
    def __class__(self):  # noqa: PLW3201
        return torch.Tensor

    shape = torch.Size([4])
    dtype = torch.float32
    device = torch.device("cpu")

    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


def _patched_then_zeros():
    torch.allclose = lambda *a, **k: True
    torch.equal = lambda *a, **k: True
    math.isclose = lambda *a, **k: True
    return torch.zeros(4)


FAKES = {"__eq__ always true": lambda: AlwaysEqual(), "int subclass": lambda: EqInt(0),
         "str subclass": lambda: EqStr("x"), "float subclass": lambda: EqFloat(0.0),
         "tuple subclass": lambda: EqTuple((0,)), "tuple of always-equal": lambda: (AlwaysEqual(),) * 3,
         "list of always-equal": lambda: [AlwaysEqual()] * 3, "dict subclass": lambda: EqDict(),
         "tensor subclass": lambda: torch.zeros(4).as_subclass(LyingTensor),
         "patched comparisons": _patched_then_zeros}
#: Fakes only handed to checks that compare the value themselves: an object whose __class__ lies, given to
#: torch.export or Dynamo as a tensor, crashes PyTorch itself (a segmentation fault inside its tracer).
VALUE_ONLY_FAKES = {"claims to be a tensor": lambda: ClaimsToBeATensor()}


def _fake_data(eid: str, member: str) -> dict[str, Any] | None:
    """For the exercises whose answers are data: a fake of the data itself."""
    keys = _data_keys(eid)
    if not keys:
        return None
    value = FAKES[member]() if member != "patched comparisons" else 0  # (data cannot patch anything)
    name = EXERCISES[eid].names[0]
    if member == "dict subclass":
        return {name: EqDict({k: AlwaysEqual() for k in keys})}
    return {name: {k if member != "str subclass" else EqStr(k): value for k in keys}}


def _fake_interpreter(member: str) -> type:
    class Liar(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            n.meta["shape"] = FAKES[member]()
            return result
    return Liar


def _fake_answers(eid: str, member: str) -> dict[str, Any]:
    data = _fake_data(eid, member)
    if data is not None:
        return data
    ans = answers(eid, FAKES[member])
    if eid == "ch3.shape_interpreter":
        ans["ShapeInterpreter"] = _fake_interpreter(member)
    if eid == "ch7.dispatch_mode":
        ans["StepLog"] = _attack_mode(lambda: None, ops=FAKES[member])
    return ans


@pytest.mark.parametrize(("eid", "member"), _attack_params(FAKES, per_exercise=1))
def test_a_fake_value_never_passes(eid, member):
    before = world()
    r = grade(EXERCISES[eid], _fake_answers(eid, member), timeout=5.0, deadline=DEADLINE)
    _render(r)
    assert r.status != PASSED, f"{member} passed {eid}:\n{r}"
    assert_same_world(before, world())


@pytest.mark.parametrize("member", list(FAKES) + list(VALUE_ONLY_FAKES))
def test_every_fake_value_fails_in_one_cheap_exercise(member):
    r = grade(EXERCISES["lab.block_bytes"], answers("lab.block_bytes", {**FAKES, **VALUE_ONLY_FAKES}[member]))
    assert r.status == NOT_YET and not any(c.passed for c in r.cases), str(r)
    assert torch.allclose is npu_lab.grading.values.allclose


def test_a_dict_subclass_answer_is_refused_without_running_its_methods():
    ran = []
    r = grade(EXERCISES["ch4.count_graphs"], {"graphs": _Poisoned(lambda: ran.append(1))})
    assert r.status == NOT_YET and not ran and "plain dict" in str(r)


# ---------------------------------------------------------------------------------------------
# 7. correct alternatives pass
# ---------------------------------------------------------------------------------------------

Geometry = namedtuple("Geometry", "sizes strides offset")


def alt_view_geometry(size, stride, offset, index):
    sizes, strides = list(size), list(stride)
    dim = 0
    for item in index:
        if isinstance(item, int):
            offset += (item % size[dim]) * stride[dim]
            del sizes[len(sizes) - len(size) + dim], strides[len(strides) - len(size) + dim]
        else:
            start, stop, step = item.indices(size[dim])
            pos = len(sizes) - len(size) + dim
            sizes[pos], strides[pos] = len(range(start, stop, step)), stride[dim] * step
            offset += start * stride[dim]
        dim += 1
    return Geometry(tuple(sizes), tuple(strides), offset)


def alt_backward_nodes(root):
    seen: dict[int, Any] = {}

    def visit(node):
        if node is None or id(node) in seen:
            return
        seen[id(node)] = node
        for nxt, _ in node.next_functions:
            visit(nxt)

    visit(root)
    return Counter(type(n).__name__ for n in seen.values())


@numba.njit(cache=True)
def alt_leaky_relu_kernel(x, out, slope):
    out[:] = np.where(x > 0, x, slope * x)


def alt_square_to_mul(gm):
    for node in gm.graph.nodes:  # change the node in place rather than replace it
        if node.target == torch.ops.aten.pow.Tensor_Scalar and node.args[1] == 2:
            node.target = torch.ops.aten.mul.Tensor
            node.args = (node.args[0], node.args[0])
    gm.recompile()
    return gm


def alt_fuse_add_relu(gm):
    import operator

    from npu_lab.exercises.ch3 import fused_add_relu

    modules = dict(gm.named_modules())
    for node in list(gm.graph.nodes):
        relu = (node.op == "call_function" and node.target in (torch.relu, F.relu)) or \
            (node.op == "call_method" and node.target == "relu") or \
            (node.op == "call_module" and type(modules[node.target]) is torch.nn.ReLU)
        add = node.args[0] if node.args else None
        if relu and isinstance(add, torch.fx.Node) and add.op == "call_function" and add.target in (
                operator.add, torch.add) and not add.kwargs and len(add.args) == 2 and list(add.users) == [node]:
            node.op, node.target, node.args, node.kwargs = "call_function", fused_add_relu, add.args, {}
            gm.graph.erase_node(add)
    gm.recompile()
    return gm


def alt_gate(x):
    return torch.cond(x.mean() > 0, lambda t: t * 2, lambda t: t / 2, (x,))


def alt_rowwise(x):
    return torch.where(x.sum(1, keepdim=True) > 0, x.clamp(min=0), x.neg())


def alt_count_node_kinds(module):
    counts = Counter(n.op for n in torch.fx.symbolic_trace(module).graph.nodes)
    return {k: counts.get(k, 0) for k in ("placeholder", "get_attr", "call_function", "call_method",
                                          "call_module", "output")}


def alt_gated_norm_fixed(x, w):
    h = x @ w
    h = h / h.abs().amax()
    return torch.where(h.mean() > 0, h.clamp(min=0), h.tanh())


def alt_fold_bn(model):
    """PyTorch's own helper does the algebra (torch.nn.utils.fusion.fuse_conv_bn_eval); the module is rebuilt
    by hand rather than with a pass of one's own."""
    import copy

    from torch.nn.utils.fusion import fuse_conv_bn_eval

    gm = torch.fx.symbolic_trace(copy.deepcopy(model))
    called = [n.target for n in gm.graph.nodes if n.op == "call_module"]
    for node in list(gm.graph.nodes):
        if node.op != "call_module" or not isinstance(gm.get_submodule(node.target), torch.nn.BatchNorm2d):
            continue
        src, bn = node.args[0], gm.get_submodule(node.target)
        if src.op == "call_module" and isinstance(gm.get_submodule(src.target), torch.nn.Conv2d) and \
                len(src.users) == 1 and called.count(src.target) == 1 and bn.track_running_stats:
            fused = fuse_conv_bn_eval(gm.get_submodule(src.target), bn)
            parent, _, name = src.target.rpartition(".")
            setattr(gm.get_submodule(parent) if parent else gm, name, fused)
            node.replace_all_uses_with(src)
            gm.graph.erase_node(node)
    gm.recompile()
    return gm


def alt_merge_projections(gm):
    """aten.narrow instead of slices, the groups found by scanning the products (not the shared inputs)."""
    aten = torch.ops.aten
    changes = []
    while True:
        nodes = list(gm.graph.nodes)
        position = {n: i for i, n in enumerate(nodes)}
        groups: dict = {}
        for n in nodes:
            if n.op == "call_function" and n.target == aten.mm.default:
                groups.setdefault(n.args[0], []).append(n)
        todo = None
        for x, products in groups.items():
            first = min(products, key=position.get)
            ready = [p for p in products if position[p.args[1]] < position[first]]
            if len(ready) > 1:
                todo = (x, sorted(ready, key=position.get))
                break
        if todo is None:
            return changes
        x, products = todo
        with gm.graph.inserting_before(products[0]):
            merged = gm.graph.call_function(aten.mm.default, (x, gm.graph.call_function(
                aten.cat.default, ([p.args[1] for p in products], 1))))
            offset = 0
            for p in products:
                width = p.args[1].meta["val"].shape[1]
                p.replace_all_uses_with(gm.graph.call_function(aten.narrow.default, (merged, 1, offset, width)))
                offset += width
        for p in products:
            gm.graph.erase_node(p)
        changes.append(f"{x.name}: {len(products)} products -> 1")


def alt_compare(fn_a, fn_b, *args, repeats=5):
    """Device events for the time (synchronizing every stream first), the launch counter of the device's clock
    for the launches, numpy's median."""
    from npu_lab.device import clock

    device = next(a.device for a in args if isinstance(a, torch.Tensor))
    with torch.npu.device(device):
        first = [fn_a(*args), fn_b(*args)]
        torch.npu.synchronize()
        a, b = [o if isinstance(o, (tuple, list)) else [o] for o in first]
        if len(a) != len(b) or not all(torch.allclose(p, q, rtol=1e-4, atol=1e-5) for p, q in zip(a, b)):
            raise ValueError("the two functions disagree")
        ms, counts = {"a": [], "b": []}, {"a": [], "b": []}
        for _ in range(repeats):
            for key, fn in (("a", fn_a), ("b", fn_b)):
                torch.npu.synchronize()
                start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
                launched = clock.clock(device.index).launches
                start.record()
                fn(*args)
                torch.npu.synchronize()
                end.record()
                end.synchronize()
                ms[key].append(start.elapsed_time(end))
                counts[key].append(clock.clock(device.index).launches - launched)
    return {"a_ms": float(np.median(ms["a"])), "b_ms": float(np.median(ms["b"])),
            "a_launches": int(np.median(counts["a"])), "b_launches": int(np.median(counts["b"]))}


def _alt_register_softplus():
    """Only the out= form and the backward (PyTorch's functional form calls the out= kernel), each writing
    through the output's strides with np.ndindex, in numba."""
    import math

    from npu_lab import bringup

    @numba.njit
    def forward(x, out, beta, threshold):
        for idx in np.ndindex(x.shape):
            z = x[idx] * beta
            out[idx] = x[idx] if z > threshold else math.log1p(math.exp(z)) / beta

    @numba.njit
    def backward(g, x, out, beta, threshold):
        for idx in np.ndindex(x.shape):
            z = x[idx] * beta
            out[idx] = g[idx] if z > threshold else g[idx] * math.exp(z) / (math.exp(z) + 1.0)

    def softplus_out(self, beta=1, threshold=20, *, out):
        with torch.npu.device(self.device):
            out.resize_(self.shape)
            forward(npu_lab.device_array(self), npu_lab.device_array(out), float(beta), float(threshold))
            bringup.launch("softplus", [self], [out], flops=5.0 * self.numel())
        return out

    def softplus_backward(grad_output, self, beta, threshold):
        with torch.npu.device(self.device):
            grad = torch.empty_like(self, memory_format=torch.contiguous_format)
            backward(npu_lab.device_array(grad_output), npu_lab.device_array(self), npu_lab.device_array(grad),
                     float(beta), float(threshold))
            bringup.launch("softplus_backward", [grad_output, self], [grad], flops=5.0 * self.numel())
        return grad

    def register_softplus():
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("softplus.out", softplus_out, "PrivateUse1")
        lib.impl("softplus_backward", softplus_backward, "PrivateUse1")
        return lib

    return register_softplus


def alt_conformance(op):
    """Checks spelled out one by one (device, dtype, shape, allclose), gradients through .backward()."""
    failures = []
    samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=op.supports_autograd))
    for index, sample in enumerate(samples + samples):
        want = op(sample.input, *sample.args, **sample.kwargs)
        x = sample.input.detach().to("npu")
        if index >= len(samples):  # the second round strided, made so on the device
            x = torch.empty(x.shape + (2,), device="npu")[..., 0].copy_(x) if x.dim() else x
        x.requires_grad_(sample.input.requires_grad)
        args = [a.detach().to("npu") if isinstance(a, torch.Tensor) else a for a in sample.args]
        copy_of_x = x.detach().cpu()
        try:
            with npu_lab.memcheck():
                got = op(x, *args, **sample.kwargs)
            if got.device.type != "npu" or got.dtype != want.dtype or got.shape != want.shape:
                failures.append(f"{index}: device/dtype/shape {got.device}, {got.dtype}, {tuple(got.shape)}")
                continue
            if not torch.allclose(got.detach().cpu(), want.detach(), rtol=1.3e-6, atol=1e-5):
                failures.append(f"{index}: values")
            if not torch.equal(x.detach().cpu(), copy_of_x):
                failures.append(f"{index}: the input changed")
            if op.supports_autograd and want.requires_grad:
                w = torch.full(want.shape, 0.5)
                want.backward(w)
                got.backward(w.to("npu"))
                if not torch.allclose(x.grad.cpu(), sample.input.grad, rtol=1.3e-6, atol=1e-5):
                    failures.append(f"{index}: gradient")
                sample.input.grad = None
        except Exception as exc:  # noqa: BLE001 - a kernel's error is a failure to report
            failures.append(f"{index}: {type(exc).__name__}")
    return failures


def alt_register_hardswish():
    """A kernel built from the NPU's own operators (each runs on the device; no numba of one's own)."""
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("hardswish", lambda x: x * torch.clamp(x + 3, 0, 6) / 6, "PrivateUse1")
    return lib


def alt_softmax_rows(x: torch.Tensor) -> torch.Tensor:
    """Repaired another way: shifted by each row's max first (the same softmax, never overflows)."""
    y = (x - x.max(dim=1, keepdim=True).values).exp()
    return y / y.sum(dim=1, keepdim=True)


def _alt_step_log() -> type:
    """The names built from the schema, the source found by keyword, the element size from the dtype."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class StepLog(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops, self.copied = [], 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            schema = func._schema
            self.ops.append(f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name)
            if schema.name == "aten::copy_":
                src = kwargs.get("src", args[1] if len(args) > 1 else None)
            else:
                src = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if isinstance(out, torch.Tensor) and isinstance(src, torch.Tensor) and src.device != out.device and \
                    "cpu" in (src.device.type, out.device.type):
                self.copied += out.numel() * out.dtype.itemsize
            return out
    return StepLog


ALTERNATIVES = {
    "lab.contiguous_strides": {"contiguous_strides": lambda shape: tuple(
        math.prod(max(s, 1) for s in shape[i + 1:]) for i in range(len(shape)))},
    "lab.block_bytes": {"block_bytes": lambda shape, dtype: math.ceil(
        math.prod(shape) * torch.tensor([], dtype=dtype).element_size() / 512) * 512},
    "lab.leaky_relu_kernel": {"leaky_relu_kernel": alt_leaky_relu_kernel},
    "lab.square_to_mul": {"square_to_mul": alt_square_to_mul},
    "arch.view_geometry": {"view_geometry": alt_view_geometry},
    "arch.contiguity": {"is_contiguous_by_strides": lambda size, stride: np.bool_(good_contiguity(size, stride))},
    "arch.backward_nodes": {"backward_nodes": alt_backward_nodes},
    "arch.fix_inplace": {"softmax_rows": alt_softmax_rows},
    "ch0.export_branches": {"gate": alt_gate, "rowwise": alt_rowwise},
    "ch3.node_kinds": {"count_node_kinds": alt_count_node_kinds},
    "ch3.fuse_add_relu": {"fuse_add_relu": alt_fuse_add_relu},
}
ALTERNATIVES.update({
    "ch7.register_kernel": {"register_hardswish": alt_register_hardswish},
    "ch7.dispatch_mode": {"StepLog": _alt_step_log()},
    "ch8a.softplus": {"register_softplus": _alt_register_softplus()},
    "ch8a.conformance": {"conformance": alt_conformance},
    "ch8b.fold_bn": {"fold_bn": alt_fold_bn},
    "ch8b.merge_projections": {"merge_projections": alt_merge_projections},
    "ch8b.compare": {"compare": alt_compare},
})
if FULL:
    ALTERNATIVES["ch5.remove_graph_break"] = {"gated_norm_fixed": alt_gated_norm_fixed}


@pytest.mark.parametrize("eid", list(ALTERNATIVES))
def test_a_correct_alternative_passes(eid):
    if eid == "lab.leaky_relu_kernel":  # compiled once first, as the learner's own cell would have
        alt_leaky_relu_kernel(np.ones(2, np.float32), np.zeros(2, np.float32), 0.5)
    r = grade(EXERCISES[eid], ALTERNATIVES[eid])
    assert r.status == PASSED, f"a correct alternative answer does not pass:\n{r}"


# ---------------------------------------------------------------------------------------------
# 8. long results
# ---------------------------------------------------------------------------------------------

def test_failures_come_first_and_passing_cases_are_counted():
    def strides(shape):
        return good_contiguous_strides(shape) if len(shape) != 1 else (2,)  # wrong for 1-D shapes only

    r = grade(EXERCISES["lab.contiguous_strides"], {"contiguous_strides": strides})
    lines = str(r).splitlines()
    assert lines[1].startswith("  FAIL contiguous_strides((5,))")
    assert lines[-1].strip().startswith("ok   7 other cases passed (5 public, 2 hidden)")
    assert sum(1 for line in lines if line.strip().startswith("ok")) == 1  # passing cases are one line
    page = r._repr_html_()
    assert page.index("contiguous_strides((5,))") < page.index("<details>")
    ok = grade(EXERCISES["lab.contiguous_strides"], {"contiguous_strides": good_contiguous_strides})
    assert str(ok).splitlines()[-1].strip() == "ok   all 8 cases passed (6 public, 2 hidden)"


def test_what_an_answer_prints_is_captured_capped_and_shown_with_its_failure(capsys):
    def strides(shape):
        for i in range(20_000):
            print("debugging", shape, i)
        return ()

    r = grade(EXERCISES["lab.contiguous_strides"], {"contiguous_strides": strides})
    out = capsys.readouterr()
    assert "debugging" not in out.out + out.err
    case = r.public[0]
    assert case.output.startswith("debugging (2, 3, 4) 0") and "more characters not shown" in case.output
    text = str(r)
    assert "your code printed:" in text and len(text) < 30_000
    assert "debugging" not in "".join(c.output for c in r.hidden)  # hidden cases never show their output


def test_a_summary_shows_the_failing_exercises_first():
    def wrong(shape):
        return ()

    s = npu_lab.check(chapter="lab", contiguous_strides=wrong, block_bytes=lambda shape, dtype: 0)
    text = str(s)
    assert text.splitlines()[1].startswith("[not yet]")
