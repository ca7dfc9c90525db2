"""Which generated loop runs for which strides, and that every variant computes what the CPU does."""

from __future__ import annotations

import importlib
import re

import pytest
import torch

import npu_lab
from npu_lab.kernels import codegen
from npu_lab.kernels import elementwise as ew

torch.manual_seed(0)

CASES = {
    "bias over rows": (lambda: torch.randn(64, 32), lambda: torch.randn(32), "11"),
    "row constant": (lambda: torch.randn(64, 32), lambda: torch.randn(64, 1), "10"),
    "both broadcast": (lambda: torch.randn(64, 1), lambda: torch.randn(1, 32), "01"),
    "3-d with middle broadcast": (lambda: torch.randn(4, 8, 16), lambda: torch.randn(4, 1, 16), "11"),
}


def _loaded_rows(name: str) -> set[str]:
    return {m.group(1) for k in codegen.generated_sources() if (m := re.match(rf"ew_{name}_r(\d+)_", k))}


@pytest.mark.parametrize("case", list(CASES))
def test_broadcasts_with_unit_or_zero_inner_strides_use_a_rows_variant(case):
    make_a, make_b, pattern = CASES[case]
    a, b = make_a(), make_b()
    got = torch.sub(a.npu(), b.npu(), alpha=0.5)
    torch.testing.assert_close(got.cpu(), torch.sub(a, b, alpha=0.5))
    assert pattern in _loaded_rows("sub")


def test_other_strides_keep_the_general_loop_and_agree():
    a = torch.randn(32, 64).t()  # inner stride 64
    b = torch.randn(32)
    torch.testing.assert_close((a.npu() * b.npu()).cpu(), a * b)
    short = torch.randn(50, 3)  # inner dimension too short for a rows variant to pay
    torch.testing.assert_close((short.npu() + 1).cpu(), short + 1)


def test_rows_variant_writes_into_views_and_handles_special_values():
    base = torch.zeros(8, 40).npu()
    x = torch.tensor([[float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-30, 3.0, -3.0] * 4] * 8)
    m = torch.randn(8, 1)
    view = base[:, 4:36]  # offset rows inside a wider tensor
    torch.sub(x.npu(), m.npu(), out=view)  # the output rows start at offsets 4, 44, ...
    torch.testing.assert_close(base.cpu()[:, 4:36], x - m, equal_nan=True)
    assert torch.equal(base.cpu()[:, :4], torch.zeros(8, 4))


def test_rows_source_is_readable():
    k = ew.kernel("add", 2, "x0 + alpha * x1", ("alpha",))
    src = k.rows_source("10")
    assert "r_in0 = in0[p_in0:p_in0 + inner]" in src and "x1 = v_in1" in src


@pytest.mark.parametrize("shape,dim", [((64, 48), -1), ((6, 8, 40), -1), ((3, 5, 7, 16), (2, 3))])
def test_fused_reduction_with_broadcast_prologue_matches_cpu(shape, dim, monkeypatch):
    """softmax-like: exp(x - max) summed, with the max broadcast (inner stride 0)."""
    monkeypatch.setattr(importlib.import_module("npu_lab.compiler.passes.pointwise_fusion"), "FUSE_ROWS", False)
    def fn(x):
        e = torch.exp(x - x.amax(dim, keepdim=True))
        return e / e.sum(dim, keepdim=True)

    x = torch.randn(*shape)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="npu")
    with npu_lab.profile() as prof:
        got = compiled(x.npu())
    torch.testing.assert_close(got.cpu(), fn(x), rtol=1e-5, atol=1e-6)
    assert any(k.name.startswith("fused_reduction") for k in prof.kernels)


def test_fused_reduction_rows_variant_runs_for_row_broadcasts(monkeypatch):
    """exp(x - max(x)) summed per row: x has inner stride 1, the broadcast max 0."""
    monkeypatch.setattr(importlib.import_module("npu_lab.compiler.passes.pointwise_fusion"), "FUSE_ROWS", False)
    x = torch.randn(256, 64)
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: torch.exp(t - t.amax(-1, keepdim=True)).sum(-1), backend="npu")
    torch.testing.assert_close(compiled(x.npu()).cpu(), torch.exp(x - x.amax(-1, keepdim=True)).sum(-1))
    patterns = {m.group(1) for k in codegen.generated_sources() if (m := re.match(r"red_sum_r(\d+)_", k))}
    assert "10" in patterns, patterns
