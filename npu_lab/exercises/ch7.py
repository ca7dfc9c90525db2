"""Chapter 7: the Dispatcher - key paths, a kernel registered for npu, a custom operator, a dispatch mode.

Four exercises:

* ``ch7.key_path`` - walk an operator's dispatch table for a call's key set, as the dispatcher
  does (checked against the lab's dispatch inspector on real operators and real tensors);
* ``ch7.register_kernel`` - register an ``npu`` kernel for ``aten::hardswish`` in a
  ``torch.library.Library`` the learner creates and returns. npu-lab ships a hardswish kernel, so
  the check takes it out first (``npu_lab.without_kernels``, unless the notebook already did), as
  on a chip team's first day; it runs the op, proves with a dispatch trace that the learner's kernel
  ran (not the CPU fallback), removes the learner's registration again (``Library._destroy()``) and
  then puts back the shipped kernels it took out, so nothing leaks into later code. Its expected
  values come from NumPy (computed before the learner's code runs), and a library that registers
  for any key other than PrivateUse1 (a CPU kernel) fails;
* ``ch7.custom_op`` - ``swiglu(a, b) = silu(a) * b`` as a ``torch.library.custom_op`` with a fake
  implementation and an autograd formula, checked with ``torch.library.opcheck``, ``gradcheck``
  and ``torch.compile(backend="npu", fullgraph=True)``;
* ``ch7.dispatch_mode`` - build a ``TorchDispatchMode`` that logs every ATen call of a program and
  the bytes it copies between host and device, checked on hidden programs (a training step,
  inference_mode, in-place views, round trips) against the lab's dispatch tracer and the runtime's
  copy counters.

Helpers for the notebooks: :func:`call_keys` (the key set the dispatcher computes for a call)
and :func:`table_kinds` (an operator's dispatch table as ``{key: kind}``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional as F

from ..grading import isolation, references
from ..grading.inputs import randn
from ..grading.predictions import question
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester, short
from ..grading.values import check_plain, tensors_close

chapter("ch7", "The Dispatcher: keys, tables, kernels and custom operators", [
    "A tensor carries a dispatch key set: its backend key and the autograd key that goes with it",
    "Thread-local include/exclude sets change a call's keys: inference_mode drops the autograd keys",
    "An operator's dispatch table holds, per key, a kernel, a fallthrough or a backend fallback",
    "Wrapper kernels (autograd, ADInplaceOrView, autocast) do their work and pass the call to the next key",
    "torch.library.Library('aten', 'IMPL').impl(op, fn, 'PrivateUse1') registers an npu kernel; _destroy() removes it",
    "A backend fallback is one boxed kernel for every operator without a kernel (the NPU's CPU fallback)",
    "A custom operator needs a fake implementation for torch.compile and an autograd formula for training",
    "torch.library.opcheck tests a custom operator's schema, fake implementation and autograd registration",
    "A TorchDispatchMode (the Python key) sees every ATen call below autograd: FakeTensor and make_fx build on it",
])

# Predict, then run (the chapter's questions; the cells measure the answers)
question("ch7.no_grad_keys",
         "Does torch.no_grad() change the key set of a call on an npu tensor (True or False)?",
         why="no_grad is a flag the autograd kernel reads: the autograd key stays in the key set, and its kernel "
             "runs and records nothing (inference_mode is the one that removes the key)",
         choices=(True, False))
question("ch7.add_kernels",
         "How many kernels run for b.add_(a) on npu tensors (keys whose kernel runs on the walk)?",
         why="the autograd kernel and ADInplaceOrView's kernel (an in-place operator bumps the version counter) "
             "each pass the call on, and the npu kernel ends the walk: 3",
         choices=(1, 2, 3, 4, 5))
question("ch7.fallback_kb",
         "The CPU fallback runs F.hardswish on a 256 x 256 float32 npu tensor. How many kB (1000 bytes) cross "
         "between host and device?",
         why="the input goes to the host and the result comes back: 2 x 256 x 256 x 4 bytes = 524.3 kB",
         rtol=0.01)
question("ch7.mode_sees_linear",
         "A dispatch mode logs a training step of an MLP of nn.Linear layers. Does its forward show 'linear' or "
         "'t and addmm'?",
         why="linear is a CompositeImplicitAutograd operator: it turns into t and addmm at the autograd key, "
             "above the Python key where the mode sits",
         choices=("linear", "t and addmm"))


# ---------------------------------------------------------------------------------------------
# helpers shared with the notebooks
# ---------------------------------------------------------------------------------------------

def call_keys(*tensors: torch.Tensor) -> list[str]:
    """The key set the dispatcher computes for a call on ``tensors``, highest priority first.

    The union of the tensors' key sets, plus the thread-local *include* set, minus the
    thread-local *exclude* set (so call it inside ``torch.inference_mode()`` or ``torch.autocast``
    to see what those change).
    """
    from ..inspect.dispatch import _OBSERVER_KEYS, keys

    ks = torch._C.DispatchKeySet(torch._C.DispatchKey.Undefined)
    for t in tensors:
        ks = ks | torch._C._dispatch_keys(t)
    ks = (ks | torch._C._dispatch_tls_local_include_set()) - torch._C._dispatch_tls_local_exclude_set()
    return [k for k in keys(ks) if k not in _OBSERVER_KEYS]


def table_kinds(op: str) -> dict[str, str]:
    """An operator's computed dispatch table as ``{dispatch key: kind}``.

    Kinds: ``"kernel"``, ``"autograd kernel"``, ``"math kernel"`` (CompositeImplicitAutograd),
    ``"default backend kernel"`` (CompositeExplicitAutograd), ``"backend fallback"`` and
    ``"fallthrough"``; keys with nothing registered are absent.
    """
    from ..inspect.dispatch import dispatch_table

    return {key: entry.kind for key, entry in dispatch_table(op).items()}


# ---------------------------------------------------------------------------------------------
# ch7.key_path
# ---------------------------------------------------------------------------------------------

def _npu(*shape: int, seed: int = 0) -> torch.Tensor:
    return randn(*shape, seed=seed).to("npu")


def _inference_keys() -> list[str]:
    with torch.inference_mode():
        return call_keys(_npu(3))


def _autocast_keys() -> list[str]:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return call_keys(randn(2, 2))


#: (description, operator, function giving the call's key set, hidden)
WALK_CASES: list[tuple[str, str, Callable[[], list[str]], bool]] = [
    ("a + b on npu", "aten::add.Tensor", lambda: call_keys(_npu(3), _npu(3, seed=1)), False),
    ("a + b on cpu", "aten::add.Tensor", lambda: call_keys(randn(3), randn(3, seed=1)), False),
    ("a.add_(b) on npu (in place)", "aten::add_.Tensor", lambda: call_keys(_npu(3), _npu(3, seed=1)), False),
    ("F.linear(x, w) on npu (a CompositeImplicitAutograd operator)", "aten::linear",
     lambda: call_keys(_npu(2, 3), _npu(4, 3)), False),
    ("a * 2 on npu inside torch.inference_mode()", "aten::mul.Tensor", _inference_keys, False),
    ("torch.ones_like(a) on npu", "aten::ones_like", lambda: call_keys(_npu(3)), True),
    ("F.hardswish(a) on npu, its npu kernel taken out", "aten::hardswish", lambda: call_keys(_npu(3)), True),
    ("a.view(-1) on npu", "aten::view", lambda: call_keys(_npu(2, 3)), True),
    ("x @ y on cpu inside torch.autocast('cpu')", "aten::mm", _autocast_keys, True),
    ("torch.ops.npu.linear_relu(x, w, b)", "npu::linear_relu", lambda: call_keys(_npu(2, 3)), True),
]
#: operators npu-lab ships a kernel for, whose case reads the table with that kernel taken out
#: (npu_lab.without_kernels): the PrivateUse1 entry is then the NPU's backend fallback
WITHOUT_KERNEL = ("aten::hardswish",)


def _expected_walk(op: str, keyset: list[str]) -> list[str]:
    """The keys whose kernels run, from the lab's dispatch inspector (fallthroughs left out)."""
    from ..inspect.dispatch import key_path

    return [s.key for s in key_path(op, keyset) if s.kind != "fallthrough"]


