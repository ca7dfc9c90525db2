"""Chapter 8: adapting PyTorch to the NPU - an inference pass, a fusion pass, tiles and an honest benchmark.

Four exercises:

* ``ch8.fold_bn`` - build an inference pass: fold each BatchNorm2d into the Conv2d before it
  (conv+BN(+ReLU) fusion), returning a new module that runs on npu without any batch-norm kernel;
  checked by values on hidden eval-mode models (computed in NumPy), by the operators the dispatcher
  ran, and on the caller's model, which must stay as it was;
* ``ch8.silu_pass`` - an FX pass the ``npu`` backend runs: ``x * sigmoid(x)`` (either operand
  order, each occurrence) becomes ``silu(x)``;
* ``ch8.tiles`` - matmul register-tile sizes for any shape: the least output left to the edge code, then
  the most reuse (judged without a clock, so the verdict is the same on every machine);
* ``ch8.fix_benchmark`` - time what the device did, in steady state, whatever streams the work uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..grading import references, values
from ..grading.inputs import randn
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester, short

chapter("ch8", "Adapting PyTorch to the NPU, end to end", [
    "Way 1: a backend registers kernels per operator on its dispatch key",
    "coverage() lists the operators a model needs and which would fall back",
    "Way 2: a compile backend rewrites whole graphs (fusion) before running them",
    "An inference pass folds each BatchNorm into the convolution before it (conv+BN+ReLU fusion)",
    "Way 3: Inductor generates the kernels; the device provides scheduling and a wrapper",
    "Every kernel is checked against the CPU and against OpInfo samples",
    "Performance work is measured: layout, tiles, batching, launches and bytes",
    "Benchmarks warm up, synchronize, and keep data on the device",
])


# ---------------------------------------------------------------------------------------------
# ch8.fold_bn
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


def _seeded_bn(bn: torch.nn.BatchNorm2d, seed: int) -> None:
    """Running statistics and (if affine) a scale and shift far from the defaults, as after training."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
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
    ]


def _fold_bn_hint(desc: str) -> str:
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
        return references.batch_norm(a, references.array(m.running_mean), references.array(m.running_var), w, b,
                                     m.eps)

    def layer(m: torch.nn.Module, a: np.ndarray) -> np.ndarray:
        if type(m) is torch.nn.Conv2d:
            return conv(m, a)
        if type(m) is torch.nn.BatchNorm2d:
            return bn(m, a)
        if type(m) is torch.nn.ReLU:
            return references.relu(a)
        raise TypeError(f"no NumPy reference for {type(m).__name__}")

    a = references.array(x)
    if type(model) is ConvUsedTwice:
        y = conv(model.conv, a)
        out = references.relu(bn(model.bn, y)) + y
    else:
        out = a
        for m in model:
            out = layer(m, out)
    return torch.from_numpy(np.asarray(out)).to(x.dtype)


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


