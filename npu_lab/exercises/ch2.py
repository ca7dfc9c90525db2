"""Chapter 2: TorchScript - trace and script, the IR, control flow, save/load, and its successor.

Four exercises:

* ``ch2.graph_ops`` - count the nodes of a TorchScript graph by kind, the nodes inside
  ``prim::If``/``prim::Loop`` blocks included;
* ``ch2.fix_trace`` - a traced model silently takes one branch for every input; deploy it as
  TorchScript that keeps the branch (its backbone cannot be scripted, so trace that part only);
* ``ch2.script_loop`` - a model that loops over its input's length: make it scriptable (types),
  script it and save a TorchScript archive that a CPU server (a process with only ``torch``) loads and
  runs, matching eager at every length;
* ``ch2.export_cond`` - replace the TorchScript deployment by ``torch.export``: ``torch.cond``
  for the branch, a dynamic batch dimension, a ``.pt2`` archive that round-trips.

The models the exercises work on (:class:`Screen`, :class:`Backbone`, :class:`Smoother`) are
defined here so the notebooks can import them.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import os
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ..grading.inputs import randn
from ..grading.predictions import question
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester, short
from ..inspect.torchscript import record_warnings

chapter("ch2", "TorchScript: trace, script, save, and what replaced it", [
    "torch.jit.trace records the operators one run executed; torch.jit.script compiles the Python source",
    "TorchScript IR is a typed SSA graph of aten:: operators and prim:: instructions (.graph, .inlined_graph, .code)",
    "Tracing turns data-dependent control flow into constants: one branch, a fixed number of loop iterations",
    "Scripting keeps control flow as prim::If and prim::Loop nodes with nested blocks",
    "TorchScript is a statically typed subset of Python: annotate non-Tensor arguments, Optional, no try/**kwargs",
    "Trace what has no control flow and script what has; the two mix in one module",
    "torch.jit.save writes code plus weights that load without the Python class; weights saved from npu load only "
    "where the npu is registered, so a CPU server gets an archive saved from a CPU copy",
    "TorchScript is deprecated: torch.export (torch.cond for branches) deploys, torch.compile speeds up",
])


question("ch2.traced_branch",
         "Gate traced on x_pos (the relu * 2 branch): does the traced module give eager's result on x_neg, which "
         "takes the sigmoid branch?",
         why="the trace recorded the operators of the one branch x_pos took; the `if` became a constant, so on x_neg "
             "the traced module still computes relu(h) * 2, and no error says so")
question("ch2.unrolled",
         "Accumulate traced on a sequence of 3 rows: how many aten::tanh nodes does the traced graph have?",
         why="the Python loop ran 3 times while the tracer recorded: the trace holds one copy of the step per row "
             "of the example, 3 tanh nodes, and a longer sequence still gets 3 steps")
question("ch2.loop_body",
         "Accumulate scripted: how many aten::tanh nodes does its graph have?",
         why="scripting compiles the loop itself: one prim::Loop node whose body block holds the step once, whatever "
             "the length of the input")
question("ch2.plain_load",
         "An archive saved by torch.jit.save with its weights on npu: does a Python process that imports only torch "
         "load it with map_location='cpu'?",
         why="the archive names the device of every tensor, and the name npu exists only where a package registered "
             "it: the plain process fails on the name before map_location applies; save a CPU copy to deploy")


@contextlib.contextmanager
def quiet_jit() -> Iterator[None]:
    """Silence torch.jit's DeprecationWarnings (the chapter shows them once) and nothing else."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=DeprecationWarning)
        yield


@contextlib.contextmanager
def quiet_export() -> Iterator[None]:
    """Keep a failing ``torch.export`` quiet: it prints the graph it had so far to stderr, and
    ``symbolic_shapes`` logs a line with a timestamp. The exception itself still propagates."""
    log = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        log.setLevel(level)


