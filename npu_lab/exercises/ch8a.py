"""Chapter 8a: the device and eager mode - an operator brought up completely, and a conformance gate.

Two exercises:

* ``ch8a.softplus`` - register ``npu`` kernels for ``aten::softplus``, its ``out=`` form and
  ``aten::softplus_backward`` (the lab's own are taken out for the check, as on a chip team's first day):
  values against NumPy for every ``beta`` and ``threshold`` (at the threshold, far below it, empty, 0-d,
  non-contiguous, float64), ``out=`` written in place, resized, and through a strided view, gradients through
  autograd, each call one kernel launch told to the device with the bytes it moved, on the tensor's device
  (``npu:1`` while the current device is 0) and on the caller's current stream, nothing on the CPU;
* ``ch8a.conformance`` - write the gate a chip team runs on every kernel: PyTorch's OpInfo samples, contiguous
  and not, forward and backward, on the device under ``memcheck`` against the CPU. The check plants broken
  kernels (wrong only for strided inputs, a write past the end, a wrong backward, a crash on empty tensors, a
  result on the CPU or in float64, an input overwritten, a 0-d result reshaped, arguments ignored) and the
  lab's own correct ones: the gate must report exactly the broken ones, and without the lab's own gate
  (``npu_lab.ops.conformance``).
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from ..grading import isolation, references
from ..grading.inputs import randn
from ..grading.predictions import question
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester, short
from ..grading.values import check_plain

chapter("ch8a", "Adapting PyTorch to the NPU: the device and eager mode", [
    "Way 1: a runtime in C++ (allocator, device guard, hooks) under kernels registered per operator",
    "rename_privateuse1_backend, the device module and the generated methods give the runtime its Python face",
    "import torch loads a backend through a torch.backends entry point; a backend ships as a wheel (BuildExtension)",
    "A kernel launches on the current stream of its tensor's device; a second stream is ordered with events",
    "coverage() lists the operators a model needs; the CPU fallback copies every tensor of a missing one",
    "A complete operator is its forward, its out= form and its backward",
    "verify, OpInfo samples and the ported torch_openreg tests check the device against the CPU",
])

question("ch8a.lazy_init",
         "With the C++ runtime loaded and PrivateUse1 renamed 'hello', but no device module registered, does "
         "torch.empty(2, device='hello') work or fail?",
         why="the first tensor on a PrivateUse1 device initialises it lazily, and that asks the device module "
             "(torch.hello): without it the call fails with ModuleNotFoundError, whatever the C++ side holds",
         choices=("works", "fails"))
question("ch8a.tied",
         "After lm.to('npu'), how many distinct parameters does a model whose head is tied to its embedding have?",
         why="the runtime declares dense npu and CPU tensors shallow-copy compatible, so .to() swaps each "
             "Parameter's contents in place and the tie survives (the Python-only prototype makes a second one)")
question("ch8a.two_streams",
         "How many microseconds of simulated time does sum_of_squares of two 1M-float tensors take (squares of "
         "about 25 us each, an add of about 35.5 us)?",
         why="the two squares run at the same time on two streams, so the operator takes one square, the add and "
             "the half microsecond of an event record: about 61 us, not the 85 us of three kernels in a row",
         rtol=0.05)
question("ch8a.fallback_bytes",
         "With the CPU fallback on, how many bytes cross between host and device for hardsigmoid of 1000 float32 "
         "elements on npu?",
         why="the fallback copies every tensor argument of aten::hardsigmoid.out to the CPU, the input and the "
             "output buffer (4000 bytes each), and the result back (4000 bytes): 12000")


# ---------------------------------------------------------------------------------------------
# ch8a.softplus
# ---------------------------------------------------------------------------------------------

_SOFTPLUS_OPS = ("aten::softplus", "aten::softplus_backward")


def _softplus_np(x: np.ndarray, beta: float, threshold: float) -> np.ndarray:
    z = x * beta
    return np.where(z > threshold, x, np.log1p(np.exp(np.minimum(z, threshold))) / beta)


def _softplus_grad_np(g: np.ndarray, x: np.ndarray, beta: float, threshold: float) -> np.ndarray:
    z = x * beta
    return np.where(z > threshold, g, g / (1.0 + np.exp(-np.minimum(z, threshold))))


def _expected(x: torch.Tensor, beta: float, threshold: float) -> torch.Tensor:
    return references.expected(_softplus_np, x, beta, threshold)


def _values_cases() -> list[tuple[str, torch.Tensor, float, float, bool]]:
    """(description, input on the CPU, beta, threshold, hidden)."""
    at_threshold = torch.tensor([2.0, 1.999, 2.001, -2.0, 0.0])  # beta 2, threshold 4: 2.0 is not above it
    far = torch.tensor([-60.0, -20.0, -1.0, 0.5, 15.0, 30.0])
    return [
        ("F.softplus(x) of (4, 5), beta 1, threshold 20", randn(4, 5, seed=81) * 4, 1.0, 20.0, False),
        ("F.softplus(x, beta=2, threshold=5) of (7,): the linear part above x = 2.5", randn(7, seed=82) * 4, 2.0, 5.0,
         False),
        ("F.softplus(x) of an empty (0, 3) tensor", randn(0, 3, seed=83), 1.0, 20.0, False),
        ("F.softplus(x, beta=0.5, threshold=1) of (2, 3, 4)", randn(2, 3, 4, seed=84) * 4, 0.5, 1.0, True),
        ("F.softplus(x, beta=2, threshold=4) at and around x * beta == threshold (only above it is linear)",
         at_threshold, 2.0, 4.0, True),
        ("F.softplus(x, beta=1, threshold=25) far from 0 (-60 to 30)", far, 1.0, 25.0, True),
        ("F.softplus(x) of a 0-d tensor", torch.tensor(-0.75), 1.0, 20.0, True),
        ("F.softplus(x, beta=3, threshold=2) of a float64 (3, 6) tensor", randn(3, 6, seed=85, dtype=torch.float64),
         3.0, 2.0, True),
    ]


def _hint(desc: str) -> str:
    if "threshold" in desc and "at and around" in desc:
        return "softplus is linear only where x * beta > threshold (strictly): at x * beta == threshold use the log"
    if "float64" in desc:
        return ("the output has the input's dtype (torch.empty_like(x)); a numba kernel compiled for float32 "
                "arrays compiles again for float64 ones")
    if "empty" in desc:
        return "an empty tensor gives an empty result of its shape (a loop over 0 elements does nothing)"
    if "0-d" in desc:
        return "keep the input's shape: flatten the device arrays for the loop, not the tensors you return"
    return ("softplus(x) = log(1 + exp(beta * x)) / beta where x * beta <= threshold, else x; compute it in a "
            "numba loop over npu_lab.device_array(...) of a contiguous input")


def _call_functional(x: torch.Tensor, beta: float, threshold: float) -> torch.Tensor:
    return F.softplus(x, beta, threshold).cpu()


def _keeping_input(x: torch.Tensor) -> list[torch.Tensor]:
    return [F.softplus(x, 1.5, 3.0).cpu(), x.cpu()]


def _out_in_place(x: torch.Tensor) -> dict[str, Any]:
    out = torch.full_like(x, -7.0)
    ptr = out.data_ptr()
    got = torch.ops.aten.softplus.out(x, 1.0, 20.0, out=out)
    return {"same tensor": got is out, "same memory": out.data_ptr() == ptr, "values": out.cpu()}


def _out_resized(x: torch.Tensor) -> dict[str, Any]:
    out = torch.empty(0, device=x.device)
    got = torch.ops.aten.softplus.out(x, 2.0, 3.0, out=out)
    return {"same tensor": got is out, "shape": tuple(out.shape), "values": out.cpu()}


def _out_strided(x: torch.Tensor) -> torch.Tensor:
    buf = torch.full((x.shape[0], 2 * x.shape[1]), -7.0, device=x.device)
    torch.ops.aten.softplus.out(x, 1.0, 20.0, out=buf[:, 2:2 + x.shape[1]])  # columns 2.. of each row of buf
    return buf.cpu()


def _grad_of(x: torch.Tensor, g: torch.Tensor, beta: float, threshold: float) -> torch.Tensor:
    x = x.detach().requires_grad_(True)
    F.softplus(x, beta, threshold).backward(g)
    return x.grad.cpu()


def _observe(fn: Callable[[], Any]) -> dict[str, Any]:
    """Run ``fn`` under the dispatch tracer and the profiler: the operators, kernels, fallbacks, copies."""
    from .. import transfer_stats
    from ..device import clock, fallback
    from ..inspect.dispatch import trace
    from ..profiler import profile

    fell = dict(fallback.counts)
    moved = {d: transfer_stats(d) for d in range(torch.npu.device_count())}
    launched = [clock.clock(d).launches for d in range(torch.npu.device_count())]
    torch.npu.synchronize()
    with profile() as prof:
        tr = trace(fn)
    after = {d: transfer_stats(d) for d in range(torch.npu.device_count())}
    crossed = sum(after[d][k] - moved[d][k] for d in after for k in ("host_to_device_bytes", "device_to_host_bytes"))
    kernels = [k for k in prof.kernels if k.kind == "kernel"]
    return {"calls": [(c.op, c.kernel) for c in tr.calls],
            "fallbacks": sorted(k for k, v in fallback.counts.items() if v != fell.get(k, 0)),
            "crossed": crossed, "kernels": [(k.name, k.stream, k.bytes) for k in kernels],
            "per_device": [clock.clock(d).launches - launched[d] for d in range(len(launched))]}


def _uses(observed: dict[str, Any], op: str) -> str:
    """How ``op`` ran in an observation: "yours" (a PrivateUse1 kernel of the learner's), "fallback", or "none"."""
    for name, kernel in observed["calls"]:
        if name == op:
            return "fallback" if "fallback" in kernel else "yours"
    return "none"


def _launch_facts(t: Tester, what: str, fn: Callable[[], Any], op: str, nbytes: int, hint: str,
                  hidden: bool = False) -> dict[str, Any] | None:
    outcome = t.call(_observe, fn)
    if not outcome.ok:
        t.error(f"{what}: run under the profiler and the dispatch tracer", outcome, hidden=hidden, hint=hint)
        return None
    seen = outcome.value
    t.expect(f"{what}: {op} runs your PrivateUse1 kernel, with no CPU fallback and nothing copied between host and "
             "device", _uses(seen, op) == "yours" and not seen["fallbacks"] and seen["crossed"] == 0, hidden=hidden,
             expected="your kernel, 0 bytes across", got=f"{_uses(seen, op)}; fallbacks {short(seen['fallbacks'])}; "
             f"{seen['crossed']:,} bytes across",
             hint="register this overload for 'PrivateUse1' and compute on the device (no .cpu(), no CPU kernel)")
    kernels = seen["kernels"]
    t.expect(f"{what}: one kernel launch, told to the device with the bytes it read and wrote ({nbytes:,})",
             len(kernels) == 1 and kernels[0][2] == nbytes, hidden=hidden,
             expected=f"1 launch of {nbytes:,} bytes", got=f"{len(kernels)} launch(es): {short(kernels)}",
             hint="after your numba loop, call npu_lab.bringup.launch(name, inputs=[...], outputs=[...], flops=...) "
                  "once, with the tensors it read and the tensor it wrote; compute in one loop, not with several "
                  "torch operators (each is a launch of its own)")
    return seen


@exercise("ch8a.softplus", "Bring an operator up: softplus, its out= form and its backward, on the caller's device "
          "and stream", names=["register_softplus"], timeout=120, keeps_registrations=True)
def _softplus(t: Tester, register_softplus) -> None:
    from ..ops.registry import without_kernels

    # npu-lab ships softplus kernels: take them out (unless the notebook already did), outermost, so that the
    # learner's libraries are destroyed first and only the kernels taken out here come back.
    with without_kernels(*_SOFTPLUS_OPS, missing_ok=True), _refusing(_lab_softplus(), _refuse_kernel):
        _grade_softplus(t, register_softplus)


def _grade_softplus(t: Tester, register_softplus) -> None:
    from ..device import fallback

    # every expected value first, in NumPy, before any code of the learner's runs
    cases = [(d, x, b, th, h, _expected(x, b, th)) for d, x, b, th, h in _values_cases()]
    xt = (randn(6, 4, seed=86) * 4).t()
    want_t = _expected(xt, 1.0, 20.0)
    x_in = randn(5, 6, seed=87) * 3
    want_in = [_expected(x_in, 1.5, 3.0), x_in.clone()]
    x_out = randn(3, 5, seed=88) * 4
    want_out = _expected(x_out, 1.0, 20.0)
    want_resized = _expected(x_out, 2.0, 3.0)
    strided = torch.full((3, 10), -7.0)
    strided[:, 2:7] = want_out
    grad_cases = []
    for shape, beta, threshold, hidden in [((4, 6), 1.0, 20.0, False), ((9,), 2.0, 1.5, False),
                                           ((2, 3, 5), 0.5, 0.25, True)]:
        x, g = randn(*shape, seed=89) * 4, randn(*shape, seed=90)
        want = torch.from_numpy(_softplus_grad_np(references.array(g), references.array(x), beta, threshold)).float()
        grad_cases.append((shape, beta, threshold, hidden, x, g, want))
    x_launch = randn(1000, seed=91)

    returned: list[torch.library.Library] = []
    was_enabled = fallback.cpu_fallback_enabled()
    fallback.set_cpu_fallback(True)  # a missing registration then shows up as a fallback, not as an error
    try:
        outcome = t.call(register_softplus)
        if not outcome.ok:
            t.error("register_softplus()", outcome,
                    hint="create torch.library.Library('aten', 'IMPL'), .impl() each overload for 'PrivateUse1' and "
                         "return the library")
            return
        lib = outcome.value
        if type(lib) is torch.library.Library:
            returned.append(lib)
        if not t.expect("register_softplus() returns the live torch.library.Library it registered with",
                        type(lib) is torch.library.Library and lib.m is not None, expected="a torch.library.Library",
                        got=short(lib), hint="return the library: once nothing refers to it, its kernels go"):
            return
        foreign = sorted({k for made in [*returned, *t.libraries] for k in references.foreign_keys(made)})
        t.expect("your code registers kernels for the npu (PrivateUse1) key only", not foreign,
                 expected="only .../PrivateUse1 registrations", got=short(foreign),
                 hint="a kernel registered for the CPU changes what every CPU tensor computes: 'PrivateUse1' only")

        for desc, x, beta, threshold, hidden, want in cases:
            t.case(desc, _call_functional, x.to("npu"), beta, threshold, expected=want, hidden=hidden, hint=_hint(desc),
                   rtol=1e-5 if x.dtype == torch.float32 else 1e-10, atol=1e-6 if x.dtype == torch.float32 else 1e-12)
        t.case("F.softplus of a transposed (non-contiguous) npu tensor", _call_functional, xt.to("npu"), 1.0, 20.0,
               expected=want_t, hint="a transposed tensor's elements are not in memory order: make it .contiguous() "
               "before its memory goes to the loop")
        t.case("F.softplus(x, 1.5, 3.0) leaves x as it was and returns a new tensor", _keeping_input, x_in.to("npu"),
               expected=want_in, hidden=True, hint="write into a new tensor (torch.empty_like), never into the input")

        out_hint = ("softplus.out writes into the `out` it is given and returns that same tensor: out.resize_(shape) "
                    "if its shape differs, then write through its strides (or compute into a contiguous tensor and "
                    "out.copy_(it) when out is not contiguous)")
        t.case("torch.ops.aten.softplus.out(x, out=out): writes into out's own memory and returns out",
               _out_in_place, x_out.to("npu"),
               expected={"same tensor": True, "same memory": True, "values": want_out}, hint=out_hint)
        t.case("softplus.out into an empty out: out is resized to x's shape", _out_resized, x_out.to("npu"),
               expected={"same tensor": True, "shape": (3, 5), "values": want_resized}, hidden=True, hint=out_hint)
        t.case("softplus.out into columns 2 to 6 of a wider buffer (a strided out): the other columns untouched",
               _out_strided, x_out.to("npu"), expected=strided, hidden=True, hint=out_hint)

        for shape, beta, threshold, hidden, x, g, want in grad_cases:
            t.case(f"x.grad after F.softplus(x, {beta:g}, {threshold:g}).backward(g), x of {shape} on npu", _grad_of,
                   x.to("npu"), g.to("npu"), beta, threshold, expected=want, hidden=hidden, rtol=1e-5, atol=1e-6,
                   hint="autograd's formula calls aten::softplus_backward(grad_output, self, beta, threshold): "
                        "register it; it is grad * sigmoid(beta * x) where x * beta <= threshold, else grad")

        xl = x_launch.to("npu")
        n = xl.numel()
        _launch_facts(t, "F.softplus(x) of 1000 floats", lambda: F.softplus(xl), "aten::softplus", 8 * n,
                      hint="one launch, reading x and writing the result")
        buf = torch.empty_like(xl)
        _launch_facts(t, "torch.ops.aten.softplus.out(x, out=buf) of 1000 floats",
                      lambda: torch.ops.aten.softplus.out(xl, 1.0, 20.0, out=buf), "aten::softplus.out", 8 * n,
                      hint="the out= form is a kernel of its own: register 'softplus.out'", hidden=True)
        g = torch.ones_like(xl)
        _launch_facts(t, "aten::softplus_backward(g, x, 1, 20) of 1000 floats",
                      lambda: torch.ops.aten.softplus_backward(g, xl, 1.0, 20.0), "aten::softplus_backward", 12 * n,
                      hint="one launch, reading grad_output and x and writing the gradient")

        side = torch.npu.Stream()

        def on_side() -> torch.Tensor:
            with torch.npu.stream(side):
                return F.softplus(xl)

        seen = t.call(_observe, on_side)
        if seen.ok:
            streams = [k[1] for k in seen.value["kernels"]]
            t.expect("called inside `with torch.npu.stream(s):`, the launch goes to s", streams == [side.stream_id],
                     expected=f"one launch on stream {side.stream_id}", got=f"launches on streams {streams}",
                     hint="npu_lab.bringup.launch accounts the kernel on the current stream: call it from the kernel, "
                          "without changing streams")
        else:
            t.error("F.softplus inside `with torch.npu.stream(s):`", seen)

        x1 = x_launch.to("npu:1")
        want1 = _expected(x_launch, 1.0, 20.0)
        seen = t.call(lambda: _observe(lambda: F.softplus(x1)))
        if seen.ok:
            per_device = seen.value["per_device"]
            t.expect("x on npu:1 while the current device is npu:0: the launch is on npu:1", per_device[:2] == [0, 1],
                     expected="launches per device [0, 1]", got=f"launches per device {per_device[:2]}", hidden=True,
                     hint="make the tensor's device current while the kernel runs: with torch.npu.device(x.device): "
                          "(allocations follow the tensor; launches follow the current device)")
        else:
            t.error("F.softplus of a tensor on npu:1", seen, hidden=True)
        t.case("F.softplus of a tensor on npu:1 returns a tensor on npu:1 with the right values",
               lambda: [F.softplus(x1).device.index, F.softplus(x1).cpu()], expected=[1, want1], hidden=True,
               hint="allocate the result like the input (torch.empty_like(x)): on its device")

        with _quiet():  # PyTorch warns (once) that a second registration overrides the first
            again = t.call(register_softplus)  # what re-running the notebook cell does
        if again.ok and type(again.value) is torch.library.Library:
            returned.append(again.value)
        t.case("calling register_softplus() a second time (re-running the cell) works, and softplus still runs",
               lambda: (again.ok, _call_functional(xt.to("npu"), 1.0, 20.0))[1], expected=want_t, hidden=True,
               hint="create a new Library in each call (and do not pass allow_override=False)")
    finally:
        isolation.destroy_libraries([*returned, *t.libraries])  # before the shipped kernels come back
        fallback.set_cpu_fallback(was_enabled)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# ---------------------------------------------------------------------------------------------
# ch8a.conformance: planted kernels (wrong on purpose; the correct case is the lab's own kernel)
# ---------------------------------------------------------------------------------------------

def _hs(a: torch.Tensor) -> torch.Tensor:
    """hardsigmoid of a CPU tensor, by NumPy (a planted kernel's arithmetic: no operator of the npu runs)."""
    out = np.clip(a.detach().numpy().astype(np.float64) / 6.0 + 0.5, 0.0, 1.0)
    return torch.from_numpy(np.array(out, copy=True).reshape(a.shape)).to(a.dtype)  # a 0-d input stays 0-d


def _to_device(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``values`` (CPU) written into a new npu tensor shaped like ``like``, through the device's memory."""
    out = torch.empty(values.shape, dtype=values.dtype, device=like.device)
    if out.numel():
        from ..device.tensors import as_array

        as_array(out)[...] = values.numpy()
    from ..bringup import launch

    launch("planted", [like], [out], flops=3.0 * out.numel())
    return out


def _read(x: torch.Tensor) -> torch.Tensor:
    """The values of npu tensor ``x`` as a CPU tensor, read from its device memory (no operator runs)."""
    from ..device.tensors import as_array

    return torch.from_numpy(np.array(as_array(x), copy=True))


def _planted_last_bit(x: torch.Tensor) -> torch.Tensor:
    """Correct to float32 rounding: every result strictly between 0 and 1 is one float32 step above the CPU's."""
    values = _hs(_read(x)).numpy()
    inside = (values > 0) & (values < 1)
    values = np.where(inside, np.nextafter(values, np.float32(2.0)), values).astype(values.dtype)
    return _to_device(torch.from_numpy(np.array(values, copy=True).reshape(x.shape)), x)


def _planted_strides(x: torch.Tensor) -> torch.Tensor:
    """Reads its input in memory order from the first element: right only for contiguous inputs."""
    from ..device.tensors import as_array

    flat = as_array(x).reshape(-1) if x.is_contiguous() else np.lib.stride_tricks.as_strided(
        as_array(x), shape=(x.numel(),), strides=(x.element_size(),), writeable=False)
    return _to_device(_hs(torch.from_numpy(np.array(flat, copy=True)).reshape(x.shape)), x)


def _planted_past_end(x: torch.Tensor) -> torch.Tensor:
    """Right values, then one float written just past the end of its output's storage."""
    from ..device import native

    out = _to_device(_hs(_read(x)), x)
    nbytes = out.untyped_storage().nbytes()
    slack = -nbytes % 512  # the allocator's rounding: the write stays inside the block when memcheck is off
    if out.numel() and (native.load().memcheck_enabled() or slack >= 4):
        ctypes.c_float.from_address(out.untyped_storage().data_ptr() + nbytes).value = 0.5
    return out


def _planted_empty_crash(x: torch.Tensor) -> torch.Tensor:
    """Looks at the first element to pick a path: an IndexError on an empty tensor."""
    values = _hs(_read(x))
    if float(values.reshape(-1)[0]) < 0:  # never true: hardsigmoid is >= 0; but an empty tensor has no [0]
        values = -values
    return _to_device(values, x)


def _planted_cpu_result(x: torch.Tensor) -> torch.Tensor:
    """Right values, returned on the CPU."""
    return _hs(_read(x))


def _planted_float64(x: torch.Tensor) -> torch.Tensor:
    """Right values, in float64."""
    return _to_device(_hs(_read(x)).double(), x)


def _planted_in_place(x: torch.Tensor) -> torch.Tensor:
    """Clips its input to [-3, 3] in place first ("saves a temporary"): the result, and the gradient, are right;
    the caller's input is not what it was."""
    from ..device.tensors import as_array

    clipped = _read(x).clamp(-3.0, 3.0)
    if x.numel():
        as_array(x)[...] = clipped.numpy()
    return _to_device(_hs(clipped), x)


def _planted_0d(x: torch.Tensor) -> torch.Tensor:
    """Right values, but flattened: a 0-d input gives shape (1,)."""
    return _to_device(_hs(_read(x)).reshape(-1), x)


def _planted_backward(grad_output: torch.Tensor, self: torch.Tensor) -> torch.Tensor:
    """hardsigmoid's gradient as grad / 6 everywhere: forgets that it is 0 outside -3 < x < 3."""
    return _to_device(_read(grad_output) / 6.0, grad_output)


def _planted_hardtanh(self: torch.Tensor, min_val: float = -1.0, max_val: float = 1.0) -> torch.Tensor:
    """hardtanh that ignores its bounds: always clamps to [-1, 1]."""
    return _to_device(_read(self).clamp(-1.0, 1.0), self)


#: (description, OpInfo, the kernels planted: {overload: kernel}, the lab's kernels taken out, broken, hidden)
_GATE_CASES: list[tuple[str, str, dict[str, Callable[..., Any]], tuple[str, ...], bool, bool]] = [
    ("the lab's own hardsigmoid kernels (correct)", "nn.functional.hardsigmoid", {}, (), False, False),
    ("a hardsigmoid kernel whose float32 results differ from the CPU's in the last bit (correct)",
     "nn.functional.hardsigmoid", {"hardsigmoid": _planted_last_bit}, ("aten::hardsigmoid",), False, False),
    ("a hardsigmoid kernel that reads its input in memory order (wrong only for strided inputs)",
     "nn.functional.hardsigmoid", {"hardsigmoid": _planted_strides}, ("aten::hardsigmoid",), True, False),
    ("a hardsigmoid kernel that writes one float past the end of its output (values right)",
     "nn.functional.hardsigmoid", {"hardsigmoid": _planted_past_end}, ("aten::hardsigmoid",), True, False),
    ("a hardsigmoid_backward kernel that returns grad / 6 everywhere (forward right)", "nn.functional.hardsigmoid",
     {"hardsigmoid_backward": _planted_backward}, ("aten::hardsigmoid_backward",), True, False),
    ("a hardsigmoid kernel that fails on empty tensors", "nn.functional.hardsigmoid",
     {"hardsigmoid": _planted_empty_crash}, ("aten::hardsigmoid",), True, True),
    ("a hardsigmoid kernel that returns its result on the CPU (values right)", "nn.functional.hardsigmoid",
     {"hardsigmoid": _planted_cpu_result}, ("aten::hardsigmoid",), True, True),
    ("a hardsigmoid kernel that returns float64 for float32 inputs (values right)", "nn.functional.hardsigmoid",
     {"hardsigmoid": _planted_float64}, ("aten::hardsigmoid",), True, True),
    ("a hardsigmoid kernel that clips its input to [-3, 3] in place (result and gradient right)",
     "nn.functional.hardsigmoid",
     {"hardsigmoid": _planted_in_place}, ("aten::hardsigmoid",), True, True),
    ("a hardsigmoid kernel whose result of a 0-d input has shape (1,)", "nn.functional.hardsigmoid",
     {"hardsigmoid": _planted_0d}, ("aten::hardsigmoid",), True, True),
    ("the lab's own hardtanh kernels (correct; its samples pass min_val and max_val)", "nn.functional.hardtanh", {},
     (), False, True),
    ("a hardtanh kernel that ignores min_val and max_val", "nn.functional.hardtanh", {"hardtanh": _planted_hardtanh},
     ("aten::hardtanh",), True, True),
]


@contextlib.contextmanager
def _planted(kernels: dict[str, Callable[..., Any]], taken_out: tuple[str, ...]) -> Iterator[None]:
    """The lab's kernels ``taken_out`` replaced by ``kernels`` (registered for PrivateUse1) for the duration."""
    from ..ops.registry import without_kernels

    if not kernels:
        yield
        return
    with without_kernels(*taken_out, missing_ok=True):
        lib = torch.library.Library("aten", "IMPL")
        try:
            for overload, kernel in kernels.items():
                lib.impl(overload, kernel, "PrivateUse1")
            yield
        finally:
            lib._destroy()


def _refuse_harness(*_: Any, **__: Any) -> Any:
    raise RuntimeError("the lab's own conformance harness is not yours to call here: write the comparison "
                       "yourself (OpInfo samples, the CPU's result, assert_close, memcheck)")


def _refuse_kernel(*_: Any, **__: Any) -> Any:
    raise RuntimeError("the lab's own softplus kernels are taken out for this check: write your own (a numba loop "
                       "over npu_lab.device_array(...))")


@contextlib.contextmanager
def _refusing(functions: list[Callable[..., Any]], stand_in: Callable[..., Any]) -> Iterator[None]:
    """Each of ``functions`` raises while active, however the learner's code reached it (a name bound before
    the check included): their code is swapped for ``stand_in``'s, and put back afterwards."""
    saved = [(fn, fn.__code__) for fn in functions if not fn.__code__.co_freevars]
    try:
        for fn, code in saved:
            fn.__code__ = stand_in.__code__.replace(co_name=code.co_name)
        yield
    finally:
        for fn, code in saved:
            fn.__code__ = code


def _lab_softplus() -> list[Callable[..., Any]]:
    """The lab's own softplus kernels a module exposes (the forward ones are closures only the registry holds)."""
    from ..ops import activations

    return [getattr(activations, name) for name in ("softplus_backward", "softplus_backward_out",
                                                    "_softplus_backward") if callable(getattr(activations, name, None))]


def _lab_harness() -> list[Callable[..., Any]]:
    from ..bringup import conformance as bringup_conformance
    from ..ops import conformance as ops_conformance
    from ..ops import sweep

    found = [getattr(ops_conformance, name) for name in ("check_opinfo", "run_conformance")
             if callable(getattr(ops_conformance, name, None))]
    found += [getattr(sweep, name) for name in ("check_op", "_check_op", "sweep", "both")
              if callable(getattr(sweep, name, None))]
    found += [bringup_conformance.opinfo]
    return [f for f in found if hasattr(f, "__code__")]


def _opinfo(name: str) -> Any:
    from torch.testing._internal.common_methods_invocations import op_db

    from ..ops.conformance import opinfo_name

    return next(o for o in op_db if opinfo_name(o) == name)


def _gate_hint(desc: str) -> str:
    if "memory order" in desc:
        return ("run every sample also made non-contiguous ON THE DEVICE: sample.transform(to_npu).noncontiguous(); "
                "a strided CPU tensor moved with .to('npu') arrives contiguous, and the kernel never sees strides")
    if "past the end" in desc:
        return ("run each sample on the device inside `with npu_lab.memcheck():` and catch npu_lab.MemcheckError: "
                "the values were right, only the guard bytes after the output show the write")
    if "backward" in desc:
        return ("where op.supports_autograd, compare the gradients too: backward of the output times fixed weights, "
                "on both devices, then the inputs' .grad")
    if "empty" in desc:
        return "an exception on the device where the CPU succeeded is a failure: catch it and report the sample"
    if "on the CPU" in desc:
        return ("compare the npu result with the CPU's moved to npu: torch.testing.assert_close checks the device, "
                "dtype and shape; a result compared after .cpu() hides a result that never left the host")
    if "float64" in desc:
        return "assert_close checks the dtype; torch.allclose does not"
    if "in place" in desc:
        return "an operator must leave its inputs as they were: compare each input after the call with a copy"
    if "0-d" in desc:
        return "assert_close checks the shape: () is not (1,)"
    if "ignores" in desc:
        return "pass each sample's args and kwargs to the operator: op(sample.input, *sample.args, **sample.kwargs)"
    return ("a correct kernel must pass: compare with the tolerances of torch.testing.assert_close (float32 "
            "results differ between devices in the last bits), not with torch.equal")


def _run_gate(conformance: Callable[[Any], Any], op: Any) -> Any:
    with _refusing(_lab_harness(), _refuse_harness):
        return conformance(op)


@exercise("ch8a.conformance", "A conformance gate: PyTorch's OpInfo samples on the device, against the CPU",
          names=["conformance"], timeout=120)
def _conformance(t: Tester, conformance) -> None:
    for desc, opname, kernels, taken_out, broken, hidden in _GATE_CASES:
        op = _opinfo(opname)
        with _planted(kernels, taken_out):
            outcome = t.call(_run_gate, conformance, op)
        hint = _gate_hint(desc)
        if not outcome.ok:
            t.error(f"conformance(OpInfo {opname!r}) with {desc}", outcome, hidden=hidden,
                    hint="the gate itself must not raise: an error of the kernel under test is a failure it reports"
                    if "harness" not in str(outcome.error) else "write the comparison yourself")
            continue
        ok, value, why = check_plain(outcome.value)
        if not t.expect(f"conformance(OpInfo {opname!r}) returns a list of str", ok and type(value) is list and all(
                type(v) is str for v in value), hidden=hidden, expected="a list of str (empty: conformant)",
                got=short(outcome.value) + (f" ({why})" if why else ""),
                hint="return one string per failure, describing the sample and what went wrong; [] if none"):
            continue
        if broken:
            t.expect(f"{desc}: the gate reports it", len(value) > 0, hidden=hidden, expected="at least one failure",
                     got="[] (nothing found)", hint=hint)
        else:
            t.expect(f"{desc}: the gate passes it", value == [], hidden=hidden, expected="[]",
                     got=short(value), hint=_gate_hint("correct"))

