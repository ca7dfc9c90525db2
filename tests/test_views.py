"""Views share device memory exactly as PyTorch's CPU views do."""

import pytest
import torch

VIEWS = {
    "view": lambda t: t.view(4, 6),
    "reshape": lambda t: t.reshape(2, 12),
    "transpose": lambda t: t.transpose(0, 1),
    "t": lambda t: t.t(),
    "permute": lambda t: t.reshape(2, 3, 4).permute(2, 0, 1),
    "slice": lambda t: t[1:, ::2],
    "select": lambda t: t[2],
    "narrow": lambda t: t.narrow(1, 1, 3),
    "expand": lambda t: t[:1].expand(5, 6),
    "as_strided": lambda t: t.as_strided((3, 3), (7, 1), 2),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "squeeze": lambda t: t[:1].squeeze(0),
    "diagonal": lambda t: t.diagonal(),
    "unflatten": lambda t: t.unflatten(1, (2, 3)),
    "flatten": lambda t: t.flatten(),
    "chunk": lambda t: t.chunk(2, dim=1)[1],
    "split": lambda t: t.split(2)[1],
    "unbind": lambda t: t.unbind(0)[3],
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_geometry_and_alias(name):
    fn = VIEWS[name]
    base_cpu = torch.arange(24.0).reshape(4, 6)
    base = base_cpu.npu()
    v_cpu, v = fn(base_cpu), fn(base)
    assert v.shape == v_cpu.shape
    assert v.stride() == v_cpu.stride()
    assert v.storage_offset() == v_cpu.storage_offset()
    assert v.untyped_storage() is base.untyped_storage() or (
        v.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    )
    assert torch.equal(v.cpu(), v_cpu)


@pytest.mark.parametrize("name", ["slice", "select", "transpose", "diagonal", "narrow", "view"])
def test_inplace_on_view_is_seen_through_base(name):
    base_cpu = torch.arange(24.0).reshape(4, 6)
    base = base_cpu.npu()
    VIEWS[name](base_cpu).mul_(-1).add_(0.5)
    VIEWS[name](base).mul_(-1).add_(0.5)
    assert torch.equal(base.cpu(), base_cpu)


def test_contiguous_copies_only_when_needed():
    t = torch.arange(12.0).reshape(3, 4).npu()
    assert t.contiguous() is t
    tt = t.t()
    assert not tt.is_contiguous()
    c = tt.contiguous()
    assert c.is_contiguous() and c.stride() == (3, 1)
    assert c.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
    assert torch.equal(c.cpu(), t.cpu().t())


def test_setitem_through_indexing():
    t = torch.zeros(3, 4, device="npu")
    t[1] = 5
    t[:, 2] = torch.tensor([1.0, 2.0, 3.0]).npu()
    ref = torch.zeros(3, 4)
    ref[1] = 5
    ref[:, 2] = torch.tensor([1.0, 2.0, 3.0])
    assert torch.equal(t.cpu(), ref)


def test_view_of_noncontiguous_elementwise():
    x = torch.randn(5, 7)
    a = x.npu()
    assert torch.allclose((a.t() * 2 + a.t()[0]).cpu(), x.t() * 2 + x.t()[0])