@exercise("ch7.key_path", "Walk a dispatch table: which kernels run?", names=["dispatch_walk"])
def _key_path(t: Tester, dispatch_walk) -> None:
    from ..ops.registry import without_kernels

    hint = ("go through the keys from the highest priority; skip keys with no entry and fallthroughs; "
            "an 'autograd kernel' or a 'kernel' at ADInplaceOrView, BackendSelect or an Autocast key passes "
            "the call on; any other entry (a backend key's kernel, a math/default backend kernel, a backend "
            "fallback) computes the result and ends the walk")
    for desc, op, make_keys, hidden in WALK_CASES:
        keyset = make_keys()
        removed = without_kernels(op, missing_ok=True) if op in WITHOUT_KERNEL else contextlib.nullcontext()
        with removed:  # put back on leaving (if this check took it out): dispatch_walk only reads the table
            table = table_kinds(op)
            expected = _expected_walk(op, keyset)
        t.case(f"{op}: {desc}, key set {keyset}", dispatch_walk, keyset, table,
               expected=expected, hidden=hidden, hint=hint)


# ---------------------------------------------------------------------------------------------
# ch7.register_kernel
# ---------------------------------------------------------------------------------------------

OP = "aten::hardswish"
_IMPL_KEY = "aten/hardswish/PrivateUse1"


