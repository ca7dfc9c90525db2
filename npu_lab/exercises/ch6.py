"""Chapter 6: AOTAutograd - saved tensors, a backend's compiler pair, and the two partitioners.

Three exercises:

* ``ch6.count_saved`` - count the tensors (and bytes) a model's forward graph saves for its
  backward graph, checked against :func:`npu_lab.inspect.aot.inspect_aot`;
* ``ch6.compiler_pair`` - a ``fw_compiler``/``bw_compiler`` pair for
  ``torch._dynamo.backends.common.aot_autograd`` that logs both graphs and runs them;
* ``ch6.predict_partitioner`` - predict, per function, whether the default or the min-cut
  partitioner saves fewer bytes (measured with ``inspect_aot``).

The functions of the prediction exercise live here (:data:`PARTITION_FUNCS`) so that the
notebook shows exactly the code the check measures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..grading.inputs import randn
from ..grading.references import measured
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester, short
from ..grading.values import check_plain, tensors_close

chapter("ch6", "AOTAutograd: forward and backward graphs ahead of time", [
    "AOTAutograd traces the forward and the backward together into one joint graph of ATen operators",
    "A partitioner splits the joint graph into a forward graph and a backward graph",
    "The forward graph returns the tensors the backward needs (saved tensors) as extra outputs",
    "Functionalization removes in-place operators; a mutated input becomes an extra output copied back",
    "Decompositions lower operators to core ATen; the npu backend decomposes only what it has no kernel for",
    "Min-cut rematerialization saves fewer bytes by recomputing cheap operators in the backward",
    "A backend receives both graphs through fw_compiler/bw_compiler and returns boxed callables",
])


# ---------------------------------------------------------------------------------------------
# helpers shared with the notebooks
# ---------------------------------------------------------------------------------------------

def functional(model: nn.Module) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    """``(fn, params)`` with ``fn(x, *params) == model(x)``: the parameters become inputs.

    AOTAutograd differentiates with respect to a function's inputs, so a module's parameters are
    passed in explicitly (``torch.func.functional_call``), as ``aot_module`` does internally.
    """
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]

    def fn(x: torch.Tensor, *ps: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(model, dict(zip(names, ps)), (x,))

    return fn, params


def saved_by_default_partitioner(model: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """(number of tensors, bytes) the default partitioner saves for ``model(x)`` (via ``inspect_aot``)."""
    from ..inspect.aot import inspect_aot

    fn, params = functional(model)
    part = inspect_aot(fn, x, *params).default
    return len(part.saved), part.saved_bytes


# ---------------------------------------------------------------------------------------------
# ch6.count_saved
# ---------------------------------------------------------------------------------------------

def _seeded(seed: int, *layers: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    """A maker of ``nn.Sequential(*layers)`` whose parameters come from ``manual_seed(seed)``."""
    def make() -> nn.Module:
        torch.manual_seed(seed)
        return nn.Sequential(*(layer() for layer in layers))
    return make


_relu_mlp = _seeded(0, lambda: nn.Linear(16, 32), nn.ReLU, lambda: nn.Linear(32, 4))
_tanh_mlp = _seeded(1, lambda: nn.Linear(16, 32), nn.Tanh, lambda: nn.Linear(32, 4))
_norm_gelu = _seeded(2, lambda: nn.Linear(16, 32), lambda: nn.LayerNorm(32), nn.GELU, lambda: nn.Linear(32, 4))
_sigmoid_gate = _seeded(3, lambda: nn.Linear(16, 16), nn.Sigmoid)


def _small_conv() -> nn.Module:
    torch.manual_seed(4)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))


#: (description, model factory, input shape, input requires grad, hidden)
COUNT_CASES = [
    ("Linear(16, 32) -> ReLU -> Linear(32, 4), x of (8, 16)", _relu_mlp, (8, 16), False, False),
    ("Linear(16, 32) -> Tanh -> Linear(32, 4), x of (8, 16)", _tanh_mlp, (8, 16), False, False),
    ("Linear -> LayerNorm -> GELU -> Linear", _norm_gelu, (8, 16), False, True),
    ("Linear -> Sigmoid with an input that requires grad", _sigmoid_gate, (8, 16), True, True),
    ("Conv2d -> ReLU -> Flatten -> Linear", _small_conv, (2, 3, 8, 8), False, True),
]


def _count_check(expected: tuple[int, int]) -> Callable[[Any], tuple[bool, str]]:
    def check(got: Any) -> tuple[bool, str]:
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return False, "return a pair (number of saved tensors, their bytes)" + (
                " (did you forget to `return`?)" if got is None else "")
        if type(got[0]) is not int or type(got[1]) is not int:
            return False, "both numbers must be ints"
        n, b = got[0], got[1]
        if (n, b) == tuple(expected):
            return True, ""
        if n == expected[0]:
            return False, "the count is right, the bytes are not"
        if b == expected[1]:
            return False, "the bytes are right, the count is not"
        return False, ""
    return check


#: What the hidden cases of ch6.count_saved try (said in their hints, never their data).
_COUNT_ABOUT = {
    "Linear -> LayerNorm -> GELU -> Linear": "LayerNorm's backward needs more than its input (its mean and "
                                             "reciprocal standard deviation are saved too), and so does GELU's: ",
    "Linear -> Sigmoid with an input that requires grad": "x requires grad here, so the backward also computes x's "
                                                          "gradient, and what that needs is saved too: ",
    "Conv2d -> ReLU -> Flatten -> Linear": "a convolution saves its input and weight, and a 4-D tensor counts "
                                           "all its elements: ",
}


@exercise("ch6.count_saved", "Count the tensors saved for backward", names=["count_saved"], timeout=60)
def _count_saved(t: Tester, count_saved) -> None:
    hint = ("the backward graph's placeholders are the saved tensors plus one 'tangents_*' input per output; "
            "saved tensors sharing a storage (autograd's detach aliases, views) count once: group "
            "node.meta['val'] by StorageWeakRef(val.untyped_storage()) and add untyped_storage().nbytes() "
            "per group; default partitioner")
    cases = []
    for i, (desc, make, shape, x_grad, hidden) in enumerate(COUNT_CASES):  # references before the learner's code
        model = make().to("npu")
        x = randn(*shape, seed=10 + i).to("npu").requires_grad_(x_grad)
        cases.append((desc, model, x, hidden, measured(("ch6.count_saved", desc),
                                                        lambda m=model, x=x: saved_by_default_partitioner(m, x))))
    for desc, model, x, hidden, expected in cases:
        t.case(f"count_saved({desc})", count_saved, model, x, expected=expected, hidden=hidden,
               hint=_COUNT_ABOUT.get(desc, "") + hint if hidden else hint, check=_count_check(expected))


# ---------------------------------------------------------------------------------------------
# ch6.compiler_pair
# ---------------------------------------------------------------------------------------------

_pair_public = _seeded(5, lambda: nn.Linear(8, 16), nn.ReLU, lambda: nn.Linear(16, 3))
_pair_hidden = _seeded(6, lambda: nn.Linear(8, 16), lambda: nn.LayerNorm(16), nn.Tanh, lambda: nn.Linear(16, 3))


def _ops(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function")


def _train_step(module: nn.Module, xs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Outputs, then gradients of every parameter and input, for each input in ``xs``."""
    results = []
    for x in xs:
        module.zero_grad(set_to_none=True)
        x = x.detach().clone().requires_grad_(True)
        out = module(x)
        out.square().sum().backward()
        results += [out.detach()] + [p.grad for p in module.parameters()] + [x.grad]
    return results


