"""Lazy mode: record, sync, compile once per structure, same results as eager."""

import torch

from npu_lab import lazy, models


def _fresh():
    lazy.reset_metrics()


def test_ops_are_recorded_not_run():
    _fresh()
    x = torch.randn(4, 4, device="npu")
    with lazy.mode():
        y = (x * 2).relu() + 1
        assert isinstance(y, lazy.LazyTensor) and y.shape == (4, 4) and y.device.type == "npu"
        assert lazy.metrics.graphs_executed == 0 and lazy.metrics.ops_recorded == 3
        z = y.cpu()  # a sync point
    assert lazy.metrics.graphs_executed == 1
    assert lazy.metrics.sync_points["to cpu"] == 1
    torch.testing.assert_close(z, ((x * 2).relu() + 1).cpu())


def test_item_and_print_are_sync_points():
    _fresh()
    x = torch.arange(4.0, device="npu")
    with lazy.mode():
        s = (x * x).sum()
        assert s.item() == 14.0
        text = repr(x + 1)
    assert "1., 2., 3., 4." in text
    assert lazy.metrics.sync_points["item()"] == 1 and lazy.metrics.sync_points["print"] == 1


def test_data_dependent_shape_forces_a_sync():
    _fresh()
    x = torch.tensor([1.0, -2.0, 3.0], device="npu")
    with lazy.mode():
        y = x * 2
        picked = y[y > 0]  # boolean indexing: the output size depends on the data
        total = picked.sum().item()
    assert total == 8.0
    assert any("data-dependent" in k for k in lazy.metrics.sync_points)


def test_training_matches_eager_and_reuses_the_compiled_graph():
    _fresh()
    torch.manual_seed(0)
    ref, lz = models.mlp(), models.mlp()
    lz.load_state_dict(ref.state_dict())
    ref_losses = models.train(ref, 6, "npu", lr=0.05)
    lz.npu()
    x, y = models.example_batch(lz, 8, "npu")
    opt = torch.optim.SGD(lz.parameters(), lr=0.05, momentum=0.9)
    losses = []
    with lazy.mode():
        for _ in range(6):
            opt.zero_grad()
            loss = models.loss_fn(lz, lz(x), y)
            loss.backward()
            opt.step()
            lazy.mark_step()
            losses.append(loss.item())
    for a, b in zip(ref_losses, losses):
        assert abs(a - b) < 1e-5
    for p, q in zip(ref.parameters(), lz.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach().cpu(), rtol=1e-5, atol=1e-6)
    m = lazy.metrics
    assert m.graphs_executed == 6 and m.sync_points["mark_step"] == 6
    assert m.cache_hits >= 3  # steps with the same structure reuse the compiled graph
    assert "ops recorded" in m.report()


def test_recorded_graph_is_available_and_fused():
    with lazy.mode():
        x = torch.randn(8, 8, device="npu")
        y = torch.nn.functional.gelu(x * 3 + 1).sigmoid()
        lazy.mark_step()
    gm = lazy.last_graph()
    assert gm is not None and "fused_pointwise" in gm.code
    assert y.cpu().shape == (8, 8)
