"""A rank as ``torchrun`` starts it: a fresh process that loads your backend before it trains (milestone 7).

:func:`npu_lab.distributed.launch.launch` runs :func:`train_mlp` in new processes (``spawn``), so nothing
of the notebook is in them: each rank loads your ``# my_npu`` cells from the milestone notebooks as saved
(:func:`npu_lab.bringup.load`), your ``train_ddp`` among them, then trains::

    from npu_lab.distributed.launch import launch
    from npu_lab.bringup import workers

    launch(workers.train_mlp, nprocs=2, args=(["B1_eager_mlp", "B2_cnn", "B3_transformer", "B7_two_ranks"],
                                             os.getcwd()))
"""

from __future__ import annotations

from typing import Any

import torch

from .carry import load


def mlp_and_batches(seed: int = 0, steps: int = 3, batch: int = 8) -> tuple[torch.nn.Module, list]:
    """The model (``models.mlp(12, 24, 5)``, seeded) and ``steps`` full batches of ``batch`` rows milestone 7 trains."""
    from .. import models

    torch.manual_seed(seed)
    model = models.mlp(12, 24, 5)
    g = torch.Generator().manual_seed(100 + seed)
    batches = [(torch.randn(batch, 12, generator=g), torch.randint(0, 5, (batch,), generator=g))
               for _ in range(steps)]
    return model, batches


def train_mlp(notebooks: list[str], folder: str, lr: float = 0.1, seed: int = 0, steps: int = 3,
              batch: int = 8) -> dict[str, Any]:
    """Load ``notebooks``' ``# my_npu`` cells from ``folder``, then train with the ``train_ddp`` they define.

    Returns the trained weights (on the CPU) and which operators of this process's ``npu`` are yours.
    """
    import torch.distributed as dist

    from ..device import bare

    modules = [load(name, folder) for name in notebooks]
    train_ddp = next((m.train_ddp for m in reversed(modules) if hasattr(m, "train_ddp")), None)
    if train_ddp is None:
        raise NameError(f"none of {notebooks} defines train_ddp in a cell marked # my_npu")
    model, batches = mlp_and_batches(seed, steps, batch)
    trained = train_ddp(dist.get_rank(), dist.get_world_size(), model, batches, lr)
    trained = getattr(trained, "module", trained)
    return {"state": {k: v.detach().cpu() for k, v in trained.state_dict().items()}, "yours": len(bare.yours())}
