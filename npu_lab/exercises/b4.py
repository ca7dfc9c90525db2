"""Bring-up milestone 4: conformance, with tests nobody on your team wrote.

Three checks, on the kernels registered for ``npu`` now (milestones 1 to 3 loaded beside this one's):

* ``b4.opinfo`` - every float32 sample of PyTorch's OpInfo database for the operators of the track
  (:data:`npu_lab.bringup.conformance.TRACK_OPINFOS`, with the two this milestone adds, ``neg`` and
  ``index_add``), forward and backward, against the CPU under ``memcheck``; hidden: the same samples made
  non-contiguous, as PyTorch's ``test_noncontiguous_samples`` makes them;
* ``b4.harness`` - the kernels PyTorch's test harness itself runs on the device (``assertEqual`` compares on the
  device with ``eq``, ``abs``, ``sub``, ``isnan``, ``le``, ``bitwise_and``, ``all``...; tests draw their inputs
  with ``torch.randn`` and ``torch.rand``), each compared with the CPU *on the CPU*: a device whose ``eq`` says
  "equal" to everything would pass every test that trusts it;
* ``b4.openreg`` - the ported torch_openreg tests (``tests/openreg``: the operator, OpInfo and random-number
  files) on your device: no test may fail except for a kernel outside the track or for a reason the milestone
  names (:data:`OUTSIDE_TRACK`, :data:`EXPECTED_FAILURES`).
"""

from __future__ import annotations

import math

import torch

from ..bringup import conformance
from ..grading import device
from ..grading.device import OpCase, Property
from ..grading.registry import chapter, exercise
from ..grading.tester import STUB_MESSAGE, NotStarted, Tester
from . import bringup_checks
from .bringup_checks import TIMEOUT, randn

chapter("b4", "Bring-up 4: conformance with PyTorch's own tests", [
    "PyTorch's OpInfo database holds samples for every operator: edge cases nobody on your team thought of",
    "Strides, 0-d and empty tensors, and the forms ATen passes arguments in, are where kernels break",
    "PyTorch's test harness compares on the device: its comparison kernels must be right before any test means "
    "anything",
    "The ported torch_openreg tests run against your device from the notebook, and say what each failure needs",
])

#: Samples per OpInfo (a few OpInfos have hundreds; the first ones hold the edge cases) and, hidden, how many of
#: them are also run non-contiguous.
SAMPLES, NONCONTIGUOUS_SAMPLES = 40, 6

#: The kernels this milestone writes: until one of them is yours, its checks have not started.
B4_OPS = ["aten::neg.out", "aten::index_add.out"]
HARNESS_OPS = ["aten::eq.Tensor_out", "aten::abs.out", "aten::sub.out", "aten::normal_", "aten::uniform_",
               "aten::isnan", "aten::all.all_out", "aten::masked_select"]


def _started(ops: list[str]) -> None:
    bringup_checks.started(ops)


def _graded(t: Tester, cases: list[OpCase | Property]) -> None:
    outcomes = device.run_cases(cases, device.case_limit(TIMEOUT))
    failed = [o for o in outcomes if not o.passed]
    if failed and all(STUB_MESSAGE in (o.got + o.error) for o in failed):
        raise NotStarted("every case that fails meets a kernel that still raises NotImplementedError(\"YOUR CODE "
                         "HERE\")")
    device.record(t, outcomes)


# ---------------------------------------------------------------------------------------------
# b4.opinfo
# ---------------------------------------------------------------------------------------------

_HINTS = {
    "missing": "an operator on the way has no kernel of yours: register one (the name is above)",
    "error": "your kernel raised where the CPU computes a result: the sample above is the input, the line is yours",
    "wrong": "a value or a gradient differs from the CPU's for the sample above",
}


def _opinfo_property(name: str, noncontiguous: bool) -> Property:
    def test() -> str:
        from torch.testing._internal.common_methods_invocations import op_db

        from ..ops.conformance import opinfo_name
        from ..ops.sweep import check_op

        op = next(o for o in op_db if opinfo_name(o) == name)
        status = check_op(op, torch.float32, NONCONTIGUOUS_SAMPLES if noncontiguous else SAMPLES, True,
                          noncontiguous=noncontiguous)
        if status.status in ("native", "skipped"):
            return ""
        detail = " ".join(status.detail.split())[:300]  # assert_close's message, on one line
        text = f"{status.status} after {status.samples} samples: {detail}"
        hint = _HINTS.get(status.status, "")
        return text + (f"; sample: {status.sample}" if status.sample else "") + (f" ({hint})" if hint else "")

    kind = "non-contiguous samples" if noncontiguous else "samples"
    return Property(f"OpInfo {name}: its float32 {kind}, forward and backward", name, test,
                    "every sample as on the CPU", hidden=noncontiguous, blame=False,
                    hint=f"conformance.opinfo([{name!r}]{', noncontiguous=True' if noncontiguous else ''}) runs "
                         "these samples again in the notebook and shows the one that fails")