def _run_pair(fw_compiler, bw_compiler, make: Callable[[], nn.Module], xs: list[torch.Tensor]) -> dict[str, Any]:
    """Compile ``make()`` on npu with the learner's compilers; run training steps; report what happened.

    (The eager reference is computed by the check before this runs, not here, next to the learner's code.)
    """
    import torch._dynamo
    from torch._dynamo.backends.common import aot_autograd

    seen: dict[str, list] = {"forward": [], "backward": []}

    def spy(kind: str, compiler):
        def wrapped(gm, example_inputs):
            ret = compiler(gm, example_inputs)
            seen[kind].append((gm, ret))
            return ret
        return wrapped

    model = make().to("npu")
    torch._dynamo.reset()
    try:
        backend = aot_autograd(fw_compiler=spy("forward", fw_compiler), bw_compiler=spy("backward", bw_compiler))
        got = _train_step(torch.compile(model, backend=backend), xs)
    finally:
        torch._dynamo.reset()
    return {"seen": seen, "got": got}


@exercise("ch6.compiler_pair", "A forward/backward compiler pair that logs and runs both graphs",
          names=["fw_compiler", "bw_compiler", "compile_log"], timeout=60)
def _compiler_pair(t: Tester, fw_compiler, bw_compiler, compile_log) -> None:
    if not t.expect("compile_log is a list your compilers append to", type(compile_log) is list,
                    expected="a list", got=short(compile_log), hint="write compile_log = [] above your compilers"):
        return
    for name, make, hidden in [("Linear -> ReLU -> Linear", _pair_public, False),
                               ("Linear -> LayerNorm -> Tanh -> Linear", _pair_hidden, True)]:
        xs = [randn(4, 8, seed=20).to("npu"), randn(4, 8, seed=21).to("npu")]
        want = _train_step(make().to("npu"), xs)  # the eager reference, before the learner's code runs
        start = len(compile_log)
        outcome = t.call(_run_pair, fw_compiler, bw_compiler, make, xs)
        if not outcome.ok:
            t.error(f"{name}: compile with aot_autograd(fw_compiler, bw_compiler) on npu, then train two steps",
                    outcome, hidden=hidden, hint="each compiler takes (gm, example_inputs) and returns "
                    "a callable; functorch.compile.make_boxed_func(gm.forward) is one")
            continue
        seen, got = outcome.value["seen"], outcome.value["got"]
        fw, bw = seen["forward"], seen["backward"]
        t.expect(f"{name}: AOTAutograd called fw_compiler once and bw_compiler once", len(fw) == 1 and len(bw) == 1,
                 hidden=hidden, expected="1 forward graph, 1 backward graph",
                 got=f"{len(fw)} forward, {len(bw)} backward",
                 hint="pass your functions as fw_compiler= and bw_compiler= (the check does); "
                      "did one of them raise?")
        if not (fw and bw):
            continue
        boxed = [kind for kind, calls in (("fw_compiler", fw), ("bw_compiler", bw))
                 if not getattr(calls[0][1], "_boxed_call", False)]
        t.expect(f"{name}: both compilers return boxed callables", not boxed, hidden=hidden,
                 expected="make_boxed_func(...) results", got=("not boxed: " + ", ".join(boxed)) if boxed else "boxed",
                 hint="AOTAutograd calls compiled graphs with one list of arguments (a 'boxed' call); wrap "
                      "the graph's forward with functorch.compile.make_boxed_func")
        ok = len(got) == len(want) and all(tensors_close(g, w, rtol=1e-4, atol=1e-5) for g, w in zip(got, want))
        t.expect(f"{name}: outputs and gradients of two training steps equal eager", ok, hidden=hidden,
                 expected="equal to eager", got="equal" if ok else "different",
                 hint="return a callable that runs the graph it was given (make_boxed_func(gm.forward))")
        plain_log, entries, why = check_plain(list.__getitem__(compile_log, slice(start, None)))
        new = [tuple(e) if type(e) in (list, tuple) else e for e in entries] if plain_log else [f"<{why}>"]
        want_log = [("forward", _ops(fw[0][0])), ("backward", _ops(bw[0][0]))]
        t.expect(f"{name}: compile_log gained ('forward', ops) then ('backward', ops)", new == want_log,
                 hidden=hidden, expected=short(want_log), got=short(new),
                 hint="append (kind, number of nodes with node.op == 'call_function') in each compiler; "
                      "the backward graph is compiled when backward() first runs")


