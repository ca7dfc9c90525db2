"""Getting started: the ``npu`` device, its memory, a numba kernel, and a first compiler pass."""

from __future__ import annotations

import numpy as np
import torch

from ..grading.inputs import randn
from ..grading.registry import chapter, exercise
from ..grading.structure import torch_calls
from ..grading.tester import Tester, short

chapter("lab", "Getting started with the simulated NPU", [
    "A tensor is a storage plus sizes, strides and an offset",
    "The npu device is PyTorch's PrivateUse1 key under another name",
    "The caching allocator rounds requests up to blocks and reuses freed blocks",
    "A numba kernel is compiled on first call and cached afterwards",
    "An FX pass rewrites the graph and must keep its results the same",
])


_STRIDE_CASES = [  # (shape, hidden, hint)
    ((2, 3, 4), False, "the last dimension has stride 1; each earlier stride is the product of the sizes after it"),
    ((5,), False, "a single dimension: its stride is 1"),
    ((1, 1, 7), False, "size-1 dimensions still get a stride: the product of the sizes after them"),
    ((6, 1), False, "the last dimension has stride 1 even when its size is 1"),
    ((), False, "a 0-dimensional tensor (a scalar) has no strides: return an empty tuple"),
    ((4, 1, 6, 2), True, "a size-1 dimension in the middle: its stride is the product of the sizes after it (12), "
                         "and the dimension before it gets 1 * 12 too"),
    ((3, 0, 2), True, "a size-0 dimension: PyTorch computes the strides before it as if that size were 1 "
                      "(multiply by max(size, 1))"),
]


def _watched(fn, calls: list[str], returned: list[object]):
    """``fn``, recording into ``calls`` the torch functions and operators it runs, into ``returned`` its results."""
    def run(*args):
        with torch_calls() as seen:
            try:
                result = fn(*args)
                returned.append(result)
                return result
            finally:
                calls.extend(seen)
    return run


def _plain(values: list[object], kind: type) -> bool:
    """Every value is a plain ``kind`` (a tuple: of plain ints): a rule on how an answer is computed is judged
    only for an answer that computes something."""
    def ok(v: object) -> bool:
        return type(v) is kind and (kind is not tuple or all(type(s) is int for s in v))  # type: ignore[union-attr]
    return bool(values) and all(ok(v) for v in values)


@exercise("lab.contiguous_strides", "Strides of a contiguous tensor", names=["contiguous_strides"])
def _contiguous_strides(t: Tester, contiguous_strides) -> None:
    expected = [torch.empty(shape).stride() for shape, _, _ in _STRIDE_CASES]  # before the learner's code runs
    calls: list[str] = []
    returned: list[object] = []
    for (shape, hidden, hint), want in zip(_STRIDE_CASES, expected):
        t.case(f"contiguous_strides({shape})", _watched(contiguous_strides, calls, returned), shape, expected=want,
               hint=hint, hidden=hidden, check=lambda got, w=want, s=shape: _strides_ok(got, w, s))
    if not _plain(returned, tuple):
        return  # how the strides are computed is judged once they are tuples of ints (the cases say what is wrong)
    t.expect("contiguous_strides works the strides out from the sizes (it creates no tensor to ask PyTorch)",
             not calls, expected="no tensor created", got=", ".join(sorted(set(calls))[:5]) or "none",
             hint="multiply the sizes yourself, from the last dimension to the first; torch.empty(shape).stride() "
                  "gives PyTorch's answer, not yours")


def _strides_ok(got, expected: tuple[int, ...], shape) -> tuple[bool, str]:
    if type(got) is not tuple:
        return False, f"expected a tuple of ints, got {short(got)}" + (
            " (did you forget to `return`?)" if got is None else " (the exercise asks for a tuple)")
    if any(type(s) is not int for s in got):
        return False, "every stride must be an int"
    if got == expected:
        return True, ""
    # PyTorch computes strides of size-0 dimensions as if the size were 1.
    return False, "" if len(got) == len(expected) else f"{len(got)} strides for {len(shape)} dimensions"


_BLOCK_CASES = [  # (shape, dtype, hidden)
    ((3,), torch.float32, False), ((128,), torch.float32, False), ((129,), torch.float32, False),
    ((10, 10), torch.float64, False), ((0, 4), torch.float32, False),
    ((7, 3), torch.int64, True), ((1000,), torch.float16, True), ((64,), torch.uint8, True),
]


