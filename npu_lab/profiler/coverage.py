"""Which ATen operators does a model need, and which does the NPU run?

Chapter 8's first step for a chip team: list the operators a model reaches
(after autograd, forward and backward), and sort them into

* **native**: the NPU has its own kernel (``npu_lab.claimed_ops()``);
* **composite**: no NPU kernel needed, PyTorch decomposes it into others;
* **fallback**: no NPU kernel, runs only through the CPU fallback;
* **missing**: fails even with the fallback.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from ..device import fallback
from ..ops.registry import CLAIMED


@dataclass
class CoverageReport:
    native: Counter = field(default_factory=Counter)
    composite: Counter = field(default_factory=Counter)
    fallback: Counter = field(default_factory=Counter)
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def ops(self) -> list[str]:
        return sorted(set(self.native) | set(self.composite) | set(self.fallback) | set(self.missing))

    @property
    def ready(self) -> bool:
        """True when every operator runs on the NPU without the CPU fallback."""
        return not self.fallback and not self.missing

    def summary(self) -> str:
        return (f"{len(self.ops)} ATen operators: {len(self.native)} native, {len(self.composite)} composite, "
                f"{len(self.fallback)} CPU fallback, {len(self.missing)} missing")

    def table(self) -> str:
        lines = [self.summary()]
        for label, group in (("native", self.native), ("composite", self.composite),
                             ("fallback", self.fallback)):
            for op, n in sorted(group.items()):
                lines.append(f"  {label:<10} {op:<45} x{n}")
        for op, why in sorted(self.missing.items()):
            lines.append(f"  {'missing':<10} {op:<45} {why}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = []
        colors = {"native": "#d4f7d4", "composite": "#e8f0ff", "fallback": "#fff2cc", "missing": "#ffd6d6"}
        for label, group in (("native", self.native), ("composite", self.composite),
                             ("fallback", self.fallback)):
            for op, n in sorted(group.items()):
                rows.append(f"<tr style='background:{colors[label]}'><td>{op}</td><td>{label}</td><td>{n}</td></tr>")
        for op, why in sorted(self.missing.items()):
            rows.append(f"<tr style='background:{colors['missing']}'><td>{op}</td><td>missing</td><td>{why}</td></tr>")
        return (f"<p>{self.summary()}</p><table><tr><th>operator</th><th>status</th><th>calls</th></tr>"
                + "".join(rows) + "</table>")


def _qualified(func) -> str:
    name = func._schema.name
    return name if func._overloadname == "default" else f"{name}.{func._overloadname}"


class _Observer(TorchDispatchMode):
    def __init__(self, report: CoverageReport) -> None:
        super().__init__()
        self.report = report

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _qualified(func)
        on_npu = any(isinstance(t, torch.Tensor) and t.device.type == "npu"
                     for t in tree_flatten((args, kwargs))[0])
        if not on_npu or name.startswith("profiler::"):
            return func(*args, **kwargs)
        if name in CLAIMED:
            self.report.native[name] += 1
            return func(*args, **kwargs)
        before = sum(fallback.counts.values())
        try:
            out = func(*args, **kwargs)
        except Exception as e:  # even the fallback cannot run it
            self.report.missing[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
            raise
        # structured operators fall back through their .out overload: count any fallback inside
        if sum(fallback.counts.values()) > before:
            self.report.fallback[name] += 1
        else:
            self.report.composite[name] += 1
        return out


def coverage(model: torch.nn.Module, example_inputs: tuple | torch.Tensor, backward: bool = True) -> CoverageReport:
    """Run ``model`` once on npu (forward and, if ``backward``, backward) and classify its operators.

    The CPU fallback is switched on for the run so that a missing operator does not stop it.
    """
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    model = model.to("npu")
    inputs = tree_map(lambda t: t.to("npu") if isinstance(t, torch.Tensor) else t, example_inputs)
    report = CoverageReport()
    was = fallback.cpu_fallback_enabled()
    fallback.set_cpu_fallback(True)
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with _Observer(report):
                out = model(*inputs)
                if backward:
                    loss = sum(o.float().sum() for o in tree_flatten(out)[0]
                               if isinstance(o, torch.Tensor) and o.requires_grad)
                    if isinstance(loss, torch.Tensor):
                        loss.backward()
    except Exception:
        if not report.missing:
            raise
    finally:
        fallback.set_cpu_fallback(was)
    return report
