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


_LAYOUTS = {
    "transposed": lambda: torch.randn(2, 3, 5).transpose(0, 2),
    "permuted": lambda: torch.randn(2, 3, 5).permute(1, 2, 0),
    "expanded scalar": lambda: torch.ones(()).expand(2, 3, 5),
    "expanded column": lambda: torch.ones(3, 1).expand(3, 4),
    "expanded row": lambda: torch.ones(1, 4).expand(3, 4),
    "expanded middle": lambda: torch.ones(2, 1, 5).expand(2, 3, 5),
    "expanded, transposed": lambda: torch.ones(5, 1).expand(5, 3).t(),
    "sliced": lambda: torch.randn(2, 3, 5).transpose(0, 1)[:, :, ::2],
    "size-one dims": lambda: torch.randn(3, 1, 1, 4).permute(3, 1, 2, 0),
}


@pytest.mark.parametrize("name", list(_LAYOUTS))
def test_an_elementwise_result_has_the_cpus_layout(name):
    """The output of an elementwise operator is laid out as ATen's TensorIterator lays it out: in the input's memory
    order, and contiguous where the input is expanded (the gradient of a ``sum`` is, so the operators after it
    need no copy)."""
    x = _LAYOUTS[name]()
    want = x * 3
    got = x.to("npu") * 3 if x.is_contiguous() else _on_npu_like(x) * 3
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want)


def _on_npu_like(x: torch.Tensor) -> torch.Tensor:
    """``x`` on the npu with ``x``'s strides (``.to`` would make an expanded or sliced tensor dense)."""
    base = x.as_strided((x.untyped_storage().nbytes() // x.element_size(),), (1,), 0)
    return base.to("npu").as_strided(x.shape, x.stride(), x.storage_offset())
