"""Bring-up milestone 5: compile passes of your own, with fused kernels of your own.

On a bare device the ``npu`` compile backend runs your kernels and your passes only
(:func:`npu_lab.compiler.register_pass`): the lab's fusion passes emit the lab's kernels and are off. This
milestone writes two fused operators in the namespace ``mynpu`` and the two passes that put them in the graph:

* ``mynpu::addmm_gelu(Tensor bias, Tensor x, Tensor w) -> (Tensor, Tensor)``: ``pre = bias + x @ w`` and
  ``gelu(pre)`` (the exact, erf form) in one kernel; the pass ``fuse_addmm_gelu`` rewrites ``gelu(addmm(b, x, w))``
  (views between allowed, a 1-D bias, ``beta = alpha = 1``, ``approximate="none"``) and leaves every other graph
  as it was;
* ``mynpu::add_layer_norm(Tensor a, Tensor b, int[] normalized_shape, Tensor? weight, Tensor? bias, float eps)
  -> (Tensor, Tensor, Tensor, Tensor)``: ``s = a + b`` and ``native_layer_norm(s)`` in one kernel; the pass
  ``fuse_add_layer_norm`` rewrites ``native_layer_norm(add(a, b))`` for ``a`` and ``b`` of one shape, alpha 1.

Three checks:

* ``b5.fused_ops`` - the two operators on hidden shapes and layouts against the CPU (``addmm`` then ``gelu``;
  ``add`` then ``native_layer_norm``) under ``memcheck``, their fake implementations against their kernels
  (``torch.library.opcheck``), one launch per call that reports at least the bytes of its inputs;
* ``b5.passes`` - the two passes on hidden ATen graphs (``make_fx``): each fusion they must make, each graph they
  must leave alone, and the rewritten graph run on npu against the original on the CPU;
* ``b5.step`` - the transformer block's training step compiled with ``backend="npu"`` and both passes: the CPU's
  loss and gradients, both fused operators in the graph, fewer launches, fewer bytes and less time on the device
  clock than the same step compiled without them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from ..grading import device
from ..grading.device import Property
from ..grading.registry import chapter, exercise
from ..grading.tester import STUB_MESSAGE, NotStarted, Tester
from . import bringup_checks
from .bringup_checks import TIMEOUT, randn

chapter("b5", "Bring-up 5: compile passes and fused kernels of your own", [
    "On a bare device the npu backend compiles your kernels, rewritten by your passes only",
    "A fused operator is defined with torch.library, with a kernel for the device and a fake for the compiler",
    "A pass finds its pattern in the ATen graph through views, and keeps every value another node still uses",
    "A pass leaves alone every graph its fused kernel does not compute exactly",
    "Fusion is measured on the device clock: launches, bytes moved and time, against the graph without it",
])

FUSED_OPS = ["mynpu::addmm_gelu", "mynpu::add_layer_norm"]
#: The fewest launches a step compiled with both passes must save (one addmm_gelu, one add_layer_norm).
LAUNCHES_SAVED = 2
TOL = {"rtol": 1e-4, "atol": 1e-5}


def _op(name: str):
    namespace, op = name.split("::")
    return getattr(getattr(torch.ops, namespace), op).default


def _require_ops() -> None:
    bringup_checks.started(FUSED_OPS)
    missing = [name for name in FUSED_OPS if not torch._C._dispatch_has_kernel_for_dispatch_key(
        name, "PrivateUse1")]
    if missing:
        raise NotStarted("no npu kernel of yours for " + ", ".join(missing) + " yet")


def _require_pass(fn: object, name: str) -> None:
    from ..device import bare

    bare.require_bare("the bring-up checks")
    if not callable(fn):
        raise NotStarted(f"define {name}(gm) -> list[str]")


# ---------------------------------------------------------------------------------------------
# b5.fused_ops
# ---------------------------------------------------------------------------------------------

def _close(got: torch.Tensor, want: torch.Tensor, what: str) -> str:
    if got.device.type != "npu":
        return f"{what} is on {got.device}, not npu"
    if tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
        return f"{what} is {tuple(got.shape)} {got.dtype}, the CPU's {tuple(want.shape)} {want.dtype}"
    try:
        torch.testing.assert_close(got.cpu(), want, **TOL)
    except AssertionError as exc:
        return f"{what} differs: " + " ".join(str(exc).split())[:200]
    return ""


def _launches(fn: Callable[[], object], inputs: list[torch.Tensor], empty: bool = False) -> tuple[object, str]:
    """Run ``fn`` under the profiler: its result, and what is wrong with its launches ("" if nothing; with
    ``empty`` results, no launch is needed)."""
    from ..profiler import profile

    with profile() as prof:
        out = fn()
        torch.npu.synchronize()
    kernels = [k for k in prof.kernels if k.kind == "kernel"]
    if empty and not kernels:
        return out, ""
    need = sum(t.numel() * t.element_size() for t in inputs)
    if not kernels:
        return out, "no kernel launched (call bringup.launch in the kernel)"
    if len(kernels) > 1:
        names = ", ".join(k.name for k in kernels[:4])
        return out, f"{len(kernels)} kernels launched ({names}): a fused operator is one"
    if kernels[0].bytes_read < need:
        return out, (f"the launch reports {kernels[0].bytes_read} bytes read, fewer than its inputs' {need} (a fused "
                     "kernel reads each input once)")
    return out, ""


def _addmm_gelu_property(what: str, make: Callable[[], list[torch.Tensor]], hidden: bool, hint: str = "") -> Property:
    def test() -> str:
        bias, x, w = make()
        pre = torch.addmm(bias, x, w)
        want = (pre, F.gelu(pre))
        args = [t.to("npu") for t in (bias, x, w)]  # .to keeps a transposed view's strides
        got, launches = _launches(lambda: _op("mynpu::addmm_gelu")(*args), args, empty=not pre.numel())
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return f"returned {type(got).__name__}, not the two tensors (pre, gelu(pre))"
        return _close(got[0], want[0], "pre") or _close(got[1], want[1], "gelu(pre)") or launches

    return Property(f"addmm_gelu: {what}", "mynpu::addmm_gelu", test, "(bias + x @ w, gelu of it) as on the CPU",
                    hidden=hidden, hint=hint)


def _add_layer_norm_property(what: str, make: Callable[[], list], hidden: bool, hint: str = "") -> Property:
    def test() -> str:
        a, b, shape, weight, bias, eps = make()
        s = a + b
        want = (s, *torch.native_layer_norm(s, shape, weight, bias, eps))
        npu = [t.to("npu") if isinstance(t, torch.Tensor) else t for t in (a, b, shape, weight, bias, eps)]
        tensors = [t for t in npu if isinstance(t, torch.Tensor)]
        got, launches = _launches(lambda: _op("mynpu::add_layer_norm")(*npu), tensors, empty=not s.numel())
        if not isinstance(got, (tuple, list)) or len(got) != 4:
            return f"returned {type(got).__name__}, not the four tensors (a + b, out, mean, rstd)"
        names = ("a + b", "out", "mean", "rstd")
        return next((w for w in (_close(g, e, n) for g, e, n in zip(got, want, names)) if w), "") or launches

    return Property(f"add_layer_norm: {what}", "mynpu::add_layer_norm", test,
                    "(a + b, native_layer_norm(a + b)) as on the CPU", hidden=hidden, hint=hint)


def _opcheck_property(name: str, make: Callable[[], list], hidden: bool) -> Property:
    def test() -> str:
        args = [t.to("npu") if isinstance(t, torch.Tensor) else t for t in make()]
        try:
            torch.library.opcheck(_op(name), tuple(args), test_utils=("test_schema", "test_faketensor"))
        except Exception as exc:  # noqa: BLE001 - opcheck's report is the feedback
            text = str(exc)
            if STUB_MESSAGE in text or STUB_MESSAGE in repr(exc.__cause__):
                raise
            return next((line for line in text.splitlines() if line.strip()), type(exc).__name__)[:300]
        return ""

    return Property(f"opcheck of {name.split('::')[1]}: the fake against the kernel", name, test,
                    "the fake's outputs have the kernel's shapes, dtypes, strides and device", hidden=hidden,
                    blame=False,
                    hint="register_fake: return new tensors (x.new_empty(...)) with exactly the shapes, dtypes and "
                         "strides the kernel's outputs have; the schema must say what the operator reads and returns")


def _ln_args(shape: tuple[int, ...], n: int, seed: int, weight: bool = True, bias: bool = True) -> Callable[[], list]:
    return lambda: [randn(*shape, seed=seed), randn(*shape, seed=seed + 1), [n],
                    randn(n, seed=seed + 2) if weight else None, randn(n, seed=seed + 3) if bias else None, 1e-5]


def fused_op_cases() -> list[Property]:
    strides = "w is a view (the graph passes weight.t()): read it through its strides"
    return [
        _addmm_gelu_property("(8, 16) @ (16, 32) with a (32,) bias", lambda: [randn(32), randn(8, 16, seed=1),
                             randn(16, 32, seed=2)], False,
                             hint="pre = bias + x @ w; out = 0.5 * pre * (1 + erf(pre / sqrt(2)))"),
        _addmm_gelu_property("w transposed (as F.linear passes weight.t())", lambda: [randn(24), randn(6, 10, seed=1),
                             randn(24, 10, seed=2).t()], False, hint=strides),
        _addmm_gelu_property("one row", lambda: [randn(5), randn(1, 3, seed=1), randn(3, 5, seed=2)], True,
                             hint="a (1, K) input is still a matrix"),
        _addmm_gelu_property("no rows (an empty batch)", lambda: [randn(5), torch.empty(0, 3), randn(3, 5, seed=2)],
                             True, hint="an empty batch gives two empty (0, N) results and launches nothing"),
        _addmm_gelu_property("large pre-activations (|pre| up to 40)", lambda: [randn(8) * 10, randn(4, 6, seed=1) * 3,
                             randn(6, 8, seed=2)], True, hint="gelu uses erf: for large |pre| it is pre or 0"),
        _opcheck_property("mynpu::addmm_gelu", lambda: [randn(32), randn(8, 16, seed=1), randn(16, 32, seed=2)],
                          False),
        _add_layer_norm_property("(8, 32) rows", _ln_args((8, 32), 32, 10), False,
                                 hint="s = a + b; out = (s - mean) * rstd * weight + bias, per row of the last "
                                      "dimensions; mean and rstd have the leading dimensions, then 1s"),
        _add_layer_norm_property("a (2, 4, 32) batch", _ln_args((2, 4, 32), 32, 20), False,
                                 hint="normalize over the trailing normalized_shape; mean and rstd are (2, 4, 1)"),
        _add_layer_norm_property("without weight and bias", _ln_args((6, 16), 16, 30, weight=False, bias=False),
                                 True, hint="weight and bias are optional (Tensor?): None means 1 and 0"),
        _add_layer_norm_property("no rows", lambda: [torch.empty(0, 8), torch.empty(0, 8), [8], randn(8), randn(8),
                                                     1e-5], True,
                                 hint="no rows: empty results, and nothing to launch"),
        _add_layer_norm_property("a row of equal numbers (variance 0)", lambda: [torch.ones(3, 8), torch.ones(3, 8),
                                                                                [8], None, None, 1e-5], True,
                                 hint="rstd = 1 / sqrt(variance + eps): eps keeps it finite"),
        _opcheck_property("mynpu::add_layer_norm", _ln_args((2, 4, 32), 32, 40), False),
    ]


@exercise("b5.fused_ops", "Two fused operators: addmm_gelu and add_layer_norm", names=[], timeout=TIMEOUT)
def _fused_ops(t: Tester) -> None:
    _require_ops()
    bringup_checks.grade_cases(t, fused_op_cases(), FUSED_OPS)


# ---------------------------------------------------------------------------------------------
# b5.passes
# ---------------------------------------------------------------------------------------------

class GraphCase:
    """A function traced to an ATen graph (``make_fx``), how many fused nodes a pass must leave in it, and why."""

    def __init__(self, what: str, fn: Callable, make: Callable[[], list[torch.Tensor]], fused: int, hidden: bool,
                 hint: str = "") -> None:
        self.what, self.fn, self.make, self.fused, self.hidden, self.hint = what, fn, make, fused, hidden, hint


def _linear_gelu(x, w, b):
    return F.gelu(F.linear(x, w, b))


def addmm_gelu_graphs() -> list[GraphCase]:
    g = GraphCase
    alone = "this graph computes something else than bias + x @ w then the exact gelu: leave it as it was"
    return [
        g("gelu(linear(x, w, b)) on (8, 16) inputs", _linear_gelu,
          lambda: [randn(8, 16), randn(32, 16, seed=1), randn(32, seed=2)], 1, False,
          hint="find each aten.gelu whose input is an aten.addmm and replace the two by one mynpu.addmm_gelu"),
        g("a 3-D input (2, 4, 16): views between addmm and gelu", _linear_gelu,
          lambda: [randn(2, 4, 16), randn(32, 16, seed=1), randn(32, seed=2)], 1, False,
          hint="F.linear of a 3-D input is view -> addmm -> view: look through aten.view nodes"),
        g("the pre-activation is used again (training keeps it for gelu's backward)",
          lambda x, w, b: (lambda h: (h, F.gelu(h)))(F.linear(x, w, b)),
          lambda: [randn(6, 8), randn(12, 8, seed=1), randn(12, seed=2)], 1, False,
          hint="the addmm's other users must now read the fused operator's first output (pre)"),
        g("two layers, two fusions", lambda x, w1, b1, w2, b2: _linear_gelu(_linear_gelu(x, w1, b1), w2, b2),
          lambda: [randn(4, 8), randn(16, 8, seed=1), randn(16, seed=2), randn(8, 16, seed=3), randn(8, seed=4)], 2,
          True, hint="fuse every match in the graph, not only the first"),
        g("gelu with approximate='tanh' is left alone",
          lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"),
          lambda: [randn(4, 8), randn(8, 8, seed=1), randn(8, seed=2)], 0, True, hint=alone),
        g("addmm with alpha=2 is left alone", lambda b, x, w: F.gelu(torch.addmm(b, x, w, alpha=2.0)),
          lambda: [randn(8), randn(4, 6, seed=1), randn(6, 8, seed=2)], 0, True, hint=alone),
        g("a 2-D bias (one per row) is left alone", lambda b, x, w: F.gelu(torch.addmm(b, x, w)),
          lambda: [randn(4, 8), randn(4, 6, seed=1), randn(6, 8, seed=2)], 0, True,
          hint="mynpu.addmm_gelu adds a 1-D bias to every row: a (4, 8) bias is another computation"),
        g("relu after linear is left alone", lambda x, w, b: F.relu(F.linear(x, w, b)),
          lambda: [randn(4, 8), randn(8, 8, seed=1), randn(8, seed=2)], 0, True, hint=alone),
    ]


def add_layer_norm_graphs() -> list[GraphCase]:
    g = GraphCase
    alone = "this graph computes something else than a + b (one shape) then layer norm: leave it as it was"
    return [
        g("layer_norm(a + b) on (8, 32)", lambda a, b, w, c: F.layer_norm(a + b, (32,), w, c),
          lambda: [randn(8, 32), randn(8, 32, seed=1), randn(32, seed=2), randn(32, seed=3)], 1, False,
          hint="find each aten.native_layer_norm whose input is an aten.add.Tensor of two tensors of one shape"),
        g("the sum is used again (a residual stream)",
          lambda a, b, w, c: (lambda s: (s, F.layer_norm(s, (32,), w, c)))(a + b),
          lambda: [randn(2, 4, 32), randn(2, 4, 32, seed=1), randn(32, seed=2), randn(32, seed=3)], 1, False,
          hint="the add's other users must now read the fused operator's first output (a + b)"),
        g("mean and rstd are used (as training's backward does)",
          lambda a, b, w, c: torch.native_layer_norm(a + b, [16], w, c, 1e-5),
          lambda: [randn(6, 16), randn(6, 16, seed=1), randn(16, seed=2), randn(16, seed=3)], 1, True,
          hint="native_layer_norm returns (out, mean, rstd): each getitem must read the matching fused output"),
        g("no weight and no bias", lambda a, b: F.layer_norm(a + b, (16,)),
          lambda: [randn(4, 16), randn(4, 16, seed=1)], 1, True, hint="weight and bias may be None: pass them on"),
        g("a + b with broadcasting is left alone", lambda a, b: F.layer_norm(a + b, (16,)),
          lambda: [randn(4, 16), randn(16, seed=1)], 0, True,
          hint="mynpu.add_layer_norm adds two tensors of one shape: a broadcast add is another computation"),
        g("add with alpha=2 is left alone", lambda a, b: F.layer_norm(torch.add(a, b, alpha=2.0), (16,)),
          lambda: [randn(4, 16), randn(4, 16, seed=1)], 0, True, hint=alone),
        g("layer norm of something else (a * b) is left alone", lambda a, b: F.layer_norm(a * b, (16,)),
          lambda: [randn(4, 16), randn(4, 16, seed=1)], 0, True, hint=alone),
    ]


def _trace(case: GraphCase) -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    from torch.fx.experimental.proxy_tensor import make_fx

    inputs = case.make()
    gm = make_fx(case.fn, tracing_mode="fake")(*[x.to("npu") for x in inputs])
    return gm, inputs


def _fused_nodes(graph: torch.fx.Graph, name: str) -> int:
    return sum(1 for n in graph.nodes if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
               and n.target.name() == name)


def _pass_property(fn: Callable, name: str, op: str, case: GraphCase) -> Property:
    def test() -> str:
        gm, inputs = _trace(case)
        want = torch.fx.GraphModule(gm, gm.graph)(*inputs)  # the original graph, on the CPU
        changes = fn(gm)
        if changes is not None and not (isinstance(changes, list) and all(isinstance(c, str) for c in changes)):
            return f"{name} returned {type(changes).__name__}, not a list of str (one line per change)"
        try:
            gm.graph.lint()
        except Exception as exc:  # noqa: BLE001 - the learner's graph is broken
            return f"the rewritten graph is not valid FX: {str(exc).splitlines()[0][:200]}"
        gm.recompile()
        fused = _fused_nodes(gm.graph, op)
        if fused != case.fused:
            return f"{fused} {op.split('::')[1]} nodes in the rewritten graph, {case.fused} expected"
        if case.fused and len(changes or []) != case.fused:
            return f"{name} reported {len(changes or [])} changes for {case.fused} fusions"
        if not case.fused and changes:
            return f"{name} reported changes on a graph it must leave alone: {changes[:2]}"
        got = gm(*[x.to("npu") for x in inputs])
        pairs = list(zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)))
        return next((w for w in (_close(g, e, f"output {i}") for i, (g, e) in enumerate(pairs)) if w), "")

    # blame=False: the case traces a graph (make_fx) and compares the graphs' outputs itself
    return Property(f"{name}: {case.what}", op, test,
                    f"{case.fused} fused node(s), the graph's outputs as on the CPU", hidden=case.hidden,
                    hint=case.hint, blame=False)


def pass_cases(fuse_addmm_gelu: Callable, fuse_add_layer_norm: Callable) -> list[Property]:
    return ([_pass_property(fuse_addmm_gelu, "fuse_addmm_gelu", "mynpu::addmm_gelu", c) for c in addmm_gelu_graphs()]
            + [_pass_property(fuse_add_layer_norm, "fuse_add_layer_norm", "mynpu::add_layer_norm", c)
               for c in add_layer_norm_graphs()])


@exercise("b5.passes", "Two passes that put your fused operators in the graph",
          names=["fuse_addmm_gelu", "fuse_add_layer_norm"], timeout=TIMEOUT)
def _passes(t: Tester, fuse_addmm_gelu, fuse_add_layer_norm) -> None:
    _require_pass(fuse_addmm_gelu, "fuse_addmm_gelu")
    _require_pass(fuse_add_layer_norm, "fuse_add_layer_norm")
    _require_ops()
    bringup_checks.grade_cases(t, pass_cases(fuse_addmm_gelu, fuse_add_layer_norm), FUSED_OPS)


# ---------------------------------------------------------------------------------------------
# b5.step
# ---------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _passes_registered(passes: list[Callable]) -> Iterator[None]:
    from ..compiler import custom_passes

    saved = dict(custom_passes.REGISTERED)
    custom_passes.REGISTERED.clear()
    for i, fn in enumerate(passes):  # under your functions' names, which the backend's messages quote
        name = getattr(fn, "__name__", "")
        custom_passes.REGISTERED[name if name and name not in custom_passes.REGISTERED else f"pass {i}"] = fn
    try:
        yield
    finally:
        custom_passes.REGISTERED.clear()
        custom_passes.REGISTERED.update(saved)


def _cause(text: str) -> str:
    """The line of an error that says what went wrong: the last one, Dynamo's advice on logging aside."""
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.startswith(("Set TORCHDYNAMO_VERBOSE", "For even more developer context"))]
    return lines[-1] if lines else text


