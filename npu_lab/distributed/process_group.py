"""``ProcessGroupNPUCCL``: the NPU's collective communication backend, written in Python.

It is a ``torch.distributed.ProcessGroup`` (PyTorch lets Python subclass it), so every
``torch.distributed`` call and the C++ users of a process group (DDP's reducer, its
parameter broadcast) reach the methods below. Each collective

1. takes the CPU view of every tensor (:mod:`.host`: an alias of the device bytes, or a
   staging buffer for a non-contiguous one),
2. hands it to an internal gloo group built from the same store (gloo moves the bytes,
   between processes or machines: npuccl has no socket code of its own),
3. is accounted with its α–β cost (:mod:`.cost`) on the device's communication stream
   (:mod:`.timeline`), after the caller's stream, so compute issued next overlaps it, and
   logged under ``NPU_LAB_CCL_DEBUG=INFO`` (:mod:`.debug`),
4. returns a ``Work`` whose future completes (with the caller's tensors) when gloo is done
   and the result is in place: ``AVG`` divided (:mod:`.reduce_ops`), staged buffers copied back.
   For npu tensors the future is device-aware: it carries an event at the collective's end,
   and ``work.wait()`` / ``future.wait()`` make the waiter's current stream wait on it
   (a stream wait: the simulated clock of the stream, not the host, waits).

A peer that dies or never answers fails gloo's operation after the group's timeout; the
``Work`` then raises a ``DistBackendError`` that names the collective and the timeout.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    GatherOptions,
    ProcessGroupGloo,
    ReduceOptions,
    ScatterOptions,
    Work,
)

from . import cost, debug, reduce_ops, timeline
from .host import HostBuffer, alias, host_view

NAME = "npuccl"

Tensors = torch.Tensor | Sequence[torch.Tensor]


def _as_list(tensors: Tensors) -> list[torch.Tensor]:
    return [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)


def _device_of(tensors: Sequence[torch.Tensor]) -> torch.device:
    types = {t.device.type for t in tensors}
    if len(types) > 1:
        raise ValueError(f"npuccl: a collective's tensors must all be on one device type, got {sorted(types)}")
    if types and types != {"npu"} and types != {"cpu"}:
        raise ValueError(f"npuccl moves npu (and cpu) tensors, not {types.pop()} tensors")
    return tensors[0].device if tensors else torch.device("cpu")


def _nbytes(tensors: Sequence[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _options(cls: type, src: object | None, **fields: object) -> object:
    """A fresh gloo options object of type ``cls`` with ``fields``, keeping ``src``'s timeout."""
    opts = cls()
    for key, value in fields.items():
        setattr(opts, key, value)
    if src is not None and hasattr(src, "timeout"):
        opts.timeout = src.timeout
    return opts


def _reduce_op(opts: object | None) -> dist.ReduceOp:
    if opts is None:
        return dist.ReduceOp.SUM
    if isinstance(opts, dist.ReduceOp | dist.ReduceOp.RedOpType):
        return opts
    return opts.reduceOp


def _all(futures: Sequence[torch.futures.Future]) -> torch.futures.Future:
    """One future for several gloo operations: it fails when any of them fails."""
    return torch.futures.collect_all(list(futures)).then(lambda fut: [f.wait() for f in fut.value()])


def _future_of(pending: Work | torch.futures.Future) -> torch.futures.Future | None:
    """The future of gloo's work, or None for the works that have none (send, recv)."""
    if isinstance(pending, torch._C.Future):
        return pending
    try:
        return pending.get_future()
    except RuntimeError:
        return None


class _FutureWork(dist.Work):
    """An npuccl work that completes with ``future``.

    (``_create_work_from_future`` would make one too, but its ``wait()`` does not raise when the
    future failed: a collective whose peer died would look done. This one raises.)
    """

    def __init__(self, future: torch.futures.Future, errors: list[BaseException] | None = None) -> None:
        super().__init__()
        self._future = future
        self._errors = errors if errors is not None else []

    def wait(self, timeout: datetime.timedelta = datetime.timedelta(0)) -> bool:
        try:
            self._future.wait()
        except Exception:
            if self._errors:  # the collective's own error, not the future's wrapping of it
                raise self._errors[0] from None
            raise
        return True

    def is_completed(self) -> bool:
        return self._future.done()

    def is_success(self) -> bool:
        if not self._future.done():
            return False
        try:
            self._future.value()
        except Exception:
            return False
        return True

    def exception(self) -> BaseException | None:
        try:
            self._future.value()
        except Exception as exc:
            return exc
        return None

    def result(self) -> object:
        return self._future.wait()

    def get_future(self) -> torch.futures.Future:
        return self._future


