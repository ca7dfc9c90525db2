"""npuccl: collective communication for ``npu`` tensors across processes (``torch.distributed``).

``import npu_lab`` registers the backend, so::

    import torch.distributed as dist, npu_lab
    dist.init_process_group("npuccl")          # or init_process_group(): npuccl is npu's default
    dist.all_reduce(torch.ones(4, device="npu"))

Bytes travel over gloo (:mod:`.process_group`); each collective costs what the α–β
model of the interconnect says (:mod:`.cost`) on the device clock (:mod:`.timeline`),
so it shows in ``npu_lab.profile()``; ``NPU_LAB_CCL_DEBUG=INFO`` logs one line per
collective (:mod:`.debug`).
"""

from __future__ import annotations

from .cost import Link, bus_bandwidth, collective_us, device_link
from .process_group import NAME, ProcessGroupNPUCCL
from .registration import register, registered

__all__ = [
    "NAME",
    "Link",
    "ProcessGroupNPUCCL",
    "bus_bandwidth",
    "collective_us",
    "device_link",
    "register",
    "registered",
]
