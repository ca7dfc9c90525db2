"""Find stream races: an operator that uses a tensor another stream has not finished with.

On a real accelerator, kernels on two streams run concurrently: a kernel on stream A that reads a
tensor a kernel on stream B writes must wait for B (``A.wait_stream(B)``, an event, or a
synchronize), or it reads the tensor before, during or after the write, differently from run to run.
The simulated NPU computes every kernel when it is launched, so its values never show such a race;
its clocks do. Every stream has its own simulated clock, and waiting for a stream moves the waiting
stream's clock past it. So an operator issued on stream A races with an earlier write on stream B
exactly when A's clock stands before the time B's write ends.

:func:`streamcheck` watches every operator on npu tensors (a ``TorchDispatchMode``, as PyTorch's CUDA
sanitizer, ``torch.cuda._sanitizer``, does): for each storage it remembers the last write (the stream,
and the time the write ends on that stream's clock) and the reads since, and raises
:class:`StreamRaceError` when an operator reads what another stream is still writing (read after
write) or writes what another stream is still reading or writing (write after read, write after write)::

    with npu_lab.streamcheck():
        side = torch.npu.Stream()
        with torch.npu.stream(side):
            y = x * 2
        z = y + 1          # StreamRaceError: reads y, which stream 1 writes until t = ... us

Copies to the host read on the current stream, so ``y.cpu()`` without waiting for ``side`` is a race too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from . import native

_C = native.load()


class StreamRaceError(RuntimeError):
    """An operator used a tensor that another stream had not finished with (see :func:`streamcheck`)."""


@dataclass
class _Access:
    op: str
    stream: int
    until: float  #: the time the access ends on its stream's clock


@dataclass
class _Storage:
    write: _Access | None = None
    reads: list[_Access] = field(default_factory=list)


def _op_name(func: Any) -> str:
    overload = func._overloadname
    return func._schema.name + ("" if overload == "default" else f".{overload}")


def _npu_tensors(values: Any) -> list[torch.Tensor]:
    return [v for v in tree_flatten(values)[0] if isinstance(v, torch.Tensor) and v.device.type == "npu"]


class streamcheck(TorchDispatchMode):  # noqa: N801 - used like a function, as memcheck is
    """Raise :class:`StreamRaceError` when an operator on npu tensors races with another stream's access.

    Use it as a context manager around the code under test. ``races`` lists the races found when
    ``raise_on_race=False`` (each a message), for a report instead of an error.
    """

    def __init__(self, raise_on_race: bool = True) -> None:
        super().__init__()
        self.raise_on_race = raise_on_race
        self.races: list[str] = []
        self._storages: dict[tuple[int, int], _Storage] = {}

    @staticmethod
    def _key(t: torch.Tensor) -> tuple[int, int]:
        return (t.device.index or 0, t.untyped_storage().data_ptr())

    def _race(self, message: str) -> None:
        self.races.append(message)
        if self.raise_on_race:
            raise StreamRaceError(message + ". Make the stream wait first: "
                                  "torch.npu.current_stream().wait_stream(other), or an event recorded on the "
                                  "other stream and waited for on this one")

    def _check(self, op: str, device: int, stream: int, tensors: list[torch.Tensor], written: list[bool]) -> None:
        # an operator issued now starts when its stream is free, and not before the host issues it
        now = max(_C.stream_time(device, stream), _C.host_time())
        for t, writes in zip(tensors, written):
            s = self._storages.get(self._key(t))
            if s is None:
                continue
            w = s.write
            if w is not None and w.stream != stream and w.until > now + 1e-9:
                self._race(f"{op} on stream {stream} {'writes' if writes else 'reads'} a tensor of shape "
                           f"{tuple(t.shape)} that {w.op} on stream {w.stream} writes until t = {w.until:.2f} us; "
                           f"stream {stream} stands at t = {now:.2f} us")
            if writes:
                for r in s.reads:
                    if r.stream != stream and r.until > now + 1e-9:
                        self._race(f"{op} on stream {stream} writes a tensor of shape {tuple(t.shape)} that "
                                   f"{r.op} on stream {r.stream} reads until t = {r.until:.2f} us; stream {stream} "
                                   f"stands at t = {now:.2f} us")
                        break

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns):
            return func(*args, **kwargs)  # a view: it touches no data (what is done through it is checked)
        inputs = _npu_tensors((args, kwargs))
        if not inputs:
            out = func(*args, **kwargs)
            self._record(_op_name(func), [], _npu_tensors(out))
            return out
        op = _op_name(func)
        device = inputs[0].device.index or 0
        stream = _C.current_stream(device)
        written = self._written(func, args, kwargs)
        self._check(op, device, stream, inputs, [any(t is w for w in written) for t in inputs])
        out = func(*args, **kwargs)
        outputs = [t for t in _npu_tensors(out) if not any(t is i for i in inputs)]
        self._record(op, [t for t in inputs if not any(t is w for w in written)], written + outputs)
        return out

    @staticmethod
    def _written(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        """The tensor arguments the operator's schema says it writes (in place, or ``out=``)."""
        written: list[torch.Tensor] = []
        for i, arg in enumerate(func._schema.arguments):
            if arg.alias_info is None or not arg.alias_info.is_write:
                continue
            value = kwargs.get(arg.name, args[i] if i < len(args) and not arg.kwarg_only else None)
            written += _npu_tensors(value)
        return written

    def _record(self, op: str, read: list[torch.Tensor], wrote: list[torch.Tensor]) -> None:
        for t in read + wrote:
            device = t.device.index or 0
            stream = _C.current_stream(device)
            access = _Access(op, stream, _C.stream_time(device, stream))
            s = self._storages.setdefault(self._key(t), _Storage())
            if any(t is w for w in wrote):
                s.write, s.reads = access, []
            else:
                s.reads = [r for r in s.reads if r.stream != stream] + [access]
