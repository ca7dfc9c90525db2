"""Conformance for your bare device: PyTorch's OpInfo samples and the ported torch_openreg tests, on your kernels.

A milestone's check runs the cases its author thought of. A backend that ships meets PyTorch's own tests, which
nobody on your team wrote: every sample of the OpInfo database (``torch.testing._internal.opinfo``) for each
operator you claim, and the device tests of torch_openreg, PyTorch's reference out-of-tree backend (ported to
npu in ``tests/openreg``). Both run here against the kernels registered now, and only those (the device is bare:
no CPU fallback hides a gap)::

    from npu_lab.bringup import conformance
    report = conformance.opinfo()           # every OpInfo that exercises an operator of yours
    report                                  # a table: status, samples, the failing sample, the error
    conformance.opinfo(noncontiguous=True)  # the same samples with non-contiguous tensors

    tests = conformance.openreg_tests()     # tests/openreg's operator tests, on the kernels registered now
    tests                                   # passed / failed for want of a kernel (which) / failed otherwise

An OpInfo's status is the sweep's (:mod:`npu_lab.ops.sweep`): ``native`` (every sample matched the CPU,
forward and backward, under ``memcheck``), ``missing`` (an operator on the way has no kernel of yours),
``wrong`` (a value differs), ``error`` (your kernel raised where the CPU did not), ``skipped``.
"""

from __future__ import annotations

import contextlib
import html
import io
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..device import bare
from ..ops.sweep import OpStatus

#: The OpInfos that exercise the kernels milestones 1 to 3 ask for, and the two milestone 4 adds (neg,
#: index_add): what ``b4.opinfo`` grades. (``nn.functional.cross_entropy`` is left out: its samples use class
#: weights, label smoothing and probability targets, which the track's ``nll_loss`` does not take.)
TRACK_OPINFOS = (
    "add", "mul", "neg", "mm", "addmm", "bmm", "sum", "nn.functional.relu", "nn.functional.gelu", "softmax",
    "_softmax_backward_data", "log_softmax", "nn.functional.layer_norm", "native_layer_norm",
    "nn.functional.batch_norm", "native_batch_norm", "nn.functional.conv2d", "nn.functional.max_pool2d",
    "nn.functional.embedding", "index_select", "index_add", "cat", "tril", "where", "zero_",
    "nn.functional.dropout", "native_dropout_backward",
)

#: ATen operator families whose OpInfo is spelled otherwise (the OpInfos that reach them).
_ALIASES = {
    "convolution_overrideable": ("nn.functional.conv2d",), "convolution_backward": ("nn.functional.conv2d",),
    "native_batch_norm": ("nn.functional.batch_norm", "native_batch_norm"),
    "native_batch_norm_backward": ("nn.functional.batch_norm",),
    "native_layer_norm": ("nn.functional.layer_norm", "native_layer_norm"),
    "native_layer_norm_backward": ("nn.functional.layer_norm",),
    "_log_softmax": ("log_softmax",), "_log_softmax_backward_data": ("log_softmax",), "_softmax": ("softmax",),
    "_safe_softmax": ("softmax",), "nll_loss_forward": ("nn.functional.nll_loss", "nn.functional.cross_entropy"),
    "nll_loss_backward": ("nn.functional.nll_loss",), "max_pool2d_with_indices": ("nn.functional.max_pool2d",),
    "max_pool2d_with_indices_backward": ("nn.functional.max_pool2d", "max_pool2d_with_indices_backward"),
    "embedding_dense_backward": ("nn.functional.embedding",), "threshold_backward": ("nn.functional.relu",),
    "relu": ("nn.functional.relu",), "gelu": ("nn.functional.gelu",), "gelu_backward": ("nn.functional.gelu",),
    "native_dropout": ("nn.functional.dropout",), "native_dropout_backward": ("native_dropout_backward",),
    "fill_": ("fill",),
}


def _family(op: str) -> str:
    """``"aten::add.out"`` -> ``"add"``."""
    return op.split("::")[-1].split(".")[0]


def opinfos_for(ops: Iterable[str]) -> list[str]:
    """The OpInfo names (in op_db's order) that exercise the operators ``ops`` (``"aten::mm.out"``...)."""
    from torch.testing._internal.common_methods_invocations import op_db

    from ..ops.conformance import opinfo_name

    wanted: set[str] = set()
    for op in ops:
        fam = _family(op)
        wanted |= {fam, fam.rstrip("_"), f"nn.functional.{fam}", *_ALIASES.get(fam, ())}
    return [n for n in dict.fromkeys(opinfo_name(o) for o in op_db) if n in wanted]


