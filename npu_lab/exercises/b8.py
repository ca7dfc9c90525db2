"""Bring-up milestone 8: the debugging clinic. Six broken pieces of a backend (:mod:`npu_lab.bringup.clinic`),
each found with one of the lab's tools and fixed by the learner.

Each check grades the learner's fixed function: the check registers it for ``npu`` for as long as it grades
(over the clinic's broken kernel, which comes back afterwards), so the answer is the function, and a stub still
raising ``NotImplementedError`` is "not started".

* ``b8.strides`` - ``abs_out`` on transposed, sliced, broadcast (stride 0) and permuted inputs;
* ``b8.bounds`` - ``exp_out`` under ``memcheck``: no write outside ``out``'s storage, for any size;
* ``b8.fake`` - ``row_scale_fake``, the fake implementation of ``clinic::row_scale``: PyTorch's ``opcheck``
  (the fake's shapes, dtypes, strides and device against the kernel's), then ``torch.compile`` with
  ``fullgraph=True`` and two batch sizes;
* ``b8.copies`` - ``addmm_out``: right, and into a contiguous ``out`` with no allocation and no copy;
* ``b8.desync`` - ``average_metrics`` on two and three ranks whose metrics arrive in different orders;
* ``b8.module`` - ``register_device(name)`` run in a fresh Python process: a factory call reaches the
  dispatcher instead of failing with "No module named 'torch.<name>'", for two names;
* ``b8.race`` - ``scaled_residual(x, w)`` under ``npu_lab.streamcheck()``: the product still on a side stream,
  the default stream waiting for it on the device (no device-wide synchronize), the CPU's result;
* ``b8.factory`` - ``empty_strided``, registered while the runtime's own is withheld (``clinic.withheld()``):
  ``.to("npu")``, ``empty_like`` and ``empty_strided`` itself give the CPU's sizes, strides, dtype and storage size
  on the device asked for (gaps, stride 0, no elements, 0-d, ``npu:1``, a negative size).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator

import torch

from ..grading.device import OpCase, Property, case_limit
from ..grading.registry import chapter, exercise
from ..grading.tester import STUB_MESSAGE, NotStarted, Tester
from .bringup_checks import TIMEOUT, grade_cases, randn

chapter("b8", "Bring-up 8: the debugging clinic", [
    "A kernel reads its inputs through their strides: a transposed or expanded input is not contiguous",
    "memcheck's guard bytes catch a write past the end of a tensor's storage",
    "torch.compile runs an operator on fake tensors first: a custom operator needs a fake implementation",
    "An out= kernel writes into out: a temporary and a copy cost an allocation and the bytes twice",
    "Every rank must issue the same collectives in the same order; equal sizes hide a wrong order",
    "A renamed PrivateUse1 backend needs its device module registered before any device API runs",
    "A stream that reads another stream's result must wait for it on the device: wait_stream or an event",
    "tensor.to(device), empty_like and compiled code create tensors with empty_strided, not empty",
])


@contextlib.contextmanager
def _registered(op: str, fn: Callable) -> Iterator[None]:
    """``fn`` as the npu kernel of ``op`` (a learner library of the check's), for the duration."""
    from .. import bringup

    bringup.library("b8-check").impl(op, fn, "PrivateUse1")
    try:
        yield
    finally:
        bringup.forget("b8-check")


def _require_function(fn: object, name: str) -> None:
    from ..device import bare

    bare.require_bare("the bring-up checks")
    if not callable(fn):
        raise NotStarted(f"define {name}")


# ---------------------------------------------------------------------------------------------
# b8.strides
# ---------------------------------------------------------------------------------------------

def strides_cases() -> list[OpCase]:
    c = OpCase
    hint = "read the input through its strides: device_array(self) is a view with the tensor's own strides"
    return [
        c("abs of a contiguous matrix", "abs", lambda: [randn(3, 4)], torch.abs,
          hint="out[i] = |self[i]| for every element, written into out's own memory (device_array(out))"),
        c("abs of a transposed matrix", "abs", lambda: [randn(4, 3, seed=1)], torch.abs, layout=lambda x: [x.t()],
          hint=hint),
        c("abs of a slice with a step", "abs", lambda: [randn(4, 10, seed=2)], torch.abs,
          layout=lambda x: [x[:, 1::3]], hint=hint),
        c("abs of a broadcast row (stride 0)", "abs", lambda: [randn(1, 5, seed=3)], torch.abs,
          layout=lambda x: [x.expand(4, 5)], hidden=True, hint="an expanded tensor repeats one row: its stride is 0"),
        c("abs of a permuted 3-d tensor", "abs", lambda: [randn(2, 3, 4, seed=4)], torch.abs,
          layout=lambda x: [x.permute(2, 0, 1)], hidden=True, hint=hint),
        c("abs of a view that starts inside its storage", "abs", lambda: [randn(6, 5, seed=5)], torch.abs,
          layout=lambda x: [x[2:, 1:]], hidden=True,
          hint="a view's first element is at its storage offset, not at the start of the storage"),
        c("abs of int64", "abs", lambda: [torch.arange(-6, 6).reshape(3, 4)], torch.abs, hidden=True,
          hint="abs keeps the input's dtype: int64 in, int64 out"),
        c("abs of an empty tensor", "abs", lambda: [torch.empty(0, 3)], torch.abs, hidden=True,
          hint="an empty tensor has no elements: the kernel must write nothing and must not fail"),
    ]


@exercise("b8.strides", "Clinic 1: abs.out that ignores strides", names=["abs_out"], timeout=TIMEOUT)
def _strides(t: Tester, abs_out) -> None:
    _require_function(abs_out, "abs_out(self, *, out)")
    with _registered("abs.out", abs_out):
        grade_cases(t, strides_cases(), ["aten::abs"])


# ---------------------------------------------------------------------------------------------
# b8.bounds
# ---------------------------------------------------------------------------------------------

def bounds_cases() -> list[OpCase]:
    c = OpCase
    hint = "memcheck found a write outside out's storage: a loop must stop at the last element of out"
    return [
        c("exp of 5 numbers", "exp", lambda: [randn(5)], torch.exp, hint=hint),
        c("exp of a (3, 4) matrix", "exp", lambda: [randn(3, 4, seed=1)], torch.exp, hint=hint),
        c("exp of one number", "exp", lambda: [randn(1, seed=2)], torch.exp, hidden=True, hint=hint),
        c("exp of 1000 numbers", "exp", lambda: [randn(1000, seed=3)], torch.exp, hidden=True, hint=hint),
        c("exp of a (2, 3, 4) tensor", "exp", lambda: [randn(2, 3, 4, seed=4)], torch.exp, hidden=True, hint=hint),
        c("exp of -inf, 0 and 80", "exp", lambda: [torch.tensor([float("-inf"), 0.0, 80.0])], torch.exp,
          hidden=True,
          hint="exp(-inf) is 0 and exp(80) is about 5.5e34, still below float32's largest number: np.exp gives "
               "both"),
        c("exp of an empty tensor", "exp", lambda: [torch.empty(0)], torch.exp, hidden=True,
          hint="an empty tensor has no elements: the kernel must write nothing and must not fail"),
    ]


@exercise("b8.bounds", "Clinic 2: exp.out that writes past the end", names=["exp_out"], timeout=TIMEOUT)
def _bounds(t: Tester, exp_out) -> None:
    _require_function(exp_out, "exp_out(self, *, out)")
    with _registered("exp.out", exp_out):
        grade_cases(t, bounds_cases(), ["aten::exp"])


# ---------------------------------------------------------------------------------------------
# b8.fake
# ---------------------------------------------------------------------------------------------

def _fake_inputs() -> list[tuple[str, Callable[[], torch.Tensor], bool]]:
    return [
        ("a (4, 8) float32 matrix", lambda: randn(4, 8), False),
        ("a (2, 3, 5) tensor", lambda: randn(2, 3, 5, seed=1), False),
        ("a transposed (6, 4) matrix (the kernel returns a contiguous result)", lambda: randn(4, 6, seed=2).t(),
         False),
        ("a float64 matrix", lambda: randn(3, 4, seed=3).double(), True),
        ("a matrix with no rows", lambda: torch.empty(0, 4), True),
    ]


def _opcheck_case(t: Tester, what: str, x_cpu: torch.Tensor, hidden: bool) -> bool:
    x = x_cpu.to("npu")
    try:
        torch.library.opcheck(torch.ops.clinic.row_scale.default, (x, 1e-6), test_utils=("test_faketensor",))
    except Exception as exc:  # noqa: BLE001 - opcheck's report is the feedback
        text = str(exc)
        if STUB_MESSAGE in text or STUB_MESSAGE in repr(exc.__cause__):
            raise NotStarted("row_scale_fake still raises NotImplementedError(\"YOUR CODE HERE\")") from None
        first = next((line for line in text.splitlines() if line.strip()), type(exc).__name__)
        t.expect(f"opcheck on {what}", False, expected="the fake's output matches the kernel's in shape, dtype, "
                 "strides and device", got=first[:300], hidden=hidden,
                 hint="a fake implementation returns a new tensor on x's device with exactly the metadata the "
                      "kernel's result has (here: x's shape and dtype, contiguous), and reads no data")
        return False
    t.expect(f"opcheck on {what}", True, hidden=hidden)
    return True


@exercise("b8.fake", "Clinic 3: a custom operator without a fake implementation", names=["row_scale_fake"],
          timeout=TIMEOUT)
def _fake(t: Tester, row_scale_fake) -> None:
    from ..bringup import clinic

    _require_function(row_scale_fake, "row_scale_fake(x, eps)")
    clinic.install("fake")
    lib = torch.library.Library("clinic", "FRAGMENT")
    try:
        torch.library.register_fake("clinic::row_scale", row_scale_fake, lib=lib, allow_override=True)
        ok = all([_opcheck_case(t, what, make(), hidden) for what, make, hidden in _fake_inputs()])
        x = randn(3, 4).to("npu")
        try:
            fake = row_scale_fake(x, 1e-6)
        except Exception:  # noqa: BLE001 - opcheck above reported it
            fake = None
        fresh = isinstance(fake, torch.Tensor) and fake is not x and (
            not x.numel() or fake.untyped_storage().data_ptr() != x.untyped_storage().data_ptr())
        t.expect("the fake returns a new tensor, not its input", fresh,
                 hint="the kernel's result is a new tensor (the schema says so: no alias annotation): return "
                      "x.new_empty(...), never x itself or a view of it")
        if not (ok and fresh):
            return
        torch._dynamo.reset()
        compiled = torch.compile(lambda x: torch.ops.clinic.row_scale(x, 1e-6), backend="eager", fullgraph=True)
        worst = 0.0
        for rows in (4, 7):  # a second batch size: a recompile with a symbolic size
            x = randn(rows, 8, seed=rows)
            got = compiled(x.to("npu")).cpu()
            worst = max(worst, float((got - clinic.row_scale_reference(x, 1e-6)).abs().max()))
        t.expect("torch.compile(fullgraph=True) runs row_scale for batches of 4 and 7 rows", worst <= 1e-5,
                 expected="the eager result", got="equal" if worst <= 1e-5 else f"differs by {worst:.3g}")
    finally:
        lib._destroy()
        torch._dynamo.reset()


# ---------------------------------------------------------------------------------------------
# b8.copies
# ---------------------------------------------------------------------------------------------

def _no_copy_test(bias_shape: tuple[int, ...]) -> Callable[[], str]:
    def test() -> str:
        from .. import profile

        b, m1, m2 = randn(*bias_shape).to("npu"), randn(6, 5, seed=1).to("npu"), randn(5, 4, seed=2).to("npu")
        out = torch.empty(6, 4, device="npu")
        before = torch.npu.memory_stats()["allocation.all.allocated"]
        with profile() as prof:
            torch.addmm(b, m1, m2, out=out)
        allocations = torch.npu.memory_stats()["allocation.all.allocated"] - before
        copies = sum(k.kind == "copy" for k in prof.kernels)
        want = torch.addmm(b.cpu(), m1.cpu(), m2.cpu())
        if float((out.cpu() - want).abs().max()) > 1e-4:
            return "the result differs from the CPU's"
        if allocations or copies:
            return f"{allocations} allocation(s) and {copies} copy(ies) in one call"
        return ""

    return test


def copies_cases() -> list[OpCase | Property]:
    c = OpCase
    return [
        c("addmm(bias, a, b)", "addmm", lambda: [randn(4), randn(6, 5, seed=1), randn(5, 4, seed=2)], torch.addmm,
          hint="out = beta * self + alpha * (mat1 @ mat2), written straight into out's memory"),
        c("addmm with beta=0.5, alpha=2", "addmm", lambda: [randn(6, 4), randn(6, 5, seed=1), randn(5, 4, seed=2)],
          lambda b, x, y: torch.addmm(b, x, y, beta=0.5, alpha=2.0),
          hint="out = beta * self + alpha * (mat1 @ mat2): both numbers scale their terms"),
        c("addmm with beta=0 ignores the bias (even NaN)", "addmm",
          lambda: [torch.full((4,), float("nan")), randn(6, 5, seed=1), randn(5, 4, seed=2)],
          lambda b, x, y: torch.addmm(b, x, y, beta=0), hidden=True, hint="beta=0: the bias is not read at all"),
        c("addmm into a transposed out", "addmm", lambda: [randn(4), randn(6, 5, seed=1), randn(5, 4, seed=2)],
          lambda b, x, y: torch.addmm(b, x, y, out=torch.empty(4, 6, device=x.device).t()), hidden=True,
          hint="out may be a view that is not contiguous: write through its strides (or copy into it, there only)"),
        Property("addmm into a contiguous out: no allocation, no copy", "addmm", _no_copy_test((4,)),
                 "0 allocations and 0 copies for one call",
                 hint="compute straight into out (device_array(out) is out's memory): a temporary costs an "
                      "allocation, and its copy moves the result's bytes a second time", blame=False),
        Property("the same with a (6, 4) bias", "addmm", _no_copy_test((6, 4)), "0 allocations and 0 copies",
                 hidden=True, hint="compute straight into out", blame=False),
    ]


@exercise("b8.copies", "Clinic 4: addmm.out that allocates and copies", names=["addmm_out"], timeout=TIMEOUT)
def _copies(t: Tester, addmm_out) -> None:
    _require_function(addmm_out, "addmm_out(self, mat1, mat2, *, beta=1, alpha=1, out)")
    with _registered("addmm.out", addmm_out):
        grade_cases(t, copies_cases(), ["aten::addmm"])


# ---------------------------------------------------------------------------------------------
# b8.desync
# ---------------------------------------------------------------------------------------------

METRICS = ("loss", "accuracy", "tokens")


def _desync_body(average_metrics: Callable) -> Callable[[int, int], dict]:
    def body(rank: int, world: int) -> dict:
        from ..device.memcheck import memcheck

        device = torch.device("npu", rank % torch.npu.device_count())
        torch.npu.set_device(device)
        values = {name: torch.tensor([10.0 ** i * (rank + 1)]).to(device) for i, name in enumerate(METRICS)}
        order = METRICS[rank % len(METRICS):] + METRICS[:rank % len(METRICS)]  # each rank its own order
        metrics = {name: values[name] for name in order}
        kept = {k: v.cpu() for k, v in metrics.items()}
        with memcheck():
            got = average_metrics(metrics)
        if not isinstance(got, dict):
            return {"kind": type(got).__name__}
        return {"kind": "dict", "got": {k: v.detach().cpu() for k, v in got.items() if isinstance(v, torch.Tensor)},
                "keys": sorted(got), "inputs": all(torch.equal(kept[k], metrics[k].cpu()) for k in kept)}

    return body


@exercise("b8.desync", "Clinic 5: ranks that all-reduce in different orders", names=["average_metrics"],
          timeout=TIMEOUT)
def _desync(t: Tester, average_metrics) -> None:
    from ..distributed.forked_ranks import run_ranks
    from ..grading import forked

    _require_function(average_metrics, "average_metrics(metrics)")
    for world, hidden in ((2, False), (3, True)):
        title = f"{world} ranks:"
        limit = case_limit(TIMEOUT / 3)
        try:
            got = run_ranks(_desync_body(average_metrics), world, timeout=limit,
                            collective_timeout=min(20.0, limit))
        except forked.ChildTimeout:
            t.expect(f"{title} every rank finishes", False, got=f"a rank did not finish within {limit:g} s",
                     hidden=hidden,
                     hint="every rank must call the same collectives: a rank waiting for one its peers skip hangs")
            return
        except Exception as exc:  # noqa: BLE001 - the learner's code raised on a rank
            text = forked.trimmed(exc) or str(exc)
            if STUB_MESSAGE in text:
                raise NotStarted("average_metrics still raises NotImplementedError(\"YOUR CODE HERE\")") from None
            t.expect(f"{title} average_metrics runs on every rank", False, expected="no error",
                     got=f"{type(exc).__name__.removesuffix('FromChild')}: {str(exc).splitlines()[0][:200]}",
                     hidden=hidden)
            return
        want = {name: 10.0 ** i * (world + 1) / 2 for i, name in enumerate(METRICS)}
        shapes_ok = all(r["kind"] == "dict" and r["keys"] == sorted(METRICS) for r in got)
        t.expect(f"{title} every rank returns a dict of the same metrics", shapes_ok, hidden=hidden,
                 expected=", ".join(sorted(METRICS)), got="; ".join(
                     ", ".join(r["keys"]) if r["kind"] == "dict" else r["kind"] for r in got))
        if not shapes_ok:
            continue
        wrong = [(rank, name, float(r["got"][name].reshape(-1)[0])) for rank, r in enumerate(got)
                 for name in METRICS if abs(float(r["got"][name].reshape(-1)[0]) - want[name]) > 1e-4 * want[name]]
        t.expect(f"{title} each metric is its mean over the ranks", not wrong, hidden=hidden,
                 expected=", ".join(f"{k} {v:g}" for k, v in want.items()),
                 got="all right" if not wrong else ", ".join(f"rank {r}: {n} {v:g}" for r, n, v in wrong[:3]),
                 hint="the metrics arrive in a different order on each rank: all-reduce them in an order every rank "
                      "agrees on (sorted by name), or as one tensor in that order")
        t.expect(f"{title} the metrics passed in are left as they were", all(r["inputs"] for r in got),
                 hidden=hidden, hint="all-reduce a copy: the caller may still use its own tensors")


# ---------------------------------------------------------------------------------------------
# b8.module
# ---------------------------------------------------------------------------------------------

@exercise("b8.module", "Clinic 6: No module named 'torch.privateuseone'", names=["register_device"],
          timeout=TIMEOUT)
def _module(t: Tester, register_device) -> None:
    from ..bringup import clinic

    _require_function(register_device, "register_device(name)")
    try:
        inspect.getsource(register_device)
    except (OSError, TypeError):
        t.expect("register_device's source can be read (it runs in a fresh process)", False,
                 hint="define register_device with def in a cell of its own")
        return
    for name, hidden in (("toy", False), ("gizmo", True)):
        r = clinic.fresh_process(register_device, name, timeout=case_limit(60.0))
        if "crashed" in r:
            t.expect(f"a fresh process runs register_device({name!r})", False, got=r["crashed"], hidden=hidden)
            if "did not finish" in r["crashed"]:
                break  # the next name would only wait as long
            continue
        if STUB_MESSAGE in r["registered"]:
            raise NotStarted("register_device still raises NotImplementedError(\"YOUR CODE HERE\")")
        t.expect(f"register_device({name!r}) runs in a fresh process", r["registered"] == "ok", got=r["registered"],
                 hidden=hidden, hint="rename the backend first: the device module is registered under the new name")
        reached = r["empty"].startswith("NotImplementedError: Could not run 'aten::empty.memory_format'")
        t.expect(f"torch.empty(2, device={name!r}) reaches the dispatcher", reached, hidden=hidden,
                 expected=f"NotImplementedError: Could not run 'aten::empty.memory_format' ... '{name}' backend "
                          "(no kernel yet: that is the next step)",
                 got=r["empty"][:200],
                 hint="before a factory call runs, PyTorch imports torch.<name>, the device module: register one with "
                      "torch._register_device_module(name, module)")
        t.expect(f"torch.{name}.is_available() and device_count() answer", r["available"] == ["bool", "int"],
                 hidden=hidden, expected="a bool and an int", got=str(r["available"])[:200],
                 hint="the device module answers at least is_available() and device_count(), as torch.cuda does")
        t.expect(f"tensors have is_{name} and .{name}()", r["methods"], hidden=hidden,
                 hint="torch.utils.generate_methods_for_privateuse1_backend() adds them for the renamed backend")


# ---------------------------------------------------------------------------------------------
# b8.race
# ---------------------------------------------------------------------------------------------

def _race_case(fn: Callable, what: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...], busy: bool = False,
               hidden: bool = False) -> Property:
    def test() -> str:
        from ..device.streamcheck import StreamRaceError, streamcheck
        from ..profiler import profile

        x, w = randn(*x_shape, seed=1), randn(*w_shape, seed=2)
        xn, wn = x.to("npu"), w.to("npu")
        if busy:  # the default stream has work queued: a side stream that does not wait runs ahead of it
            big = torch.ones(256, 256).to("npu")
            for _ in range(3):
                big = big * 1.0
        try:
            with streamcheck(), profile() as prof:
                got = fn(xn, wn)
                # the caller reads the result on its stream: a result still being written elsewhere races too
                cpu = got.cpu() if isinstance(got, torch.Tensor) else None
        except StreamRaceError as exc:
            return f"StreamRaceError: {str(exc).split('. Make the stream')[0]}"
        if cpu is None:
            return f"returned {type(got).__name__}, not a tensor"
        syncs = sorted({h.name for h in prof.host if h.kind == "sync" and "ynchronize" in h.name})
        if syncs:
            return f"the host waits for the device ({', '.join(syncs)}): wait on the device, stream for stream"
        if not any(k.kind == "kernel" and k.stream != 0 for k in prof.kernels):
            return "no kernel ran on a side stream: keep the product on its own stream (the overlap is the point)"
        want = x * w + x
        if cpu.shape != want.shape or not torch.allclose(cpu, want, rtol=1e-5, atol=1e-6):
            return f"the result differs from x * w + x on the CPU (shape {tuple(cpu.shape)})"
        return ""

    return Property(f"scaled_residual, x {x_shape}, w {w_shape}: {what}", "scaled_residual", test,
                    "x * w + x, the product on a side stream, no race under streamcheck, no device-wide sync",
                    hidden=hidden, blame=False,
                    hint="before the default stream reads y, make it wait for the side stream: "
                         "torch.npu.current_stream().wait_stream(side), or an event recorded on side after the "
                         "product and waited for by the current stream")