@exercise("ch8.fold_bn", "Build an inference pass: fold BatchNorm into the convolution before it",
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
        outcome = t.call(lambda m=model: fold_bn(m))  # the caller's model itself, to see whether it changes
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


def _silu_cases() -> list[tuple[str, Callable[..., Any], int, int, int, bool]]:
    """(description, function, arguments, silu nodes after the pass, sigmoid nodes left, hidden)."""
    def f1(x):
        return x * torch.sigmoid(x) + 1

    def f_rev(x):
        return torch.sigmoid(x) * x - 1  # the other operand order

    def f2(x, y):
        return x * torch.sigmoid(y)  # not the pattern: different operands

    def f3(x):
        s = torch.sigmoid(x)
        return x * s, s  # the sigmoid is also an output: still fusable, but the sigmoid must stay

    def f4(x, y):
        return x * torch.sigmoid(x) + torch.sigmoid(y) * y  # two occurrences, one in each order

    def f5(x):
        h = x * torch.sigmoid(x)
        return h * torch.sigmoid(h)  # the second pattern's operand is the first one's result

    return [("x * sigmoid(x) + 1", f1, 1, 1, 0, False), ("sigmoid(x) * x - 1 (the other operand order)", f_rev, 1, 1,
                                                          0, False),
            ("x * sigmoid(y) (different operands: not SiLU)", f2, 2, 0, 1, False),
            ("x * sigmoid(x), also returning sigmoid(x)", f3, 1, 1, 1, True),
            ("x * sigmoid(x) + sigmoid(y) * y (two occurrences)", f4, 2, 2, 0, True),
            ("h = x * sigmoid(x); h * sigmoid(h) (one after the other)", f5, 1, 2, 0, True)]


def _silu_hint(desc: str) -> str:
    if "other operand order" in desc:
        return "mul is commutative: match mul(a, sigmoid(a)) and mul(sigmoid(a), a)"
    if "different operands" in desc:
        return "x * sigmoid(y) is not SiLU: rewrite only when the mul's other operand is the sigmoid's own input"
    if "also returning" in desc:
        return ("the sigmoid has another user (the output): rewrite the mul, but erase the sigmoid only when nothing "
                "else uses it (len(node.users) == 0)")
    if "two occurrences" in desc:
        return "rewrite every occurrence, each in either operand order, and report one change per rewrite"
    if "one after the other" in desc:
        return ("the second pattern's operand is the first one's result: collect the nodes with list(gm.graph.nodes) "
                "and replace all uses of the mul (node.replace_all_uses_with) so later patterns see the silu")
    return ("match mul(a, sigmoid(a)) or mul(sigmoid(a), a); replace the mul with "
            "call_function(torch.ops.aten.silu.default, (a,)), erase the sigmoid if unused, return one string per "
            "rewrite")


def _compile_with(fn: Callable[..., Any], fuse_silu: Any, args: list[torch.Tensor]) -> Any:
    import torch._dynamo

    from .. import compiler

    compiler.reset()
    torch._dynamo.reset()
    with compiler.extra_pass(fuse_silu, "fuse_silu"):
        return torch.compile(fn, backend="npu", options={"pointwise_fusion": False})(*args)


def _outputs(value: Any) -> list[Any] | None:
    ok, plain, _ = values.check_plain(value)
    if not ok:
        return None
    return list(plain) if type(plain) in (tuple, list) else [plain]


@exercise("ch8.silu_pass", "A fusion pass the NPU backend picks up: x * sigmoid(x) -> silu(x)",
          names=["fuse_silu"])
def _silu_pass(t: Tester, fuse_silu) -> None:
    import torch._dynamo

    from .. import compiler
    from ..profiler import profile

    aten = torch.ops.aten
    for name, fn, n_args, want_silu, want_sigmoid, hidden in _silu_cases():
        args = [randn(64, 64, seed=i) for i in range(n_args)]
        ref = fn(*args)  # on the CPU, before the learner's pass runs
        want = list(ref) if isinstance(ref, tuple) else [ref]
        hint = _silu_hint(name)
        try:
            outcome = t.call(_compile_with, fn, fuse_silu, [a.to("npu") for a in args])
            if not outcome.ok:
                t.error(f"{name}: compiling with your pass", outcome, hidden=hidden,
                        hint="fuse_silu(gm) gets an ATen GraphModule; change it in place and return a list of strings")
                continue
            snap = compiler.last_compile().graph("inference").snapshot("fuse_silu")
            nodes = [n for n in snap.graph.nodes if n.op == "call_function"]
            silus = sum(1 for n in nodes if n.target in (aten.silu.default, aten.silu))
            sigmoids = sum(1 for n in nodes if n.target in (aten.sigmoid.default, aten.sigmoid))
            t.expect(f"{name}: {want_silu} aten.silu node(s) and {want_sigmoid} aten.sigmoid node(s) after your pass",
                     silus == want_silu and sigmoids == want_sigmoid, hidden=hidden,
                     expected=f"{want_silu} silu, {want_sigmoid} sigmoid", got=f"{silus} silu, {sigmoids} sigmoid",
                     hint=hint)
            ok, changes, _ = values.check_plain(snap.changes)
            counted = ok and type(changes) is list and all(type(c) is str for c in changes)
            t.expect(f"{name}: your pass reports one change per rewrite", counted and len(changes) == want_silu,
                     hidden=hidden, expected=f"{want_silu} string(s)", got=short(snap.changes),
                     hint="return a list with one string per rewrite (an empty list when nothing matched)")
            got = _outputs(outcome.value)
            same = got is not None and len(got) == len(want) and all(
                values.tensors_close(g, w, rtol=1e-5, atol=1e-6) for g, w in zip(got, want))
            t.expect(f"{name}: compiled result equals eager", same, hidden=hidden, expected="equal",
                     got="equal" if same else "different", hint=hint)
            if name.startswith("x * sigmoid(x) + 1"):
                npu_args = [a.to("npu") for a in args]
                compiled = torch.compile(fn, backend="npu", options={"pointwise_fusion": False})
                with compiler.extra_pass(fuse_silu, "fuse_silu"):
                    torch._dynamo.reset()
                    fast = torch.compile(fn, backend="npu", options={"pointwise_fusion": False})
                    fast(*npu_args)
                    with profile() as p_fast:
                        fast(*npu_args)
                torch._dynamo.reset()
                compiled(*npu_args)
                with profile() as p_slow:
                    compiled(*npu_args)
                t.expect("the profiler sees fewer launches and less simulated time with your pass",
                         p_fast.launches < p_slow.launches and p_fast.sim_time_us < p_slow.sim_time_us,
                         expected=f"< {p_slow.launches} launches, < {p_slow.sim_time_us:.1f} us",
                         got=f"{p_fast.launches} launches, {p_fast.sim_time_us:.1f} us",
                         hint="the mul and the sigmoid should become one silu kernel")
        finally:
            torch._dynamo.reset()
            compiler.reset()


def _edge(shape: tuple[int, int, int], tiles: tuple[int, int]) -> float:
    """The fraction of the output left to the kernel's edge code (rows and columns no full tile covers)."""
    m, n, _ = shape
    tm, tn = tiles
    return 1 - (m // tm * tm) * (n // tn * tn) / (m * n)


def _reuse(tiles: tuple[int, int]) -> int:
    """Multiply-adds per step of the tile's inner loop for ``TM + TN`` values loaded: ``TM * TN``."""
    return tiles[0] * tiles[1]


#: (m, n, k), what the shape is like, hidden. Every case is judged by the same two rules, which need no
#: clock (wall time would make the verdict depend on the machine and on how busy it is): no more of the
#: output left to the edge code than the best tile leaves, and among such tiles the most reuse.
TILE_CASES: list[tuple[tuple[int, int, int], str, bool]] = [
    ((2, 1536, 384), "two rows", False),
    ((16, 1024, 512), "16 rows of x @ weight.T: the default fits", False),
    ((512, 512, 512), "square, every size divides", False),
    ((48, 512, 512), "48 rows of x @ weight.T", True),
    ((2, 3000, 256), "two rows, wide", True),
    ((6, 4096, 250), "six rows", True),
    ((7, 33, 64), "ragged: 7 rows, 33 columns", True),
    ((1000, 3, 64), "tall and thin: 3 columns", True),
    ((3, 1002, 64), "wide and short: 3 rows", True),
]


def _tiles_hint(kind: str, what: str) -> str:
    if kind == "reuse":
        return ("a tile of TM x TN sums does TM * TN multiply-adds for the TM + TN values it loads: tiles of 1 "
                "leave nothing to the edge code but reuse nothing (about 3x slower here); of the tiles that cover "
                "the output as well as any can, take the largest")
    if "two rows" in what:
        return "a 4-row tile over a 2-row matrix leaves every row to the slow edge code"
    if "columns" in what and "rows" not in what:
        return "the columns matter as the rows do: a 4-column tile over 3 columns covers none of them"
    if "rows" in what and "3 rows" in what:
        return "with 3 rows, a 2-row or 4-row tile leaves rows to the edge code"
    if "ragged" in what:
        return "when no tile size divides a dimension, only tile size 1 covers all of it"
    return "choose tile sizes that divide the matrix: rows and columns no full tile covers go to the edge code"


@exercise("ch8.tiles", "Choose matmul tile sizes for any shape", names=["choose_tiles"], timeout=30)
def _tiles(t: Tester, choose_tiles) -> None:
    from ..kernels import matmul as mk

    candidates = [(tm, tn) for tm in mk.TM_CHOICES for tn in mk.TN_CHOICES]
    for shape, what, hidden in TILE_CASES:
        outcome = t.call(choose_tiles, *shape)
        if not outcome.ok:
            t.error(f"choose_tiles{shape} ({what})", outcome, hidden=hidden)
            continue
        ok, tiles, why = values.check_plain(outcome.value)
        valid = (ok and type(tiles) is tuple and len(tiles) == 2 and all(type(v) is int for v in tiles)
                 and tiles[0] in mk.TM_CHOICES and tiles[1] in mk.TN_CHOICES)
        if not t.expect(f"choose_tiles{shape} returns a tuple (TM, TN) of ints, TM in {mk.TM_CHOICES}, "
                        f"TN in {mk.TN_CHOICES}", valid, hidden=hidden,
                        got=short(outcome.value) + (f" ({why})" if why else ""),
                        hint="return a tuple of two plain ints, like (2, 4)"):
            continue
        least = min(_edge(shape, c) for c in candidates)
        waste = _edge(shape, tiles)
        if not t.expect(f"tiles {tiles} for {shape} ({what}): no more of the output left to the edge code than "
                        "necessary", waste <= least + 1e-9, hidden=hidden,
                        expected=f"{least:.0%} of the output in the edge", got=f"{waste:.0%}",
                        hint=_tiles_hint("edge", what)):
            continue
        most = max(_reuse(c) for c in candidates if _edge(shape, c) <= least + 1e-9)
        t.expect(f"tiles {tiles} for {shape} ({what}): the most reuse among the tiles that leave the least to the "
                 "edge code", _reuse(tiles) == most, hidden=hidden, expected=f"TM * TN = {most}",
                 got=f"TM * TN = {_reuse(tiles)}", hint=_tiles_hint("reuse", what))


def _work(a: torch.Tensor) -> torch.Tensor:
    return (a @ a).relu()


def _benchmark_cases() -> list[tuple[str, Callable[[], Callable[..., Any]], int, str, bool]]:
    """(description, make the timed function, n, hint, hidden): each function made afresh for the check."""
    def default_stream() -> Callable[..., Any]:
        return _work

    def side_stream() -> Callable[..., Any]:
        side = torch.npu.Stream()

        def fn(a):
            with torch.npu.stream(side):
                return _work(a)
        return fn

    def first_call_prepares() -> Callable[..., Any]:
        cache: dict[str, torch.Tensor] = {}

        def fn(a):
            if "w" not in cache:  # one-time work on the first call (like a compile, or packing weights)
                w = a
                for _ in range(6):
                    w = (w @ a).tanh()
                cache["w"] = w
            return _work(a) + cache["w"]
        return fn

    def two_side_streams() -> Callable[..., Any]:
        s1, s2 = torch.npu.Stream(), torch.npu.Stream()

        def fn(a):
            with torch.npu.stream(s1):
                b = _work(a)
            s2.wait_stream(s1)
            with torch.npu.stream(s2):
                return (b @ a).sigmoid()
        return fn

    warm = "call fn once before timing it: the first call does one-time work the steady state does not"
    return [
        ("fn runs on the default stream", default_stream, 128,
         "record an event before and after the call, wait for the end event, and return start.elapsed_time(end)",
         False),
        ("fn runs on a side stream of its own", side_stream, 128,
         "fn runs on a stream you do not see: wait for the whole device (torch.npu.synchronize()) before you record "
         "the end event, or the event does not wait for that stream", False),
        ("fn's first call prepares a cache", first_call_prepares, 96, warm, True),
        ("fn runs on two streams of its own, one after the other", two_side_streams, 160,
         "fn uses streams you cannot see: torch.npu.synchronize() waits for all of them", True),
        ("fn runs on a side stream of its own, a larger input", side_stream, 256,
         "the end event must come after all of fn's work, on every stream: torch.npu.synchronize() first", True),
    ]


@exercise("ch8.fix_benchmark", "Time what the device did: one call, in steady state, on any stream",
          names=["measure_fixed"])
def _fix_benchmark(t: Tester, measure_fixed) -> None:
    from ..device import clock
    from ..profiler import profile

    tolerance_ms = 1.5 * clock.cost_model.event_us / 1000  # recording an event itself takes the device a moment
    for desc, make, n, hint, hidden in _benchmark_cases():
        x = randn(n, n, seed=n).to("npu")
        reference = make()
        reference(x)  # warm: what the steady state costs, measured by the profiler on the simulated clock
        torch.npu.synchronize()
        with profile() as prof:
            reference(x)
            torch.npu.synchronize()
        true_ms = prof.sim_time_us / 1000
        t.case(f"measure_fixed(fn, x of {n}x{n}), {desc}: the simulated ms of one steady-state call",
               measure_fixed, make(), x, expected=true_ms, hidden=hidden, rtol=0.02,
               atol=tolerance_ms, hint=hint)
