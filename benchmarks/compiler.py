"""Compiler benchmark: torch.compile(backend="npu") against eager and against Inductor.

Run:  .venv/bin/python benchmarks/compiler.py

All figures are measured in this run on this machine. Nothing is asserted.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from timing import best_of, freeze_startup_heap, interleaved

import npu_lab
from npu_lab import models
from npu_lab.device import clock


def chain(x: torch.Tensor) -> torch.Tensor:
    """Six elementwise operators: eager runs six kernels and writes six tensors."""
    y = x * 1.5 + 0.5
    y = torch.sigmoid(y) * x
    return torch.tanh(y) - 0.25 * x


def pointwise_chain(n: int = 4_000_000) -> None:
    x_cpu = torch.randn(n)
    x = x_cpu.npu()
    npu_fn = torch.compile(chain, backend="npu")
    inductor_fn = torch.compile(chain, backend="inductor")
    t_npu = best_of(lambda: npu_fn(x))
    t_cpu = best_of(lambda: chain(x_cpu))
    t_ind = best_of(lambda: inductor_fn(x_cpu))
    torch.testing.assert_close(npu_fn(x).cpu(), chain(x_cpu), rtol=1e-5, atol=1e-5)
    print(f"pointwise chain, {n / 1e6:.0f}M floats, 6 ops:")
    print(f"  compiled npu {t_npu * 1e3:7.2f} ms | torch cpu eager {t_cpu * 1e3:7.2f} ms | "
          f"inductor cpu {t_ind * 1e3:7.2f} ms")
    print(f"  npu speed-up over cpu eager {t_cpu / t_npu:5.2f}x (goal >= 1.5x); "
          f"npu speed relative to inductor {t_ind / t_npu:5.2f}x (goal >= 0.7x)")


def mean_squared_error(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """MSE loss forward: eager runs sub, pow, mean (two full-size intermediates)."""
    return ((x - y) ** 2).mean()


def softmax_by_hand(x: torch.Tensor) -> torch.Tensor:
    """Softmax over rows written out: eager runs amax, sub, exp, sum, div."""
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def _launches(fn: Callable[[], object]) -> tuple[int, list[str]]:
    """Kernel launches of one call as the profiler counts them, and the kernels' names."""
    with npu_lab.profile() as prof:
        fn()
    return prof.launches, [k.name for k in prof.kernels if k.kind == "kernel"]


def fused_reduction(title: str, fn: Callable[..., torch.Tensor], cpu_args: tuple[torch.Tensor, ...]) -> None:
    """One reduction fused with its elementwise prologue/epilogue: compiled npu vs eager."""
    args = tuple(a.npu() for a in cpu_args)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="npu")
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args).cpu(), fn(*cpu_args), rtol=1e-4, atol=1e-6)
        t_comp = best_of(lambda: compiled(*args), repeat=10)
        t_npu = best_of(lambda: fn(*args), repeat=10)
        t_cpu = best_of(lambda: fn(*cpu_args), repeat=10)
        eager_launches, eager_names = _launches(lambda: fn(*args))
        comp_launches, comp_names = _launches(lambda: compiled(*args))
    print(f"{title}:")
    print(f"  compiled npu {t_comp * 1e3:7.2f} ms | npu eager {t_npu * 1e3:7.2f} ms | "
          f"torch cpu eager {t_cpu * 1e3:7.2f} ms -> {t_cpu / t_comp:4.2f}x over cpu eager, "
          f"{t_npu / t_comp:4.2f}x over npu eager")
    print(f"  kernel launches per call (profiler): eager {eager_launches} ({', '.join(eager_names)}), "
          f"compiled {comp_launches} ({', '.join(comp_names)})")


def fused_reductions(n: int = 4_000_000) -> None:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
    fused_reduction(f"mean squared error, {n / 1e6:.0f}M floats", mean_squared_error, (x, y))
    rows = n // 1024
    fused_reduction(f"softmax by hand, {rows} rows x 1024", softmax_by_hand, (x[: rows * 1024].view(rows, 1024),))


def training_step(name: str, make: Callable[[], torch.nn.Module], batch: int) -> None:
    """One SGD-with-momentum step three ways, timed in alternating rounds.

    * eager: the model, the loss and ``opt.step()`` as PyTorch runs them;
    * compiled model: ``torch.compile(model)``, loss and optimizer eager;
    * compiled step: ``torch.compile`` of the model with its loss, and of
      ``opt.step`` (the recipe PyTorch recommends for compiling optimizers).
    """

    def stepper(mode: str) -> Callable[[], float]:
        torch.manual_seed(0)
        model = make().npu()
        x, y = models.example_batch(model, batch, "npu")
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def forward_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return models.loss_fn(model, model(x), y)

        forward, update = forward_loss, opt.step
        if mode == "compiled model":
            compiled = torch.compile(model, backend="npu")

            def forward(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
                return models.loss_fn(model, compiled(x), y)
        elif mode == "compiled step":
            forward, update = torch.compile(forward_loss, backend="npu"), torch.compile(opt.step, backend="npu")

        def step() -> float:
            opt.zero_grad()
            loss = forward(x, y)
            loss.backward()
            update()
            return loss.item()

        return step

    steps = {mode: stepper(mode) for mode in ("eager", "compiled model", "compiled step")}
    losses = {mode: [step() for _ in range(3)] for mode, step in steps.items()}
    for mode in ("compiled model", "compiled step"):  # the same three losses as eager
        torch.testing.assert_close(losses[mode], losses["eager"], rtol=1e-4, atol=1e-5)
    times = interleaved(steps, rounds=30)
    counts = {}
    moved = [0]

    def count_bytes(rec: clock.KernelRecord) -> None:  # every kernel's reads and writes
        moved[0] += rec.bytes_read + rec.bytes_written

    clock.listeners.append(count_bytes)
    try:
        for mode, step in steps.items():
            launches0, cost0, moved[0] = clock.clock(0).launches, clock.clock(0).now(0), 0
            step()
            torch.npu.synchronize()
            counts[mode] = (clock.clock(0).launches - launches0, clock.clock(0).now(0) - cost0, moved[0])
    finally:
        clock.listeners.remove(count_bytes)
    eager_min, eager_med = times["eager"]
    eager_sim = counts["eager"][1]
    print(f"{name} (SGD with momentum; host wall time, fastest / median of 30 alternating rounds):")
    for mode, (fastest, median) in times.items():
        launches, sim_us, moved = counts[mode]
        ratio = "" if mode == "eager" else (f" -> {eager_min / fastest:4.2f}x fastest, "
                                             f"{eager_med / median:4.2f}x median (goal >= 1.5x)")
        print(f"  {mode:15s} {fastest * 1e3:6.2f} / {median * 1e3:6.2f} ms{ratio}")
        sim_ratio = "" if mode == "eager" else f" ({eager_sim / sim_us:4.2f}x less than eager)"
        print(f"  {'':15s} {launches} kernel launches, {moved / 1e6:.2f} MB read and written by kernels, "
              f"{sim_us:.0f} us simulated device time{sim_ratio}")


def main() -> None:
    freeze_startup_heap()
    print(f"torch {torch.__version__}, npu_lab {npu_lab.__version__}, {os.cpu_count()} CPU cores, "
          "start-up heap frozen (gc.freeze)")
    pointwise_chain()
    fused_reductions()
    training_step("MLP training step", lambda: models.mlp(256, 512, 10), 128)
    training_step("transformer block step", models.TransformerBlock, 16)


if __name__ == "__main__":
    main()
