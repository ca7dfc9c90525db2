"""npuccl: collective communication for ``npu`` tensors across processes (``torch.distributed``).

``import npu_lab`` registers the backend, so::

    import torch.distributed as dist, npu_lab
    dist.init_process_group("npuccl")          # or init_process_group(): npuccl is npu's default
    dist.all_reduce(torch.ones(4, device="npu"))

Bytes travel over gloo (:mod:`.process_group`); each collective costs what the α–β
model of the interconnect says (:mod:`.cost`) on the device's communication stream
(:mod:`.timeline`), so it overlaps compute and shows in ``npu_lab.profile()`` on its own
lane; ``work.wait()`` is a stream wait. ``NPU_LAB_CCL_DEBUG=INFO`` logs one line per
collective (:mod:`.debug`). :func:`ddp_overlap` measures DDP's gradient buckets against
backward (:mod:`.overlap`); :func:`compare_memory` trains with DDP and FSDP and measures
memory per device (:mod:`.fsdp`).
"""

from __future__ import annotations

from .cost import Link, bus_bandwidth, collective_us, device_link
from .fsdp import TrainRun, compare_memory
from .overlap import BucketTiming, OverlapReport, ddp_overlap
from .process_group import NAME, ProcessGroupNPUCCL
from .registration import register, registered
from .timeline import comm_stream

__all__ = [
    "NAME",
    "BucketTiming",
    "Link",
    "OverlapReport",
    "ProcessGroupNPUCCL",
    "TrainRun",
    "bus_bandwidth",
    "collective_us",
    "comm_stream",
    "compare_memory",
    "ddp_overlap",
    "device_link",
    "register",
    "registered",
]
