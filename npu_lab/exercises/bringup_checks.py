"""What the bring-up milestones' checks share: hidden-case grading of the learner's kernels, and a training run.

Each milestone's module (``b1``, ``b2``...) lists its operator cases (:class:`~npu_lab.grading.device.OpCase`)
and grades them with :func:`grade_cases`; its last check trains a reference model on the device with
:func:`train_check`: the CPU's losses, weights and buffers, under ``memcheck``, every kernel of the learner's
on the simulated clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..bringup.library import untouched_stubs
from ..device import bare
from ..grading import device
from ..grading.device import OpCase, Property
from ..grading.tester import STUB_MESSAGE, NotStarted, Tester

#: Seconds for all the cases of one check together (numba compiles each new layout of a kernel once).
TIMEOUT = 240.0


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=gen(seed))


def started(ops: list[str]) -> None:
    """Raise NotStarted when none of ``ops`` has a kernel of the learner's yet."""
    bare.require_bare("the bring-up checks")
    if len(device.require_kernels(ops)) == len(ops):
        raise NotStarted("no kernel of yours for " + ", ".join(ops[:4]) + (" ..." if len(ops) > 4 else "")
                         + " is registered yet (bringup.yours() lists yours)")
    if untouched_stubs(ops):
        raise NotStarted("your kernels for " + ", ".join(ops[:4]) + (" ..." if len(ops) > 4 else "")
                         + " are still the notebook's stubs (NotImplementedError(\"YOUR CODE HERE\"))")


def grade_cases(t: Tester, cases: list[OpCase | Property], ops: list[str]) -> None:
    """Run ``cases`` on the learner's kernels for ``ops`` and record each (not started while all are stubs)."""
    started(ops)
    outcomes = device.run_cases(cases, device.case_limit(TIMEOUT))
    failed = [o for o in outcomes if not o.passed]
    # Not started: every case that reached a kernel of yours met a stub (cases that expect PyTorch's error may
    # pass without reaching one: the meta function refused the arguments first).
    if failed and all(STUB_MESSAGE in o.got for o in failed) and not any(o.passed and o.reached for o in outcomes):
        raise NotStarted("your kernels still raise NotImplementedError(\"YOUR CODE HERE\")")
    device.record(t, outcomes)


@dataclass
class Training:
    """A reference training run: ``make(device)`` returns (model, inputs, targets, loss_fn) on that device."""

    what: str  #: "the MLP", "the CNN"...
    make: Callable[[str], tuple[torch.nn.Module, torch.Tensor, torch.Tensor, Callable]]
    optimizer: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]
    steps: int
    optimizer_hint: str

    def run(self, device_name: str, steps: int | None = None) -> dict:
        torch.manual_seed(0)
        model, x, y, loss_fn = self.make(device_name)
        opt = self.optimizer(list(model.parameters()))
        losses = []
        for _ in range(self.steps if steps is None else steps):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return {"losses": losses, "state": {k: v.detach().cpu() for k, v in model.state_dict().items()}}

    def run_on_npu(self) -> dict:
        from ..device.memcheck import memcheck
        from ..profiler import profile

        blame = device.Blame()
        with memcheck(), blame, profile() as prof:
            out = self.run("npu")
        out["flops"] = float(sum(k.flops for k in prof.kernels if k.kind == "kernel"))
        out["wrong"] = list(blame.first_wrong) if blame.first_wrong else []
        out["silent"] = self.silent_kernels()
        return out

    def silent_kernels(self) -> list[str]:
        """The learner's operators that ran in a step without telling the device (no launch)."""
        from torch.utils._pytree import tree_leaves

        from ..device import clock

        silent: list[str] = []

        class Watch(device.Blame):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = func._schema.name + ("" if func._overloadname == "default" else f".{func._overloadname}")
                before = clock.clock(0).launches
                out = func(*args, **(kwargs or {}))
                produced = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor) and o.numel()
                            and o.device.type == "npu"]
                if reaches_yours(name) and produced and clock.clock(0).launches == before and name not in silent:
                    silent.append(name)
                return out

        with Watch():
            self.run("npu", steps=2)
        return silent


