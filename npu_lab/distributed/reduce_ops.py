"""Reduce operators: which ones npuccl takes and how each runs on gloo.

Gloo sums, multiplies, takes max and min of every dtype the NPU has (bitwise ops of
integers too), but averages only floating tensors, and not the same way on every
version. npuccl therefore runs ``AVG`` as a ``SUM`` and divides by the world size
afterwards: floating and complex tensors exactly, integer tensors rounding toward
zero (what NCCL does), bool not at all.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

_SUPPORTED = {
    dist.ReduceOp.SUM: "SUM",
    dist.ReduceOp.AVG: "AVG",
    dist.ReduceOp.PRODUCT: "PRODUCT",
    dist.ReduceOp.MAX: "MAX",
    dist.ReduceOp.MIN: "MIN",
    dist.ReduceOp.BAND: "BAND",
    dist.ReduceOp.BOR: "BOR",
    dist.ReduceOp.BXOR: "BXOR",
}


def name(op: dist.ReduceOp) -> str:
    """The operator's name (``SUM``, ``AVG``, ...); raises for one npuccl cannot run (``PREMUL_SUM``)."""
    for known, label in _SUPPORTED.items():
        if op == known:
            return label
    raise ValueError(f"npuccl cannot reduce with {op}: it runs {', '.join(_SUPPORTED.values())}")


def on_wire(op: dist.ReduceOp, dtypes: list[torch.dtype]) -> dist.ReduceOp:
    """The operator gloo runs for ``op`` (``SUM`` for ``AVG``), after checking the dtypes allow it."""
    label = name(op)
    if label == "AVG":
        if torch.bool in dtypes:
            raise ValueError("npuccl cannot average bool tensors (ReduceOp.AVG)")
        return dist.ReduceOp.SUM
    return op


def finish(op: dist.ReduceOp, tensor: torch.Tensor, world_size: int) -> None:
    """Complete ``op`` in place on a CPU ``tensor`` that holds gloo's result (divides for ``AVG``)."""
    if name(op) != "AVG":
        return
    if tensor.is_floating_point() or tensor.is_complex():
        tensor.div_(world_size)
    else:
        tensor.div_(world_size, rounding_mode="trunc")
