"""Chapter 4: lazy tensors - record operators, run them at a sync point, compile once per structure.

Four exercises:

* ``ch4.count_graphs`` - predict how many graphs lazy mode executes for each of a few snippets
  (:data:`SNIPPETS`), measured with ``npu_lab.lazy.metrics``;
* ``ch4.remove_sync`` - rewrite a gradient-clipping training step with two hidden sync points
  (:func:`clipped_step_with_syncs`) so that each step is one graph, with the same numbers;
* ``ch4.reuse_cache`` - rewrite an SGD step (:func:`sgd_step`) whose learning rate changes every
  step and whose batches have different sizes, so that the loop compiles exactly once;
* ``ch4.step_closures`` - build step closures (PyTorch/XLA's ``add_step_closure``): callbacks that
  receive values of a step once its graph has run, so logging costs no sync point.

The given code, the data loader and the loop the checks run (:func:`lazy_loop`) live here, so that
the notebook shows and runs exactly what the checks measure.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from .. import compiler, lazy, models
from ..grading.inputs import randn
from ..grading.predictions import question
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester, short
from ..grading.values import check_plain, tensors_close

chapter("ch4", "Lazy tensors: record now, run at a sync point", [
    "In lazy mode an npu operator is recorded as a graph node instead of run; it returns a LazyTensor "
    "that knows its shape and dtype but holds no data",
    "The graph runs at a sync point: mark_step, .item(), .cpu(), printing, a Python if on a tensor, "
    "an operator whose output shape depends on the data",
    "Shapes, dtypes and views need no sync: they are known while recording",
    "Every lazy tensor still alive at a sync point becomes an output of the graph",
    "Compiled graphs are cached by structure and input shapes: a training loop compiles at step 1 "
    "and reuses the graph afterwards",
    "An early sync splits a step into more graphs: more compiles, device-to-host copies, lost fusion",
    "A Python number that changes every step, or a changing shape, is baked into the graph and forces "
    "a new compile: pass numbers as tensors, pad batches to one shape",
    "PyTorch/XLA works the same way: mark_step, an IR graph hashed into a compile cache, a metrics report",
])


question("ch4.fused_launches",
         "(x * 2).relu() + 1 recorded in lazy mode: how many kernels launch when y.cpu() runs the recorded graph "
         "(eager mode runs three)?",
         why="at the sync the whole recorded graph goes to the NPU compiler, which fuses the three elementwise "
             "operators into one generated kernel: 1 launch")
question("ch4.print_sync",
         "Lazy mode records x.sin() * 2, prints y[0], records y.exp() and calls mark_step(): how many graphs run?",
         why="printing needs the values, so it runs the graph recorded so far; mark_step runs the rest: 2 graphs")
question("ch4.float_constant",
         "Four lazy steps of (x * s).relu() with s = 0.5 * 0.9**step as a Python float, from an empty compile cache: "
         "how many graphs are compiled?",
         why="a Python number is a constant in the recorded graph's code, which is part of the cache key: each new "
             "value is a new graph, 4 compiles (a 0-dim tensor is an input instead: 1 compile)")
question("ch4.shapes",
         "row_sums on CPU batches of 8, 8, 5, 8, 3 and 7 rows in lazy mode, one mark_step each: how many graphs are "
         "compiled?",
         why="input shapes are part of the cache key: one graph per distinct number of rows (8, 5, 3, 7), 4 compiles; "
             "padding every batch to 8 rows makes it 1")


# ---------------------------------------------------------------------------------------------
# measuring lazy mode (shared with the notebooks)
# ---------------------------------------------------------------------------------------------

def _counters() -> tuple[int, int, Counter]:
    m = lazy.metrics
    return m.graphs_executed, m.graphs_built, Counter(m.sync_points)


def _since(before: tuple[int, int, Counter]) -> tuple[int, int, dict[str, int]]:
    executed, built, syncs = _counters()
    diff = {k: v - before[2].get(k, 0) for k, v in syncs.items() if v - before[2].get(k, 0)}
    return executed - before[0], built - before[1], dict(sorted(diff.items()))


@dataclass
class LoopReport:
    """What :func:`lazy_loop` measured, one entry per step.

    Attributes:
        losses: the loss of each step (read after its ``mark_step``).
        graphs: graphs executed during each step (its ``mark_step`` included).
        built: graphs compiled during each step (the others came from the compile cache).
        syncs: the sync points of each step and their reasons.
        params: the model's parameters after the last step (on the CPU).
    """

    losses: list[float] = field(default_factory=list)
    graphs: list[int] = field(default_factory=list)
    built: list[int] = field(default_factory=list)
    syncs: list[dict[str, int]] = field(default_factory=list)
    params: list[torch.Tensor] = field(default_factory=list)

    @property
    def sync_points(self) -> dict[str, int]:
        """Sync reasons over the whole loop."""
        total: Counter = Counter()
        for s in self.syncs:
            total.update(s)
        return dict(sorted(total.items()))

    def summary(self) -> str:
        lines = []
        for i, (loss, g, b, s) in enumerate(zip(self.losses, self.graphs, self.built, self.syncs)):
            reasons = ", ".join(f"{k} x{v}" for k, v in s.items()) or "none"
            lines.append(f"step {i + 1}: loss {loss:.4f}  graphs executed {g}, compiled {b}  syncs: {reasons}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()


def _as_float(loss: Any) -> float:
    # exact types only: a tensor subclass of the learner's could answer .item() with anything
    if type(loss) in (torch.Tensor, lazy.LazyTensor) and loss.numel() == 1:
        value = loss.item()
        if type(value) in (int, float):
            return float(value)
    if type(loss) in (int, float):
        return float(loss)
    raise TypeError(f"the step must return the loss (a tensor of one value), got {type(loss).__name__}")


def lazy_loop(step: Callable[..., Any], model: nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
              lrs: Sequence[float], fresh_cache: bool = True, **kwargs: Any) -> LoopReport:
    """Run ``step(model, x, y, lr, **kwargs)`` once per batch inside ``npu_lab.lazy.mode()``.

    After each call the loop calls ``npu_lab.lazy.mark_step()`` and then reads the returned loss
    with ``.item()`` (after the step's graph ran, so that read needs no graph of its own). With
    ``fresh_cache`` (the default) the NPU compiler's cache is emptied first, so ``built`` counts
    every compile of this loop. This is the loop the checks of ``ch4.remove_sync`` and
    ``ch4.reuse_cache`` run.
    """
    if fresh_cache:
        compiler.reset()
    report = LoopReport()
    with lazy.mode():
        for (x, y), lr in zip(batches, lrs):
            before = _counters()
            loss = step(model, x, y, lr, **kwargs)
            lazy.mark_step()
            report.losses.append(_as_float(loss))
            graphs, built, syncs = _since(before)
            report.graphs.append(graphs)
            report.built.append(built)
            report.syncs.append(syncs)
    report.params = [p.detach().cpu().clone() for p in model.parameters()]
    return report


def eager_loop(step: Callable[..., Any], model: nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
               lrs: Sequence[float], **kwargs: Any) -> tuple[list[float], list[torch.Tensor]]:
    """The same loop without lazy mode: (losses, parameters after the last step on the CPU)."""
    losses = [_as_float(step(model, x, y, lr, **kwargs)) for (x, y), lr in zip(batches, lrs)]
    return losses, [p.detach().cpu().clone() for p in model.parameters()]


# ---------------------------------------------------------------------------------------------
# ch4.count_graphs
# ---------------------------------------------------------------------------------------------

def chain(x):
    return ((x * 2).relu() + 1).sigmoid()


def item_in_the_middle(x):
    s = x.sum().item()
    return x * s


def python_if(x):
    y = x * 2
    if y.mean() > 0:
        y = y.relu()
    return y + 1


def shapes_only(x):
    y = x.exp()
    rows, cols = y.shape
    return y / (rows * cols) + len(y)


def format_then_mark_step(x):
    y = x.exp()
    text = f"{y}"  # noqa: F841 - formatting is the point
    z = y + 1
    lazy.mark_step()
    return z * 2


def boolean_mask(x):
    y = x * 2
    return y[y > 0].sum()


def where_instead_of_if(x):
    y = x * 2
    return torch.where(y.mean() > 0, y.relu(), y) + 1


def loop_with_mark_step(x):
    for _ in range(3):
        x = x * 2
        lazy.mark_step()
    return x


def round_trip_through_cpu(x):
    y = (x + 1).cpu()
    return y.to("npu") * 2


#: name -> snippet; each runs as ``with npu_lab.lazy.mode(): out = snippet(x)`` on an npu x of (4, 4).
SNIPPETS: dict[str, Callable[[torch.Tensor], Any]] = {f.__name__: f for f in (
    chain, item_in_the_middle, python_if, shapes_only, format_then_mark_step,
    boolean_mask, where_instead_of_if, loop_with_mark_step, round_trip_through_cpu)}
HIDDEN_SNIPPETS = {"boolean_mask", "where_instead_of_if", "loop_with_mark_step", "round_trip_through_cpu"}


def _measure_snippet(name: str) -> tuple[int, dict[str, int]]:
    """(graphs executed, sync reasons) when ``SNIPPETS[name]`` runs in lazy mode, leaving the mode included."""
    x = randn(4, 4, seed=4).to("npu")
    before = _counters()
    with lazy.mode():
        out = SNIPPETS[name](x)  # noqa: F841 - kept alive until the mode ends, like a result you use
    graphs, _, syncs = _since(before)
    return graphs, syncs


_SNIPPET_HINTS = {
    "chain": "nothing reads a value inside the block: everything runs in one graph when the mode ends",
    "item_in_the_middle": ".item() needs the sum now (one graph); x * s is recorded after it and runs at the end",
    "python_if": "`if tensor:` calls bool(), which needs the value (an item() sync); the rest runs at the end",
    "shapes_only": "shapes (and len) are known while recording, from the fake tensors: no sync",
    "format_then_mark_step": "formatting a lazy tensor prints its values (a sync), mark_step is another, leaving "
                             "the mode a third",
    "boolean_mask": "y[y > 0] has a size that depends on the data: the graph must run before it",
    "where_instead_of_if": "torch.where keeps the decision on the device: no sync",
    "loop_with_mark_step": "each mark_step runs what was recorded since the last one; nothing is left at the end",
    "round_trip_through_cpu": ".cpu() is a sync; the CPU tensor then enters the next graph as an input",
}


@exercise("ch4.count_graphs", "How many graphs does lazy mode run?", names=["graphs"], timeout=60)
def _count_graphs(t: Tester, graphs) -> None:
    ok, plain_graphs, why = check_plain(graphs)
    if not ok:
        t.expect("graphs is plain data: a dict of ints", False, expected="dict", got=why,
                 hint="write graphs = {'chain': 1, ...} with plain ints")
        return
    graphs = plain_graphs
    if not isinstance(graphs, dict):
        t.expect("graphs is a dict: snippet name -> number of graphs executed", False, expected="dict",
                 got=short(graphs), hint="write graphs = {'chain': ..., 'item_in_the_middle': ..., ...}")
        return
    for name in SNIPPETS:
        hidden = name in HIDDEN_SNIPPETS
        executed, syncs = _measure_snippet(name)
        answer = graphs.get(name)
        if type(answer) is not int:
            t.expect(f"graphs[{name!r}]", False, hidden=hidden, expected="an int",
                     got="missing" if name not in graphs else short(answer),
                     hint=f"answer {name!r} with the number of graphs executed (an int)")
            continue
        reasons = ", ".join(f"{k} x{v}" for k, v in syncs.items())
        t.expect(f"graphs[{name!r}]", answer == executed, hidden=hidden,
                 expected=f"{executed} (sync points: {reasons})", got=repr(answer), hint=_SNIPPET_HINTS[name])


# ---------------------------------------------------------------------------------------------
# ch4.remove_sync
# ---------------------------------------------------------------------------------------------

#: Where the given step logs its losses (as a training dashboard would read them).
LOSS_LOG: deque = deque(maxlen=1000)


def clipped_step_with_syncs(model: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float,
                            max_norm: float) -> torch.Tensor:
    """One SGD step with gradient-norm clipping. It works, and it hides two sync points."""
    model.zero_grad()
    loss = F.cross_entropy(model(x), y)
    LOSS_LOG.append(loss.item())  # log the loss
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    norm = torch.stack([(g * g).sum() for g in grads]).sum().sqrt()
    if norm > max_norm:  # clip: scale all gradients so that their norm is max_norm
        for g in grads:
            g.mul_(max_norm / norm)
    with torch.no_grad():
        for p in model.parameters():
            p.sub_(lr * p.grad)
    return loss


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return models.mlp()


def _norm_tanh() -> nn.Module:
    torch.manual_seed(2)
    return nn.Sequential(nn.Linear(10, 16), nn.LayerNorm(16), nn.Tanh(), nn.Linear(16, 5))


def clip_batches(steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The fixed npu batches of ``ch4.remove_sync`` (8 rows of 10 features, 5 classes; one seed per step)."""
    return [models.example_batch(_mlp(), 8, "npu", seed=i) for i in range(steps)]


CLIP_LR = 0.5
#: (description, model factory, max_norm, steps, hidden)
CLIP_CASES = [
    ("models.mlp(), max_norm=0.25: every step clips", _mlp, 0.25, 4, False),
    ("models.mlp(), max_norm=10: no step clips", _mlp, 10.0, 3, False),
    ("models.mlp(), max_norm=0.7: some steps clip, some do not", _mlp, 0.7, 6, True),
    ("Linear-LayerNorm-Tanh-Linear, max_norm=1.2: some steps clip", _norm_tanh, 1.2, 6, True),
]
#: What the hidden cases of ch4.remove_sync try (said in their hints, never their data).
_CLIP_ABOUT = {
    "models.mlp(), max_norm=0.7: some steps clip, some do not":
        "(here some steps clip and others do not, in one run: the factor must be decided on the device at every "
        "step, min(1, max_norm / norm)) ",
    "Linear-LayerNorm-Tanh-Linear, max_norm=1.2: some steps clip":
        "(here another model, with LayerNorm weights and biases: clip every parameter's gradient, whatever the "
        "model) ",
}


def _params_close(got: list[torch.Tensor], want: list[torch.Tensor]) -> bool:
    return len(got) == len(want) and all(tensors_close(g, w, rtol=1e-4, atol=1e-5) for g, w in zip(got, want))


def _losses_close(got: list[float], want: list[float]) -> bool:
    return len(got) == len(want) and all(abs(a - b) <= 1e-5 + 1e-4 * abs(b) for a, b in zip(got, want))


def _fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.5f}" for v in values) + "]"


