"""Device runtime benchmark: eager overhead, copies, an MLP training step and the runtime's build time.

Run:  .venv/bin/python benchmarks/device_runtime.py

Every figure is measured in this run, next to PyTorch CPU eager on the same
machine, and printed as a ratio. Nothing here is asserted: targets are read by
people (see the issue notes), not by the test suite.
"""

from __future__ import annotations

import torch
from timing import best_of, per_call_us

import npu_lab  # noqa: F401  (registers the npu device)


def mlp_step(device: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(128, 256).to(device)
    y = torch.randint(0, 10, (128,)).to(device)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def main() -> None:
    a_cpu, b_cpu = torch.randn(16), torch.randn(16)
    a, b = a_cpu.npu(), b_cpu.npu()
    npu_us = per_call_us(lambda: a + b)
    cpu_us = per_call_us(lambda: a_cpu + b_cpu)
    print(f"eager add (16 elements):  npu {npu_us:6.1f} us/call   cpu {cpu_us:6.1f} us/call   "
          f"(goal: npu <= 8 us)")
    one_a, one_b = torch.randn(1, device="npu"), torch.randn(1, device="npu")
    print(f"eager add (1 element):    npu {per_call_us(lambda: one_a + one_b):6.1f} us/call")

    big = torch.randn(4_000_000)
    h2d = best_of(lambda: big.to("npu"))
    dev = big.to("npu")
    d2h = best_of(lambda: dev.cpu())
    gb = big.numel() * 4 / 1e9
    print(f"host->device copy 16 MB:  {gb / h2d:6.2f} GB/s   device->host: {gb / d2h:6.2f} GB/s")

    x_cpu = torch.randn(4_000_000)
    x = x_cpu.npu()
    t_npu = best_of(lambda: x * 2 + 1)
    t_cpu = best_of(lambda: x_cpu * 2 + 1)
    print(f"x * 2 + 1 on 4M floats:   npu {t_npu * 1e3:6.2f} ms   cpu {t_cpu * 1e3:6.2f} ms   "
          f"npu/cpu time {t_npu / t_cpu:5.2f}")

    s_npu, s_cpu = mlp_step("npu"), mlp_step("cpu")
    t_npu = best_of(s_npu)
    t_cpu = best_of(s_cpu)
    print(f"MLP training step:        npu {t_npu * 1e3:6.2f} ms   cpu {t_cpu * 1e3:6.2f} ms   "
          f"npu/cpu time {t_npu / t_cpu:5.2f}")


def build_times() -> None:
    """Cold (empty build directory) and cached (nothing changed) build of the native runtime, in a subprocess."""
    import os
    import subprocess
    import sys
    import tempfile
    import time

    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NPU_LAB_CACHE_DIR": cache}
        for label in ("cold", "cached"):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "npu_lab", "build"], env=env, check=True, capture_output=True)
            print(f"native runtime build ({label}): {time.perf_counter() - t0:6.1f} s "
                  f"(includes starting Python and importing torch)")


if __name__ == "__main__":
    import sys

    main()
    if "--build" in sys.argv:
        build_times()