def race_cases(fn: Callable) -> list[Property]:
    return [
        _race_case(fn, "same shapes", (64, 32), (64, 32)),
        _race_case(fn, "w broadcast over the rows", (48, 16), (16,)),
        _race_case(fn, "the default stream busy before the call", (128, 128), (128, 128), busy=True, hidden=True),
        _race_case(fn, "one element", (1,), (1,), hidden=True),
    ]


@exercise("b8.race", "Clinic 7: a side stream's result read without waiting", names=["scaled_residual"],
          timeout=TIMEOUT)
def _race(t: Tester, scaled_residual) -> None:
    from ..bringup.library import is_stub
    from ..grading import device

    _require_function(scaled_residual, "scaled_residual(x, w)")
    if is_stub(scaled_residual):
        raise NotStarted("scaled_residual still raises NotImplementedError(\"YOUR CODE HERE\")")
    device.record(t, device.run_cases(race_cases(scaled_residual), case_limit(TIMEOUT)))


# ---------------------------------------------------------------------------------------------
# b8.factory
# ---------------------------------------------------------------------------------------------

def _storage_bytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


def _same_layout(got: torch.Tensor, want: torch.Tensor, device: str) -> str:
    """What differs between an npu tensor and the CPU's tensor of the same call ("" if nothing does)."""
    if not isinstance(got, torch.Tensor):
        return f"returned {type(got).__name__}, not a tensor"
    wrong = []
    if str(got.device) != device:
        wrong.append(f"device {got.device}, not {device}")
    if got.dtype != want.dtype:
        wrong.append(f"dtype {got.dtype}, not {want.dtype}")
    if tuple(got.shape) != tuple(want.shape):
        wrong.append(f"shape {tuple(got.shape)}, not {tuple(want.shape)}")
    elif got.numel() and got.stride() != want.stride():
        wrong.append(f"strides {got.stride()}, not {want.stride()}")
    if got.storage_offset() != want.storage_offset():
        wrong.append(f"storage offset {got.storage_offset()}, not {want.storage_offset()}")
    if _storage_bytes(got) != _storage_bytes(want):
        wrong.append(f"a storage of {_storage_bytes(got)} bytes, where the CPU's has {_storage_bytes(want)}")
    return "; ".join(wrong)


