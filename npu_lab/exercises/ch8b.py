"""Chapter 8b: compilers and performance - an inference pass, a pass that merges projections, a fair comparison.

Three exercises:

* ``ch8b.fold_bn`` - build an inference pass: fold each BatchNorm2d into the Conv2d before it
  (conv+BN(+ReLU) fusion), returning a new module that runs on npu without any batch-norm kernel;
  checked by values on hidden eval-mode models (computed in NumPy), by the operators the dispatcher
  ran, and on the caller's model, which must stay as it was. Models where folding would be wrong
  (a ReLU between, a convolution output used twice, a convolution module called at two places, a
  BatchNorm that uses batch statistics) must keep their BatchNorm; nested modules fold like flat ones;
  PyTorch's ready-made ``torch.fx.experimental.optimization.fuse`` is not the learner's pass;
* ``ch8b.merge_projections`` - an FX pass the ``npu`` backend runs: the matrix products that share their
  first operand become one product with the weights side by side, each former product a slice of its
  columns; products whose weight is not computed yet where the first one runs stay as they are, and a
  slice can itself be the shared operand of a next group. Checked by the graph after the pass, the values
  (computed in eager mode before the pass runs) and, on attention's query/key/value projections, fewer
  launches and less simulated time;
* ``ch8b.compare`` - compare two implementations fairly on the device's clock: both warmed, the calls taken
  in turns, the median of the rounds, every stream of the device the arguments are on, the caller's current
  device and stream left as they were. Checked on hidden pairs (side streams, a first call that compiles,
  state that grows with every call, a call in three that does extra work, arguments on ``npu:1``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..grading import references, values
from ..grading.inputs import randn
from ..grading.predictions import question
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester, short

chapter("ch8b", "Adapting PyTorch to the NPU: compilers and performance", [
    "Way 2: a compile backend rewrites whole graphs (fusion, layout, memory planning) before running them",
    "A pass is measured: launches, bytes and simulated time before and after",
    "An inference pass folds each BatchNorm into the convolution before it (conv+BN+ReLU fusion)",
    "A backend that lacks operators partitions the graph (CapabilityBasedPartitioner, OperatorSupport)",
    "Way 3: Inductor generates the kernels; the device provides scheduling and a wrapper",
    "Performance work is measured on the simulated clock: layout, batching, fusion, the roofline target",
    "Benchmarks synchronize every stream, warm up, keep data on the device, and compare in turns",
])

question("ch8b.fastest",
         "Which way runs the MLP training step (batch 64) in the least simulated device time: eager, npu or inductor?",
         why="every kernel of this step lasts about its 4 us launch, so the fewest launches win: the npu backend "
             "fuses the epilogues into the matmuls and the loss into one kernel; Inductor's numba scheduling cannot "
             "fuse into matmuls and splits the loss into four kernels",
         choices=("eager", "npu", "inductor"))
question("ch8b.merge_launches",
         "Compiled without the pass, two_heads takes 4 kernel launches; how many with merge_sibling_matmuls?",
         why="two matmuls and the cat of their outputs become one cat of the (smaller) weights and one matmul; the "
             "ReLU stays: 3 launches")
question("ch8b.batched_launches",
         "Sixteen small mm take 16 launches; how many does stack + bmm take, the stacking of the inputs included?",
         why="one kernel stacks the 16 inputs, one bmm multiplies them all (the weights were stacked once, outside "
             "the timed work): 2")
question("ch8b.host_timer",
         "On the gpu-like chip, how many microseconds does the host timer read for a 1024x1024 product without a "
         "synchronize?",
         why="without a synchronize the host only issues the launch, which costs it host_launch_us (6 us on this "
             "chip); the product itself runs later on the device",
         rtol=0.05)


# ---------------------------------------------------------------------------------------------
# ch8b.fold_bn
# ---------------------------------------------------------------------------------------------

class ConvUsedTwice(torch.nn.Module):
    """``relu(bn(conv(x))) + conv(x)``: the convolution's output has a second user, so its BN cannot be folded."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return torch.relu(self.bn(y)) + y


