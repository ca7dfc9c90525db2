"""Bring-up milestone 7: two ranks. DDP over npuccl, with the learner's kernels, trains equal to one rank.

One check, ``b7.ddp``, of the learner's ``train_ddp(rank, world_size, model, batches, lr)``: on every rank,
move ``model`` to this rank's npu, wrap it in ``DistributedDataParallel``, and train it with SGD (momentum
0.9) on this rank's share of each full batch. The check runs it on forked ranks joined by npuccl
(:func:`npu_lab.distributed.forked_ranks.run_ranks`, so the learner's kernels registered in the notebook
are there) under ``npu_lab.memcheck()``, and compares every rank's weights with one CPU process trained
on the full batches. It also requires what the exercise states and the weights alone would not show:
each rank on its own device, each forward on exactly its share of the rows, and the gradients averaged
by npuccl (all-reduces on the wire). The cases cover two ranks, one rank (DDP of one process is plain
training: an answer that assumes two ranks fails it) and a share of odd size.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from ..bringup.workers import mlp_and_batches
from ..grading import forked
from ..grading.device import case_limit
from ..grading.registry import chapter, exercise
from ..grading.tester import STUB_MESSAGE, NotStarted, Tester
from .bringup_checks import TIMEOUT

chapter("b7", "Bring-up 7: two ranks", [
    "Each rank is a process of its own, with your backend loaded in it",
    "A rank uses its own device: torch.npu.set_device(rank % torch.npu.device_count())",
    "DDP broadcasts rank 0's weights at construction (your cat.out flattens them) and averages the gradients",
    "Each rank trains on its share of every batch: equal shares and a mean loss give the full batch's gradient",
    "Two ranks trained with DDP end with the weights one process reaches on the full batches",
])

MOMENTUM = 0.9


@dataclass(frozen=True)
class Case:
    what: str
    world: int
    batch: int
    steps: int
    lr: float
    seed: int
    hidden: bool = False


CASES = [
    Case("two ranks, batches of 8, three steps", 2, 8, 3, 0.1, 0),
    Case("one rank (DDP of a single process), batches of 6", 1, 6, 2, 0.05, 1),
    Case("two ranks, batches of 6 (a share of 3 rows)", 2, 6, 2, 0.2, 2, hidden=True),
]


def _reference(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], lr: float) -> dict:
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM)
    for x, y in batches:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _rank_body(train_ddp: Callable, model: nn.Module, batches: list, lr: float) -> Callable[[int, int], dict]:
    """What each forked rank runs: the learner's function, watched."""

    def body(rank: int, world: int) -> dict:
        from ..device.memcheck import memcheck
        from ..distributed.process_group import ProcessGroupNPUCCL

        rows: list[int] = []
        first = next(m for m in model.modules() if isinstance(m, nn.Linear))
        first.register_forward_pre_hook(lambda _m, args: rows.append(int(args[0].shape[0])))
        reduces = [0]
        allreduce = ProcessGroupNPUCCL.allreduce

        def counted(self, *args, **kwargs):
            reduces[0] += 1
            return allreduce(self, *args, **kwargs)

        ProcessGroupNPUCCL.allreduce = counted
        with memcheck():
            trained = train_ddp(rank, world, model, [(x.clone(), y.clone()) for x, y in batches], lr)
        if isinstance(trained, nn.parallel.DistributedDataParallel):
            trained = trained.module
        if not isinstance(trained, nn.Module):
            return {"returned": type(trained).__name__}
        return {"returned": "module",
                "state": {k: v.detach().cpu() for k, v in trained.state_dict().items()},
                "devices": sorted({str(p.device) for p in trained.parameters()}), "rows": rows,
                "allreduces": reduces[0]}

    return body


