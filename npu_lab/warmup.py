"""Compile the NPU's kernels ahead of time, so a learner's first cells are fast.

numba compiles each kernel the first time it runs and caches the machine code
on disk; :func:`warmup` runs the reference models (eager training steps with
SGD and AdamW, and compiled steps of the model and its optimizer) so the
common kernels are in the cache.
Binder's ``postBuild`` and CI call it; ``python -m npu_lab warmup`` runs it.
"""

from __future__ import annotations

import time

import torch


def warmup(compile: bool = True) -> float:
    """Run the reference models once on ``npu``; returns the seconds it took."""
    import npu_lab  # noqa: F401  (registers the device)

    from . import models

    start = time.perf_counter()
    torch.manual_seed(0)
    for model in (models.mlp(), models.SmallCNN(), models.TransformerBlock()):
        models.train(model, steps=2, device="npu")
        models.train(model, steps=1, device="npu", optimizer="adamw")
        with torch.no_grad():
            model.eval()(models.example_batch(model, 2, "npu")[0])
    if compile:
        from torch import _dynamo

        model = models.mlp().to("npu")
        x, y = models.example_batch(model, 8, "npu")
        step = torch.compile(lambda: models.loss_fn(model, model(x), y), backend="npu")
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        update = torch.compile(opt.step, backend="npu")
        for _ in range(2):  # a compiled optimizer step: fused in-place updates, one combined kernel
            opt.zero_grad()
            step().backward()
            update()
        _dynamo.reset()
    _warm_puzzle_runner()
    return time.perf_counter() - start


def _scale_shift(ctx, x, out, n, B):  # noqa: ANN001, N803 - a tile kernel in the puzzles' style
    offs = ctx.program_id(0) * B + ctx.arange(B)
    mask = offs < n
    ctx.store(out, offs, ctx.load(x, offs, mask) * 2.0 + 1.0, mask)


def _warm_puzzle_runner() -> None:
    """Compile the tile runner's numba loads and stores (masked and not) into the on-disk cache."""
    from .puzzles import launch

    xp = torch.randn(70, device="npu")
    launch(_scale_shift, 3, xp, torch.empty_like(xp), 70, 32)