def reaches_yours(name: str) -> bool:
    """Does the operator ``name`` run a kernel of the learner's: its own, or its family's ``out=`` form's?

    (``aten::mm`` reaches a learner's ``aten::mm.out`` through PyTorch's structured kernel.)"""
    base = name.split(".")[0]
    return any(op == name or op.split(".")[0] == base for op in bare.yours())


def train_check(t: Tester, training: Training, ops: list[str]) -> None:
    """Train on the CPU and, in a forked child, on the npu; compare losses, weights and buffers; find silent kernels."""
    from torch.utils.flop_counter import FlopCounterMode

    from ..grading import forked

    started(ops)
    with FlopCounterMode(display=False) as counter:
        want = training.run("cpu")
    matrix_flops = float(counter.get_total_flops())
    limit = device.case_limit(TIMEOUT)
    title = f"{training.steps} training steps of {training.what} on npu"
    try:
        got = forked.call_forked(training.run_on_npu, limit)
    except forked.ChildTimeout:
        t.expect(title, False, expected=f"done within {limit:g} s", got="did not finish (a kernel that never returns?)")
        return
    except Exception as exc:  # noqa: BLE001 - the learner's kernels raised
        text = forked.trimmed(exc) or str(exc)
        if STUB_MESSAGE in text:
            raise NotStarted("your kernels still raise NotImplementedError") from None
        t.expect(title, False, expected="no error",
                 got=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}",
                 hint="coverage(model, x) lists the operators that still need a kernel")
        return
    if not isinstance(got, dict):
        t.expect("the run came back", False, got=str(got))
        return
    losses = got["losses"]
    ok = len(losses) == training.steps and all(abs(a - b) <= 1e-4 * max(1.0, abs(b))
                                               for a, b in zip(losses, want["losses"]))
    t.expect(f"the losses of {training.steps} steps match the CPU's to 1e-4", ok,
             expected=", ".join(f"{v:.4f}" for v in want["losses"]), got=", ".join(f"{v:.4f}" for v in losses),
             hint=("your kernel for " + got["wrong"][0] + " differs from the CPU: " + got["wrong"][1])
             if got["wrong"] else "each check of this notebook tests one family of kernels: run them first")
    worst, where = 0.0, ""
    for k, v in want["state"].items():
        d = float((got["state"][k].double() - v.double()).abs().max()) if v.numel() else 0.0
        if d > worst:
            worst, where = d, k
    t.expect("the weights and buffers after training match the CPU's to 1e-4", worst <= 1e-4,
             expected="max |npu - cpu| <= 1e-4",
             got="within 1e-4" if worst <= 1e-4 else f"max |npu - cpu| = {worst:.3g} (in {where})",
             hint=training.optimizer_hint)
    low, high = 0.9 * matrix_flops, 2.0 * matrix_flops
    t.expect("your kernels report the step's arithmetic to the device (the flops of their launches)",
             low <= got["flops"] <= high,
             expected=f"between {low / 1e6:.1f} and {high / 1e6:.1f} MFLOP (torch.utils.flop_counter counts "
                      f"{matrix_flops / 1e6:.1f} MFLOP of matrix products and convolutions, forward and backward)",
             got=f"{got['flops'] / 1e6:.1f} MFLOP",
             hint="each launch's flops= is the arithmetic its kernel did (2 * M * N * K for a matrix product, the same "
                  "for each gradient); the simulated clock costs a kernel by it, so a kernel reported as free makes "
                  "every time on the clock wrong")
    t.expect("every kernel of yours tells the device it ran (a launch on the simulated clock)", not got["silent"],
             expected="a launch for each call that writes an output", got=", ".join(got["silent"]) or "all launched",
             hint="call npu_lab.bringup.launch(name, inputs, outputs, flops) in each kernel, after it wrote its "
                  "output: without it the device's clock, the profiler and the launch counters never see the work")
