"""Log every ATen call with a ``TorchDispatchMode``, grouped by phase, and show it compactly.

The dispatcher has a key named ``Python``. While a :class:`TorchDispatchMode` is active, that key
(with ``PythonTLSSnapshot``) is in the thread-local include set, so every operator call, after
autograd and ``ADInplaceOrView`` have done their part, reaches the mode's ``__torch_dispatch__``
with the operator and its arguments. The mode may look, change or replace the call; calling
``func(*args, **kwargs)`` inside it continues the walk to the backend kernel. A tensor subclass
with its own ``__torch_dispatch__`` gets the same call for every operator that involves one of
its instances, because such tensors carry the ``Python`` key in their own key set.

:class:`DispatchLog` is such a mode. It records each call's operator and the current *phase*
(``forward``, ``backward``, ``optimizer``, or whatever you name with :meth:`DispatchLog.phase`),
and renders the counts per operator and phase as a small HTML table with bars instead of a
hundreds-of-lines dump. :func:`log_training_step` runs one training step under it.
:class:`LoggingTensor` is the smallest useful tensor subclass that does the same per tensor.
:func:`mode_stack_during` lists the dispatch modes active while a function runs, which is how
``make_fx``, ``FakeTensorMode`` and functionalization show themselves to be modes too.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack
from torch.utils._pytree import tree_flatten, tree_map

__all__ = ["DispatchLog", "LoggedCall", "LoggingTensor", "log_training_step", "mode_stack_during",
           "op_name"]


def op_name(func: torch._ops.OpOverload) -> str:
    """Short name of an ATen overload: ``aten.add.Tensor`` -> ``add.Tensor``, ``aten.relu.default`` -> ``relu``."""
    packet = func.overloadpacket.__name__
    ns = func.namespace
    name = packet if func._overloadname == "default" else f"{packet}.{func._overloadname}"
    return name if ns == "aten" else f"{ns}::{name}"


@dataclass(frozen=True)
class LoggedCall:
    """One operator call that reached the ``Python`` dispatch key."""

    phase: str
    op: str
    devices: tuple[str, ...]


class DispatchLog(TorchDispatchMode):
    """A ``TorchDispatchMode`` that records every ATen call, tagged with the current phase.

    Use it as a context manager around any code; switch the phase label with
    ``with log.phase("backward"): ...``. ``log.counts()`` gives per-phase ``Counter``s of
    operator names, ``log.summary()`` one line per phase, and the object itself renders as a
    compact HTML table in a notebook.
    """

    def __init__(self, phase: str = "main") -> None:
        super().__init__()
        self.calls: list[LoggedCall] = []
        self.current_phase = phase

    @contextmanager
    def phase(self, name: str) -> Iterator[DispatchLog]:
        """Label the calls made inside the ``with`` block as phase ``name``."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"a phase name must be a non-empty str, got {name!r}")
        previous, self.current_phase = self.current_phase, name
        try:
            yield self
        finally:
            self.current_phase = previous

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        devices = tuple(sorted({str(t.device) for t in tree_flatten((args, kwargs))[0]
                                if isinstance(t, torch.Tensor)}))
        self.calls.append(LoggedCall(self.current_phase, op_name(func), devices))
        return func(*args, **kwargs)

    # ---- reading the log -------------------------------------------------------------------
    def phases(self) -> list[str]:
        """Phase names in the order they first appeared."""
        return list(dict.fromkeys(c.phase for c in self.calls))

    def counts(self) -> dict[str, Counter]:
        """For each phase, how many times each operator was called."""
        out: dict[str, Counter] = {p: Counter() for p in self.phases()}
        for c in self.calls:
            out[c.phase][c.op] += 1
        return out

    def devices(self) -> set[str]:
        """Every device an argument of a logged call was on."""
        return {d for c in self.calls for d in c.devices}

    def summary(self) -> str:
        """One line per phase: number of calls and of distinct operators, the most frequent ones."""
        lines = []
        for phase, counter in self.counts().items():
            top = ", ".join(f"{op} x{n}" for op, n in counter.most_common(2))
            lines.append(f"{phase:<10} {sum(counter.values()):>4} calls, {len(counter):>3} distinct operators"
                         f"  (most: {top})")
        lines.append(f"{'total':<10} {len(self.calls):>4} calls on {', '.join(sorted(self.devices())) or '-'}")
        return "\n".join(lines)

    def table_html(self, max_rows: int = 40) -> str:
        """Operators (rows) by phase (columns), with bars; the most-called operators first."""
        counts = self.counts()
        phases = list(counts)
        total = Counter()
        for counter in counts.values():
            total.update(counter)
        biggest = max(total.values(), default=1)
        colours = ["#93c5fd", "#fca5a5", "#86efac", "#fcd34d", "#c4b5fd", "#f9a8d4"]
        head = "".join(f"<th style='text-align:right'>{html.escape(p)}</th>" for p in phases)
        rows = []
        ordered = sorted(total, key=lambda op: (-total[op], op))
        for op in ordered[:max_rows]:
            cells = "".join(f"<td style='text-align:right'>{counts[p][op] or ''}</td>" for p in phases)
            bar = "".join(
                f"<span style='display:inline-block;height:10px;width:{160 * counts[p][op] / biggest:.0f}px;"
                f"background:{colours[i % len(colours)]}'></span>"
                for i, p in enumerate(phases) if counts[p][op])
            rows.append(f"<tr><td><code>{html.escape(op)}</code></td>{cells}"
                        f"<td style='text-align:right'><b>{total[op]}</b></td>"
                        f"<td style='text-align:left'>{bar}</td></tr>")
        if len(ordered) > max_rows:
            rest = len(ordered) - max_rows
            rows.append(f"<tr><td colspan='{len(phases) + 3}'><i>{rest} more operator(s)</i></td></tr>")
        legend = " ".join(f"<span style='background:{colours[i % len(colours)]};padding:0 6px'>"
                          f"{html.escape(p)}</span>" for i, p in enumerate(phases))
        foot = "".join(f"<td style='text-align:right'><b>{sum(counts[p].values())}</b></td>" for p in phases)
        return ("<table style='font-size:12px'><tr><th style='text-align:left'>operator</th>" + head
                + "<th style='text-align:right'>all</th><th style='text-align:left'>" + legend + "</th></tr>"
                + "".join(rows) + f"<tr><td><b>calls</b></td>{foot}<td style='text-align:right'>"
                f"<b>{len(self.calls)}</b></td><td></td></tr></table>")

    def _repr_html_(self) -> str:
        return self.table_html()

    def __repr__(self) -> str:
        return f"DispatchLog({len(self.calls)} calls)\n{self.summary()}" if self.calls else "DispatchLog(0 calls)"