@dataclass
class OpInfoReport:
    """The status of each OpInfo run by :func:`opinfo` (``ops``), in the order run."""

    ops: list[OpStatus] = field(default_factory=list)
    noncontiguous: bool = False
    seconds: float = 0.0

    def counts(self) -> Counter:
        return Counter(o.status for o in self.ops)

    def failing(self) -> list[OpStatus]:
        """The OpInfos that are not ``native`` (nor ``skipped``)."""
        return [o for o in self.ops if o.status not in ("native", "skipped")]

    def __getitem__(self, name: str) -> OpStatus:
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(name)

    def summary(self) -> str:
        c = self.counts()
        kind = "non-contiguous samples" if self.noncontiguous else "samples"
        return (f"{len(self.ops)} OpInfos, all their float32 {kind}: "
                + ", ".join(f"{s} {c[s]}" for s in ("native", "missing", "wrong", "error", "skipped") if c[s]))

    def __repr__(self) -> str:
        lines = [self.summary()]
        for o in self.failing():
            lines.append(f"  {o.name}: {o.status} after {o.samples} samples: {o.detail[:200]}")
            if o.sample:
                lines.append(f"      sample: {o.sample[:200]}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = []
        for o in self.failing():
            rows.append(f"<tr><td style='text-align:left'>{html.escape(o.name)}</td><td>{o.status}</td>"
                        f"<td>{o.samples}</td><td style='text-align:left'>{html.escape(o.detail[:220])}<br>"
                        f"<small>sample: {html.escape(o.sample[:220])}</small></td></tr>")
        table = ("<table><tr><th>OpInfo</th><th>status</th><th>samples passed</th><th>what happened</th></tr>"
                 + "".join(rows) + "</table>") if rows else ""
        return f"<p><b>{html.escape(self.summary())}</b></p>{table}"


def opinfo(names: Sequence[str] | None = None, noncontiguous: bool = False, samples: int | None = None,
           grads: bool = True) -> OpInfoReport:
    """Run PyTorch's OpInfo samples (float32) on your kernels: the OpInfos ``names``, by default every OpInfo that
    exercises an operator you registered (:func:`opinfos_for` of :func:`npu_lab.bringup.yours`).

    Each OpInfo runs all its samples (``samples``: only the first few), forward and, where it supports autograd,
    backward, compared with the CPU under ``memcheck``; it stops at its first failing sample, which the report
    shows with the error and the line of your code that raised.
    """
    from torch.testing._internal.common_methods_invocations import op_db

    from ..device.memcheck import memcheck
    from ..ops.conformance import opinfo_name
    from ..ops.sweep import check_op

    bare.require_bare("conformance.opinfo")
    wanted = list(names) if names is not None else opinfos_for(bare.yours())
    by_name = {opinfo_name(o): o for o in op_db}
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        raise ValueError(f"no OpInfo named {', '.join(map(repr, unknown))} in PyTorch's op_db")
    report = OpInfoReport(noncontiguous=noncontiguous)
    start = time.perf_counter()
    with warnings.catch_warnings(), memcheck() as guards:
        warnings.simplefilter("ignore")
        for name in wanted:
            status = check_op(by_name[name], torch.float32, samples, grads, noncontiguous=noncontiguous)
            if guards.scan():
                status = OpStatus(name, "wrong", "wrote outside a tensor's storage: " + "; ".join(guards.notes),
                                  status.samples)
                guards.reset()
            report.ops.append(status)
    report.seconds = time.perf_counter() - start
    return report


# --- the ported torch_openreg tests --------------------------------------------------------------------------

def openreg_dir() -> Path:
    """The ported torch_openreg tests: ``tests/openreg`` of the lab's repository."""
    path = Path(__file__).resolve().parents[2] / "tests" / "openreg"
    if not path.is_dir():
        raise FileNotFoundError(f"the ported torch_openreg tests are not at {path}: they come with the lab's "
                                "repository (git clone), not with an installed package")
    return path


#: The openreg test files the check ``b4.openreg`` runs (and :func:`openreg_tests` by default): the operator
#: tests, PyTorch's OpInfo-driven ones, and the random-number tests.
OPENREG_FILES = ("test_ops.py", "test_opinfo.py", "test_rng.py")


@dataclass
class OpenregReport:
    """Each ported torch_openreg test's outcome on your device: ``passed``, ``skipped``, ``missing`` (failed for
    want of a kernel: ``detail`` names the operator) or ``failed`` (for another reason: ``detail`` says what)."""

    tests: dict[str, dict[str, str]] = field(default_factory=dict)
    seconds: float = 0.0
    log: str = ""

    def outcome(self, test: str) -> str:
        return self.tests[test]["outcome"]

    def counts(self) -> Counter:
        return Counter(t["outcome"] for t in self.tests.values())

    def missing(self) -> Counter:
        """Operator -> how many tests stopped for want of its kernel (the first one each test met)."""
        return Counter(t["detail"] for t in self.tests.values() if t["outcome"] == "missing")

    def failed(self) -> dict[str, str]:
        return {k: t["detail"] for k, t in self.tests.items() if t["outcome"] == "failed"}

    def summary(self) -> str:
        c = self.counts()
        return (f"{len(self.tests)} tests: passed {c['passed']}, failed for want of a kernel {c['missing']}, "
                f"failed otherwise {c['failed']}, skipped {c['skipped']}")

    def __repr__(self) -> str:
        lines = [self.summary()]
        if self.missing():
            lines.append("  kernels the failing tests need first: " + ", ".join(
                f"{op} ({n})" for op, n in self.missing().most_common(12)))
        for test, why in list(self.failed().items())[:12]:
            lines.append(f"  failed: {test}: {why[:150]}")
        return "\n".join(lines)


def openreg_tests(files: Sequence[str] = OPENREG_FILES, keyword: str | None = None,
                  timeout: float = 600.0) -> OpenregReport:
    """Run the ported torch_openreg tests ``files`` (of ``tests/openreg``) against the kernels registered now.

    On the bare device, pytest runs in a forked copy of this process (:func:`npu_lab.grading.forked.call_forked`):
    the tests meet your kernels as they are registered at this moment, and a test that crashes or hangs takes
    only the copy with it (``timeout`` seconds for all). ``keyword`` is pytest's ``-k``. On the full device
    (chapter 8a's conformance step) they run in a fresh process instead, on the lab's own kernels, with the CPU
    fallback on as torch_openreg has it (``tests/openreg/conftest.py``): numba's OpenMP threads do not survive a
    fork, and a fresh process is what a CI job runs anyway (run inside a notebook's kernel, the tests of threads
    that switch devices see the kernel's threads too).
    """
    from ..grading.forked import call_forked

    folder = openreg_dir()
    unknown = [f for f in files if not (folder / f).is_file()]
    if unknown:
        raise FileNotFoundError(f"no {', '.join(unknown)} in {folder}")
    args = ["-q", "--color=no", "-p", "no:cacheprovider", "-p", "no:randomly", "-o", "addopts=",
            "--rootdir", str(folder.parents[1]), *[str(folder / f) for f in files]]
    if keyword:
        args += ["-k", keyword]
    start = time.perf_counter()
    try:
        if bare.is_bare():
            tests, log = call_forked(lambda: _pytest_here(args, str(folder.parents[1])), timeout)
        else:
            tests, log = _pytest_fresh(args, str(folder.parents[1]), timeout)
    except TimeoutError as exc:
        raise TimeoutError(f"the openreg tests did not finish within {timeout:g} s") from exc
    return OpenregReport(tests, time.perf_counter() - start, log)


_FRESH = """
import json, sys
from npu_lab.bringup.conformance import _pytest_here
tests, log = _pytest_here(json.loads(sys.argv[1]), sys.argv[2])
print("\\n" + json.dumps([tests, log]))
"""


def _pytest_fresh(args: list[str], root: str, timeout: float) -> tuple[dict[str, dict[str, str]], str]:
    """:func:`_pytest_here` in a new Python process (the full device): (the results, the output's end)."""
    import json
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "NPU_LAB_BARE"}
    try:
        proc = subprocess.run([sys.executable, "-c", _FRESH, json.dumps(args), root], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=root)
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(str(exc)) from exc
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines:
        raise RuntimeError(f"the openreg tests' process failed: {(proc.stderr.strip().splitlines() or [''])[-1]}")
    tests, log = json.loads(lines[-1])
    return tests, log


def _pytest_here(args: list[str], root: str) -> tuple[dict[str, dict[str, str]], str]:
    """pytest.main(args) with a :class:`Recorder`, its output kept: (the results, the output's end)."""
    import pytest

    from .._torch_private import device_test_bases_with_privateuse1
    from .openreg_plugin import Recorder

    if root not in sys.path:
        sys.path.insert(0, root)  # tests/openreg is a package of the repository: `tests.openreg.conftest`
    device_test_bases_with_privateuse1()  # op_db imported before npu_lab would leave test_opinfo.py empty
    recorder = Recorder()
    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        pytest.main(args, plugins=[recorder])
    text = log.getvalue()[-4000:]
    return recorder.results, text
