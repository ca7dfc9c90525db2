"""Collective-communication benchmark: npuccl on npu tensors against gloo on CPU tensors.

Run:  .venv/bin/python benchmarks/collectives.py [--quick]

Two processes (this machine's cores) run each collective on buffers of several sizes.
For each: the simulated time on the device's communication stream (the α–β link
model of ``npu_lab.distributed.cost``) and the bus bandwidth it implies (NCCL's definition:
algorithm bandwidth times the collective's factor, 2(p-1)/p for allreduce), then the
host time per call of npuccl on npu tensors and of plain gloo on CPU tensors, measured
in the same run. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

OPS = ("allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall")
SIZES = (4 << 10, 256 << 10, 4 << 20)  # bytes a rank contributes (allreduce, broadcast) or the whole buffer


def _run(op: str, nbytes: int, device: str, group: dist.ProcessGroup, world: int) -> None:
    n = nbytes // 4
    x = torch.ones(n, device=device)
    if op == "allreduce":
        dist.all_reduce(x, group=group)
    elif op == "broadcast":
        dist.broadcast(x, 0, group=group)
    elif op == "allgather":
        out = torch.empty(n * world, device=device)
        dist.all_gather_into_tensor(out, x, group=group)
    elif op == "reduce_scatter":
        out = torch.empty(n // world, device=device)
        dist.reduce_scatter_tensor(out, x[: (n // world) * world], group=group)
    elif op == "alltoall":
        out = torch.empty_like(x[: (n // world) * world])
        dist.all_to_all_single(out, x[: (n // world) * world], group=group)


def _host_us(fn, repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def _worker(rank: int, world: int, port: int, results: dict, repeat: int) -> None:
    import npu_lab  # noqa: F401 - registers the device and npuccl
    from npu_lab.distributed import cost, timeline

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("cpu:gloo,npu:npuccl", rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    torch.npu.set_device(0)
    rows = []
    for op in OPS:
        for nbytes in SIZES:
            torch.npu.synchronize()
            with timeline.recording() as records:  # the collective on npuccl's communication stream
                _run(op, nbytes, "npu", dist.group.WORLD, world)
            (rec,) = records
            sim_us = rec.end_us - rec.start_us
            npu_host = _host_us(lambda op=op, nbytes=nbytes: _run(op, nbytes, "npu", dist.group.WORLD, world),
                                repeat)
            cpu_host = _host_us(lambda op=op, nbytes=nbytes: _run(op, nbytes, "cpu", gloo, world), repeat)
            # bus bandwidth from the size the collective is costed on (nccl-tests: the whole buffer for
            # all-gather, reduce-scatter and all-to-all, one rank's buffer for allreduce and broadcast)
            rows.append((op, rec.nbytes, sim_us, cost.bus_bandwidth(op, rec.nbytes, world, sim_us), npu_host,
                         cpu_host))
    if rank == 0:
        results["rows"] = rows
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    world = 2
    with tempfile.TemporaryDirectory():
        manager = mp.get_context("spawn").Manager()
        results = manager.dict()
        mp.spawn(_worker, args=(world, _free_port(), results, 3 if args.quick else 10), nprocs=world)
        rows = results["rows"]
    print(f"torch {torch.__version__}, {world} processes, {os.cpu_count()} CPU cores")
    print("size: one rank's buffer (allreduce, broadcast), the whole buffer (allgather, reduce_scatter, alltoall)")
    print(f"{'collective':<15} {'size':>9}  {'simulated':>10}  {'bus GB/s':>8}  {'npuccl host':>11}  "
          f"{'gloo host':>9}  {'host ratio':>10}")
    for op, nbytes, sim_us, busbw, npu_host, cpu_host in rows:
        print(f"{op:<15} {nbytes:>9}  {sim_us:>8.1f}us  {busbw:>8.2f}  {npu_host:>9.0f}us  {cpu_host:>7.0f}us  "
              f"{cpu_host / npu_host:>10.2f}")
    print("host ratio = gloo time / npuccl time (>= 1: npuccl adds nothing to the transport it rides on)")


if __name__ == "__main__":
    main()
