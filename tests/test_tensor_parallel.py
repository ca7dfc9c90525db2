"""Tensor-parallel linear layers on npu (npu_lab/distributed/tensor_parallel.py) in 2 real processes.

Each rank builds the same unsharded layers (seeded), takes its shard with ``from_linear``, runs a
forward and a backward, and compares outputs and gradients with the unsharded layers run in the
same process: the output must equal the unsharded output, the input's gradient the unsharded
input's gradient, and each weight shard's gradient the matching slice of the unsharded weight's
gradient. Results come back through a JSON file per rank, one pytest test per check.
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import npu_lab  # noqa: F401 - registers npuccl
from npu_lab.distributed.tensor_parallel import ColumnParallelLinear, ParallelMLP, RowParallelLinear

WORLD = 2
TOL = {"rtol": 1e-5, "atol": 1e-5}

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built in this torch")


def _close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.device.type == "npu", f"{what}: on {got.device}, expected npu"
    torch.testing.assert_close(got.detach().cpu(), want.detach().cpu(), msg=lambda m: f"{what}: {m}", **TOL)


def _inputs(seed: int, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    return x.to("npu").requires_grad_(True), x.clone().to("npu").requires_grad_(True)


def _linear(seed: int, i: int, o: int) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(i, o).to("npu")


def check_column_parallel_gathered(rank: int) -> None:
    full = _linear(1, 6, 8)
    layer = ColumnParallelLinear.from_linear(full, gather_output=True)
    assert layer.weight.shape == (4, 6) and layer.bias.shape == (4,)
    x, x_ref = _inputs(2, (5, 6))
    y, y_ref = layer(x), full(x_ref)
    _close(y, y_ref, "column-parallel output (gathered)")
    g = torch.randn(5, 8, generator=torch.Generator().manual_seed(3)).to("npu")
    y.backward(g)
    y_ref.backward(g)
    _close(x.grad, x_ref.grad, "column-parallel input gradient")
    rows = slice(4 * rank, 4 * rank + 4)
    _close(layer.weight.grad, full.weight.grad[rows], "column-parallel weight gradient shard")
    _close(layer.bias.grad, full.bias.grad[rows], "column-parallel bias gradient shard")


def check_column_parallel_sliced(rank: int) -> None:
    full = _linear(4, 6, 8)
    layer = ColumnParallelLinear.from_linear(full)  # gather_output=False: this rank's slice of y
    x, x_ref = _inputs(5, (3, 6))
    y, y_ref = layer(x), full(x_ref)
    cols = slice(4 * rank, 4 * rank + 4)
    _close(y, y_ref[:, cols], "column-parallel output slice")
    # A loss that each rank computes on its slice; summed over ranks it is the unsharded loss.
    (y ** 2).sum().backward()
    (y_ref ** 2).sum().backward()
    _close(x.grad, x_ref.grad, "column-parallel input gradient (all-reduced over ranks)")


def check_row_parallel(rank: int) -> None:
    full = _linear(6, 8, 5)
    layer = RowParallelLinear.from_linear(full, input_is_parallel=False)
    assert layer.weight.shape == (5, 4)
    x, x_ref = _inputs(7, (3, 8))
    y, y_ref = layer(x), full(x_ref)
    _close(y, y_ref, "row-parallel output")
    y.sum().backward()
    y_ref.sum().backward()
    cols = slice(4 * rank, 4 * rank + 4)
    _close(layer.weight.grad, full.weight.grad[:, cols], "row-parallel weight gradient shard")
    _close(layer.bias.grad, full.bias.grad, "row-parallel bias gradient")
    # the input's gradient: this rank's slice is right, the other slice is zero (it was not used here)
    _close(x.grad[:, cols], x_ref.grad[:, cols], "row-parallel input gradient slice")


def check_mlp_column_then_row(rank: int) -> None:
    fc1, fc2 = _linear(8, 6, 16), _linear(9, 16, 4)
    mlp = ParallelMLP.from_mlp(fc1, fc2, nn.GELU())
    ref = nn.Sequential(fc1, nn.GELU(), fc2)
    x, x_ref = _inputs(10, (7, 6))
    y, y_ref = mlp(x), ref(x_ref)
    _close(y, y_ref, "MLP output")
    torch.nn.functional.mse_loss(y, torch.zeros_like(y)).backward()
    torch.nn.functional.mse_loss(y_ref, torch.zeros_like(y_ref)).backward()
    _close(x.grad, x_ref.grad, "MLP input gradient")
    rows = slice(8 * rank, 8 * rank + 8)
    _close(mlp.fc1.weight.grad, fc1.weight.grad[rows], "MLP fc1 weight gradient shard")
    _close(mlp.fc1.bias.grad, fc1.bias.grad[rows], "MLP fc1 bias gradient shard")
    _close(mlp.fc2.weight.grad, fc2.weight.grad[:, rows], "MLP fc2 weight gradient shard")
    _close(mlp.fc2.bias.grad, fc2.bias.grad, "MLP fc2 bias gradient")


def check_mlp_trains_like_unsharded(rank: int) -> None:
    fc1, fc2 = _linear(11, 6, 8), _linear(12, 8, 3)
    mlp = ParallelMLP.from_mlp(fc1, fc2, nn.Tanh())
    ref = nn.Sequential(fc1, nn.Tanh(), fc2)
    opt, opt_ref = torch.optim.SGD(mlp.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(13)
    for _ in range(3):
        x, t = torch.randn(4, 6, generator=g).to("npu"), torch.randn(4, 3, generator=g).to("npu")
        for model, o in ((mlp, opt), (ref, opt_ref)):
            o.zero_grad()
            torch.nn.functional.mse_loss(model(x), t).backward()
            o.step()
    _close(mlp(x), ref(x), "MLP output after 3 SGD steps")


def check_bad_sizes_raise(rank: int) -> None:
    with pytest.raises(ValueError, match="divisible"):
        ColumnParallelLinear(4, 7)
    with pytest.raises(ValueError, match="divisible"):
        RowParallelLinear(5, 4)
    layer = RowParallelLinear(8, 4, device="npu")
    with pytest.raises(ValueError, match="slice of the input"):
        layer(torch.randn(2, 8, device="npu"))


CHECKS: dict[str, Callable[[int], None]] = {
    name.removeprefix("check_"): fn for name, fn in globals().items() if name.startswith("check_")
}


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.npu.set_device(rank % torch.npu.device_count())
    dist.init_process_group("npuccl", init_method=f"file://{init_file}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=30))
    results = {}
    for name, check in CHECKS.items():
        try:
            check(rank)
            results[name] = {"ok": True}
        except Exception:
            results[name] = {"ok": False, "error": traceback.format_exc()}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def suite() -> dict[int, dict[str, dict]]:
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(os.path.join(tmp, "init"), tmp), nprocs=WORLD)
        return {r: json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(WORLD)}


@pytest.mark.parametrize("name", list(CHECKS))
def test_tensor_parallel(suite: dict[int, dict[str, dict]], name: str) -> None:
    errors = [f"rank {r}:\n{suite[r][name]['error']}" for r in range(WORLD) if not suite[r][name]["ok"]]
    assert not errors, "\n".join(errors)


def test_layers_need_a_process_group() -> None:
    if dist.is_initialized():
        pytest.skip("a process group is up in this process")
    with pytest.raises(RuntimeError, match="init_process_group"):
        ColumnParallelLinear(4, 4)
