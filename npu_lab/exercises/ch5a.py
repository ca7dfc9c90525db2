"""Chapter 5a: dispatch modes, FakeTensor and functionalization - the machinery under Dynamo and AOTAutograd.

Two exercises:

* ``ch5a.fake_impl`` - the fake implementation of a custom operator, ``window_sums(x, size, step)``
  (sums over sliding windows of the last dimension), checked under ``FakeTensorMode`` against what
  the real kernel returns, on hidden shapes (no window at all, a single one, a step longer than a
  window, leading dimensions, no rows), dtypes and devices, with ``torch.library.opcheck`` and under
  ``torch.compile`` with a symbolic length;
* ``ch5a.new_bytes`` - how many bytes of new memory a program asks for, answered without running it:
  a ``TorchDispatchMode`` under ``FakeTensorMode`` adds up the storages of the tensors each ATen call
  returns that are not aliases of its inputs (the schema says which), checked against the lab's own
  count on hidden programs (a Linear layer too big to allocate, views and in-place calls, several
  outputs, lists of outputs, storages with gaps), with the NPU's memory counters watching that nothing
  was allocated.

Helpers for the notebooks: :func:`window_sums_kernel` (the operator's real kernel: numba over the
tensor's memory) and :func:`define_window_sums` (the operator itself, without a fake implementation).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import torch

from ..grading.inputs import randn
from ..grading.predictions import question
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester, short

chapter("ch5a", "Dispatch modes, FakeTensor and functionalization", [
    "The Python dispatch key sits below autograd: a TorchDispatchMode sees every ATen call, backward ones too",
    "Inside __torch_dispatch__ the mode is off: calling func(*args, **kwargs) runs the operator below it",
    "A FakeTensor has a real tensor's metadata (shape, dtype, device, strides) and no data; FakeTensorMode makes them",
    "Under FakeTensorMode operators run their meta kernels or fake implementations; reading a value raises",
    "A custom operator needs a fake implementation (register_fake) before anything can trace it",
    "make_fx records the ATen calls a function makes as an FX graph, on real, fake or symbolic tensors",
    "An operator's schema says which outputs alias an input: Tensor(a) a view, Tensor(a!) written in place",
    "Functionalization replaces in-place operators and views with pure operators; inputs changed in place get a "
    "copy_ at the end",
])

# Predict, then run (the chapter's questions; the cells measure the answers)
question("ch5a.sees_backward",
         "A dispatch mode is active around loss.backward(). Does it see the backward's ATen calls (True or False)?",
         why="the backward runs ATen operators through the dispatcher like the forward, and autograd carries the "
             "thread's state, its mode stack included, to whichever thread runs the backward",
         choices=(True, False))
question("ch5a.fake_bytes",
         "Under FakeTensorMode an nn.Linear(8192, 8192) is built on npu and runs a batch of 64. How many bytes "
         "does the npu allocate meanwhile?",
         why="every tensor made under the mode is fake: metadata only, no storage on the device; 0 bytes",
         choices=())
question("ch5a.inplace_in_graph",
         "make_fx (without functionalization) traces a function that calls y.add_(1) on a view y of its input. "
         "Does the graph contain add_ (True or False)?",
         why="make_fx records each ATen call as it reaches the Python key, in-place ones included; only "
             "functionalization rewrites them",
         choices=(True, False))
question("ch5a.copies_left",
         "scale_and_shift changes an intermediate in place (z.add_(y)) and its input in place (x.mul_(3)). After "
         "functionalization, how many copy_ nodes does its graph have?",
         why="an intermediate's update becomes a pure add; only the input's new value must reach the caller's "
             "tensor, by one copy_ at the end",
         choices=(0, 1, 2, 3))
question("ch5a.backend_sees",
         "A torch.compile backend reads the example value Dynamo stored for each graph input. What type is it?",
         why="Dynamo traces with fake tensors: each input's example_value is the FakeTensor it traced with",
         choices=("Tensor", "FakeTensor", "FunctionalTensor", "Parameter"))


# ---------------------------------------------------------------------------------------------
# the operator of ch5a.fake_impl
# ---------------------------------------------------------------------------------------------

@numba.njit(cache=True)
def _window_loop(x: np.ndarray, out: np.ndarray, size: int, step: int) -> None:  # pragma: no cover - numba
    for r in range(x.shape[0]):
        for j in range(out.shape[1]):
            s = 0.0
            for k in range(size):
                s += x[r, j * step + k]
            out[r, j] = s


def _memory(t: torch.Tensor) -> np.ndarray:
    """The NumPy view of a contiguous tensor's memory (device memory for npu)."""
    if t.device.type == "cpu":
        return t.numpy()
    from .. import device_array

    return device_array(t)