def compiled_step(passes: list[Callable]) -> dict:
    """The transformer block's training step on npu, eager and compiled with and without ``passes`` (in the child)."""
    from torch import _dynamo

    from .. import models
    from ..compiler.record import last_compile
    from ..profiler import profile

    torch.manual_seed(0)
    cpu = models.TransformerBlock()
    block = models.TransformerBlock().to("npu")
    block.load_state_dict(cpu.state_dict())
    x, y = models.example_batch(cpu, 2, "cpu")

    def step(model, x, y):
        model.zero_grad(set_to_none=True)
        loss = models.loss_fn(model, model(x), y)
        loss.backward()
        return loss

    want = step(cpu, x, y).item(), {k: p.grad.clone() for k, p in cpu.named_parameters()}
    xn, yn = x.to("npu"), y.to("npu")
    out: dict = {}
    for label, chosen in (("with", passes), ("without", [])):  # yours first: what your pass does shows at once
        _dynamo.reset()
        with _passes_registered(chosen):
            fn = torch.compile(step, backend="npu")
            fn(block, xn, yn)  # compiles (and the numba kernels compile)
            with profile() as prof:
                loss = fn(block, xn, yn)
                torch.npu.synchronize()
            graphs = last_compile().graphs
        out[label] = {"loss": loss.item(), "launches": prof.launches, "bytes": prof.bytes_moved,
                      "sim_us": prof.sim_time_us,
                      "fused": {op: sum(_fused_nodes(g.final.graph, op) for g in graphs) for op in FUSED_OPS},
                      "grads": max(float((p.grad.cpu() - want[1][k]).abs().max()) for k, p in block.named_parameters())}
    _dynamo.reset()
    out["cpu_loss"] = want[0]
    return out


