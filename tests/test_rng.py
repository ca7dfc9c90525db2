"""Device RNG: reproducible under a seed, savable state, sane distributions."""

import torch


def test_manual_seed_reproduces():
    torch.npu.manual_seed(123)
    a = torch.randn(1000, device="npu").cpu()
    b = torch.rand(10, device="npu").cpu()
    torch.npu.manual_seed(123)
    assert torch.equal(torch.randn(1000, device="npu").cpu(), a)
    assert torch.equal(torch.rand(10, device="npu").cpu(), b)
    torch.npu.manual_seed(124)
    assert not torch.equal(torch.randn(1000, device="npu").cpu(), a)


def test_torch_manual_seed_seeds_npu_too():
    torch.manual_seed(7)
    a = torch.randn(50, device="npu").cpu()
    torch.manual_seed(7)
    assert torch.equal(torch.randn(50, device="npu").cpu(), a)


def test_get_set_rng_state():
    torch.npu.manual_seed(5)
    torch.rand(3, device="npu")
    state = torch.npu.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    a = torch.rand(100, device="npu").cpu()
    torch.npu.set_rng_state(state)
    assert torch.equal(torch.rand(100, device="npu").cpu(), a)
    torch.npu.set_rng_state_all(torch.npu.get_rng_state_all())


def test_distributions():
    torch.npu.manual_seed(0)
    n = torch.randn(200_000, device="npu").cpu()
    assert abs(n.mean().item()) < 0.01 and abs(n.std().item() - 1) < 0.01
    u = torch.rand(200_000, device="npu").cpu()
    assert 0 <= u.min().item() and u.max().item() < 1 and abs(u.mean().item() - 0.5) < 0.01
    x = torch.empty(100_000, device="npu").uniform_(-2, 3).cpu()
    assert -2 <= x.min().item() and x.max().item() < 3
    y = torch.empty(100_000, device="npu").normal_(5, 2).cpu()
    assert abs(y.mean().item() - 5) < 0.05 and abs(y.std().item() - 2) < 0.05
    b = torch.empty(100_000, device="npu").bernoulli_(0.3).cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean().item() - 0.3) < 0.01
    r = torch.randint(0, 10, (10_000,), device="npu").cpu()
    assert r.min().item() == 0 and r.max().item() == 9


def test_dropout_reproducible_and_scaled():
    x = torch.ones(10_000, device="npu")
    torch.npu.manual_seed(1)
    a = torch.nn.functional.dropout(x, 0.25, training=True).cpu()
    torch.npu.manual_seed(1)
    b = torch.nn.functional.dropout(x, 0.25, training=True).cpu()
    assert torch.equal(a, b)
    assert set(a.unique().tolist()) == {0.0, torch.tensor(1 / 0.75).item()}
    assert abs((a == 0).float().mean().item() - 0.25) < 0.02
    assert torch.equal(torch.nn.functional.dropout(x, 0.25, training=False).cpu(), x.cpu())


def test_dropout_backward_uses_mask():
    x = torch.ones(1000, device="npu", requires_grad=True)
    y = torch.nn.functional.dropout(x, 0.5, training=True)
    y.sum().backward()
    assert torch.equal(x.grad.cpu(), y.detach().cpu())


def test_noncontiguous_random_fill():
    t = torch.zeros(4, 6, device="npu").t()
    t.uniform_()
    assert (t.cpu() > 0).all()
