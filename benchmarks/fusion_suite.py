"""The fusion suite: kernels launched and bytes moved, ``backend="npu"`` against Inductor.

For each case both compilers see the same function on the same shapes (Inductor on the CPU, the
npu backend on npu). Counted per call of the compiled function:

* npu: kernel launches and the bytes they read and wrote, from ``npu_lab.profile()``;
* Inductor: the kernels in the code it generated (each ``cpp_fused_*`` function, plus each call
  of an extern kernel such as a matmul library call), and the bytes its scheduler counts for the
  graph (``num_bytes_accessed``, what Inductor's ``inductor_metrics`` log reports).

The goal (issue 33): per case, npu launches no more kernels and moves no more bytes than Inductor.
Run: ``python -m benchmarks.fusion_suite``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch._dynamo
import torch._inductor.config
import torch._inductor.metrics as inductor_metrics
import torch.nn.functional as F  # noqa: N812
from torch._inductor import compile_fx
from torch._inductor.utils import run_and_get_code

import npu_lab
import npu_lab.compiler

ROWS, COLS = 256, 512


def gelu_ish(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x * x * x)))


def gelu_chain(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(x * w + b)


def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, -1)


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b)


def bias_dropout_residual(x: torch.Tensor, b: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return residual + F.dropout(x + b, p=0.1, training=True)


def attention_epilogue(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores * 0.125 + mask, -1)


@dataclass
class Case:
    name: str
    fn: Callable[..., torch.Tensor]
    shapes: tuple[tuple[int, ...], ...]


CASES = (
    Case("gelu_ish (C1)", gelu_ish, ((ROWS, COLS),)),
    Case("GELU chain", gelu_chain, ((ROWS, COLS), (COLS,), (COLS,))),
    Case("RMSNorm", rms_norm, ((ROWS, COLS), (COLS,))),
    Case("softmax", softmax, ((ROWS, COLS),)),
    Case("layer norm", layer_norm, ((ROWS, COLS), (COLS,), (COLS,))),
    Case("bias + dropout + residual", bias_dropout_residual, ((ROWS, COLS), (COLS,), (ROWS, COLS))),
    Case("attention epilogue", attention_epilogue, ((8, 64, 64), (64, 64))),
)


@dataclass
class Counts:
    kernels: int
    bytes: int


def npu_counts(case: Case) -> Counts:
    torch._dynamo.reset()
    npu_lab.compiler.reset()
    torch.manual_seed(0)
    args = [torch.randn(s, device="npu") for s in case.shapes]
    f = torch.compile(case.fn, backend="npu")
    with torch.no_grad():
        f(*args)
        with npu_lab.profile() as prof:
            f(*args)
    return Counts(prof.launches, prof.bytes_moved)


def inductor_counts(case: Case) -> Counts:
    torch._dynamo.reset()
    inductor_metrics.reset()
    log = compile_fx.inductor_metrics_log
    # Inductor counts a graph's bytes only when its metrics log is on; count them without printing it
    saved = log.isEnabledFor, log.info
    log.isEnabledFor, log.info = (lambda level: True), (lambda *args, **kwargs: None)
    try:
        torch.manual_seed(0)
        args = [torch.randn(s) for s in case.shapes]
        with torch.no_grad(), torch._inductor.config.patch(compile_threads=1):
            _, codes = run_and_get_code(torch.compile(case.fn, backend="inductor"), *args)
    finally:
        log.isEnabledFor, log.info = saved
    code = "\n".join(codes)
    generated = re.findall(r"^(\w+) = async_compile\.cpp", code, re.M)
    kernels = len(generated) + len(re.findall(r"extern_kernels\.\w+\(", code))
    return Counts(kernels, int(inductor_metrics.num_bytes_accessed))


def run() -> list[tuple[str, Counts, Counts]]:
    """(case, npu, Inductor) for every case of the suite."""
    return [(case.name, npu_counts(case), inductor_counts(case)) for case in CASES]


def table(rows: list[tuple[str, Counts, Counts]]) -> str:
    head = f"{'case':<28}{'npu kernels':>12}{'Inductor':>10}{'npu MB':>10}{'Inductor MB':>13}  goal"
    lines = [head, "-" * len(head)]
    for name, npu, ind in rows:
        ok = npu.kernels <= ind.kernels and npu.bytes <= ind.bytes
        lines.append(f"{name:<28}{npu.kernels:>12}{ind.kernels:>10}{npu.bytes / 1e6:>10.3f}{ind.bytes / 1e6:>13.3f}"
                     f"  {'met' if ok else 'MISSED'}")
    return "\n".join(lines)


def main() -> None:
    print(table(run()))


if __name__ == "__main__":
    main()
