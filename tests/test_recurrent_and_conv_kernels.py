"""The fused recurrent cells, Mish's backward, the convolutions' patches-and-products path and the BLAS
split, against PyTorch's CPU (npu_lab/ops/recurrent.py, activations.py, conv.py; kernels/blas.py).

The cells are CUDA's operators, which the CPU has no kernel for: they are checked through ``nn.LSTM``/
``nn.GRU`` (the CPU composes the same arithmetic from small operators) and on the clock (one launch per
cell). The OpInfo sweep covers every convolution's samples; here are the shapes the split and the
workspace must get right.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import npu_lab
from npu_lab.kernels import blas, workspace

aten = torch.ops.aten


def _pair(cls: type[torch.nn.Module], dtype: torch.dtype, **kwargs) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    cpu = cls(6, 5, **kwargs).to(dtype)
    npu = cls(6, 5, **kwargs).to(dtype)
    npu.load_state_dict(cpu.state_dict())
    return cpu, npu.npu()


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_recurrent_layers_match_the_cpu(cls, bias, dtype):
    cpu, npu = _pair(cls, dtype, num_layers=2, bias=bias, bidirectional=True)
    x = torch.randn(4, 3, 6, dtype=dtype, requires_grad=True)
    xn = x.detach().npu().requires_grad_()
    out, state = cpu(x)
    out_n, state_n = npu(xn)
    states, states_n = (state, state_n) if cls is torch.nn.LSTM else ((state,), (state_n,))
    (out.sum() + sum(s.square().sum() for s in states)).backward()
    (out_n.sum() + sum(s.square().sum() for s in states_n)).backward()
    torch.testing.assert_close(out_n.cpu(), out)
    for s, s_n in zip(states, states_n):
        torch.testing.assert_close(s_n.cpu(), s)
    torch.testing.assert_close(xn.grad.cpu(), x.grad)
    for p, p_n in zip(cpu.parameters(), npu.parameters()):
        torch.testing.assert_close(p_n.grad.cpu(), p.grad)


def test_only_the_hidden_state_or_only_the_cell_state_carries_a_gradient():
    cpu, npu = _pair(torch.nn.LSTM, torch.float32)
    x = torch.randn(3, 2, 6)
    for pick in (0, 1):
        grads = []
        for model, inp in ((cpu, x), (npu, x.npu())):
            model.zero_grad()
            _, (h, c) = model(inp)
            ((h, c)[pick] * 3).sum().backward()
            grads.append([p.grad.cpu() for p in model.parameters()])
        for g_cpu, g_npu in zip(*grads):
            torch.testing.assert_close(g_npu, g_cpu)


def test_a_cell_is_one_kernel_and_its_backward_two():
    ig, hg = torch.randn(3, 8, device="npu"), torch.randn(3, 8, device="npu")
    cx, b = torch.randn(3, 2, device="npu"), torch.randn(8, device="npu")
    with npu_lab.profile() as prof:
        hy, cy, ws = aten._thnn_fused_lstm_cell(ig, hg, cx, b, b)
    assert [k.name for k in prof.kernels if k.kind == "kernel"] == ["fused_lstm_cell"]
    grad = torch.ones_like(hy)
    with npu_lab.profile() as prof:
        aten._thnn_fused_lstm_cell_backward_impl(grad, None, cx, cy, ws, True)
    assert [k.name for k in prof.kernels if k.kind == "kernel"] == ["fused_lstm_cell_backward", "column_sum"]


def test_cells_reject_what_cuda_rejects():
    ig = torch.randn(3, 8, device="npu")
    with pytest.raises(RuntimeError, match="to have same size as tensor for argument #2 'hidden_gates'"):
        aten._thnn_fused_lstm_cell(ig, torch.randn(3, 4, device="npu"), torch.randn(3, 2, device="npu"))
    with pytest.raises(RuntimeError, match="'prev_hidden' to have 6 elements"):
        aten._thnn_fused_lstm_cell(ig, ig, torch.randn(3, 3, device="npu"))
    with pytest.raises(RuntimeError, match="'input_bias' to have 8 elements"):
        aten._thnn_fused_lstm_cell(ig, ig, torch.randn(3, 2, device="npu"), torch.randn(7, device="npu"),
                                   torch.randn(7, device="npu"))
    with pytest.raises(RuntimeError, match="'hidden_bias'"):
        aten._thnn_fused_gru_cell(torch.randn(3, 6, device="npu"), torch.randn(3, 6, device="npu"),
                                  torch.randn(3, 2, device="npu"), None, torch.randn(5, device="npu"))
    with pytest.raises(RuntimeError, match="same device"):
        aten._thnn_fused_lstm_cell(ig, ig.cpu(), torch.randn(3, 2, device="npu"))
    ws = torch.randn(3, 8, device="npu")
    with pytest.raises(RuntimeError, match="expected cx to be an npu tensor of torch.float32 with 6 elements"):
        aten._thnn_fused_lstm_cell_backward_impl(torch.ones(3, 2, device="npu"), None, torch.ones(7, device="npu"),
                                                 torch.ones(3, 2, device="npu"), ws, False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_mish_and_its_backward_match_the_cpu_everywhere(dtype):
    x = torch.cat([torch.linspace(-40, 40, 20001, dtype=torch.float64),
                   torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 19.99, 20.01, -88.0, 88.0],
                                dtype=torch.float64)]).to(dtype)
    g = torch.randn_like(x)
    torch.testing.assert_close(F.mish(x.npu()).cpu(), F.mish(x), equal_nan=True)
    torch.testing.assert_close(aten.mish_backward(g.npu(), x.npu()).cpu(), aten.mish_backward(g, x), equal_nan=True)
    with npu_lab.profile() as prof:
        aten.mish_backward(g.npu(), x.npu())
    assert prof.launches == 1


@pytest.mark.parametrize("case", [
    dict(shape=(2, 4, 9, 7), weight=(6, 2, 3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2),
    dict(shape=(1, 3, 5), weight=(4, 3, 3), stride=2, padding=2, dilation=1, groups=1),
    dict(shape=(2, 2, 4, 5, 3), weight=(4, 1, 2, 3, 2), stride=(1, 2, 1), padding=(1, 0, 1), dilation=1, groups=2),
])
@pytest.mark.parametrize("transposed", [False, True])
def test_convolutions_with_groups_strides_and_dilations_match_the_cpu(case, transposed):
    torch.manual_seed(0)
    x = torch.randn(case["shape"], dtype=torch.float64)
    w = torch.randn(case["weight"], dtype=torch.float64)
    if transposed:  # (C_in, C_out / groups, k...)
        w = torch.randn(x.shape[1], w.shape[0] // case["groups"], *w.shape[2:], dtype=torch.float64)
    b = torch.randn(w.shape[1] * case["groups"] if transposed else w.shape[0], dtype=torch.float64)
    args = (case["stride"], case["padding"], case["dilation"])
    nd = x.dim() - 2
    fn = getattr(F, f"conv_transpose{nd}d" if transposed else f"conv{nd}d")

    def run(*tensors):
        leaves = [t.detach().requires_grad_() for t in tensors]
        xi, wi, bi = leaves
        if transposed:
            out = fn(xi, wi, bi, args[0], args[1], 0, case["groups"], args[2])
        else:
            out = fn(xi, wi, bi, *args, case["groups"])
        out.backward(torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=out.device).reshape(out.shape))
        return [out, *(t.grad for t in leaves)]

    for got, want in zip(run(x.npu(), w.npu(), b.npu()), run(x, w, b)):
        torch.testing.assert_close(got.cpu(), want)


def test_a_convolution_reuses_its_workspace():
    x, w = torch.randn(4, 3, 8, 8, device="npu"), torch.randn(5, 3, 3, 3, device="npu")
    F.conv2d(x, w)
    first = workspace.buffer("conv.cols", (1,), np.float32).__array_interface__["data"][0]
    out = F.conv2d(x, w)
    assert workspace.buffer("conv.cols", (1,), np.float32).__array_interface__["data"][0] == first
    torch.testing.assert_close(out.cpu(), F.conv2d(x.cpu(), w.cpu()))


@pytest.mark.skipif(blas.backend() != "torch", reason="the split is PyTorch's BLAS's")
@pytest.mark.parametrize("m,k,n", [(300, 200, 100), (1, 700, 900), (513, 17, 3), (64, 64, 2), (2, 3, 4),
                                   (16, 128, 512), (17, 300, 1000), (3, 2000, 700)])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
def test_products_cut_into_column_blocks_match_the_cpu(m, k, n, layout):
    torch.manual_seed(0)
    a = torch.randn(k, m).T if layout[0] == "t" else torch.randn(m, k)
    b = torch.randn(n, k).T if layout[1] == "t" else torch.randn(k, n)
    torch.testing.assert_close((a.npu() @ b.npu()).cpu(), a @ b, rtol=1e-5, atol=1e-4)
    batch_a, batch_b = torch.randn(3, m, k, dtype=torch.float64), torch.randn(3, k, n, dtype=torch.float64)
    torch.testing.assert_close((batch_a.npu() @ batch_b.npu()).cpu(), batch_a @ batch_b)


def test_the_split_keeps_every_thread_busy_on_large_products_only():
    plan = blas._plan
    getter = blas.torch_routines(np.dtype(np.float32))[2] if blas.backend() == "torch" else 0
    if not getter:
        pytest.skip("no thread-count getter")
    threads = numba.get_num_threads()
    assert plan(getter, 1, 8, 8, 8) == (1, 1, False)
    units, splits, by_rows = plan(getter, 1, 1024, 1024, 1024)
    assert units == splits == min(threads, 1024 // 16) and not by_rows
    assert plan(getter, threads, 512, 512, 512) == (threads, 1, False)
    if threads > 1:  # an RNN step's product: 512 column-major rows, 16 columns: blocks of rows
        assert plan(getter, 1, 512, 16, 128) == (min(threads, 32), min(threads, 32), True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_lstm_cell_fast_paths_match_the_kernels(dtype, bias):
    """The LSTM cell's fast paths (what nn.LSTM's steps call) give the kernels' bits and launch what they launch
    (names, FLOPs, bytes read and written); anything they do not take goes back to the kernels."""
    from npu_lab.ops import recurrent

    torch.manual_seed(0)
    rows, hidden = 5, 12
    ig, hg = (torch.randn(rows, 4 * hidden, dtype=dtype).npu() for _ in range(2))
    cx = torch.randn(rows, hidden, dtype=dtype).npu()
    biases = tuple(torch.randn(4 * hidden, dtype=dtype).npu() for _ in range(2)) if bias else (None, None)

    def launches(fn, *args):
        with npu_lab.profile() as prof:
            out = fn(*args)
        return out, [(k.name, k.flops, k.bytes_read, k.bytes_written) for k in prof.kernels]

    fast, fast_k = launches(recurrent._fast_lstm_cell, ig, hg, cx, *biases)
    slow, slow_k = launches(recurrent.fused_lstm_cell, ig, hg, cx, *biases)
    assert fast_k == slow_k and len(fast_k) == 1
    for a, b in zip(fast, slow):
        assert torch.equal(a.cpu(), b.cpu())
    hy, cy, ws = slow
    g_hy, g_cy = torch.randn_like(hy), torch.randn_like(cy)
    fast, fast_k = launches(recurrent._fast_lstm_cell_backward, g_hy, g_cy, cx, cy, ws, False)
    slow, slow_k = launches(recurrent.fused_lstm_cell_backward, g_hy, g_cy, cx, cy, ws, False)
    assert fast_k == slow_k and len(fast_k) == 1
    assert torch.equal(fast[0].cpu(), slow[0].cpu()) and torch.equal(fast[1].cpu(), slow[1].cpu())
    assert fast[2] is None and slow[2] is None
    # what the fast paths leave to the kernels: a transposed gate matrix, one bias, a bias gradient, CPU tensors
    assert recurrent._fast_lstm_cell(ig.t().contiguous().t(), hg, cx, *biases) is None
    assert recurrent._fast_lstm_cell(ig, hg, cx, biases[0], None) is None or not bias
    assert recurrent._fast_lstm_cell_backward(g_hy, g_cy, cx, cy, ws, True) is None
    assert recurrent._fast_lstm_cell(ig.cpu(), hg.cpu(), cx.cpu(), None, None) is None
