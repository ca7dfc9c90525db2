"""The whole of PyTorch's OpInfo database against the NPU: what is native, what needs the fallback.

:mod:`npu_lab.ops.conformance` checks every sample of the operators the NPU
*claims*. This sweep asks the wider question a chip team asks before a release:
for **every** OpInfo in ``op_db`` (float32, the first few samples each), what
happens on ``npu``, with the CPU fallback off and then on? Each OpInfo gets one
status:

* ``native``: every sample matches the CPU (forward, and backward where the
  OpInfo supports autograd) with no operator falling back to the CPU;
* ``fallback``: it matches, but only because some operators ran on the CPU
  (only with the fallback on);
* ``missing``: an operator has no npu kernel ("Could not run ... 'npu' backend");
* ``wrong``: a result or gradient differs from the CPU's, or a kernel wrote outside a tensor's
  storage (every OpInfo runs under :class:`npu_lab.memcheck`): a bug, never allowed;
* ``error``: the npu raised where the CPU did not (any other exception);
* ``skipped``: nothing to compare (no CPU float32 kernel, or the CPU rejects every sample).

``python -m npu_lab.ops.sweep`` prints the counts (``-v``: and what is wrong, an
error or missing); ``--write`` also writes the coverage page (``docs/coverage.md``,
:mod:`npu_lab.ops.coverage_page`); ``tests/test_opinfo_sweep.py`` runs it in CI and enforces
that nothing is ``wrong`` and that the counts never drop below their floors.
"""

from __future__ import annotations

import itertools
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from ..device import fallback
from ..device.memcheck import memcheck
from .conformance import TOLERANCES, _compare, _grads, _to_npu, opinfo_name

STATUSES = ("native", "fallback", "missing", "wrong", "error", "skipped")
#: OpInfos whose results are random draws (only shapes and dtypes are compared: the npu's random
#: stream is its own, as CUDA's is).
RANDOM = {"uniform", "normal", "normal.number_mean", "normal.in_place", "bernoulli", "multinomial",
          "cauchy", "exponential", "geometric", "log_normal", "randint", "randint_like", "randn", "randn_like",
          "rand", "rand_like", "randperm", "nn.functional.dropout", "nn.functional.dropout2d",
          "nn.functional.dropout3d", "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout.with_train",
          "nn.functional.feature_alpha_dropout.without_train", "nn.functional.rrelu",
          "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
          "svd_lowrank", "pca_lowrank"}
#: Tolerances for float32 beyond the claimed operators' (sums of many terms, iterative algorithms).
SWEEP_TOL = (1e-4, 1e-4)
#: Half precision: the npu computes in float32 and rounds once on store, as the CPU does, but the CPU's
#: composite kernels round some intermediates too, so results may differ by a unit or two in the last
#: place (float16 ~1e-3, bfloat16 ~8e-3 relative): the tolerances PyTorch's device tests use for them.
HALF_TOL = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 2e-2)}


@dataclass
class OpStatus:
    """The outcome of one OpInfo."""

    name: str
    status: str
    detail: str = ""
    samples: int = 0
    grads_checked: bool = False
    fell_back: tuple[str, ...] = ()
    #: the sample that failed (shapes, strides, dtypes, the other arguments), when one did
    sample: str = ""


@dataclass
class SweepReport:
    """Every OpInfo's status for one setting of the fallback."""

    fallback: bool
    dtype: torch.dtype
    ops: list[OpStatus] = field(default_factory=list)

    def counts(self) -> Counter:
        return Counter(o.status for o in self.ops)

    def by_status(self, status: str) -> list[OpStatus]:
        return [o for o in self.ops if o.status == status]

    def summary(self) -> str:
        c = self.counts()
        mode = "fallback on " if self.fallback else "fallback off"
        return f"{mode}: {len(self.ops)} OpInfos: " + ", ".join(f"{s} {c.get(s, 0)}" for s in STATUSES)


