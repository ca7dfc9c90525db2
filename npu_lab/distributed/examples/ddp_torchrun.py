"""A DDP training script for ``torchrun``: the chapter's model, each rank on its slice of the batch.

    python -m torch.distributed.run --standalone --nproc_per_node=2 \\
        npu_lab/distributed/examples/ddp_torchrun.py --steps 3 --out result.pt

``torchrun`` starts one process per rank and gives each its ``RANK``, ``WORLD_SIZE`` and
``LOCAL_RANK`` (and where to meet) in the environment, so ``init_process_group()`` needs no
arguments; the accelerator is ``npu``, so it picks the npuccl backend. Rank 0 saves the losses and
the trained parameters to ``--out``, to compare with one process trained on whole batches
(:func:`npu_lab.distributed.examples.workers.train_one_process`).
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist

import npu_lab  # noqa: F401 - registers npuccl
from npu_lab.distributed.examples.workers import ddp_train


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--out", required=True, help="where rank 0 saves losses and parameters (torch.save)")
    args = parser.parse_args(argv)
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.npu.set_device(local_rank % torch.npu.device_count())
    dist.init_process_group()  # env:// from torchrun; npu's default backend: npuccl
    result = ddp_train(steps=args.steps, batch=args.batch, width=args.width, warmup=0)
    result["backend"] = dist.group.WORLD.name()  # the backend npu tensors use
    if dist.get_rank() == 0:
        torch.save(result, args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