def log_training_step(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor,
                      loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                      optimizer: torch.optim.Optimizer) -> DispatchLog:
    """Run one training step under a :class:`DispatchLog`, phases ``forward``, ``backward``, ``optimizer``.

    The forward includes the loss; ``optimizer.zero_grad()`` and ``optimizer.step()`` make the
    ``optimizer`` phase. The backward runs on autograd's own engine (for a non-CPU device, its
    worker thread); the mode still sees those calls, because autograd hands the thread-local
    dispatch state to the thread that runs the backward.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    log = DispatchLog()
    with log:
        with log.phase("forward"):
            loss = loss_fn(model(inputs), targets)
        with log.phase("backward"):
            loss.backward()
        with log.phase("optimizer"):
            optimizer.step()
            optimizer.zero_grad()
    return log


class LoggingTensor(torch.Tensor):
    """A wrapper tensor subclass that logs every ATen operator applied to it.

    ``LoggingTensor(t)`` wraps ``t`` (kept in ``.elem``). Its instances carry the ``Python``
    dispatch key, so any operator with one among its arguments calls
    :meth:`__torch_dispatch__`, which unwraps the arguments, runs the operator on the
    wrapped tensors, records the call in ``LoggingTensor.log`` and wraps the results again.
    """

    elem: torch.Tensor
    log: list[str] = []
    __slots__ = ["elem"]

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> LoggingTensor:
        if not isinstance(elem, torch.Tensor):
            raise TypeError(f"LoggingTensor wraps a tensor, got {type(elem).__name__}")
        r = torch.Tensor._make_wrapper_subclass(cls, elem.size(), strides=elem.stride(), dtype=elem.dtype,
                                                device=elem.device, requires_grad=elem.requires_grad)
        r.elem = elem
        return r

    def __repr__(self) -> str:
        return f"LoggingTensor({self.elem!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def unwrap(t: Any) -> Any:
            return t.elem if isinstance(t, LoggingTensor) else t

        def wrap(t: Any) -> Any:
            return LoggingTensor(t) if isinstance(t, torch.Tensor) and not isinstance(t, LoggingTensor) else t

        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        cls.log.append(op_name(func))
        return tree_map(wrap, out)


def mode_stack_during(fn: Callable[..., Any], *args: Any, tracer: Callable[..., Any] | None = None,
                      **kwargs: Any) -> list[list[str]]:
    """The stacks of dispatch modes active inside ``fn`` while ``tracer`` runs it.

    ``tracer(fn_that_records)`` must return something callable that calls the function it was
    given (``make_fx`` does, and so does ``aot_function``); without a tracer ``fn`` is simply
    called. A tracer may run ``fn`` more than once (AOTAutograd first runs it to collect
    metadata, then traces it): each distinct stack is listed once, in the order seen, each as
    the class names of its modes, outermost first.
    """
    seen: list[list[str]] = []

    def recording(*a: Any, **k: Any) -> Any:
        stack = [type(m).__name__ for m in _get_current_dispatch_mode_stack()]
        if stack not in seen:
            seen.append(stack)
        return fn(*a, **k)

    if tracer is None:
        recording(*args, **kwargs)
    else:
        tracer(recording)(*args, **kwargs)
    return seen
