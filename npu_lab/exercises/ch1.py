"""Chapter 1: torch.compile - what it compiles, when it recompiles, and how to avoid recompiles.

Four exercises:

* ``ch1.count_graphs`` - compile a function with a counting backend and report, after each call of
  a call sequence, how many graphs Dynamo has compiled so far;
* ``ch1.serving`` - compile a function so that one graph serves every batch size and sequence length, 1
  included, while the widths stay constants of the graph;
* ``ch1.decayed_step`` - a training step whose learning rate decays with the step number recompiles
  on every call when the step number is a Python value; keep it compiled once;
* ``ch1.silu_backend`` - build a ``torch.compile`` backend of your own that rewrites every
  ``x * sigmoid(x)`` into one ``silu(x)`` and runs the graph on the npu (one kernel launch instead of two).

Every check compiles with a backend that counts the graphs it is given and the calls of those graphs
(:class:`RunCounter`), so it sees both "how many compiles" and "did the compiled code run".
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch._dynamo
from torch import nn

from ..grading.inputs import randn
from ..grading.predictions import question
from ..grading.references import measured
from ..grading.registry import chapter, exercise
from ..grading.structure import CompileCounter
from ..grading.tester import Tester

chapter("ch1", "torch.compile: PyTorch 2's entry point", [
    "torch.compile wraps a function or module (or decorates one) and compiles on the first call, not before",
    "A backend is a function from an FX graph to a callable; packages add theirs by entry point (the lab's npu)",
    "mode is a preset of Inductor settings (list_mode_options()); other backends receive mode/options as arguments",
    "Dynamo captures an FX graph and guards, AOTAutograd lowers it to ATen graphs, the backend compiles them",
    "The first call pays for compiling; later calls check guards and reuse the code; Inductor caches on disk",
    "A failed guard recompiles: a new dtype always, a new shape until that dimension becomes dynamic",
    "dynamic=True or mark_dynamic compile one graph for every size from 2 up (sizes 0 and 1 are still specialised)",
    "An unbacked dimension (mark_unbacked) has no value Dynamo may look at: one graph for every size, 0 and 1 too",
    "Python values a function reads (globals, counters, list lengths) are guarded: keep changing values in tensors",
    "Compiling pays for fusible work called many times, not for tiny or one-shot calls, recompiles or graph breaks",
])


question("ch1.sizes",
         "row_norm compiled with the default settings (dynamic=None) and called with batch sizes 4, 8, 16, 3, 1 and "
         "32 (width 8): how many graphs does Dynamo compile?",
         why="4 compiles a static graph; 8 fails its size guard and compiles a graph whose batch size is a symbol "
             "(16 and 3 reuse it); 1 is specialised, a graph of its own; 32 reuses the dynamic graph: 3 graphs")
question("ch1.unbacked",
         "row_norm with dimension 0 marked unbacked on every input, called with batch sizes 4, 8, 1, 16 and 0: how "
         "many graphs does Dynamo compile?",
         why="an unbacked size has no value Dynamo may look at while tracing, so nothing can specialise it, not even "
             "to 0 or 1: one general graph serves every size")
question("ch1.mlp_launches",
         "How many kernels does the npu backend launch for one call of the compiled MLP 64-256-256-10 (eager "
         "launches 5: addmm, relu, addmm, relu, addmm)?",
         why="the pattern pass fuses each addmm with the relu that follows it into one linear_relu kernel, and the "
             "last addmm has no relu after it: 3 kernels (matrix products do not fuse with each other)")
question("ch1.fastest_mode",
         "On the gpu-like chip (about 6 us of host time per launch), which finishes one call of the small MLP with a "
         "batch of 8 first: eager, the default compile or reduce-overhead?",
         why="the host is the bottleneck: eager issues 5 launches and the default compile 3, each slower to issue "
             "than its kernel runs; reduce-overhead replays the whole graph with one launch, so the device runs its "
             "kernels back to back",
         choices=("eager", "default", "reduce-overhead"))


class RunCounter(CompileCounter):
    """A backend that counts the graphs it compiles (``frames``) and the calls of those graphs (``runs``)."""

    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        super().__call__(gm, example_inputs)

        def run(*args: Any) -> Any:
            self.runs += 1
            return gm.forward(*args)

        return run


@contextlib.contextmanager
def _quiet_dynamo() -> Iterator[None]:
    """Keep Dynamo's warnings (e.g. "hit config.recompile_limit") out of the check's output."""
    logger = logging.getLogger("torch._dynamo")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _warm_formatting(value: object) -> None:
    """Format the check's own expected value once, outside any time limit.

    The results table formats expected values under a short time limit; formatting an npu tensor
    the first time compiles the device's kernels for it, which can take longer than that limit.
    """
    repr(value)


# --- functions the checks compile (each its own code object) --------------------------------------

def _row_norm(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True)


def _scale(x: torch.Tensor, k: int) -> torch.Tensor:
    return x * k + 1


def _clip_if_large(x: torch.Tensor) -> torch.Tensor:
    y = torch.tanh(x) * 4
    if y.max() > 3:  # data-dependent branch: a graph break
        y = y.clamp(max=3)
    return y + 1


def _sum_all(xs: list[torch.Tensor]) -> torch.Tensor:
    total = xs[0]
    for t in xs[1:]:
        total = total + t
    return total * 2


def _seeded_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)).eval()


# --- 1. count the graphs a call sequence compiles ----------------------------------------------------

def _reference_counts(fn: Callable[..., Any], calls: Sequence[tuple], **compile_kwargs: Any) -> list[int]:
    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(fn, backend=counter, **compile_kwargs)
    totals = []
    with _quiet_dynamo():
        for args in calls:
            compiled(*args)
            totals.append(counter.frames)
    torch._dynamo.reset()
    return totals


def _expected_counts(cases: list[tuple]) -> list[list[int]]:
    """The reference counts of every case, measured before any of the learner's code runs (again whenever
    the notebook has changed Dynamo's settings, which the counts depend on)."""
    return [measured(("ch1.count_graphs", desc),
                     lambda fn=fn, calls=calls, kw=kwargs: _reference_counts(fn, calls, **kw))
            for desc, fn, calls, kwargs, _, _ in cases]


