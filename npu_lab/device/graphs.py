"""Graph capture and replay: ``torch.npu.NPUGraph`` and ``torch.npu.graph``, after ``torch.cuda``'s.

Issuing a kernel costs the host time (``cost_model.host_launch_us``: the framework's dispatch and
the driver's launch). A program of many small kernels is then *launch-bound*: the device waits
for the host. A captured graph removes that cost: the host issues the whole graph with one launch,
and the device runs its kernels back to back.

The semantics and the restrictions are those of ``torch.cuda.CUDAGraph``:

* capture runs on a **non-default stream** (``torch.npu.graph`` makes one); the work launched on
  the device during capture is recorded, not run on the clock;
* the graph owns the memory its work used (a private pool): the tensors made during capture stay
  allocated, at the same addresses, for every replay; replay writes the same output tensors;
* capturing does not run the work: tensors made before the capture (parameters, optimizer state,
  static inputs) are as they were when the capture ends;
* inputs are **static**: to run on new data, copy it into the tensors the capture read
  (``static_x.copy_(new_x)``) and replay;
* what synchronizes with the host cannot be captured: ``.item()``, ``.cpu()``, ``print(tensor)``,
  ``torch.npu.synchronize()``, copies from pageable memory. It raises a ``RuntimeError`` and
  ends the capture.

How the simulator replays: the capture records each ATen operator on npu tensors (with a
``TorchDispatchMode``) along with the tensors it read and wrote; replay runs those operators again
on the same tensors, inside one graph launch. (The simulator does run the kernels during capture, then
puts back what they wrote into memory from before the capture. The tensors the capture made hold
results already; on a real device they would not until the first replay, so do not rely on them.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from . import native
from .streams import Stream, current_stream, set_stream

_C = native.load()

_NOT_CAPTURABLE = "operation not permitted when stream is capturing"


@dataclass
class _Step:
    """One captured operator: run again on replay; ``outs`` are where its results must land."""

    func: Any
    args: tuple
    kwargs: dict
    outs: list[torch.Tensor | None]  # a functional result's captured tensor, or None (in place, view, other)

    def replay(self) -> None:
        result = self.func(*self.args, **self.kwargs)
        if not any(o is not None for o in self.outs):
            return
        fresh = [r for r in tree_flatten(result)[0]]
        _C.accounting_pause(True)  # writing into the static outputs is the simulator's bookkeeping
        try:
            for out, new in zip(self.outs, fresh):
                if out is not None and isinstance(new, torch.Tensor):
                    out.copy_(new)
        finally:
            _C.accounting_pause(False)


def _returns_alias(func: Any) -> list[bool]:
    """For each return of ``func``: whether it aliases an argument (in place, ``out=``, or a view)."""
    return [r.alias_info is not None for r in func._schema.returns]


def _is_view(func: Any) -> bool:
    return any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)


class _Recorder(TorchDispatchMode):
    """Records the operators of a capture; keeps memory from before the capture as it was.

    A real device does not run captured work, so capturing leaves every tensor made before the
    capture untouched (a training step's parameters, for instance). The simulator does run it: so
    before the first write into such a tensor's storage, the recorder keeps a copy of the storage,
    and puts it back when the capture ends.
    """

    def __init__(self, graph: NPUGraph) -> None:
        super().__init__()
        self.graph = graph
        self.made: set[int] = set()  # storages allocated during the capture
        self.kept: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # storage -> (its bytes, a copy)

    def _keep(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if t.device.type != "npu" or key in self.made or key in self.kept or storage.nbytes() == 0:
            return
        whole = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)
        _C.accounting_pause(True)
        try:
            self.kept[key] = (whole, whole.clone())
        finally:
            _C.accounting_pause(False)

    def restore(self) -> None:
        _C.accounting_pause(True)
        try:
            for whole, copy in self.kept.values():
                whole.copy_(copy)
        finally:
            _C.accounting_pause(False)
        self.kept.clear()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.graph._failed:  # the capture ended with an error: run, record nothing
            return func(*args, **kwargs)
        on_npu = any(isinstance(t, torch.Tensor) and t.device.type == "npu"
                     for t in tree_flatten((args, kwargs))[0])
        if on_npu and func._schema.is_mutable:
            for i, arg in enumerate(func._schema.arguments):
                if arg.alias_info is not None and arg.alias_info.is_write:
                    value = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
                    for t in tree_flatten(value)[0]:
                        if isinstance(t, torch.Tensor):
                            self._keep(t)
        try:
            result = func(*args, **kwargs)
        except RuntimeError as exc:
            if _NOT_CAPTURABLE in str(exc):
                self.graph._fail()
                raise RuntimeError(
                    f"{func} cannot be captured in an NPU graph: it waits for the device on the host "
                    f"({_NOT_CAPTURABLE}). Capture only device work: move .item(), .cpu(), printing "
                    f"and synchronization out of the captured region. The capture was ended.") from None
            raise
        if on_npu and not _is_view(func):
            flat = tree_flatten(result)[0]
            aliases = _returns_alias(func)
            outs = [t if isinstance(t, torch.Tensor) and not (i < len(aliases) and aliases[i]) else None
                    for i, t in enumerate(flat)]
            for t in outs:
                if t is not None and t.device.type == "npu":
                    self.made.add(t.untyped_storage().data_ptr())
            self.graph._steps.append(_Step(func, args, kwargs, outs))
        return result


class NPUGraph:
    """A captured sequence of NPU work, replayed with one host launch (like ``torch.cuda.CUDAGraph``).

    Usually made with :class:`graph`::

        g = torch.npu.NPUGraph()
        static_x = torch.zeros(64, device="npu")
        with torch.npu.graph(g):
            static_y = (static_x * 2).relu() + 1
        static_x.copy_(new_x)
        g.replay()            # static_y now holds the result for new_x
    """

    def __init__(self, keep_graph: bool = False) -> None:  # keep_graph: accepted for API compatibility
        self._steps: list[_Step] = []
        self._device: int | None = None
        self._stream: int | None = None
        self._mode: _Recorder | None = None
        self._captured = False
        self._failed = False
        self._launches = 0

    # -- capture ---------------------------------------------------------------------------------
    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        """Begin capturing the current stream's work (it must not be the default stream)."""
        if self._mode is not None:
            raise RuntimeError("this NPUGraph is already capturing")
        if self._captured:
            raise RuntimeError("this NPUGraph has already been captured; call reset() to capture again")
        stream = current_stream()
        if stream.stream_id == 0:
            raise RuntimeError("NPU graphs must be captured on a non-default stream. (However, after capture, "
                               "it's ok to replay them on the default stream.)")
        _C.begin_capture(stream.device_index, stream.stream_id)
        self._device, self._stream = stream.device_index, stream.stream_id
        self._steps = []
        self._failed = False
        self._mode = _Recorder(self)
        self._mode.__enter__()

    def capture_end(self) -> None:
        """End the capture begun by :meth:`capture_begin`."""
        if self._mode is None:
            raise RuntimeError("capture_end() without capture_begin()")
        self._mode.__exit__(None, None, None)
        self._mode.restore()
        self._mode = None
        if self._failed:
            return  # the driver's capture was ended when it failed
        self._launches = _C.end_capture(self._device, self._stream)
        self._captured = True

    def _fail(self) -> None:
        """A captured operation failed: end the driver's capture; the graph cannot be replayed."""
        if not self._failed:
            self._failed = True
            _C.end_capture(self._device, self._stream)
        self._steps = []
        self._captured = False

    # -- replay ----------------------------------------------------------------------------------
    def replay(self) -> None:
        """Run the captured work again on the current stream: one host launch for all of it."""
        if not self._captured:
            raise RuntimeError("Called NPUGraph::replay without a preceding successful capture.")
        _C.graph_launch_begin(self._device)
        try:
            with torch.no_grad():
                for step in self._steps:
                    step.replay()
        finally:
            _C.graph_launch_end(self._device)

    def reset(self) -> None:
        """Forget the captured work and release the memory the graph kept."""
        if self._mode is not None:
            self._fail()
            self.capture_end()
        self._steps = []
        self._captured = False
        self._launches = 0

    def pool(self) -> tuple[int, int]:
        """An id of this graph's memory pool (accepted as ``pool=`` for API compatibility)."""
        return (id(self), 0)

    @property
    def num_launches(self) -> int:
        """Kernels and copies the capture recorded (what each replay runs)."""
        return self._launches

    @property
    def num_ops(self) -> int:
        """ATen operators the capture recorded."""
        return len(self._steps)

    def __repr__(self) -> str:
        state = f"{self.num_ops} operators, {self.num_launches} launches" if self._captured else "not captured"
        return f"<torch.npu.NPUGraph {state}>"


class graph:  # noqa: N801 - torch.cuda.graph's name
    """Capture the NPU work of a ``with`` block into ``npu_graph`` (like ``torch.cuda.graph``).

    Args:
        npu_graph: the :class:`NPUGraph` to capture into.
        pool: accepted for API compatibility (each graph keeps its own memory).
        stream: the stream to capture on (default: a side stream of the current device).
        capture_error_mode: accepted for API compatibility.
    """

    def __init__(self, npu_graph: NPUGraph, pool: Any = None, stream: torch.Stream | None = None,
                 capture_error_mode: str = "global") -> None:
        self.npu_graph = npu_graph
        self.capture_stream = stream if stream is not None else Stream()
        self._previous: torch.Stream | None = None

    def __enter__(self) -> None:
        torch.npu.synchronize()
        self._previous = current_stream(self.capture_stream.device_index)
        # the capture stream starts after what the current stream has queued, as in torch.cuda.graph
        self.capture_stream.wait_stream(self._previous)
        set_stream(self.capture_stream)
        try:
            self.npu_graph.capture_begin()
        except BaseException:
            set_stream(self._previous)
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self.npu_graph.capture_end()
        finally:
            set_stream(self._previous)


class graph_capture:  # noqa: N801 - a context manager used like a function
    """Capture a whole callable (what ``mode="reduce-overhead"`` uses for a compiled graph).

    ``with graph_capture() as replay: outs = fn(inputs)`` runs ``fn`` once under a capture on a side
    stream (so what cannot be captured raises); afterwards ``replay(fn, inputs, outs)`` runs ``fn``
    again inside one graph launch and writes its results into ``outs``. A compiled graph's launch plan
    calls kernels without the dispatcher, so it is replayed by calling it, not operator by operator.
    """

    def __enter__(self) -> Any:
        self._stream = Stream()
        self._previous = current_stream(self._stream.device_index)
        self._stream.wait_stream(self._previous)
        set_stream(self._stream)
        _C.begin_capture(self._stream.device_index, self._stream.stream_id)
        return self.replay

    def __exit__(self, *exc: object) -> None:
        try:
            _C.end_capture(self._stream.device_index, self._stream.stream_id)
        finally:
            set_stream(self._previous)

    def replay(self, fn: Any, inputs: list, outputs: Any) -> None:
        device = self._stream.device_index
        _C.graph_launch_begin(device)
        try:
            fresh = fn(list(inputs))
            _C.accounting_pause(True)
            try:
                for out, new in zip(tree_flatten(outputs)[0], tree_flatten(fresh)[0]):
                    if isinstance(out, torch.Tensor) and isinstance(new, torch.Tensor) and out is not new:
                        out.copy_(new)
            finally:
                _C.accounting_pause(False)
        finally:
            _C.graph_launch_end(device)


def is_current_stream_capturing() -> bool:
    """Whether the current device is capturing a graph (``torch.npu.is_current_stream_capturing``)."""
    return _C.capture_stream(-1) >= 0