@contextlib.contextmanager
def _silent() -> Iterator[None]:
    """For the checks' own reference traces: no warning of theirs may reach the learner's notebook."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# --- the models ---------------------------------------------------------------------------------

class Gate(nn.Module):
    """A linear layer, then a decision on the data: ``relu(h) * 2`` if ``h`` sums positive, else ``sigmoid(h)``."""

    def __init__(self, features: int = 4) -> None:
        super().__init__()
        self.fc = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if h.sum() > 0:
            return torch.relu(h) * 2
        return torch.sigmoid(h)


class Running(nn.Module):
    """A recurrence over the rows of ``x``: ``h = tanh(inp(x[t]) + rec(h))``, halved when it sums positive."""

    def __init__(self, features: int = 3, hidden: int = 4) -> None:
        super().__init__()
        self.hidden = hidden
        self.inp = nn.Linear(features, hidden)
        self.rec = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(self.hidden, device=x.device)
        for t in range(x.size(0)):
            h = torch.tanh(self.inp(x[t]) + self.rec(h))
            if h.sum() > 0:
                h = h * 0.5
        return h


class Backbone(nn.Module):
    """Linear + tanh layers applied in the order of a list of names.

    Indexing an ``nn.ModuleDict`` with a variable is fine in Python and under tracing, but
    ``torch.jit.script`` refuses it (only string literals may index a ModuleDict).
    """

    def __init__(self, features: int = 6, hidden: int = 8) -> None:
        super().__init__()
        self.layers = nn.ModuleDict({"inp": nn.Linear(features, hidden), "out": nn.Linear(hidden, features)})
        self.order = ["inp", "out"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name in self.order:
            x = torch.tanh(self.layers[name](x))
        return x


class Screen(nn.Module):
    """A backbone, then a data-dependent branch, then a linear head.

    A batch whose features are large on average (``h.abs().mean() > threshold``) is damped
    row by row; any other batch is doubled.
    """

    def __init__(self, features: int = 6, threshold: float = 0.3) -> None:
        super().__init__()
        self.backbone = Backbone(features)
        self.head = nn.Linear(features, 3)
        self.threshold = threshold

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.backbone(x)
        if h.abs().mean() > self.threshold:
            h = h / (h.abs().sum(dim=-1, keepdim=True) + 1)
        else:
            h = h * 2
        return self.head(h)


class Smoother(nn.Module):
    """A gated running average over the rows (time steps) of ``x``: one output row per input row.

    Not scriptable as written: ``state`` starts as ``None`` and becomes a tensor, and TorchScript
    gives every variable one static type.
    """

    def __init__(self, features: int = 4) -> None:
        super().__init__()
        self.mix = nn.Linear(2 * features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        state = None
        outs = []
        for t in range(x.shape[0]):
            if state is None:
                state = x[t]
            else:
                gate = torch.sigmoid(self.mix(torch.cat([x[t], state])))
                state = gate * x[t] + (1 - gate) * state
            outs.append(state)
        return torch.stack(outs)


def screen_takes_damped_branch(model: Screen, x: torch.Tensor) -> bool:
    """Which way eager ``model`` goes on ``x``: True for the damping branch, False for doubling."""
    with torch.no_grad():
        return bool(model.backbone(x).abs().mean() > model.threshold)


def screen_inputs(model: Screen, batch: int, seed: int = 0, device: str = "cpu") -> dict[bool, torch.Tensor]:
    """One input per branch of ``model`` ({True: damped, False: doubled}), found by scaling a random batch."""
    found: dict[bool, torch.Tensor] = {}
    for attempt in range(10):
        base = randn(batch, model.head.in_features, seed=seed + 1000 * attempt, device=device)
        for scale in (0.01, 0.1, 1.0, 3.0, 10.0, 30.0):
            x = base * scale
            found.setdefault(screen_takes_damped_branch(model, x), x)
        if len(found) == 2:
            break
    if len(found) != 2:
        raise RuntimeError("no input takes both branches of this Screen; choose another seed or threshold")
    return found


def seeded(cls: type[nn.Module], seed: int = 0, device: str = "cpu", **kwargs: Any) -> nn.Module:
    torch.manual_seed(seed)
    return cls(**kwargs).to(device).eval()


# --- graph helpers (the checks' own reference) ---------------------------------------------------

def _graph_of(obj: Any) -> torch._C.Graph:
    if isinstance(obj, torch._C.Graph):
        return obj
    return obj.inlined_graph


def _all_nodes(block: Any) -> Iterator[Any]:
    for node in block.nodes():
        yield node
        for inner in node.blocks():
            yield from _all_nodes(inner)


def _kinds_of(obj: Any) -> Counter:
    """Every node kind of ``obj``'s inlined graph, blocks included, without ``prim::Constant``."""
    return Counter(n.kind() for n in _all_nodes(_graph_of(obj)) if n.kind() != "prim::Constant")