@exercise("ch4.remove_sync", "One graph per step: remove the hidden sync points", names=["clipped_step"],
          timeout=120)
def _remove_sync(t: Tester, clipped_step) -> None:
    for desc, make, max_norm, steps, hidden in CLIP_CASES:
        about = _CLIP_ABOUT.get(desc, "")
        batches, lrs = clip_batches(steps), [CLIP_LR] * steps
        want_losses, want_params = eager_loop(clipped_step_with_syncs, make().to("npu"), batches, lrs,
                                              max_norm=max_norm)
        outcome = t.call(lambda s, m=make, b=batches, lr=lrs, n=max_norm: lazy_loop(s, m().to("npu"), b, lr,
                                                                                   max_norm=n), clipped_step)
        if not outcome.ok:
            t.error(f"{desc}: lazy_loop(clipped_step, ...)", outcome, hidden=hidden,
                    hint="clipped_step(model, x, y, lr, max_norm) runs inside npu_lab.lazy.mode() and returns the "
                         "loss tensor; note that npu has no kernel for torch.norm / linalg.vector_norm")
            continue
        report: LoopReport = outcome.value
        one = all(g == 1 for g in report.graphs) and report.sync_points == {"mark_step": steps}
        t.expect(f"{desc}: one graph per step, and mark_step is the only sync point", one, hidden=hidden,
                 expected=f"graphs per step {[1] * steps}, syncs {{'mark_step': {steps}}}",
                 got=f"graphs per step {report.graphs}, syncs {report.sync_points}",
                 hint=about + "an 'item()' sync comes from .item() (logging) or from a Python `if` on a tensor; "
                      "return the loss tensor instead of logging it, and compute the clipping factor on the device "
                      "(torch.clamp / torch.where) instead of deciding in Python")
        t.expect(f"{desc}: the same losses as the given step", _losses_close(report.losses, want_losses),
                 hidden=hidden, expected=_fmt(want_losses), got=_fmt(report.losses),
                 hint=about + "the loss is the cross-entropy before the update; return it from the step")
        t.expect(f"{desc}: the same parameters after {steps} steps", _params_close(report.params, want_params),
                 hidden=hidden, expected="allclose to the given step's parameters",
                 got="same" if _params_close(report.params, want_params) else "different",
                 hint=about + "scale the gradients by max_norm / norm only when norm > max_norm (otherwise by 1), "
                      "then p -= lr * p.grad")


