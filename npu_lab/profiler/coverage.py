"""Which ATen operators does a model need, and which does the NPU run?

Chapter 8a's first step for a chip team: list the operators a model reaches
(after autograd, forward and backward), and sort them into

* **native**: the NPU has its own kernel (``npu_lab.claimed_ops()``);
* **composite**: no NPU kernel needed, PyTorch decomposes it into others;
* **fallback**: no NPU kernel, runs only through the CPU fallback;
* **missing**: fails even with the fallback.

On a bare device (``NPU_LAB_BARE=1``) **native** means *yours*: operators with a kernel you registered; the
runtime's own operators (memory, views, copies, ``.item()``) are counted as **runtime**, and every
operator nobody registered a kernel for is **missing** (the list of what the model still needs).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from ..device import bare, fallback
from ..ops.registry import CLAIMED


@dataclass
class CoverageReport:
    native: Counter = field(default_factory=Counter)
    composite: Counter = field(default_factory=Counter)
    fallback: Counter = field(default_factory=Counter)
    missing: dict[str, str] = field(default_factory=dict)
    #: the runtime's own operators (bare device only; on a full device they count as composite, as before)
    runtime: Counter = field(default_factory=Counter)
    #: a bare device: "native" operators are the learner's, and what fell back is reported as missing
    bare: bool = False
    #: bare device: operator that needs a kernel -> the operator the model called that reached it
    #: ("aten::addmm.out" <- "aten::addmm": structured operators run their out= form on a new backend)
    via: dict[str, str] = field(default_factory=dict)

    @property
    def ops(self) -> list[str]:
        return sorted(set(self.native) | set(self.composite) | set(self.fallback) | set(self.missing)
                      | set(self.runtime))

    @property
    def needed(self) -> list[str]:
        """The operators that still need an npu kernel (fallen back to the CPU, or missing), sorted."""
        return sorted(set(self.fallback) | set(self.missing))

    @property
    def ready(self) -> bool:
        """True when every operator runs on the NPU without the CPU fallback."""
        return not self.fallback and not self.missing

    def summary(self) -> str:
        if self.bare:
            return (f"{len(self.ops)} ATen operators on the bare device: {len(self.native)} with your kernels, "
                    f"{len(self.runtime)} the runtime's, {len(self.composite)} composite, "
                    f"{len(self.needed)} still need a kernel")
        return (f"{len(self.ops)} ATen operators: {len(self.native)} native, {len(self.composite)} composite, "
                f"{len(self.fallback)} CPU fallback, {len(self.missing)} missing")

    def _groups(self) -> list[tuple[str, Counter]]:
        if self.bare:
            return [("yours", self.native), ("runtime", self.runtime), ("composite", self.composite),
                    ("needed", self.fallback)]
        return [("native", self.native), ("composite", self.composite), ("fallback", self.fallback)]

    def table(self) -> str:
        lines = [self.summary()]
        for label, group in self._groups():
            for op, n in sorted(group.items()):
                via = f"  (reached from {self.via[op]})" if op in self.via else ""
                lines.append(f"  {label:<10} {op:<45} x{n}{via}")
        for op, why in sorted(self.missing.items()):
            lines.append(f"  {'missing':<10} {op:<45} {why}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = []
        colors = {"native": "#d4f7d4", "yours": "#d4f7d4", "runtime": "#eeeeee", "composite": "#e8f0ff",
                  "fallback": "#fff2cc", "needed": "#ffd6d6", "missing": "#ffd6d6"}
        for label, group in self._groups():
            for op, n in sorted(group.items()):
                via = f" (reached from {self.via[op]})" if op in self.via else ""
                rows.append(f"<tr style='background:{colors[label]}'><td>{op}{via}</td><td>{label}</td><td>{n}</td>"
                            "</tr>")
        for op, why in sorted(self.missing.items()):
            rows.append(f"<tr style='background:{colors['missing']}'><td>{op}</td><td>missing</td><td>{why}</td></tr>")
        return (f"<p>{self.summary()}</p><table><tr><th>operator</th><th>status</th><th>calls</th></tr>"
                + "".join(rows) + "</table>")


#: the message of a generic kernel that refuses a new backend ("convolution_overrideable not implemented. ...")
_REFUSED = re.compile(r"^(\w+) not implemented\. You are likely triggering this with tensor backend")


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
        if self.report.bare:
            who = bare.owner(name)
            if who in ("yours", "shipped"):
                self.report.native[name] += 1
                return func(*args, **kwargs)
            if who == "runtime":
                self.report.runtime[name] += 1
                return func(*args, **kwargs)
        elif name in CLAIMED:
            self.report.native[name] += 1
            return func(*args, **kwargs)
        before = dict(fallback.counts)
        try:
            out = func(*args, **kwargs)
        except Exception as e:  # even the fallback cannot run it
            text = str(e).splitlines()[0] if str(e) else type(e).__name__
            refused = _REFUSED.match(text)
            missing = f"aten::{refused.group(1)}" if refused and self.report.bare else name
            self.report.missing[missing] = f"{type(e).__name__}: {text[:120]}"
            if not isinstance(e, NotImplementedError):
                raise
            # an operator whose generic kernel refuses the npu (convolution_overrideable, the hook a new
            # backend implements): its CPU equivalent lets the run go on and list what comes after it
            return fallback.run_on_cpu(func, args, kwargs)
        # structured operators fall back through their .out overload: count any fallback inside
        inner = [op for op, n in fallback.counts.items() if n > before.get(op, 0)]
        if inner and self.report.bare:
            # a composite operator (ones_like) that reached an operator with no kernel (fill_.Scalar):
            # the one to write is the inner one
            for op in inner:
                op = op if "::" in op else f"aten::{op}"
                self.report.fallback[op] += 1
                if op != name:
                    self.report.via.setdefault(op, name)
        elif inner:
            self.report.fallback[name] += 1
        else:
            self.report.composite[name] += 1
        return out


def coverage(model: torch.nn.Module, example_inputs: tuple | torch.Tensor, backward: bool = True) -> CoverageReport:
    """Run ``model`` once on npu (forward and, if ``backward``, backward) and classify its operators.

    The CPU fallback is switched on for the run (on a bare device too) so that a missing operator does not
    stop it: the report lists every operator the model still needs, not just the first.
    """
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    model = model.to("npu")
    inputs = tree_map(lambda t: t.to("npu") if isinstance(t, torch.Tensor) else t, example_inputs)
    report = CoverageReport(bare=bare.BARE)
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with fallback.listing_fallback(), _Observer(report):
                out = model(*inputs)
                if backward:
                    loss = sum(o.float().sum() for o in tree_flatten(out)[0]
                               if isinstance(o, torch.Tensor) and o.requires_grad)
                    if isinstance(loss, torch.Tensor):
                        loss.backward()
    except Exception:
        if not report.missing:
            raise
    return report
