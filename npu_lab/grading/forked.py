"""Run a piece of a check in a forked copy of this process, and bring back only plain data.

Some checks run the learner's code on several threads at once (chapter 9's ranks). A thread cannot be
killed: one that sleeps inside C code, blocks signals or spins in compiled code outlives any time limit
and keeps burning a core while later checks run. :func:`call_forked` runs such a piece in a child made
with ``fork()``: the child has everything the notebook defined (answers need not be importable), and
when it runs out of time it is killed, with every thread it started.

What comes back is data, never objects of the learner's: the child turns its result into nested tuples
of built-in values (tensors as dtype, shape and bytes) that :mod:`marshal` carries, and the parent
rebuilds only those. A value that is not plain data comes back as :class:`Unreturned`, naming its type.
An exception comes back as the same kind of exception (so a stub's ``NotImplementedError`` still means
"not started" and ``KeyboardInterrupt`` "interrupted"), carrying the traceback the learner should see,
trimmed in the child where the frames are.

Checked with torch 2.13 on Linux. Without ``fork`` (Windows) the piece runs in this process.
"""

from __future__ import annotations

import marshal
import os
import select
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import guard
from .values import NotPlain, plain

#: Bytes of tensor data a child may send back (a bigger tensor comes back as :class:`Unreturned`).
MAX_BYTES = 64 * 2 ** 20
#: How often the parent looks at the clock while it waits (the check's own timeout needs bytecode to run).
POLL = 0.05


@dataclass(frozen=True)
class Unreturned:
    """A value the child could not send back: not plain data (``why`` says what it was)."""

    why: str

    def __repr__(self) -> str:
        return f"<{self.why}, not plain data>"


class ChildError(Exception):
    """An exception raised in the child, of a kind the parent does not rebuild as itself."""


class ChildTimeout(TimeoutError):
    """The child did not finish in time and was killed, with every thread it started."""


def _from_child(base: type[BaseException]) -> type[BaseException]:
    return type(f"{base.__name__}FromChild", (base,), {"__module__": __name__,
                                                       "__doc__": f"A {base.__name__} raised in the child."})


#: Exceptions rebuilt as their own kind in the parent (subclasses that carry the child's trimmed traceback),
#: most specific first (a ``NotImplementedError`` is a ``RuntimeError`` too).
_BASES: tuple[type[BaseException], ...] = (NotImplementedError, KeyboardInterrupt, SystemExit, TimeoutError,
                                           ValueError, TypeError, RuntimeError)
_KINDS: dict[str, type[BaseException]] = {base.__name__: _from_child(base) for base in _BASES}


def trimmed(exc: BaseException) -> str | None:
    """The learner's view of an exception rebuilt from a child (its traceback was trimmed there), else ``None``."""
    text = getattr(exc, "_child_trimmed", None)
    return text if type(text) is str and (type(exc) is ChildError or type(exc) in _KINDS.values()) else None


# ---------------------------------------------------------------------------------------------
# values as marshal-able data, and back
# ---------------------------------------------------------------------------------------------

_ATOMS = {torch.dtype: "dtype", torch.device: "device", torch.layout: "layout", torch.memory_format: "format"}


def _encode(value: Any, budget: list[int]) -> tuple:
    """``value`` as nested tuples of built-in values (made plain first)."""
    cls = type(value)
    if cls not in (list, tuple, dict):  # the check's own containers are encoded item by item below
        try:
            value = plain(value)
        except NotPlain as exc:
            return ("?", str(exc))
        except RecursionError:
            return ("?", "a value nested too deeply")
        cls = type(value)
    if cls in (int, float, bool, str, bytes, complex, type(None)):
        return ("v", value)
    if cls in _ATOMS:
        return ("a", _ATOMS[cls], str(value))
    if cls is torch.Size:
        return ("S", tuple(value))
    if isinstance(value, torch.Tensor):
        t = value.detach()
        nbytes = t.numel() * t.element_size()
        if t.is_sparse or t.is_quantized or t.layout != torch.strided:
            return ("?", f"a {t.layout} tensor")
        if nbytes > budget[0]:
            return ("?", f"a tensor of {nbytes:,} bytes (too big to bring back)")
        budget[0] -= nbytes
        t = t.cpu().contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        return ("T", str(t.dtype).removeprefix("torch."), tuple(t.shape), raw)
    if cls is list or cls is tuple:
        return ("l" if cls is list else "t", tuple(_encode(v, budget) for v in value))
    if cls is dict:
        return ("d", tuple((_encode(k, budget), _encode(v, budget)) for k, v in value.items()))
    if cls in (set, frozenset):
        return ("s" if cls is set else "f", tuple(_encode(v, budget) for v in value))
    return ("?", f"a {guard.type_name(value)}")


