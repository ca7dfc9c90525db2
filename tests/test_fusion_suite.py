"""The npu backend's fuser on benchmarks/fusion_suite.py's cases: launches and bytes.

Reading every input once and writing every output once is the least any compiler can move, Inductor
included (``python -m benchmarks.fusion_suite`` measures Inductor beside it). Where the npu backend
makes one kernel that moves exactly that, it cannot do worse than Inductor.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

import npu_lab
import npu_lab.compiler
from benchmarks import fusion_suite

MINIMAL = ("gelu_ish (C1)", "GELU chain", "softmax")


def _profile(fn, *args):
    torch._dynamo.reset()
    npu_lab.compiler.reset()
    compiled = torch.compile(fn, backend="npu")
    with torch.no_grad():
        expected = fn(*args)
        torch.testing.assert_close(compiled(*args), expected)
        with npu_lab.profile() as prof:
            out = compiled(*args)
    return prof, out


@pytest.mark.parametrize("case", [c for c in fusion_suite.CASES if c.name in MINIMAL], ids=lambda c: c.name)
def test_one_kernel_moving_the_least_possible(case):
    torch.manual_seed(0)
    args = [torch.randn(s, device="npu") for s in case.shapes]
    prof, out = _profile(case.fn, *args)
    assert prof.launches == 1, [k.name for k in prof.kernels]
    assert prof.bytes_moved == sum(a.nbytes for a in args) + out.nbytes


def test_layer_norm_is_one_kernel_that_also_writes_its_statistics():
    torch.manual_seed(0)
    x, w, b = torch.randn(256, 512, device="npu"), torch.randn(512, device="npu"), torch.randn(512, device="npu")
    prof, out = _profile(fusion_suite.layer_norm, x, w, b)
    assert prof.launches == 1
    # native_layer_norm also writes each row's mean and 1/std (for backward): 2 x 256 floats more than the least
    assert prof.bytes_moved == x.nbytes + w.nbytes + b.nbytes + out.nbytes + 2 * 256 * 4


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