@exercise("lab.block_bytes", "Predict what the NPU's caching allocator reserves", names=["block_bytes"])
def _block_bytes(t: Tester, block_bytes) -> None:
    from ..device.memory import BLOCK_ROUND

    hint = (f"bytes = number of elements * element size, rounded up to a multiple of {BLOCK_ROUND}; "
            "an empty tensor needs no block")
    measured = [_measure(shape, dtype) for shape, dtype, _ in _BLOCK_CASES]  # before the learner's code runs
    allocations: list[int] = []
    returned: list[object] = []
    for (shape, dtype, hidden), want in zip(_BLOCK_CASES, measured):
        size = torch.empty((), dtype=dtype).element_size()
        case_hint = hint if not hidden else (
            f"a {str(dtype).replace('torch.', '')} element is {size} byte{'s' if size > 1 else ''}: multiply the "
            f"number of elements by the element size of the dtype you are given, then round up to {BLOCK_ROUND}")
        t.case(f"block_bytes({shape}, {dtype})", _counting_allocations(block_bytes, allocations, returned), shape,
               dtype, expected=want, hint=case_hint, hidden=hidden)
    if not _plain(returned, int):
        return  # how the bytes are found is judged once they are ints (the cases say what is wrong)
    t.expect("block_bytes predicts the bytes without allocating on npu (it does not measure them)",
             sum(allocations) == 0, expected="0 npu allocations", got=f"{sum(allocations)} npu allocation(s)",
             hint="compute elements * element size, rounded up to the block size; creating an npu tensor and "
                  "reading memory_allocated() is the check's measurement, not a prediction")


def _allocations() -> int:
    """How many blocks the npu's caching allocator has handed out so far (freed ones and cache hits included)."""
    return sum(torch.npu.memory_stats(i)["allocation.all.allocated"] for i in range(torch.npu.device_count()))


def _counting_allocations(fn, counts: list[int], returned: list[object]):
    """``fn``, adding to ``counts`` how many npu allocations each call made, to ``returned`` its results."""
    def run(*args):
        before = _allocations()
        try:
            result = fn(*args)
            returned.append(result)
            return result
        finally:
            counts.append(_allocations() - before)
    return run