def _run_hardswish(x: torch.Tensor) -> torch.Tensor:
    return F.hardswish(x).cpu()


def _trace_once(x: torch.Tensor) -> dict[str, Any]:
    """Run F.hardswish on ``x`` under the dispatch tracer; count fallbacks and host<->device bytes."""
    from .. import transfer_stats
    from ..device import fallback
    from ..inspect.dispatch import trace

    fell, moved = dict(fallback.counts), transfer_stats()
    tr = trace(F.hardswish, x)
    after = transfer_stats()
    crossed = sum(after[k] - moved[k] for k in ("host_to_device_bytes", "device_to_host_bytes"))
    new_fallbacks = {k: v - fell.get(k, 0) for k, v in fallback.counts.items() if v != fell.get(k, 0)}
    return {"calls": tr.calls, "fallbacks": new_fallbacks, "crossed": crossed}


def _describe_call(call) -> str:
    import re

    return f"{call.op}: {call.arrow()} -> {re.sub(r':[0-9]+', '', call.kernel)}"


@exercise("ch7.register_kernel", "Register an npu kernel for an operator the NPU lacks (aten::hardswish)",
          names=["register_hardswish"], timeout=60, keeps_registrations=True)
def _register_kernel(t: Tester, register_hardswish) -> None:
    from ..ops.registry import without_kernels

    # npu-lab ships hardswish kernels: take them out, as on a chip team's first day (unless the notebook already
    # did: missing_ok). Outermost, so the learner's libraries are destroyed first and then only the kernels
    # taken out here come back: the process is left as the check found it.
    with without_kernels(OP, missing_ok=True):  # hardswish and hardswish.out
        _grade_registration(t, register_hardswish)


def _hardswish_cases() -> list[tuple[str, torch.Tensor, torch.Tensor, bool]]:
    """(description, input on the CPU, expected, hidden), the expected values computed in NumPy before any
    code of the learner's runs (a kernel registered for the CPU as well cannot be its own reference)."""
    cases = []
    for shape, hidden in [((4, 5), False), ((7,), False), ((0, 3), False), ((2, 3, 4), True), ((), True)]:
        x = randn(*shape, seed=len(shape) + 40) * 4
        cases.append((f"F.hardswish(x of {shape} on npu) equals hardswish computed in NumPy", x, hidden))
    edges = torch.tensor([-7.0, -3.0, -2.999, -1.5, 0.0, 1.5, 2.999, 3.0, 7.0])
    cases.append(("F.hardswish at and around the kinks x = -3 and x = 3", edges, True))
    return [(d, x, references.expected(references.hardswish, x), h) for d, x, h in cases]


def _run_keeping_input(x: torch.Tensor) -> list[torch.Tensor]:
    """F.hardswish(x) and x itself afterwards (a kernel must not write into its input)."""
    return [F.hardswish(x).cpu(), x.cpu()]


