"""The npu backend's fuser on benchmarks/fusion_suite.py's cases: launches and bytes.

Reading every input once and writing every output once is the least any compiler can move, Inductor
included (``python -m benchmarks.fusion_suite`` measures Inductor beside it). Where the npu backend
makes one kernel that moves exactly that, it cannot do worse than Inductor.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F  # noqa: N812

import npu_lab
import npu_lab.compiler
from benchmarks import fusion_suite


def _profile(fn, *args, seed=None):
    torch._dynamo.reset()
    npu_lab.compiler.reset()
    compiled = torch.compile(fn, backend="npu")
    with torch.no_grad():
        if seed is not None:
            torch.manual_seed(seed)
        expected = fn(*args)
        if seed is not None:
            torch.manual_seed(seed)
        torch.testing.assert_close(compiled(*args), expected)
        with npu_lab.profile() as prof:
            out = compiled(*args)
    return prof, out


@pytest.mark.parametrize("case", fusion_suite.CASES, ids=lambda c: c.name)
def test_one_kernel_moving_the_least_possible(case):
    torch.manual_seed(0)
    args = [torch.randn(s, device="npu") for s in case.shapes]
    # dropout draws from the device generator: eager and compiled draw the same bits from one seed
    prof, out = _profile(case.fn, *args, seed=1)
    assert prof.launches == 1, [k.name for k in prof.kernels]
    assert prof.bytes_moved == sum(a.nbytes for a in args) + out.nbytes


def _kernels():
    return [k for g in npu_lab.compiler.last_compile().graphs for k in g.kernels]


ROW_CASES = {
    "layer norm, 3-d, odd row": (lambda x, w, b: F.layer_norm(x + 1, (17,), w, b) * 2, [(2, 3, 17), (17,), (17,)]),
    "softmax over a column-major input": (lambda x: torch.softmax(x * 0.5, -1), [(33, 64)]),
    "statistics without keepdim": (
        lambda x: (x - x.amax(-1).unsqueeze(-1)).exp() * x.sum(-1, keepdim=True) + x.amax(-1).sum(), [(5, 9)]),
    "two reductions in one walk": (
        lambda x: (x - x.mean(-1, keepdim=True)) / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5), [(8, 100)]),
    "per-row input": (lambda x, r: torch.softmax(x + r, -1), [(4, 10), (4, 1)]),
    "one row (1-d)": (lambda x: x / x.sum() + torch.softmax(x * 1.0, 0), [(50,)]),
}


@pytest.mark.parametrize("name", ROW_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_row_kernels_match_eager(name, dtype):
    fn, shapes = ROW_CASES[name]
    torch.manual_seed(0)
    args = [torch.randn(s, dtype=dtype, device="npu") for s in shapes]
    if name == "softmax over a column-major input":
        args[0] = args[0].t().contiguous().t()
    _, out = _profile(fn, *args)
    rows = [k for k in _kernels() if type(k).__name__ == "FusedRows"]
    assert rows, _kernels()
    torch.testing.assert_close(out.cpu(), fn(*[a.cpu() for a in args]))


def test_rms_norm_after_a_linear_trains_like_the_cpu():
    def block(x, w):
        h = F.linear(x, w)
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)

    torch.manual_seed(0)
    x, w = torch.randn(16, 32), torch.randn(24, 32, requires_grad=True)
    block(x, w).pow(2).sum().backward()
    wn = w.detach().to("npu").requires_grad_(True)
    torch._dynamo.reset()
    out = torch.compile(block, backend="npu")(x.to("npu"), wn)
    out.pow(2).sum().backward()
    assert any(type(k).__name__ == "FusedRows" for k in _kernels())
    torch.testing.assert_close(out.detach().cpu(), block(x, w).detach())
    torch.testing.assert_close(wn.grad.cpu(), w.grad)


def test_layer_norm_in_training_keeps_its_statistics_for_backward():
    torch.manual_seed(0)
    x = torch.randn(64, 128, device="npu", requires_grad=True)
    w, b = torch.randn(128, device="npu"), torch.randn(128, device="npu")
    torch._dynamo.reset()
    out = torch.compile(fusion_suite.layer_norm, backend="npu")(x, w, b)
    out.sum().backward()
    xc = x.detach().cpu().requires_grad_(True)
    ref = fusion_suite.layer_norm(xc, w.cpu(), b.cpu())
    ref.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach())
    torch.testing.assert_close(x.grad.cpu(), xc.grad)


def test_dropout_in_training_still_writes_its_mask():
    # with autograd the mask is saved for backward: dropout stays the eager kernel (mask written)
    torch.manual_seed(0)
    x, b, r = torch.randn(32, 64, device="npu", requires_grad=True), torch.randn(64, device="npu"), \
        torch.randn(32, 64, device="npu")
    torch._dynamo.reset()
    compiled = torch.compile(fusion_suite.bias_dropout_residual, backend="npu")
    torch.manual_seed(5)
    out = compiled(x, b, r)
    out.sum().backward()
    kept = (out - r).detach() != 0
    torch.testing.assert_close(x.grad, kept.float() / 0.9)


def test_gelu_ish_is_one_kernel_of_nine_operators():
    x = torch.randn(128, 1024, device="npu")
    prof, _ = _profile(fusion_suite.gelu_ish, x)
    (kernel,) = npu_lab.compiler.last_compile().graph("inference").kernels
    assert len(kernel.fused_ops) == 9 and prof.launches == 1


def test_two_chains_merge_where_they_meet():
    def two_chains(x, y):
        a = (x * 2 + 1).sin()
        b = (y * 3 - 1).cos()
        return a * b + a

    x, y = torch.randn(64, 64, device="npu"), torch.randn(64, 64, device="npu")
    prof, _ = _profile(two_chains, x, y)
    assert prof.launches == 1


def test_groups_do_not_merge_across_a_dependency_cycle():
    def around_a_scan(x):
        a = (x * 2).sin()
        m = torch.cumsum(a, -1)  # not fusible, and needs a's group done first ...
        return (a + 1) * m  # ... so the consumer of both cannot join a's group

    x = torch.randn(32, 32, device="npu")
    prof, _ = _profile(around_a_scan, x)
    names = [k.name for k in prof.kernels]
    assert prof.launches == 3 and names[1] == "cumsum", names