def _factory_case(empty_strided: Callable, what: str, run: Callable[[], str], hidden: bool = False,
                  hint: str = "") -> Property:
    def test() -> str:
        from .. import bringup
        from ..bringup import clinic

        with clinic.withheld():
            bringup.library("b8-factory").impl("empty_strided", empty_strided, "PrivateUse1")
            try:
                return run()
            finally:
                bringup.forget("b8-factory")

    return Property(what, "empty_strided", test, "what the CPU gives for the same call, on the npu device",
                    hidden=hidden, blame=False,
                    hint=hint or "empty_strided(size, stride, dtype, layout, device, pin_memory) returns an "
                                 "uninitialised tensor on `device` with exactly these sizes and strides")


def _direct(size: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype | None = None,
            device: str = "npu:0") -> Callable[[], str]:
    def run() -> str:
        got = torch.empty_strided(size, stride, dtype=dtype, device=device)
        return _same_layout(got, torch.empty_strided(size, stride, dtype=dtype), device)

    return run


def _moved_transposed() -> str:
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
    got = x.to("npu")
    wrong = _same_layout(got, x, "npu:0")
    if not wrong and not torch.equal(got.cpu(), x):
        wrong = "the values differ from the CPU tensor's"
    return wrong


def _moved_channels_last() -> str:
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5).to(memory_format=torch.channels_last)
    got = torch.empty_like(x.to("npu"))
    return _same_layout(got, torch.empty_like(x), "npu:0")


