"""Chapter A: PyTorch's architecture - tensors as views of a storage, contiguity, autograd's graph.

Five exercises of rising difficulty:

* ``arch.view_geometry`` - the sizes, strides and storage offset of an indexed view, by arithmetic;
* ``arch.contiguity`` - PyTorch's contiguity rule from sizes and strides (size-1 and empty dims);
* ``arch.backward_nodes`` - walk ``next_functions`` and count autograd's nodes (shared nodes once);
* ``arch.fix_inplace`` - repair a function whose in-place update breaks its backward pass;
* ``arch.custom_function`` - build a ``torch.autograd.Function`` (forward and backward by hand, a
  broadcast input) that runs on the npu and passes ``gradcheck``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from ..grading.inputs import randn
from ..grading.predictions import question
from ..grading.registry import chapter, exercise
from ..grading.structure import torch_calls
from ..grading.tester import Tester, short
from ..grading.values import is_plain_tensor

chapter("arch", "PyTorch architecture and core principles", [
    "A Python call goes through the dispatcher (autograd key, then backend key) to one kernel",
    "A tensor is a storage plus sizes, strides and a storage offset; views share the storage",
    "Contiguity is a property of the strides, and size-1 dimensions do not count",
    "Autograd records grad_fn nodes while the forward runs (define-by-run) and walks them backwards",
    "An in-place update bumps a version counter; autograd refuses saved tensors that changed",
    "nn.Module owns parameters and buffers; .to('npu') moves them into device memory",
    "Tensors of one operation must be on one device",
])

# --- predict, then run: the chapter's questions ---------------------------------------------------------------

question("arch.view_strides", "What are the strides and the storage offset of base[::2, 1:3], for base of shape "
         "(3, 4) with strides (4, 1) and offset 0? Answer ((stride0, stride1), offset).",
         why="every second row skips two rows of 4 elements (stride 2 * 4 = 8), neighbouring columns stay 1 apart, "
             "and the view starts at row 0, column 1: offset 0 * 4 + 1 * 1 = 1")
question("arch.div_nodes", "How many DivBackward0 nodes does autograd record when normalise runs on [3.0, -7.0]?",
         why="the largest entry is 7 in size: 7 -> 3.5 -> 1.75 -> 0.875 takes three halvings, and each trip round "
             "the Python loop runs v / 2 again, one more node in the graph (define-by-run)")
question("arch.inplace_after_add", "b = a + 1 is computed, then a is changed in place (a.add_(1)). Does "
         "b.sum().backward() still work?",
         why="the gradient of a + 1 is the incoming gradient unchanged, so AddBackward0 saved nothing; no saved "
             "tensor's version changed, so autograd has nothing to refuse",
         choices=(True, False))
question("arch.autocast_slower", "On which chip is the float16 autocast training step slower than the float32 one?",
         why="the teaching chip has no 16-bit unit: its kernels compute float16 in float32 anyway, so autocast only "
             "adds the cast kernels; the other two run the products on a 16-bit matrix unit many times faster",
         choices=("teaching", "npu-like", "gpu-like", "none"))


# ---------------------------------------------------------------------------------------------
# arch.view_geometry
# ---------------------------------------------------------------------------------------------

def _real_view(size, stride, offset, index):
    """What PyTorch does: make the view on a storage large enough, then index it."""
    extent = offset + sum((s - 1) * st for s, st in zip(size, stride) if s > 0) + 1
    base = torch.empty(max(extent, 1)).as_strided(size, stride, offset)
    v = base[index]
    return tuple(v.shape), tuple(v.stride()), v.storage_offset()


def _spec(index) -> str:
    def one(i):
        if isinstance(i, slice):
            parts = ["" if p is None else str(p) for p in (i.start, i.stop)]
            return ":".join(parts) + ("" if i.step is None else f":{i.step}")
        return str(i)

    return "[" + ", ".join(one(i) for i in index) + "]"


_GEOMETRY_CASES = [
    # (size, stride, offset, index, hidden, hint)
    ((3, 4), (4, 1), 0, (1,), False,
     "an integer index removes its dimension and moves the offset by index * stride; the other dimensions stay"),
    ((3, 4), (4, 1), 0, (slice(None), 2), False,
     "a full slice keeps its dimension unchanged; the integer 2 on the last dimension adds 2 * 1 to the offset"),
    ((3, 4), (4, 1), 0, (slice(None, None, 2), slice(1, 3)), False,
     "a slice's step multiplies the stride; its start adds start * stride to the offset; "
     "its size is len(range(start, stop, step))"),
    ((4, 3), (1, 4), 0, (slice(1, None), -1), False,
     "use the base's own strides, whatever they are; a negative integer counts from the end (add the size)"),
    ((2, 3, 4), (12, 4, 1), 0, (-1, slice(None, None, 3)), False,
     "-1 selects the last block: offset += (size - 1) * stride; the last dimension is not indexed and stays"),
    ((5,), (2,), 3, (slice(-3, None),), True,
     "start from the base's own offset; negative slice bounds count from the end (slice.indices does it)"),
    ((6,), (1,), 0, (slice(4, 2),), True,
     "an empty slice keeps its dimension with size 0, and its start still moves the offset"),
    ((7,), (1,), 0, (slice(1, None, 3),), True,
     "when the step does not divide the length, the size rounds up: len(range(start, stop, step))"),
    ((3, 4), (4, 1), 0, (), True, "an empty index gives the view back unchanged"),
    ((4, 5), (5, 1), 2, (slice(2, 100), slice(-2, -1)), True,
     "a stop past the end is clamped to the size: use slice.indices(size)"),
    ((2, 3, 4), (1, 8, 2), 5, (1, slice(None), 3), True,
     "every integer removes its dimension and moves the offset, wherever it stands in the index"),
]


def _watched(fn, calls: list[str]):
    """``fn``, recording into ``calls`` the torch functions it calls (it should call none)."""
    def run(*args):
        with torch_calls() as seen:
            try:
                return fn(*args)
            finally:
                calls.extend(seen)
    return run


def _no_torch_calls(t: Tester, calls: list[str], what: str) -> None:
    t.expect(f"{what} works it out by arithmetic (it calls no torch function, creates no tensor)", not calls,
             expected="no torch calls", got=", ".join(sorted(set(calls))[:5]) or "none",
             hint="do not build a tensor to ask PyTorch: compute the answer yourself from the sizes and strides")


@exercise("arch.view_geometry", "The geometry of an indexed view", names=["view_geometry"])
def _view_geometry(t: Tester, view_geometry) -> None:
    expected = [_real_view(size, stride, offset, index) for size, stride, offset, index, _, _ in _GEOMETRY_CASES]
    calls: list[str] = []
    for (size, stride, offset, index, hidden, hint), want in zip(_GEOMETRY_CASES, expected):
        def check(value, expected=want):
            if type(value) not in (tuple, list) or len(value) != 3:
                return False, "return a tuple (sizes, strides, offset)" + (
                    " (did you forget to `return`?)" if value is None else "")
            sizes, strides, off = value
            if type(sizes) is not tuple or type(strides) is not tuple or type(off) is not int:
                return False, "return (tuple, tuple, int): sizes and strides as tuples of ints, the offset an int"
            if any(type(v) is not int for v in sizes + strides):
                return False, "sizes and strides should be tuples of ints"
            got_n = (sizes, strides, off)
            if got_n == expected:
                return True, ""
            wrong = [name for name, g, e in zip(("sizes", "strides", "offset"), got_n, expected) if g != e]
            return False, "wrong " + (wrong[0] if len(wrong) == 1 else ", ".join(wrong[:-1]) + " and " + wrong[-1])

        t.case(f"view_geometry({size}, {stride}, {offset}, {_spec(index)})", _watched(view_geometry, calls), size,
               stride, offset, index, expected=want, hint=hint, hidden=hidden, check=check)
    _no_torch_calls(t, calls, "view_geometry")


# ---------------------------------------------------------------------------------------------
# arch.contiguity
# ---------------------------------------------------------------------------------------------

_CONTIGUITY_CASES = [
    # (size, stride, hidden, hint)
    ((2, 3), (3, 1), False, "row by row: the last stride is 1, each earlier one the product of the sizes after it"),
    ((3, 2), (1, 3), False, "a transpose: neighbours in the last dimension are 3 elements apart"),
    ((2, 3), (4, 1), False, "rows 4 apart but only 3 long: a column slice of a wider tensor leaves gaps"),
    ((3, 1), (1, 1), False, "a dimension of size 1 is never stepped along, so its stride does not matter"),
    ((1, 3), (100, 1), False, "a dimension of size 1 is never stepped along, so its stride does not matter"),
    ((4,), (0,), False, "stride 0 on a dimension longer than 1 (an expand) repeats one element: not contiguous"),
    ((0, 5), (7, 3), False, "a tensor with no elements is contiguous whatever its strides"),
    ((), (), False, "a 0-dimensional tensor (a scalar) is contiguous"),
    ((3, 4, 5), (20, 5, 1), True, "compare each stride with the product of the sizes after it"),
    ((3, 4, 5), (20, 1, 4), True, "a permutation of the last two dimensions is not contiguous"),
    ((5, 1, 1), (1, 5, 5), True, "skip every size-1 dimension when you compare strides"),
    ((2, 0, 3), (0, 0, 0), True, "any dimension of size 0 means no elements: contiguous"),
    ((6,), (2,), True, "a step slice: elements 2 apart"),
    ((1,), (0,), True, "size 1 with stride 0 is still contiguous"),
    ((2, 1, 3), (3, 7, 1), True, "skip every size-1 dimension when you compare strides"),
]


@exercise("arch.contiguity", "Contiguous or not, from sizes and strides", names=["is_contiguous_by_strides"])
def _contiguity(t: Tester, is_contiguous_by_strides) -> None:
    expected = [torch.empty_strided(size, stride).is_contiguous() for size, stride, _, _ in _CONTIGUITY_CASES]
    calls: list[str] = []
    for (size, stride, hidden, hint), want in zip(_CONTIGUITY_CASES, expected):
        def check(value, expected=want):
            if type(value) is not bool:
                return False, "return True or False" + (" (did you forget to `return`?)" if value is None else "")
            return value == expected, ""

        t.case(f"is_contiguous_by_strides({size}, {stride})", _watched(is_contiguous_by_strides, calls), size, stride,
               expected=want, hint=hint, hidden=hidden, check=check)
    _no_torch_calls(t, calls, "is_contiguous_by_strides")


# ---------------------------------------------------------------------------------------------
# arch.backward_nodes
# ---------------------------------------------------------------------------------------------

def _reference_nodes(root) -> dict[str, int]:
    seen: set = set()
    counts: Counter = Counter()
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        counts[type(node).__name__] += 1
        stack.extend(fn for fn, _ in node.next_functions)
    return dict(counts)


def _graphs(hidden: bool) -> list[tuple[str, torch.Tensor, str]]:
    """(description, output tensor, hint) for the graphs of the check, built on npu."""
    w = randn(3, seed=1, device="npu").requires_grad_()
    b = randn(3, seed=2, device="npu").requires_grad_()
    x = randn(3, seed=3, device="npu")
    a = randn(2, 3, seed=4, device="npu").requires_grad_()
    if not hidden:
        return [
            ("(w * x + b).sum(), x without grad", (w * x + b).sum(),
             "every leaf that requires grad ends in an AccumulateGrad node; x needs none (its slot is None)"),
            ("(a * a).exp(): a is used twice", (a * a).exp(),
             "count each node once, even when two edges lead to it (keep a set of nodes already seen)"),
            ("a leaf: a itself", a, "a leaf has no grad_fn (root is None): return an empty dict"),
        ]
    with torch.random.fork_rng(devices=[]):  # the learner's random stream stays as it was
        torch.manual_seed(0)
        lin = torch.nn.Linear(3, 2).to("npu")
    h = a.sin()
    return [
        ("linear + relu + mean", lin(a).relu().mean(), "walk every path; the Linear's weight and bias are leaves"),
        ("h = a.sin(); (h * h + h).sum()", (h * h + h).sum(), "a node reached by three edges is still one node"),
        ("a view chain", a.t()[0].sum() * 2, "views have backward nodes too (TBackward0, SelectBackward0)"),
        ("w detached", (w.detach() * b).sum(), "a detached tensor is not part of the graph"),
    ]


@exercise("arch.backward_nodes", "Walk autograd's graph", names=["backward_nodes"])
def _backward_nodes(t: Tester, backward_nodes) -> None:
    for hidden in (False, True):
        for desc, out, hint in _graphs(hidden):
            root = out.grad_fn
            expected = _reference_nodes(root)

            def check(got, expected=expected):
                if not isinstance(got, dict):
                    return False, "return a dict {node class name: count}" + (
                        " (did you forget to `return`?)" if got is None else "")
                got = {k: v for k, v in got.items() if v}
                if got == expected:
                    return True, ""
                diff = sorted(k for k in set(got) | set(expected) if got.get(k) != expected.get(k))
                return False, "different counts for " + ", ".join(diff)

            t.case(f"backward_nodes(root of {desc})", backward_nodes, root, expected=expected, hint=hint,
                   hidden=hidden, check=check)


# ---------------------------------------------------------------------------------------------
# arch.fix_inplace
# ---------------------------------------------------------------------------------------------

def _softmax_rows_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=1)


def _forward_backward(fn, x: torch.Tensor):
    """Run fn on a fresh leaf copy of x, backward a weighted sum; (output, grad, input changed?, softmax calls)."""
    leaf = x.detach().clone().requires_grad_()
    version, before = leaf._version, leaf.detach().clone()
    with torch_calls() as seen:
        out = fn(leaf)
    softmaxes = sorted({name for name in seen if "softmax" in name})
    weights = torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape).to(out.device)
    (out * weights).sum().backward()
    changed = leaf._version != version or not torch.equal(leaf.detach().cpu(), before.cpu())
    return out.detach(), leaf.grad, changed, softmaxes


@exercise("arch.fix_inplace", "Repair an in-place update that breaks backward", names=["softmax_rows"])
def _fix_inplace(t: Tester, softmax_rows) -> None:
    cases = [("a 2x3 input", randn(2, 3, seed=5, device="npu"), False),
             ("a 4x5 input", randn(4, 5, seed=6, device="npu"), False),
             ("one row of large values", (randn(1, 6, seed=7) * 4).to("npu"), True),
             ("a 3x1 input", randn(3, 1, seed=8, device="npu"), True)]
    abouts = {"one row of large values": "(here one row of large values: exp grows fast; subtracting the row's "
                                         "max first gives the same softmax and stays finite) ",
              "a 3x1 input": "(here a single column: every row's softmax is 1, and each row's gradient flows "
                             "through its one element) "}
    for desc, x, hidden in cases:
        about = abouts.get(desc, "")
        want_out, want_grad, _, _ = _forward_backward(_softmax_rows_reference, x)
        outcome = t.call(_forward_backward, softmax_rows, x)
        if not outcome.ok:
            if "modified by an inplace operation" in outcome.error:
                hint = ("exp() saves its output for the backward pass; dividing that output in place (/=, div_) "
                        "changes what was saved: divide out of place (y / y.sum(...)) instead")
            elif "does not require grad" in outcome.error:
                hint = "the result is cut off from x (a .detach() or torch.no_grad()?): backward cannot reach x"
            else:
                hint = "softmax_rows(x) should run forward and backward like torch.softmax(x, dim=1)"
            t.error(f"softmax_rows on {desc}: forward and backward", outcome, hidden=hidden, hint=about + hint)
            continue
        out, grad, changed, softmaxes = outcome.value
        t.expect(f"softmax_rows on {desc}: repaired, not replaced (exp and a division by the row sums, no softmax "
                 "of PyTorch's)", not softmaxes, hidden=hidden, expected="no softmax call",
                 got=", ".join(softmaxes) or "none",
                 hint="the exercise is to repair softmax_rows_inplace: keep y = x.exp() and divide by the row sums, "
                      "out of place; torch.softmax / F.softmax / x.softmax compute it for you")
        t.case(f"softmax_rows on {desc}: values", lambda o=out: o, expected=want_out, hidden=hidden,
               hint=about + "each row should be exp(x) divided by the row's sum of exp(x)")
        t.case(f"softmax_rows on {desc}: gradient", lambda g=grad: g, expected=want_grad, hidden=hidden,
               rtol=1e-4, atol=1e-5, hint=about + "the gradient differs: did you detach part of the computation?")
        t.expect(f"softmax_rows on {desc}: the input is left unchanged", not changed, hidden=hidden,
                 expected="x._version unchanged", got="x was modified in place" if changed else "unchanged",
                 hint="do not update x in place (x.exp_(), x.data -= ...): the caller's tensor would change")
    # a value check on its own, without autograd
    x = randn(2, 4, seed=9, device="npu")
    outcome = t.call(softmax_rows, x)
    if outcome.ok:
        t.expect("softmax_rows returns an npu tensor for an npu input",
                 is_plain_tensor(outcome.value) and outcome.value.device.type == "npu",
                 expected="a tensor on npu", got=short(outcome.value),
                 hint="return the result on the input's device: an npu input gives an npu result")


# ---------------------------------------------------------------------------------------------
# arch.custom_function: a torch.autograd.Function of your own, forward and backward by hand
# ---------------------------------------------------------------------------------------------

#: Captured when the lab is imported, so an answer cannot replace what the check runs.
_gradcheck = torch.autograd.gradcheck


def _sloped_swish_np(x, beta):
    """The reference values and gradients, from NumPy: y = x * sigmoid(beta * x)."""
    import numpy as np

    s = 1.0 / (1.0 + np.exp(-beta * x))
    y = x * s
    ds = s * (1.0 - s)
    return y, s + x * beta * ds, x * x * ds


def _as_np(t: torch.Tensor):
    with torch._C.DisableTorchFunction():
        return t.detach().cpu().double().numpy()


def _swish_expected(x: torch.Tensor, beta: torch.Tensor, weights: torch.Tensor):
    """(values, dL/dx, dL/dbeta) for L = sum(y * weights), beta broadcast against x as PyTorch does."""
    import numpy as np

    xn, bn, wn = _as_np(x), _as_np(beta), _as_np(weights)
    y, dx, db = _sloped_swish_np(xn, bn)
    gx = wn * dx
    gb = wn * db
    extra = gb.ndim - bn.ndim  # beta's gradient sums over the dimensions it was broadcast along
    gb = gb.sum(axis=tuple(range(extra))) if extra else gb
    keep = tuple(i for i, n in enumerate(bn.shape) if n == 1 and gb.shape[i] != 1)
    gb = gb.sum(axis=keep, keepdims=True) if keep else gb
    as_t = lambda a: torch.from_numpy(np.array(a, dtype=np.float64)).to(x.dtype)  # noqa: E731
    return as_t(y), as_t(gx), as_t(gb.reshape(bn.shape))


def _function_run(cls: Any, x: torch.Tensor, beta: torch.Tensor) -> dict[str, Any]:
    """Forward and backward through ``cls.apply`` on the device, with what crossed to the host."""
    from .. import transfer_stats
    from ..device import fallback

    x = x.detach().requires_grad_(True)
    beta = beta.detach().requires_grad_(True)
    fell, moved = dict(fallback.counts), transfer_stats()
    out = cls.apply(x, beta)
    node = type(out.grad_fn).__name__ if isinstance(out, torch.Tensor) and out.grad_fn is not None else None
    inputs_of_node = []
    if node is not None:
        inputs_of_node = [type(n).__name__ for n, _ in out.grad_fn.next_functions if n is not None]
    weights = torch.arange(out.numel(), dtype=out.dtype, device=out.device).reshape(out.shape) / out.numel() - 0.3
    loss = (out * weights).sum()
    recorded: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:  # autograd saves a tensor: it is recording a graph
        recorded.append(1)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss.backward()  # runs your backward; with its graph already built, nothing should be recorded
    after = transfer_stats()
    crossed = sum(after[k] - moved[k] for k in ("host_to_device_bytes", "device_to_host_bytes"))
    fallbacks = sorted(k for k, v in fallback.counts.items() if v != fell.get(k, 0))
    return {"out": out.detach(), "gx": x.grad, "gb": beta.grad, "node": node, "next": inputs_of_node,
            "crossed": crossed, "fallbacks": fallbacks, "weights": weights.detach(), "recorded": len(recorded)}


def _gradcheck_on_npu(cls: Any, x: torch.Tensor, beta: torch.Tensor) -> bool:
    x = x.detach().double().requires_grad_(True)
    beta = beta.detach().double().requires_grad_(True)
    return bool(_gradcheck(cls.apply, (x, beta), eps=1e-6, atol=1e-5, rtol=1e-4))


def _overrides_apply(cls: type) -> bool:
    for klass in cls.__mro__:
        if klass is torch.autograd.Function:
            return False
        if "apply" in vars(klass):
            return True
    return False


@exercise("arch.custom_function", "Build an autograd.Function: forward and backward by hand, on npu",
          names=["SlopedSwish"], timeout=60)
def _custom_function(t: Tester, SlopedSwish) -> None:  # noqa: N803 - the learner's class
    is_function = isinstance(SlopedSwish, type) and issubclass(SlopedSwish, torch.autograd.Function)
    if not t.expect("SlopedSwish is a subclass of torch.autograd.Function", is_function,
                    expected="class SlopedSwish(torch.autograd.Function)", got=short(SlopedSwish),
                    hint="define a class deriving from torch.autograd.Function with static forward and backward"):
        return
    t.expect("SlopedSwish uses Function.apply as it is (forward and backward are yours, apply is PyTorch's)",
             not _overrides_apply(SlopedSwish), expected="no apply of its own", got="apply overridden"
             if _overrides_apply(SlopedSwish) else "PyTorch's apply",
             hint="write forward(ctx, x, beta) and backward(ctx, grad_out); do not override apply")
    cases = [
        ("x (4, 5), beta (5,) per column", (4, 5), (5,), 1, False, ""),
        ("x (3, 6), beta a 0-dim tensor", (3, 6), (), 2, False,
         "beta is 0-dim: its gradient is the sum over every element of x; "),
        ("x (2, 3, 4), beta (3, 1)", (2, 3, 4), (3, 1), 3, True,
         "x is 3-D and beta (3, 1) broadcasts along dimensions 0 and 2: its gradient must be summed back to "
         "beta's shape; "),
        ("x with large magnitudes (2, 8) * 30, beta (8,)", (2, 8), (8,), 4, True,
         "large |beta * x|: exp(-beta * x) overflows to inf for very negative arguments; sigmoid is still "
         "1 / (1 + exp(-z)) = 0 there, but the derivative s * (1 - s) must not become nan; "),
    ]
    for desc, xs, bs, seed, hidden, about in cases:
        x = randn(*xs, seed=seed, device="npu") * (30 if "large" in desc else 1)
        beta = randn(*bs, seed=seed + 50, device="npu") if bs else randn(seed=seed + 50, device="npu")
        outcome = t.call(_function_run, SlopedSwish, x, beta)
        if not outcome.ok:
            err = outcome.error
            hint = ("backward returns one gradient per input of forward (x and beta), in the order forward "
                    "takes them; a gradient may have the output's shape only where the input broadcasts to it"
                    ) if "invalid gradient" in err or "number of gradients" in err else (
                    "forward(ctx, x, beta) computes x * sigmoid(beta * x) and saves what backward needs with "
                    "ctx.save_for_backward; backward(ctx, grad_out) returns (dL/dx, dL/dbeta)")
            t.error(f"SlopedSwish.apply on {desc}: forward and backward on npu", outcome, hidden=hidden,
                    hint=about + hint)
            continue
        run = outcome.value
        want_y, want_gx, want_gb = _swish_expected(x, beta, run["weights"])
        t.case(f"{desc}: values x * sigmoid(beta * x)", lambda r=run: r["out"].cpu(), expected=want_y,
               hidden=hidden, rtol=1e-4, atol=1e-5, hint=about + "forward computes x * sigmoid(beta * x)")
        t.case(f"{desc}: dL/dx from your backward", lambda r=run: r["gx"].cpu() if r["gx"] is not None else None,
               expected=want_gx, hidden=hidden, rtol=1e-3, atol=1e-4,
               hint=about + "d/dx [x * s(beta x)] = s + x * beta * s * (1 - s) (product rule), times grad_out")
        t.case(f"{desc}: dL/dbeta from your backward", lambda r=run: r["gb"].cpu() if r["gb"] is not None else None,
               expected=want_gb, hidden=hidden, rtol=1e-3, atol=1e-4,
               hint=about + "d/dbeta [x * s(beta x)] = x * x * s * (1 - s), times grad_out, summed to beta's shape")
        t.expect(f"{desc}: backward works the gradients out by hand (no autograd graph recorded inside it)",
                 run["recorded"] == 0, hidden=hidden, expected="no tensor saved by autograd during backward",
                 got=f"{run['recorded']} saved while your backward ran",
                 hint="backward must compute dL/dx and dL/dbeta from the formulas with the tensors forward saved; "
                      "torch.enable_grad() and torch.autograd.grad inside backward let autograd do it for you")
        node = f"{SlopedSwish.__name__}Backward"
        t.expect(f"{desc}: one node of yours in autograd's graph", run["node"] == node
                 and run["next"] == ["AccumulateGrad", "AccumulateGrad"], hidden=hidden,
                 expected=f"out.grad_fn is {node}, fed by the inputs' AccumulateGrad",
                 got=f"{run['node']} <- {run['next']}",
                 hint="the output's grad_fn must be your Function's node (return the result of forward directly, "
                      "not an expression on it)")
        t.expect(f"{desc}: forward and backward stay on the device", run["crossed"] == 0 and not run["fallbacks"],
                 hidden=hidden, expected="0 bytes between host and npu, no CPU fallback",
                 got=f"{run['crossed']} bytes, fallbacks {run['fallbacks']}",
                 hint=about + "compute with torch operators on the npu tensors you are given (no .cpu(), .numpy(), "
                              ".item() or new CPU tensors)")
    x = randn(3, 4, seed=11, device="npu")
    beta = randn(4, seed=12, device="npu")
    outcome = t.call(_gradcheck_on_npu, SlopedSwish, x, beta)
    if not outcome.ok:
        t.error("torch.autograd.gradcheck(SlopedSwish.apply, (x, beta)) in float64 on npu", outcome,
                hint="gradcheck compares your backward with finite differences of your forward, in float64: "
                     "compute in the inputs' dtype (no float32 constants or casts)")
    else:
        t.expect("torch.autograd.gradcheck(SlopedSwish.apply, (x, beta)) in float64 on npu", outcome.value is True,
                 expected="True", got=short(outcome.value), hint="gradcheck must pass")