# ---------------------------------------------------------------------------------------------
# ch4.reuse_cache
# ---------------------------------------------------------------------------------------------

#: The data loader below never yields more rows than this.
BATCH = 8


def loader(sizes: Sequence[int], features: int = 10, classes: int = 5,
           seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """CPU batches ``(x, y)`` with ``sizes[i]`` rows each (at most :data:`BATCH`), like a DataLoader's.

    ``x`` is float32 of ``(rows, features)``; ``y`` holds class indices below ``classes``.
    """
    g = torch.Generator().manual_seed(seed)
    out = []
    for b in sizes:
        if not 1 <= b <= BATCH:
            raise ValueError(f"batch sizes are between 1 and {BATCH}, got {b}")
        out.append((torch.randn(b, features, generator=g), torch.randint(0, classes, (b,), generator=g)))
    return out


def sgd_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float) -> torch.Tensor:
    """One plain SGD step on a CPU batch: correct, and it compiles a new graph far too often."""
    x, y = x.to("npu"), y.to("npu")
    model.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p.sub_(lr * p.grad)
    return loss


def _tanh_mlp() -> nn.Module:
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(10, 24), nn.Tanh(), nn.Linear(24, 5))


#: (description, model factory, batch sizes, learning rates, hidden)
CACHE_CASES = [
    ("learning rate 0.1 * 0.8**step, full batches of 8", _mlp, [8] * 5, [0.1 * 0.8 ** i for i in range(5)], False),
    ("learning rate 0.1, batches of 8, 8, 5, 8, 3 rows", _mlp, [8, 8, 5, 8, 3], [0.1] * 5, False),
    ("warm-up learning rate, batches of 8, 7, 8, 1, 4, 8 rows (Linear-Tanh-Linear)", _tanh_mlp,
     [8, 7, 8, 1, 4, 8], [0.05 * (i + 1) for i in range(6)], True),
    ("learning rate 0.3 / (1 + step), batches of 6, 2, 8, 2, 5 rows", _mlp, [6, 2, 8, 2, 5],
     [0.3 / (1 + i) for i in range(5)], True),
]
#: What the hidden cases of ch4.reuse_cache try (said in their hints, never their data).
_CACHE_ABOUT = {
    CACHE_CASES[2][0]: "(here the learning rate and the batch size both change at every step, down to a batch of one "
                       "row, on another model) ",
    CACHE_CASES[3][0]: "(here the first batch is not full: pad from the first step on, and every later step must "
                       "reuse that graph) ",
}