# ---------------------------------------------------------------------------------------------
# ch6.predict_partitioner
# ---------------------------------------------------------------------------------------------

def _sin(x):
    return x.sin()


def _sin_times_cos(x):
    return x.sin() * x.cos()


def _matmul(x, w):
    return x @ w


def _outer_product_sin(x):
    return (x.unsqueeze(1) * x.unsqueeze(2)).sin()


def _cube_sum(x):
    return (x ** 3).sum()


def _centered_square_mean(x):
    return (x - x.mean()).pow(2).mean()


def _exp_of_exp(x):
    return x.exp().exp()


#: name -> (function, input shapes (all require grad)); the last three are hidden in the check.
PARTITION_FUNCS: dict[str, tuple[Callable[..., torch.Tensor], list[tuple[int, ...]]]] = {
    "sin": (_sin, [(64, 64)]),
    "sin_times_cos": (_sin_times_cos, [(64, 64)]),
    "matmul": (_matmul, [(64, 32), (32, 16)]),
    "outer_product_sin": (_outer_product_sin, [(16, 32)]),
    "cube_sum": (_cube_sum, [(64, 64)]),
    "centered_square_mean": (_centered_square_mean, [(64, 64)]),
    "exp_of_exp": (_exp_of_exp, [(64, 64)]),
}
HIDDEN_PARTITION = {"cube_sum", "centered_square_mean", "exp_of_exp"}
CHOICES = ("default", "min_cut", "same")


