"""Check the NPU against PyTorch's own operator test database (OpInfo).

PyTorch describes every public operator in ``op_db``
(``torch.testing._internal.common_methods_invocations``) together with a
generator of *sample inputs* that exercise its corner cases: broadcasting,
scalars, empty tensors, non-contiguous inputs, keyword arguments. Running
those samples on ``npu`` and comparing with the CPU is how a chip team proves
its kernels with tests nobody on the team wrote.

:data:`CLAIMED_OPINFOS` lists the core OpInfo entries checked in depth: every
sample, in each dtype listed. The conformance test runs all of them; a name
missing from ``op_db`` fails the test, so the set cannot shrink silently. The
whole of ``op_db`` (its first samples, float32, fallback off and on) is
:mod:`npu_lab.ops.sweep`'s job.

Note: importing ``op_db`` needs the ``expecttest`` package (a test dependency).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_flatten, tree_map

F32 = (torch.float32,)
F32_I64 = (torch.float32, torch.int64)
F32_I64_BOOL = (torch.float32, torch.int64, torch.bool)

#: OpInfo name (``name`` or ``name.variant``) -> dtypes whose samples run on npu.
CLAIMED_OPINFOS: dict[str, tuple[torch.dtype, ...]] = {
    # elementwise arithmetic
    "add": F32_I64, "sub": F32_I64, "mul": F32_I64_BOOL, "div.no_rounding_mode": F32_I64,
    "div.trunc_rounding": F32_I64, "div.floor_rounding": F32_I64, "rsub": F32_I64,
    "neg": F32_I64, "abs": F32_I64, "pow": F32, "exp": F32_I64, "log": F32, "sqrt": F32,
    "rsqrt": F32, "reciprocal": F32, "sign": F32_I64, "sgn": F32,
    "floor": F32, "ceil": F32, "trunc": F32, "round": F32,
    "sin": F32, "cos": F32, "erf": F32, "expm1": F32, "log1p": F32, "log2": F32,
    "remainder": F32_I64, "maximum": F32_I64, "minimum": F32_I64,
    "addcmul": F32, "addcdiv": F32, "lerp": F32,
    # activations
    "nn.functional.relu": F32_I64, "sigmoid": F32, "tanh": F32, "nn.functional.gelu": F32,
    "nn.functional.silu": F32, "clamp": F32_I64, "clamp_min": F32, "clamp_max": F32,
    "where": F32_I64,
    # comparisons and logic
    "eq": F32_I64_BOOL, "ne": F32_I64_BOOL, "lt": F32_I64, "le": F32_I64, "gt": F32_I64,
    "ge": F32_I64, "logical_and": F32_I64_BOOL, "logical_or": F32_I64_BOOL,
    "logical_not": F32_I64_BOOL, "logical_xor": F32_I64_BOOL,
    "bitwise_and": (torch.int64, torch.bool), "bitwise_or": (torch.int64, torch.bool),
    "bitwise_not": (torch.int64, torch.bool), "isnan": F32, "isinf": F32, "isfinite": F32,
    # fill, copy, factories
    "fill": F32_I64_BOOL, "zero_": F32_I64, "zeros_like": F32_I64, "ones_like": F32_I64,
    "full_like": F32, "masked_fill": F32_I64, "clone": F32_I64_BOOL, "contiguous": F32,
    # reductions
    "sum": F32_I64, "mean": F32, "max.reduction_with_dim": F32_I64,
    "max.reduction_no_dim": F32_I64, "min.reduction_with_dim": F32_I64,
    "min.reduction_no_dim": F32_I64, "amax": F32, "amin": F32, "argmax": F32_I64,
    "argmin": F32_I64, "var": F32, "std": F32, "softmax": F32, "log_softmax": F32,
    # matrix products
    "mm": F32, "bmm": F32, "addmm": F32, "baddbmm": F32, "dot": F32, "mv": F32,
    "matmul": F32, "nn.functional.linear": F32,
    # losses
    "nn.functional.mse_loss": F32,
    # shape and indexing
    "cat": F32_I64_BOOL, "stack": F32_I64, "hstack": F32, "vstack": F32, "split": F32,
    "split.list_args": F32, "chunk": F32, "index_select": F32_I64, "gather": F32_I64,
    "scatter": F32_I64, "scatter_add": F32, "masked_select": F32_I64, "take_along_dim": F32,
    "nn.functional.one_hot": (torch.int64,), "nonzero": F32_I64_BOOL, "tril": F32_I64, "triu": F32_I64,
    "flip": F32_I64, "index_put": F32, "nn.functional.embedding": F32,
    # convolution, pooling, normalisation, losses on images
    "nn.functional.conv1d": F32, "nn.functional.conv2d": F32, "nn.functional.max_pool2d": F32,
    "nn.functional.avg_pool2d": F32, "nn.functional.adaptive_avg_pool2d": F32,
    "nn.functional.batch_norm": F32, "nn.functional.layer_norm": F32,
    "nn.functional.cross_entropy": F32, "nn.functional.nll_loss": F32,
}

#: Operators whose output is random: compared by shape and dtype only.
RANDOM_OPS = {"nn.functional.dropout", "bernoulli", "rand_like", "randn_like", "randint_like"}

#: (rtol, atol) overrides; numba accumulates in a different order than MKL.
TOLERANCES: dict[str, tuple[float, float]] = {
    "mm": (1e-4, 1e-4), "bmm": (1e-4, 1e-4), "addmm": (1e-4, 1e-4), "baddbmm": (1e-4, 1e-4),
    "matmul": (1e-4, 1e-4), "nn.functional.linear": (1e-4, 1e-4), "dot": (1e-4, 1e-4),
    "mv": (1e-4, 1e-4), "nn.functional.conv1d": (1e-4, 1e-4), "nn.functional.conv2d": (1e-4, 1e-4),
    "var": (1e-4, 1e-5), "std": (1e-4, 1e-5), "mean": (1e-5, 1e-5),
    "sum": (1e-5, 1e-5), "pow": (1e-5, 1e-5),
}
DEFAULT_TOL = (1.3e-6, 1e-5)


@dataclass
class SampleResult:
    """The outcome of one OpInfo sample on npu."""

    op: str
    dtype: torch.dtype
    index: int
    status: str  # "passed" | "failed" | "skipped"
    reason: str = ""
    grad_checked: bool = False


@dataclass
class ConformanceReport:
    results: list[SampleResult] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def ops(self) -> set[str]:
        return {r.op for r in self.results}

    def failures(self) -> list[SampleResult]:
        return [r for r in self.results if r.status == "failed"]

    def summary(self) -> str:
        return (
            f"{len(self.ops)} core OpInfos (every sample, each claimed dtype), {len(self.results)} samples, "
            f"passed {self.count('passed')}, skipped {self.count('skipped')}, "
            f"failed {self.count('failed')}"
        )


def opinfo_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def find_opinfos(names: Iterable[str]) -> dict[str, object]:
    """OpInfo objects for ``names``; raises KeyError naming any that op_db lacks."""
    from torch.testing._internal.common_methods_invocations import op_db

    by_name = {opinfo_name(o): o for o in op_db}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise KeyError(f"not in PyTorch's op_db: {missing}")
    return {n: by_name[n] for n in names}


def _to_npu(x: object) -> object:
    if isinstance(x, torch.Tensor):
        y = x.detach().to("npu")
        if x.requires_grad:
            y.requires_grad_(True)
        return y
    if isinstance(x, torch.device) and x.type == "cpu":
        return torch.device("npu")
    if isinstance(x, str) and x == "cpu":
        return "npu"
    return x


def _compare(expected: object, actual: object, rtol: float, atol: float) -> None:
    exp_flat, _ = tree_flatten(expected)
    act_flat, _ = tree_flatten(actual)
    if len(exp_flat) != len(act_flat):
        raise AssertionError(f"output structure differs: {len(exp_flat)} vs {len(act_flat)} leaves")
    for e, a in zip(exp_flat, act_flat):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise AssertionError(f"expected a tensor, got {type(a).__name__}")
            if a.device.type != "npu" and e.device.type == "cpu" and e.dim() > 0:
                raise AssertionError(f"result on {a.device}, expected npu")
            torch.testing.assert_close(a.cpu(), e, rtol=rtol, atol=atol, equal_nan=True)
        elif isinstance(e, float):
            torch.testing.assert_close(torch.tensor(a), torch.tensor(e), rtol=rtol, atol=atol,
                                       equal_nan=True)
        else:
            if e != a:
                raise AssertionError(f"expected {e!r}, got {a!r}")


def _cotangents(outputs: object) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    outs = [o for o in tree_flatten(outputs)[0]
            if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()]
    gen = torch.Generator().manual_seed(1234)
    cots = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]
    return outs, cots


def _grads(fn: Callable, sample_args: tuple, device: str) -> list[torch.Tensor | None]:
    inputs = [x for x in tree_flatten(sample_args)[0]
              if isinstance(x, torch.Tensor) and x.requires_grad]
    out = fn(*sample_args)
    outs, cots = _cotangents(out)
    if not outs:
        return []
    cots = [c.to(device) for c in cots]
    grads = torch.autograd.grad(outs, inputs, cots, allow_unused=True)
    return [g.cpu() if g is not None else None for g in grads]


def check_opinfo(name: str, op=None, dtypes: Iterable[torch.dtype] | None = None,
                 grads: bool = True) -> list[SampleResult]:
    """Run every sample of OpInfo ``name`` on npu and compare with the CPU."""
    if op is None:
        op = find_opinfos([name])[name]
    dtypes = tuple(dtypes or CLAIMED_OPINFOS.get(name, F32))
    rtol, atol = TOLERANCES.get(name, DEFAULT_TOL)
    results: list[SampleResult] = []
    for dtype in dtypes:
        if dtype not in op.supported_dtypes("cpu"):
            results.append(SampleResult(name, dtype, -1, "skipped", f"op has no CPU {dtype} kernel"))
            continue
        want_grad = grads and op.supports_autograd and dtype.is_floating_point
        torch.manual_seed(0)
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=want_grad))
        for i, sample in enumerate(samples):
            args = (sample.input, *sample.args)
            kwargs = dict(sample.kwargs)
            if "generator" in kwargs:
                results.append(SampleResult(name, dtype, i, "skipped",
                                            "sample passes a torch.Generator (npu uses its own)"))
                continue
            try:
                expected = op(*args, **kwargs)
            except Exception as e:  # the CPU rejects it too: nothing to compare
                results.append(SampleResult(name, dtype, i, "skipped",
                                            f"CPU raises {type(e).__name__}"))
                continue
            npu_args = tree_map(_to_npu, args)
            npu_kwargs = tree_map(_to_npu, kwargs)
            try:
                actual = op(*npu_args, **npu_kwargs)
                if name in RANDOM_OPS:
                    e_t, a_t = tree_flatten(expected)[0], tree_flatten(actual)[0]
                    assert [t.shape for t in e_t] == [t.shape for t in a_t]
                else:
                    _compare(expected, actual, rtol, atol)
                checked = False
                if want_grad and name not in RANDOM_OPS:
                    g_cpu = _grads(lambda *a, kw=kwargs: op(*a, **kw), args, "cpu")
                    g_npu = _grads(lambda *a, kw=npu_kwargs: op(*a, **kw), npu_args, "npu")
                    for gc, gn in zip(g_cpu, g_npu):
                        if gc is None or gn is None:
                            assert gc is None and gn is None, "gradient missing on one device"
                        else:
                            torch.testing.assert_close(gn, gc, rtol=max(rtol, 1e-4),
                                                       atol=max(atol, 1e-4), equal_nan=True)
                    checked = bool(g_cpu)
                results.append(SampleResult(name, dtype, i, "passed", grad_checked=checked))
            except Exception as e:
                msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
                results.append(SampleResult(name, dtype, i, "failed",
                                            f"{type(e).__name__}: {msg[:300]}"))
    return results


def run_conformance(names: Iterable[str] | None = None, grads: bool = True) -> ConformanceReport:
    """Run :func:`check_opinfo` over the claimed OpInfo entries (or ``names``)."""
    names = list(names or CLAIMED_OPINFOS)
    ops = find_opinfos(names)
    report = ConformanceReport()
    for n in names:
        report.results.extend(check_opinfo(n, ops[n], grads=grads))
    return report