def window_sums_kernel(x: torch.Tensor, size: int, step: int) -> torch.Tensor:
    """The real kernel of ``window_sums``: sums over windows of ``size`` elements along the last dimension.

    Window ``j`` covers elements ``j * step`` to ``j * step + size - 1``; a window that would run past the end
    is left out, so a last dimension of length ``L`` gives ``(L - size) // step + 1`` windows when
    ``L >= size``, and none when ``L < size``. The result has ``x``'s leading dimensions, dtype and device.
    The sums are computed by a numba loop over the tensor's memory: this kernel needs real data.
    """
    if x.dim() < 1 or size < 1 or step < 1:
        raise ValueError("window_sums needs a tensor of at least one dimension and size, step >= 1")
    src = x.contiguous()
    length = src.shape[-1]
    n = (length - size) // step + 1 if length >= size else 0
    out = torch.empty((*src.shape[:-1], n), dtype=src.dtype, device=src.device)
    if out.numel():
        _window_loop(_memory(src).reshape(-1, length), _memory(out).reshape(-1, n), size, step)
    return out


def window_sums(x: torch.Tensor, size: int, step: int) -> torch.Tensor:
    """Sums over sliding windows of the last dimension (the body of the custom operator; see the kernel)."""
    return window_sums_kernel(x, size, step)


def define_window_sums(qualname: str) -> Any:
    """A fresh custom operator ``qualname`` (e.g. ``"mylab::window_sums"``) running :func:`window_sums_kernel`.

    It has no fake implementation yet: register one with ``op.register_fake(fn)``.
    """
    return torch.library.custom_op(qualname, mutates_args=())(window_sums)


_OPS = itertools.count()


def _meta(t: Any) -> Any:
    """What a fake implementation must get right: shape, dtype and device type (plain data)."""
    if not isinstance(t, torch.Tensor):
        return f"not a tensor: {type(t).__name__}"
    return [list(t.shape), str(t.dtype), t.device.type]


