"""NPU puzzles: write the kernels yourself, graded by the device's own cost model.

A puzzle kernel runs on a grid of blocks (the chip's cores); each block has a small scratchpad
(on-chip memory), loads tiles of device memory into it, computes on the tiles and stores the
results back. The modules, one job each:

* :mod:`~npu_lab.puzzles.model` - the tile API a kernel is written in (``ctx.load``, ``ctx.store``...);
* :mod:`~npu_lab.puzzles.runner` - :func:`launch`: run a kernel on ``npu`` tensors and count its cost;
* :mod:`~npu_lab.puzzles.compiled` - the compiled runner: the kernel body once for the whole grid;
* :mod:`~npu_lab.puzzles.jit` - its numba loads and stores over the tensors' device memory;
* :mod:`~npu_lab.puzzles.debug` - the trace and the error messages of ``launch(..., debug=True)``;
* :mod:`~npu_lab.puzzles.cost` - :class:`Stats` and the roofline of the device's cost model;
* :mod:`~npu_lab.puzzles.draw` - reads per element, which tiles were loaded when, the roofline;
* :mod:`~npu_lab.puzzles.figures` - matplotlib figures: the roofline with measured kernels, a product's walk;
* :mod:`~npu_lab.puzzles.specs` - the puzzles: shapes, references, minimum bytes, scratchpad;
* :mod:`~npu_lab.puzzles.parts` - which part of the output each block computes, and what that part needs;
* :mod:`~npu_lab.puzzles.references` - what each puzzle computes, as NumPy formulas (the checks' references);
* :mod:`~npu_lab.puzzles.bridge` - a finished softmax kernel as the npu kernel of ``aten::_softmax``.

The puzzles' answers are not in the package: you write them in ``exercises/P1_npu_puzzles.ipynb``.

A first kernel::

    import torch, npu_lab
    from npu_lab.puzzles import launch, cdiv

    def add_ten(ctx, x, out, n, B):
        offs = ctx.program_id(0) * B + ctx.arange(B)
        mask = offs < n
        ctx.store(out, offs, ctx.load(x, offs, mask) + 10.0, mask)

    x = torch.randn(100, device="npu"); out = torch.empty_like(x)
    print(launch(add_ten, cdiv(100, 32), x, out, 100, 32))
"""

from .cost import Roofline, Stats
from .model import (
    Buffer,
    Context,
    OutOfBounds,
    PuzzleError,
    ScratchpadOverflow,
    Tile,
    TileError,
    cdiv,
    next_power_of_2,
)
from .runner import DEFAULT_SCRATCHPAD, debug_launch, launch
from .specs import PUZZLES, puzzle, show

__all__ = [
    "DEFAULT_SCRATCHPAD", "PUZZLES", "Buffer", "Context", "OutOfBounds", "PuzzleError", "Roofline",
    "ScratchpadOverflow", "Stats", "Tile", "TileError", "cdiv", "debug_launch", "launch", "next_power_of_2", "puzzle",
    "show",
]