def _grade_registration(t: Tester, register_hardswish) -> None:
    from ..device import fallback
    from ..inspect.dispatch import dispatch_table

    cases = _hardswish_cases()  # before the learner's code runs
    xt = (randn(5, 3, seed=44) * 4).t()
    want_t = references.expected(references.hardswish, xt)
    x_in = randn(6, 7, seed=47) * 4
    want_in = [references.expected(references.hardswish, x_in), x_in.clone()]
    x_again = randn(6, seed=46) * 4
    want_again = references.expected(references.hardswish, x_again)
    x_slice = randn(5, 8, seed=48) * 4
    want_slice = references.expected(references.hardswish, x_slice[1:, ::2].contiguous())

    returned: list[torch.library.Library] = []  # destroyed at the end too, even if made before the check
    was_enabled = fallback.cpu_fallback_enabled()
    fallback.set_cpu_fallback(True)  # a missing registration then shows up as a fallback, not as an error
    try:
        with _quiet():  # a registration the notebook still holds is overridden (PyTorch warns once)
            outcome = t.call(register_hardswish)
        if not outcome.ok:
            t.error("register_hardswish()", outcome,
                    hint="create torch.library.Library('aten', 'IMPL'), call .impl('hardswish', your_kernel, "
                         "'PrivateUse1') and return the library")
            return
        lib = outcome.value
        is_lib = type(lib) is torch.library.Library
        if is_lib:
            returned.append(lib)
        if not t.expect("register_hardswish() returns the torch.library.Library it registered with",
                        is_lib and lib.m is not None, expected="a live torch.library.Library", got=short(lib),
                        hint="return the library: once nothing refers to it, Python frees it and the registration "
                             "disappears with it"):
            return
        t.expect("it is a library of the 'aten' namespace (kind 'IMPL' or 'FRAGMENT')",
                 lib.ns == "aten" and lib.kind in ("IMPL", "FRAGMENT"), expected="Library('aten', 'IMPL')",
                 got=f"Library({lib.ns!r}, {lib.kind!r})",
                 hint="hardswish is an ATen operator: torch.library.Library('aten', 'IMPL')")
        t.expect("the library holds a kernel for aten::hardswish at the PrivateUse1 key",
                 _IMPL_KEY in references.registrations(lib), expected=_IMPL_KEY,
                 got=short(references.registrations(lib)),
                 hint="lib.impl('hardswish', hardswish_npu, 'PrivateUse1'): the npu device is the PrivateUse1 key")
        foreign = sorted({k for made in [*returned, *t.libraries] for k in references.foreign_keys(made)})
        t.expect("your code registers kernels for the npu (PrivateUse1) key only", not foreign,
                 expected="only .../PrivateUse1 registrations", got=short(foreign),
                 hint="a kernel registered for the CPU (or another key) changes what every CPU tensor computes, "
                      "in every notebook cell after it: register for 'PrivateUse1' only")
        entry = dispatch_table(OP).get("PrivateUse1")
        t.expect("aten::hardswish's dispatch table now has a kernel (not the backend fallback) at PrivateUse1",
                 entry is not None and entry.kind == "kernel", expected="kernel",
                 got=entry.kind if entry else "nothing", hint="register for the 'PrivateUse1' dispatch key")

        hint = ("hardswish(x) = x * min(max(x + 3, 0), 6) / 6; allocate the output on npu (torch.empty_like) and "
                "fill it in a numba kernel through npu_lab.device_array")
        for desc, x, want, hidden in cases:
            t.case(desc, _run_hardswish, x.to("npu"), expected=want, hidden=hidden, rtol=1e-5, atol=1e-6,
                   hint=hint if "kinks" not in desc else
                   "clip x + 3 to [0, 6] (both ends): hardswish is 0 for x <= -3 and x itself for x >= 3")
        t.case("F.hardswish(a transposed, non-contiguous npu tensor)", _run_hardswish, xt.to("npu"),
               expected=want_t, hint="a transposed tensor's elements are not in memory order: "
               "call .contiguous() before handing its memory to the kernel")
        t.case("F.hardswish(x[1:, ::2]: a slice with an offset and a stride of 2)", _run_hardswish,
               x_slice.to("npu")[1:, ::2], expected=want_slice, hidden=True,
               hint="a slice starts inside its storage and skips elements: make it contiguous first")
        t.case("F.hardswish(x) leaves x unchanged (and returns a new tensor)", _run_keeping_input, x_in.to("npu"),
               expected=want_in, hidden=True, hint="write the result into a new tensor (torch.empty_like(x)), "
               "never into the input: aten::hardswish is not an in-place operator")

        outcome = t.call(_trace_once, (randn(64, seed=45) * 4).to("npu"))
        if not outcome.ok:
            t.error("a dispatch trace of F.hardswish on npu", outcome, hint="your kernel raised")
            return
        calls = [c for c in outcome.value["calls"] if c.op == OP]
        ran = bool(calls) and calls[0].path and calls[0].path[-1].key == "PrivateUse1" \
            and calls[0].path[-1].kind == "kernel" and "fallback" not in calls[0].kernel
        t.expect("the dispatch trace shows aten::hardswish reaching your PrivateUse1 kernel, not the CPU fallback",
                 ran, expected="aten::hardswish: AutogradPrivateUse1 -> PrivateUse1 -> PrivateUse1 kernel (your file)",
                 got=_describe_call(calls[0]) if calls else "aten::hardswish never reached a backend",
                 hint="register for 'PrivateUse1' and keep the library alive while the operator runs")
        fell = outcome.value["fallbacks"]
        t.expect("no operator fell back to the CPU while it ran", not fell, expected="no fallback",
                 got=short(fell), hint="your kernel calls an operator the NPU lacks: compute in numba instead")
        crossed = outcome.value["crossed"]
        t.expect("your kernel computes on the device: no bytes crossed between host and device", crossed == 0,
                 expected="0 bytes", got=f"{crossed:,} bytes",
                 hint="do not copy to the CPU and back (that is what the fallback does): work on "
                      "npu_lab.device_array(tensor), the tensor's device memory")

        with _quiet():  # PyTorch warns (once) that the second registration overrides the first
            again = t.call(register_hardswish)  # what re-running the notebook cell does
        if again.ok and type(again.value) is torch.library.Library:
            returned.append(again.value)
        t.case("calling register_hardswish() a second time (re-running the cell) works, and the op still runs",
               lambda a: (again.ok, _run_hardswish(a))[1], x_again.to("npu"),
               expected=want_again, hidden=True, hint="registering again must not fail: do not pass "
               "allow_override=False, and create a new Library in each call")
    finally:
        isolation.destroy_libraries([*returned, *t.libraries])  # before the shipped kernels come back
        fallback.set_cpu_fallback(was_enabled)


