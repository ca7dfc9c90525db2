"""End to end: a 3-layer MLP trains on npu exactly as on the CPU, without leaking."""

import gc

import pytest
import torch
import torch.nn.functional as F


def make_mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(10, 32), torch.nn.ReLU(),
        torch.nn.Linear(32, 32), torch.nn.ReLU(),
        torch.nn.Linear(32, 5),
    )


def train(device: str, loss_name: str, steps: int = 20, foreach: bool | None = None):
    g = torch.Generator().manual_seed(1)
    x_cpu = torch.randn(64, 10, generator=g)
    y_cpu = torch.randint(0, 5, (64,), generator=g)
    target_cpu = F.one_hot(y_cpu, 5).float()
    model = make_mlp().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=foreach)
    x, y, target = x_cpu.to(device), y_cpu.to(device), target_cpu.to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        out = model(x)
        loss = F.cross_entropy(out, y) if loss_name == "ce" else F.mse_loss(out, target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("loss_name", ["ce", "mse"])
@pytest.mark.parametrize("foreach", [False, True])
def test_mlp_matches_cpu(loss_name, foreach):
    cpu_losses, cpu_weights = train("cpu", loss_name, foreach=foreach)
    npu_losses, npu_weights = train("npu", loss_name, foreach=foreach)
    assert cpu_losses[-1] < cpu_losses[0]
    for a, b in zip(cpu_losses, npu_losses):
        assert abs(a - b) <= 1e-4
    for k in cpu_weights:
        assert torch.allclose(cpu_weights[k], npu_weights[k], atol=1e-4, rtol=0), k


def test_training_does_not_leak():
    gc.collect()
    baseline = torch.npu.memory_allocated()
    train("npu", "ce", steps=5)
    gc.collect()
    assert torch.npu.memory_allocated() == baseline
    # and a second run lands on the same number (nothing accumulates)
    train("npu", "mse", steps=5)
    gc.collect()
    assert torch.npu.memory_allocated() == baseline


def test_kernel_launches_are_counted():
    from npu_lab.device import clock

    c = clock.clock(0)
    before = c.launches
    train("npu", "ce", steps=1)
    assert c.launches - before > 10