def partition_inputs(name: str, device: str = "npu") -> list[torch.Tensor]:
    """The inputs the check uses for ``PARTITION_FUNCS[name]`` (fixed seeds, all requiring grad)."""
    return [randn(*s, seed=30 + i).to(device).requires_grad_(True)
            for i, s in enumerate(PARTITION_FUNCS[name][1])]


def measured_winner(name: str) -> tuple[str, int, int]:
    """('default' | 'min_cut' | 'same', default bytes, min-cut bytes), measured with inspect_aot.

    Measured again whenever the notebook has changed PyTorch's settings (the partitioner's options
    change the answer), before any of the learner's code runs (the answer is data).
    """
    from ..inspect.aot import inspect_aot

    def measure() -> tuple[str, int, int]:
        report = inspect_aot(PARTITION_FUNCS[name][0], *partition_inputs(name))
        d, m = report.default.saved_bytes, report.min_cut.saved_bytes
        return ("same" if d == m else "default" if d < m else "min_cut"), d, m

    return measured(("ch6.predict_partitioner", name), measure)


_PARTITION_HINTS = {
    "sin": "sin's derivative cos(x) needs x, and nothing is cheaper to keep than x itself",
    "sin_times_cos": "the backward needs sin(x) and cos(x); both are cheap to recompute from x",
    "matmul": "the gradient of x @ w needs both operands, and a matmul is not worth recomputing",
    "outer_product_sin": "the product is 32x larger than x and costs one multiply to recompute",
    "cube_sum": "d/dx x**3 = 3x**2 needs only x",
    "centered_square_mean": "count bytes exactly: recomputing x - mean needs x and the mean (a 0-d tensor)",
    "exp_of_exp": "exp's backward uses its own output; recomputing exp(exp(x)) is not cheaper than keeping it",
}


@exercise("ch6.predict_partitioner", "Which partitioner saves fewer bytes?", names=["fewer_bytes"], timeout=60)
def _predict_partitioner(t: Tester, fewer_bytes) -> None:
    ok, plain_answer, why = check_plain(fewer_bytes)
    if not ok:
        t.expect("fewer_bytes is plain data: a dict of strings", False, expected="dict", got=why,
                 hint="write fewer_bytes = {'sin': 'same', ...} with plain strings")
        return
    fewer_bytes = plain_answer
    if not isinstance(fewer_bytes, dict):
        t.expect("fewer_bytes is a dict: function name -> 'default', 'min_cut' or 'same'", False,
                 expected="dict", got=short(fewer_bytes), hint="write fewer_bytes = {'sin': 'same', ...}")
        return
    for name in PARTITION_FUNCS:
        hidden = name in HIDDEN_PARTITION
        winner, d, m = measured_winner(name)
        answer = fewer_bytes.get(name)
        if type(answer) is not str or answer not in CHOICES:
            t.expect(f"fewer_bytes[{name!r}]", False, hidden=hidden, expected=" | ".join(CHOICES),
                     got="missing" if name not in fewer_bytes else short(answer),
                     hint=f"answer {name!r} with one of {CHOICES}")
            continue
        t.expect(f"fewer_bytes[{name!r}]", answer == winner, hidden=hidden,
                 expected=f"{winner!r} (default saves {d:,} bytes, min-cut {m:,})", got=repr(answer),
                 hint=_PARTITION_HINTS[name])