# ---------------------------------------------------------------------------------------------
# ch7.custom_op
# ---------------------------------------------------------------------------------------------

RESERVED = {"aten", "prim", "prims", "npu", "torch", "_", "c10", "quantized", "mkldnn", "cuda", "inductor"}

_OPCHECK_HINTS = {
    "test_schema": "the operator must not change its inputs (mutates_args=()) nor return one of them: "
                   "return a new tensor",
    "test_autograd_registration": "register a backward with swiglu.register_autograd(backward, setup_context=...)",
    "test_faketensor": "register a fake implementation (@swiglu.register_fake) returning an empty tensor with the "
                       "output's shape, dtype and device (torch.empty_like(a))",
    "test_aot_dispatch_dynamic": "the fake implementation and the backward formula must work on fake tensors of "
                                 "any shape: use only torch operations on their arguments",
}


def _reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a) * b, computed in NumPy (no PyTorch operator the learner could have registered a kernel for)."""
    return references.expected(lambda x, y: references.silu(x) * y, a, references.array(b))


def _reference_grads(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    """[swiglu(a, b), d/da, d/db] for the weights :func:`_grads` uses, computed in NumPy."""
    import numpy as np

    an, bn = references.array(a), references.array(b)
    g = np.linspace(-1, 1, an.size).reshape(an.shape) if an.size else np.zeros(an.shape)
    s = references.sigmoid(an)
    outs = [an * s * bn, g * bn * s * (1 + an * (1 - s)), g * an * s]
    return [torch.from_numpy(o).to(a.dtype) for o in outs]


def _grads(fn: Callable, a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    a, b = a.detach().clone().requires_grad_(True), b.detach().clone().requires_grad_(True)
    out = fn(a, b)
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    out.backward(weights.to(out.device))
    return [out.detach().cpu(), a.grad.cpu(), b.grad.cpu()]


def _opcheck(op, a: torch.Tensor, b: torch.Tensor, utils: tuple[str, ...]) -> dict[str, Any]:
    with _quiet():
        return torch.library.opcheck(op, (a, b), test_utils=utils, raise_exception=False)


@contextlib.contextmanager
def _quiet():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _compiled_grads(op, a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    import torch._dynamo

    from .. import compiler

    torch._dynamo.reset()
    compiler.reset()
    try:
        fn = torch.compile(lambda x, y: op(x, y) * 2, backend="npu", fullgraph=True)
        grads = _grads(fn, a, b)
        record = compiler.last_compile()
        fw = record.graph("forward").snapshot("input").graph
        nodes = sum(1 for n in fw.nodes if n.op == "call_function" and n.target == op._opoverload)
        return {"grads": grads, "nodes": nodes}
    finally:
        torch._dynamo.reset()
        compiler.reset()


def _first_line(value: Any) -> str:
    text = str(value).strip().splitlines()
    return (text[0][:200] if text else type(value).__name__)


@exercise("ch7.custom_op", "A custom operator with autograd that passes opcheck", names=["swiglu"], timeout=120)
def _custom_op(t: Tester, swiglu) -> None:
    from torch._library.custom_ops import CustomOpDef

    if not t.expect("swiglu is an operator made with torch.library.custom_op", type(swiglu) is CustomOpDef,
                    expected="a CustomOpDef", got=type(swiglu).__name__,
                    hint='decorate the function with @torch.library.custom_op("yourname::swiglu", mutates_args=())'):
        return
    t.expect("it lives in a namespace of your own", swiglu._namespace not in RESERVED,
             expected="e.g. 'mylab::swiglu'", got=swiglu._qualname,
             hint="aten, prims, npu and torch belong to PyTorch and the lab: pick a name of your own")
    schema = swiglu._opoverload._schema
    tensors_in = [a for a in schema.arguments if str(a.type) == "Tensor"]
    t.expect("its schema takes two tensors and returns one",
             len(schema.arguments) == 2 and len(tensors_in) == 2 and len(schema.returns) == 1
             and str(schema.returns[0].type) == "Tensor", expected="(Tensor a, Tensor b) -> Tensor",
             got=str(schema), hint="annotate: def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor")

    hint = "swiglu(a, b) = silu(a) * b = a * sigmoid(a) * b, returned as a new tensor"
    for shape, device, hidden in [((4, 6), "cpu", False), ((4, 6), "npu", False), ((0, 3), "npu", False),
                                  ((2, 3, 5), "npu", True)]:
        a, b = randn(*shape, seed=50), randn(*shape, seed=51)
        t.case(f"swiglu(a, b) for a, b of {shape} on {device}", lambda x, y: swiglu(x, y).cpu(), a.to(device),
               b.to(device), expected=_reference(a, b), hidden=hidden, hint=hint, rtol=1e-5, atol=1e-6)

    for device, dtype, utils, hidden in [
        ("cpu", torch.float32,
         ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"), False),
        # opcheck's autograd registration test knows only cpu/cuda/xpu devices in this PyTorch
        ("npu", torch.float32, ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"), True),
        # the fake implementation must follow the inputs' dtype, not the default one
        ("cpu", torch.float64, ("test_faketensor",), True),
    ]:
        a = randn(3, 4, seed=52, dtype=dtype).to(device).requires_grad_(True)
        b = randn(3, 4, seed=53, dtype=dtype).to(device).requires_grad_(True)
        where = device if dtype is torch.float32 else f"{device}, float64 inputs"
        outcome = t.call(_opcheck, swiglu, a, b, utils)
        if not outcome.ok:
            t.error(f"torch.library.opcheck(swiglu, (a, b)) on {where}", outcome, hidden=hidden,
                    hint="opcheck itself failed to run your operator")
            continue
        for test in utils:
            result = outcome.value.get(test)
            t.expect(f"opcheck on {where}: {test}", result == "SUCCESS", hidden=hidden, expected="SUCCESS",
                     got=_first_line(result), hint=_OPCHECK_HINTS[test] + (
                         " (these inputs are float64: the result has a's dtype)" if dtype is torch.float64 else ""))

    a64, b64 = randn(3, 4, seed=54, dtype=torch.float64), randn(3, 4, seed=55, dtype=torch.float64)
    outcome = t.call(lambda x, y: torch.autograd.gradcheck(swiglu, (x, y), raise_exception=False),
                     a64.requires_grad_(True), b64.requires_grad_(True))
    if not outcome.ok:
        t.error("torch.autograd.gradcheck(swiglu, (a, b)) in float64 on cpu", outcome,
                hint="the backward raised: it returns one gradient per input (a, b)")
    else:
        t.expect("torch.autograd.gradcheck(swiglu, (a, b)) in float64 on cpu", outcome.value is True,
                 expected="True", got=short(outcome.value),
                 hint="d/da = grad * b * s * (1 + a * (1 - s)) with s = sigmoid(a); d/db = grad * silu(a)")

    a, b = randn(5, 7, seed=56), randn(5, 7, seed=57)
    want = _reference_grads(a, b)
    t.case("output and gradients of swiglu on npu equal those of silu(a) * b", _grads, swiglu, a.to("npu"),
           b.to("npu"), expected=want, hint="save a and b in setup_context; return (grad_a, grad_b)",
           rtol=1e-4, atol=1e-5)

    outcome = t.call(_compiled_grads, swiglu, a.to("npu"), b.to("npu"))
    if not outcome.ok:
        t.error("torch.compile(backend='npu', fullgraph=True) of a function calling swiglu, then backward()", outcome,
                hint="Dynamo and AOTAutograd run your fake implementation and trace your backward on fake tensors")
        return
    nodes = outcome.value["nodes"]
    t.expect("torch.compile keeps swiglu as one opaque node in the forward graph", nodes == 1,
             expected="1 node", got=f"{nodes} node(s)",
             hint="a custom operator is not traced into: the graph calls it as a whole")
    doubled = [w * 2 for w in want]  # the compiled function returns swiglu(a, b) * 2
    plain, got, _ = check_plain(outcome.value["grads"])
    ok = plain and type(got) is list and len(got) == 3 and all(
        tensors_close(g, w, rtol=1e-4, atol=1e-5) for g, w in zip(got, doubled))
    t.expect("compiled output and gradients equal eager", ok, hidden=True, expected="equal", got="equal" if ok else
             "different", hint="the backward formula must use only torch operations, so AOTAutograd can trace it")


# ---------------------------------------------------------------------------------------------
# ch7.dispatch_mode
# ---------------------------------------------------------------------------------------------

def mlp_step() -> torch.Tensor:
    """One SGD training step of a small MLP on npu: data copied in, the loss copied back."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to("npu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 8).to("npu"), torch.randn(4, 2).to("npu")
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach().cpu()