def _top_level_kinds(obj: Any) -> Counter:
    return Counter(n.kind() for n in _graph_of(obj).nodes() if n.kind() != "prim::Constant")


# --- 1. count node kinds -------------------------------------------------------------------------

class _Nested(nn.Module):
    """A loop over a ModuleList-free stack of linear calls, an if inside the loop, an if after it."""

    def __init__(self) -> None:
        super().__init__()
        self.step = nn.Linear(5, 5)
        self.out = nn.Linear(5, 2)

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            x = self.step(x)
            if x.mean() > 0:
                x = torch.relu(x)
            else:
                x = x.abs() - 1
        if bool(x.max() > 1):
            x = x / x.max()
        return self.out(x).softmax(dim=-1)


def _clip(x: torch.Tensor, limit: float) -> torch.Tensor:
    while bool(x.abs().max() > limit):
        x = x * 0.5
    return x


def _checked_sqrt(x: torch.Tensor) -> torch.Tensor:
    if bool(x.min() < 0):
        raise ValueError("negative input")
    return x.sqrt()


def _kinds_ok(got: Any, expected: Counter) -> tuple[bool, str]:
    if not isinstance(got, dict):
        return False, f"expected a dict, got {type(got).__name__}" + (
            " (did you forget to `return`?)" if got is None else "")
    got = {k: v for k, v in got.items() if v}
    want = dict(expected)
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    wrong = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    parts = []
    if missing:
        parts.append(f"missing {missing}")
    if extra:
        parts.append(f"should not be there: {extra}")
    if wrong:
        parts.append("; ".join(f"{k}: {got[k]} instead of {want[k]}" for k in wrong))
    return (not parts), "; ".join(parts)


@exercise("ch2.graph_ops", "Count the nodes of a TorchScript graph by kind, blocks included", names=["graph_ops"],
          timeout=30)
