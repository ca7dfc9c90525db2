"""The blocked im2col convolutions (npu_lab/kernels/conv_blocked.py, used by npu_lab/ops/conv.py).

Each thread unfolds a block of output rows, multiplies it and goes on; the input gradient (and a transposed
convolution's output) is folded per sample and channel chunk. These tests pin what the blocking can get
wrong: the last, shorter block; more threads than blocks; channel chunks inside groups; strides, dilations
and padding at the edges of a block; and that the clock charges what the whole-batch path charges.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import npu_lab
from npu_lab.kernels import blas, workspace
from npu_lab.kernels import conv_blocked as cb

pytestmark = pytest.mark.skipif(blas.backend() != "torch", reason="the blocked kernels call PyTorch's BLAS")

CASES = [
    # (input, weight, keyword arguments); transposed weights are (C_in, C_out/groups, k...)
    ((4, 8, 16, 16, 16), (16, 8, 3, 3, 3), {}),
    ((2, 4, 7, 9, 11), (6, 2, 3, 2, 3), dict(groups=2, padding=(1, 0, 2), stride=(2, 1, 3), dilation=(1, 2, 1))),
    ((1, 3, 5, 6, 7), (4, 3, 2, 2, 2), dict(padding=3)),  # padding wider than the kernel: rows of zeros
    ((3, 6, 13, 17), (9, 2, 3, 5), dict(groups=3, stride=2, padding=(2, 1), dilation=(2, 1))),
    ((3, 4, 9, 9), (4, 1, 3, 3), dict(groups=4, padding=1)),  # depthwise: channel chunks of one
    ((5, 3, 50), (7, 3, 5), dict(padding=2, stride=3, dilation=2)),
    ((2, 3, 300, 7), (5, 3, 3, 3), dict(padding=(1, 4))),  # many rows: several blocks per sample
    ((1, 1, 1, 1), (1, 1, 1, 1), {}),
    # the wide layout (width stride 1, no width padding, height stride 1): runs of rows cut by depth planes,
    # by padding above and below, dilated taps, groups, and a depth stride
    ((2, 3, 6, 7, 9), (4, 3, 2, 3, 2), dict(padding=(1, 2, 0), dilation=(2, 1, 3))),
    ((2, 2, 7, 5, 6), (3, 2, 3, 2, 2), dict(stride=(2, 1, 1), padding=(0, 1, 0))),
    ((3, 4, 11, 10), (6, 2, 3, 3), dict(groups=2, dilation=2, padding=(2, 0))),
    ((2, 3, 30), (5, 3, 4), {}),
]
TRANSPOSED = [
    ((2, 8, 9, 9), (8, 4, 3, 3), dict(stride=2)),
    ((3, 4, 7, 5), (4, 3, 3, 2), dict(stride=(2, 3), padding=1, output_padding=(1, 0), groups=2, dilation=(1, 2))),
    ((2, 4, 5, 6, 7), (4, 2, 3, 3, 3), dict(stride=2, padding=1)),
    ((3, 5, 20), (5, 4, 3), dict(stride=1, padding=1)),
    # stride 1, no width padding: the wide fold forward, one wide unfold feeding both backward products
    ((2, 4, 6, 7), (4, 3, 3, 2), dict(dilation=(1, 2))),
    ((2, 4, 3, 4, 5), (4, 2, 2, 3, 3), dict(groups=2, padding=(1, 1, 0))),
]


def _run(fn, x, w, b, **kwargs):
    """Forward and backward (a fixed, non-uniform output gradient): [out, grad x, grad w, grad b]."""
    leaves = [t.detach().requires_grad_() for t in (x, w, b)]
    out = fn(*leaves, **kwargs)
    out.backward(torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=out.device).reshape(out.shape))
    return [out.detach().cpu(), *(t.grad.cpu() for t in leaves)]


def _check(fn, xs, ws, kwargs, dtype, transposed=False):
    torch.manual_seed(0)
    x, w = torch.randn(xs, dtype=dtype), torch.randn(ws, dtype=dtype)
    b = torch.randn(ws[1] * kwargs.get("groups", 1) if transposed else ws[0], dtype=dtype)
    want = _run(fn, x, w, b, **kwargs)
    got = _run(fn, x.npu(), w.npu(), b.npu(), **kwargs)
    tol = {} if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-4 * max(1.0, float(want[0].abs().max())))
    for g, c in zip(got, want):
        torch.testing.assert_close(g, c, **tol)


@pytest.fixture(params=["serial", "threads", "tiny blocks"])
def blocking(request, monkeypatch):
    """The serial kernels, the threaded ones even for small shapes, and blocks of a single output row."""
    if request.param != "serial":
        monkeypatch.setattr(blas, "PARALLEL_MIN_MACS", 0)
    if request.param == "tiny blocks":
        monkeypatch.setattr(cb, "BLOCK_BYTES", 1)
    return request.param


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])) if isinstance(c, tuple) else None)
def test_blocked_convolutions_match_the_cpu(case, dtype, blocking):
    xs, ws, kwargs = case
    _check(getattr(F, f"conv{len(xs) - 2}d"), xs, ws, kwargs, dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("case", TRANSPOSED, ids=lambda c: "x".join(map(str, c[0])) if isinstance(c, tuple) else None)
def test_blocked_transposed_convolutions_match_the_cpu(case, dtype, blocking):
    xs, ws, kwargs = case
    _check(getattr(F, f"conv_transpose{len(xs) - 2}d"), xs, ws, kwargs, dtype, transposed=True)


def test_channels_last_inputs_take_the_blocked_path():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 10, 11).to(memory_format=torch.channels_last)
    w = torch.randn(4, 6, 3, 3)
    torch.testing.assert_close(_run(F.conv2d, x.npu(), w.npu(), torch.zeros(4).npu(), padding=1),
                               _run(F.conv2d, x, w, torch.zeros(4), padding=1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows,ow,patch_rows,samples,workers", [
    (196, 14, 216, 4, 2), (196, 14, 216, 1, 2), (1, 1, 1, 1, 2), (7, 300, 1000, 1, 1), (300, 2, 27, 3, 8)])
def test_blocks_cut_a_sample_into_equal_rows_within_the_budget(rows, ow, patch_rows, samples, workers):
    rpb = cb.rows_per_block(rows, ow, patch_rows, 4, samples, workers)
    assert 1 <= rpb <= rows
    blocks = -(-rows // rpb)
    assert blocks * rpb - rows < blocks  # equal blocks: the last one at most one row shorter per block
    assert rpb == 1 or rpb * ow * patch_rows * 4 <= 2 * cb.BLOCK_BYTES


def test_the_blocked_path_charges_the_clock_as_the_whole_batch_path(monkeypatch):
    x, w = torch.randn(2, 3, 6, 7, 8), torch.randn(4, 3, 3, 3, 3)

    def kernels():
        with npu_lab.profile() as prof:
            _run(F.conv3d, x.npu(), w.npu(), torch.zeros(4).npu(), padding=1)
            _run(F.conv_transpose2d, x[:, :, 0].npu(), w[:, :, 0].transpose(0, 1).npu(), torch.zeros(4).npu(),
                 stride=2)
        return [(k.name, k.flops, k.bytes_read, k.bytes_written) for k in prof.kernels if "conv" in k.name]

    blocked = kernels()
    monkeypatch.setattr(blas, "ENABLED", False)  # the whole-batch unfold/fold path
    whole = kernels()
    assert blocked == whole
    assert {name for name, *_ in blocked} >= {"conv3d", "conv3d_backward", "conv_transpose2d",
                                               "conv_transpose2d_backward"}


def test_the_blocked_path_reuses_its_workspace():
    x, w = torch.randn(4, 3, 8, 8, device="npu"), torch.randn(5, 3, 3, 3, device="npu")
    F.conv2d(x, w)
    first = workspace.buffer("conv.block", (1,), np.float32).__array_interface__["data"][0]
    out = F.conv2d(x, w)
    assert workspace.buffer("conv.block", (1,), np.float32).__array_interface__["data"][0] == first
    torch.testing.assert_close(out.cpu(), F.conv2d(x.cpu(), w.cpu()))


@pytest.mark.parametrize("shape,weight", [((2, 3, 6, 7, 9), (4, 3, 2, 3, 2)), ((2, 3, 9, 10), (4, 3, 3, 3))])
def test_the_wide_layouts_junk_columns_never_reach_the_results(shape, weight):
    """An infinite weight times a junk column's zero would be NaN: the junk must be zeroed after the product."""
    torch.manual_seed(0)
    x, w = torch.randn(shape), torch.randn(weight)
    w.view(-1)[5] = float("inf")
    fn = getattr(F, f"conv{len(shape) - 2}d")

    def grads(*tensors):
        xi, wi = (t.detach().requires_grad_() for t in tensors)
        out = fn(xi, wi)
        out.backward(torch.ones_like(out))  # positive: an infinite weight gives +inf, never inf - inf
        return xi.grad.cpu(), wi.grad.cpu()

    for got, want in zip(grads(x.npu(), w.npu()), grads(x, w)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