def _random_sample(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether this sample draws random numbers (attention with dropout) though its OpInfo is deterministic."""
    if name == "nn.functional.scaled_dot_product_attention":
        return float(kwargs.get("dropout_p", 0.0)) > 0
    if name == "nn.functional.multi_head_attention_forward":  # dropout_p is the 11th positional argument
        return bool(kwargs.get("training", True)) and len(args) > 10 and float(args[10]) > 0
    return False


def _same_storage_on(x: torch.Tensor, device: str) -> torch.Tensor:
    """``x`` on ``device`` with its whole storage copied and the same size, strides and offset.

    ``x.to(device)`` would copy only the elements ``x`` shows; a sample that is a partial view of a
    larger storage (``as_strided.partial_views``) must keep the bytes around it, as PyTorch's device
    tests have them (they make samples on the device itself).
    """
    if x.layout != torch.strided or x.is_conj() or x.is_neg():
        return x.detach().to(device)
    storage = x.untyped_storage().to(device=device)
    y = torch.empty(0, dtype=x.dtype, device=device)
    return y.set_(storage, x.storage_offset(), x.shape, x.stride())


def _to_cpu(x: object) -> object:
    if isinstance(x, torch.Tensor) and x.device.type == "npu":
        y = _same_storage_on(x, "cpu")
        return y.requires_grad_(True) if x.requires_grad else y
    if isinstance(x, torch.device) and x.type == "npu":
        return torch.device("cpu")
    if isinstance(x, str) and x.startswith("npu"):
        return "cpu"
    return x


def _missing(exc: BaseException) -> str | None:
    text = str(exc)
    if isinstance(exc, NotImplementedError) and "with arguments from the 'npu' backend" in text:
        return text.split("'")[1] if "'" in text else text[:80]
    return None


def _where(exc: BaseException) -> str:
    """" (in <function>, line: <code>)" for the deepest frame of the traceback outside torch and npu_lab: the
    kernel author's own code (a bring-up kernel, loaded from a notebook), when there is such a frame."""
    import traceback
    from pathlib import Path

    skip = (str(Path(torch.__file__).parent), str(Path(__file__).parents[1]))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(skip)]
    if not frames:
        return ""
    f = frames[-1]
    return f" (in {f.name}: {(f.line or '').strip()[:120]})"


def _in_float32(op, args: tuple, kwargs: dict, dtype: torch.dtype) -> Any:
    """For a 16-bit ``dtype``: ``op`` on the CPU with its floating inputs in float32, the result rounded to ``dtype``.

    The reference when the CPU's own 16-bit kernel disagrees with it: on some CPUs it is the CPU that is wrong
    (torch 2.13's float16 conv2d with dilation on an AVX-512 CPU is off by 200 where float32 and the npu agree).
    None for other dtypes, or when the float32 run fails.
    """
    if dtype not in HALF_TOL:
        return None

    def up(t: Any) -> Any:
        return t.detach().float() if isinstance(t, torch.Tensor) and t.dtype == dtype else t

    def down(t: Any) -> Any:
        return t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t

    try:
        return tree_map(down, op(*tree_map(up, args), **tree_map(up, kwargs)))
    except Exception:  # noqa: BLE001 - no float32 reference: the 16-bit comparison stands
        return None


def describe_sample(args: tuple, kwargs: dict) -> str:
    """A sample's arguments as a line: tensors by shape, dtype and (when not contiguous) strides."""

    def one(x: Any) -> str:
        if isinstance(x, torch.Tensor):
            text = f"tensor{tuple(x.shape)} {str(x.dtype).removeprefix('torch.')}"
            if x.layout != torch.strided:  # sparse layouts have no strides (and no is_contiguous)
                return f"{text} {str(x.layout).removeprefix('torch.')}"
            return text if x.is_contiguous() else f"{text} strides {x.stride()}"
        if isinstance(x, (list, tuple)):
            inner = ", ".join(one(v) for v in x)
            return f"[{inner}]" if isinstance(x, list) else f"({inner})"
        return repr(x)

    text = ", ".join([one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()])
    return text if len(text) <= 300 else text[:297] + "..."


def check_op(op, dtype: torch.dtype = torch.float32, samples: int | None = 3, grads: bool = True,
             noncontiguous: bool = False) -> OpStatus:
    """Run the first ``samples`` samples (None: all) of one OpInfo on npu (fallback as currently set).

    ``noncontiguous``: each sample's tensors are replaced by non-contiguous copies of the same values (as
    PyTorch's ``test_noncontiguous_samples`` does), so a kernel that ignores strides shows.
    """
    return _check_op(op, dtype, samples, grads, noncontiguous)