def _under_fake(op: Any, x: torch.Tensor, size: int, step: int) -> dict[str, Any]:
    """Run ``op`` on a fake copy of ``x``: the output's metadata, and whether it shares ``x``'s storage."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.multiprocessing.reductions import StorageWeakRef

    with FakeTensorMode() as mode:
        fx = mode.from_tensor(x)
        out = op(fx, size, step)
        fresh = isinstance(out, torch.Tensor) and StorageWeakRef(out.untyped_storage()) != StorageWeakRef(
            fx.untyped_storage())
        return {"meta": _meta(out), "fake": isinstance(out, FakeTensor), "fresh": fresh}


def _compiled_lengths(op: Any, xs: list[torch.Tensor]) -> dict[str, Any]:
    """Compile ``op(x, 3, 2) * 2`` with the last dimension symbolic; call it on each of ``xs``."""
    import torch._dynamo

    from .ch5 import CountingBackend

    torch._dynamo.reset()
    counter = CountingBackend("eager")
    try:
        fn = torch.compile(lambda t: op(t, 3, 2) * 2, backend=counter, fullgraph=True)
        outs = []
        for x in xs:
            x = x.clone()
            torch._dynamo.mark_dynamic(x, x.dim() - 1)
            outs.append(fn(x).cpu())
        return {"outs": outs, "compiles": counter.compiles}
    finally:
        torch._dynamo.reset()


#: (description, shape, size, step, dtype, device, hidden)
FAKE_CASES: list[tuple[str, tuple[int, ...], int, int, torch.dtype, str, bool]] = [
    ("x (4, 10) on npu, size 3, step 1", (4, 10), 3, 1, torch.float32, "npu", False),
    ("x (4, 10) on cpu, size 4, step 3", (4, 10), 4, 3, torch.float32, "cpu", False),
    ("x (2, 3, 9) in float64 on npu, size 2, step 2", (2, 3, 9), 2, 2, torch.float64, "npu", False),
    ("x (5,) on npu (one dimension), size 2, step 1", (5,), 2, 1, torch.float32, "npu", True),
    ("x (3, 6) on npu, size 6 = the length: one window", (3, 6), 6, 1, torch.float32, "npu", True),
    ("x (3, 3) on npu, size 5 > the length: no window", (3, 3), 5, 1, torch.float32, "npu", True),
    ("x (3, 2) on npu, size 7, step 4: no window", (3, 2), 7, 4, torch.float32, "npu", True),
    ("x (2, 11) on npu, step 4 > size 2: windows with gaps", (2, 11), 2, 4, torch.float32, "npu", True),
    ("x (0, 7) on npu: no rows", (0, 7), 3, 2, torch.float32, "npu", True),
    ("x (2, 4, 2, 8) in float64 on cpu, size 3, step 3", (2, 4, 2, 8), 3, 3, torch.float64, "cpu", True),
]


def _case_input(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int) -> torch.Tensor:
    return randn(*shape, seed=seed, dtype=dtype).to(device)


@exercise("ch5a.fake_impl", "A fake implementation for window_sums, checked under FakeTensorMode",
          names=["window_sums_fake"], timeout=90)
def _fake_impl(t: Tester, window_sums_fake) -> None:
    from torch._library.custom_ops import CustomOpDef

    if not t.expect("window_sums_fake is a function", callable(window_sums_fake) and not isinstance(
            window_sums_fake, CustomOpDef), expected="def window_sums_fake(x, size, step): ...",
                    got=short(window_sums_fake), hint="define a function taking (x, size, step)"):
        return
    op = define_window_sums(f"ch5a_check{next(_OPS)}::window_sums")
    op.register_fake(window_sums_fake)
    # what the real kernel returns, before any code of the learner's runs
    cases = [(desc, _case_input(shape, dtype, device, i + 60), size, step, hidden)
             for i, (desc, shape, size, step, dtype, device, hidden) in enumerate(FAKE_CASES)]
    for desc, x, size, step, hidden in cases:
        want = _meta(window_sums_kernel(x, size, step))
        outcome = t.call(_under_fake, op, x, size, step)
        if not outcome.ok:
            t.error(f"under FakeTensorMode: window_sums({desc})", outcome, hidden=hidden,
                    hint="the fake implementation runs on fake tensors: use only x.shape, x.dtype and x.device (a "
                         "value read from x raises), and give a window count of 0 when size > the length")
            continue
        got = outcome.value
        t.expect(f"under FakeTensorMode: window_sums({desc}) has the real kernel's shape, dtype and device",
                 got["meta"] == want, hidden=hidden, expected=f"shape {want[0]}, {want[1]} on {want[2]}",
                 got=(f"shape {got['meta'][0]}, {got['meta'][1]} on {got['meta'][2]}"
                      if isinstance(got["meta"], list) else got["meta"]),
                 hint="(L - size) // step + 1 windows for a last dimension of length L >= size, none when L < size; "
                      "keep x's leading dimensions, its dtype and its device: x.new_empty((*x.shape[:-1], n))")
        if got["meta"] == want:
            t.expect(f"window_sums({desc}): the fake returns a new tensor, not a view of x", got["fresh"],
                     hidden=hidden, expected="a tensor of its own", got="a view of x's storage",
                     hint="the operator returns a new tensor (its schema has no alias annotation): make it with "
                          "x.new_empty(...), not by slicing or viewing x")
    for device, hidden in (("cpu", False), ("npu", True)):
        x = randn(3, 9, seed=71).to(device)
        outcome = t.call(lambda o=op, a=x: torch.library.opcheck(
            o, (a, 4, 2), test_utils=("test_faketensor", "test_aot_dispatch_dynamic"), raise_exception=False))
        if not outcome.ok:
            t.error(f"torch.library.opcheck(window_sums, (x (3, 9) on {device}, 4, 2))", outcome, hidden=hidden,
                    hint="opcheck itself failed to run the operator with your fake implementation")
            continue
        for test, result in outcome.value.items():
            t.expect(f"opcheck on {device}: {test}", result == "SUCCESS", hidden=hidden, expected="SUCCESS",
                     got=str(result).strip().splitlines()[0][:200] if result != "SUCCESS" else "SUCCESS",
                     hint="the fake must agree with the real kernel for fake tensors of any size, symbolic ones too")
    lengths = [randn(4, n, seed=72 + n).to("npu") for n in (10, 13, 8)]
    want = [window_sums_kernel(x, 3, 2).cpu() * 2 for x in lengths]
    outcome = t.call(_compiled_lengths, op, lengths)
    if not outcome.ok:
        t.error("torch.compile(lambda x: window_sums(x, 3, 2) * 2, fullgraph=True), the length marked dynamic",
                outcome, hidden=True,
                hint="with a dynamic length, x.shape[-1] is a SymInt: compute with it as with an int, but never turn "
                     "it into one (int(...), .item(), a Python list of sizes)")
        return
    t.expect("compiled with a symbolic length: one graph for the lengths 10, 13 and 8",
             outcome.value["compiles"] == 1, hidden=True, expected="1 graph", got=f"{outcome.value['compiles']}",
             hint="int(x.shape[-1]) makes the length a constant of the graph: keep the SymInt")
    t.case("compiled with a symbolic length: the values (the real kernel runs)", lambda v=outcome.value: v["outs"],
           expected=want, hidden=True, hint="the fake decides the shape the compiled graph expects: get it right")


# ---------------------------------------------------------------------------------------------
# ch5a.new_bytes
# ---------------------------------------------------------------------------------------------

def _returned_tensors(func: Any, out: Any) -> list[torch.Tensor]:
    """The tensors ``func`` returned that its schema does not declare as aliases of an input."""
    returns = func._schema.returns
    values = out if len(returns) > 1 else [out]
    fresh: list[torch.Tensor] = []
    for ret, value in zip(returns, values):
        if ret.alias_info is not None:
            continue
        for v in (value if isinstance(value, (list, tuple)) else [value]):
            if isinstance(v, torch.Tensor):
                fresh.append(v)
    return fresh


def _reference_new_bytes(program: Callable[[], Any]) -> int:
    """The grader's count: storages of the non-aliased outputs of every ATen call, under FakeTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.total += sum(t.untyped_storage().nbytes() for t in _returned_tensors(func, out))
            return out

    with FakeTensorMode(), _Count() as count:
        program()
    return count.total