@exercise("ch4.reuse_cache", "Compile once: keep changing numbers and shapes out of the graph",
          names=["cached_sgd_step"], timeout=120)
def _reuse_cache(t: Tester, cached_sgd_step) -> None:
    for i, (desc, make, sizes, lrs, hidden) in enumerate(CACHE_CASES):
        about = _CACHE_ABOUT.get(desc, "")
        batches = loader(sizes, seed=20 + i)
        want_losses, want_params = eager_loop(sgd_step, make().to("npu"), batches, lrs)
        outcome = t.call(lambda s, m=make, b=batches, lr=lrs: lazy_loop(s, m().to("npu"), b, lr), cached_sgd_step)
        if not outcome.ok:
            t.error(f"{desc}: lazy_loop(cached_sgd_step, ...)", outcome, hidden=hidden,
                    hint="cached_sgd_step(model, x, y, lr) gets CPU batches and a Python float lr, runs inside "
                         "npu_lab.lazy.mode() and returns the loss tensor")
            continue
        report: LoopReport = outcome.value
        steps = len(sizes)
        t.expect(f"{desc}: one graph per step, and mark_step is the only sync point",
                 report.graphs == [1] * steps and report.sync_points == {"mark_step": steps}, hidden=hidden,
                 expected=f"graphs per step {[1] * steps}, syncs {{'mark_step': {steps}}}",
                 got=f"graphs per step {report.graphs}, syncs {report.sync_points}",
                 hint=about + "do not read values in the step (.item(), print, a Python if on a tensor)")
        t.expect(f"{desc}: compiled at step 1 only, every later step is a cache hit",
                 report.built == [1] + [0] * (steps - 1), hidden=hidden,
                 expected=f"graphs compiled per step {[1] + [0] * (steps - 1)}",
                 got=f"graphs compiled per step {report.built}",
                 hint=about + "a Python number in an operator (lr * grad) is a constant of the graph: pass it as a "
                      "tensor "
                      "(torch.tensor(lr)) so it becomes an input; a batch with fewer rows is a new input shape: pad "
                      "x and y to BATCH rows on the CPU and mask the padded rows out of the loss (with a mask "
                      "tensor, not a Python count)")
        t.expect(f"{desc}: the same losses as sgd_step", _losses_close(report.losses, want_losses), hidden=hidden,
                 expected=_fmt(want_losses), got=_fmt(report.losses),
                 hint=about + "the loss is the mean cross-entropy over the real rows only: sum(ce * mask) / "
                      "mask.sum()")
        t.expect(f"{desc}: the same parameters after {steps} steps", _params_close(report.params, want_params),
                 hidden=hidden, expected="allclose to sgd_step's parameters",
                 got="same" if _params_close(report.params, want_params) else "different",
                 hint=about + "padded rows must not contribute to the gradients: give them weight 0 in the loss")


