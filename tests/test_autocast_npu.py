"""Mixed precision on npu: autocast's cast policy and GradScaler's two kernels (npu_lab/device/amp.py)."""

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import npu_lab
from npu_lab.device import native


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_autocast_policy_on_a_training_step(dtype):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 5)).npu()
    x = torch.randn(8, 10, device="npu")
    y = torch.randint(0, 5, (8,), device="npu")
    with torch.autocast("npu", dtype=dtype):
        h = model[0](x)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        soft = logits.softmax(-1)
    assert h.dtype == dtype and logits.dtype == dtype  # products: lower precision
    assert loss.dtype == torch.float32 and soft.dtype == torch.float32  # touchy ops: float32
    loss.backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())  # master weights stay float32
    policy = native.load().autocast_policy
    assert "aten::linear" in policy("lower_precision_fp") and "aten::softmax.int" in policy("fp32_set_opt_dtype")


def test_unscale_kernel_matches_cpu():
    grads_cpu = [torch.tensor([1.0, 2.0, 4.0]), torch.randn(3, 4).t(), torch.tensor([8.0, float("inf")])]
    for with_inf in (False, True):
        cpu = [g.clone() for g in (grads_cpu if with_inf else grads_cpu[:2])]
        npu = [g.npu() for g in cpu]
        found_cpu, found_npu = torch.zeros(1), torch.zeros(1, device="npu")
        torch._amp_foreach_non_finite_check_and_unscale_(cpu, found_cpu, torch.tensor([0.25]))
        torch._amp_foreach_non_finite_check_and_unscale_(npu, found_npu, torch.tensor([0.25], device="npu"))
        assert found_npu.item() == found_cpu.item() == float(with_inf)
        for c, n in zip(cpu, npu):
            torch.testing.assert_close(n.cpu(), c)


def test_unscale_kernel_rejects_bad_arguments():
    with pytest.raises(RuntimeError, match="inv_scale must be a 1-element tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(
            [torch.ones(2, device="npu")], torch.zeros(1, device="npu"), torch.ones(2, device="npu"))


def test_update_scale_kernel_matches_cpu():
    found = [0, 0, 1, 0, 0, 0, 1, 1, 0]
    state = {d: (torch.full((1,), 1024.0, device=d), torch.zeros(1, dtype=torch.int32, device=d))
             for d in ("cpu", "npu")}
    for f in found:
        for d, (scale, tracker) in state.items():
            torch._amp_update_scale_(scale, tracker, torch.full((1,), float(f), device=d), 2.0, 0.5, 2)
        assert state["npu"][0].item() == state["cpu"][0].item()
        assert state["npu"][1].item() == state["cpu"][1].item()


def test_grad_scaler_trains_and_skips_overflowing_steps():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 5)).npu()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("npu", init_scale=2.0 ** 10)
    x = torch.randn(16, 10, device="npu")
    y = torch.randint(0, 5, (16,), device="npu")
    losses = []
    with npu_lab.profile() as prof:
        for _ in range(5):
            opt.zero_grad()
            with torch.autocast("npu", dtype=torch.float16):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            losses.append(loss.item())
    assert losses[-1] < losses[0]
    names = [k.name for k in prof.kernels]
    assert names.count("amp_non_finite_check_and_unscale") == 5 and names.count("amp_update_scale") == 5
    # a gradient that overflows: the step is skipped and the scale halves
    before = [p.detach().clone() for p in model.parameters()]
    opt.zero_grad()
    with torch.autocast("npu", dtype=torch.float16):
        loss = F.cross_entropy(model(x), y) * float("inf")
    scaler.scale(loss).backward()
    scaler.step(opt)
    scale = scaler.get_scale()
    scaler.update()
    assert scaler.get_scale() == scale * 0.5
    assert all(torch.equal(b.cpu(), p.detach().cpu()) for b, p in zip(before, model.parameters()))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_unscale_kernel_writes_half_gradients_in_a_list(dtype):
    """The float32 bridge for half inputs must write every tensor of a written list back (foreach ops)."""
    grads = [torch.tensor([2.0, 4.0, float("inf")], dtype=dtype), torch.tensor([8.0], dtype=dtype)]
    npu = [g.to("npu") for g in grads]
    found_cpu, found_npu = torch.zeros(1), torch.zeros(1, device="npu")
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found_cpu, torch.tensor([0.5]))
    torch._amp_foreach_non_finite_check_and_unscale_(npu, found_npu, torch.tensor([0.5], device="npu"))
    for want, got in zip(grads, npu):
        assert got.dtype == dtype
        torch.testing.assert_close(got.cpu(), want)
    assert found_npu.item() == found_cpu.item() == 1.0