class _BlockingWork(dist.Work):
    """An npuccl work over a gloo work without a future: waiting on it completes the collective."""

    def __init__(self, inner: Work, complete: Callable[[], object],
                 failure: Callable[[BaseException], Exception], device: int = -1, end_us: float = 0.0) -> None:
        super().__init__()
        self._inner = inner
        self._device = device  # npu index whose current stream waits until end_us, or -1
        self._end_us = end_us
        self._complete = complete
        self._failure = failure
        self._result: object = None
        self._finished = False

    def wait(self, timeout: datetime.timedelta = datetime.timedelta(0)) -> bool:
        if not self._finished:
            try:
                self._inner.wait(timeout) if timeout else self._inner.wait()
            except Exception as exc:
                raise self._failure(exc) from exc
            self._result = self._complete()
            self._finished = True
        if self._device >= 0:  # stream-ordered: the waiter's stream continues after the transfer ended
            timeline.wait_until(self._device, self._end_us)
        return True

    def is_completed(self) -> bool:
        return self._finished

    def is_success(self) -> bool:
        return self._finished

    def result(self) -> object:
        self.wait()
        return self._result

    def get_future(self) -> torch.futures.Future:
        self.wait()
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(self._result)
        return fut

    def _source_rank(self) -> int:
        """The rank a receive from any source heard from (``dist.recv(t)`` asks)."""
        return self._inner._source_rank()