def _inference() -> torch.Tensor:
    torch.manual_seed(1)
    model = torch.nn.Linear(6, 3).to("npu")
    x = torch.randn(5, 6).to("npu")
    with torch.inference_mode():  # no autograd key: composites such as aten::linear reach the mode whole
        y = torch.softmax(model(x), dim=-1)
    return y.cpu()


def _in_place_and_views() -> torch.Tensor:
    a = torch.arange(12, dtype=torch.float32).to("npu")
    b = a.view(3, 4)
    b.add_(1)
    b[:, 1].mul_(2)
    return a.to(torch.float64).add(1).cpu()  # a conversion on the device moves nothing between host and device


def _round_trips() -> torch.Tensor:
    x = torch.ones(3, 5, dtype=torch.float64)
    for _ in range(3):
        x = (x.to("npu") * 2).cpu()
    return x + torch.zeros(2, 3, 5, dtype=torch.int16).to("npu").cpu()


def _between_devices() -> torch.Tensor:
    x = torch.arange(6, dtype=torch.float32).to("npu")    # host -> device: counted
    y = x.to("npu:1")                                        # device -> device: the same device type
    total = y.sum().item()                                   # a Python number, not a tensor
    host = torch.empty(6, dtype=torch.float64)
    host.copy_(x)                                            # copy_(dst on the host, src on the device)
    return host + total


