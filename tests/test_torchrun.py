"""DDP on npu launched by torchrun (``python -m torch.distributed.run``) trains equal to one process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from npu_lab.distributed.examples import workers

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "npu_lab" / "distributed" / "examples" / "ddp_torchrun.py"

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built in this torch")


def test_torchrun_ddp_two_processes_equals_one(tmp_path: Path) -> None:
    out = tmp_path / "result.pt"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT),
           "--steps", "3", "--batch", "16", "--width", "32", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    got = torch.load(out)
    assert got["backend"] == "npuccl"
    assert got["world"] == 2
    want = workers.train_one_process(steps=3, batch=16, width=32)
    assert got["losses"] == pytest.approx(want["losses"], rel=1e-5, abs=1e-6)
    assert got["losses"][-1] < got["losses"][0], "the loss went down"
    assert set(got["params"]) == set(want["params"])
    for name, p in want["params"].items():
        torch.testing.assert_close(got["params"][name], p, rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
