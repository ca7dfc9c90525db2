"""The optimizers' multi-tensor operators on the npu (npu_lab/ops/foreach.py) against PyTorch's CPU: the same
results, the same per-tensor launches on the simulated clock, ATen's errors, and every case the per-tensor fast
paths do not take (half precision, broadcasting, another device) still right."""

from __future__ import annotations

import pytest
import torch

import npu_lab
from npu_lab import models


@pytest.mark.parametrize("make_optimizer", [
    lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2),
    lambda p: torch.optim.Adam(p, lr=1e-2),
    lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True),
], ids=["sgd", "sgd-nesterov", "adam", "adamw-amsgrad"])
def test_optimizer_steps_match_the_cpu(make_optimizer):
    params = {}
    for device in ("cpu", "npu"):
        torch.manual_seed(0)
        model = models.mlp().to(device)
        x, y = models.example_batch(model, 16, device)
        opt = make_optimizer(model.parameters())
        for _ in range(3):
            opt.zero_grad()
            models.loss_fn(model, model(x), y).backward()
            opt.step()
        params[device] = [p.detach().cpu() for p in model.parameters()]
    for got, want in zip(params["npu"], params["cpu"]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_a_momentum_step_launches_one_kernel_per_tensor_and_operation():
    torch.manual_seed(0)
    model = models.mlp().to("npu")
    x, y = models.example_batch(model, 8, "npu")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(2):  # the second step is the steady state: the momentum buffers exist
        opt.zero_grad()
        models.loss_fn(model, model(x), y).backward()
        with npu_lab.profile() as prof:
            opt.step()
    tensors = len(list(model.parameters()))
    names = [k.name for k in prof.kernels if k.kind == "kernel"]
    assert len(names) == 3 * tensors  # bufs *= momentum; bufs += grads; params -= lr * bufs
    assert {op.name for op in prof.ops} <= {"aten::mul_.Scalar", "aten::add_.Tensor"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_each_form_matches_the_cpu(dtype):
    torch.manual_seed(0)
    base = [(torch.randn(3, 4) * 4).to(dtype), (torch.randn(5) * 4).to(dtype), (torch.randn(3, 4) * 4).to(dtype)]
    other = [(torch.randn(3, 4) * 4).to(dtype), (torch.randn(5) * 4).to(dtype), (torch.randn(4) * 4).to(dtype)]
    scalar = 3 if dtype == torch.int64 else 0.5
    for op, args in ((torch._foreach_add_, (other,)), (torch._foreach_add_, (scalar,)),
                     (torch._foreach_mul_, (scalar,)), (torch._foreach_mul_, (other,))):
        cpu, npu = [t.clone() for t in base], [t.npu() for t in base]
        npu_args = tuple([t.npu() for t in a] if isinstance(a, list) else a for a in args)
        op(cpu, *args)
        op(npu, *npu_args)
        for got, want in zip(npu, cpu):
            torch.testing.assert_close(got.cpu(), want)
    cpu, npu = [t.clone() for t in base], [t.npu() for t in base]
    torch._foreach_add_(cpu, other, alpha=2)
    torch._foreach_add_(npu, [t.npu() for t in other], alpha=2)
    for got, want in zip(npu, cpu):
        torch.testing.assert_close(got.cpu(), want)


def test_a_transposed_or_sliced_tensor_is_updated_in_place():
    base = torch.randn(4, 6)
    target = base.npu()
    views = [target.t(), target[:, ::2]]
    updates = [torch.ones(6, 4), torch.full((4, 3), 2.0)]
    torch._foreach_add_(views, [u.npu() for u in updates], alpha=-1)
    expected = base.clone()
    expected.t().add_(updates[0], alpha=-1)
    expected[:, ::2].add_(updates[1], alpha=-1)
    torch.testing.assert_close(target.cpu(), expected)


def test_lists_of_different_lengths_raise_atens_error():
    one = [torch.ones(2, device="npu")]
    with pytest.raises(RuntimeError, match="Tensor lists must have the same number of tensors, got 1 and 2"):
        torch._foreach_add_(one, one + one)


def test_small_tensors_go_in_one_call_in_order_with_the_same_launches():
    """The small contiguous tensors are updated by one call into compiled code, the others (a large one, a
    transposed one, another dtype) one by one, in the list's order: a pair that reads a tensor updated earlier in
    the list reads the updated values, as it does on the CPU, and each tensor is still one launch."""
    torch.manual_seed(0)
    base = [torch.randn(3, 4), torch.randn(1 << 17), torch.randn(4, 3).t(), torch.randn(5), torch.randn(3, 4),
            torch.randn(6).double()]
    cpu = [t.clone() for t in base]
    npu = [t.npu() if t.is_contiguous() else t.t().npu().t() for t in base]

    def others(ts: list[torch.Tensor]) -> list[torch.Tensor]:
        # (pair 4 reads tensor 0 and pair 2 reads tensor 4, one before and one after its own update)
        return [ts[4].clone(), ts[1] * 2, ts[2].clone(), ts[3] + 1, ts[0], ts[5] * 3]

    other_cpu, other_npu = others(cpu), others(npu)
    other_npu[4], other_cpu[4] = npu[0], cpu[0]
    other_npu[2], other_cpu[2] = npu[4], cpu[4]
    clock = npu_lab.device.clock.clock(0)
    launches = clock.launches
    for ts, os_ in ((cpu, other_cpu), (npu, other_npu)):
        torch._foreach_add_(ts, os_, alpha=0.5)
        torch._foreach_mul_(ts, 1.5)
        torch._foreach_add_(ts, 2.0)
    assert clock.launches - launches == 3 * len(base)
    for got, want in zip(npu, cpu, strict=True):
        torch.testing.assert_close(got.cpu(), want)