# ---------------------------------------------------------------------------------------------
# ch4.step_closures: callbacks that read a step's values after its graph ran (no extra sync)
# ---------------------------------------------------------------------------------------------

def _closure_model() -> nn.Module:
    torch.manual_seed(5)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1))


#: What each step registers: "loss" (one closure, one tensor), "two" (a closure of two tensors, the loss and
#: the predictions' mean, then a second closure of a temporary made only for it), "none" (nothing).
_PLANS = {"public": ["loss", "loss", "loss"], "hidden": ["two", "none", "two", "loss"]}


def _closure_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, what: str, k: int,
                  add: Callable[..., Any] | None, log: list) -> list[tuple[str, int, list[torch.Tensor]]]:
    """One SGD step; registers closures through ``add`` (None: eager, returns the values instead)."""
    pred = model(x)
    loss = F.mse_loss(pred, y)
    loss.backward()
    wanted: list[tuple[str, int, list[torch.Tensor]]] = []

    def register(name: str, *tensors: torch.Tensor) -> None:
        if add is None:
            wanted.append((name, k, [t.detach().cpu().clone() for t in tensors]))
        else:
            add(lambda *values, name=name: log.append((name, k, list(values))), *tensors)

    if what in ("loss", "two"):
        register("loss" if what == "loss" else "loss+mean",
                 *((loss.detach(),) if what == "loss" else (loss.detach(), pred.detach().mean())))
    if what == "two":
        register("max error", (pred.detach() - y).abs().max())
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.05 * p.grad
            p.grad = None
    return wanted


