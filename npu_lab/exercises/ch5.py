"""Chapter 5b: TorchDynamo - read guards, remove graph breaks, compile once for every size.

Four exercises:

* ``ch5.predict_recompiles`` - read the guards of a compiled function and predict which new
  inputs make Dynamo recompile (checked against what a counting backend measures);
* ``ch5.remove_graph_break`` - rewrite :func:`gated_norm` (``.item()``, a data-dependent ``if``
  and a ``print``) so that Dynamo captures it as one graph (``fullgraph=True``), with the same values;
* ``ch5.compile_once`` - run a function on a stream of requests (changing batch sizes, changing
  Python numbers) so that Dynamo compiles it exactly once;
* ``ch5.lean_guards`` - build a ``guard_filter_fn`` (a Dynamo hook that reads every guard before it is
  installed) that drops the tensor guards on a served model's parameters and buffers and keeps the rest.

The functions the exercises use live here, so that the notebook shows exactly the code the
checks measure: :func:`scale_rows` and :func:`softmax_rows` (guards to read), :func:`gated_norm`
(graph breaks to remove), :func:`step_fn` and :func:`sharpen` (recompiles to avoid). Helpers:
:func:`read_guards` (the guards of one compiled entry) and :func:`tensor_guard` (a
``TENSOR_MATCH`` guard taken apart).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..grading.inputs import randn
from ..grading.predictions import question
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester
from ..inspect.dynamo import Guard, parse_guards

chapter("ch5", "TorchDynamo: bytecode capture, guards and graph breaks", [
    "Through PEP 523 frame evaluation Dynamo sees each Python frame before it runs",
    "Dynamo runs a frame's bytecode symbolically and records the tensor operations into an FX graph",
    "Dynamo writes new bytecode that calls the compiled graph and does the rest in plain Python",
    "Guards check the inputs (type, value, tensor dtype/device/shape/stride) and global state before a "
    "cached graph is reused",
    "A failing guard makes Dynamo recompile; a second size makes that dimension dynamic (automatic dynamic)",
    "mark_dynamic makes a dimension symbolic from the first call; sizes 0 and 1 stay specialized",
    "A graph break (.item(), print, an if on a tensor's value) splits the function into several graphs",
    "torch._dynamo.explain and fullgraph=True find graph breaks; tensor operations such as torch.where remove them",
    "A guard_filter_fn chooses which guards Dynamo installs; a dropped guard is never checked again",
])

# Predict, then run (the chapter's questions; the cells measure the answers)
question("ch5.failing_guards",
         "f was compiled on x (4, 8) float32 on npu and n = 3. Of the five calls (new values, same shape; x of shape "
         "(6, 8); x in float64; x.t().t(); n = 4), how many fail a guard?",
         why="a tensor guard checks dtype, device, size and stride, not values, and x.t().t() has x's shape and "
             "strides; n is a constant in the graph, so n = 4 fails its EQUALS_MATCH: (6, 8), float64 and n = 4 fail",
         choices=(0, 1, 2, 3, 4, 5))
question("ch5.dropped_guard",
         "f is compiled with a guard_filter_fn that drops the guard on the global SCALE, then SCALE changes from "
         "1.5 to 2.5. Is the compiled f's answer still right (True or False)?",
         why="1.5 is a constant inside the graph; the guard was the only thing that would have noticed the new "
             "value, so the old graph runs and adds 1.5",
         choices=(True, False))
question("ch5.automatic_graphs",
         "layer is compiled with the default (automatic dynamic) policy and called on batch sizes 4, 8, 3, 16, 5, "
         "12, 7, 9, 6, 10, 11, 13 and then 1. How many graphs does Dynamo compile in all?",
         why="a static graph for 4, a graph with a symbolic batch size at the second size (8) that serves every "
             "other size >= 2, and one more for 1: sizes 0 and 1 are specialized",
         choices=tuple(range(1, 14)))
question("ch5.noisy_graphs",
         "noisy_clip has a print, a .item() and an if on a tensor: three graph breaks. How many graphs does "
         "Dynamo compile from it?",
         why="each break ends the graph before it and the rest runs in a resume function that Dynamo compiles "
             "again: 3 breaks cut the function into 4 pieces, each with tensor operations",
         choices=tuple(range(1, 8)))


# ---------------------------------------------------------------------------------------------
# helpers shared with the notebooks
# ---------------------------------------------------------------------------------------------

def read_guards(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Guard]:
    """The guards Dynamo attaches to ``fn`` compiled on ``args`` (its first compiled entry).

    Resets Dynamo, compiles ``fn`` with a backend that runs the graph as it is, calls it once,
    and reads the entry's guard manager (the object Dynamo evaluates on every later call).
    Each :class:`~npu_lab.inspect.dynamo.Guard` has ``kind`` (``TENSOR_MATCH``, ``EQUALS_MATCH``...),
    ``code`` (a Python expression over ``L``, the frame's local variables) and ``source`` (what it
    guards: ``L['x']``, ``"symbolic shapes"`` for relations between sizes, or ``"global state"``).
    """
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    torch._dynamo.reset()
    try:
        torch.compile(fn, backend="eager")(*args, **kwargs)
        entries = _debug_get_cache_entry_list(fn.__code__)
        return parse_guards(str(entries[0].guard_manager)) if entries else []
    finally:
        torch._dynamo.reset()


@dataclass
class TensorGuard:
    """What one ``TENSOR_MATCH`` guard requires of a tensor (``None`` in a size or stride: any value)."""

    source: str  # L['x']
    name: str  # x
    dtype: torch.dtype
    device: str  # "npu", "cpu", ...
    requires_grad: bool
    size: list[int | None]
    stride: list[int | None]


_CHECK_TENSOR = re.compile(
    r"check_tensor\((?P<source>.+?), \w+, DispatchKeySet\((?P<keys>[^)]*)\), torch\.(?P<dtype>\w+), "
    r"device=\w+, requires_grad=(?P<grad>True|False), size=\[(?P<size>[^\]]*)\], stride=\[(?P<stride>[^\]]*)\]")


def _ints(text: str) -> list[int | None]:
    return [None if s.strip() == "None" else int(s) for s in text.split(",") if s.strip()]


def tensor_guard(code: str) -> TensorGuard:
    """Take a ``TENSOR_MATCH`` guard's code (``check_tensor(L['x'], Tensor, ...)``) apart.

    >>> g = tensor_guard("check_tensor(L['x'], Tensor, DispatchKeySet(CPU, BackendSelect), torch.float32, "
    ...                  "device=None, requires_grad=False, size=[None, 8], stride=[8, 1])")
    >>> g.name, g.dtype, g.device, g.size
    ('x', torch.float32, 'cpu', [None, 8])
    """
    m = _CHECK_TENSOR.search(code)
    if m is None:
        raise ValueError(f"not a TENSOR_MATCH guard: {code[:120]}")
    backend = m.group("keys").split(",")[0].strip()
    device = torch._C._get_privateuse1_backend_name() if backend == "PrivateUse1" else backend.lower()
    name = re.fullmatch(r"L\['(\w+)'\]", m.group("source"))
    return TensorGuard(m.group("source"), name.group(1) if name else m.group("source"),
                       getattr(torch, m.group("dtype")), device, m.group("grad") == "True",
                       _ints(m.group("size")), _ints(m.group("stride")))


def scale_rows(x: torch.Tensor, n: int, mode: str) -> torch.Tensor:
    """Scale ``x`` by ``n``, then reduce each row by ``mode`` ("sum" or "max")."""
    y = x * n
    if mode == "sum":
        return y.sum(dim=1)
    return y.amax(dim=1)


def softmax_rows(x: torch.Tensor, t: float) -> torch.Tensor:
    """Softmax of each row of ``x`` at temperature ``t``."""
    return (x / t).softmax(dim=-1)


def gated_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Project, normalise by the largest magnitude, then gate by the sign of the mean."""
    h = x @ w
    scale = h.abs().max().item()  # a Python float: the value leaves the graph
    h = h / scale
    if h.mean() > 0:  # Python branches on a tensor's value
        h = torch.relu(h)
    else:
        h = torch.tanh(h)
    print("gated_norm: gate applied")  # a side effect, outside any graph
    return h