def _big_linear() -> torch.Tensor:
    big = torch.nn.Linear(8192, 8192, device="npu")
    return big(torch.empty(64, 8192, device="npu")).relu()


def _views_and_in_place() -> torch.Tensor:
    x = torch.randn(6, 4, device="npu")
    y = x.t()
    z = x.view(24)
    row = x[1]
    x.add_(1)
    z.mul_(2)
    return (y.t() + row).sum()


def _several_outputs() -> torch.Tensor:
    x = torch.randn(5, 6, device="npu")
    values, indices = torch.max(x, dim=1)
    parts = torch.split(x, 2)
    shifted = torch._foreach_add(list(parts), 1.0)
    return values + indices + shifted[0].sum()


def _gaps_and_copies() -> torch.Tensor:
    s = torch.empty_strided((2, 3), (4, 1), device="npu")  # a storage of 7 elements for 6 values
    d = torch.randn(3, 5, device="npu").to(torch.float64)
    c = d.t().contiguous()
    return s.sum() + c.sum()


def _nothing_new() -> None:
    x = torch.ones(4, 4, device="npu")
    x.view(2, 8).add_(3)
    x.t_()
    x.unsqueeze(0).squeeze_(0)


#: (description, program, hidden)
BYTE_PROGRAMS: list[tuple[str, Callable[[], Any], bool]] = [
    ("nn.Linear(8192, 8192) built on npu and run on a batch of 64, then relu", _big_linear, False),
    ("views (t, view, a row) and in-place calls (add_, mul_) of a (6, 4) npu tensor", _views_and_in_place, False),
    ("torch.max over a dimension (values and int64 indices), split, and _foreach_add over the parts",
     _several_outputs, True),
    ("empty_strided with a gap in its storage, a float64 copy, a transposed copy", _gaps_and_copies, True),
    ("a program that only views and changes a tensor in place after making it", _nothing_new, True),
]