def _measure(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """What the device's allocator really takes for a new tensor (measured, not computed)."""
    keep = []
    before = torch.npu.memory_allocated()
    keep.append(torch.empty(shape, dtype=dtype, device="npu"))
    used = torch.npu.memory_allocated() - before
    del keep
    return used


def _numpy_leaky_relu(x: np.ndarray, slope: float) -> np.ndarray:
    """The check's own reference: plain NumPy, nothing the learner can register or replace."""
    return np.where(x > 0, x, np.float32(slope) * x).astype(np.float32)


_LEAKY_CASES = [  # (n, slope, hidden, hint)
    (10, 0.01, False, "out[i] = x[i] if x[i] > 0 else slope * x[i], for every i (loop over range(x.size))"),
    (1, 0.2, False, "a single element: loop over range(x.size)"),
    (0, 0.1, False, "an empty array: the loop runs zero times, and nothing fails"),
    (1000, 0.5, True, "a long array: loop over every element (range(x.size)), not a fixed count"),
    (33, -1.0, True, "a negative slope: x[i] > 0 decides, not the sign of slope * x[i]"),
    (8, 0.0, True, "slope 0: negative inputs become 0 (multiply, do not skip the element: out starts as garbage)"),
    (17, 1.5, True, "any slope, also one above 1: still slope * x[i] for x[i] <= 0"),
]


@exercise("lab.leaky_relu_kernel", "A numba kernel: leaky ReLU", names=["leaky_relu_kernel"])
def _leaky_relu_kernel(t: Tester, leaky_relu_kernel) -> None:
    import numba

    is_numba = type(leaky_relu_kernel) is numba.core.registry.CPUDispatcher
    t.expect("leaky_relu_kernel is compiled by numba (decorated with @numba.njit)", is_numba,
             expected="a numba CPUDispatcher", got=type(leaky_relu_kernel).__name__,
             hint="put @numba.njit(cache=True) above `def leaky_relu_kernel(x, out, slope):`")
    if is_numba:
        cached = type(leaky_relu_kernel._cache).__name__ != "NullCache"
        t.expect("it is compiled with cache=True (kept on disk, not compiled again in a new kernel)", cached,
                 expected="@numba.njit(cache=True)", got="cache=True" if cached else "no cache",
                 hint="write @numba.njit(cache=True): without it numba compiles the kernel again in every new process")

    def run(x: np.ndarray, slope: float) -> tuple[torch.Tensor, bool]:
        src = x.copy()
        out = np.full_like(src, np.nan)
        leaky_relu_kernel(src, out, slope)
        return torch.from_numpy(out.copy()), bool(np.array_equal(src, x))

    cases = [(n, slope, hidden, hint, randn(n, seed=n).numpy()) for n, slope, hidden, hint in _LEAKY_CASES]
    expected = [torch.from_numpy(_numpy_leaky_relu(x, slope)) for n, slope, _, _, x in cases]
    for (n, slope, hidden, hint, x), want in zip(cases, expected):
        desc = f"leaky_relu_kernel(x of {n} floats, out, slope={slope})"
        outcome = t.call(run, x, slope)
        if not outcome.ok:
            t.error(desc, outcome, hidden=hidden, hint=hint)
            continue
        out, unchanged = outcome.value
        t.case(desc, lambda o=out: o, expected=want, hint=hint, hidden=hidden)
        if not unchanged:
            t.expect(f"{desc}: x is left unchanged", False, hidden=hidden, expected="x unchanged",
                     got="x was written to", hint="write the results into out; x is the kernel's input, read it only")


def _recompiled(gm: torch.fx.GraphModule) -> bool:
    return gm.code == gm.graph.python_code(root_module="self").src


def _f1(x):
    return torch.pow(x, 2) + 1


def _f2(x):
    return torch.pow(x, 3) - torch.pow(x.sin(), 2)


def _f3(x):
    return torch.pow(torch.pow(x, 2), 2)


def _f4(x):
    y = torch.pow(x + 1, 2)
    return y * 3, y


def _f5(x):
    return x.square() + x ** 2.0


#: (description, function, hidden, hint of a hidden case)
_SQUARE_CASES = [
    ("pow(x, 2) + 1", _f1, False, ""),
    ("pow(x, 3) - pow(sin(x), 2)", _f2, False, ""),
    ("pow(pow(x, 2), 2)", _f3, True, "a square of a square: both pow nodes are squares; the outer one takes the "
                                     "inner one's result (iterate over list(gm.graph.nodes) and replace each)"),
    ("y = pow(x + 1, 2) used twice, once as an output", _f4, True,
     "the square's result has several users, one of them the output node: node.replace_all_uses_with(new) "
     "moves every use, then erase the old node"),
    ("x.square() + x ** 2.0", _f5, True,
     "x.square() traces to pow(x, 2) and x ** 2.0 to pow(x, 2.0): 2.0 is a square too (compare the exponent "
     "with == 2, which 2.0 equals), and both squares read the same x"),
]


@exercise("lab.square_to_mul", "A first compiler pass: pow(x, 2) becomes mul(x, x)", names=["square_to_mul"])
def _square_to_mul(t: Tester, square_to_mul) -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    from ..grading.structure import is_graph_module

    aten = torch.ops.aten
    x = randn(4, 5, seed=1)
    x_npu = randn(4, 5, seed=2, device="npu")
    references = [fn(x_npu) for _, fn, _, _ in _SQUARE_CASES]  # before the learner's code runs
    for (name, fn, hidden, hidden_hint), want in zip(_SQUARE_CASES, references):
        gm = make_fx(fn)(x)
        before = [n for n in gm.graph.nodes if n.op == "call_function"]
        squares_before = sum(1 for n in before if n.target == aten.pow.Tensor_Scalar and n.args[1] == 2)
        others = sum(1 for n in before if n.target == aten.pow.Tensor_Scalar and n.args[1] != 2)
        muls_before = sum(1 for n in before if n.target == aten.mul.Tensor)
        outcome = t.call(square_to_mul, gm)
        if not outcome.ok:
            t.error(f"square_to_mul(graph of {name})", outcome, hidden=hidden,
                    hint="take a torch.fx.GraphModule, edit gm.graph, call gm.recompile(), return gm")
            continue
        new = outcome.value
        if not is_graph_module(new):
            t.expect(f"square_to_mul(graph of {name}) returns a GraphModule", False, hidden=hidden,
                     expected="torch.fx.GraphModule", got=short(new),
                     hint="return the GraphModule you changed (did you forget `return gm`?)")
            continue
        nodes = [n for n in new.graph.nodes if n.op == "call_function"]
        squares = [n for n in nodes if n.target == aten.pow.Tensor_Scalar and n.args[1] == 2]
        cubes = sum(1 for n in nodes if n.target == aten.pow.Tensor_Scalar and n.args[1] != 2)
        self_muls = sum(1 for n in nodes if n.target == aten.mul.Tensor and len(n.args) == 2
                        and n.args[0] is n.args[1])
        muls = sum(1 for n in nodes if n.target == aten.mul.Tensor)
        t.expect(f"{name}: no pow(_, 2) node is left", not squares, hidden=hidden,
                 expected="0 pow(_, 2) nodes", got=f"{len(squares)} left",
                 hint=hidden_hint or "match node.op == 'call_function' and node.target == "
                                     "torch.ops.aten.pow.Tensor_Scalar with node.args[1] == 2")
        t.expect(f"{name}: each square became one aten.mul.Tensor(x, x)",
                 muls == muls_before + squares_before and self_muls >= squares_before, hidden=hidden,
                 expected=f"{squares_before} new mul(x, x) node(s)", got=f"{muls - muls_before} new mul node(s)",
                 hint=hidden_hint or "insert with gm.graph.inserting_before(node), call_function("
                                     "torch.ops.aten.mul.Tensor, (x, x)) with the pow's own input as both arguments, "
                                     "then node.replace_all_uses_with(new) and gm.graph.erase_node(node)")
        t.expect(f"{name}: the module's code was regenerated from the edited graph", _recompiled(new),
                 hidden=hidden, expected="gm.code matches gm.graph",
                 got="up to date" if _recompiled(new) else "gm.code is stale",
                 hint="after editing gm.graph, call gm.recompile() so gm.forward runs the new graph")
        if others:
            t.expect(f"{name}: pow(x, 3) is left alone", cubes == others, hidden=hidden,
                     expected=f"{others} pow(_, 3) node(s)", got=f"{cubes}", hint="only exponent 2 should be rewritten")
        t.case(f"{name}: the rewritten graph computes the same values on npu", new, x_npu,
               expected=want, hidden=hidden,
               hint=hidden_hint or "did you call gm.recompile() after editing the graph?")