def _on_device_one() -> str:
    before = torch.npu.memory_allocated(1)
    got = torch.empty_strided((3, 5), (1, 3), device="npu:1")
    wrong = _same_layout(got, torch.empty_strided((3, 5), (1, 3)), "npu:1")
    if not wrong and torch.npu.memory_allocated(1) <= before:
        wrong = "npu:1's allocator gave no memory: the storage comes from another device"
    return wrong


def _negative() -> str:
    try:
        torch.empty_strided((2, -1), (1, 1), device="npu")
    except RuntimeError:
        return ""
    except Exception as exc:  # noqa: BLE001 - the wrong error type is the finding
        return f"{type(exc).__name__} (the CPU raises RuntimeError)"
    return "no error (the CPU raises RuntimeError: a negative dimension)"


def _module_to() -> str:
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)
    want = lin.weight.detach().clone()
    lin.to("npu")
    wrong = _same_layout(lin.weight.detach(), want, "npu:0")
    if not wrong and not torch.equal(lin.weight.detach().cpu(), want):
        wrong = "the weights' values changed on the way"
    return wrong


def factory_cases(fn: Callable) -> list[Property]:
    c = _factory_case
    gaps = "a storage holds every element the strides reach: 1 + sum((size - 1) * stride) elements, not numel()"
    return [
        c(fn, "a transposed CPU matrix moved with .to('npu')", _moved_transposed,
          hint="tensor.to(device) keeps a dense tensor's strides: it calls empty_strided with the source's sizes "
               "and strides, then copies"),
        c(fn, "empty_strided((2, 3), (1, 2))", _direct((2, 3), (1, 2))),
        c(fn, "empty_like of a channels_last tensor", _moved_channels_last,
          hint="empty_like keeps the source's memory format: it calls empty_strided with its strides"),
        c(fn, "nn.Linear(4, 3).to('npu')", _module_to, hidden=True),
        c(fn, "empty_strided((2, 3), (3, 1), dtype=torch.float64)", _direct((2, 3), (3, 1), torch.float64),
          hidden=True, hint="the tensor has the dtype asked for (the default dtype when it is None)"),
        c(fn, "empty_strided((4,), (1,), dtype=torch.int64)", _direct((4,), (1,), torch.int64), hidden=True,
          hint="the tensor has the dtype asked for"),
        c(fn, "empty_strided((2, 3), (10, 1)): gaps between the rows", _direct((2, 3), (10, 1)), hidden=True,
          hint=gaps),
        c(fn, "empty_strided((4, 5), (0, 1)): a repeated row", _direct((4, 5), (0, 1)), hidden=True, hint=gaps),
        c(fn, "empty_strided((0, 5), (1, 1)): no elements", _direct((0, 5), (1, 1)), hidden=True,
          hint="a tensor with a size 0 reaches no element: its storage has 0 bytes"),
        c(fn, "empty_strided((), ()): a 0-d tensor", _direct((), ()), hidden=True,
          hint="a 0-d tensor has one element"),
        c(fn, "empty_strided((3, 5), (1, 3), device='npu:1')", _on_device_one, hidden=True,
          hint="allocate on the device you are given (its index too), not the current one"),
        c(fn, "empty_strided((2, -1), (1, 1)) raises", _negative, hidden=True,
          hint="a negative size is an error: RuntimeError, as on the CPU"),
    ]


@exercise("b8.factory", "Clinic 8: factories that stop at empty", names=["empty_strided"], timeout=TIMEOUT)
def _factory(t: Tester, empty_strided) -> None:
    from ..bringup.library import is_stub
    from ..grading import device

    _require_function(empty_strided, "empty_strided(size, stride, dtype=None, layout=None, device=None, "
                                     "pin_memory=None)")
    if is_stub(empty_strided):
        raise NotStarted("empty_strided still raises NotImplementedError(\"YOUR CODE HERE\")")
    device.record(t, device.run_cases(factory_cases(empty_strided), case_limit(TIMEOUT)))