def _graph_ops(t: Tester, graph_ops) -> None:
    from .. import models

    hint = ("walk module.inlined_graph.nodes(); for each node also walk node.blocks() (each block has .nodes()), "
            "recursively; count node.kind(), skipping prim::Constant")
    with _silent():
        x_npu = randn(2, 4, seed=1, device="npu")
        gate_npu = seeded(Gate, device="npu")
        cases = [
            ("torch.jit.script(Gate())", torch.jit.script(seeded(Gate)), False),
            ("torch.jit.trace(Gate() on npu, x)", torch.jit.trace(gate_npu, (x_npu,), check_trace=False), False),
            ("torch.jit.script(Running())  (a loop with an if inside)", torch.jit.script(seeded(Running)), False),
            ("a scripted function with a while loop", torch.jit.script(_clip), False),
            ("torch.jit.script(models.mlp())", torch.jit.script(seeded(models.mlp)), True),
            ("a scripted module: a loop with an if/else inside, an if after it", torch.jit.script(seeded(_Nested)),
             True),
            ("torch.jit.trace(models.SmallCNN() on npu)",
             torch.jit.trace(seeded(models.SmallCNN, device="npu"), (randn(1, 3, 32, 32, device="npu"),),
                             check_trace=False), True),
            ("a scripted function that raises on a negative input", torch.jit.script(_checked_sqrt), True),
        ]
    hidden_hints = {
        "torch.jit.script(models.mlp())": "a scripted nn.Sequential: read module.inlined_graph (the submodules' "
                                          "calls are inlined there), not module.graph, and leave out prim::Constant",
        "a scripted module: a loop with an if/else inside, an if after it":
            "blocks inside blocks: a prim::If inside a prim::Loop has blocks of its own; recurse into node.blocks() "
            "of every node at every depth",
        "torch.jit.trace(models.SmallCNN() on npu)": "a traced module: no blocks, but many submodules; count the "
                                                     "inlined graph's nodes by kind (prim::Constant left out)",
        "a scripted function that raises on a negative input":
            "some nodes have no output at all (the prim::If whose branch raises, prim::RaiseException): they are "
            "nodes too, count them by kind like the others",
    }
    for desc, module, hidden in cases:
        expected = _kinds_of(module)
        nested = sum(expected.values()) - sum(_top_level_kinds(module).values())
        case_hint = hint if not hidden else hidden_hints[desc]
        if nested:
            case_hint += f" (this graph has {nested} node(s) inside blocks)"
        t.case(f"graph_ops({desc})", lambda m=module: graph_ops(m), expected=dict(sorted(expected.items())),
               hidden=hidden, hint=case_hint, check=lambda got, e=expected: _kinds_ok(got, e))


# --- 2. fix a trace that froze a branch ------------------------------------------------------------

def fingerprint(model: nn.Module) -> tuple:
    """What a module is made of: its submodules' classes, its tensors (values, devices) and its plain settings."""
    structure = tuple((name, type(sub)) for name, sub in model.named_modules())
    tensors = tuple((name, t.device.type, t.dtype, t.detach().cpu().clone())
                    for name, t in list(model.named_parameters()) + list(model.named_buffers()))
    settings = tuple((name, k, v) for name, sub in model.named_modules() for k, v in sorted(vars(sub).items())
                     if not k.startswith("_") and type(v) in (int, float, str, bool))
    return structure, tensors, settings


def unchanged(before: tuple, after: tuple) -> bool:
    """Whether two :func:`fingerprint` results are the same."""
    if before[0] != after[0] or before[2] != after[2] or len(before[1]) != len(after[1]):
        return False
    return all(a[:3] == b[:3] and a[3].shape == b[3].shape and torch.equal(a[3], b[3])
               for a, b in zip(before[1], after[1]))


#: The methods of the given classes, as the exercise gives them ("do not change Screen or Backbone").
_GIVEN_METHODS = {(cls, name): getattr(cls, name) for cls in (Screen, Backbone) for name in ("forward", "__init__")}


def _changed_classes() -> list[str]:
    """The given classes' methods that were replaced since import (each is put back as it was)."""
    changed = []
    for (cls, name), method in _GIVEN_METHODS.items():
        if cls.__dict__.get(name) is not method:
            changed.append(f"{cls.__name__}.{name}")
            setattr(cls, name, method)
    return changed


def _deploy_logged(deploy: Any, model: nn.Module, example: torch.Tensor) -> tuple[Any, list[str], bool, list[str]]:
    before = fingerprint(model)
    with record_warnings() as log:
        deployed = deploy(model, example)
    tracer = [f"{w.message[:70]}... at `{w.source}`" if w.source else w.message[:90]
              for w in log.unique() if w.category == "TracerWarning"]
    return deployed, tracer, unchanged(before, fingerprint(model)), _changed_classes()


def _is_script(obj: Any) -> bool:
    return issubclass(type(obj), (torch.jit.ScriptModule, torch.jit.ScriptFunction))  # type(): no __class__ tricks