def _counts_ok(got: Any, expected: list[int]) -> tuple[bool, str]:
    if not isinstance(got, (list, tuple)):
        return False, f"expected a list of ints, got {type(got).__name__}" + (
            " (did you forget to `return`?)" if got is None else "")
    got = list(got)
    if any(type(g) is not int for g in got):
        return False, "every count must be an int"
    if len(got) != len(expected):
        return False, f"{len(got)} numbers for {len(expected)} calls (one running total per call)"
    if got == expected:
        return True, ""
    first = next(i for i, (g, e) in enumerate(zip(got, expected)) if g != e)
    return False, f"after call {first + 1}: {got[first]} graphs instead of {expected[first]}"


def _tensors(*shapes: tuple[int, ...], dtype: torch.dtype = torch.float32) -> list[tuple]:
    return [(randn(*s, seed=i).to(dtype),) for i, s in enumerate(shapes)]


@exercise("ch1.count_graphs", "Count the graphs a call sequence compiles", names=["count_graphs"], timeout=60)
def _count_graphs(t: Tester, count_graphs) -> None:
    f64 = torch.float64
    mixed = [(randn(4, 8),), (randn(4, 8, seed=1),), (randn(4, 8, seed=2, dtype=f64),), (randn(6, 8),),
             (randn(10, 8),)]
    cases = [
        ("row_norm on float32 (4, 8) twice, float64 (4, 8), float32 (6, 8) and (10, 8)",
         _row_norm, mixed, {}, False,
         "compile with a backend that counts the graphs it receives (CompileCounter), call once per entry of "
         "`calls`, and record the count after each call"),
        ("row_norm again, batch sizes 4, 6, 10, 4, with dynamic=False",
         _row_norm, _tensors((4, 8), (6, 8), (10, 8), (4, 8)), {"dynamic": False}, False,
         "pass **compile_kwargs on to torch.compile; and start from a fresh Dynamo state"),
        ("row_norm once more, batch sizes 5, 7, 9, default settings",
         _row_norm, _tensors((5, 8), (7, 8), (9, 8)), {}, False,
         "call torch._dynamo.reset() first: Dynamo remembers a function's graphs and which dimensions "
         "changed in earlier compiles, so counts depend on what ran before"),
        ("x * k + 1 with k = 2, 3, 4 (a Python int)",
         _scale, [(randn(3, 4), 2), (randn(3, 4), 3), (randn(3, 4), 4)], {}, False,
         "Python numbers are guarded too: count what the backend receives"),
        ("a function with a data-dependent `if` (a graph break), called twice",
         _clip_if_large, _tensors((5,), (5,)), {}, True,
         "count graphs, not calls or compiles of the function: a graph break splits it into several graphs"),
        ("a list of 1, 2, 3 tensors, then 3 again",
         _sum_all, [([randn(3)],), ([randn(3)] * 2,), ([randn(3)] * 3,), ([randn(3, seed=1)] * 3,)], {}, True,
         "every list length is a different graph"),
        ("an nn.Module on batch sizes 2, 3, 5 with dynamic=True",
         _seeded_mlp(), _tensors((2, 6), (3, 6), (5, 6)), {"dynamic": True}, True,
         "a module compiles like a function"),
        ("row_norm with dynamic=True, batch sizes 4, 1, 8, 1", _row_norm, _tensors((4, 8), (1, 8), (8, 8), (1, 8)),
         {"dynamic": True}, True, "dynamic=True still specialises a batch of 1: count what the backend receives"),
        ("x * k + 1 with k = 0, 1, ..., 9 and dynamic=False (more values than recompile_limit)", _scale,
         [(randn(3, 4), k) for k in range(10)], {"dynamic": False}, True,
         "after torch._dynamo.config.recompile_limit graphs Dynamo stops compiling the function and runs it "
         "eagerly: count the graphs the backend really received, do not work them out from the arguments"),
    ]
    expected = _expected_counts(cases)
    # No reset between the learner's calls: each must start from a fresh Dynamo state itself, because
    # the row_norm cases follow each other.
    for (desc, fn, calls, kwargs, hidden, hint), want in zip(cases, expected):
        with _quiet_dynamo():
            t.case(f"count_graphs({desc})", count_graphs, fn, calls, expected=want, hidden=hidden, hint=hint,
                   check=lambda got, e=want: _counts_ok(got, e), **kwargs)
    torch._dynamo.reset()


