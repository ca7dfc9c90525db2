"""PyTorch's whole OpInfo database on the npu, with the CPU fallback off and on.

Nothing may be ``wrong`` (a result or gradient that differs from the CPU's) in either
mode; with the fallback on, every OpInfo the CPU runs must pass; the native count
never drops below its floor; and the committed coverage page (docs/coverage.md) must be
the one the sweep writes today, so a regression shows in its diff.
"""

import time

import pytest
import torch

pytest.importorskip("expecttest", reason="OpInfo's op_db needs the expecttest test dependency")

from npu_lab.ops import coverage_page  # noqa: E402
from npu_lab.ops.sweep import both, kinds, sweep  # noqa: E402

#: Floors: raise them when operators are added, never lower them.
NATIVE_FLOOR = 669          # OpInfos that pass with the fallback off
PASSING_WITH_FALLBACK_FLOOR = 672  # native + fallback-only with the fallback on


@pytest.fixture(scope="module")
def reports():
    start = time.perf_counter()
    off, on = both()
    print(f"\nOpInfo sweep ({time.perf_counter() - start:.0f} s)\n  {off.summary()}\n  {on.summary()}")
    return off, on


def _listing(report, status):
    return "\n".join(f"  {o.name}: {o.detail[:300]}" for o in report.by_status(status))


def test_nothing_is_wrong(reports):
    for report in reports:
        assert not report.by_status("wrong"), f"{report.summary()}\n{_listing(report, 'wrong')}"


def test_native_floor(reports):
    off, _ = reports
    assert off.counts()["native"] >= NATIVE_FLOOR, off.summary()
    assert not off.by_status("fallback"), "with the fallback off nothing can fall back"


def test_with_the_fallback_everything_the_cpu_runs_passes(reports):
    _, on = reports
    assert not on.by_status("missing"), _listing(on, "missing")
    assert not on.by_status("error"), _listing(on, "error")
    c = on.counts()
    assert c["native"] + c["fallback"] >= PASSING_WITH_FALLBACK_FLOOR, on.summary()


def test_the_coverage_page_is_current(reports):
    off, on = reports
    assert coverage_page.PAGE.exists(), "docs/coverage.md is missing: python -m npu_lab.ops.sweep --write"
    committed = coverage_page.parse_statuses(coverage_page.PAGE.read_text())
    today = {o.name: (o.status, p.status) for o, p in zip(off.ops, on.ops)}
    changed = {name: (committed.get(name), now) for name, now in today.items() if committed.get(name) != now}
    assert not changed, ("docs/coverage.md is out of date (regenerate: python -m npu_lab.ops.sweep --write):\n"
                         + "\n".join(f"  {n}: page {was} -> now {now}" for n, (was, now) in sorted(changed.items())))


def test_every_opinfo_has_a_family():
    names = kinds()
    assert len(names) > 700
    families = {coverage_page.family(n, k) for n, k in names.items()}
    assert families <= set(coverage_page.FAMILIES)
    assert coverage_page.family("nn.functional.hardswish", "OpInfo") == "activations and softmax"
    assert coverage_page.family("nn.functional.conv_transpose2d", "OpInfo") == "convolution, pooling and resampling"
    assert coverage_page.family("linalg.vector_norm", "ReductionOpInfo") == "linear algebra"


#: The core a mixed-precision training step reaches under torch.autocast("npu").
HALF_CORE = ["mm", "bmm", "addmm", "matmul", "nn.functional.linear", "nn.functional.conv1d", "nn.functional.conv2d",
             "add", "mul", "sub", "div.no_rounding_mode", "exp", "tanh", "sigmoid", "nn.functional.gelu",
             "nn.functional.silu", "nn.functional.relu", "sum", "mean", "amax", "var", "softmax", "log_softmax",
             "nn.functional.layer_norm", "nn.functional.batch_norm", "nn.functional.group_norm",
             "nn.functional.cross_entropy", "nn.functional.mse_loss", "nn.functional.nll_loss",
             "nn.functional.scaled_dot_product_attention", "nn.functional.embedding", "where", "clamp", "pow",
             "rsqrt", "nn.functional.dropout"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_core_is_native(dtype):
    report = sweep(False, dtype, names=HALF_CORE)
    assert len(report.ops) == len(HALF_CORE)
    assert report.counts()["native"] == len(HALF_CORE), "\n".join(
        f"  {o.name}: {o.status} {o.detail[:300]}" for o in report.ops if o.status != "native")
