"""Sparse tensors on npu: PyTorch's device-generic sparse kernels run natively, the rest falls back.

csrc/aten/NpuSparse.cpp registers, for the SparsePrivateUse1 and SparseCsrPrivateUse1 keys,
the sparse kernels PyTorch also registers for the Meta sparse keys (constructors, member
accessors, copies, CSR pointwise operators on ``values``). Everything else (conversions from
dense, sparse matmuls) has no npu kernel: PyTorch's error with the fallback off, the CPU with it on.
"""

import pytest
import torch

import npu_lab


def _sparse_ish(*shape: int) -> torch.Tensor:
    x = torch.randn(*shape)
    return torch.where(x > 0.3, x, torch.zeros(()))


@pytest.fixture
def fallback_on():
    prev = npu_lab.cpu_fallback_enabled()
    npu_lab.set_cpu_fallback(True)
    yield
    npu_lab.set_cpu_fallback(prev)


def test_coo_tensor_built_on_npu_from_its_members(fallback_off):
    x = _sparse_ish(4, 6).to_sparse()
    s = torch.sparse_coo_tensor(x._indices().npu(), x._values().npu(), x.shape)
    assert s.device == torch.device("npu", 0) and s.layout == torch.sparse_coo
    assert s._indices().device.type == "npu" and s._values().device.type == "npu"
    assert s._nnz() == x._nnz() and s.sparse_dim() == 2 and s.dense_dim() == 0
    assert torch.equal(s.cpu().to_dense(), x.to_dense())  # npu -> cpu copy of a sparse tensor


def test_csr_members_and_pointwise_ops_run_natively(fallback_off):
    x = _sparse_ish(5, 7)
    c = x.to_sparse_csr()
    n = torch.sparse_csr_tensor(c.crow_indices().npu(), c.col_indices().npu(), c.values().npu(), c.shape)
    assert n.layout == torch.sparse_csr and n.device.type == "npu"
    assert torch.equal(n.crow_indices().cpu(), c.crow_indices())
    for fn in (torch.sin, torch.abs, torch.neg, lambda t: t * 2.5):
        got = fn(n)
        assert got.layout == torch.sparse_csr and got.device.type == "npu"
        torch.testing.assert_close(got.values().cpu(), fn(c).values())


def test_a_sparse_op_with_no_npu_kernel_raises_with_the_fallback_off(fallback_off):
    with pytest.raises(NotImplementedError, match="Could not run 'aten::_to_sparse'"):
        _sparse_ish(3, 3).npu().to_sparse()


def test_sparse_matmul_and_its_gradient_through_the_fallback(fallback_on):
    x = _sparse_ish(6, 5)
    d = torch.randn(5, 3)
    for reduce in ("sum", "mean", "amax"):
        c_cpu = x.to_sparse_csr().requires_grad_()
        c_npu = x.npu().to_sparse_csr().requires_grad_()
        assert c_npu.device.type == "npu" and c_npu.layout == torch.sparse_csr
        out_cpu = torch.sparse.mm(c_cpu, d, reduce)
        out_npu = torch.sparse.mm(c_npu, d.npu(), reduce)
        assert out_npu.device.type == "npu"
        torch.testing.assert_close(out_npu.cpu(), out_cpu)
        out_cpu.sum().backward()
        out_npu.sum().backward()
        torch.testing.assert_close(c_npu.grad.to_dense().cpu(), c_cpu.grad.to_dense())
    assert npu_lab.fallback_report().get("aten::_sparse_mm_reduce_impl", 0) >= 3