def _cpu_only() -> torch.Tensor:
    x = torch.linspace(-1, 1, 10)
    return (x.relu() + x.sigmoid()).sum(dim=0, keepdim=True)


#: (description, program, hidden)
LOG_PROGRAMS: list[tuple[str, Callable[[], Any], bool]] = [
    ("a training step of an MLP on npu (forward, backward, optimizer step)", mlp_step, False),
    ("inference on npu inside torch.inference_mode()", _inference, False),
    ("in-place operators on views of an npu tensor", _in_place_and_views, True),
    ("float64 and int16 tensors copied to npu and back several times", _round_trips, True),
    ("a copy from npu:0 to npu:1, a .item(), and copy_ from npu into a float64 host tensor", _between_devices, True),
    ("a program on the CPU only (nothing crosses host<->device)", _cpu_only, True),
]


#: programs whose host<->device bytes, by the exercise's rule, differ from the runtime's counters: a .item()
#: moves bytes but returns no tensor, and a device-to-device copy is counted apart
_BY_THE_RULE = {_between_devices}


def _rule_bytes(program: Callable[[], Any]) -> int:
    """The exercise's rule applied by the grader's own mode: results on another device type than their source."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Rule(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.copied = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            src = args[1] if func is torch.ops.aten.copy_.default else (tensors[0] if tensors else None)
            if isinstance(out, torch.Tensor) and src is not None and src.device.type != out.device.type:
                self.copied += out.numel() * out.element_size()
            return out

    with _Rule() as rule:
        program()
    return rule.copied


def _reference_log(program: Callable[[], Any]) -> dict[str, Any]:
    """What the lab's own dispatch tracer and the runtime's copy counters see (a warm run first)."""
    from .. import transfer_stats
    from ..inspect.dispatch import trace

    program()
    moved = transfer_stats()
    result: list[Any] = []
    tr = trace(lambda: result.append(program()))
    after = transfer_stats()
    crossed = sum(after[k] - moved[k] for k in ("host_to_device_bytes", "device_to_host_bytes"))
    if program in _BY_THE_RULE:
        crossed = _rule_bytes(program)
    return {"ops": [c.op for c in tr.calls], "copied": crossed, "result": result[0].detach().cpu().clone()}


def _run_logged(mode_class: Any, program: Callable[[], Any], nested: bool = False) -> dict[str, Any]:
    """``with mode_class() as log: program()``; what the log holds (and, nested, what an outer log holds)."""
    outer = mode_class() if nested else contextlib.nullcontext()
    with outer:
        with mode_class() as log:
            result = program()
    out = {"ops": log.ops, "copied": log.copied, "result": result.cpu()}
    if nested:
        out["outer ops"], out["outer copied"] = outer.ops, outer.copied
    return out


def _log_hint(desc: str) -> str:
    if "npu:1" in desc:
        return ("compare device types (src.device.type), not devices: npu:0 -> npu:1 stays on the device side; "
                ".item() returns a Python number, not a tensor; for aten::copy_(dst, src) the source is args[1]")
    if "in-place" in desc:
        return ("record every call the mode sees, in-place ones and views too, with func.name() "
                "(e.g. 'aten::add_.Tensor')")
    if "float64" in desc:
        return ("bytes are numel * element_size of the result that crossed (a float64 element is 8 bytes); count "
                "each call whose result is on another device type than its source (for aten::copy_, args[1]; "
                "for any other operator, its first tensor argument)")
    if "CPU only" in desc:
        return "a copy within one device moves nothing between host and device"
    if "npu:1" in desc:
        return ("compare device types (src.device.type), not devices: npu:0 -> npu:1 stays on the device side; "
                ".item() returns a Python number, not a tensor; for aten::copy_(dst, src) the source is args[1]")
    if "inference_mode" in desc:
        return ("inside inference_mode (and on its tensors) the autograd keys are gone: composite operators such as "
                "aten::linear and aten::to reach the mode whole; record what reaches the mode, and count a copy by "
                "its devices, not by the operator's name")
    return ("in __torch_dispatch__: out = func(*args, **(kwargs or {})); append func.name() to self.ops; if out is "
            "a tensor on another device type than its source, add out.numel() * out.element_size(); return out")


@exercise("ch7.dispatch_mode", "Build a TorchDispatchMode: log a step's ATen calls and the bytes it copies",
          names=["StepLog"], timeout=60)
def _dispatch_mode(t: Tester, StepLog) -> None:  # noqa: N803 - the learner's class
    from torch.utils._python_dispatch import TorchDispatchMode

    is_mode = isinstance(StepLog, type) and issubclass(StepLog, TorchDispatchMode) and StepLog is not TorchDispatchMode
    if not t.expect("StepLog is a class derived from torch.utils._python_dispatch.TorchDispatchMode", is_mode,
                    expected="class StepLog(TorchDispatchMode)", got=short(StepLog),
                    hint="class StepLog(TorchDispatchMode): with __init__ (call super().__init__()) and "
                         "__torch_dispatch__(self, func, types, args=(), kwargs=None)"):
        return
    references_ = [(desc, program, hidden, _reference_log(program)) for desc, program, hidden in LOG_PROGRAMS]
    for desc, program, hidden, want in references_:
        outcome = t.call(_run_logged, StepLog, program)
        hint = _log_hint(desc)
        if not outcome.ok:
            t.error(f"{desc}: with StepLog() as log: program()", outcome, hidden=hidden, hint=hint)
            continue
        got = outcome.value
        t.case(f"{desc}: the program's result is unchanged under the mode", lambda g=got: g["result"],
               expected=want["result"], hidden=hidden, hint="return func(*args, **kwargs)'s result unchanged")
        t.case(f"{desc}: log.ops lists the {len(want['ops'])} ATen calls, in order", lambda g=got: g["ops"],
               expected=want["ops"], hidden=hidden, hint=hint)
        t.case(f"{desc}: log.copied counts the bytes that crossed host<->device", lambda g=got: g["copied"],
               expected=want["copied"], hidden=hidden, hint=_log_hint("float64") if "float64" not in desc else hint)
    desc, program, _, want = references_[0]
    outcome = t.call(_run_logged, StepLog, program, nested=True)
    if not outcome.ok:
        t.error("two logs, one inside the other", outcome, hidden=True,
                hint="each StepLog keeps its own list: create it in __init__, not as a class attribute")
        return
    t.case("two logs, one inside the other: both see every call of the training step",
           lambda g=outcome.value: [g["ops"], g["outer ops"], g["copied"], g["outer copied"]],
           expected=[want["ops"], want["ops"], want["copied"], want["copied"]], hidden=True,
           hint="call func(*args, **kwargs) inside __torch_dispatch__ (the mode is off while it runs, so the outer "
                "mode sees the call next); keep each log's list in the instance (self.ops = [] in __init__)")
