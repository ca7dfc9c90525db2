"""Operator-library benchmark: the NPU's numba kernels against PyTorch CPU eager.

Run:  .venv/bin/python benchmarks/operator_library.py [--quick]

Everything is measured in this run on this machine and printed next to its
goal. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable

import numpy as np
import torch
from timing import best_of, freeze_startup_heap, per_call_us

import npu_lab
from npu_lab import models
from npu_lab.kernels import matmul as mk


def matmul(n: int = 1024) -> None:
    a, b = torch.randn(n, n), torch.randn(n, n)
    an, bn = a.npu(), b.npu()
    flops = 2 * n**3
    t_npu = best_of(lambda: an @ bn)
    t_cpu = best_of(lambda: a @ b)
    g_npu, g_cpu = flops / t_npu / 1e9, flops / t_cpu / 1e9
    print(f"matmul {n}x{n} float32:   npu {g_npu:7.1f} GFLOP/s   torch {g_cpu:7.1f} GFLOP/s   "
          f"ratio {g_npu / g_cpu:5.2f}   (goal >= 0.5)")


def linear_products(batch: int = 128, features: int = 512) -> None:
    """The three products of an nn.Linear layer's step, each in the layout autograd hands it."""
    x, w, g = torch.randn(batch, features), torch.randn(features, features), torch.randn(batch, features)
    xn, wn, gn = x.npu(), w.npu(), g.npu()
    flops = 2 * batch * features**2
    print(f"nn.Linear {features}->{features} products at batch {batch} (float32, GFLOP/s):")
    for label, fn, fn_cpu, (a, b) in (
            ("forward  x @ W.T", lambda: xn @ wn.T, lambda: x @ w.T, (x, w.T)),
            ("input    g @ W  ", lambda: gn @ wn, lambda: g @ w, (g, w)),
            ("weight   g.T @ x", lambda: gn.T @ xn, lambda: g.T @ x, (g.T, x))):
        t_npu, t_cpu = best_of(fn), best_of(fn_cpu)
        kernel = mk.choose_kernel(a.numpy(), b.numpy(), np.empty((a.shape[0], b.shape[1]), np.float32))
        print(f"  {label} ({kernel + ' kernel):':22s} npu {flops / t_npu / 1e9:6.1f}   "
              f"torch {flops / t_cpu / 1e9:6.1f}   ratio {t_cpu / t_npu:5.2f}")


def elementwise(rows: int = 4096, cols: int = 1024) -> None:
    """Bandwidth-bound eager kernels, dense and broadcast, and transcendental ones."""
    x = torch.randn(rows, cols)
    cases = {
        "x * 2 + 1 (dense)": (lambda t, m, b: t * 2 + 1),
        "x - rowmax (broadcast)": (lambda t, m, b: t - m),
        "x + bias (broadcast)": (lambda t, m, b: t + b),
        "tanh(x)": (lambda t, m, b: torch.tanh(t)),
        "sigmoid(x)": (lambda t, m, b: torch.sigmoid(t)),
    }
    cpu_args = (x, x.amax(-1, keepdim=True), torch.randn(cols))
    npu_args = tuple(a.npu() for a in cpu_args)
    for name, fn in cases.items():
        t_npu = best_of(lambda fn=fn: fn(*npu_args))
        t_cpu = best_of(lambda fn=fn: fn(*cpu_args))
        print(f"{name:<24} {rows * cols / 1e6:.0f}M floats: npu {t_npu * 1e3:6.2f} ms   torch {t_cpu * 1e3:6.2f} ms   "
              f"ratio {t_cpu / t_npu:5.2f}   (goal >= 0.5)")


def eager_overhead() -> None:
    a_cpu, b_cpu = torch.randn(16), torch.randn(16)
    a, b = a_cpu.npu(), b_cpu.npu()
    npu_us = per_call_us(lambda: a + b)
    cpu_us = per_call_us(lambda: a_cpu + b_cpu)
    print(f"eager overhead (add, 16): npu {npu_us:7.1f} us/call    torch {cpu_us:7.1f} us/call   "
          f"(goal: npu <= 10 us)")


def training_step(name: str, make: Callable[[], torch.nn.Module], batch: int) -> None:
    def stepper(device: str) -> Callable[[], float]:
        torch.manual_seed(0)
        model = make().to(device)
        x, y = models.example_batch(model, batch, device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step() -> float:
            opt.zero_grad()
            loss = models.loss_fn(model, model(x), y)
            loss.backward()
            opt.step()
            return loss.item()

        return step

    t_npu = best_of(stepper("npu"), repeat=10, warmup=3)
    t_cpu = best_of(stepper("cpu"), repeat=10, warmup=3)
    print(f"{name:<24} npu {t_npu * 1e3:7.2f} ms   torch {t_cpu * 1e3:7.2f} ms   "
          f"npu/cpu time {t_npu / t_cpu:5.2f}   (goal <= 3)")


_PROBE = """
import time
t0 = time.perf_counter()
import torch, npu_lab
t1 = time.perf_counter()
from npu_lab import models
losses = models.train(models.mlp(), 1, "npu")
t2 = time.perf_counter()
print(f"{t1 - t0:.3f} {t2 - t1:.3f}")
"""


def compile_cost() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, NUMBA_CACHE_DIR=os.path.join(tmp, "numba"),
                   NPU_LAB_CACHE_DIR=os.path.join(tmp, "npu_lab"))
        runs = []
        for _ in range(2):
            out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                                 text=True, check=True)
            runs.append([float(v) for v in out.stdout.split()])
    (cold_import, cold_first), (warm_import, warm_first) = runs
    print(f"numba compile cost:       cold import {cold_import:5.2f} s, first MLP step {cold_first:6.2f} s; "
          f"warm import {warm_import:5.2f} s, first MLP step {warm_first:5.2f} s   "
          "(goal: warm import <= 2 s)")




def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="skip the compile-cost probe")
    parser.add_argument("--no-freeze", action="store_true", help="leave the start-up heap to the GC")
    args = parser.parse_args()
    if not args.no_freeze:
        freeze_startup_heap()
    print(f"torch {torch.__version__}, npu_lab {npu_lab.__version__}, {os.cpu_count()} CPU cores, "
          f"start-up heap {'left to the GC' if args.no_freeze else 'frozen (gc.freeze)'}")
    matmul()
    linear_products()
    elementwise()
    eager_overhead()
    training_step("MLP training step", models.mlp, 64)
    training_step("CNN training step", models.SmallCNN, 32)
    training_step("transformer block step", models.TransformerBlock, 16)
    if not args.quick:
        compile_cost()


if __name__ == "__main__":
    main()