def _grade_case(t: Tester, train_ddp: Callable, case: Case) -> bool:
    """Grade one case; False when its ranks had to be stopped (the next cases would only wait as long)."""
    from ..distributed.forked_ranks import run_ranks

    model, batches = mlp_and_batches(case.seed, case.steps, case.batch)
    want = _reference(copy.deepcopy(model), batches, case.lr)
    title = f"{case.what}:"

    def expect(description: str, ok: bool, **fields: str) -> None:
        t.expect(description, ok, hidden=case.hidden, **fields)

    limit = case_limit(TIMEOUT / 2)
    try:
        got = run_ranks(_rank_body(train_ddp, model, batches, case.lr), case.world, timeout=limit,
                        collective_timeout=min(20.0, limit))
    except forked.ChildTimeout:
        expect(f"{title} every rank finishes", False, expected=f"done within {limit:g} s",
                 got="a rank did not finish", hint="a rank that waits in a collective its peers never call hangs "
                                                    "(every rank must run the same steps)")
        return False
    except Exception as exc:  # noqa: BLE001 - the learner's code raised on a rank
        text = forked.trimmed(exc) or str(exc)
        if STUB_MESSAGE in text:
            raise NotStarted("train_ddp still raises NotImplementedError(\"YOUR CODE HERE\")") from None
        first = str(exc).splitlines()[0][:300] if str(exc) else ""
        expect(f"{title} train_ddp runs on every rank", False, expected="no error",
                 got=f"{type(exc).__name__.removesuffix('FromChild')}: {first}",
                 hint="a kernel your model's DDP step needs may be missing: coverage() on one rank lists them")
        return True
    if any(r["returned"] != "module" for r in got):
        kind = next(r["returned"] for r in got if r["returned"] != "module")
        expect(f"{title} train_ddp returns the trained model", False, expected="an nn.Module (or its DDP wrapper)",
                 got=kind)
        return True
    share = case.batch // case.world
    for rank, r in enumerate(got):
        device = f"npu:{rank % torch.npu.device_count()}"
        expect(f"{title} rank {rank} trains on its own device", r["devices"] == [device], expected=device,
                 got=", ".join(r["devices"]),
                 hint="rank r uses npu:(r % torch.npu.device_count()): torch.npu.set_device, then model.to(device)")
        expect(f"{title} rank {rank} runs each step on its share of the batch", r["rows"] == [share] * case.steps,
                 expected=f"{case.steps} forwards of {share} rows ({case.batch} rows / {case.world} ranks)",
                 got=f"forwards of {r['rows']} rows",
                 hint="split each batch into world_size equal shares and keep share number rank "
                      "(x.chunk(world_size)[rank]); the other ranks do the rest")
    if case.world > 1:
        expect(f"{title} the gradients are averaged over npuccl", all(r["allreduces"] >= case.steps for r in got),
                 expected=f"at least one all-reduce per step on every rank ({case.steps} steps)",
                 got=", ".join(f"rank {i}: {r['allreduces']}" for i, r in enumerate(got)),
                 hint="wrap the model in torch.nn.parallel.DistributedDataParallel and train the wrapper: its "
                      "backward all-reduces the gradients")
    worst, where = 0.0, ""
    for r in got:
        for k, v in want.items():
            d = float((r["state"][k].double() - v.double()).abs().max())
            if d > worst:
                worst, where = d, k
    expect(f"{title} every rank's weights match one process trained on the full batches (1e-4)", worst <= 1e-4,
             expected="max |rank - one process| <= 1e-4",
             got="within 1e-4" if worst <= 1e-4 else f"max difference {worst:.3g} (in {where})",
             hint="DDP averages the gradients over the ranks: with equal shares, a mean loss on each share and the "
                  "same SGD (lr, momentum 0.9) on every rank, the average is the full batch's gradient")
    return True


@exercise("b7.ddp", "Two ranks: DDP over npuccl with your kernels trains equal to one process",
          names=["train_ddp"], timeout=3 * TIMEOUT)
def _ddp(t: Tester, train_ddp) -> None:
    from ..device import bare

    bare.require_bare("the bring-up checks")
    if not callable(train_ddp):
        raise NotStarted("define train_ddp(rank, world_size, model, batches, lr)")
    for case in CASES:
        if not _grade_case(t, train_ddp, case):
            break