def _watched(count_new_bytes: Callable[..., Any], program: Callable[[], Any]) -> dict[str, Any]:
    """Run the learner's function on ``program`` with the NPU's memory counters watching."""
    torch.npu.synchronize()
    before = torch.npu.memory_allocated()
    torch.npu.reset_peak_memory_stats()
    answer = count_new_bytes(program)
    peak = torch.npu.max_memory_allocated()
    return {"answer": answer, "allocated": max(0, peak - before)}


@exercise("ch5a.new_bytes", "How much new memory does a program ask for? Count it on fake tensors",
          names=["count_new_bytes"], timeout=90)
def _new_bytes(t: Tester, count_new_bytes) -> None:
    expected = [(desc, program, hidden, _reference_new_bytes(program)) for desc, program, hidden in BYTE_PROGRAMS]
    for desc, program, hidden, want in expected:
        outcome = t.call(_watched, count_new_bytes, program)
        if not outcome.ok:
            t.error(f"count_new_bytes({desc})", outcome, hidden=hidden,
                    hint="with FakeTensorMode(), YourMode() as mode: program(); then return the total; in "
                         "__torch_dispatch__, compute out = func(*args, **(kwargs or {})) first and return it")
            continue
        got = outcome.value
        answer = got["answer"]
        t.expect(f"count_new_bytes({desc}) returns an int", type(answer) is int, hidden=hidden,
                 expected="an int", got=type(answer).__name__,
                 hint="add up untyped_storage().nbytes(), which is an int, and return the total")
        t.case(f"count_new_bytes({desc}): the bytes of the new storages", lambda a=answer: a, expected=want,
               hidden=hidden, hint=_bytes_hint(desc))
        t.expect(f"count_new_bytes({desc}) allocates nothing on the npu (the program runs on fake tensors)",
                 got["allocated"] == 0, hidden=hidden, expected="0 bytes allocated on the npu",
                 got=f"{got['allocated']:,} bytes allocated on the npu",
                 hint="run the program inside FakeTensorMode (with FakeTensorMode(), YourMode() as mode: ...): every "
                      "tensor it makes is then fake, with no memory on the device")


def _bytes_hint(desc: str) -> str:
    if "views" in desc or "only views" in desc:
        return ("a return annotated Tensor(a) (a view) or Tensor(a!) (changed in place) is the input's memory, not "
                "new memory: skip the returns whose func._schema.returns[i].alias_info is not None")
    if "max" in desc:
        return ("an operator may return several tensors (values and indices: int64, 8 bytes each) or a list of them "
                "(_foreach_add); split returns Tensor(a)[]: views of its input; look at every return of the schema")
    if "gap" in desc:
        return ("count the storage, t.untyped_storage().nbytes(): a strided tensor's storage can be larger than "
                "numel() * element_size()")
    return ("for every ATen call, add untyped_storage().nbytes() of each returned tensor whose schema return has no "
            "alias annotation (func._schema.returns[i].alias_info is None), a factory's output included")
