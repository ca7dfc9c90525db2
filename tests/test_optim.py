"""Optimizer steps run entirely on npu (foreach path or not) and match the CPU."""

import pytest
import torch


def _params():
    torch.manual_seed(0)
    return [torch.randn(5, 3), torch.randn(3), torch.randn(4, 4)]


OPTIMIZERS = {
    "sgd": lambda p, fe: torch.optim.SGD(p, lr=0.1, foreach=fe),
    "sgd_momentum": lambda p, fe: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=fe),
    "sgd_nesterov_wd": lambda p, fe: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True,
                                                    weight_decay=0.01, foreach=fe),
    "adamw": lambda p, fe: torch.optim.AdamW(p, lr=0.01, foreach=fe),
    "adamw_amsgrad": lambda p, fe: torch.optim.AdamW(p, lr=0.01, amsgrad=True, foreach=fe),
    "adam": lambda p, fe: torch.optim.Adam(p, lr=0.01, weight_decay=0.1, foreach=fe),
}


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_matches_cpu(name, foreach):
    cpu = [p.clone().requires_grad_() for p in _params()]
    npu = [p.to("npu").requires_grad_() for p in _params()]
    opt_cpu, opt_npu = OPTIMIZERS[name](cpu, foreach), OPTIMIZERS[name](npu, foreach)
    transfers_before = torch.npu.memory_stats()["transfer.device_to_host_bytes"]
    for step in range(5):
        grads = [torch.randn(p.shape, generator=torch.Generator().manual_seed(step)) for p in cpu]
        for p, g in zip(cpu, grads):
            p.grad = g.clone()
        for p, g in zip(npu, grads):
            p.grad = g.to("npu")
        opt_cpu.step()
        opt_npu.step()
    # the update never left the device
    assert torch.npu.memory_stats()["transfer.device_to_host_bytes"] == transfers_before
    for a, b in zip(cpu, npu):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)
    for state_npu in opt_npu.state.values():
        for key, v in state_npu.items():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                assert v.device.type == "npu", key
