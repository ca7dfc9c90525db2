"""The learner's kernel libraries: ``torch.library.Library`` objects the lab can find, replace and set aside.

A bring-up notebook registers kernels the way every PyTorch backend does::

    lib = npu_lab.bringup.library("mlp")          # a torch.library.Library("aten", "IMPL")
    lib.impl("mm", my_mm, "PrivateUse1")

The object is PyTorch's own ``Library`` (a subclass that remembers what it registered). The name makes
re-running a cell safe: asking for ``library("mlp")`` again destroys the library of that name first, so the
cell's new kernels replace its old ones instead of piling up beside them. The grading uses the memory of what
each library registered to set the learner's kernels aside for a moment (:func:`step_aside`), for example to
time the lab's shipped kernels on the same step, and to put them back exactly (:func:`step_back`).
"""

from __future__ import annotations

import dis
import functools
import inspect
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass
class _Impl:
    op: str  #: as given: "mm", "add.Tensor", "aten::mm"
    fn: Callable
    key: str
    with_keyset: bool


#: Held while a learner's npu kernel runs. The device runs one kernel at a time (as a stream does), and the bare
#: device's numba threading layer (``workqueue``, chosen because the checks fork) aborts the whole process when two
#: host threads launch parallel kernels at once: PyTorch's device tests do that (torch_openreg's
#: ``test_concurrent_device_operations``). Re-entrant, because a kernel may call operators that run other kernels.
DEVICE_QUEUE = threading.RLock()


def _serialized(fn: Callable) -> Callable:
    """``fn`` run under :data:`DEVICE_QUEUE`, and never traced by Dynamo (see
    :func:`npu_lab._torch_private.dynamo_disabled`)."""
    from .._torch_private import dynamo_disabled

    @functools.wraps(fn)
    def kernel(*args, **kwargs):
        with DEVICE_QUEUE:
            return fn(*args, **kwargs)

    return dynamo_disabled(kernel)


class LearnerLibrary(torch.library.Library):
    """``torch.library.Library`` that keeps a list of its ``impl`` calls (see :func:`library`)."""

    def __init__(self, name: str, ns: str, kind: str, dispatch_key: str = "") -> None:
        super().__init__(ns, kind, dispatch_key)
        self.name = name
        self.impls: list[_Impl] = []
        self.destroyed = False

    def impl(self, op_name, fn, dispatch_key="", *, with_keyset=False, allow_override=True):  # noqa: D102
        key = dispatch_key or self.dispatch_key
        entry = _Impl(op_name if isinstance(op_name, str) else str(op_name), fn, key, with_keyset)
        with warnings.catch_warnings():
            if key == "PrivateUse1" and _qualified(entry, self.ns) in _learners_ops():
                # a later milestone replacing a kernel of an earlier one: the latest registration wins (and
                # destroying its library brings the earlier one back); PyTorch's warning says nothing new here
                warnings.filterwarnings("ignore", message=r"(?s).*Overriding a previously registered kernel")
            kernel = _serialized(fn) if key == "PrivateUse1" and callable(fn) else fn
            super().impl(op_name, kernel, dispatch_key, with_keyset=with_keyset, allow_override=allow_override)
        self.impls.append(entry)

    def qualified(self) -> list[str]:
        """The operators this library gave a PrivateUse1 kernel, as ``"aten::add.Tensor"``."""
        return [_qualified(i, self.ns) for i in self.impls if i.key == "PrivateUse1"]

    def _destroy(self) -> None:
        if not self.destroyed:
            self.destroyed = True
            super()._destroy()


#: name -> the live library of that name
LIBRARIES: dict[str, LearnerLibrary] = {}


def _qualified(entry: _Impl, ns: str) -> str:
    return (entry.op if "::" in entry.op else f"{ns}::{entry.op}").removesuffix(".default")


def _learners_ops() -> set[str]:
    return {op for lib in LIBRARIES.values() if not lib.destroyed for op in lib.qualified()}


def library(name: str, ns: str = "aten", kind: str = "IMPL") -> LearnerLibrary:
    """A ``torch.library.Library(ns, kind)`` for your npu kernels, named so that re-running its cell replaces it.

    Asking again for a name destroys that name's previous library (and so the kernels it registered) first.
    Use one name per notebook section or module, e.g. ``library("mlp")``, ``library("cnn")``. For operators of
    your own (a fused kernel your compile pass emits) use ``kind="DEF"`` or ``"FRAGMENT"`` with your namespace.
    """
    if not isinstance(name, str) or not name:
        raise TypeError("library(name): name is a non-empty str, e.g. library('mlp')")
    old = LIBRARIES.pop(name, None)
    if old is not None:
        old._destroy()
    lib = LIBRARIES[name] = LearnerLibrary(name, ns, kind)
    return lib


def _stub_template(*args, **kwargs):
    raise NotImplementedError("YOUR CODE HERE")


def _instructions(code) -> list[tuple[str, object]]:
    return [(i.opname, i.argval) for i in dis.get_instructions(code) if i.opname not in ("RESUME", "CACHE", "NOP")]


_STUB = _instructions(_stub_template.__code__)


def is_stub(fn: Callable) -> bool:
    """Whether ``fn`` is still an exercise notebook's stub: its whole body ``raise NotImplementedError("YOUR CODE
    HERE")`` (a docstring and comments aside)."""
    code = getattr(inspect.unwrap(fn), "__code__", None) if callable(fn) else None
    return code is not None and _instructions(code) == _STUB


def untouched_stubs(ops: list[str]) -> bool:
    """Whether the learner registered npu kernels for ``ops`` ("aten::neg.out", or a name without its overload
    for every overload) and every one of them is still a stub (:func:`is_stub`): nothing of theirs to grade yet."""
    kernels = [entry.fn for lib in LIBRARIES.values() if not lib.destroyed for entry in lib.impls
               if entry.key == "PrivateUse1"
               and any(_qualified(entry, lib.ns) == op or _qualified(entry, lib.ns).startswith(op + ".") for op in ops)]
    return bool(kernels) and all(is_stub(fn) for fn in kernels)


def forget(name: str) -> None:
    """Destroy the library ``name`` (its kernels leave the dispatcher)."""
    old = LIBRARIES.pop(name, None)
    if old is not None:
        old._destroy()


@dataclass
class Aside:
    """Libraries taken out by :func:`step_aside`, with what they had registered."""

    entries: list[tuple[str, str, str, str, list[_Impl]]] = field(default_factory=list)


def step_aside(ops: list[str]) -> Aside:
    """Take out every learner library that registered one of ``ops`` (for PrivateUse1) until :func:`step_back`."""
    wanted = {o.removesuffix(".default") for o in ops}
    aside = Aside()
    for name, lib in list(LIBRARIES.items()):
        # libraries that define operators stay: taking them out would take the operators' schemas too
        if lib.destroyed or lib.kind != "IMPL" or not wanted & set(lib.qualified()):
            continue
        aside.entries.append((name, lib.ns, lib.kind, lib.dispatch_key, list(lib.impls)))
        lib._destroy()
        del LIBRARIES[name]
    return aside


def step_back(aside: Aside | object) -> None:
    """Register again, under their names, the libraries :func:`step_aside` took out."""
    if not isinstance(aside, Aside):
        return
    for name, ns, kind, key, impls in aside.entries:
        lib = LIBRARIES[name] = LearnerLibrary(name, ns, kind, key)
        for i in impls:
            lib.impl(i.op, i.fn, i.key, with_keyset=i.with_keyset)
    aside.entries = []
