"""Operator-library benchmark: the NPU's numba kernels against PyTorch CPU eager.

Run:  .venv/bin/python benchmarks/operator_library.py [--quick]

Everything is measured in this run on this machine and printed next to its
goal. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable

import numpy as np
import torch
from timing import best_of, freeze_startup_heap, interleaved, per_call_us
from torch.nn import functional as F

import npu_lab
from npu_lab import models
from npu_lab.kernels import matmul as mk


def matmul(n: int = 1024) -> None:
    a, b = torch.randn(n, n), torch.randn(n, n)
    an, bn = a.npu(), b.npu()
    flops = 2 * n**3
    # alternating rounds: a slow spell of the machine (the first measurement of the run) slows both, not one
    times = interleaved({"npu": lambda: an @ bn, "cpu": lambda: a @ b}, rounds=10, warmup=2)
    t_npu, t_cpu = times["npu"][0], times["cpu"][0]
    g_npu, g_cpu = flops / t_npu / 1e9, flops / t_cpu / 1e9
    print(f"matmul {n}x{n} float32:   npu {g_npu:7.1f} GFLOP/s   torch {g_cpu:7.1f} GFLOP/s   "
          f"ratio {g_npu / g_cpu:5.2f}   (goal >= 0.9)")


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
        if kernel == "blas":
            kernel = f"{mk._blas.backend()} BLAS"
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
          f"(goal: npu <= 8 us)")


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

    # Blocks of steps, the devices taking turns: a slow spell of a shared machine then hits both devices,
    # and each block's warm-up steps absorb what the other device's threads left running (steps interleaved
    # one by one slowed each other down, the CPU's more than the npu's).
    steps = {"npu": stepper("npu"), "cpu": stepper("cpu")}
    best = {dev: float("inf") for dev in steps}
    for _ in range(3):
        for dev, step in steps.items():
            best[dev] = min(best[dev], best_of(step, repeat=10, warmup=3))
    t_npu, t_cpu = best["npu"], best["cpu"]
    print(f"{name:<24} npu {t_npu * 1e3:7.2f} ms   torch {t_cpu * 1e3:7.2f} ms   "
          f"npu/cpu time {t_npu / t_cpu:5.2f}   (goal <= 2)")


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




def _fwd_bwd(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> Callable[[], object]:
    """A closure running ``fn`` forward and backward (gradients of every floating-point input)."""
    leaves = [t.detach().requires_grad_() if t.is_floating_point() else t for t in inputs]

    def run() -> object:
        out = fn(*leaves)
        out.backward(torch.ones_like(out))
        return out

    return run


#: (family, case, function, input factory, forward and backward?) for :func:`operator_families`.
FAMILY_CASES: list[tuple[str, str, Callable[..., torch.Tensor], Callable[[], tuple], bool]] = [
    ("activations", "hardswish 1M", F.hardswish, lambda: (torch.randn(1024, 1024),), True),
    ("activations", "mish 1M", F.mish, lambda: (torch.randn(1024, 1024),), True),
    ("activations", "log_softmax 512x1024", lambda x: F.log_softmax(x, -1), lambda: (torch.randn(512, 1024),), True),
    ("normalization", "group_norm 32x64x32x32, 8 groups", lambda x: F.group_norm(x, 8),
     lambda: (torch.randn(32, 64, 32, 32),), True),
    ("normalization", "var_mean 1024x1024 dim 1", lambda x: torch.var_mean(x, 1)[0],
     lambda: (torch.randn(1024, 1024),), True),
    ("recurrent", "LSTM 2 layers, 32 steps, 16x128", lambda x, w: _lstm(x, w), lambda: _lstm_inputs(), True),
    ("convolution", "conv_transpose2d 16x32x32x32, 3x3 s2", lambda x, w: F.conv_transpose2d(x, w, stride=2),
     lambda: (torch.randn(16, 32, 32, 32), torch.randn(32, 16, 3, 3)), True),
    ("convolution", "conv3d 4x8x16x16x16, 3x3x3", F.conv3d,
     lambda: (torch.randn(4, 8, 16, 16, 16), torch.randn(16, 8, 3, 3, 3)), True),
    ("pooling", "max_pool3d 4x16x16x16x16, 2", lambda x: F.max_pool3d(x, 2),
     lambda: (torch.randn(4, 16, 16, 16, 16),), True),
    ("resampling", "interpolate bilinear 16x32x32x32 -> 64x64",
     lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), lambda: (torch.randn(16, 32, 32, 32),), True),
    ("resampling", "pad reflect 16x32x64x64, 3", lambda x: F.pad(x, (3, 3, 3, 3), mode="reflect"),
     lambda: (torch.randn(16, 32, 64, 64),), True),
    ("sorting", "sort 256x4096 dim 1", lambda x: torch.sort(x, 1)[0], lambda: (torch.randn(256, 4096),), True),
    ("sorting", "topk 16 of 256x4096", lambda x: torch.topk(x, 16)[0], lambda: (torch.randn(256, 4096),), True),
    ("searching", "searchsorted 1M in 4096", lambda s, v: torch.searchsorted(s, v),
     lambda: (torch.randn(4096).sort()[0], torch.randn(1 << 20)), False),
    ("counting", "histc 1M, 100 bins", lambda x: torch.histc(x, 100), lambda: (torch.randn(1 << 20),), False),
    ("scans", "cumsum 1024x1024 dim 1", lambda x: torch.cumsum(x, 1), lambda: (torch.randn(1024, 1024),), True),
    ("scans", "logcumsumexp 1024x1024", lambda x: torch.logcumsumexp(x, 1), lambda: (torch.randn(1024, 1024),),
     True),
    ("indexing", "scatter_reduce amax 1M -> 1024", lambda x, i: x.new_zeros(1024).scatter_reduce(0, i, x, "amax"),
     lambda: (torch.randn(1 << 20), torch.randint(0, 1024, (1 << 20,))), False),
    ("indexing", "embedding_bag mean 64k ids, 10k x 64", lambda w, i, o: F.embedding_bag(i, w, o, mode="mean"),
     lambda: (torch.randn(10000, 64), torch.randint(0, 10000, (1 << 16,)), torch.arange(0, 1 << 16, 16)), True),
    ("shapes", "roll 1024x1024 by (3, 5)", lambda x: torch.roll(x, (3, 5), (0, 1)),
     lambda: (torch.randn(1024, 1024),), True),
    ("special", "lgamma 1M", torch.lgamma, lambda: (torch.rand(1024, 1024) * 10,), True),
    ("special", "digamma 1M", torch.digamma, lambda: (torch.rand(1024, 1024) * 10,), False),
    ("special", "erfinv 1M", torch.erfinv, lambda: (torch.rand(1024, 1024) * 2 - 1,), True),
    ("linear algebra", "vector_norm 1024x1024 dim 1", lambda x: torch.linalg.vector_norm(x, dim=1),
     lambda: (torch.randn(1024, 1024),), True),
    ("linear algebra", "cholesky 64 x 64x64", torch.linalg.cholesky, lambda: (_spd(64, 64),), True),
    ("fft", "rfft 256x4096", lambda x: torch.view_as_real(torch.fft.rfft(x)), lambda: (torch.randn(256, 4096),),
     True),
    ("losses", "cross_entropy 4096x1000", lambda x, y: F.cross_entropy(x, y),
     lambda: (torch.randn(4096, 1000), torch.randint(0, 1000, (4096,))), True),
    ("half precision", "bfloat16 matmul 512x512", torch.mm,
     lambda: (torch.randn(512, 512).bfloat16(), torch.randn(512, 512).bfloat16()), False),
    ("half precision", "float16 softmax 512x1024", lambda x: torch.softmax(x, -1),
     lambda: (torch.randn(512, 1024).half(),), False),
]


def _spd(batch: int, n: int) -> torch.Tensor:
    a = torch.randn(batch, n, n)
    return a @ a.mT + n * torch.eye(n)


def _lstm_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(32, 16, 128), torch.randn(1)  # the weights live in the module; w is a dummy leaf


_LSTMS: dict[str, torch.nn.LSTM] = {}


def _lstm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    if x.device.type not in _LSTMS:
        torch.manual_seed(0)
        _LSTMS[x.device.type] = torch.nn.LSTM(128, 128, num_layers=2).to(x.device)
    return _LSTMS[x.device.type](x)[0] * w


def operator_families() -> None:
    """One or more operators per family added for the OpInfo coverage, against PyTorch CPU eager."""
    print("operator families (forward, or forward+backward where marked fb); ratio = torch time / npu time "
          "(goal >= 0.5):")
    for family, case, fn, make, backward in FAMILY_CASES:
        torch.manual_seed(0)
        cpu_inputs = make()
        npu_inputs = tuple(t.npu() for t in cpu_inputs)
        if backward:
            run_cpu, run_npu = _fwd_bwd(fn, *cpu_inputs), _fwd_bwd(fn, *npu_inputs)
        else:
            run_cpu = functools.partial(fn, *cpu_inputs)
            run_npu = functools.partial(fn, *npu_inputs)
        t_npu, t_cpu = best_of(run_npu, repeat=3), best_of(run_cpu, repeat=3)
        print(f"  {family:<15} {case:<42} {'fb' if backward else 'f ':2}  npu {t_npu * 1e3:8.2f} ms   "
              f"torch {t_cpu * 1e3:8.2f} ms   ratio {t_cpu / t_npu:5.2f}")


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
    operator_families()
    if not args.quick:
        compile_cost()


if __name__ == "__main__":
    main()