def _decode(node: Any) -> Any:
    if type(node) is not tuple or not node or type(node[0]) is not str:
        raise ValueError("a malformed value from the child")
    tag = node[0]
    if tag == "v" and type(node[1]) in (int, float, bool, str, bytes, complex, type(None)):
        return node[1]
    if tag == "a":
        kind, text = node[1], node[2]
        if kind == "device":
            return torch.device(text)
        atom = getattr(torch, text.removeprefix("torch."), None)
        if type(atom) not in _ATOMS:
            raise ValueError(f"not a torch {kind}: {text!r}")
        return atom
    if tag == "S":
        return torch.Size([int(v) for v in node[1]])
    if tag == "T":
        dtype = getattr(torch, node[1], None)
        if type(dtype) is not torch.dtype:
            raise ValueError(f"not a dtype: {node[1]!r}")
        shape = tuple(int(v) for v in node[2])
        if not node[3]:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(node[3]), dtype=torch.uint8).view(dtype).reshape(shape)
    if tag in ("l", "t", "s", "f"):
        items = [_decode(v) for v in node[1]]
        return {"l": list, "t": tuple, "s": set, "f": frozenset}[tag](items)
    if tag == "d":
        return {_decode(k): _decode(v) for k, v in node[1]}
    if tag == "?":
        return Unreturned(str(node[1]))
    raise ValueError(f"a malformed value from the child (tag {tag!r})")


# ---------------------------------------------------------------------------------------------
# the call
# ---------------------------------------------------------------------------------------------

def _child(fn: Callable[[], Any], w: int) -> None:
    """In the child: run ``fn``, send back ``(kind, payload, output)``; never returns."""
    try:
        guard.become_child()  # what C code prints goes nowhere; Python's prints are captured below
        torch.set_num_threads(1)  # the parent's OpenMP pool did not come along
        out = guard.CappedOutput()
        sys.stdout = sys.stderr = out
        try:
            message = ("ok", _encode(fn(), [MAX_BYTES]))
        except BaseException as exc:  # noqa: BLE001 - sent to the parent
            name = next((base.__name__ for base in _BASES if isinstance(exc, base)), "")
            message = ("raised", (name, guard.safe_text(exc, str, limit=600), guard.trim(exc)))
        data = marshal.dumps((*message, out.text()))
        view = memoryview(data)
        while view:
            view = view[os.write(w, view):]
    finally:
        os._exit(0)


