"""``torch.compile(..., backend="npu", mode="reduce-overhead")``: compiled graphs replayed as NPU graphs.

What Inductor's CUDA graphs do (``triton.cudagraphs``), for the npu backend's compiled graphs:

1. the first call runs the compiled graph as usual (a warm-up);
2. the second call captures it on a side stream (:mod:`npu_lab.device.graphs`): inputs that
   kept their address since the first call (parameters, buffers) are used in place, the others
   are copied into buffers the graph owns;
3. every later call copies the changing inputs into those buffers and replays the graph: one host
   launch for all its kernels.

As with CUDA graphs, the outputs are the graph's own buffers: **the next call overwrites them**
(clone an output to keep it). A graph is captured again when a parameter moved, and calls whose
non-tensor arguments differ from the captured ones run without replay. Graphs of training steps
(forward and backward) run as in the default mode: a forward saved for a later backward would be
overwritten by the next forward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..device import native
from ..device.graphs import graph_capture

_C = native.load()


def _address(x: object) -> object:
    if isinstance(x, torch.Tensor):
        return ("tensor", x.device, x.data_ptr(), tuple(x.shape), tuple(x.stride()), x.dtype)
    return ("value", x)


class ReplayedGraph:
    """A compiled graph (a boxed function of a list of inputs) run as a captured NPU graph."""

    def __init__(self, fn: Callable[[list], Any]) -> None:
        self.fn = fn
        self.calls = 0
        self.replays = 0
        self.captures = 0
        self._warm: list[object] | None = None
        self._inputs: list[object] | None = None
        self._static: list[bool] = []
        self._outputs: Any = None

    def _capturable(self, args: Sequence[object]) -> bool:
        return all(not isinstance(a, torch.Tensor) or a.device.type == "npu" for a in args)

    def _capture(self, args: list[object]) -> None:
        warm = self._warm or []
        self._static = [isinstance(a, torch.Tensor) and i < len(warm) and _address(a) == warm[i]
                        for i, a in enumerate(args)]
        self._inputs = [a if static or not isinstance(a, torch.Tensor) else a.clone()
                        for a, static in zip(args, self._static)]
        with graph_capture() as replay:
            self._outputs = self.fn(list(self._inputs))
        self._replay = replay
        self.captures += 1

    def __call__(self, args: list[object]) -> Any:
        self.calls += 1
        args = list(args)
        if not self._capturable(args) or torch.is_grad_enabled() and any(
                isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return self.fn(args)
        if self.calls == 1:
            self._warm = [_address(a) for a in args]
            return self.fn(args)
        if self._inputs is None or any(
                static and _address(a) != _address(mine) for a, mine, static in zip(args, self._inputs, self._static)):
            self._capture(args)
        elif any(not isinstance(a, torch.Tensor) and a != mine for a, mine in zip(args, self._inputs)):
            return self.fn(args)
        for a, mine, static in zip(args, self._inputs, self._static):
            if isinstance(a, torch.Tensor) and not static:
                mine.copy_(a)
        self._replay(self.fn, self._inputs, self._outputs)
        self.replays += 1
        return self._outputs


def wrap(fn: Callable[[list], Any]) -> ReplayedGraph:
    """``fn`` run as a captured NPU graph from its second call on (see the module docstring)."""
    replayed = ReplayedGraph(fn)
    replayed._boxed_call = True  # AOTAutograd calls it with one list of inputs
    return replayed
