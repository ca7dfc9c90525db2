"""The adaptation checklist, computed live for one model.

A chip team's roadmap ends with a checklist: are all the model's operators
native on the chip, do the results match the CPU, do the operators it relies
on pass the conformance suite, does the compiler fuse, and how fast is it
against the CPU. :func:`readiness` measures each item for a model.
"""

from __future__ import annotations

import copy
import html
import time
from dataclasses import dataclass, field
from typing import Any

import torch

OK, TODO = "done", "to do"

#: The speed target: the npu's eager training step takes at most this many times the CPU's (wall time on
#: this host; the simulated chip's kernels run on the host's CPU, so this is how fast the backend's host code is).
PERF_TARGET = 2.0
PERF_ITEM = f"eager step within {PERF_TARGET:g}x the CPU's time"
#: On a bare device the speed item is the learner's matrix product on the device's clock, its cost counted by the
#: tile model (milestone 6 of the bring-up track): deterministic, and measured, not declared.
BARE_PERF_CHIP, BARE_PERF_SIZE, BARE_PERF_TIER = "gpu-like", 1024, 0.8
BARE_PERF_ITEM = f"matrix product at {BARE_PERF_TIER:.0%} of the roofline"


@dataclass
class Item:
    name: str
    status: str
    detail: str


@dataclass
class Readiness:
    """The checklist; ``deterministic`` fields are safe to print in compared notebook cells."""

    items: list[Item] = field(default_factory=list)
    eager_sim_us: float = 0.0
    compiled_sim_us: float = 0.0
    eager_launches: int = 0
    compiled_launches: int = 0
    wall_ratio_vs_cpu: float = 0.0  # npu eager wall time / CPU eager wall time (host-dependent)

    @property
    def ready(self) -> bool:
        return all(i.status == OK for i in self.items)

    def __str__(self) -> str:
        lines = [f"[{'x' if i.status == OK else ' '}] {i.name}: {i.detail}" for i in self.items]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{'&#9745;' if i.status == OK else '&#9744;'}</td><td>{html.escape(i.name)}</td>"
                       f"<td style='text-align:left'>{html.escape(i.detail)}</td></tr>" for i in self.items)
        return f"<table><tr><th></th><th>step</th><th>measured</th></tr>{rows}</table>"


#: ATen names whose OpInfo entry is spelled differently.
_OPINFO_ALIASES = {
    "convolution": "nn.functional.conv2d", "convolution_backward": "nn.functional.conv2d",
    "native_batch_norm": "nn.functional.batch_norm", "native_layer_norm": "nn.functional.layer_norm",
    "_log_softmax": "log_softmax", "_softmax": "softmax", "nll_loss_forward": "nn.functional.nll_loss",
    "max_pool2d_with_indices": "nn.functional.max_pool2d", "embedding_dense_backward": "nn.functional.embedding",
    "threshold_backward": "nn.functional.relu", "gelu_backward": "nn.functional.gelu",
}


def _opinfo_name(aten_name: str, claimed: Any) -> str | None:
    for candidate in (aten_name, aten_name.rstrip("_"), f"nn.functional.{aten_name}", _OPINFO_ALIASES.get(aten_name)):
        if candidate and candidate in claimed:
            return candidate
    return None


#: Samples per OpInfo for the readiness check on a bare device (the B4 milestone's check runs more).
BARE_SAMPLES = 8


def _bare_conformance(ops: list[str]) -> Item:
    """PyTorch's OpInfo samples (the first :data:`BARE_SAMPLES` of each) for the learner's operators the model
    ran, on the learner's kernels: done when every OpInfo that exercises one of them passes."""
    from ..bringup import conformance

    names = conformance.opinfos_for(ops)
    if not names:
        return Item("native operators in the OpInfo conformance suite", TODO,
                    "no OpInfo exercises an operator of yours yet")
    report = conformance.opinfo(names, samples=BARE_SAMPLES)
    bad = report.failing()
    detail = (f"{len(names) - len(bad)} of the {len(names)} OpInfos that exercise your operators pass their first "
              f"{BARE_SAMPLES} samples")
    if bad:
        detail += " (failing: " + ", ".join(f"{o.name} {o.status}" for o in bad[:5]) + (", ..." if len(bad) > 5
                                                                                         else "") + ")"
    return Item("native operators in the OpInfo conformance suite", OK if not bad else TODO, detail)