@exercise("ch2.fix_trace", "Deploy a branching model as TorchScript that keeps its branch", names=["deploy"],
          timeout=60)
def _fix_trace(t: Tester, deploy) -> None:
    cases = [  # (description, seed, features, threshold, example batch, example branch, hidden)
        ("Screen(), example takes the doubling branch", 0, 6, 0.3, 4, False, False),
        ("Screen(), example takes the damping branch", 0, 6, 0.3, 4, True, False),
        ("Screen(features=5, threshold=0.25), other weights", 3, 5, 0.25, 3, False, True),
        ("Screen(threshold=0.25), other weights, example damped", 7, 6, 0.25, 2, True, True),
        ("Screen(features=4), an example of one row", 11, 4, 0.3, 1, False, True),
    ]
    for desc, seed, features, threshold, batch, example_branch, hidden in cases:
        about = (f"(here a Screen with other weights, features={features}, threshold={threshold}: deploy the model "
                 "you are given, with its own backbone, head and threshold) ") if hidden else ""
        model = seeded(Screen, seed, "npu", features=features, threshold=threshold)
        example = screen_inputs(model, batch, seed=seed, device="npu")[example_branch]
        probes = []
        for b in (batch, 1, 7):
            for branch, x in screen_inputs(model, b, seed=seed + 10 + b, device="npu").items():
                with torch.no_grad():
                    probes.append((b, branch, x, model(x)))
        outcome = t.call(_deploy_logged, deploy, model, example)
        if not outcome.ok:
            t.error(f"deploy({desc})", outcome, hidden=hidden,
                    hint="torch.jit.script(model) fails on the backbone's ModuleDict; trace the backbone "
                         "(it has no control flow), then script the model around it")
            continue
        deployed, tracer, kept, classes = outcome.value
        t.expect(f"deploy({desc}) leaves the model it was given unchanged", kept, hidden=hidden,
                 expected="the same submodules, weights and settings", got="unchanged" if kept else "changed",
                 hint="deploy the model you are given without changing it: work on a copy (copy.deepcopy(model)) "
                      "before replacing its backbone with a traced one")
        t.expect(f"deploy({desc}) leaves the classes Screen and Backbone as they are", not classes, hidden=hidden,
                 expected="their methods unchanged", got="replaced: " + ", ".join(classes) if classes else "unchanged",
                 hint="do not rewrite Screen or Backbone (every other Screen in the program would change too): "
                      "trace the backbone, which has no control flow, and script the model around it")
        if not _is_script(deployed):
            t.expect(f"deploy({desc}) returns TorchScript", False, hidden=hidden,
                     expected="a torch.jit.ScriptModule", got=short(deployed),
                     hint="return the result of torch.jit.script (or torch.jit.trace), not the eager model")
            continue
        kinds = _kinds_of(deployed)
        t.expect(f"{desc}: no TracerWarning while deploying", not tracer, hidden=hidden,
                 expected="no TracerWarning", got="; ".join(tracer)[:300] or "none",
                 hint="a TracerWarning means the trace turned a tensor into a Python value - here the branch "
                      "condition; trace only code without data-dependent control flow")
        t.expect(f"{desc}: the branch is in the graph (prim::If)", kinds.get("prim::If", 0) >= 1, hidden=hidden,
                 expected="a prim::If node in deployed.inlined_graph",
                 got=f"{kinds.get('prim::If', 0)} prim::If node(s)",
                 hint="only torch.jit.script turns a Python `if` into prim::If; tracing keeps the branch it saw")
        t.expect(f"{desc}: runs without Python (no prim::PythonOp)", "prim::PythonOp" not in kinds, hidden=hidden,
                 expected="no prim::PythonOp", got=f"{kinds.get('prim::PythonOp', 0)} prim::PythonOp node(s)",
                 hint="@torch.jit.ignore leaves a call back into Python in the graph: such a module cannot be "
                      "saved or run from C++")
        for b, branch, x, want in probes:
            which = "damping" if branch else "doubling"
            t.case(f"{desc}: batch of {b} taking the {which} branch, on npu", lambda x, m=deployed: m(x), x,
                   expected=want, hidden=hidden, atol=1e-5,
                   hint=about + "compare with the eager model on both branches and on batch sizes other than the "
                                "example's")


