"""See the dispatcher at work: key sets, dispatch tables, and per-call key paths.

Everything here is read from PyTorch's real dispatcher state:

* a tensor's dispatch key set (``torch._C._dispatch_keys``);
* the thread-local include/exclude sets (``no_grad`` does not change them,
  ``inference_mode`` excludes the autograd keys);
* an operator's computed dispatch table (``torch._C._dispatch_dump_table``),
  which says for every key whether a kernel, a fallthrough or a fallback sits there;
* and which kernels actually ran: a ``TorchDispatchMode`` sees every operator
  that reaches the backends, and the NPU's kernels report themselves through
  the profiler hook.

From the key set and the table, :func:`key_path` reconstructs the walk the
dispatcher makes: from the highest-priority key down, skipping fallthroughs,
until a backend kernel (or a composite one) handles the call.

:func:`trace` builds each call's path from that call's own key set: its tensors' keys with the
thread-local include and exclude sets *in force when that call entered the dispatcher* (a snapshot
the dispatcher keeps, read through :mod:`npu_lab._torch_private`), so a ``no_grad``,
``inference_mode`` or ``autocast`` entered inside the traced function counts from the call where
it starts. One guard is set by a kernel the tracer cannot see: an autocast kernel casts the
arguments and calls its operator *again* with its own key excluded (``ExcludeDispatchKeyGuard`` in
``ATen/autocast_mode.h``). A call that reaches a backend is therefore never one that went through
an autocast kernel of its own operator; such an autocast key is left out of its path. (Where the
operator has no autocast kernel, the key stays in the path as a fallthrough, which the arrows of
:meth:`CallRecord.arrow` leave out: whether a kernel above excluded it then changes nothing drawn.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_ENTRY = re.compile(r"^(\w+): (.*?)(?: \[(.*)\])?$")
#: Keys that belong to the observer itself, never shown in a path.
_OBSERVER_KEYS = {"Python", "PythonTLSSnapshot", "PythonDispatcher", "PreDispatch"}
_BACKENDS = {"CPU", "CUDA", "PrivateUse1", "Meta", "MPS", "XLA", "Lazy", "XPU"}


def keys(keyset: torch._C.DispatchKeySet) -> list[str]:
    """The keys of a key set, highest priority first."""
    text = str(keyset)
    inner = text[text.index("(") + 1: text.rindex(")")]
    return [k.strip() for k in inner.split(",") if k.strip()][::-1]


def tensor_keys(t: torch.Tensor) -> list[str]:
    """A tensor's dispatch keys, highest priority first (e.g. AutogradPrivateUse1, ..., PrivateUse1)."""
    return keys(torch._C._dispatch_keys(t))


@dataclass
class TableEntry:
    key: str
    kind: str  # "kernel", "autograd kernel", "fallthrough", "backend fallback", ...
    registered_at: str


def dispatch_table(op: str | torch._ops.OpOverload) -> dict[str, TableEntry]:
    """An operator's computed dispatch table: runtime key -> what handles it."""
    name = op if isinstance(op, str) else _qualified(op)
    table = {}
    for line in torch._C._dispatch_dump_table(name).splitlines():
        m = _ENTRY.match(line.strip())
        if not m:
            continue
        key, where, kind = m.groups()
        if kind is None:
            kind = "fallthrough" if "fallthrough" in where else "kernel"
        if where.startswith("fallthrough"):
            kind = "fallthrough"
        table[key] = TableEntry(key, kind, where.replace("registered at ", ""))
    return table


@dataclass
class Step:
    key: str
    kind: str
    registered_at: str

    def __str__(self) -> str:
        return f"{self.key} [{self.kind}]"


def key_path(op: str | torch._ops.OpOverload, keyset: list[str],
             table: dict[str, TableEntry] | None = None) -> list[Step]:
    """The keys a call of ``op`` with ``keyset`` passes through, in order, ending at its kernel.

    ``table`` is ``op``'s dispatch table if the caller has it already (read now otherwise).
    """
    table = dispatch_table(op) if table is None else table
    steps: list[Step] = []
    for key in keyset:
        if key in _OBSERVER_KEYS:
            continue
        entry = table.get(key)
        if entry is None:
            continue
        if entry.kind == "fallthrough":
            steps.append(Step(key, "fallthrough", entry.registered_at))
            continue
        steps.append(Step(key, entry.kind, entry.registered_at))
        if key in _BACKENDS or "math" in entry.kind or "composite" in entry.kind.lower() \
                or key.startswith("Composite") or "backend fallback" in entry.kind:
            break
    return steps


def _qualified(op: torch._ops.OpOverload) -> str:
    name = op._schema.name
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