# --- 2. one graph for every batch size and sequence length ---------------------------------------

def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of each sequence's rows over its unmasked positions: (B, T, W), (B, T) -> (B, W)."""
    m = mask.to(x.dtype).unsqueeze(-1)
    return (x * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)


def _decode_attention(q: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
    """One decoding step: the new positions (B, Q, W) attend to the cached ones (B, T, W)."""
    scores = q @ cache.transpose(1, 2) / q.shape[-1] ** 0.5
    return torch.softmax(scores, dim=-1) @ cache


def _scaled_shift(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """tanh(x * scale + bias), where scale and bias (1, 1, W) broadcast over batch and sequence."""
    return torch.tanh(x * scale + bias)


def _self_attention(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x @ x.transpose(1, 2) * 0.25, dim=-1) @ x


class _Block(nn.Module):
    """A residual block on the last dimension: LayerNorm(relu(Linear(x)) + x)."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        torch.manual_seed(4)
        self.lin = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(torch.relu(self.lin(x)) + x)


@dataclass(frozen=True)
class _ServingCase:
    """A function (or a module class), its inputs' shapes ("B", "T": the batch size and sequence length of a
    call; "W": a width; "Q": a length that is always 1 while serving), which of their dimensions vary, and the
    (B, T) of each call."""

    desc: str
    fn: Any
    shapes: tuple[tuple[Any, ...], ...]
    varying: tuple[tuple[int, ...], ...]
    calls: tuple[tuple[int, int], ...]
    device: str
    hidden: bool
    about: str
    width: int = 8
    masks: tuple[int, ...] = ()  # inputs that are boolean masks
    #: one more call where these fixed sizes differ (a static size must compile a new graph); None: no such call
    probe: tuple[tuple[str, int], ...] | None = (("W", 5),)


_SERVING_CASES = [
    _ServingCase("masked_mean(x (B, T, 8), mask (B, T))", _masked_mean, (("B", "T", "W"), ("B", "T")),
                 ((0, 1), (0, 1)), ((2, 5), (4, 3), (1, 6), (3, 1), (1, 1)), "cpu", False, "", masks=(1,)),
    _ServingCase("decode_attention(q (B, 1, 8), cache (B, T, 8))", _decode_attention,
                 (("B", "Q", "W"), ("B", "T", "W")), ((0,), (0, 1)), ((2, 4), (2, 5), (1, 9), (5, 1)), "cpu", False,
                 "q's dimension 1 is always 1 while serving: it does not vary, so it stays a constant of the graph: ",
                 probe=(("Q", 2),)),
    _ServingCase("scaled_shift(x (B, T, 6), scale (1, 1, 6), bias (1, 1, 6))", _scaled_shift,
                 (("B", "T", "W"), (1, 1, "W"), (1, 1, "W")), ((0, 1), (), ()), ((1, 1), (3, 4), (2, 2), (5, 1)),
                 "cpu", True, "scale and bias have no dimension that varies (their 1s broadcast over the batch and "
                 "the sequence), and the first call is a batch of 1 with sequences of length 1: ", width=6,
                 probe=(("W", 4),)),
    _ServingCase("a module (Linear, LayerNorm) on npu tensors x (B, T, 8)", _Block, (("B", "T", "W"),), ((0, 1),),
                 ((1, 1), (3, 7), (8, 8), (2, 1)), "npu", True,
                 "fn is an nn.Module on npu tensors; the first call has B = T = 1, a later one B = T = 8 (the width): ",
                 probe=None),
    _ServingCase("self-attention of x (B, T, 8) on npu", _self_attention, (("B", "T", "W"),), ((0, 1),),
                 ((8, 8), (3, 5), (1, 1), (6, 2)), "npu", True,
                 "the first call has B = T = 8, the same as the width (dynamic=True would give them one symbol, "
                 "duck sizing), and a batch of 1 with a sequence of 1 comes later: "),
]


def _serving_inputs(case: _ServingCase, b: int, t: int, seed: int,
                    fixed: tuple[tuple[str, int], ...] = ()) -> tuple[torch.Tensor, ...]:
    sizes = {"B": b, "T": t, "W": case.width, "Q": 1, **dict(fixed)}
    out = []
    for i, shape in enumerate(case.shapes):
        dims = [sizes.get(d, d) for d in shape]
        x = randn(*dims, seed=seed + i)
        out.append((x > 0.3 if i in case.masks else x).to(case.device))
    return tuple(out)


def _drive_serving(make: Callable[..., Any], fn: Any, varying: tuple, calls: Sequence[tuple],
                   probe: tuple | None) -> tuple[int, int, list, int, Any]:
    """Compile ``fn`` with the learner's ``make`` (fresh Dynamo state) and call it on every input tuple: the graphs
    compiled and the runs of compiled code over those calls, and their results; then call it once more on
    ``probe`` (inputs whose fixed sizes differ): the graphs that call compiled, and its result."""
    torch._dynamo.reset()
    counter = RunCounter()
    serve = make(fn, counter, varying)
    if not callable(serve):
        raise TypeError(f"compile_for_serving returned {type(serve).__name__}, not something callable")
    outs = [serve(*args) for args in calls]
    graphs, runs = counter.frames, counter.runs
    probed = serve(*probe) if probe is not None else None
    return graphs, runs, outs, counter.frames - graphs, probed


def _host(values: list) -> list:
    return [v.detach().cpu() if isinstance(v, torch.Tensor) else v for v in values]


@exercise("ch1.serving", "One graph for every batch size and sequence length, 1 included",
          names=["compile_for_serving"], timeout=90)
def _serving(t: Tester, compile_for_serving) -> None:
    for k, case in enumerate(_SERVING_CASES):
        calls = [_serving_inputs(case, b, n, seed=20 * k + 3 * i) for i, (b, n) in enumerate(case.calls)]
        probe = _serving_inputs(case, 3, 4, seed=20 * k + 17, fixed=case.probe) if case.probe else None
        fn = case.fn().to(case.device) if isinstance(case.fn, type) else case.fn  # a module class: a new module
        with torch.no_grad():
            expected = [fn(*args).cpu() for args in calls]
            expected_probe = fn(*probe).cpu() if probe is not None else None
        label = f"{case.desc}, (B, T) = {', '.join(f'({b}, {n})' for b, n in case.calls)}"
        with _quiet_dynamo(), torch.no_grad():
            outcome = t.call(_drive_serving, compile_for_serving, fn, case.varying, calls, probe)
        torch._dynamo.reset()
        if not outcome.ok:
            t.error(f"compile_for_serving({case.desc}, backend, varying={case.varying}) and its calls", outcome,
                    hidden=case.hidden,
                    hint=case.about + "return a callable taking the same inputs as fn, compiled with the `backend` "
                                      "you are given; mark exactly the dimensions `varying` names on the inputs "
                                      "(a mark is set on a tensor object, before the call that compiles), and no "
                                      "other (a dimension of size 1 that broadcasts must not be marked)")
            continue
        graphs, runs, outs, probe_graphs, probed = outcome.value
        devices = sorted({o.device.type if isinstance(o, torch.Tensor) else type(o).__name__ for o in outs})
        t.expect(f"{label}: the results stay on {case.device}", devices == [case.device], hidden=case.hidden,
                 expected=case.device, got=", ".join(devices), hint=case.about + "return fn's results as they are")
        t.case(f"{label}: the results equal fn's", lambda o=outs: _host(o), expected=expected, hidden=case.hidden,
               atol=1e-5, hint=case.about + "the compiled function must compute what fn computes")
        t.expect(f"{label}: exactly one graph compiled", graphs == 1, hidden=case.hidden,
                 expected="1 graph", got=f"{graphs} graph(s)",
                 hint=case.about + ("0 graphs: compile with the `backend` you are given" if graphs == 0 else
                                    "a dimension left static recompiles when its size changes; mark_dynamic and "
                                    "dynamic=True keep specialising the sizes 0 and 1 (and dynamic=True ties "
                                    "dimensions of equal size together); an unbacked dimension is never specialised"))
        t.expect(f"{label}: every call ran the compiled graph", runs == len(calls), hidden=case.hidden,
                 expected=f"{len(calls)} runs of compiled code", got=f"{runs}",
                 hint=case.about + "the compiled function must be what runs on every call (not fn itself)")
        if probe is not None:
            sizes = ", ".join(str(tuple(p.shape)) for p in probe)
            t.expect(f"{case.desc}: a call with other fixed sizes ({sizes}) compiles a new graph", probe_graphs == 1,
                     hidden=case.hidden, expected="1 new graph: the fixed sizes are constants of the graph",
                     got=f"{probe_graphs} new graph(s)",
                     hint=case.about + "only the dimensions `varying` names may be symbolic; every other one stays a "
                                       "constant the backend can specialise on (do not mark it, and do not compile "
                                       "with dynamic=True, which makes every dimension symbolic)")
            t.case(f"{case.desc}: that call's result", lambda p=probed: _host([p])[0], expected=expected_probe,
                   hidden=case.hidden, atol=1e-5, hint=case.about + "the compiled function must compute what fn does")


# --- 3. a decaying learning rate without recompiles -------------------------------------------------

def _reference_steps(w: torch.Tensor, grads: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Call k (from 1) returns w - (0.5 / k) * grad_k."""
    return [w - (0.5 / k) * g for k, g in enumerate(grads, 1)]


def _drive_steps(make: Callable[..., Any], w: torch.Tensor, grads: Sequence[torch.Tensor]) -> tuple[RunCounter, list]:
    torch._dynamo.reset()
    counter = RunCounter()
    step = make(counter)
    if not callable(step):
        raise TypeError(f"make_decayed_step returned {type(step).__name__}, not a function")
    outs = [step(w.clone(), g) for g in grads]
    return counter, outs


def _drive_two(make: Callable[..., Any], w: torch.Tensor, grads: Sequence[torch.Tensor],
               order: str) -> tuple[RunCounter, list]:
    """Two steppers from two calls of ``make``, called in ``order`` ("a" or "b" per call)."""
    torch._dynamo.reset()
    counter = RunCounter()
    steppers = {"a": make(counter), "b": make(counter)}
    outs = [steppers[which](w.clone(), g) for which, g in zip(order, grads)]
    return counter, outs


@exercise("ch1.decayed_step", "A decaying learning rate that does not recompile", names=["make_decayed_step"],
          timeout=60)
def _decayed_step(t: Tester, make_decayed_step) -> None:
    cases = [("12 calls on cpu, w of (4, 3)", (4, 3), 12, "cpu", False, ""),
             ("10 calls on npu tensors, w of (6,)", (6,), 10, "npu", True,
              "w and grad are npu tensors this time (a 0-dim CPU tensor may take part in npu arithmetic): "),
             ("9 calls on cpu, w of (2, 5)", (2, 5), 9, "cpu", True,
              "a fresh stepper with a 2-D w of another shape: ")]
    for desc, shape, n, device, hidden, about in cases:
        w = randn(*shape, seed=1, device=device)
        grads = [randn(*shape, seed=10 + k, device=device) for k in range(n)]
        expected = _reference_steps(w, grads)
        with _quiet_dynamo():
            outcome = t.call(_drive_steps, make_decayed_step, w, grads)
        torch._dynamo.reset()
        if not outcome.ok:
            t.error(f"make_decayed_step(backend), then {desc}", outcome, hidden=hidden,
                    hint="return a function step(w, grad) that keeps its own step count")
            continue
        counter, outs = outcome.value
        _warm_formatting(expected)
        t.case(f"{desc}: call k returns w - (0.5 / k) * grad", lambda o=outs: o, expected=expected, hidden=hidden,
               atol=1e-6, hint=about + "the first call uses k = 1, the second k = 2, ...; count inside each stepper")
        t.expect(f"{desc}: one graph compiled for all {n} calls", counter.frames == 1, hidden=hidden,
                 expected="1 graph", got=f"{counter.frames} graph(s)",
                 hint=about + ("0 graphs: compile with the `backend` you are given" if counter.frames == 0 else
                               "Dynamo guards every Python number the function reads (a global, a list element, an "
                               "int argument) and recompiles when it changes (an int argument once, then dynamic: 2 "
                               "graphs); keep the step count in a tensor"))
        t.expect(f"{desc}: every call ran the compiled graph", counter.runs == n, hidden=hidden,
                 expected=f"{n} runs of compiled code", got=str(counter.runs),
                 hint=about + "after torch._dynamo.config.recompile_limit (8) graphs Dynamo stops compiling and runs "
                              "the function eagerly: a step that recompiles on every call ends up not compiled at all")
    # two steppers count independently
    w = randn(3, seed=2)
    grads = [randn(3, seed=30 + k) for k in range(5)]
    order = "aabab"
    counts = {"a": 0, "b": 0}
    expected = []
    for which, g in zip(order, grads):
        counts[which] += 1
        expected.append(w - (0.5 / counts[which]) * g)
    with _quiet_dynamo():
        outcome = t.call(_drive_two, make_decayed_step, w, grads, order)
    torch._dynamo.reset()
    desc = "two steppers a and b, called a, a, b, a, b"
    if not outcome.ok:
        t.error(desc, outcome, hint="each call of make_decayed_step makes a new, independent stepper")
        return
    counter, outs = outcome.value
    _warm_formatting(expected)
    t.case(f"{desc}: each counts its own calls", lambda: outs, expected=expected,
           hint="keep the count inside the stepper (a closure), not in a global shared by all steppers")
    t.expect(f"{desc}: at most one graph per stepper", counter.frames <= 2, expected="<= 2 graphs",
             got=f"{counter.frames} graph(s)", hint="the step count must not be a Python value Dynamo guards on")


# --- 4. a backend of your own: rewrite x * sigmoid(x) into silu(x) ------------------------------------

def _swish_plus_one(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x) + 1


def _two_spellings(x: torch.Tensor) -> torch.Tensor:
    h = x + 1
    return torch.sigmoid(x) * x - h.sigmoid() * h


def _other_operand(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(y) + torch.mul(y, torch.nn.functional.sigmoid(y))


def _sigmoid_reused(x: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(x)
    return x * s + s


def _across_a_break(x: torch.Tensor) -> torch.Tensor:
    a = x * torch.sigmoid(x)
    torch._dynamo.graph_break()
    return a.sigmoid() * a


def _method_mul(x: torch.Tensor) -> torch.Tensor:
    h = x + 1
    return x.mul(x.sigmoid()) - torch.mul(torch.sigmoid(h), h)


def _shared_sigmoid(x: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(x)
    return x * s + s * x


class _GatedLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.lin = nn.Linear(6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return h * torch.sigmoid(h)


def _drive_backend(backend: Callable[..., Any], fn: Any, inputs: tuple) -> dict[str, Any]:
    """Compile ``fn`` with the learner's backend (through a recorder), call it twice, and run every callable the
    backend returned under the dispatch tracer, on the inputs Dynamo gave it."""
    from collections import Counter

    from .. import transfer_stats
    from ..device import fallback
    from ..grading.structure import kernels_run

    torch._dynamo.reset()
    made: list[tuple[Any, list]] = []

    def recorder(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        out = backend(gm, example_inputs)
        made.append((out, list(example_inputs)))
        return out

    compiled = torch.compile(fn, backend=recorder)
    compiled(*inputs)  # compiles
    fell, moved = dict(fallback.counts), transfer_stats()
    out = compiled(*inputs)  # runs what the backend returned
    after = transfer_stats()
    crossed = sum(after[k] - moved[k] for k in ("host_to_device_bytes", "device_to_host_bytes"))
    fallbacks = sorted(k for k, v in fallback.counts.items() if v != fell.get(k, 0))
    kernels: Counter = Counter()
    for run, example in made:
        kernels.update(op for op, _ in kernels_run(run, *example))
    torch._dynamo.reset()
    return {"out": out.detach().cpu() if isinstance(out, torch.Tensor) else out, "graphs": len(made),
            "device": out.device.type if isinstance(out, torch.Tensor) else type(out).__name__,
            "kernels": {k: kernels[k] for k in ("aten::silu", "aten::sigmoid", "aten::mul.Tensor")},
            "crossed": crossed, "fallbacks": fallbacks}


#: (description, fn, input shapes, graphs, expected kernels (silu, sigmoid, mul), hidden, about)
_SILU_CASES = [
    ("x * torch.sigmoid(x) + 1", _swish_plus_one, [(4, 8)], 1, (1, 0, 0), False, ""),
    ("torch.sigmoid(x) * x - h.sigmoid() * h, h = x + 1", _two_spellings, [(3, 5)], 1, (2, 0, 0), False,
     "sigmoid first, and as a method: "),
    ("x * torch.sigmoid(y) + torch.mul(y, F.sigmoid(y))", _other_operand, [(4, 4), (4, 4)], 1, (1, 1, 1), True,
     "x * sigmoid(y) multiplies by the sigmoid of *another* tensor: it is not silu and must stay; the second "
     "product (torch.mul, F.sigmoid) is: "),
    ("s = torch.sigmoid(x); x * s + s", _sigmoid_reused, [(2, 7)], 1, (1, 1, 0), True,
     "the sigmoid is used again after the product: rewrite the product, keep the sigmoid for its other user: "),
    ("x * torch.sigmoid(x), a graph break, then a.sigmoid() * a", _across_a_break, [(5, 3)], 2, (2, 0, 0), True,
     "a graph break splits the function into two graphs: your backend is called once for each: "),
    ("an nn.Module: h = linear(x); h * torch.sigmoid(h)", _GatedLinear, [(3, 6)], 1, (1, 0, 0), True,
     "fn is a module with parameters: "),
    ("x.mul(x.sigmoid()) - torch.mul(torch.sigmoid(h), h), h = x + 1", _method_mul, [(4, 5)], 1, (2, 0, 0), True,
     "the product as the mul method, and torch.mul with the sigmoid first: "),
    ("s = torch.sigmoid(x); x * s + s * x", _shared_sigmoid, [(3, 3)], 1, (2, 0, 0), True,
     "one sigmoid used by two products: both become silu, and the sigmoid goes once nothing uses it: "),
]


@exercise("ch1.silu_backend", "A backend of your own: x * sigmoid(x) becomes one silu kernel",
          names=["silu_backend"], timeout=90)
def _silu_backend(t: Tester, silu_backend) -> None:
    for i, (desc, fn, shapes, graphs, (silu, sigmoid, mul), hidden, about) in enumerate(_SILU_CASES):
        if isinstance(fn, type):  # a module class: a new module (made here, so that importing seeds nothing)
            fn = fn().to("npu")
        inputs = tuple(randn(*shape, seed=40 + 3 * i + j, device="npu") for j, shape in enumerate(shapes))
        with torch.no_grad():
            expected = fn(*inputs).detach().cpu()
        with _quiet_dynamo(), torch.no_grad():
            outcome = t.call(_drive_backend, silu_backend, fn, inputs)
        if not outcome.ok:
            t.error(f"torch.compile({desc}, backend=silu_backend) on npu", outcome, hidden=hidden,
                    hint=about + "a backend takes (gm, example_inputs) and returns a callable that runs the "
                                 "(rewritten) graph: gm.recompile() after editing gm.graph, then return gm.forward")
            continue
        run = outcome.value
        t.case(f"{desc}: the compiled function's values", lambda r=run: r["out"], expected=expected, hidden=hidden,
               atol=1e-5, hint=about + "the rewritten graph must compute what the function computes: "
                                       "silu(x) = x * sigmoid(x) only when both are the same x")
        t.expect(f"{desc}: your backend received {graphs} graph(s)", run["graphs"] == graphs, hidden=hidden,
                 expected=f"{graphs}", got=str(run["graphs"]),
                 hint=about + "compile with torch.compile(fn, backend=silu_backend)")
        got = run["kernels"]
        t.expect(f"{desc}: kernels the graphs launch on npu", (got["aten::silu"], got["aten::sigmoid"],
                                                               got["aten::mul.Tensor"]) == (silu, sigmoid, mul),
                 hidden=hidden, expected=f"silu {silu}, sigmoid {sigmoid}, mul {mul}",
                 got=f"silu {got['aten::silu']}, sigmoid {got['aten::sigmoid']}, mul {got['aten::mul.Tensor']}",
                 hint=about + "in a Dynamo graph the product is operator.mul or torch.mul (call_function) or the "
                              "mul method, in either operand order, and the sigmoid torch.sigmoid, "
                              "torch.nn.functional.sigmoid or the sigmoid method; replace the product by "
                              "torch.nn.functional.silu(x) and drop the sigmoid once nothing else uses it")
        t.expect(f"{desc}: the graphs run on npu", run["crossed"] == 0 and not run["fallbacks"]
                 and run["device"] == "npu", hidden=hidden,
                 expected="0 bytes between host and npu, no CPU fallback, an npu result",
                 got=f"{run['crossed']} bytes, fallbacks {run['fallbacks']}, result on {run['device']}",
                 hint=about + "run the graph on the tensors it is given (no .cpu() or copies)")