def _check_op(op, dtype: torch.dtype, samples: int | None, grads: bool, noncontiguous: bool) -> OpStatus:
    name = opinfo_name(op)
    if dtype not in op.supported_dtypes("cpu"):
        return OpStatus(name, "skipped", f"no CPU {dtype} kernel")
    want_grad = grads and op.supports_autograd and dtype.is_floating_point
    rtol, atol = HALF_TOL.get(dtype) or TOLERANCES.get(name, SWEEP_TOL)
    random = name in RANDOM or op.has_nondeterministic_output
    # Samples are made on the npu, as PyTorch's device tests make them (some arguments must stay on the CPU,
    # and the generator knows which); if making them needs an operator the npu lacks, on the CPU and moved.
    before = Counter(fallback.counts)
    torch.manual_seed(0)
    try:
        inputs, on_npu = list(itertools.islice(op.sample_inputs("npu", dtype, requires_grad=want_grad), samples)), True
        if noncontiguous:
            inputs = [s.noncontiguous() for s in inputs]
    except Exception:  # noqa: BLE001 - retried on the CPU below
        on_npu = False
    if not on_npu:
        torch.manual_seed(0)
        try:
            inputs = list(itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=want_grad), samples))
            if noncontiguous:
                inputs = [s.noncontiguous() for s in inputs]
        except Exception as exc:  # noqa: BLE001 - a broken sample generator is PyTorch's, not ours
            return OpStatus(name, "skipped", f"sample inputs fail on the CPU: {type(exc).__name__}")
    before = Counter(fallback.counts)  # making the samples may fall back; running them is what counts
    ran, grads_checked = 0, False
    for sample in inputs:
        if on_npu:
            npu_args, npu_kwargs = (sample.input, *sample.args), dict(sample.kwargs)
            try:
                args, kwargs = tree_map(_to_cpu, npu_args), tree_map(_to_cpu, npu_kwargs)
            except Exception as exc:  # noqa: BLE001 - a sample on npu that cannot come back (sparse layouts)
                return OpStatus(name, "error", f"moving a sample to the CPU: {type(exc).__name__}: {exc}"[:200], ran)
        else:
            args, kwargs = (sample.input, *sample.args), dict(sample.kwargs)
            npu_args, npu_kwargs = tree_map(_to_npu, args), tree_map(_to_npu, kwargs)
        if "generator" in kwargs:
            continue
        try:
            expected = op(*args, **kwargs)
        except Exception:  # noqa: BLE001 - the CPU rejects it too: nothing to compare
            continue
        try:
            actual = op(*npu_args, **npu_kwargs)
        except Exception as exc:  # noqa: BLE001 - classified below
            kernel = _missing(exc)
            if kernel is not None:
                return OpStatus(name, "missing", kernel, ran, sample=describe_sample(args, kwargs))
            return OpStatus(name, "error", f"{type(exc).__name__}: {str(exc).strip()[:200]}{_where(exc)}", ran,
                            sample=describe_sample(args, kwargs))
        sample_random = random or _random_sample(name, args, kwargs)
        try:
            if sample_random:
                e_t, a_t = tree_flatten(expected)[0], tree_flatten(actual)[0]
                assert [(getattr(t, "shape", None), getattr(t, "dtype", None)) for t in e_t] == \
                       [(getattr(t, "shape", None), getattr(t, "dtype", None)) for t in a_t], "random outputs' shapes"
            else:
                try:
                    _compare(expected, actual, rtol, atol)
                except AssertionError:
                    # the CPU's own 16-bit kernel may be what is off; compare with its float32 result, rounded
                    wide = _in_float32(op, args, kwargs, dtype)
                    if wide is None:
                        raise
                    _compare(wide, actual, rtol, atol)
        except AssertionError as exc:
            return OpStatus(name, "wrong", f"forward: {str(exc).strip()[:300]}", ran,
                            sample=describe_sample(args, kwargs))
        if want_grad and not sample_random:
            try:
                g_cpu = _grads(lambda *a, kw=kwargs: op(*a, **kw), args, "cpu")
            except Exception:  # noqa: BLE001 - no gradient on the CPU either
                g_cpu = None
            if g_cpu is not None:
                try:
                    g_npu = _grads(lambda *a, kw=npu_kwargs: op(*a, **kw), npu_args, "npu")
                except Exception as exc:  # noqa: BLE001
                    kernel = _missing(exc)
                    if kernel is not None:
                        return OpStatus(name, "missing", f"{kernel} (backward)", ran,
                                        sample=describe_sample(args, kwargs))
                    return OpStatus(name, "error", f"backward: {type(exc).__name__}: {str(exc).strip()[:200]}"
                                    f"{_where(exc)}", ran, sample=describe_sample(args, kwargs))
                try:
                    for gc, gn in zip(g_cpu, g_npu):
                        if gc is None or gn is None:
                            assert gc is None and gn is None, "gradient missing on one device"
                        else:
                            torch.testing.assert_close(gn, gc, rtol=max(rtol, 1e-4), atol=max(atol, 1e-4),
                                                       equal_nan=True)
                except AssertionError as exc:
                    return OpStatus(name, "wrong", f"backward: {str(exc).strip()[:300]}", ran,
                                    sample=describe_sample(args, kwargs))
                grads_checked = grads_checked or bool(g_cpu)
        ran += 1
    if ran == 0:
        return OpStatus(name, "skipped", "the CPU rejects every sample")
    used = tuple(sorted(Counter(fallback.counts) - before))
    return OpStatus(name, "fallback" if used else "native", "", ran, grads_checked, used)


