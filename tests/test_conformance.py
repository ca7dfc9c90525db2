"""PyTorch's own OpInfo samples, run on npu and compared with the CPU.

The claimed list lives in the package (npu_lab.ops.conformance.CLAIMED_OPINFOS);
every entry must exist in op_db, so the claimed set cannot shrink silently.
"""

import collections

import pytest
import torch

pytest.importorskip("expecttest", reason="OpInfo's op_db needs the expecttest test dependency")

from npu_lab.ops.conformance import CLAIMED_OPINFOS, find_opinfos, run_conformance  # noqa: E402

#: The claimed set only grows: lower this floor never, raise it when ops are added.
MIN_CLAIMED = 118


def test_claims_exist_in_op_db():
    assert len(CLAIMED_OPINFOS) >= MIN_CLAIMED
    find_opinfos(CLAIMED_OPINFOS)  # raises KeyError naming any missing entry


def test_opinfo_conformance(capsys):
    report = run_conformance()
    summary = report.summary()
    with capsys.disabled():
        print(f"\nOpInfo conformance: {summary}")
        skipped = collections.Counter((r.op, r.reason) for r in report.results if r.status == "skipped")
        for (op, reason), n in sorted(skipped.items()):
            print(f"  skipped {n:3d} x {op}: {reason}")
    for r in report.results:
        if r.status == "skipped":
            assert r.reason, f"{r.op} sample {r.index} skipped without a reason"
    failures = report.failures()
    assert not failures, "\n".join(f"{f.op} [{f.dtype}] sample {f.index}: {f.reason}" for f in failures[:20])
    assert len(report.ops) == len(CLAIMED_OPINFOS)
    grads = sum(r.grad_checked for r in report.results)
    assert grads > 0
    with capsys.disabled():
        print(f"  gradients compared with the CPU on {grads} samples")


def test_gradient_check_catches_a_wrong_kernel(monkeypatch):
    """The harness must be able to fail: break relu's backward and expect failures."""
    from npu_lab.ops import conformance

    lib = torch.library.Library("aten", "IMPL")
    broken = conformance.check_opinfo("nn.functional.relu")
    assert all(r.status != "failed" for r in broken)
    lib.impl("threshold_backward", lambda g, x, t: g * 2, "PrivateUse1", allow_override=True)
    try:
        results = conformance.check_opinfo("nn.functional.relu", dtypes=(torch.float32,))
        assert any(r.status == "failed" for r in results)
    finally:
        lib._destroy()
    again = conformance.check_opinfo("nn.functional.relu", dtypes=(torch.float32,))
    assert all(r.status != "failed" for r in again)