def _bare_fusion(npu_model: torch.nn.Module, npu_in: list[torch.Tensor], report: Readiness) -> Item:
    """Fusion on a bare device: the npu backend runs your passes only, so a fused kernel is an operator of yours
    outside ``aten`` (one your pass put in the graph), and it counts when the compiled step launches fewer kernels
    than the eager one."""
    from torch import _dynamo

    from ..compiler.record import last_compile
    from ..device import bare

    _dynamo.reset()
    compiled = torch.compile(npu_model, backend="npu")

    def fast() -> None:
        compiled(*npu_in).float().sum().backward()

    try:
        fast()
        report.compiled_sim_us, report.compiled_launches = _sim(fast)
    except Exception as exc:  # noqa: BLE001 - a pass of yours may break the graph
        _dynamo.reset()
        return Item("fusion enabled in the compiled graph", TODO, f"the compiled step failed: {_first_line(exc)}")
    fused = sorted({str(n.target) for g in last_compile().graphs for n in g.final.graph.nodes
                    if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                    and n.target.namespace != "aten" and bare.owner(n.target.name()) == "yours"})
    _dynamo.reset()
    fewer = report.compiled_launches < report.eager_launches
    return Item(
        "fusion enabled in the compiled graph", OK if fused and fewer else TODO,
        (f"{len(fused)} fused operators of yours ({', '.join(fused[:4])}{', ...' if len(fused) > 4 else ''})"
         if fused else "no fused operator of yours in the compiled graph (your passes: npu_lab.compiler.register_pass)")
        + f"; launches per step {report.eager_launches} eager -> {report.compiled_launches} compiled; simulated "
          f"device time {report.eager_sim_us:.0f} us -> {report.compiled_sim_us:.0f} us")


def _sim(fn: Any) -> tuple[float, int]:
    from ..profiler import profile

    with profile() as prof:
        fn()
        torch.npu.synchronize()
    return prof.sim_time_us, prof.launches


def readiness(model: torch.nn.Module, *inputs: torch.Tensor, compile: bool = True) -> Readiness:
    """Measure the adaptation checklist for ``model`` on ``inputs`` (forward and backward).

    Every item is measured, none is granted: on a bare device (``NPU_LAB_BARE=1``, the bring-up track) the
    operators counted are yours, and what the lab cannot measure there yet stays "to do" and says so.
    """
    from ..ops.conformance import CLAIMED_OPINFOS
    from ..profiler import coverage
    from .verify import verify

    report = Readiness()
    cov = coverage(copy.deepcopy(model).to("npu"), tuple(x.to("npu") for x in inputs))
    if cov.bare:
        report.items.append(Item(
            "operators covered", OK if cov.ready else TODO,
            f"{len(cov.native)} with your kernels, {len(cov.runtime)} the runtime's, {len(cov.composite)} composite, "
            f"{len(cov.needed)} still need a kernel" + (f" ({', '.join(cov.needed[:6])}"
                                                       f"{', ...' if len(cov.needed) > 6 else ''})"
                                                       if cov.needed else "")))
    else:
        report.items.append(Item(
            "operators covered", OK if cov.ready else TODO,
            f"{len(cov.native)} native, {len(cov.composite)} composite, {len(cov.fallback)} on the CPU fallback, "
            f"{len(cov.missing)} missing" + (f" (fallback: {', '.join(sorted(cov.fallback))})" if cov.fallback
                                             else "")))

    try:
        check = verify(model, *inputs)
    except Exception as exc:  # noqa: BLE001 - a bare device without the kernels the model needs
        report.items.append(Item("results match the CPU", TODO, f"could not run on npu: {_first_line(exc)}"))
        check = None
    if check is not None:
        report.items.append(Item("results match the CPU", OK if check.ok else TODO,
                                 f"{len(check.tensors)} outputs and gradients, " + (
                                     f"each within {check.tolerance()}" if check.ok else
                                     f"{len(check.failed)} beyond {check.tolerance()} (worst: {check.worst.name} "
                                     f"max|d| {check.worst.max_abs:.1e})")))

    names = {op.split("::")[-1].split(".")[0] for op in cov.native}
    if cov.bare:
        report.items.append(_bare_conformance(cov.native))
    else:
        tested = sorted(n for n in names if _opinfo_name(n, CLAIMED_OPINFOS))
        report.items.append(Item("native operators in the OpInfo conformance suite", OK if tested else TODO,
                                 f"{len(tested)} of {len(names)} operator families ({', '.join(tested[:8])}"
                                 f"{', ...' if len(tested) > 8 else ''})"))

    npu_model = copy.deepcopy(model).to("npu")
    npu_in = [x.to("npu") for x in inputs]

    def eager() -> None:
        npu_model(*npu_in).float().sum().backward()

    try:
        eager()  # warm-up: kernels compiled before measuring
    except Exception as exc:  # noqa: BLE001
        why = f"could not run on npu: {_first_line(exc)}"
        if compile:
            report.items.append(Item("fusion enabled in the compiled graph", TODO, why))
        report.items.append(Item(BARE_PERF_ITEM if cov.bare else PERF_ITEM, TODO, why))
        return report
    report.eager_sim_us, report.eager_launches = _sim(eager)
    if compile and cov.bare:
        report.items.append(_bare_fusion(npu_model, npu_in, report))
    elif compile:
        from torch import _dynamo

        from ..compiler.record import last_compile

        _dynamo.reset()
        compiled = torch.compile(npu_model, backend="npu")

        def fast() -> None:
            compiled(*npu_in).float().sum().backward()

        fast()
        fused = sum(len(g.kernels) + sum(1 for n in g.final.graph.nodes if n.op == "call_function"
                                         and str(n.target).startswith("npu."))
                    for g in last_compile().graphs)
        report.compiled_sim_us, report.compiled_launches = _sim(fast)
        _dynamo.reset()
        report.items.append(Item(
            "fusion enabled in the compiled graph", OK if fused else TODO,
            f"{fused} fused kernels; launches per step {report.eager_launches} eager -> "
            f"{report.compiled_launches} compiled; simulated device time {report.eager_sim_us:.0f} us -> "
            f"{report.compiled_sim_us:.0f} us"))

    if cov.bare:
        report.items.append(_bare_performance())
        return report
    cpu_model = copy.deepcopy(model).to("cpu")
    cpu_in = [x.to("cpu") for x in inputs]

    def best(fn: Any) -> float:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    cpu_t = best(lambda: cpu_model(*cpu_in).float().sum().backward())
    npu_t = best(lambda: (eager(), torch.npu.synchronize()))
    report.wall_ratio_vs_cpu = npu_t / cpu_t
    report.items.append(Item(PERF_ITEM, OK if report.wall_ratio_vs_cpu <= PERF_TARGET else TODO,
                             f"eager step {npu_t * 1e3:.2f} ms on npu vs {cpu_t * 1e3:.2f} ms on the CPU "
                             f"(npu takes {report.wall_ratio_vs_cpu:.2f}x the CPU's time, target "
                             f"{PERF_TARGET:g}x; the simulated chip runs on this host)"))
    return report


