"""Layout benchmark: convolution inference compiled with the NHWC layout pass on and off.

Run:  .venv/bin/python benchmarks/layout.py

For each model, the same run compiles it twice (``options={"layout": True}``
and ``{"layout": False}``), checks the two agree, and reports:

* host wall time per inference (best of N, the two variants interleaved so
  that load from other processes hits both alike), with all numba threads
  and with one thread (the one-thread figure is the steadier on a busy
  machine: a parallel kernel waits for every worker thread to get a CPU);
* the simulated device time, kernel launches and bytes moved, from the
  profiler (``npu_lab.profile()``).

The cost model charges a convolution for its im2col matrix and, in NCHW, for
the transpose of its matmul result that NHWC skips; it also sees the layout
conversion at each chain exit. Compute-bound convolutions gain little simulated
time; the wall time shows what the kernels really save. All figures are
measured in this run on this machine. Nothing is asserted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numba
import torch
from timing import freeze_startup_heap
from torch import nn

import npu_lab
from npu_lab import compiler, models


def conv_stack() -> nn.Module:
    """Four convolutions with ReLUs and one max pool: a chain the pass converts whole."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        nn.Conv2d(64, 64, 1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    ).eval()


def small_cnn() -> nn.Module:
    """The reference CNN in evaluation mode (conv+bn+relu fused into npu.conv_bn_relu first)."""
    torch.manual_seed(0)
    return models.SmallCNN().eval()


def interleaved_best(fns: dict[str, Callable[[], object]], repeat: int = 30) -> dict[str, float]:
    """Best wall time (s) of each function, calling them in turn so each sees the same load."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def compare(name: str, model: nn.Module, x: torch.Tensor) -> None:
    model = model.npu()
    x = x.npu()
    calls0 = compiler.stats["backend_calls"]
    fns = {label: torch.compile(model, backend="npu", options={"layout": on})
           for label, on in (("nhwc", True), ("nchw", False))}
    with torch.no_grad():
        out = fns["nhwc"](x)  # compiles
        changes = compiler.last_compile().graph("inference").snapshot("layout").changes
        torch.testing.assert_close(out.cpu(), fns["nchw"](x).cpu(), rtol=1e-4, atol=1e-4)

        def run(fn: Callable) -> Callable[[], None]:
            return lambda: (fn(x), torch.npu.synchronize())

        threads = numba.get_num_threads()
        walls = {}
        for n in sorted({threads, 1}, reverse=True):
            numba.set_num_threads(n)
            for fn in fns.values():
                run(fn)()  # warm up at this thread count
            walls[n] = interleaved_best({label: run(fn) for label, fn in fns.items()})
        numba.set_num_threads(threads)
        profiles = {}
        for label, fn in fns.items():
            with npu_lab.profile() as prof:
                run(fn)()
            profiles[label] = prof
    assert compiler.stats["backend_calls"] - calls0 == 2, "unexpected recompilation"
    print(f"{name}: input {tuple(x.shape)}")
    print(f"  layout pass: {changes[0]}")
    for n, w in walls.items():
        print(f"  wall, {n} numba thread{'s' if n != 1 else ''}: nhwc {w['nhwc'] * 1e3:7.2f} ms | "
              f"nchw {w['nchw'] * 1e3:7.2f} ms -> nhwc speed-up {w['nchw'] / w['nhwc']:4.2f}x")
    p, q = profiles["nhwc"], profiles["nchw"]
    print(f"  simulated device: nhwc {p.sim_time_us:8.1f} us, {p.launches} launches, "
          f"{p.bytes_moved / 1e6:6.2f} MB | nchw {q.sim_time_us:8.1f} us, {q.launches} launches, "
          f"{q.bytes_moved / 1e6:6.2f} MB -> time ratio nchw/nhwc {q.sim_time_us / p.sim_time_us:4.2f}")
    kernels = ", ".join(f"{r.name} x{r.calls}" for r in p.key_averages())
    print(f"  nhwc kernels: {kernels}")


def main() -> None:
    freeze_startup_heap()
    print(f"torch {torch.__version__}, npu_lab {npu_lab.__version__}, {os.cpu_count()} CPU cores, "
          f"{numba.get_num_threads()} numba threads, start-up heap frozen (gc.freeze)")
    g = torch.Generator().manual_seed(0)
    compare("conv stack (4 convs, relu, max pool)", conv_stack(), torch.randn(16, 3, 32, 32, generator=g))
    compare("SmallCNN eval", small_cnn(), torch.randn(32, 3, 32, 32, generator=g))


if __name__ == "__main__":
    main()