@exercise("b5.step", "The transformer block's compiled training step, fused by your passes, on the device clock",
          names=["fuse_addmm_gelu", "fuse_add_layer_norm"], timeout=2 * TIMEOUT)
def _step(t: Tester, fuse_addmm_gelu, fuse_add_layer_norm) -> None:
    from ..grading import forked

    _require_pass(fuse_addmm_gelu, "fuse_addmm_gelu")
    _require_pass(fuse_add_layer_norm, "fuse_add_layer_norm")
    _require_ops()
    limit = device.case_limit(2 * TIMEOUT)
    title = "the transformer block's training step, compiled with backend='npu' and your passes"
    try:
        got = forked.call_forked(lambda: compiled_step([fuse_addmm_gelu, fuse_add_layer_norm]), limit)
    except forked.ChildTimeout:
        t.expect(title, False, expected=f"done within {limit:g} s", got="did not finish")
        return
    except Exception as exc:  # noqa: BLE001 - the learner's pass or kernel raised
        text = forked.trimmed(exc) or str(exc)
        if STUB_MESSAGE in text:
            raise NotStarted("your passes or kernels still raise NotImplementedError") from None
        t.expect(title, False, expected="no error", got=f"{type(exc).__name__}: {_cause(text)[:300]}",
                 hint="b5.passes runs each pass on small graphs first: pass it before this check")
        return
    before, after = got["without"], got["with"]
    t.expect("the loss matches the CPU's to 1e-4", abs(after["loss"] - got["cpu_loss"]) <= 1e-4 * max(1.0, abs(
        got["cpu_loss"])), expected=f"{got['cpu_loss']:.6f}", got=f"{after['loss']:.6f}",
        hint="a fused kernel computes what the nodes it replaced computed: b5.fused_ops compares them on their own")
    t.expect("every gradient matches the CPU's to 1e-4", after["grads"] <= 1e-4, expected="max |npu - cpu| <= 1e-4",
             got=f"max |npu - cpu| = {after['grads']:.3g}",
             hint="the backward graph reads the values the forward saved: each must still be the same value")
    for op in FUSED_OPS:
        t.expect(f"{op.split('::')[1]} is in the compiled graph", after["fused"][op] >= 1,
                 expected="at least one node", got=f"{after['fused'][op]} nodes",
                 hint="the step's graph is what AOTAutograd gives the backend: print it from a pass "
                      "(gm.print_readable()) to see the pattern as your pass meets it")
    saved = before["launches"] - after["launches"]
    t.expect(f"at least {LAUNCHES_SAVED} fewer launches than the step compiled without your passes",
             saved >= LAUNCHES_SAVED, expected=f"<= {before['launches'] - LAUNCHES_SAVED}",
             got=f"{after['launches']} (without your passes: {before['launches']})",
             hint="each fused operator is one launch where there were two")
    t.expect("fewer bytes moved by kernels", after["bytes"] < before["bytes"],
             expected=f"< {before['bytes'] / 1e3:.1f} KB", got=f"{after['bytes'] / 1e3:.1f} KB",
             hint="a fused kernel does not write and read back the value between the two operators it replaced; "
                  "report the bytes it really reads and writes")
    t.expect("less simulated device time", after["sim_us"] < before["sim_us"],
             expected=f"< {before['sim_us']:.1f} us", got=f"{after['sim_us']:.1f} us")

