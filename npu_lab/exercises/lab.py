"""Getting started: the ``npu`` device, its memory, a numba kernel, and a first compiler pass."""

from __future__ import annotations

import torch

from ..grading.inputs import randn
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester, short

chapter("lab", "Getting started with the simulated NPU", [
    "A tensor is a storage plus sizes, strides and an offset",
    "The npu device is PyTorch's PrivateUse1 key under another name",
    "The caching allocator rounds requests up to blocks and reuses freed blocks",
    "A numba kernel is compiled on first call and cached afterwards",
    "An FX pass rewrites the graph and must keep its results the same",
])


@exercise("lab.contiguous_strides", "Strides of a contiguous tensor", names=["contiguous_strides"])
def _contiguous_strides(t: Tester, contiguous_strides) -> None:
    hint = "the last dimension has stride 1; each earlier stride is the product of the sizes after it"
    for shape in [(2, 3, 4), (5,), (1, 1, 7), (6, 1)]:
        t.case(f"contiguous_strides({shape})", contiguous_strides, shape,
               expected=torch.empty(shape).stride(), hint=hint,
               check=lambda got, s=shape: _strides_ok(got, s))
    t.case("contiguous_strides(())", contiguous_strides, (), expected=(),
           hint="a 0-dimensional tensor (a scalar) has no strides: return an empty tuple",
           check=lambda got: _strides_ok(got, ()))
    for shape in [(4, 1, 6, 2), (3, 0, 2)]:
        t.case(f"contiguous_strides({shape})", contiguous_strides, shape, expected=torch.empty(shape).stride(),
               hidden=True, hint="does your code handle size-1 and size-0 dimensions the way PyTorch does?",
               check=lambda got, s=shape: _strides_ok(got, s))


def _strides_ok(got, shape) -> tuple[bool, str]:
    expected = torch.empty(shape).stride()
    if not isinstance(got, (tuple, list)):
        return False, f"expected a tuple of ints, got {type(got).__name__}" + (
            " (did you forget to `return`?)" if got is None else "")
    if tuple(got) == expected:
        return True, ""
    # PyTorch computes strides of size-0 dimensions as if the size were 1.
    return False, "" if len(got) == len(expected) else f"{len(got)} strides for {len(shape)} dimensions"


@exercise("lab.block_bytes", "Predict what the NPU's caching allocator reserves", names=["block_bytes"])
def _block_bytes(t: Tester, block_bytes) -> None:
    from ..device.memory import BLOCK_ROUND

    hint = (f"bytes = number of elements * element size, rounded up to a multiple of {BLOCK_ROUND}; "
            "an empty tensor needs no block")
    cases = [((3,), torch.float32), ((128,), torch.float32), ((129,), torch.float32),
             ((10, 10), torch.float64), ((0, 4), torch.float32)]
    hidden = [((7, 3), torch.int64), ((1000,), torch.float16), ((64,), torch.uint8)]
    for i, (shape, dtype) in enumerate(cases + hidden):
        t.case(f"block_bytes({shape}, {dtype})", block_bytes, shape, dtype,
               expected=_measure(shape, dtype), hint=hint, hidden=i >= len(cases))


