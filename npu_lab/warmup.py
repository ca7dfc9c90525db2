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
    from .puzzles import launch, solutions  # the puzzle runner's numba loops, cached on disk

    xp = torch.randn(64, device="npu")
    launch(solutions.map_kernel, 2, xp, torch.empty_like(xp), 64, 32)
    return time.perf_counter() - start