def opinfo_cases() -> list[Property]:
    return ([_opinfo_property(n, False) for n in conformance.TRACK_OPINFOS]
            + [_opinfo_property(n, True) for n in conformance.TRACK_OPINFOS])


@exercise("b4.opinfo", "PyTorch's OpInfo samples for every operator of the track, on your kernels", names=[],
          timeout=2 * TIMEOUT)
def _opinfo_check(t: Tester) -> None:
    _started(B4_OPS)
    _graded(t, opinfo_cases())


# ---------------------------------------------------------------------------------------------
# b4.harness
# ---------------------------------------------------------------------------------------------

def _ints(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(-3, 4, shape, generator=torch.Generator().manual_seed(seed))


def _strided_out(dtype: torch.dtype):
    """fn(a, b, op) writing into a transposed (non-contiguous) out of ``dtype``."""
    def fn(a, b, op):
        out = torch.empty(a.shape[::-1], dtype=dtype, device=a.device).t()
        return op(a, b, out=out)
    return fn


def _compare_cases() -> list[OpCase]:
    c = OpCase
    cases = []
    for name, op in [("eq", torch.eq), ("ne", torch.ne), ("lt", torch.lt), ("le", torch.le), ("gt", torch.gt),
                     ("ge", torch.ge)]:
        cases.append(c(f"{name} of two float tensors with equal and unequal elements", f"{name}.Tensor_out",
                       lambda: [torch.tensor([[1.0, 2.0, float("nan")], [4.0, -0.0, 6.0]]),
                                torch.tensor([[1.0, 3.0, float("nan")], [-4.0, 0.0, 6.0]])], op,
                       hint=f"{name} compares element by element and gives a bool tensor; NaN equals nothing, "
                            "-0.0 equals 0.0"))
    cases += [
        c("eq of a float tensor and a Python number", "eq.Scalar_out",
          lambda: [torch.tensor([[0.0, 1.0, -0.0], [2.0, 0.0, 3.0]])], lambda x: torch.eq(x, 0),
          hint="the number is wrapped as a 0-d tensor: it broadcasts to every element"),
        c("gt of int64 tensors, broadcast (3, 1) against (4,)", "gt.Tensor_out",
          lambda: [_ints(3, 1), _ints(4, seed=1)], torch.gt, hidden=True,
          hint="the operands broadcast to the result's shape, as in add"),
        c("le of an int64 and a float32 tensor: compared in their common dtype", "le.Tensor_out",
          lambda: [_ints(2, 3), randn(2, 3) * 3], torch.le, hidden=True,
          hint="torch.result_type(a, b) is the dtype the comparison happens in (int64 vs float32: float32)"),
        c("eq of bool tensors", "eq.Tensor_out", lambda: [_ints(5) > 0, _ints(5, seed=2) > 0], torch.eq,
          hidden=True,
          hint="eq compares any dtype, bool included, and writes a bool result"),
        c("ne into a transposed out", "ne.Tensor_out", lambda: [randn(3, 4).round(), randn(3, 4, seed=1).round()],
          lambda a, b: _strided_out(torch.bool)(a, b, torch.ne), hidden=True,
          hint="out= may be a view with any strides: write each element where out's strides say"),
        c("eq of empty tensors", "eq.Tensor_out", lambda: [randn(0, 3), randn(0, 3, seed=1)], torch.eq, hidden=True,
          hint="an empty comparison gives an empty bool tensor: the kernel must not fail"),
        c("eq resizes an empty out to the result's shape", "eq.Tensor_out", lambda: [randn(2, 3), randn(2, 3)],
          lambda a, b: torch.eq(a, b, out=torch.empty(0, dtype=torch.bool, device=a.device)), hidden=True,
          hint="an out= tensor of another shape is resized to the result's (an empty one silently)"),
        c("eq of shapes that do not broadcast raises RuntimeError", "eq.Tensor_out",
          lambda: [randn(2, 3), randn(4, 3)], torch.eq, hidden=True,
          hint="the shapes must broadcast: raise RuntimeError otherwise, as the CPU does"),
    ]
    return cases


def _arith_cases() -> list[OpCase]:
    c = OpCase
    return [
        c("abs of floats with negative zero and NaN", "abs.out",
          lambda: [torch.tensor([-1.5, -0.0, 2.0, float("nan"), float("-inf")])], torch.abs,
          hint="abs(-0.0) is 0.0 and abs(NaN) is NaN: np.abs does both"),
        c("abs of int64", "abs.out", lambda: [_ints(4, 3)], torch.abs, hidden=True,
          hint="abs keeps the input's dtype: int64 in, int64 out"),
        c("abs of a transposed input", "abs.out", lambda: [randn(3, 5)], torch.abs,
          layout=lambda x: [x.t()], hidden=True,
          hint="the input is a view: read it through its strides"),
        c("sub with alpha, broadcast", "sub.out", lambda: [randn(3, 4), randn(4, seed=1)],
          lambda a, b: torch.sub(a, b, alpha=2.5), hint="sub(a, b, alpha) = a - alpha * b"),
        c("sub of int64 tensors", "sub.out", lambda: [_ints(3, 4), _ints(3, 4, seed=1)], torch.sub, hidden=True,
          hint="sub keeps an integer dtype: compute in int64, not float"),
        c("sub of bool tensors raises RuntimeError", "sub.out", lambda: [_ints(3) > 0, _ints(3, seed=1) > 0],
          torch.sub, hidden=True, hint="the CPU refuses `-` on bool tensors (RuntimeError): so must the npu"),
        c("maximum and minimum, NaN propagates", "maximum.out",
          lambda: [torch.tensor([1.0, float("nan"), -2.0, 3.0]), torch.tensor([0.5, 1.0, float("nan"), 4.0])],
          lambda a, b: (torch.maximum(a, b), torch.minimum(a, b)),
          hint="maximum and minimum return NaN where either operand is NaN (np.maximum does, np.fmax does not)"),
        c("isnan of floats", "isnan", lambda: [torch.tensor([1.0, float("nan"), float("inf"), -0.0])], torch.isnan,
          hint="isnan is True exactly where x != x"),
        c("isnan of an int64 tensor: all False", "isnan", lambda: [_ints(3, 2)], torch.isnan, hidden=True,
          hint="an integer is never NaN: the result is all False, with the input's shape"),
        c("all of a bool tensor, a float tensor and an empty one", "all.all_out",
          lambda: [_ints(4, 3) > -3, randn(5), randn(0)],
          lambda a, b, e: (torch.all(a), torch.all(b), torch.all(e)),
          hint="all() is True when no element is zero (or False); an empty tensor's all() is True"),
        c("ceil and true division (what printing a float tensor computes)", "ceil.out",
          lambda: [torch.tensor([-1.5, 0.2, 3.0, 2.7]), torch.tensor([2.0, 0.0, -4.0, 0.5])],
          lambda a, b: (torch.ceil(a), a / b), hint="x / 0 is inf (or nan for 0 / 0), as on the CPU"),
        c("division of int64 tensors is true division (a float result)", "div.out",
          lambda: [_ints(3, 4), _ints(3, 4, seed=1).abs() + 1], torch.div, hidden=True,
          hint="torch.div of two int64 tensors returns float32: compute in the result's dtype"),
        c("printing a float tensor on the device", "masked_select", lambda: [randn(3, 4) * 100],
          lambda x: torch.tensor([ord(ch) for ch in repr(x).split(", device")[0].rstrip(")")]).to(x.device),
          hint="print(tensor) computes on the device: masked_select, isfinite, ne, abs, min, max, ceil, div..."),
        c("min() and max() of a whole tensor", "min", lambda: [randn(4, 5)], lambda x: (x.min(), x.max()),
          hint="min() and max() without a dim reduce every element to a 0-d tensor"),
        c("max() with a NaN is NaN", "max", lambda: [torch.tensor([1.0, float("nan"), 3.0])], torch.max,
          hidden=True, hint="a NaN anywhere makes min() and max() NaN (np.max does this, np.nanmax does not)"),
        c("min() of an empty tensor raises RuntimeError", "min", lambda: [randn(0, 3)], torch.min, hidden=True,
          hint="an empty tensor has no minimum: the CPU raises RuntimeError"),
        c("max along a dimension: values and the index of the first maximum", "max.dim_max",
          lambda: [torch.tensor([[1.0, 3.0, 3.0], [float("nan"), 0.0, 2.0], [-1.0, -1.0, -5.0]])],
          lambda x: tuple(torch.max(x, 1)), hint="torch.max(x, dim) returns (values, indices): the first maximum's "
          "index, and NaN is the maximum of any row that holds one"),
        c("max along dimension 0, keepdim", "max.dim_max", lambda: [randn(4, 3)],
          lambda x: tuple(torch.max(x, 0, keepdim=True)), hidden=True,
          hint="max(dim) returns the values and the index of the first maximum, with keepdim's size-1 dimension"),
        c("assigning through a boolean mask (x[mask] = 0)", "_index_put_impl_",
          lambda: [randn(3, 4), _ints(3, 4) > 0], _masked_assign,
          hint="x[mask] = v is index_put_ with one bool mask: write v where the mask is True, in place"),
        c("masked_select: the result's size depends on the mask's values", "masked_select",
          lambda: [randn(3, 4), _ints(3, 4) > 0], torch.masked_select,
          hint="the result is 1-D, the elements where the mask is True in row-major order"),
        c("masked_select with a mask broadcast over rows", "masked_select", lambda: [randn(3, 4), _ints(4) > 0],
          torch.masked_select, hidden=True, hint="self and mask broadcast against each other first"),
        c("bitwise_and and bitwise_or of bool and int64 tensors", "bitwise_and.Tensor_out",
          lambda: [_ints(6) > 0, _ints(6, seed=1) > 0, _ints(6), _ints(6, seed=3)],
          lambda a, b, x, y: (a & b, a | b, x & y, x | y), hidden=True,
          hint="bitwise operators work bit by bit on integers and bools, never on floats"),
        c("fill_ of a float16 and an int64 tensor", "fill_.Scalar", lambda: [randn(3, 2).half(), _ints(4)],
          lambda h, i: (h.clone().fill_(1.5), i.clone().fill_(7)),
          hint="numba has no float16: a numba fill kernel fails for float16 tensors; write the value another way "
               "(NumPy has float16)"),
        c("assert_close on npu tensors: equal ones pass, different ones raise", "eq.Tensor_out",
          lambda: [randn(4, 3)], _assert_close_verdicts,
          hint="torch.testing.assert_close compares on the device with your eq, abs, sub, le, isfinite..."),
    ]


def _masked_assign(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[mask] = 0.0
    return y


def _assert_close_verdicts(x: torch.Tensor) -> torch.Tensor:
    """1 where assert_close says what it should (equal: no error; off by 1e-2: AssertionError)."""
    verdicts = []
    for other, should_pass in ((x.clone(), True), (x + 1e-2, False), (x.clone().neg(), False)):
        try:
            torch.testing.assert_close(x, other)
            verdicts.append(1.0 if should_pass else 0.0)
        except AssertionError:
            verdicts.append(0.0 if should_pass else 1.0)
    return torch.tensor(verdicts).to(x.device)


def _random_stats() -> str:
    """uniform_ and normal_: range, mean and spread; the same seed gives the same draw; two draws differ."""
    # torch.npu.manual_seed, not torch.manual_seed: the case runs in a forked copy of the notebook, where
    # torch.manual_seed leaves a device alone (as CUDA's after a fork); in the notebook it seeds the device too
    torch.npu.manual_seed(3)
    u = torch.empty(20000, device="npu").uniform_(-2.0, 3.0).cpu()
    if not (u.min() >= -2.0 and u.max() < 3.0):
        return f"uniform_(-2, 3) drew values outside [-2, 3): min {u.min().item():.3g}, max {u.max().item():.3g}"
    if abs(u.mean().item() - 0.5) > 0.06:
        return f"uniform_(-2, 3)'s mean is {u.mean().item():.3f}, expected about 0.5"
    n = torch.empty(100, 200, device="npu").normal_(1.0, 2.0).cpu()
    if abs(n.mean().item() - 1.0) > 0.06 or abs(n.std().item() - 2.0) > 0.06:
        return f"normal_(1, 2): mean {n.mean().item():.3f}, std {n.std().item():.3f}, expected about 1 and 2"
    skew = ((n - n.mean()) ** 3).mean().item() / n.std().item() ** 3
    if abs(skew) > 0.1 or abs((n > 1.0).float().mean().item() - 0.5) > 0.02:
        return "normal_'s values are not symmetric around the mean: not a normal distribution"
    torch.npu.manual_seed(3)
    again = torch.empty(20000, device="npu").uniform_(-2.0, 3.0).cpu()
    if not torch.equal(again, u):
        return "the same torch.manual_seed gave a different uniform_ draw: draw from the device's generator"
    if torch.equal(torch.empty(20000, device="npu").uniform_(-2.0, 3.0).cpu(), u):
        return "a second uniform_ after the same seed repeated the first draw: the generator's offset must move"
    g = torch.Generator(device="npu").manual_seed(11)
    a = torch.empty(50, device="npu").normal_(generator=g).cpu()
    g.manual_seed(11)
    if not torch.equal(torch.empty(50, device="npu").normal_(generator=g).cpu(), a):
        return "normal_(generator=g) ignores the generator it is given"
    rows = torch.empty(64, 64, device="npu").t().normal_().cpu()
    if math.isclose(rows.std().item(), 0.0, abs_tol=1e-3) or rows.isnan().any():
        return "normal_ of a transposed tensor left elements unwritten"
    return ""


def harness_cases() -> list[OpCase | Property]:
    return _compare_cases() + _arith_cases() + [
        Property("uniform_ and normal_ from the device's generator: range, mean and spread, reproducible",
                 "normal_", _random_stats, "the distributions asked for, repeatable under torch.manual_seed",
                 hint="a uniform in [0, 1) is (bits >> 11) * 2**-53 of bringup.random_bits; a normal from two "
                      "uniforms (Box-Muller: sqrt(-2 log u1) cos(2 pi u2), with u1 in (0, 1])"),
    ]


@exercise("b4.harness", "The kernels PyTorch's test harness runs on your device (comparisons, abs, randn...)",
          names=[], timeout=TIMEOUT)
def _harness_check(t: Tester) -> None:
    _started(HARNESS_OPS)
    _graded(t, harness_cases())


# ---------------------------------------------------------------------------------------------
# b4.openreg
# ---------------------------------------------------------------------------------------------

#: Operators some openreg tests need that the track does not ask for: a test that fails for want of one of these
#: is not held against you.
OUTSIDE_TRACK = {
    "aten::quantize_per_tensor": "quantized tensors",
    "aten::_fused_sdp_choice": "a fused attention kernel (the track's attention is bmm + softmax)",
    "aten::triu_indices": "triu_indices",
    "aten::index.Tensor_out": "advanced indexing",
}
#: Tests that fail on the track's bare device for a reason the milestone knows, and why.
EXPECTED_FAILURES = {
    "test_ops.py::TestSDPA::test_scaled_dot_product_fused_attention_overrideable_backward":
        "a fused attention kernel of the backend's own (_scaled_dot_product_fused_attention_overrideable)",
}


@exercise("b4.openreg", "The ported torch_openreg tests pass on your device", names=[], timeout=2 * TIMEOUT)
def _openreg_check(t: Tester) -> None:
    _started(HARNESS_OPS)
    limit = device.case_limit(TIMEOUT)
    try:
        report = conformance.openreg_tests(timeout=limit)
    except TimeoutError:
        t.expect("the openreg tests finish", False, expected=f"within {limit:g} s", got="they did not",
                 hint="a kernel of yours never returned (or is very slow) in one of the tests")
        return
    except Exception as exc:  # noqa: BLE001 - a crash of the forked pytest: say what it was
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        t.expect("the openreg tests run", False, expected="pytest runs them", got=f"{type(exc).__name__}: {first}",
                 hint="the process that ran the tests died: a kernel of yours may have crashed it")
        return
    counts = report.counts()
    t.expect("the openreg tests ran", len(report.tests) >= 80, expected="at least 80 tests collected",
             got=f"{len(report.tests)} ({report.summary()})",
             hint="the test files are in tests/openreg of the lab's repository")
    stuck: dict[str, list[str]] = {}
    for test, r in sorted(report.tests.items()):
        if r["outcome"] == "missing" and r["detail"] not in OUTSIDE_TRACK:
            stuck.setdefault(r["detail"], []).append(test)
    for op, tests in sorted(stuck.items()):
        t.expect(f"no test stops for want of {op}", False, expected="a kernel of yours",
                 got=f"{len(tests)} tests stop there, e.g. {tests[0]}",
                 hint="register a kernel for it (the tests need it to make or to compare their tensors)")
    failed = {k: v for k, v in report.failed().items() if k not in EXPECTED_FAILURES}
    stubs = [k for k, v in failed.items() if STUB_MESSAGE in v]
    if stubs and len(stubs) == len(failed) and not stuck:
        raise NotStarted("the openreg tests that fail meet kernels that still raise NotImplementedError(\"YOUR CODE "
                         "HERE\")")
    for test, why in failed.items():
        t.expect(f"{test} passes", False, expected="passed", got=why[:300],
                 hint="run it yourself: conformance.openreg_tests(keyword=...) with part of its name")
    t.expect("tests passed", counts["passed"] >= 55 and not failed and not stuck, expected="every test but those "
             "outside the track", got=report.summary())