def call_forked(fn: Callable[[], Any], timeout: float) -> Any:
    """``fn()`` run in a forked child process, its result brought back as plain data.

    Raises :class:`ChildTimeout` when the child has not finished after ``timeout`` seconds (it is killed,
    every thread it started with it), the child's exception rebuilt (see the module's docstring) when
    ``fn`` raised, and :class:`ChildError` when the child died. What ``fn`` printed is printed here.
    An interruption of the wait (the check's own time limit, a ``KeyboardInterrupt``) kills the child too.
    """
    if not hasattr(os, "fork"):
        return fn()
    r, w = os.pipe()
    pid = -1
    chunks: list[bytes] = []
    reaped = False
    try:
        # The check's limit (or a Ctrl-C) that strikes while the child is forked, or killed and reaped below,
        # waits until that is done: it could otherwise leave the child running, or a zombie.
        with guard.held():
            try:
                pid = os.fork()
            except OSError:
                os.close(w)
                raise
            if pid == 0:
                os.close(r)
                _child(fn, w)
            os.close(w)
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise ChildTimeout(f"your code did not finish within {timeout:g} s; the process running it was stopped")
            if select.select([r], [], [], min(POLL, left))[0]:
                chunk = os.read(r, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        _, status = os.waitpid(pid, 0)
        reaped = True
    finally:
        guard.end_child(pid, r, reaped)  # first statement: nothing may run before it (see guard.held)
    return _outcome(status, chunks)


def _outcome(status: int, chunks: list[bytes]) -> Any:
    """What a child reported: its value, or its exception raised here (see :func:`call_forked`)."""
    if os.WIFSIGNALED(status) or not chunks:
        how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit status {os.WEXITSTATUS(status)}"
        raise ChildError(f"the process running your code died ({how}) before it could report")
    kind, payload, output = marshal.loads(b"".join(chunks))
    if output:
        sys.stdout.write(output)
    if kind == "ok":
        return _decode(payload)
    name, text, shown = payload
    exc = _KINDS.get(name, ChildError)(text)
    exc._child_trimmed = shown
    raise exc


def _raised(chunks: list[bytes]) -> bool:
    try:
        return marshal.loads(b"".join(chunks))[0] == "raised"
    except (EOFError, ValueError, TypeError):
        return False


def call_forked_all(fns: list[Callable[[], Any]], timeout: float) -> list[Any]:
    """``[fn() for fn in fns]``, each in a forked child of its own, all running at once (ranks of a job).

    Returns the values in order. When a child raises or dies, the others are stopped (a rank whose peer is
    gone would wait in its next collective until its own timeout) and that child's exception is raised here,
    as :func:`call_forked` raises it, with ``rank`` set to its index; :class:`ChildTimeout` when they are not
    all done after ``timeout`` seconds.
    """
    if not hasattr(os, "fork"):
        raise RuntimeError("running ranks as processes needs fork() (Linux or macOS)")
    pids: list[int] = []
    pipes: list[int] = []
    chunks: list[list[bytes]] = [[] for _ in fns]
    status: list[int | None] = [None] * len(fns)
    try:
        for fn in fns:
            r, w = os.pipe()
            with guard.held():
                try:
                    pid = os.fork()
                except OSError:
                    os.close(r)
                    os.close(w)
                    raise
                if pid == 0:
                    os.close(r)
                    for other in pipes:
                        os.close(other)
                    _child(fn, w)
                os.close(w)
                pids.append(pid)
                pipes.append(r)
        end = time.monotonic() + timeout
        open_ = set(range(len(fns)))
        failed: int | None = None
        while open_ and failed is None:
            left = end - time.monotonic()
            if left <= 0:
                late = ", ".join(str(i) for i in sorted(open_))
                raise ChildTimeout(f"rank {late} did not finish within {timeout:g} s; every rank was stopped")
            ready = select.select([pipes[i] for i in open_], [], [], min(POLL, left))[0]
            for i in sorted(open_):
                if pipes[i] not in ready:
                    continue
                chunk = os.read(pipes[i], 1 << 20)
                if chunk:
                    chunks[i].append(chunk)
                    continue
                open_.discard(i)
                _, status[i] = os.waitpid(pids[i], 0)
                if os.WIFSIGNALED(status[i]) or not chunks[i] or _raised(chunks[i]):
                    failed = i
                    break
    finally:
        for i, pid in enumerate(pids):  # the failed rank's peers, or all of them on a timeout or an interruption
            guard.end_child(pid, pipes[i], status[i] is not None)
    order = ([failed] if failed is not None else []) + list(range(len(fns)))
    values: list[Any] = [None] * len(fns)
    for i in order:
        try:
            values[i] = _outcome(status[i], chunks[i]) if status[i] is not None else None
        except BaseException as exc:
            exc.rank = i
            raise
    return values
