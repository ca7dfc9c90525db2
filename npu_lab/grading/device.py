"""Grading a learner's npu kernels (the bring-up track): every case against the CPU, the culprit named.

The answer to a bring-up exercise is not a function in the notebook but the state of the device: the kernels
the learner registered for ``npu``. A check therefore calls PyTorch operators on npu tensors and compares
with the CPU, case by case (:class:`OpCase`): hidden shapes, non-contiguous and broadcast layouts, empty
tensors, dtypes the CPU rejects (the npu must reject them with the same kind of error), forward and
backward, each under :class:`npu_lab.memcheck` (a write past a tensor's storage fails the case).

When a case fails, :class:`Blame` says which of the learner's kernels was wrong: it watches every operator
that reaches a kernel of the learner's, runs the same operator on CPU copies of its inputs, and names the
first one whose result differs (a wrong ``addmm`` inside ``F.linear``'s backward is named as ``addmm``).

The cases run in a forked copy of the notebook's process (:func:`run_cases`), which is killed when it
runs out of time: a numba kernel that never returns cannot be interrupted, but its process can. The bare
device uses numba's ``workqueue`` threading layer so that parallel kernels run in such a child (GNU
OpenMP refuses to run after a fork).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from ..device import bare
from . import forked, guard, values
from .tester import STUB_MESSAGE, Tester, first_failure_only


@dataclass
class OpCase:
    """One call of a PyTorch function, on the CPU and on the npu, compared.

    ``make()`` builds the inputs on the CPU (from a seed of its own); ``layout(*args)`` makes views of them
    (a transpose, a slice) and is applied on each device after the move, so the npu sees the same strides.
    ``grad``: the floating inputs require grad and the gradients of ``(out * w).sum()`` (``w`` fixed random)
    are compared too. ``op``: the operator the case is about, for the message.
    """

    description: str
    op: str
    make: Callable[[], Sequence[Any]]
    fn: Callable[..., Any]
    layout: Callable[..., Sequence[Any]] | None = None
    grad: bool = False
    hidden: bool = False
    rtol: float = 1e-4
    atol: float = 1e-5
    hint: str = ""


@dataclass
class Property:
    """A case with no CPU result to compare with (a random operator): ``test()`` returns "" or what is wrong.

    It runs in the child as an :class:`OpCase` does, under ``memcheck``; ``expected`` says what a pass means.
    An exception from ``test()`` fails the case with the error's first line.
    """

    description: str
    op: str
    test: Callable[[], str]
    expected: str
    hidden: bool = False
    hint: str = ""
    #: watch every operator against the CPU (which copies each result to the host); off for a test that
    #: measures the device's copies and allocations itself
    blame: bool = True


@dataclass
class CaseOutcome:
    """What one case found (plain data: it comes back from the forked child)."""

    description: str
    op: str
    passed: bool
    expected: str = ""
    got: str = ""
    hint: str = ""
    hidden: bool = False
    error: str = ""
    #: Did a kernel of the learner's run in this case (a case that expects PyTorch's error may stop before)?
    reached: bool = False

    def as_tuple(self) -> tuple:
        return (self.description, self.op, self.passed, self.expected, self.got, self.hint, self.hidden, self.error,
                self.reached)


def _to_npu(x: Any) -> Any:
    return x.detach().to("npu") if isinstance(x, torch.Tensor) else x


def _clone_cpu(x: Any) -> Any:
    return x.detach().clone() if isinstance(x, torch.Tensor) else x


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"tensor{tuple(x.shape)} {str(x.dtype).removeprefix('torch.')}"
    if isinstance(x, (list, tuple)):
        return "(" + ", ".join(_describe(v) for v in x) + ")"
    return type(x).__name__


def _first_difference(got: Any, want: Any, rtol: float, atol: float) -> str:
    """"" when ``got`` (npu) matches ``want`` (CPU), else what differs."""
    g, _ = tree_flatten(got)
    w, _ = tree_flatten(want)
    if len(g) != len(w):
        return f"{len(g)} results, expected {len(w)}"
    for i, (a, b) in enumerate(zip(g, w)):
        where = f"result {i}: " if len(w) > 1 else ""
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"{where}a {type(a).__name__}, expected a tensor"
            if type(a) is not torch.Tensor:
                return f"{where}a {type(a).__name__} (a tensor subclass), expected a plain tensor"
            if a.device.type != "npu":
                return f"{where}on {a.device}, expected on npu"
            if tuple(a.shape) != tuple(b.shape):
                return f"{where}shape {tuple(a.shape)}, expected {tuple(b.shape)}"
            if a.dtype != b.dtype:
                return f"{where}dtype {a.dtype}, expected {b.dtype}"
            a = a.detach().cpu()
            if b.dtype.is_floating_point or b.dtype.is_complex:
                if not values.allclose(a, b.detach(), rtol=rtol, atol=atol, equal_nan=True):
                    d = torch.nan_to_num((a.double() - b.double()).abs(), nan=float("inf"))
                    return f"{where}values differ: max |npu - cpu| = {d.max().item():.3g}"
            elif not values.equal(a, b.detach()):
                return f"{where}values differ"
        elif isinstance(b, (int, float, bool)) and type(a) is not type(b):
            return f"{where}a {type(a).__name__}, expected a {type(b).__name__}"
        elif isinstance(b, (int, bool)) and a != b:
            return f"{where}{a!r}, expected {b!r}"
    return ""


class Blame(TorchDispatchMode):
    """Record, for every operator that reaches a learner's npu kernel, whether it matches the CPU.

    Each such call runs on CPU copies of its inputs too; :attr:`first_wrong` is the first operator whose
    npu result differed (values, shape or dtype), :attr:`ran` every learner operator that ran.
    """

    def __init__(self, rtol: float = 1e-4, atol: float = 1e-5) -> None:
        super().__init__()
        self.rtol, self.atol = rtol, atol
        self.ran: list[str] = []
        self.first_wrong: tuple[str, str] | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name + ("" if func._overloadname == "default" else f".{func._overloadname}")
        flat = tree_flatten((args, kwargs))[0]
        on_npu = any(isinstance(t, torch.Tensor) and t.device.type == "npu" for t in flat)
        if not on_npu or bare.owner(name) != "yours":
            return func(*args, **kwargs)
        if name not in self.ran:
            self.ran.append(name)
        cpu_args, cpu_kwargs = tree_map(lambda t: t.detach().cpu().clone() if isinstance(t, torch.Tensor) else t,
                                        (args, kwargs))
        out = func(*args, **kwargs)
        if self.first_wrong is None:
            try:
                with torch.no_grad():
                    ref = func(*cpu_args, **cpu_kwargs)
            except Exception:  # noqa: BLE001 - the CPU refuses: the npu succeeding is not this check's business
                return out
            why = _first_difference(out, ref, self.rtol, self.atol)
            if why:
                self.first_wrong = (name, why)
        return out


def _run_one(case: OpCase, memcheck_on: bool = True) -> CaseOutcome:
    """Run ``case`` (in the child): the CPU first, then the npu, and compare."""
    from ..device.memcheck import MemcheckError, memcheck

    result = CaseOutcome(case.description, case.op, False, hint=case.hint, hidden=case.hidden)
    torch.manual_seed(0)
    base = list(case.make())
    cpu = [_clone_cpu(a) for a in base]
    npu = [_to_npu(a) for a in base]
    if case.grad:
        for group in (cpu, npu):
            for a in group:
                if isinstance(a, torch.Tensor) and a.is_floating_point():
                    a.requires_grad_(True)
    leaves_cpu, leaves_npu = list(cpu), list(npu)
    if case.layout is not None:
        cpu, npu = list(case.layout(*cpu)), list(case.layout(*npu))
    # the CPU: the reference (or the error the npu must give too)
    try:
        want = case.fn(*cpu)
        want_grads = None
        if case.grad:
            outs = [o for o in tree_flatten(want)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
            gen = torch.Generator().manual_seed(1)
            weights = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]
            sum((o * w).sum() for o, w in zip(outs, weights)).backward()
            want_grads = [a.grad for a in leaves_cpu if isinstance(a, torch.Tensor) and a.requires_grad]
        cpu_error = None
    except Exception as exc:  # noqa: BLE001 - PyTorch's own error: the npu must raise the same kind
        cpu_error = exc
    blame = Blame(case.rtol, case.atol)
    try:
        with memcheck() if memcheck_on else _nothing(), blame:
            got = case.fn(*npu)
            if cpu_error is None and case.grad:
                outs = [o for o in tree_flatten(got)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
                if len(outs) != len(weights):
                    raise _Mismatch(f"{len(outs)} outputs that require grad, expected {len(weights)}")
                sum((o * w.to("npu")).sum() for o, w in zip(outs, weights)).backward()
            if cpu_error is None:
                torch.npu.synchronize()
    except MemcheckError as exc:
        result.expected, result.got = "no write outside a tensor's storage", guard.safe_text(exc, str, limit=300)
        result.error = _blamed(blame)
        return _done(result, blame)
    except _Mismatch as exc:
        result.expected, result.got = "the CPU's outputs", str(exc)
        return _done(result, blame)
    except Exception as exc:  # noqa: BLE001
        # a stub's NotImplementedError is not PyTorch's error, even where that is a RuntimeError (its base class)
        if cpu_error is not None and isinstance(exc, type(cpu_error)) and STUB_MESSAGE not in str(exc):
            result.passed = True
            result.expected = f"{type(cpu_error).__name__} (as on the CPU)"
            result.got = type(exc).__name__
            return _done(result, blame)
        text = guard.safe_text(exc, str, limit=300).splitlines()[0] if str(exc) else ""
        result.got = f"{type(exc).__name__}: {text}"
        result.expected = (f"{type(cpu_error).__name__}, as the CPU raises" if cpu_error is not None
                           else "the CPU's result")
        result.error = _blamed(blame)
        return _done(result, blame)
    if cpu_error is not None:
        result.expected = f"{type(cpu_error).__name__}, as the CPU raises: {str(cpu_error).splitlines()[0][:160]}"
        result.got = "no error: " + _describe(got)
        return _done(result, blame)
    why = _first_difference(got, want, case.rtol, case.atol)
    if not why and case.grad:
        grads = [a.grad for a in leaves_npu if isinstance(a, torch.Tensor) and a.requires_grad]
        for i, (g, w) in enumerate(zip(grads, want_grads)):
            if (g is None) != (w is None):
                why = f"gradient of input {i}: {'missing' if g is None else 'present'}, expected " \
                      f"{'none' if w is None else 'one'}"
            elif g is not None:
                why = _first_difference(g, w, case.rtol, case.atol)
                why = f"gradient of input {i}: {why}" if why else ""
            if why:
                break
    if why:
        result.expected, result.got = "the CPU's result" + (" and gradients" if case.grad else ""), why
        result.error = _blamed(blame)
        return _done(result, blame)
    result.passed = True
    result.expected = result.got = "as the CPU" + (" (values and gradients)" if case.grad else "")
    return _done(result, blame)


def _run_property(case: Property, memcheck_on: bool = True) -> CaseOutcome:
    """Run a :class:`Property` (in the child)."""
    from ..device.memcheck import memcheck

    result = CaseOutcome(case.description, case.op, False, expected=case.expected, hint=case.hint,
                         hidden=case.hidden)
    blame = Blame()
    torch.manual_seed(0)
    try:
        with memcheck() if memcheck_on else _nothing(), blame if case.blame else _nothing():
            why = case.test()
            torch.npu.synchronize()
    except Exception as exc:  # noqa: BLE001 - the learner's kernel raised
        text = guard.safe_text(exc, str, limit=300).splitlines()[0] if str(exc) else ""
        result.got = f"{type(exc).__name__}: {text}"
        return _done(result, blame)
    result.passed = not why
    result.got = why or "as expected"
    return _done(result, blame)


def _done(result: CaseOutcome, blame: Blame) -> CaseOutcome:
    result.reached = bool(blame.ran) or STUB_MESSAGE in result.got
    return result


class _Mismatch(Exception):
    pass


class _nothing:  # noqa: N801
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _blamed(blame: Blame) -> str:
    if blame.first_wrong is not None:
        op, why = blame.first_wrong
        return f"your kernel for {op} gave a different result than the CPU's for the same inputs: {why}"
    if blame.ran:
        return "your kernels that ran: " + ", ".join(blame.ran[:8])
    return ""


def case_limit(default: float) -> float:
    """Seconds for all the cases of a device check: ``default``, or ``NPU_LAB_CHECK_TIMEOUT`` when it is set."""
    from .check import timeout_override

    return timeout_override() or default


def run_cases(cases: Sequence[OpCase | Property], timeout: float, memcheck_on: bool = True) -> list[CaseOutcome]:
    """Run every case in a forked child; on a timeout, the cases before the one that hung, then that one (with
    ``NPU_LAB_CHECK_FIRST_FAILURE=1``, the cases up to the first that fails)."""
    progress = tempfile.NamedTemporaryFile(prefix="npu_lab_case_", delete=False)  # noqa: SIM115
    progress.close()

    first_failure = first_failure_only()

    def child() -> list[tuple]:
        out = []
        for i, case in enumerate(cases):
            with open(progress.name, "w") as f:
                f.write(str(i))
            run = _run_property if isinstance(case, Property) else _run_one
            outcome = run(case, memcheck_on)
            out.append(outcome.as_tuple())
            if first_failure and not outcome.passed:
                break
        return out

    try:
        rows = forked.call_forked(child, timeout)
    except forked.ChildTimeout:
        try:
            stuck = int(open(progress.name).read() or 0)
        except (OSError, ValueError):
            stuck = 0
        done = [CaseOutcome(c.description, c.op, False, hint=c.hint, hidden=c.hidden,
                            error="not run: an earlier case did not finish") for c in cases]
        done[stuck].error = (f"did not finish within {timeout:g} s (all cases together): a kernel that never "
                             "returns? The process running it was stopped")
        return done[: stuck + 1]
    finally:
        os.unlink(progress.name)
    return [CaseOutcome(*row) for row in rows]


def record(t: Tester, outcomes: Sequence[CaseOutcome]) -> None:
    """Write the outcomes to the check (each case's operator named in its line)."""
    for o in outcomes:
        t.expect(f"{o.op}: {o.description}", o.passed, expected=o.expected, got=o.got,
                 hint=(o.error + ("; " if o.error and o.hint else "") + o.hint) if not o.passed else o.hint,
                 hidden=o.hidden)


def require_kernels(ops: Sequence[str]) -> list[str]:
    """The operators of ``ops`` with no npu kernel of the learner's (their names as given)."""
    have = set(bare.yours())
    return [op for op in ops if not any(h == op or h.startswith(op + ".") for h in have)]