def _measure(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """What the device's allocator really takes for a new tensor (measured, not computed)."""
    keep = []
    before = torch.npu.memory_allocated()
    keep.append(torch.empty(shape, dtype=dtype, device="npu"))
    used = torch.npu.memory_allocated() - before
    del keep
    return used


@exercise("lab.leaky_relu_kernel", "A numba kernel: leaky ReLU", names=["leaky_relu_kernel"])
def _leaky_relu_kernel(t: Tester, leaky_relu_kernel) -> None:
    import numba
    import numpy as np

    t.expect("leaky_relu_kernel is compiled by numba (decorated with @numba.njit)",
             isinstance(leaky_relu_kernel, numba.core.registry.CPUDispatcher),
             expected="a numba CPUDispatcher", got=type(leaky_relu_kernel).__name__,
             hint="put @numba.njit(cache=True) above `def leaky_relu_kernel(x, out, slope):`")

    def run(x: torch.Tensor, slope: float) -> torch.Tensor:
        src = x.numpy().copy()
        out = np.full_like(src, np.nan)
        leaky_relu_kernel(src, out, slope)
        return torch.from_numpy(out)

    hint = "out[i] = x[i] if x[i] > 0 else slope * x[i], for every i (loop over range(x.size))"
    for n, slope, hidden in [(10, 0.01, False), (1, 0.2, False), (0, 0.1, False), (1000, 0.5, True),
                             (33, -1.0, True)]:
        x = randn(n, seed=n)
        t.case(f"leaky_relu_kernel(x of {n} floats, out, slope={slope})", run, x, slope,
               expected=torch.nn.functional.leaky_relu(x, slope), hint=hint, hidden=hidden)


def _recompiled(gm: torch.fx.GraphModule) -> bool:
    return gm.code == gm.graph.python_code(root_module="self").src


@exercise("lab.square_to_mul", "A first compiler pass: pow(x, 2) becomes mul(x, x)", names=["square_to_mul"])
def _square_to_mul(t: Tester, square_to_mul) -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    aten = torch.ops.aten

    def f1(x):
        return torch.pow(x, 2) + 1

    def f2(x):
        return torch.pow(x, 3) - torch.pow(x.sin(), 2)

    def f3(x):
        return torch.pow(torch.pow(x, 2), 2)

    for name, fn, hidden in [("pow(x, 2) + 1", f1, False), ("pow(x, 3) - pow(sin(x), 2)", f2, False),
                             ("pow(pow(x, 2), 2)", f3, True)]:
        x = randn(4, 5, seed=1)
        gm = make_fx(fn)(x)
        before = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        outcome = t.call(square_to_mul, gm)
        if not outcome.ok:
            t.error(f"square_to_mul(graph of {name})", outcome, hidden=hidden,
                    hint="take a torch.fx.GraphModule, edit gm.graph, call gm.recompile(), return gm")
            continue
        new = outcome.value
        if not isinstance(new, torch.fx.GraphModule):
            t.expect(f"square_to_mul(graph of {name}) returns a GraphModule", False, hidden=hidden,
                     expected="torch.fx.GraphModule", got=short(new),
                     hint="return the GraphModule you changed (did you forget `return gm`?)")
            continue
        nodes = [n for n in new.graph.nodes if n.op == "call_function"]
        squares = [n for n in nodes if n.target == aten.pow.Tensor_Scalar and n.args[1] == 2]
        cubes = sum(1 for n in nodes if n.target == aten.pow.Tensor_Scalar and n.args[1] == 3)
        muls = sum(1 for n in nodes if n.target == aten.mul.Tensor)
        want_muls = sum(1 for n in before if n == aten.pow.Tensor_Scalar) - (1 if fn is f2 else 0)
        t.expect(f"{name}: no pow(_, 2) node is left", not squares, hidden=hidden,
                 expected="0 pow(_, 2) nodes", got=f"{len(squares)} left",
                 hint="match node.op == 'call_function' and node.target == torch.ops.aten.pow.Tensor_Scalar "
                      "with node.args[1] == 2")
        t.expect(f"{name}: each square became one aten.mul.Tensor(x, x)", muls == want_muls, hidden=hidden,
                 expected=f"{want_muls} mul nodes", got=f"{muls}",
                 hint="insert with gm.graph.inserting_before(node), call_function(torch.ops.aten.mul.Tensor, (x, x)), "
                      "then node.replace_all_uses_with(new) and gm.graph.erase_node(node)")
        t.expect(f"{name}: the module's code was regenerated from the edited graph", _recompiled(new),
                 hidden=hidden, expected="gm.code matches gm.graph",
                 got="up to date" if _recompiled(new) else "gm.code is stale",
                 hint="after editing gm.graph, call gm.recompile() so gm.forward runs the new graph")
        if fn is f2:
            t.expect(f"{name}: pow(x, 3) is left alone", cubes == 1, expected="1 pow(_, 3) node",
                     got=f"{cubes}", hint="only exponent 2 should be rewritten")
        x_npu = randn(4, 5, seed=2, device="npu")
        t.case(f"{name}: the rewritten graph computes the same values on npu", new, x_npu,
               expected=fn(x_npu), hidden=hidden, hint="did you call gm.recompile() after editing the graph?")