def _bare_performance() -> Item:
    """Your ``aten::mm`` on two 1024 x 1024 matrices on the ``gpu-like`` chip, against the roofline: done at the 80%
    tier, when its cost was counted (a tile kernel's loads and stores), not declared (``bringup.launch``)."""
    from ..device.chips import PRESETS, use_chip
    from .measure import counted_launches, matmul_efficiency

    n = BARE_PERF_SIZE
    try:
        small = torch.randn(64, 64).to("npu")
        counted, declared, _ = counted_launches(lambda: torch.mm(small, small))
        if declared or not counted:
            return Item(BARE_PERF_ITEM, TODO,
                        "your aten::mm declares its cost (bringup.launch), which the clock charges at the roofline "
                        "whatever the kernel does: nothing to measure. Write it as a tile kernel, whose loads the "
                        "device counts (milestone 6, B6_matmul)")
        a, b = torch.randn(n, n).to("npu"), torch.randn(n, n).to("npu")
        with use_chip(BARE_PERF_CHIP):
            torch.mm(a, b)  # warm-up
            counted, declared, prof = counted_launches(lambda: torch.mm(a, b))
    except Exception as exc:  # noqa: BLE001 - the learner's kernel raised
        return Item(BARE_PERF_ITEM, TODO, f"could not run on npu: {_first_line(exc)}")
    e = matmul_efficiency(prof, n, PRESETS[BARE_PERF_CHIP].figures)
    return Item(BARE_PERF_ITEM, OK if e.fraction >= BARE_PERF_TIER - 1e-9 and not declared else TODO,
                f"your aten::mm, {n} x {n} on the {BARE_PERF_CHIP} chip, its loads counted: {e.sim_us:.1f} us, "
                f"{e.fraction:.1%} of the roofline (tier '{e.tier}')")


def _first_line(exc: BaseException, limit: int = 200) -> str:
    """The error's type and its first sentence (or its first line cut at a word, if that is longer than ``limit``)."""
    lines = str(exc).strip().splitlines()
    line = lines[0] if lines else ""
    end = line.find(". ")
    if end != -1:
        line = line[: end + 1]
    if len(line) > limit:
        line = line[:limit].rsplit(" ", 1)[0] + " ..."
    return f"{type(exc).__name__}: {line}"
