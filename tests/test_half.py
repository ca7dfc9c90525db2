"""float16 on npu: storage, copies and elementwise kernels work (computed in float32, like CPU);
operators without a half kernel fail with PyTorch's style of message and leave inputs intact."""

from __future__ import annotations

import pytest
import torch


def test_half_elementwise_matches_cpu():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(7, 5, generator=g).half(), torch.randn(5, generator=g).half()
    an, bn = a.to("npu"), b.to("npu")
    for fn in (lambda x, y: x + y, lambda x, y: (x * y).sin(), lambda x, y: torch.where(x > 0, x, y) / 3):
        assert torch.equal(fn(an, bn).cpu(), fn(a, b))
    t = an.t()  # non-contiguous
    assert torch.equal((t * 2).cpu(), a.t() * 2)
    c = torch.empty(7, 5, dtype=torch.float16, device="npu")
    c.copy_(an)
    assert torch.equal(c.cpu(), a)
    assert torch.equal(an.float().cpu(), a.float()) and torch.equal(an.float().half().cpu(), a)
    an.add_(bn)
    assert torch.equal(an.cpu(), a + b)


def test_half_without_a_kernel_says_so():
    x = torch.ones(4, 4, dtype=torch.float16).to("npu")
    with pytest.raises(RuntimeError, match=r"not implemented for 'Half' on npu"):
        x.sum()
    assert torch.equal(x.cpu(), torch.ones(4, 4, dtype=torch.float16))