def sweep(fallback_on: bool, dtype: torch.dtype = torch.float32, samples: int = 3, grads: bool = True,
          names: Iterable[str] | None = None) -> SweepReport:
    """Every OpInfo (or those named) with the CPU fallback on or off."""
    from torch.testing._internal.common_methods_invocations import op_db

    wanted = set(names) if names is not None else None
    report = SweepReport(fallback_on, dtype)
    previous = fallback.cpu_fallback_enabled()
    fallback.set_cpu_fallback(fallback_on)
    try:
        with warnings.catch_warnings(), memcheck() as guards:
            warnings.simplefilter("ignore")
            for op in op_db:
                if wanted is not None and opinfo_name(op) not in wanted:
                    continue
                status = check_op(op, dtype, samples, grads)
                if guards.scan():  # blocks freed since the last scan were checked as they went
                    status = OpStatus(status.name, "wrong", "wrote outside a tensor's storage: "
                                      + "; ".join(guards.notes), status.samples)
                    guards.reset()  # reported here, for this OpInfo
                report.ops.append(status)
    finally:
        fallback.set_cpu_fallback(previous)
    return report


def both(dtype: torch.dtype = torch.float32, samples: int = 3, grads: bool = True) -> tuple[SweepReport, SweepReport]:
    """The sweep with the fallback off, then on.

    An OpInfo that is ``native`` or ``skipped`` with the fallback off never reaches the fallback,
    so with it on the very same kernels run: only the others are run again (half the time).
    """
    off = sweep(False, dtype, samples, grads)
    again = {o.name for o in off.ops if o.status not in ("native", "skipped")}
    rerun = {o.name: o for o in sweep(True, dtype, samples, grads, names=again).ops}
    on = SweepReport(True, dtype, [rerun.get(o.name, o) for o in off.ops])
    return off, on


def kinds() -> dict[str, str]:
    """OpInfo name -> the name of its OpInfo class (UnaryUfuncInfo, ReductionOpInfo, ...)."""
    from torch.testing._internal.common_methods_invocations import op_db

    return {opinfo_name(op): type(op).__name__ for op in op_db}


def _main() -> None:
    import sys
    import time

    from . import coverage_page

    start = time.perf_counter()
    off, on = both()
    seconds = time.perf_counter() - start
    for report in (off, on):
        print(report.summary())
        if "-v" in sys.argv:
            for status in ("wrong", "error", "missing"):
                for o in report.by_status(status):
                    print(f"  {status:8} {o.name:40} {o.detail[:150]}")
    print(f"{seconds:.0f} s")
    if "--write" in sys.argv:
        print("wrote", coverage_page.write(off, on, kinds(), seconds))


if __name__ == "__main__":
    _main()