@dataclass
class CallRecord:
    """One operator call that reached the backends."""

    op: str
    devices: list[str]
    keyset: list[str]
    path: list[Step]
    kernel: str = ""  # the Python kernel that ran (npu), or the table's backend entry

    def arrow(self) -> str:
        shown = [s for s in self.path if s.kind != "fallthrough"]
        return " -> ".join(str(s.key) for s in shown)


@dataclass
class DispatchTrace:
    calls: list[CallRecord] = field(default_factory=list)

    def text(self) -> str:
        lines = []
        for c in self.calls:
            lines.append(f"{c.op:<32} {c.arrow():<58} {c.kernel}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = []
        for c in self.calls:
            path = " &rarr; ".join(
                f"<span style='color:{'#999' if s.kind == 'fallthrough' else '#000'}'>{s.key}</span>"
                for s in c.path)
            rows.append(f"<tr><td><code>{c.op}</code></td><td>{', '.join(c.devices)}</td><td>{path}</td>"
                        f"<td><code>{c.kernel}</code></td></tr>")
        return ("<table><tr><th>operator</th><th>device</th><th>dispatch keys (grey: fallthrough)</th>"
                "<th>kernel that ran</th></tr>" + "".join(rows) + "</table>")

    def __repr__(self) -> str:
        return self.text()


def _without_reissuing_autocast(order: list[str], table: dict[str, TableEntry]) -> list[str]:
    """``order`` without the autocast keys at which the operator has a kernel of its own (not a fallthrough).

    An autocast kernel never passes its call on: it casts the arguments and calls the operator again
    with its own key excluded. The call that goes on to a backend is that second one, whose key set
    lacks the autocast key, so the key is no step of it.
    """
    return [k for k in order if not (k.startswith("Autocast") and k in table and table[k].kind != "fallthrough")]


def call_keys(name: str, tensors: list[torch.Tensor], table: dict[str, TableEntry] | None = None) -> list[str]:
    """The key set a call of operator ``name`` on ``tensors`` had when it entered the dispatcher.

    What the dispatcher computes for each call: the tensors' keys, plus the thread-local include set,
    minus the thread-local exclude set, both as they were when this call entered (inside a
    ``TorchDispatchMode`` the current sets exclude every key above ``Python``; the dispatcher's
    snapshot of them is read instead). Highest priority first, without the observer's own keys.
    """
    from .._torch_private import dispatch_tls_on_entry

    ks = torch._C.DispatchKeySet(torch._C.DispatchKey.Undefined)
    for t in tensors:
        ks = ks | torch._C._dispatch_keys(t)
    include, exclude = dispatch_tls_on_entry()
    order = [k for k in keys((ks | include) - exclude) if k not in _OBSERVER_KEYS]
    return _without_reissuing_autocast(order, dispatch_table(name) if table is None else table)


class _Observer(TorchDispatchMode):
    def __init__(self, trace: DispatchTrace) -> None:
        super().__init__()
        self.trace = trace

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        from ..profiler import hooks

        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        name = _qualified(func)
        table = dispatch_table(name)
        order = call_keys(name, tensors, table)  # this call's own key set, not the one when the trace began
        rec = CallRecord(name, sorted({str(t.device) for t in tensors}), order, key_path(name, order, table))
        self.trace.calls.append(rec)
        ran: list[tuple[str, str]] = []
        previous = hooks.recorder
        hooks.recorder = _KernelSpy(ran, previous)
        try:
            out = func(*args, **kwargs)
        finally:
            hooks.recorder = previous
        own = [fn for op, fn in ran if op == name]
        if own:
            rec.kernel = own[0]
        elif rec.path:
            last = rec.path[-1]
            rec.kernel = f"{last.key} {last.kind} ({last.registered_at.split('/')[-1]})"
            if ran:
                rec.kernel += " -> calls " + ", ".join(op for op, _ in ran[:4])
        return out


class _KernelSpy:
    """Stands in for the profiler recorder to learn which npu Python kernel ran."""

    def __init__(self, ran: list[str], previous) -> None:
        self.ran = ran
        self.previous = previous

    def around_op(self, name, fn, args, kwargs):
        self.ran.append((name, f"{fn.__module__}.{fn.__qualname__}"))
        if self.previous is not None:
            return self.previous.around_op(name, fn, args, kwargs)
        return fn(*args, **kwargs)


def trace(fn, *args, **kwargs) -> DispatchTrace:
    """Run ``fn(*args, **kwargs)`` and record each operator's dispatch path and kernel.

    Every operator call that reaches a backend is listed, with the keys it walked: each call's path
    comes from that call's own key set (see :func:`call_keys`), so ``no_grad``, ``inference_mode`` or
    ``autocast`` switched on inside ``fn`` show from the first call they apply to.
    """
    result = DispatchTrace()
    with _Observer(result):
        fn(*args, **kwargs)
    return result
