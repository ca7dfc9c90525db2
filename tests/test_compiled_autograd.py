"""Compiled autograd (Dynamo capturing the backward pass) with the npu backend for both passes."""

from __future__ import annotations

import copy

import torch
from torch._dynamo import compiled_autograd


def test_compiled_autograd_with_the_npu_backend_matches_eager():
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Sigmoid(), torch.nn.Linear(64, 10)).to("npu")
    model = copy.deepcopy(eager)
    x = torch.randn(16, 32, device="npu")
    eager(x).square().mean().backward()
    forward = torch.compile(model, backend="npu")
    with compiled_autograd._enable(torch.compile(backend="npu")):
        forward(x).square().mean().backward()
    for p, q in zip(model.parameters(), eager.parameters()):
        assert p.grad.device == q.device  # the captured backward's gradients come back on the npu
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()