# --- 3. script a loop, save, load -----------------------------------------------------------------

#: Run in a fresh Python process that imports only torch (as a CPU server would): load the archive with a plain
#: ``torch.jit.load(path)`` and run it on each input; the results (or what failed) go to a file.
_PLAIN_PROBE = """
import sys
import torch
archive, inputs, outputs = sys.argv[1:4]
try:
    module = torch.jit.load(archive)
except Exception as err:
    results = f"torch.jit.load(path) failed: {type(err).__name__}: {str(err).strip().splitlines()[0][:160]}"
else:
    results = []
    for x in torch.load(inputs):
        try:
            with torch.no_grad():
                results.append(module(x))
        except Exception as err:
            results.append(f"{type(err).__name__}: {str(err).strip().splitlines()[0][:160]}")
torch.save(results, outputs)
"""


def _in_a_plain_process(archive: str, inputs: list[torch.Tensor], timeout: float = 90.0) -> list | str:
    """Load ``archive`` in a new Python process that has only ``torch`` (no npu_lab, no npu device) and run it on
    ``inputs`` (CPU tensors): the outputs, or a sentence saying what failed."""
    import subprocess
    import sys

    with tempfile.TemporaryDirectory() as folder:
        given, got = os.path.join(folder, "inputs.pt"), os.path.join(folder, "outputs.pt")
        torch.save([x.cpu() for x in inputs], given)
        env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}  # no device package may load itself
        try:
            run = subprocess.run([sys.executable, "-W", "ignore", "-c", _PLAIN_PROBE, archive, given, got],
                                 capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return f"the archive did not finish within {timeout:.0f} s in a plain process"
        if not os.path.exists(got):
            lines = run.stderr.strip().splitlines()
            return "the plain process failed: " + (lines[-1][:200] if lines else f"exit code {run.returncode}")
        return torch.load(got, weights_only=True)


def _save(save_smoother: Any, model: nn.Module, path: str) -> tuple[str, Any, bool]:
    """The learner's save_smoother writes to ``path``; then this process loads it as torch.jit.load(path) would."""
    before = fingerprint(model)
    save_smoother(model, path)
    kept = unchanged(before, fingerprint(model))
    if not os.path.exists(path):
        return "nothing was written to the path", None, kept
    try:
        with quiet_jit():
            loaded = torch.jit.load(path)
    except Exception as e:  # noqa: BLE001 - the message is the result
        return f"torch.jit.load failed: {str(e).splitlines()[0][:150]}", None, kept
    return "", loaded, kept


@exercise("ch2.script_loop", "Script a model that loops over its input, save it for a CPU server",
          names=["save_smoother"], timeout=120)
def _script_loop(t: Tester, save_smoother) -> None:
    cases = [("Smoother() on npu", 0, 4, (1, 3, 6), False),
             ("Smoother(features=3) on npu, other weights", 5, 3, (2, 9, 12), True)]
    with tempfile.TemporaryDirectory() as folder:
        for k, (desc, seed, features, lengths, hidden) in enumerate(cases):
            about = ("(here Smoother(features=3) with other weights: build the typed module with the model's own "
                     "feature count, model.mix.in_features // 2, and copy its weights) ") if hidden else ""
            model = seeded(Smoother, seed, "npu", features=features)
            probes = []
            for n in lengths:
                x = randn(n, features, seed=seed + n, device="npu")
                with torch.no_grad():
                    probes.append((n, x.cpu(), model(x).cpu()))
            path = os.path.join(folder, f"smoother_{k}.pt")
            outcome = t.call(_save, save_smoother, model, path)
            if not outcome.ok:
                t.error(f"save_smoother({desc}, path)", outcome, hidden=hidden,
                        hint="script a version of the model TorchScript can type (Optional[Tensor] state), copy the "
                             "weights into a CPU copy, torch.jit.save it to `path`")
                continue
            problem, loaded, kept = outcome.value
            t.expect(f"save_smoother({desc}, path) leaves the model it was given unchanged", kept, hidden=hidden,
                     expected="the model still on npu, with its weights", got="unchanged" if kept else "changed",
                     hint="model.cpu() and model.to(...) move the caller's model in place: copy the weights into a "
                          "module of your own (load_state_dict) or work on copy.deepcopy(model)")
            if loaded is None:
                t.expect(f"{desc}: torch.jit.load(path) gives a module", False, hidden=hidden,
                         expected="a TorchScript archive at `path`", got=problem,
                         hint="script the typed model (weights copied with load_state_dict) and torch.jit.save it "
                              "to exactly the `path` you were given")
                continue
            kinds = _kinds_of(loaded)
            t.expect(f"{desc}: the loop is in the saved graph (prim::Loop)", kinds.get("prim::Loop", 0) >= 1,
                     hidden=hidden, expected="a prim::Loop node",
                     got=f"{kinds.get('prim::Loop', 0)} prim::Loop node(s)",
                     hint="torch.jit.trace unrolls the loop for the example's length (no warning!); script it")
            t.expect(f"{desc}: runs without Python (no prim::PythonOp)", "prim::PythonOp" not in kinds,
                     hidden=hidden, expected="no prim::PythonOp",
                     got=f"{kinds.get('prim::PythonOp', 0)} prim::PythonOp node(s)",
                     hint="do not @torch.jit.ignore the forward: write it in TorchScript's typed subset instead")
            served = _in_a_plain_process(path, [x for _, x, _ in probes])
            if isinstance(served, str) or len(served) != len(probes):
                t.expect(f"{desc}: a CPU server (a Python process with only torch) loads the archive", False,
                         hidden=hidden, expected="torch.jit.load(path) gives a module there",
                         got=served if isinstance(served, str) else f"{len(served)} results",
                         hint="an archive records the device of every weight, and a process without npu_lab "
                              "does not know the device npu (not even with map_location): save a module whose "
                              "weights are on the CPU")
                continue
            for (n, _, want), got in zip(probes, served):
                t.case(f"{desc}: on the CPU server, a sequence of length {n}", lambda g=got: g, expected=want,
                       hidden=hidden, atol=1e-5,
                       hint=about + "the saved module must compute what model(x) computes: same weights "
                                    "(load_state_dict), same gate formula, one output row per input row")


# --- 4. torch.export with torch.cond ----------------------------------------------------------------

def _export_and_round_trip(export_screen: Any, model: nn.Module,
                           example: torch.Tensor) -> tuple[Any, Any, str, bool]:
    before = fingerprint(model)
    with quiet_export():
        program = export_screen(model, example)
    kept = unchanged(before, fingerprint(model))
    if type(program) is not torch.export.ExportedProgram:
        return program, None, "", kept
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = os.path.join(folder, "screen.pt2")
        torch.export.save(program, path)
        loaded = torch.export.load(path)
    note = "; ".join(sorted({str(w.message).splitlines()[0][:100] for w in caught if "tensor" in str(w.message)}))
    return program, loaded, note, kept


def _conds(program: torch.export.ExportedProgram) -> int:
    return sum(1 for n in program.graph.nodes if n.op == "call_function" and n.target is torch.ops.higher_order.cond)


def _dynamic_batch(program: torch.export.ExportedProgram) -> bool:
    users = [s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in users:
            val = node.meta.get("val")
            return isinstance(val, torch.Tensor) and isinstance(val.shape[0], torch.SymInt)
    return False


@exercise("ch2.export_cond", "Replace the TorchScript deployment: torch.export with torch.cond",
          names=["export_screen"], timeout=120)
def _export_cond(t: Tester, export_screen) -> None:
    cases = [("Screen(), example doubled", 0, 6, 0.3, 4, False, False),
             ("Screen(features=5, threshold=0.25), example damped", 3, 5, 0.25, 3, True, True)]
    for desc, seed, features, threshold, batch, example_branch, hidden in cases:
        about = (f"(here Screen(features={features}, threshold={threshold}) with other weights, exported from an "
                 "example on the damping branch: use the model's own submodules and threshold in torch.cond) "
                 ) if hidden else ""
        model = seeded(Screen, seed, "npu", features=features, threshold=threshold)
        example = screen_inputs(model, batch, seed=seed, device="npu")[example_branch]
        probes = []
        for b in (1, batch, 7):
            for branch, x in screen_inputs(model, b, seed=seed + 20 + b, device="npu").items():
                with torch.no_grad():
                    probes.append((b, branch, x, model(x)))
        outcome = t.call(_export_and_round_trip, export_screen, model, example)
        if not outcome.ok:
            t.error(f"export_screen({desc})", outcome, hidden=hidden,
                    hint="torch.export.export refuses the Python `if` on a tensor: write the branch with "
                         "torch.cond(pred, true_fn, false_fn, (h,)) in a module of your own")
            continue
        program, loaded, note, kept = outcome.value
        t.expect(f"export_screen({desc}) leaves the model it was given unchanged", kept, hidden=True,
                 expected="the model still on npu, with its weights", got="unchanged" if kept else "changed",
                 hint="export_screen moved or changed the caller's model (model.cpu() moves it in place): export "
                      "a copy (copy.deepcopy(model).cpu()) or the model as it is, on npu")
        if type(program) is not torch.export.ExportedProgram:
            t.expect(f"export_screen({desc}) returns an ExportedProgram", False, hidden=hidden,
                     expected="torch.export.ExportedProgram", got=short(program),
                     hint="return what torch.export.export(...) returns (not .module())")
            continue
        t.expect(f"{desc}: the branch is a torch.cond in the exported graph", _conds(program) >= 1, hidden=hidden,
                 expected="a torch.ops.higher_order.cond node", got=f"{_conds(program)} cond node(s)",
                 hint="torch.where computes both sides; torch.cond keeps the two branches as subgraphs")
        t.expect(f"{desc}: the batch dimension is dynamic", _dynamic_batch(program), hidden=hidden,
                 expected="x's first dimension is a symbol (e.g. s0)", got="dynamic" if _dynamic_batch(program)
                 else "specialised to the example's batch size",
                 hint="pass dynamic_shapes={'x': {0: torch.export.Dim('batch')}} to torch.export.export")
        with _silent():
            # .module() shares the program's weights and .to() moves them in place (as on CUDA): copy first;
            # the program may have been exported on npu or on the CPU
            cpu_run, npu_run = copy.deepcopy(loaded.module()).to("cpu"), copy.deepcopy(loaded.module()).to("npu")
        for b, branch, x, want in probes:
            which = "damping" if branch else "doubling"
            extra = f" (while saving: {note})" if note else ""
            t.case(f"{desc}: saved and loaded, batch of {b} taking the {which} branch, on cpu",
                   lambda x, m=cpu_run: m(x), x.cpu(), expected=want.cpu(), hidden=hidden, atol=1e-5,
                   hint=about + "the saved program must compute what the model computes on both branches: same "
                                "weights, same formulas inside torch.cond" + extra)
            t.case(f"{desc}: saved, loaded, moved to npu, batch of {b}, {which} branch", lambda x, m=npu_run: m(x), x,
                   expected=want, hidden=hidden, atol=1e-5,
                   hint="the loaded program's .module() is an nn.Module: .to('npu') moves its weights")
