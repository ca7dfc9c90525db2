"""PyTorch's own lazy tensor core (``torch._lazy``), run next to the lab's lazy mode.

PyTorch ships the lazy tensor core (LTC) that PyTorch/XLA is built on, with a
reference *TorchScript backend* for testing it: tensors on the ``"lazy"``
device record an IR graph, ``torch._lazy.mark_step()`` compiles it (to a
TorchScript graph, run on the CPU) and caches it by the graph's hash.

    from npu_lab.lazy import ltc
    ltc.init()                                    # once per process
    run = ltc.train(models.mlp(), data, target, steps=3, lr=0.05)
    run.uncached, run.cached, run.hashes          # per step
    print(run.ir[0])                              # step 1's IR text

:func:`init` is process-global and cannot be undone (it registers the backend of
the ``Lazy`` dispatch key); it leaves the ``npu`` device and ``npu_lab.lazy`` alone.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import nn

from .. import models

__all__ = ["LtcRun", "counters", "fx_ops", "graph_hash", "init", "ir_ops", "ir_text", "train"]

_started = False


def init() -> None:
    """Start LTC's TorchScript backend (idempotent; process-global, like PyTorch/XLA's runtime)."""
    global _started
    if not _started:
        import torch._lazy
        import torch._lazy.ts_backend

        torch._lazy.ts_backend.init()
        _started = True


def counters(*names: str) -> dict[str, int]:
    """LTC's counters (``torch._lazy.metrics``), all or the named ones; a counter never bumped is 0."""
    import torch._lazy.metrics as metrics

    names = names or tuple(metrics.counter_names())
    return {n: int(metrics.counter_value(n) or 0) for n in names}


def ir_text(tensors: list[torch.Tensor]) -> str:
    """The pending IR graph that computes ``tensors`` (lazy tensors), as LTC prints it."""
    import torch._lazy.debug

    return torch._lazy.debug.dump_ir(tensors, "text")


def graph_hash(tensors: list[torch.Tensor]) -> str:
    """The hash LTC's compile cache uses as the key of the graph computing ``tensors`` (hex, 16 digits)."""
    return torch._C._lazy._get_graph_hash(tensors).hex()[:16]


_IR_OP = re.compile(r"\] (\w+::\w+)\(")


def ir_ops(ir: str) -> Counter:
    """Operator name -> count in an LTC IR text (``lazy_tensors::device_data`` are the graph's inputs)."""
    return Counter(_IR_OP.findall(ir))


def fx_ops(gm: torch.fx.GraphModule) -> Counter:
    """Operator name -> count in an FX graph of ATen operators, named as LTC names them (``aten::addmm``)."""
    out: Counter = Counter()
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            out[node.target._schema.name] += 1
        elif node.op == "call_function":
            out[getattr(node.target, "__name__", str(node.target))] += 1
    return out


@dataclass
class LtcRun:
    """What :func:`train` saw, per step (compile counts are cumulative, from the start of the run)."""

    losses: list[float] = field(default_factory=list)
    uncached: list[int] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)
    hashes: list[str] = field(default_factory=list)
    ir: list[str] = field(default_factory=list)


def train(model: nn.Module, data: torch.Tensor, target: torch.Tensor, steps: int,
          lr: float | list[float], momentum: float = 0.0) -> LtcRun:
    """Train ``model`` (on the CPU) for ``steps`` SGD steps on the ``"lazy"`` device, one graph per step.

    The step is the one ``npu_lab.models.train`` runs: zero_grad, forward, the model's loss,
    backward, ``opt.step()``, then ``torch._lazy.mark_step()``. ``lr`` is one learning rate, or
    one per step (a schedule). Returns the losses, the cumulative ``UncachedCompile`` and
    ``CachedCompile`` counts, the graph hash and the IR text of every step.
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    lrs = list(lr) if isinstance(lr, (list, tuple)) else [lr] * steps
    if len(lrs) != steps:
        raise ValueError(f"got {len(lrs)} learning rates for {steps} steps")
    init()
    import torch._lazy

    before = counters("UncachedCompile", "CachedCompile")
    model = model.to("lazy")
    x, y = data.to("lazy"), target.to("lazy")
    opt = torch.optim.SGD(model.parameters(), lr=lrs[0], momentum=momentum)
    run = LtcRun()
    for step_lr in lrs:
        for group in opt.param_groups:
            group["lr"] = step_lr
        opt.zero_grad()
        loss = models.loss_fn(model, model(x), y)
        loss.backward()
        opt.step()
        live = [loss, *model.parameters(), *(s["momentum_buffer"] for s in opt.state.values()
                                             if s.get("momentum_buffer") is not None)]
        run.ir.append(ir_text(live))
        run.hashes.append(graph_hash(live))
        torch._lazy.mark_step()
        now = counters("UncachedCompile", "CachedCompile")
        run.uncached.append(now["UncachedCompile"] - before["UncachedCompile"])
        run.cached.append(now["CachedCompile"] - before["CachedCompile"])
        run.losses.append(loss.item())
    return run
