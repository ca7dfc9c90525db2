"""The α–β cost of a collective on the simulated interconnect.

Every message costs a latency α plus its bytes over the link bandwidth β. The links
between NPUs are the device<->device links of the cost model
(``npu_lab.cost_model.peer_latency_us`` and ``peer_gbs``). For ``p`` ranks and a
buffer of ``n`` bytes:

* ring allreduce: reduce-scatter then all-gather around the ring, 2(p-1) steps of n/p bytes:
  ``2(p-1)·α + 2(p-1)/p · n/β``
* tree allreduce (reduce up a binary tree, broadcast down, pipelined):
  ``2⌈log2 p⌉·α + 2·n/β`` — fewer latencies, more bytes per link: wins for small messages
* ring all-gather / reduce-scatter of an ``n``-byte whole: ``(p-1)·α + (p-1)/p · n/β``
* broadcast / reduce (pipelined chain): ``(p-1)·α + n/β``
* all-to-all (pairwise exchange): ``(p-1)·α + (p-1)/p · n/β``
* send / recv: ``α + n/β``; barrier: a tree allreduce of nothing

Like ``nccl-tests``, :func:`bus_bandwidth` turns a time into the bandwidth each link
carried, comparable across collectives and rank counts.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

#: Collectives whose time depends on the algorithm (the others have one).
ALGORITHMS = ("ring", "tree")

#: How many times the formulas below were asked (:func:`calls`; chapter 9's check sees whether an answer that should
#: work a formula out called them instead).
_asked = [0]


def calls() -> int:
    """How many times :func:`allreduce_us`, :func:`collective_us`, :func:`choose_algorithm` or
    :func:`algorithm_for` has been called in this process."""
    return _asked[0]


#: Bus-bandwidth factor per collective (nccl-tests' PERFORMANCE.md), as a function of p.
_BUS_FACTOR = {
    "allreduce": lambda p: 2 * (p - 1) / p,
    "allgather": lambda p: (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "alltoall": lambda p: (p - 1) / p,
    "broadcast": lambda p: 1.0,
    "reduce": lambda p: 1.0,
    "gather": lambda p: (p - 1) / p,
    "scatter": lambda p: (p - 1) / p,
    "send": lambda p: 1.0,
    "recv": lambda p: 1.0,
    "barrier": lambda p: 0.0,
}


@dataclass(frozen=True)
class Link:
    """One link between two NPUs: latency ``alpha_us`` (microseconds) and bandwidth ``gbs`` (GB/s)."""

    alpha_us: float
    gbs: float

    def transfer_us(self, nbytes: float) -> float:
        """Microseconds the link spends moving ``nbytes`` (the β part)."""
        return nbytes / (self.gbs * 1e3)


def device_link() -> Link:
    """The link the simulated devices use now: the cost model's device<->device figures."""
    from ..device.clock import cost_model

    return Link(cost_model.peer_latency_us, cost_model.peer_gbs)


def allreduce_us(nbytes: float, p: int, link: Link, algorithm: str = "ring") -> float:
    """Simulated microseconds of an allreduce of an ``nbytes`` buffer over ``p`` ranks."""
    _asked[0] += 1
    if p <= 1:
        return 0.0
    if algorithm == "ring":
        return 2 * (p - 1) * link.alpha_us + 2 * (p - 1) / p * link.transfer_us(nbytes)
    if algorithm == "tree":
        return 2 * math.ceil(math.log2(p)) * link.alpha_us + 2 * link.transfer_us(nbytes)
    raise ValueError(f"unknown allreduce algorithm {algorithm!r}; pick one of {', '.join(ALGORITHMS)}")


def choose_algorithm(nbytes: float, p: int, link: Link) -> str:
    """The allreduce algorithm to use: ``NPU_LAB_CCL_ALGO`` if set (ring|tree), else the faster one."""
    _asked[0] += 1
    forced = os.environ.get("NPU_LAB_CCL_ALGO", "").strip().lower()
    if forced:
        if forced not in ALGORITHMS:
            raise ValueError(f"NPU_LAB_CCL_ALGO={forced!r}: pick one of {', '.join(ALGORITHMS)}")
        return forced
    return min(ALGORITHMS, key=lambda a: allreduce_us(nbytes, p, link, a))


#: The algorithm each collective other than allreduce runs (allreduce: ring or tree, see choose_algorithm).
_FIXED_ALGORITHM = {
    "allgather": "ring", "reduce_scatter": "ring", "gather": "ring", "scatter": "ring",
    "broadcast": "chain", "reduce": "chain", "alltoall": "pairwise", "send": "p2p", "recv": "p2p",
    "barrier": "tree",
}


def algorithm_for(op: str, nbytes: float, p: int, link: Link) -> str:
    """The algorithm collective ``op`` runs with: allreduce chooses (:func:`choose_algorithm`), the others have one."""
    _asked[0] += 1
    return choose_algorithm(nbytes, p, link) if op == "allreduce" else _FIXED_ALGORITHM[op]


def collective_us(op: str, nbytes: float, p: int, link: Link, algorithm: str = "ring") -> float:
    """Simulated microseconds of collective ``op`` over ``p`` ranks.

    ``nbytes`` is the buffer one rank contributes for allreduce, broadcast, reduce, send and
    recv, and the whole (gathered, or scattered) buffer for allgather, reduce_scatter, gather,
    scatter and alltoall.
    """
    _asked[0] += 1
    if op == "allreduce":
        return allreduce_us(nbytes, p, link, algorithm)
    if op in ("send", "recv"):
        return link.alpha_us + link.transfer_us(nbytes)
    if p <= 1:
        return 0.0
    if op == "barrier":
        return allreduce_us(0, p, link, "tree")
    if op in ("allgather", "reduce_scatter", "alltoall", "gather", "scatter"):
        return (p - 1) * link.alpha_us + (p - 1) / p * link.transfer_us(nbytes)
    if op in ("broadcast", "reduce"):
        return (p - 1) * link.alpha_us + link.transfer_us(nbytes)
    raise ValueError(f"no cost formula for collective {op!r}")


def bus_bandwidth(op: str, nbytes: float, p: int, time_us: float) -> float:
    """GB/s each link carried: the algorithm bandwidth ``nbytes / time`` times the collective's factor."""
    if time_us <= 0:
        return 0.0
    return nbytes / (time_us * 1e3) * _BUS_FACTOR[op](p)