class SharedConv(torch.nn.Module):
    """One Conv2d module called on two inputs, each result with a BatchNorm of its own: folding either BatchNorm
    into the shared weights would change the other branch."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn_a, self.bn_b = torch.nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn_a(self.conv(x)) + self.bn_b(self.conv(x.flip(-1)))


class Nested(torch.nn.Module):
    """conv+BN+ReLU blocks inside named Sequentials (module paths like ``features.block1.0``)."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.features = nn.Sequential()
        self.features.add_module("block1", nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU()))
        self.features.add_module("block2", nn.Sequential(nn.Conv2d(6, 4, 1), nn.BatchNorm2d(4)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


def _seeded_bn(bn: torch.nn.BatchNorm2d, seed: int) -> None:
    """Running statistics and (if affine) a scale and shift far from the defaults, as after training."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        if bn.running_mean is not None:  # a BatchNorm without running statistics normalizes by the batch's
            bn.running_mean.copy_(torch.randn(bn.num_features, generator=g) * 0.5)
            bn.running_var.copy_(torch.rand(bn.num_features, generator=g) * 1.5 + 0.5)
        if bn.affine:
            bn.weight.copy_(torch.randn(bn.num_features, generator=g))
            bn.bias.copy_(torch.randn(bn.num_features, generator=g))


def fold_bn_models() -> list[tuple[str, Callable[[], torch.nn.Module], int, int, bool]]:
    """(description, make the model, input channels, batch norms left after folding, hidden)."""
    nn = torch.nn

    def seq(*layers: nn.Module) -> nn.Module:
        return nn.Sequential(*layers)

    return [
        ("Conv2d(3, 8, 3) + BatchNorm2d + ReLU", lambda: seq(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8),
                                                             nn.ReLU()), 3, 0, False),
        ("Conv2d(8, 6, 1, bias=False) + BatchNorm2d (a convolution without a bias)",
         lambda: seq(nn.Conv2d(8, 6, 1, bias=False), nn.BatchNorm2d(6)), 8, 0, False),
        ("two conv+BN+ReLU blocks, the first strided and grouped, the second BN with eps=1e-3",
         lambda: seq(nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2), nn.BatchNorm2d(8), nn.ReLU(),
                     nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8, eps=1e-3), nn.ReLU()), 4, 0, True),
        ("Conv2d + BatchNorm2d(affine=False) (no scale, no shift)",
         lambda: seq(nn.Conv2d(3, 5, 3), nn.BatchNorm2d(5, affine=False)), 3, 0, True),
        ("Conv2d + ReLU + BatchNorm2d (a ReLU in between: nothing to fold)",
         lambda: seq(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.BatchNorm2d(4)), 3, 1, True),
        ("relu(bn(conv(x))) + conv(x) (the convolution's output has another user: nothing to fold)",
         ConvUsedTwice, 3, 1, True),
        ("one Conv2d module called at two places, each output with its own BatchNorm2d (shared weights: nothing to "
         "fold)", SharedConv, 3, 2, True),
        ("Conv2d + BatchNorm2d(track_running_stats=False) (batch statistics even in eval mode: nothing to fold)",
         lambda: seq(nn.Conv2d(3, 5, 3, padding=1), nn.BatchNorm2d(5, track_running_stats=False)), 3, 1, True),
        ("conv+BN blocks inside nested Sequentials (features.block1.0, features.block2.1, ...)", Nested, 3, 0, True),
    ]


def _fold_bn_hint(desc: str) -> str:
    if "two places" in desc:
        return ("a convolution module called at two places has one weight for both: folding one BatchNorm into it "
                "changes the other call too; fold only when the module is called once (count the call_module nodes "
                "with its target)")
    if "track_running_stats" in desc:
        return ("a BatchNorm without running statistics (running_mean is None) normalizes by each batch's own "
                "statistics, in eval mode too: it is not a fixed scale and shift, so leave it")
    if "nested" in desc:
        return ("node.target is the module's full path ('features.block1.0'): get it with gm.get_submodule(target) "
                "(or dict(gm.named_modules())) and change that module")
    if "another user" in desc:
        return ("fold only when the BatchNorm is the convolution's only user: here the unnormalized conv(x) is "
                "also added to the result, and changing the convolution's weights would change that too")
    if "ReLU in between" in desc:
        return "fold only a BatchNorm whose input comes straight from a Conv2d: across a ReLU the algebra does not hold"
    if "bias=False" in desc:
        return "a convolution without a bias gets one: b' = (0 - running_mean) * s + beta"
    if "affine=False" in desc:
        return "a BatchNorm without affine parameters has weight = bias = None: use gamma = 1, beta = 0"
    if "eps" in desc or "grouped" in desc:
        return ("use each BatchNorm's own eps; a grouped or strided convolution folds the same way (the scale is per "
                "output channel: weight * s.reshape(-1, 1, 1, 1))")
    return ("s = bn.weight / sqrt(bn.running_var + bn.eps); W' = conv.weight * s.reshape(-1, 1, 1, 1); "
            "b' = (conv.bias - bn.running_mean) * s + bn.bias; then drop the BatchNorm node")


def _numpy_forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What ``model`` computes on ``x`` in eval mode, in NumPy from its parameters (no PyTorch operator runs)."""
    import numpy as np

    def conv(m: torch.nn.Conv2d, a: np.ndarray) -> np.ndarray:
        bias = references.array(m.bias) if m.bias is not None else None
        return references.conv2d(a, references.array(m.weight), bias, m.stride[0], m.padding[0], m.groups)

    def bn(m: torch.nn.BatchNorm2d, a: np.ndarray) -> np.ndarray:
        w = references.array(m.weight) if m.weight is not None else None
        b = references.array(m.bias) if m.bias is not None else None
        if m.running_mean is None:  # batch statistics (biased variance), as PyTorch uses them
            mean, var = a.mean(axis=(0, 2, 3)), a.var(axis=(0, 2, 3))
        else:
            mean, var = references.array(m.running_mean), references.array(m.running_var)
        return references.batch_norm(a, mean, var, w, b, m.eps)

    def layer(m: torch.nn.Module, a: np.ndarray) -> np.ndarray:
        if type(m) is torch.nn.Conv2d:
            return conv(m, a)
        if type(m) is torch.nn.BatchNorm2d:
            return bn(m, a)
        if type(m) is torch.nn.ReLU:
            return references.relu(a)
        if type(m) is torch.nn.Sequential:
            for inner in m:
                a = layer(inner, a)
            return a
        raise TypeError(f"no NumPy reference for {type(m).__name__}")

    a = references.array(x)
    if type(model) is ConvUsedTwice:
        y = conv(model.conv, a)
        out = references.relu(bn(model.bn, y)) + y
    elif type(model) is SharedConv:
        out = bn(model.bn_a, conv(model.conv, a)) + bn(model.bn_b, conv(model.conv, a[..., ::-1]))
    elif type(model) is Nested:
        out = layer(model.features, a)
    else:
        out = layer(model, a)
    return torch.from_numpy(np.ascontiguousarray(out)).to(x.dtype)


def _run_on_npu(module: Any, x: torch.Tensor) -> dict[str, Any]:
    """Run ``module(x)`` under the dispatch tracer; its output, the operators that ran, fallbacks and bytes moved."""
    from .. import transfer_stats
    from ..device import fallback
    from ..inspect.dispatch import trace

    fell, moved = dict(fallback.counts), transfer_stats()
    outs: list[Any] = []
    with torch.no_grad():
        tr = trace(lambda: outs.append(module(x)))
    after = transfer_stats()
    crossed = sum(after[k] - moved[k] for k in ("host_to_device_bytes", "device_to_host_bytes"))
    new_fallbacks = sorted(k for k, v in fallback.counts.items() if v != fell.get(k, 0))
    return {"ops": [c.op for c in tr.calls], "fallbacks": new_fallbacks, "crossed": crossed, "out": outs[0]}


def _model_state(model: torch.nn.Module) -> tuple[list[tuple[str, str]], dict[str, torch.Tensor], bool]:
    """What the caller's model is: its modules' names and types, a copy of its state, its mode."""
    kinds = [(name, type(m).__name__) for name, m in model.named_modules()]
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    return kinds, state, model.training


def _same_state(a: tuple, b: tuple) -> bool:
    if a[0] != b[0] or a[2] != b[2] or set(a[1]) != set(b[1]):
        return False
    return all(values.tensors_close(a[1][k], b[1][k], rtol=0, atol=0) for k in a[1])


def _refuse(*_: Any, **__: Any) -> Any:
    raise RuntimeError("torch.fx.experimental.optimization.fuse is PyTorch's own conv+BN folding: write the pass "
                       "yourself (torch.nn.utils.fusion.fuse_conv_bn_eval may do the algebra)")


@contextlib.contextmanager
def _refusing(*functions: Callable[..., Any]) -> Iterator[None]:
    """Each of ``functions`` raises while active, however the learner's code reached it (its code is swapped)."""
    saved = [(fn, fn.__code__) for fn in functions if not fn.__code__.co_freevars]
    try:
        for fn, code in saved:
            fn.__code__ = _refuse.__code__.replace(co_name=code.co_name)
        yield
    finally:
        for fn, code in saved:
            fn.__code__ = code


def _folded_by(fold_bn: Callable[[Any], Any], model: torch.nn.Module) -> Any:
    from torch.fx.experimental import optimization

    with _refusing(optimization.fuse):
        return fold_bn(model)


@exercise("ch8b.fold_bn", "Build an inference pass: fold BatchNorm into the convolution before it",
          names=["fold_bn"], timeout=60)
def _fold_bn(t: Tester, fold_bn) -> None:
    for i, (desc, make, channels, bn_left, hidden) in enumerate(fold_bn_models()):
        torch.manual_seed(80 + i)
        model = make().eval()
        for j, m in enumerate(model.modules()):
            if type(m) is torch.nn.BatchNorm2d:
                _seeded_bn(m, 90 + 10 * i + j)
        x = randn(2, channels, 9, 9, seed=70 + i)
        want = _numpy_forward(model, x)  # before any code of the learner's runs
        model = model.to("npu")
        before = _model_state(model)
        # the caller's model itself (t.call would pass a copy of an argument), to see whether it changes
        outcome = t.call(lambda m=model: _folded_by(fold_bn, m))
        hint = _fold_bn_hint(desc)
        if not outcome.ok:
            t.error(f"{desc}: fold_bn(model)", outcome, hidden=hidden, hint=hint)
            continue
        folded = outcome.value
        if not t.expect(f"{desc}: fold_bn returns a torch.nn.Module", isinstance(folded, torch.nn.Module),
                        hidden=hidden, expected="an nn.Module (e.g. the torch.fx.GraphModule of your pass)",
                        got=short(folded), hint="return the folded module (gm), not the list of changes"):
            continue
        t.expect(f"{desc}: the caller's model is unchanged (same modules, parameters, buffers and mode)",
                 folded is not model and _same_state(before, _model_state(model)), hidden=hidden,
                 expected="unchanged, and a new module returned",
                 got="your module is the caller's model itself" if folded is model else "changed",
                 hint="work on a copy: gm = torch.fx.symbolic_trace(copy.deepcopy(model)); the caller keeps "
                      "training or evaluating the original")
        ran = t.call(_run_on_npu, folded, x.to("npu"))
        if not ran.ok:
            t.error(f"{desc}: running the folded module on an npu tensor", ran, hidden=hidden,
                    hint="the folded weights must stay on the model's device (compute them from the npu "
                         "parameters, with torch operations)")
            continue
        t.case(f"{desc}: the folded module computes what the model did (eval mode)", lambda r=ran: r.value["out"],
               expected=want, hidden=hidden, hint=hint, rtol=1e-4, atol=1e-4,
               check=lambda v, w=want: _close_on(v, w, "npu"))
        ops = ran.value["ops"]
        norms = sum(1 for op in ops if "batch_norm" in op)
        convs = sum(1 for op in ops if "convolution" in op or "conv2d" in op)
        if bn_left == 0:
            t.expect(f"{desc}: no batch-norm kernel runs any more", norms == 0, hidden=hidden,
                     expected="0 batch_norm operators", got=f"{norms} batch_norm operator(s) ran",
                     hint="replace each foldable BatchNorm's uses by the convolution's output and erase its node")
        t.expect(f"{desc}: it runs on npu, without CPU fallbacks or host<->device copies",
                 not ran.value["fallbacks"] and ran.value["crossed"] == 0 and convs > 0, hidden=hidden,
                 expected="no fallback, 0 bytes copied",
                 got=f"fallbacks {short(ran.value['fallbacks'])}, {ran.value['crossed']:,} bytes copied",
                 hint="keep the folded parameters on the npu device: compute them with torch operations on the "
                      "npu tensors, not in NumPy on the CPU")


def _close_on(value: Any, want: torch.Tensor, device: str) -> tuple[bool, str]:
    """A plain tensor on ``device`` close to ``want``."""
    if not values.is_plain_tensor(value):
        return False, "not a plain torch.Tensor"
    if value.device.type != device:
        return False, f"the output is on {value.device.type!r}, expected {device!r}"
    if tuple(value.shape) != tuple(want.shape):
        return False, f"shape {tuple(value.shape)} but expected {tuple(want.shape)}"
    ok = values.tensors_close(value, want, rtol=1e-4, atol=1e-4)
    if ok:
        return True, ""
    diff = (value.detach().cpu().double() - want.double()).abs().max().item()
    return False, f"values differ: max abs difference {diff:.3g}"




# ---------------------------------------------------------------------------------------------
# ch8b.merge_projections
# ---------------------------------------------------------------------------------------------

def _qkv(x, w1, w2, w3):
    return x @ w1, x @ w2, x @ w3  # attention's query, key and value projections


def _widths(x, w1, w2, w3):
    a, b, c = x @ w1, x @ w2, x @ w3
    return a.sum(1) + b.sum(1) * 2 + c.sum(1) * 3


def _single(x, w1):
    return x @ w1 + 1


def _two_inputs(x, y, w1, w2, w3, w4):
    return (x @ w1) * (x @ w2), (y @ w3).sum(1) - (y @ w4).sum(1)


def _second_operand(x, w1, w2, w3):
    return x @ w1 + x @ w2, w3 @ x  # in w3 @ x, x is the second operand: not the same projection


def _late_weight(x, w1, w2):
    q = x @ w1
    w2b = w2 * q.mean()  # computed from the first product: it cannot be in the same product
    return q, x @ w2b


def _early_weight(x, w1, w2):
    w2b = w2 * 2  # computed in the graph, before the first product: it can
    return x @ w1, x @ w2b


def _chained(x, w1, w2, wa, wb):
    q, k = x @ w1, x @ w2
    return q @ wa + q @ wb, k  # the slice q is the shared operand of a second group


def _reused(x, w1, w2):
    q, k = x @ w1, x @ w2
    return q, q * k, k.relu()


def _merge_cases() -> list[tuple[str, Callable[..., Any], list[tuple[int, ...]], int, int, bool]]:
    """(description, function, argument shapes, mm nodes after the pass, merges, hidden)."""
    return [
        ("q, k, v = x @ w1, x @ w2, x @ w3 (three projections of one x)", _qkv,
         [(32, 64), (64, 32), (64, 32), (64, 32)], 1, 1, False),
        ("three projections of x with 12, 20 and 4 columns", _widths, [(8, 16), (16, 12), (16, 20), (16, 4)], 1, 1,
         False),
        ("one product of x only: x @ w1 + 1 (nothing to merge)", _single, [(8, 16), (16, 12)], 1, 0, False),
        ("two inputs, two projections each", _two_inputs, [(8, 16), (6, 16), (16, 5), (16, 5), (16, 7), (16, 3)], 2,
         2, True),
        ("x @ w1, x @ w2 and w3 @ x (x is the second operand of the last)", _second_operand,
         [(8, 8), (8, 6), (8, 6), (5, 8)], 2, 1, True),
        ("a weight computed from the first product (x @ w2 * q.mean()): it stays", _late_weight,
         [(8, 16), (16, 12), (16, 12)], 2, 0, True),
        ("a weight computed in the graph before the first product (w2 * 2): it merges", _early_weight,
         [(8, 16), (16, 12), (16, 10)], 1, 1, True),
        ("q, k = x @ w1, x @ w2, then q @ wa and q @ wb (a slice shared by a second group)", _chained,
         [(8, 16), (16, 12), (16, 12), (12, 5), (12, 5)], 2, 2, True),
        ("q and k used several times and returned", _reused, [(8, 16), (16, 12), (16, 12)], 1, 1, True),
    ]


def _merge_hint(desc: str) -> str:
    if "nothing to merge" in desc:
        return "a single product is left as it is: merge only two or more products of the same first operand"
    if "second operand" in desc:
        return "only products whose FIRST operand is the shared node: mm(x, w), not mm(w, x)"
    if "from the first product" in desc:
        return ("the merged product goes where the first product was; a product whose weight is computed after that "
                "point (here from the first product itself) stays as it is")
    if "before the first product" in desc:
        return "a weight computed in the graph before the first product is ready there: its product merges"
    if "second group" in desc:
        return ("after a merge, the slices are new nodes: look for groups again until none is left (a slice can be "
                "the shared operand of the next group)")
    if "12, 20 and 4" in desc:
        return "the products' column counts differ: product i gets columns [sum of the earlier widths, + its width)"
    if "two inputs" in desc:
        return "every shared operand makes a group of its own: merge each"
    return ("for a node x used as the first operand of several aten.mm.default nodes: one mm(x, cat([w1, w2, ...], "
            "1)) placed before the first of them, each former product replaced by aten.slice.Tensor(merged, 1, "
            "start, end); one string per merge")


def _compile_with_pass(fn: Callable[..., Any], merge_projections: Any, args: list[torch.Tensor]) -> Any:
    import torch._dynamo

    from .. import compiler

    compiler.reset()
    torch._dynamo.reset()
    with compiler.extra_pass(merge_projections, "merge_projections"):
        compiled = torch.compile(fn, backend="npu")
        return compiled(*args)


def _measure_compiled(fn: Callable[..., Any], args: list[torch.Tensor], merge_projections: Any = None) -> tuple:
    import torch._dynamo

    from .. import compiler
    from ..profiler import profile

    compiler.reset()
    torch._dynamo.reset()
    passes = compiler.extra_pass(merge_projections, "merge_projections") if merge_projections is not None \
        else contextlib.nullcontext()
    with passes:
        compiled = torch.compile(fn, backend="npu")
        compiled(*args)
        torch.npu.synchronize()
        with profile() as prof:
            compiled(*args)
            torch.npu.synchronize()
    return prof.launches, prof.sim_time_us


@exercise("ch8b.merge_projections", "A pass the NPU backend runs: products that share an input become one",
          names=["merge_projections"], timeout=90)
def _merge_projections(t: Tester, merge_projections) -> None:
    from .. import compiler

    aten = torch.ops.aten
    try:
        for i, (desc, fn, shapes, want_mm, want_merges, hidden) in enumerate(_merge_cases()):
            args = [randn(*shape, seed=60 + 7 * i + j) for j, shape in enumerate(shapes)]
            ref = fn(*args)  # in eager mode on the CPU, before the learner's pass runs
            want = list(ref) if isinstance(ref, tuple) else [ref]
            hint = _merge_hint(desc)
            outcome = t.call(_compile_with_pass, fn, merge_projections, [a.to("npu") for a in args])
            if not outcome.ok:
                t.error(f"{desc}: compiling with your pass", outcome, hidden=hidden,
                        hint="merge_projections(gm) gets the ATen GraphModule: change it in place (the graph must stay "
                             "valid: every node after its inputs) and return a list of strings")
                continue
            snap = compiler.last_compile().graph("inference").snapshot("merge_projections")
            mms = sum(1 for n in snap.graph.nodes if n.op == "call_function" and n.target == aten.mm.default)
            t.expect(f"{desc}: {want_mm} aten.mm node(s) after your pass", mms == want_mm, hidden=hidden,
                     expected=f"{want_mm}", got=f"{mms}", hint=hint)
            ok, changes, _ = values.check_plain(snap.changes)
            counted = ok and type(changes) is list and all(type(c) is str for c in changes)
            t.expect(f"{desc}: your pass reports one string per merge", counted and len(changes) == want_merges,
                     hidden=hidden, expected=f"{want_merges} string(s)", got=short(snap.changes),
                     hint="return a list with one string per merge (an empty list when nothing merged)")
            got = _outputs(outcome.value)
            same = got is not None and len(got) == len(want) and all(
                values.tensors_close(g, w, rtol=1e-4, atol=1e-4) for g, w in zip(got, want))
            t.expect(f"{desc}: the compiled result equals eager's", same, hidden=hidden, expected="equal",
                     got="equal" if same else "different", hint=hint)

        args = [randn(*s, seed=50 + j).to("npu") for j, s in enumerate([(32, 64), (64, 32), (64, 32), (64, 32)])]
        base = t.call(_measure_compiled, _qkv, args)
        merged = t.call(_measure_compiled, _qkv, args, merge_projections)
        if base.ok and merged.ok:
            (n0, us0), (n1, us1) = base.value, merged.value
            t.expect("q, k, v projections: the profiler sees fewer launches and less simulated time with your pass",
                     n1 < n0 and us1 < us0, expected=f"< {n0} launches, < {us0:.1f} us",
                     got=f"{n1} launches, {us1:.1f} us", hint="three products and their launches become one product "
                     "(and one concatenation of the weights); slices are views and launch nothing")
        else:
            t.error("q, k, v projections compiled with and without your pass, under the profiler",
                    merged if not merged.ok else base)
    finally:
        _reset_compilers()


def _reset_compilers() -> None:
    import torch._dynamo

    from .. import compiler

    torch._dynamo.reset()
    compiler.reset()


def _outputs(value: Any) -> list[Any] | None:
    ok, plain, _ = values.check_plain(value)
    if not ok:
        return None
    return list(plain) if type(plain) in (tuple, list) else [plain]


# ---------------------------------------------------------------------------------------------
# ch8b.compare
# ---------------------------------------------------------------------------------------------

def _work(a: torch.Tensor) -> torch.Tensor:
    return (a @ a).relu()


def _pairs() -> list[tuple[str, Callable[[], tuple[Callable[..., Any], Callable[..., Any]]], tuple[int, ...], str,
                           int, bool]]:
    """(description, make (fn_a, fn_b) afresh, input shape, hint, npu device, hidden)."""

    def default_and_side():
        side = torch.npu.Stream()

        def b(x):
            with torch.npu.stream(side):
                return (x @ x).relu()
        return _work, b

    def compiles_first():
        cache: dict[str, torch.Tensor] = {}

        def a(x):
            if "w" not in cache:  # one-time work on the first call (like a compile, or packing weights)
                w = x
                for _ in range(6):
                    w = (w @ x).tanh()
                cache["w"] = w * 0
            return _work(x) + cache["w"]

        def b(x):
            return torch.relu(x @ x)
        return a, b

    def two_streams():
        s1, s2 = torch.npu.Stream(), torch.npu.Stream()

        def a(x):
            with torch.npu.stream(s1):
                y = _work(x)
            s2.wait_stream(s1)
            with torch.npu.stream(s2):
                return (y @ x).sigmoid() * 0 + y
        return a, _work

    def growing_state():
        seen: list[torch.Tensor] = []  # shared: every call of either adds one, and sums them all

        def step(x, scale):
            seen.append(x * scale)
            total = seen[0]
            for t in seen[1:]:
                total = total + t
            return (x @ x).relu() + total * 0

        return (lambda x: step(x, 1.0)), (lambda x: step(x, 1.0))

    def every_third():
        calls = [0]

        def a(x):
            calls[0] += 1
            y = _work(x)
            if calls[0] % 3 == 0:  # a periodic extra: a cache refresh, a log line that reads the device
                for _ in range(8):
                    y = (y @ x).tanh() * 0 + y
            return y
        return a, _work

    def on_device_one():
        side = torch.npu.Stream(device="npu:1")

        def b(x):
            with torch.npu.stream(side):
                return (x @ x).relu()
        return _work, b

    return [
        ("fn_a on the current stream, fn_b on a side stream of its own", default_and_side, (128, 128),
         "synchronize the device (every stream) after each call: an event recorded on the current stream does not "
         "wait for a side stream", 0, False),
        ("fn_a's first call does one-time work (a compile)", compiles_first, (96, 96),
         "call fn_a and fn_b once each before timing: the first call is not the steady state", 0, False),
        ("fn_a on two streams of its own, one after the other", two_streams, (112, 112),
         "torch.npu.synchronize() waits for every stream of the device, seen or not", 0, True),
        ("state both functions share grows with every call (each call costs one more launch than the one before)",
         growing_state, (64, 64), "warm fn_a, warm fn_b, then rounds of one fn_a call and one fn_b call, in turns: "
         "timed in blocks, the second function meets more state than the first", 0, True),
        ("every third call of fn_a does extra work", every_third, (80, 80),
         "take the median of the rounds (statistics.median), not the mean: one slow call in three is not the "
         "steady state", 0, True),
        ("the arguments are on npu:1 while the current device is npu:0", on_device_one, (96, 96),
         "time on the device the arguments are on: with torch.npu.device(x.device): ... torch.npu.synchronize()", 1,
         True),
    ]


def _reference_compare(fn_a: Callable[..., Any], fn_b: Callable[..., Any], args: tuple, repeats: int) -> dict:
    """The protocol the exercise states, measured with the profiler on the simulated clock."""
    import statistics

    from ..profiler import profile

    device = next(a.device for a in args if isinstance(a, torch.Tensor))
    with torch.npu.device(device):
        fn_a(*args)
        fn_b(*args)
        got: dict[str, list[float]] = {"a_ms": [], "b_ms": [], "a_launches": [], "b_launches": []}
        for _ in range(repeats):
            for key, fn in (("a", fn_a), ("b", fn_b)):
                torch.npu.synchronize()
                with profile() as prof:
                    fn(*args)
                    torch.npu.synchronize()
                got[f"{key}_ms"].append(prof.sim_time_us / 1000)
                got[f"{key}_launches"].append(prof.launches)
    return {k: (float(statistics.median(v)) if k.endswith("_ms") else int(statistics.median(v)))
            for k, v in got.items()}


def _compared(compare: Callable[..., Any], fn_a: Callable[..., Any], fn_b: Callable[..., Any], x: torch.Tensor,
              repeats: int) -> dict[str, Any]:
    """``compare(fn_a, fn_b, x, repeats=repeats)`` and whether the caller's current device and streams survived."""
    streams = [torch.npu.current_stream(d).stream_id for d in range(torch.npu.device_count())]
    device = torch.npu.current_device()
    result = compare(fn_a, fn_b, x, repeats=repeats)
    kept = torch.npu.current_device() == device and \
        [torch.npu.current_stream(d).stream_id for d in range(torch.npu.device_count())] == streams
    return {"result": result, "kept": kept}


def _differ_a(x: torch.Tensor) -> torch.Tensor:
    return (x @ x).relu()


def _differ_b(x: torch.Tensor) -> torch.Tensor:
    return (x @ x).relu() + 1e-2  # a slightly different result: not the same computation


@exercise("ch8b.compare", "Compare two implementations fairly on the device's clock", names=["compare"], timeout=90)
def _compare(t: Tester, compare) -> None:
    from ..device import clock

    tolerance_ms = 1.5 * 2 * clock.cost_model.event_us / 1000  # events a timer records take the stream a moment
    keys = ("a_ms", "b_ms", "a_launches", "b_launches")
    for i, (desc, make, shape, hint, device, hidden) in enumerate(_pairs()):
        repeats = 5 if i % 2 == 0 else 7
        x = randn(*shape, seed=40 + i).to(f"npu:{device}")
        want = _reference_compare(*make(), (x,), repeats)  # fresh functions: their state starts as the learner's
        fn_a, fn_b = make()
        outcome = t.call(_compared, compare, fn_a, fn_b, x, repeats)
        if not outcome.ok:
            t.error(f"compare(fn_a, fn_b, x, repeats={repeats}): {desc}", outcome, hidden=hidden, hint=hint)
            continue
        result = outcome.value["result"]
        ok, plain, why = values.check_plain(result)
        if not t.expect(f"{desc}: compare returns a dict with {', '.join(keys)}",
                        ok and type(plain) is dict and set(plain) == set(keys), hidden=hidden,
                        expected=f"keys {list(keys)}", got=short(result) + (f" ({why})" if why else ""),
                        hint="return {'a_ms': ..., 'b_ms': ..., 'a_launches': ..., 'b_launches': ...}"):
            continue
        for key in keys:
            expected = want[key]
            t.case(f"{desc}: {key} (the median of {repeats} rounds)", lambda v=plain[key]: v, expected=expected,
                   hidden=hidden, rtol=0.02 if key.endswith("_ms") else 0,
                   atol=tolerance_ms if key.endswith("_ms") else 0, hint=hint)
        t.expect(f"{desc}: the caller's current device and streams are as they were", outcome.value["kept"],
                 hidden=hidden, expected="unchanged", got="changed",
                 hint="use `with torch.npu.device(...)` and `with torch.npu.stream(...)` blocks, which put them back")

    x = randn(64, 64, seed=49).to("npu")
    outcome = t.call(compare, _differ_a, _differ_b, x)
    raised = not outcome.ok and "ValueError" in (outcome.error or "")
    t.expect("compare raises ValueError when the two functions' results differ (beyond float32 rounding)", raised,
             expected="ValueError", got="no error" if outcome.ok else (outcome.error or "")[:120],
             hint="compare the outputs of the warm-up calls first (torch.allclose after synchronizing; a tuple of "
                  "outputs element by element): timing two different computations answers nothing")