class ProcessGroupNPUCCL(dist.ProcessGroup):
    """Collectives on ``npu`` tensors (and ``cpu`` ones) over gloo, costed on the simulated interconnect."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: datetime.timedelta) -> None:
        super().__init__(rank, size)
        self._rank = rank
        self._size = size
        self.timeout = timeout
        try:
            self._gloo = ProcessGroupGloo(dist.PrefixStore(f"{NAME}/gloo/", store), rank, size, timeout)
        except Exception as exc:  # a rank that never joins: gloo's rendezvous times out
            raise dist.DistBackendError(
                f"npuccl: rank {rank} of {size} could not reach every other rank within the timeout of "
                f"{timeout.total_seconds():g} s (did each rank start and call init_process_group?): {exc}"
            ) from exc
        self._seq = 0
        debug.log(rank, "-", f"init: rank {rank} nranks {size} transport gloo timeout {timeout.total_seconds():g}s")

    def getBackendName(self) -> str:  # noqa: N802 - the C++ name PyTorch calls
        return NAME

    # A C++ ProcessGroup keeps its name in its backends; this one is its own backend, so it keeps
    # them itself (DeviceMesh, FSDP and the functional collectives find groups by name).
    def setGroupName(self, name: str) -> None:  # noqa: N802 - the C++ name PyTorch calls
        self._group_name = name

    def getGroupName(self) -> str:  # noqa: N802
        name = getattr(self, "_group_name", None)
        if name is None:
            raise RuntimeError("ProcessGroup name not set")
        return name

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802
        self._group_desc = desc

    def getGroupDesc(self) -> str:  # noqa: N802
        return getattr(self, "_group_desc", "")

    def __repr__(self) -> str:
        return f"ProcessGroupNPUCCL(rank={self._rank}, size={self._size})"

    # -- the machinery every collective shares ---------------------------------------------------

    def _issue(
        self,
        op: str,
        tensors: Sequence[torch.Tensor],
        call: Callable[[], Work | torch.futures.Future],
        *,
        nbytes: int,
        outputs: Sequence[HostBuffer] = (),
        result: object = None,
        after: Callable[[], None] | None = None,
        detail: str = "",
    ) -> Work:
        """Run ``call`` (gloo's collective), account and log it; the returned work completes with ``result``."""
        self._seq += 1
        seq = self._seq
        device = _device_of(tensors)
        link = cost.device_link()
        algorithm = cost.algorithm_for(op, nbytes, self._size, link)
        sim_us = cost.collective_us(op, nbytes, self._size, link, algorithm)
        dtype = str(tensors[0].dtype).replace("torch.", "") if tensors else "-"
        # Logged before gloo is called, as NCCL logs at enqueue: a call that fails at once (a peer that
        # already hung up on a desync) still leaves its line, which is how a desync is found.
        debug.log(self._rank, str(device), f"{op} #{seq}: {nbytes} bytes {dtype}{detail} algo={algorithm} "
                                           f"peers={self._size} sim={sim_us:.2f}us")
        pending = call()
        future = _future_of(pending)
        index = -1
        end = 0.0
        if device.type == "npu":
            index = device.index if device.index is not None else torch.npu.current_device()
            _, end = timeline.account(op, index, sim_us, nbytes)

        def complete() -> object:
            if after is not None:
                after()
            for buf in outputs:
                buf.finish()
            return result

        # The callbacks below (and each collective's ``after``) run on a gloo worker thread when gloo
        # finishes, so none of them may hold ``self``: a group destroyed while a collective is in flight
        # would be freed on that thread, and gloo's destructor joining its own thread aborts the process.
        rank, size, timeout_s = self._rank, self._size, self.timeout.total_seconds()

        def failure(exc: BaseException) -> dist.DistBackendError:
            return dist.DistBackendError(
                f"npuccl {op} #{seq} failed on rank {rank} of {size} (a peer died, left or did not take "
                f"part within the timeout of {timeout_s:g} s): {exc}"
            )

        if future is None:
            return _BlockingWork(pending, complete, failure, index, end)

        errors: list[BaseException] = []
        if index < 0:  # cpu tensors: no device clock, a plain future
            def settle(fut: torch.futures.Future) -> object:
                try:
                    fut.value()
                except Exception as exc:
                    errors.append(failure(exc))
                    raise errors[0] from exc
                return complete()

            return _FutureWork(future.then(settle), errors)

        # npu tensors: a device-aware future, completed with an event at the collective's end on the
        # simulated clock, so waiting on it is a stream wait (see timeline).
        done: torch.futures.Future = torch.futures.Future(devices=[torch.device("npu", index)])
        signal = timeline.reserve_signal(index, end)

        def finish(fut: torch.futures.Future) -> None:
            try:
                fut.value()
                value = complete()
            except Exception as exc:
                errors.append(failure(exc))
                timeline.release_signal(index, signal)
                done.set_exception(errors[0])
                return
            timeline.complete(done, index, signal, value)

        future.add_done_callback(finish)
        return _FutureWork(done, errors)

    # -- reductions ------------------------------------------------------------------------------

    def allreduce(self, tensors: Tensors, opts: object | None = None) -> Work:
        tensors = _as_list(tensors)
        op = _reduce_op(opts)
        wire = reduce_ops.on_wire(op, [t.dtype for t in tensors])
        bufs = [host_view(t) for t in tensors]
        gloo_opts = _options(AllreduceOptions, opts, reduceOp=wire)
        size = self._size  # not self: see _issue

        def after() -> None:
            for b in bufs:
                reduce_ops.finish(op, b.host, size)

        return self._issue("allreduce", tensors, lambda: self._gloo.allreduce([b.host for b in bufs], gloo_opts),
                           nbytes=_nbytes(tensors), outputs=bufs, result=tensors, after=after,
                           detail=f" op={reduce_ops.name(op)}")

    def allreduce_coalesced(self, tensors: Sequence[torch.Tensor], opts: object | None = None) -> Work:
        tensors = list(tensors)
        op = _reduce_op(opts)
        wire = reduce_ops.on_wire(op, [t.dtype for t in tensors])
        bufs = [host_view(t) for t in tensors]
        gloo_opts = _options(AllreduceCoalescedOptions, opts, reduceOp=wire)
        size = self._size  # not self: see _issue

        def after() -> None:
            for b in bufs:
                reduce_ops.finish(op, b.host, size)

        return self._issue("allreduce", tensors,
                           lambda: self._gloo.allreduce_coalesced([b.host for b in bufs], gloo_opts),
                           nbytes=_nbytes(tensors), outputs=bufs, result=tensors, after=after,
                           detail=f" op={reduce_ops.name(op)} coalesced={len(tensors)}")

    def reduce(self, tensors: Tensors, opts: object | None = None) -> Work:
        tensors = _as_list(tensors)
        op = _reduce_op(opts)
        root = getattr(opts, "rootRank", 0)
        wire = reduce_ops.on_wire(op, [t.dtype for t in tensors])
        bufs = [host_view(t) for t in tensors]
        gloo_opts = _options(ReduceOptions, opts, reduceOp=wire, rootRank=root,
                             rootTensor=getattr(opts, "rootTensor", 0))
        rank, size = self._rank, self._size  # not self: see _issue

        def after() -> None:
            if rank == root:
                for b in bufs:
                    reduce_ops.finish(op, b.host, size)

        return self._issue("reduce", tensors, lambda: self._gloo.reduce([b.host for b in bufs], gloo_opts),
                           nbytes=_nbytes(tensors), outputs=bufs, result=tensors, after=after,
                           detail=f" op={reduce_ops.name(op)} root={root}")

    def reduce_scatter(self, outputs: Sequence[torch.Tensor], inputs: Sequence[Sequence[torch.Tensor]],
                       opts: object | None = None) -> Work:
        outputs, inputs = list(outputs), [list(x) for x in inputs]
        if len(outputs) != 1 or len(inputs) != 1 or len(inputs[0]) != self._size:
            raise ValueError("npuccl reduce_scatter takes one output and a list of world_size inputs per process")
        op = _reduce_op(opts)
        pieces = inputs[0]
        wire = reduce_ops.on_wire(op, [t.dtype for t in pieces + outputs])
        whole = _nbytes(pieces)
        # One reduce per rank, each rooted at the rank that keeps that piece: works for uneven pieces too.
        scratch = [alias(p).clone(memory_format=torch.contiguous_format) for p in pieces]
        out = host_view(outputs[0])
        works = []
        for r in range(self._size):
            o = _options(ReduceOptions, opts, reduceOp=wire, rootRank=r, rootTensor=0)
            works.append(self._gloo.reduce([scratch[r]], o).get_future())
        rank, size = self._rank, self._size  # not self: see _issue

        def after() -> None:
            mine = scratch[rank]
            reduce_ops.finish(op, mine, size)
            out.host.copy_(mine.view(out.host.shape))

        return self._issue("reduce_scatter", outputs, lambda: _all(works),
                           nbytes=whole, outputs=[out], result=outputs, after=after,
                           detail=f" op={reduce_ops.name(op)}")

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: object | None = None) -> Work:
        op = _reduce_op(opts)
        wire = reduce_ops.on_wire(op, [input.dtype])
        if input.numel() != output.numel() * self._size:
            raise ValueError(f"npuccl reduce_scatter_tensor: the input has {input.numel()} elements, which is not "
                             f"world_size ({self._size}) times the output's {output.numel()}")
        # Gloo's own reduce-scatter work has no future (it cannot be waited on asynchronously), so
        # this allreduces a scratch copy of the input and keeps this rank's slice.
        scratch = alias(input).contiguous().clone().reshape(self._size, -1)
        out = host_view(output)
        gloo_opts = _options(AllreduceOptions, opts, reduceOp=wire)
        rank, size = self._rank, self._size  # not self: see _issue

        def after() -> None:
            mine = scratch[rank]
            reduce_ops.finish(op, mine, size)
            out.host.copy_(mine.view(out.host.shape))

        return self._issue("reduce_scatter", [output], lambda: self._gloo.allreduce([scratch], gloo_opts),
                           nbytes=_nbytes([input]), outputs=[out], result=[output], after=after,
                           detail=f" op={reduce_ops.name(op)}")

    # -- data movement ---------------------------------------------------------------------------

    def broadcast(self, tensors: Tensors, opts: object | None = None) -> Work:
        tensors = _as_list(tensors)
        root = getattr(opts, "rootRank", 0)
        bufs = [host_view(t) for t in tensors]
        gloo_opts = _options(BroadcastOptions, opts, rootRank=root, rootTensor=getattr(opts, "rootTensor", 0))
        return self._issue("broadcast", tensors, lambda: self._gloo.broadcast([b.host for b in bufs], gloo_opts),
                           nbytes=_nbytes(tensors), outputs=bufs, result=tensors, detail=f" root={root}")

    def allgather(self, outputs: Sequence[Sequence[torch.Tensor]], inputs: Tensors,
                  opts: object | None = None) -> Work:
        outputs, inputs = [list(x) for x in outputs], _as_list(inputs)
        if len(inputs) != 1 or len(outputs) != 1 or len(outputs[0]) != self._size:
            raise ValueError("npuccl all_gather takes one input and a list of world_size outputs per process")
        src, outs = inputs[0], outputs[0]
        bufs = [host_view(t) for t in outs]
        whole = _nbytes(outs)
        if all(o.shape == src.shape and o.dtype == src.dtype for o in outs):
            host_in = host_view(src).host
            gloo_opts = _options(AllgatherOptions, opts)
            return self._issue("allgather", outs,
                               lambda: self._gloo.allgather([[b.host for b in bufs]], [host_in], gloo_opts),
                               nbytes=whole, outputs=bufs, result=outputs)
        # Uneven pieces: one broadcast from each rank into everyone's piece for it (what NCCL does too).
        bufs[self._rank].host.copy_(alias(src).reshape(bufs[self._rank].host.shape))
        works = [self._gloo.broadcast([bufs[r].host], _options(BroadcastOptions, opts, rootRank=r,
                                                               rootTensor=0)).get_future()
                 for r in range(self._size)]
        return self._issue("allgather", outs, lambda: _all(works),
                           nbytes=whole, outputs=bufs, result=outputs, detail=" uneven")

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: object | None = None) -> Work:
        if output.numel() != input.numel() * self._size:
            raise ValueError(f"npuccl all_gather_into_tensor: the output has {output.numel()} elements, which is "
                             f"not world_size ({self._size}) times the input's {input.numel()}")
        out = host_view(output)
        src = host_view(input).host
        gloo_opts = _options(AllgatherOptions, opts)
        return self._issue("allgather", [output], lambda: self._gloo._allgather_base(out.host, src, gloo_opts),
                           nbytes=_nbytes([output]), outputs=[out], result=[output])

    def allgather_into_tensor_coalesced(self, outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor],
                                        opts: object | None = None) -> Work:
        outputs, inputs = list(outputs), list(inputs)
        for o, i in zip(outputs, inputs):
            if o.numel() != i.numel() * self._size:
                raise ValueError(f"npuccl all_gather_into_tensor_coalesced: an output has {o.numel()} elements, "
                                 f"which is not world_size ({self._size}) times its input's {i.numel()}")
        outs = [host_view(o) for o in outputs]
        srcs = [host_view(i).host for i in inputs]
        gloo_opts = _options(AllgatherOptions, opts)
        # One gloo all-gather per pair, accounted as one coalesced collective (one launch, all the bytes).
        return self._issue("allgather", outputs,
                           lambda: _all([self._gloo._allgather_base(o.host, i, gloo_opts).get_future()
                                         for o, i in zip(outs, srcs)]),
                           nbytes=_nbytes(outputs), outputs=outs, result=outputs,
                           detail=f" coalesced={len(outputs)}")

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: Sequence[int],
                      input_split_sizes: Sequence[int], opts: object | None = None) -> Work:
        out = host_view(output)
        src = host_view(input).host
        gloo_opts = _options(AllToAllOptions, opts)
        splits_out, splits_in = list(output_split_sizes), list(input_split_sizes)
        uneven = " uneven" if splits_out or splits_in else ""
        return self._issue("alltoall", [output],
                           lambda: self._gloo.alltoall_base(out.host, src, splits_out, splits_in, gloo_opts),
                           nbytes=_nbytes([input]), outputs=[out], result=[output], detail=uneven)

    def alltoall(self, outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor],
                 opts: object | None = None) -> Work:
        outputs, inputs = list(outputs), list(inputs)
        if len(outputs) != self._size or len(inputs) != self._size:
            raise ValueError("npuccl all_to_all takes world_size inputs and world_size outputs")
        if len({t.dtype for t in outputs + inputs}) != 1:
            raise ValueError("npuccl all_to_all: every input and output must have one dtype")
        # Flatten into one buffer each way and run the split-size all-to-all.
        flat_in = torch.cat([alias(t).reshape(-1) for t in inputs])
        flat_out = torch.empty(sum(t.numel() for t in outputs), dtype=outputs[0].dtype)
        bufs = [host_view(t) for t in outputs]
        gloo_opts = _options(AllToAllOptions, opts)

        def after() -> None:
            for b, piece in zip(bufs, flat_out.split([t.numel() for t in outputs])):
                b.host.copy_(piece.view(b.host.shape))

        return self._issue("alltoall", outputs,
                           lambda: self._gloo.alltoall_base(flat_out, flat_in, [t.numel() for t in outputs],
                                                            [t.numel() for t in inputs], gloo_opts),
                           nbytes=_nbytes(inputs), outputs=bufs, result=outputs, after=after, detail=" list")

    def gather(self, outputs: Sequence[Sequence[torch.Tensor]], inputs: Tensors, opts: object | None = None) -> Work:
        outputs, inputs = [list(x) for x in outputs], _as_list(inputs)
        root = getattr(opts, "rootRank", 0)
        bufs = [host_view(t) for x in outputs for t in x]
        host_out = [[b.host for b in bufs]] if outputs else []
        host_in = [host_view(t).host for t in inputs]
        gloo_opts = _options(GatherOptions, opts, rootRank=root)
        return self._issue("gather", inputs, lambda: self._gloo.gather(host_out, host_in, gloo_opts),
                           nbytes=_nbytes(inputs) * self._size, outputs=bufs, result=outputs, detail=f" root={root}")

    def scatter(self, outputs: Tensors, inputs: Sequence[Sequence[torch.Tensor]], opts: object | None = None) -> Work:
        outputs, inputs = _as_list(outputs), [list(x) for x in inputs]
        root = getattr(opts, "rootRank", 0)
        bufs = [host_view(t) for t in outputs]
        host_in = [[host_view(t).host for t in x] for x in inputs]
        gloo_opts = _options(ScatterOptions, opts, rootRank=root)
        return self._issue("scatter", outputs, lambda: self._gloo.scatter([b.host for b in bufs], host_in, gloo_opts),
                           nbytes=_nbytes(outputs) * self._size, outputs=bufs, result=outputs, detail=f" root={root}")

    # -- synchronisation and point to point ------------------------------------------------------

    def barrier(self, opts: object | None = None) -> Work:
        gloo_opts = _options(BarrierOptions, opts)
        return self._issue("barrier", [], lambda: self._gloo.barrier(gloo_opts), nbytes=0)

    def send(self, tensors: Tensors, dst: int, tag: int = 0) -> Work:
        tensors = _as_list(tensors)
        host = [alias(t).contiguous() for t in tensors]
        return self._issue("send", tensors, lambda: self._gloo.send(host, dst, tag), nbytes=_nbytes(tensors),
                           result=tensors, detail=f" peer={dst} tag={tag}")

    def recv(self, tensors: Tensors, src: int, tag: int = 0) -> Work:
        tensors = _as_list(tensors)
        bufs = [host_view(t) for t in tensors]
        return self._issue("recv", tensors, lambda: self._gloo.recv([b.host for b in bufs], src, tag),
                           nbytes=_nbytes(tensors), outputs=bufs, result=tensors, detail=f" peer={src} tag={tag}")

    def recv_anysource(self, tensors: Tensors, tag: int = 0) -> Work:
        tensors = _as_list(tensors)
        bufs = [host_view(t) for t in tensors]
        return self._issue("recv", tensors, lambda: self._gloo.recv_anysource([b.host for b in bufs], tag),
                           nbytes=_nbytes(tensors), outputs=bufs, result=tensors, detail=f" peer=any tag={tag}")

    # The names PyTorch 2.13's torch.distributed calls (the older ones above stay for C++ and older callers).
    all_gather_single = _allgather_base
    all_gather_single_coalesced = allgather_into_tensor_coalesced
    reduce_scatter_single = _reduce_scatter_base
    all_to_all_single = alltoall_base