def _batches(n: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(randn(5, 6, seed=seed + 2 * i, device="npu"), randn(5, 1, seed=seed + 2 * i + 1, device="npu"))
            for i in range(n)]


def _eager_closures(plan: list[str], seed: int) -> list[tuple[str, int, list[torch.Tensor]]]:
    model = _closure_model().to("npu")
    out = []
    for k, ((x, y), what) in enumerate(zip(_batches(len(plan), seed), plan)):
        out += _closure_step(model, x, y, what, k, None, [])
    return out


def _drive_closures(cls: Any, plan: list[str], seed: int) -> dict[str, Any]:
    """The lazy loop with the learner's step closures: what the closures received, and graphs per step."""
    compiler.reset()
    model = _closure_model().to("npu")
    log: list = []
    per_step, calls_at_end = [], []
    closures = cls()
    with lazy.mode():
        for k, ((x, y), what) in enumerate(zip(_batches(len(plan), seed), plan)):
            before = _counters()
            _closure_step(model, x, y, what, k, closures.add, log)
            closures.mark_step()
            graphs, _, syncs = _since(before)
            per_step.append((graphs, syncs))
            calls_at_end.append(len(log))
    return {"log": log, "per_step": per_step, "calls_at_end": calls_at_end}


@exercise("ch4.step_closures", "Step closures: read a step's values after its graph ran, with no extra sync",
          names=["StepClosures"], timeout=90)
