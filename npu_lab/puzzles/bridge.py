"""From puzzle to PyTorch: a finished softmax kernel becomes the npu kernel of ``aten::_softmax``.

The NPU ships its own softmax kernel. :func:`register_softmax` takes it out
(``npu_lab.without_kernels("aten::_softmax")``) and registers, for the ``PrivateUse1`` (npu)
dispatch key, a wrapper that launches the learner's puzzle kernel on every softmax - so
``F.softmax``, ``nn.Softmax`` and every model using them run on it::

    with register_softmax(online_softmax_kernel) as mine:
        model(x_npu)              # softmax runs as the puzzle kernel, on the device's clock
    mine.calls                    # how many softmaxes it ran
    # on leaving: the registration is destroyed and the shipped kernel is back

The wrapper moves the softmax dimension last and makes it contiguous (rows of length ``m``),
launches ``kernel(ctx, x, out, n, m, B0, B1)`` on ``cdiv(n, B0)`` blocks with the compiled runner,
and moves the dimension back. The backward (``aten::_softmax_backward_data``) stays the NPU's own.
On a bare device (``NPU_LAB_BARE=1``) there is no shipped softmax: the puzzle kernel is one of yours
(``npu_lab.bringup.yours()`` lists ``aten::_softmax``), and the backward must be yours too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .cost import Stats
from .model import cdiv
from .runner import launch


class PuzzleKernel:
    """A puzzle kernel registered as an ATen operator's npu kernel, until :meth:`restore`."""

    def __init__(self, op: str, library: torch.library.Library, removed: Any) -> None:
        self.op = op
        self.library: torch.library.Library | None = library
        self.removed = removed
        self.calls = 0
        self.stats: Stats | None = None  # the counts of all its launches so far

    def restore(self) -> None:
        """Destroy the registration and put the NPU's shipped kernel back (once)."""
        if self.library is not None:
            self.library._destroy()
            self.library = None
            self.removed.restore()

    def __enter__(self) -> PuzzleKernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def __repr__(self) -> str:
        state = "registered" if self.library is not None else "restored"
        return f"<puzzle kernel for {self.op}: {state}, {self.calls} calls>"


class _NothingRemoved:
    def restore(self) -> None:
        pass


def register_softmax(kernel: Callable[..., None], B0: int = 4, B1: int = 32,  # noqa: N803 - the puzzle's names
                     scratchpad: int = 2048) -> PuzzleKernel:
    """Register ``kernel`` (the softmax or online-softmax puzzle's signature) as npu's ``aten::_softmax``."""
    from ..device.bare import is_bare
    from ..ops.registry import without_kernels

    # on a bare device there is no shipped kernel to take out: the puzzle kernel is one of yours
    removed = _NothingRemoved() if is_bare() else without_kernels("aten::_softmax")
    lib = torch.library.Library("aten", "IMPL")
    handle = PuzzleKernel("aten::_softmax", lib, removed)

    def _softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
        if x.dtype != torch.float32:
            raise RuntimeError(f"the puzzle softmax kernel works in float32, got {x.dtype}")
        if x.dim() == 0:
            return _softmax(x.reshape(1), 0, half_to_float).reshape(())
        dim = dim % x.dim()
        rows = x.movedim(dim, -1).contiguous()
        out = torch.empty_like(rows)
        m = rows.shape[-1]
        n = rows.numel() // m if m else 0
        if n and m:
            stats = launch(kernel, cdiv(n, B0), rows, out, n, m, B0, B1, scratchpad=scratchpad,
                           name=getattr(kernel, "__name__", "softmax"))
            handle.stats = stats if handle.stats is None else handle.stats + stats
        handle.calls += 1
        return out.movedim(-1, dim).contiguous()

    try:
        lib.impl("_softmax", _softmax, "PrivateUse1")
    except Exception:
        lib._destroy()
        removed.restore()
        raise
    return handle