def step_fn(x: torch.Tensor, w: torch.Tensor, step: int) -> torch.Tensor:
    """One layer whose learning-rate-like factor decays with the step number."""
    lr = 0.1 / (1 + step)
    return torch.tanh(x @ w) * lr


def sharpen(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Probabilities from ``logits`` at a temperature that changes from call to call."""
    return torch.softmax(logits / temperature, dim=-1)


def _warm_formatting(value: object) -> None:
    """Format the check's own expected value once, outside any time limit.

    The results table formats expected values under a short time limit; formatting an npu tensor
    the first time compiles the device's kernels for it, which can take longer than that limit.
    """
    repr(value)


# ---------------------------------------------------------------------------------------------
# ch5.predict_recompiles
# ---------------------------------------------------------------------------------------------

def _first_k(x: torch.Tensor, k: int, clip: bool, note: str) -> torch.Tensor:
    y = x[:, :k] * 2
    if clip:
        y = y.clamp(-1, 1)
    return y


def _npu(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return randn(*shape, seed=seed, dtype=dtype, device="npu")


def _marked(t: torch.Tensor, *dims: int) -> torch.Tensor:
    for d in dims:
        torch._dynamo.mark_dynamic(t, d)
    return t


@dataclass
class RecompileCase:
    """A function, the arguments of its first call, and new arguments to predict for."""

    description: str
    fn: Callable[..., Any]
    first: Callable[[], dict[str, Any]]  # made fresh: mark_dynamic changes the tensor it marks
    candidates: list[tuple[str, Callable[[], dict[str, Any]]]]
    hidden: bool = False


def recompile_cases() -> list[RecompileCase]:
    """The public cases of ``ch5.predict_recompiles`` (the notebook shows them; the check adds hidden ones)."""
    return [
        RecompileCase("scale_rows, first called on x (4, 8) float32 on npu, n=2, mode='sum'", scale_rows,
                      lambda: {"x": _npu(4, 8), "n": 2, "mode": "sum"}, [
                          ("new values, same shape", lambda: {"x": _npu(4, 8, seed=1), "n": 2, "mode": "sum"}),
                          ("x of shape (6, 8)", lambda: {"x": _npu(6, 8, seed=1), "n": 2, "mode": "sum"}),
                          ("x in float64", lambda: {"x": _npu(4, 8, seed=1, dtype=torch.float64), "n": 2,
                                                    "mode": "sum"}),
                          ("x that requires grad", lambda: {"x": _npu(4, 8, seed=1).requires_grad_(), "n": 2,
                                                            "mode": "sum"}),
                          ("x = y.t() for a (8, 4) y: same shape, other strides",
                           lambda: {"x": _npu(8, 4, seed=1).t(), "n": 2, "mode": "sum"}),
                          ("x = y[:4] for a (10, 8) y: a view with the same strides",
                           lambda: {"x": _npu(10, 8, seed=1)[:4], "n": 2, "mode": "sum"}),
                          ("x on the cpu", lambda: {"x": randn(4, 8, seed=1), "n": 2, "mode": "sum"}),
                          ("x of shape (4, 8, 1): one more dimension",
                           lambda: {"x": _npu(4, 8, 1, seed=1), "n": 2, "mode": "sum"}),
                          ("n = 3", lambda: {"x": _npu(4, 8, seed=1), "n": 3, "mode": "sum"}),
                          ("mode = 'max'", lambda: {"x": _npu(4, 8, seed=1), "n": 2, "mode": "max"}),
                      ]),
        RecompileCase("softmax_rows, first called on x (4, 16) with dim 0 marked dynamic, t=0.5", softmax_rows,
                      lambda: {"x": _marked(_npu(4, 16), 0), "t": 0.5}, [
                          ("x of shape (32, 16)", lambda: {"x": _npu(32, 16, seed=1), "t": 0.5}),
                          ("x of shape (1, 16)", lambda: {"x": _npu(1, 16, seed=1), "t": 0.5}),
                          ("x of shape (4, 32)", lambda: {"x": _npu(4, 32, seed=1), "t": 0.5}),
                          ("t = 2.0", lambda: {"x": _npu(4, 16, seed=1), "t": 2.0}),
                          ("x of shape (7, 16), t = 0.5", lambda: {"x": _npu(7, 16, seed=1), "t": 0.5}),
                      ]),
    ]


def _hidden_recompile_cases() -> list[RecompileCase]:
    """The hidden cases of ``ch5.predict_recompiles`` (graded, never shown)."""
    return [
        RecompileCase("x[:, :k] * 2, clamped if clip; note unused; first x (3, 6), k=4, clip=True, note='a'",
                      _first_k, lambda: {"x": _npu(3, 6), "k": 4, "clip": True, "note": "a"}, [
                          ("note = 'b'", lambda: {"x": _npu(3, 6, seed=1), "k": 4, "clip": True, "note": "b"}),
                          ("clip = False", lambda: {"x": _npu(3, 6, seed=1), "k": 4, "clip": False, "note": "a"}),
                          ("k = 5", lambda: {"x": _npu(3, 6, seed=1), "k": 5, "clip": True, "note": "a"}),
                          ("x of shape (5, 6)", lambda: {"x": _npu(5, 6, seed=1), "k": 4, "clip": True, "note": "a"}),
                          ("x in float64", lambda: {"x": _npu(3, 6, seed=1, dtype=torch.float64), "k": 4,
                                                    "clip": True, "note": "a"}),
                          ("new values", lambda: {"x": _npu(3, 6, seed=2), "k": 4, "clip": True, "note": "a"}),
                          ("x of shape (3, 6, 1)", lambda: {"x": _npu(3, 6, 1, seed=1), "k": 4, "clip": True,
                                                            "note": "a"}),
                          ("x of shape (3, 6) transposed from a (6, 3) tensor",
                           lambda: {"x": _npu(6, 3, seed=1).t(), "k": 4, "clip": True, "note": "a"}),
                      ], hidden=True),
    ]


class CountingBackend:
    """A ``torch.compile`` backend around another one (default ``"eager"``) that counts compiles and runs.

    ``compiles``: graphs Dynamo handed over; ``runs``: calls of the compiled graphs.
    """

    def __init__(self, backend: str | Callable[..., Any] = "eager") -> None:
        self.backend = backend
        self.compiles = 0
        self.runs = 0
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Callable:
        from torch._dynamo.backends.registry import lookup_backend

        self.compiles += 1
        self.graphs.append(gm)
        compile_fn = lookup_backend(self.backend) if isinstance(self.backend, str) else self.backend
        compiled = compile_fn(gm, example_inputs, **kwargs)

        def run(*args: Any) -> Any:
            self.runs += 1
            return compiled(*args)

        return run


def _measure_recompiles(case: RecompileCase) -> list[bool]:
    """For each candidate: compile ``case.fn`` afresh on the first arguments, call it on the candidate,
    and say whether Dynamo compiled again (measured with :class:`CountingBackend`)."""
    out = []
    for _, make in case.candidates:
        torch._dynamo.reset()
        counter = CountingBackend()
        compiled = torch.compile(case.fn, backend=counter)
        compiled(**case.first())
        compiled(**make())
        out.append(counter.compiles > 1)
    torch._dynamo.reset()
    return out


_MEASURED: dict[str, list[bool]] = {}


def _measured(case: RecompileCase) -> list[bool]:
    if case.description not in _MEASURED:
        _MEASURED[case.description] = _measure_recompiles(case)
    return _MEASURED[case.description]


def _predictions_ok(got: Any, expected: list[bool], names: list[str]) -> tuple[bool, str]:
    if not isinstance(got, (list, tuple)):
        return False, f"expected a list of booleans, got {type(got).__name__}" + (
            " (did you forget to `return`?)" if got is None else "")
    if len(got) != len(expected):
        return False, f"{len(got)} answers for {len(expected)} candidates"
    if not all(isinstance(g, bool) for g in got):
        return False, "every answer must be True (recompiles) or False (reuses the graph)"
    wrong = [f"{n!r} {'recompiles' if e else 'reuses the graph'}" for n, g, e in zip(names, got, expected) if g != e]
    return (not wrong), ("wrong for: " + "; ".join(wrong)) if wrong else ""


@exercise("ch5.predict_recompiles", "Read the guards: which new inputs make Dynamo recompile?",
          names=["predict_recompiles"], timeout=60)
def _predict_recompiles(t: Tester, predict_recompiles) -> None:
    hint = ("a candidate recompiles when any guard on the arguments fails: compare a tensor with its "
            "TENSOR_MATCH (dtype, device, requires_grad, size and stride; None matches any value) and evaluate "
            "the other guards' code with eval(g.code, {'L': candidate}); skip the 'global state' group; a tensor "
            "with more or fewer dimensions than the guard's size list fails it")
    for case in [*recompile_cases(), *_hidden_recompile_cases()]:
        guards = read_guards(case.fn, **case.first())
        names = [n for n, _ in case.candidates]
        expected = _measured(case)
        candidates = [make() for _, make in case.candidates]
        t.case(f"predict_recompiles(guards of {case.description}, {len(candidates)} candidates)",
               predict_recompiles, guards, candidates, expected=expected, hidden=case.hidden,
               hint=hint if not case.hidden else (
                   "an argument nobody reads has no guard at all; a bool has its own TRUE_MATCH/FALSE_MATCH "
                   "guard; an int used to slice is specialized like any other int; a tensor with another number of "
                   "dimensions fails its TENSOR_MATCH"),
               check=lambda got, e=expected, n=names: _predictions_ok(got, e, n))


# ---------------------------------------------------------------------------------------------
# ch5.remove_graph_break
# ---------------------------------------------------------------------------------------------

def _gated_norm_reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """gated_norm without its print (same values)."""
    h = x @ w
    h = h / h.abs().max().item()
    return torch.relu(h) if h.mean() > 0 else torch.tanh(h)


def _gate_inputs() -> list[tuple[str, torch.Tensor, torch.Tensor, bool]]:
    """(description, x, w, hidden): inputs whose mean after the projection is positive, then negative."""
    cases = []
    for desc, (n, k, m), seed, hidden in (("x (4, 8), w (8, 8)", (4, 8, 8), 0, False),
                                          ("x (16, 5), w (5, 3)", (16, 5, 3), 3, True)):
        x, w = randn(n, k, seed=seed, device="npu"), randn(k, m, seed=seed + 1, device="npu")
        if (x @ w).mean().item() < 0:
            w = -w
        cases.append((f"{desc}, positive mean: the relu side", x, w, hidden))
        cases.append((f"{desc}, negative mean: the tanh side", x, -w, hidden))
    # small integers, and rows that cancel: the mean after the projection is exactly 0 (gated_norm: the tanh side)
    g = torch.Generator().manual_seed(7)
    rows = torch.randint(-3, 4, (2, 8), generator=g).float()
    w0 = torch.randint(-2, 3, (8, 3), generator=g).float()
    cases.append(("x (4, 8), w (8, 3), a mean of exactly 0: the tanh side", torch.cat([rows, -rows]).to("npu"),
                  w0.to("npu"), True))
    return cases


@exercise("ch5.remove_graph_break", "Remove the graph breaks from gated_norm", names=["gated_norm_fixed"],
          timeout=60)
def _remove_graph_break(t: Tester, gated_norm_fixed) -> None:
    from ..grading.structure import graph_breaks

    inputs = _gate_inputs()
    references = [_gated_norm_reference(x, w) for _, x, w, _ in inputs]  # before the learner's code runs
    _warm_formatting(references)
    for (desc, x, w, hidden), want in zip(inputs, references):
        side = "relu" if "relu" in desc else "tanh"
        about = ("" if not hidden else " (this input's mean is exactly 0, and gated_norm's `if h.mean() > 0` "
                 "then takes the tanh side)" if "exactly 0" in desc else
                 f" (this input has other shapes, x (16, 5) and w (5, 3), and takes the {side} side)")
        t.case(f"gated_norm_fixed({desc}) on npu, called directly", gated_norm_fixed, x, w,
               expected=want, hidden=hidden,
               hint="keep every step of gated_norm: divide by the largest magnitude, then relu where the mean is "
                    "positive and tanh otherwise" + about)
    x, w = inputs[0][1], inputs[0][2]
    outcome = t.call(graph_breaks, gated_norm_fixed, x, w)
    if not outcome.ok:
        t.error("torch._dynamo.explain(gated_norm_fixed)(x, w)", outcome,
                hint="the function must run under Dynamo without raising")
    else:
        reasons = [r.strip().splitlines()[0] for r in outcome.value]
        t.expect("torch._dynamo.explain finds no graph break", not reasons, expected="0 graph breaks",
                 got=f"{len(reasons)}: " + "; ".join(reasons) if reasons else "0",
                 hint=".item() turns a tensor into a Python number (keep it a tensor); an `if` on a tensor needs its "
                      "value (compute both sides and pick with torch.where); print is a side effect (drop it)")
    for group_hidden in (False, True):
        # the two sides of one shape (the mean-of-0 input, of another shape, is graded called directly)
        group = [(d, x, w) for d, x, w, h in inputs if h == group_hidden and "exactly 0" not in d]
        want = [r for (d, _, _, h), r in zip(inputs, references) if h == group_hidden and "exactly 0" not in d]
        torch._dynamo.reset()
        counter = CountingBackend("npu")

        def run_all(group=group, counter=counter):
            compiled = torch.compile(gated_norm_fixed, backend=counter, fullgraph=True)
            return [compiled(x, w) for _, x, w in group]

        outcome = t.call(run_all)
        torch._dynamo.reset()
        what = " and ".join(d.split(", ")[-1] for d, _, _ in group)
        if not outcome.ok:
            t.error(f"torch.compile(gated_norm_fixed, backend='npu', fullgraph=True) on {what}", outcome,
                    hidden=group_hidden,
                    hint="fullgraph=True raises at the first graph break: remove them all")
            continue
        other = " (these inputs have other shapes: a graph must not depend on them)" if group_hidden else ""
        t.expect(f"fullgraph=True on npu: one graph serves both sides ({what})", counter.compiles == 1,
                 hidden=group_hidden, expected="1 graph compiled", got=f"{counter.compiles}",
                 hint="both branches must live in one graph (torch.where), so new data never needs a new graph"
                      + other)
        t.case(f"the compiled function's values on npu ({what})", lambda v: v, outcome.value, expected=want,
               hidden=group_hidden, hint="the compiled graph must compute what gated_norm computes" + other)


# ---------------------------------------------------------------------------------------------
# ch5.compile_once
# ---------------------------------------------------------------------------------------------

def _shift_scale(x: torch.Tensor, bias: torch.Tensor, k: int, alpha: float) -> torch.Tensor:
    h = torch.relu(x * k + bias * alpha)  # x: (batch, seq, 6)
    return h.reshape(x.shape[0], x.shape[1], 2, 3).sum(dim=(1, 3))  # the 6 is fixed by the 2 * 3


def _masked_mean(x: torch.Tensor, mask: torch.Tensor, eps: float) -> torch.Tensor:
    """Mean over dimension 1 of x (batch, seq, 6) where mask (batch, seq) is 1."""
    return (x * mask.unsqueeze(-1)).sum(dim=1) / (mask.sum(dim=1, keepdim=True) + eps)


def compile_once_cases() -> list[tuple[str, Callable[..., Any], Callable[[], list[tuple]], bool]]:
    """(description, fn, requests factory, hidden) of ``ch5.compile_once``."""
    w = randn(8, 4, seed=9, device="npu")
    bias = randn(6, seed=8, device="npu")
    return [
        ("step_fn: batch sizes 4, 7, 16, 5, 9 and steps 0..4", step_fn,
         lambda: [(randn(b, 8, seed=s, device="npu"), w, s) for s, b in enumerate([4, 7, 16, 5, 9])], False),
        ("sharpen: batch sizes 3, 8, 5, 12 and temperatures 1.0, 0.5, 2.0, 0.25", sharpen,
         lambda: [(randn(b, 10, seed=i, device="npu"), temp)
                  for i, (b, temp) in enumerate([(3, 1.0), (8, 0.5), (5, 2.0), (12, 0.25)])], False),
        ("relu(x * k + bias * alpha) regrouped as (batch, seq, 2, 3): batch and seq change, k and alpha change",
         _shift_scale,
         lambda: [(randn(b, s, 6, seed=i, device="npu"), bias, k, a)
                  for i, (b, s, k, a) in enumerate([(2, 7, 1, 1), (5, 4, 2, 1.5), (3, 9, 3, -1.0),
                                                    (6, 3, 0, 2.5)])], True),
        ("masked mean over seq: batch stays 4, seq is 5 for three requests and changes only then (9, 7); eps "
         "changes", _masked_mean,
         lambda: [(randn(4, s, 6, seed=i, device="npu"), (randn(4, s, seed=20 + i, device="npu") > 0).float(), e)
                  for i, (s, e) in enumerate([(5, 1e-3), (5, 1e-2), (5, 1.0), (9, 0.5), (7, 1e-3)])], True),
    ]


class _KeepingBackend(CountingBackend):
    """A :class:`CountingBackend` that also keeps every output its compiled graphs returned (the check's own)."""

    def __init__(self, backend: str | Callable[..., Any] = "eager") -> None:
        super().__init__(backend)
        self.outputs: list[Any] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Callable:
        run = super().__call__(gm, example_inputs, **kwargs)

        def keep(*args: Any) -> Any:
            out = run(*args)
            self.outputs.extend(out if isinstance(out, (list, tuple)) else [out])
            return out

        return keep


def _from_the_graphs(outputs: Any, backend: _KeepingBackend) -> bool:
    """Whether every returned output is a tensor the compiled graphs returned (not a copy, not an eager result)."""
    if type(outputs) not in (list, tuple):
        return False
    made = {id(o) for o in backend.outputs}
    return all(id(o) in made for o in outputs)


@exercise("ch5.compile_once", "Compile once for every batch size and every step", names=["run_compiled_once"],
          timeout=60)
def _compile_once(t: Tester, run_compiled_once) -> None:
    for desc, fn, make, hidden in compile_once_cases():
        requests = make()
        expected = [fn(*r) for r in requests]
        _warm_formatting(expected)
        torch._dynamo.reset()
        backend = _KeepingBackend("npu")
        outcome = t.call(run_compiled_once, fn, requests, backend)
        torch._dynamo.reset()
        if not outcome.ok:
            t.error(f"run_compiled_once({desc})", outcome, hidden=hidden,
                    hint="mark only the dimensions that change as dynamic: a dimension the function ties to a fixed "
                         "size (x's features against w) cannot be dynamic")
            continue
        t.case(f"{desc}: the outputs, in order", lambda v: list(v) if isinstance(v, (list, tuple)) else v,
               outcome.value, expected=expected, hidden=hidden,
               hint="return [compiled(*request) for each request], with the values fn gives")
        about = ("" if not hidden else
                 "(here a dimension changes only at the fourth request, and the mask's seq dimension with it: "
                 "look at every request, not the first two; a float eps changes, 1.0 among them) "
                 if fn is _masked_mean else
                 "(here two dimensions change, batch and seq, while the last one is tied to 2 * 3 by a reshape; "
                 "an int k and a number alpha change, k = 0 and 1 among them, and alpha is the int 1 in the first "
                 "request and a float after it: a tensor made from each value has the dtype of that value) ")
        t.expect(f"{desc}: Dynamo compiled once", backend.compiles == 1, hidden=hidden,
                 expected="1 graph compiled", got=f"{backend.compiles} graph(s) compiled",
                 hint=about + "a Python int or float is a constant in the graph (a guard on its value), and so is "
                      "every size at first: pass numbers as 0-dim tensors and torch._dynamo.mark_dynamic the "
                      "dimensions that change before the first call (dynamic=True still specializes the values 0 "
                      "and 1)")
        t.expect(f"{desc}: every request ran through the compiled graph", backend.runs == len(requests),
                 hidden=hidden, expected=f"{len(requests)} runs of the compiled graph",
                 got=f"{backend.runs}", hint="compile fn once with torch.compile(fn, backend=backend) and call the "
                                             "compiled function for every request")
        t.expect(f"{desc}: the outputs returned are the compiled function's own", _from_the_graphs(outcome.value,
                                                                                                    backend),
                 hidden=hidden, expected="each output is the tensor the compiled call returned",
                 got="yes" if _from_the_graphs(outcome.value, backend) else "a copy, or an output computed elsewhere",
                 hint="return what compiled(*request) returns for each request, as it is (no copy, no eager fn(...))")



# ---------------------------------------------------------------------------------------------
# ch5.lean_guards: a guard_filter_fn that reads the guards and drops the weights' tensor guards
# ---------------------------------------------------------------------------------------------

#: The guards the rule drops: TENSOR_MATCH guards on a module's parameters and buffers.
_WEIGHT_GUARD = re.compile(r"\._(parameters|buffers)\[")
#: A Python number a case's function reads from the module's globals.
GAIN = 1.5


def _keeps(entry: Any) -> bool:
    """The rule (the grader's reference): keep a guard unless it is a weight's tensor guard."""
    return not (entry.guard_type == "TENSOR_MATCH" and _WEIGHT_GUARD.search(entry.name))


def _scaled_tanh(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * GAIN


class _ScaleShift(torch.nn.Module):
    """A parameter and a buffer of its own, inside a container, and a Python float attribute."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.scale = torch.nn.Parameter(torch.randn(6))
        self.register_buffer("shift", torch.randn(6))
        self.alpha = 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * self.scale + self.shift) * self.alpha


class _ShiftWithOffset(_ScaleShift):
    """A parameter, a buffer, and a plain tensor attribute ``offset`` (neither a parameter nor a buffer)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.offset


def _offset_model() -> torch.nn.Module:
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(6, 6), _ShiftWithOffset()).to("npu")
    model[1].offset = torch.full((6,), 0.25, device="npu")  # a plain attribute: .to() would not move it
    return model


def _bn_model() -> torch.nn.Module:
    torch.manual_seed(2)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU())


def _nested_model() -> torch.nn.Module:
    torch.manual_seed(4)
    return torch.nn.Sequential(torch.nn.Linear(6, 6), _ScaleShift())


def _set_gain(value: float) -> None:
    global GAIN
    GAIN = value


def _play(target: Any, steps: list[tuple[str, Any]], call: Callable[[Any], Any]) -> list[torch.Tensor]:
    """Run ``steps`` on ``target``: ("call", x), ("eval", None), ("scale_weights", k), ("alpha", v), ("offset", t),
    ("gain", v)."""
    outs = []
    try:
        for kind, arg in steps:
            if kind == "call":
                outs.append(call(arg).detach().cpu())
            elif kind == "eval":
                target.eval()
            elif kind == "scale_weights":
                for p in target.parameters():
                    p.mul_(arg)
            elif kind == "alpha":
                target[1].alpha = arg
            elif kind == "offset":
                target[1].offset = arg
            elif kind == "gain":
                _set_gain(arg)
    finally:
        _set_gain(1.5)
    return outs


def _drive_guards(lean_guards: Callable[..., Any], make: Callable[[], Any], steps: list[tuple[str, Any]]
                  ) -> dict[str, Any]:
    """Compile a fresh target with the learner's filter (through a recorder) and play the steps."""
    target = make()
    if isinstance(target, torch.nn.Module):
        target = target.to("npu")
    seen: list[tuple[str, str, Any, bool]] = []

    def recorder(entries: list[Any]) -> list[bool]:
        flags = lean_guards(entries)
        flags = list(flags) if type(flags) in (list, tuple) else [None] * len(entries)
        flags += [None] * (len(entries) - len(flags))
        for e, f in zip(entries, flags):
            seen.append((str(e.name), str(e.guard_type), f if type(f) is bool else None, _keeps(e)))
        return [f if type(f) is bool else True for f in flags[:len(entries)]]

    torch._dynamo.reset()
    backend = CountingBackend("npu")
    compiled = torch.compile(target, backend=backend, options={"guard_filter_fn": recorder})
    with torch.no_grad():
        outs = _play(target, steps, compiled)
    torch._dynamo.reset()
    return {"outs": outs, "compiles": backend.compiles, "seen": seen}


def _lean_cases() -> list[tuple[str, Callable[[], Any], list[tuple[str, Any]], bool, str]]:
    x3, x5 = randn(3, 4, seed=1, device="npu"), randn(5, 4, seed=2, device="npu")
    y = randn(4, 6, seed=3, device="npu")
    return [
        ("Linear + BatchNorm1d + ReLU: train call, eval call, weights scaled in place, a batch of 5", _bn_model,
         [("call", x3), ("eval", None), ("call", x3), ("scale_weights", 2.0), ("call", x3), ("call", x5)], False,
         ""),
        ("tanh(x) * GAIN, a global that changes from 1.5 to 3.0", lambda: _scaled_tanh,
         [("call", y), ("gain", 3.0), ("call", y)], False,
         "a function without parameters: every guard stays (the global's value guard too): "),
        ("Linear, then a module with its own Parameter, buffer and float attribute alpha (0.5, then 2.0)",
         _nested_model, [("call", y), ("scale_weights", 0.5), ("call", y), ("alpha", 2.0), ("call", y)], True,
         "a Parameter and a buffer registered directly on a nested module, and a Python float attribute whose "
         "value guard must stay: "),
        ("a module with a plain tensor attribute offset (not a parameter, not a buffer), replaced by one of shape "
         "(1,)", _offset_model,
         [("call", y), ("offset", torch.full((1,), -0.5, device="npu")), ("call", y)], True,
         "a tensor attribute that is neither a Parameter nor a registered buffer is not a weight: its TENSOR_MATCH "
         "guard (fn._modules['1'].offset) must stay: "),
        ("tanh(x) * GAIN on a float32 input, then the same values in float64", lambda: _scaled_tanh,
         [("call", y), ("call", y.double())], True,
         "the input's tensor guard (its dtype) must stay, or the float32 graph runs on the float64 input: "),
    ]


@exercise("ch5.lean_guards", "A guard filter: drop the weights' tensor guards, keep the rest", names=["lean_guards"],
          timeout=90)
def _lean_guards(t: Tester, lean_guards) -> None:
    for desc, make, steps, hidden, about in _lean_cases():
        reference = make()
        if isinstance(reference, torch.nn.Module):
            reference = reference.to("npu")
        with torch.no_grad():
            expected = _play(reference, steps, reference)  # eager, before the learner's code runs
        outcome = t.call(_drive_guards, lean_guards, make, steps)
        if not outcome.ok:
            t.error(f"torch.compile(..., options={{'guard_filter_fn': lean_guards}}): {desc}", outcome,
                    hidden=hidden, hint=about + "lean_guards(entries) gets a list of guard entries (name, "
                                                "guard_type, ...) and returns one bool per entry: True keeps it")
            continue
        run = outcome.value
        seen = run["seen"]
        wrong = [(n, g, f, k) for n, g, f, k in seen if f is not k]
        if wrong:
            n, g, f, k = wrong[0]
            got = ("not a bool" if f is None else "kept" if f else "dropped") + f": {g} on {n}"
            if len(wrong) > 1:
                got += f" (and {len(wrong) - 1} more)"
        else:
            got = f"{sum(1 for *_, k in seen if not k)} of {len(seen)} guards dropped, as the rule says"
        t.expect(f"{desc}: each guard kept or dropped by the rule", bool(seen) and not wrong, hidden=hidden,
                 expected="drop TENSOR_MATCH guards on ._parameters[...] / ._buffers[...], keep every other",
                 got=got if seen else "your filter saw no guards",
                 hint=about + "read entry.guard_type and entry.name: drop (False) exactly the TENSOR_MATCH guards "
                              "whose name has ._parameters[ or ._buffers[ in it, keep (True) every other guard "
                              "(the module's training flag, Python attributes, globals, the inputs)")
        t.case(f"{desc}: the compiled outputs after each step", lambda r=run: r["outs"],
               expected=expected, hidden=hidden, atol=1e-4,
               rtol=1e-4, hint=about + "a guard you drop is never checked again: if what it protected changes "
                                       "(training to eval, a float attribute, a global, the input's dtype), the old "
                                       "graph runs and gives the old answer")