def _step_closures(t: Tester, StepClosures) -> None:  # noqa: N803 - the learner's class
    for label, seed, hidden in (("public", 100, False), ("hidden", 200, True)):
        plan = _PLANS[label]
        expected = _eager_closures(plan, seed)
        desc = f"{len(plan)} lazy SGD steps registering {', '.join(plan)}"
        about = ("" if not hidden else "here a step registers two closures, the first of two tensors (the loss "
                 "and the predictions' mean) and the second of a temporary made only for it, and one step registers "
                 "nothing: ")
        outcome = t.call(_drive_closures, StepClosures, plan, seed)
        if not outcome.ok:
            t.error(f"{desc}: StepClosures().add(fn, *tensors) during each step, .mark_step() at its end", outcome,
                    hidden=hidden, hint=about + "add(fn, *tensors) keeps fn and the tensors; mark_step() runs "
                                                "npu_lab.lazy.mark_step() and then calls each fn with the values")
            continue
        run = outcome.value
        graphs = [g for g, _ in run["per_step"]]
        syncs = [s for _, s in run["per_step"]]
        t.expect(f"{desc}: one graph per step, run by mark_step, closures included",
                 graphs == [1] * len(plan) and syncs == [{"mark_step": 1}] * len(plan), hidden=hidden,
                 expected=f"graphs {[1] * len(plan)}, each step's only sync point its mark_step",
                 got=f"graphs {graphs}; sync points {syncs}",
                 hint=about + "a closure must not read a value before the step's graph has run: .item(), .cpu() or "
                              "float() of a lazy tensor, in add() or before npu_lab.lazy.mark_step(), is a sync "
                              "point of its own (it runs the graph early, or splits it in two)")
        want_at_end = [sum(1 for _, kk, _ in expected if kk <= k) for k in range(len(plan))]
        t.expect(f"{desc}: each step's closures run in its mark_step, once", run["calls_at_end"] == want_at_end,
                 hidden=hidden, expected=f"closures run so far after each step: {want_at_end}",
                 got=f"{run['calls_at_end']}",
                 hint=about + "call every closure registered since the last mark_step, after the graph ran, and "
                              "then forget them (a closure runs once, in the step that registered it)")
        log = run["log"]
        names = [(n, k) for n, k, _ in log]
        t.expect(f"{desc}: closures called in the order they were added", names == [(n, k) for n, k, _ in expected],
                 hidden=hidden, expected=str([(n, k) for n, k, _ in expected]), got=str(names),
                 hint=about + "keep the closures in a list and call them first to last")
        kinds = {type(v).__name__ + ("" if not isinstance(v, torch.Tensor) else f" on {v.device.type}")
                 for _, _, vs in log for v in (vs if type(vs) is list else [vs])}
        plain_cpu = all(type(v) is torch.Tensor and v.device.type == "cpu" for _, _, vs in log for v in vs)
        t.expect(f"{desc}: closures receive CPU tensors", bool(log) and plain_cpu, hidden=hidden,
                 expected="torch.Tensor on cpu, one per tensor given to add()", got=", ".join(sorted(kinds)) or
                 "no calls", hint=about + "pass each value as a CPU tensor (t.cpu() once the graph has run costs no "
                                          "graph): a lazy tensor handed to user code syncs whenever it is read")
        if plain_cpu and names == [(n, k) for n, k, _ in expected]:
            got_values = [[v.clone() for v in vs] for _, _, vs in log]
            t.case(f"{desc}: the values the closures received", lambda g=got_values: g,
                   expected=[vs for _, _, vs in expected], hidden=hidden, rtol=1e-4, atol=1e-5,
                   hint=about + "each closure gets the values of the tensors given to add(), in that order, as the "
                                "step computed them (before the parameters were updated)")
