"""The debugging clinic (milestone 8): broken pieces of a backend, as bug reports bring them.

Each case is code with one bug of a kind that backend authors meet and report. :func:`install` registers a
case's broken kernel for ``npu`` (in a library of its own, ``"clinic-<case>"``, which
:func:`npu_lab.bringup.forget` takes away), :func:`source` shows its code, and the notebook's tools find the bug:

================  ======================================================  ==================================
case              the bug                                                 found with
================  ======================================================  ==================================
``"strides"``     ``abs.out`` reads its input as if it were contiguous     a transposed input against the CPU
``"bounds"``      ``exp.out`` writes one element past the end             ``npu_lab.memcheck()``
``"fake"``        ``clinic::row_scale`` has no fake implementation         ``torch.compile``, ``opcheck``
``"copies"``      ``addmm.out`` computes into a new tensor, then copies   ``npu_lab.profile()``, memory stats
``"desync"``      ranks all-reduce their metrics in different orders      the values (the sizes all match)
``"module"``      a backend renamed, its device module never registered   a fresh process
``"race"``        a side stream's result read without waiting for it      ``npu_lab.streamcheck()``
``"factory"``     factories stop at ``empty``: no ``empty_strided``        ``tensor.to("npu")``, the dispatcher
================  ======================================================  ==================================

These are the *broken* versions, to read and run; the fixes are yours. The factory case takes a kernel *out*
of the runtime instead of adding a broken one: inside ``with withheld():`` the device has ``empty.memory_format``
and no ``empty_strided``, as a backend whose author wrote the first factory and stopped.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import numba
import numpy as np
import torch
import torch.distributed as dist

from . import launch, library

CASES = ("strides", "bounds", "fake", "copies", "desync", "module", "race", "factory")


def _array(t: torch.Tensor) -> np.ndarray:
    from .. import device_array

    return device_array(t)


# -- strides ------------------------------------------------------------------------------------

def abs_out(self: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """Broken: reads the input's memory in order, as if the tensor were contiguous."""
    out.resize_(self.shape)  # abs.out is not structured: out may come empty
    n = self.numel()
    if n:
        memory = _array(self.as_strided((n,), (1,)))  # n elements, in memory order
        _array(out)[...] = np.abs(memory).reshape(out.shape)
        launch("abs", (self,), (out,))
    return out


# -- bounds -------------------------------------------------------------------------------------

@numba.njit(cache=True)
def _exp_loop(x: np.ndarray, y: np.ndarray) -> None:
    for i in range(x.shape[0] + 1):  # one step too many: y has x.shape[0]
        y[i] = np.exp(x[min(i, x.shape[0] - 1)])


def exp_out(self: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """Broken: writes out's elements, and one more past the end of its storage."""
    if self.numel():
        x = self.contiguous()
        _exp_loop(_array(x).reshape(-1), _array(out).reshape(-1))
        launch("exp", (x,), (out,))
    return out


# -- fake ---------------------------------------------------------------------------------------

def row_scale_kernel(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x**2, last dimension) + eps): the npu kernel (this part is fine)."""
    xc = x.contiguous()
    a = _array(xc)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel():
        rms = np.sqrt((a.astype(np.float64) ** 2).mean(axis=-1, keepdims=True) + eps)
        _array(out)[...] = (a / rms).astype(a.dtype)
        launch("row_scale", (xc,), (out,), flops=3 * x.numel())
    return out


_DEFINED: list[torch.library.Library] = []  # the operator lives as long as the process


def _define_row_scale() -> None:
    """``clinic::row_scale(Tensor x, float eps) -> Tensor``, with its npu kernel and *no* fake implementation."""
    if not _DEFINED:
        lib = torch.library.Library("clinic", "DEF")
        lib.define("row_scale(Tensor x, float eps) -> Tensor")
        lib.impl("row_scale", row_scale_kernel, "PrivateUse1")
        _DEFINED.append(lib)


def row_scale_reference(x: torch.Tensor, eps: float) -> torch.Tensor:
    """What ``row_scale`` computes, in PyTorch (for the CPU)."""
    return x / torch.sqrt(x.double().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype)


# -- copies -------------------------------------------------------------------------------------

def addmm_out(self: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *,
              beta: float = 1, alpha: float = 1, out: torch.Tensor) -> torch.Tensor:
    """Broken (slow, not wrong): computes into a tensor of its own, copies it to out."""
    result = torch.empty(out.shape, dtype=out.dtype, device=out.device)
    if result.numel():
        a, b = _array(mat1.contiguous()), _array(mat2.contiguous())
        product = alpha * (a @ b)
        bias = np.broadcast_to(_array(self.contiguous()), result.shape)
        _array(result)[...] = beta * bias + product if beta else product
        flops = 2 * mat1.shape[0] * mat1.shape[1] * mat2.shape[1]
        launch("addmm", (self, mat1, mat2), (result,), flops=flops)
    out.copy_(result)
    return out


# -- desync -------------------------------------------------------------------------------------

def average_metrics(metrics: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Broken: each rank all-reduces its metrics in the order it computed them.

    Odd ranks computed them in the opposite order. Every metric has one element, so
    every all-reduce has the same size, nothing complains, and different metrics are
    summed together.
    """
    names = list(metrics) if dist.get_rank() % 2 == 0 else list(reversed(metrics))
    out = {}
    for name in names:
        t = metrics[name].clone()
        dist.all_reduce(t)
        out[name] = t * (1.0 / dist.get_world_size())
    return out


# -- module -------------------------------------------------------------------------------------

def register_device(name: str) -> None:
    """Broken: renames the PrivateUse1 backend and stops: no device module is registered.

    In a fresh process, torch.empty(2, device=name) then fails before the dispatcher:
    "ModuleNotFoundError: No module named 'torch.<name>'" (lazy initialisation imports it).
    """
    torch.utils.rename_privateuse1_backend(name)


# -- race ---------------------------------------------------------------------------------------

def scaled_residual(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Broken: ``x * w + x``, the product on a side stream (to overlap with the default stream's work), and the
    sum on the default stream, which never waits for the side stream.

    On a chip whose streams run at once, the sum may read the product before, while or after it is written.
    The simulated device computes each kernel when it is launched, so the values come out right here; the
    streams' clocks show the race (``npu_lab.streamcheck()``).
    """
    side = torch.npu.Stream()
    with torch.npu.stream(side):
        y = x * w
    return y + x


_PROBE = """
import json, sys, types
import torch
{source}


def said(exc):
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{{type(exc).__name__}}: {{text.split(' This could be')[0][:200]}}"


name = sys.argv[1]
out = {{}}
try:
    {function}(name)
    out["registered"] = "ok"
except Exception as exc:
    out["registered"] = said(exc)
try:
    torch.empty(2, device=name)
    out["empty"] = "no error"
except Exception as exc:
    out["empty"] = said(exc)
module = getattr(torch, name, None)
try:
    out["available"] = [type(module.is_available()).__name__, type(module.device_count()).__name__]
except Exception as exc:
    out["available"] = said(exc)
out["methods"] = hasattr(torch.Tensor, "is_" + name) and hasattr(torch.Tensor, name)
print(json.dumps(out))
"""


def fresh_process(register: Callable[[str], None], name: str, timeout: float = 60.0) -> dict[str, Any]:
    """Run ``register(name)`` in a new Python process (``import torch`` done, no npu_lab), then try the device there.

    ``register``'s source runs as a script of its own (it imports what else it needs itself). Returns what
    happened: ``registered`` ("ok" or the error), ``empty`` (what ``torch.empty(2, device=name)`` raised),
    ``available`` (the types ``torch.<name>.is_available()`` and ``device_count()`` returned, or the error) and
    ``methods`` (whether tensors have ``is_<name>`` and ``.<name>()``); ``crashed`` if the process died or
    ran past ``timeout`` seconds.
    """
    source = textwrap.dedent(inspect.getsource(register))
    script = _PROBE.format(source=source, function=register.__name__)
    env = {k: v for k, v in os.environ.items() if k != "NPU_LAB_BARE"}
    try:
        proc = subprocess.run([sys.executable, "-c", script, name], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"crashed": f"the process did not finish within {timeout:g} s (it was stopped)"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines:
        return {"crashed": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return json.loads(lines[-1])


# -- factory ------------------------------------------------------------------------------------

@contextlib.contextmanager
def withheld() -> Iterator[None]:
    """The runtime's ``aten::empty_strided`` kernel out of the dispatcher for the duration (back afterwards).

    Inside, the device's factories stop at ``empty.memory_format``: ``torch.empty(3, device="npu")`` works,
    while ``cpu_tensor.to("npu")``, ``torch.empty_like`` and ``torch.empty_strided`` raise PyTorch's own
    "Could not run 'aten::empty_strided' with arguments from the 'npu' backend", unless a kernel of yours
    (``bringup.library(...).impl("empty_strided", ..., "PrivateUse1")``) takes its place.
    """
    from ..device import native

    runtime = native.load()
    was = runtime.empty_strided_registered()
    runtime.register_empty_strided(False)
    try:
        yield
    finally:
        runtime.register_empty_strided(was)


_FACTORY_SOURCE = """\
// npu_lab/csrc/aten/NpuMinimal.cpp, as a first bring-up leaves it: one factory function
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  // (no "empty_strided": torch.empty works, so the device looks ready)
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("_copy_from", TORCH_FN(copy_from));
  // ... views, copies, .item()
}"""


# -- the cases ----------------------------------------------------------------------------------

_KERNELS = {"strides": ("abs.out", abs_out), "bounds": ("exp.out", exp_out), "copies": ("addmm.out", addmm_out)}
_SOURCES = {"strides": [abs_out], "bounds": [_exp_loop.py_func, exp_out], "fake": [row_scale_kernel],
            "copies": [addmm_out], "desync": [average_metrics], "module": [register_device],
            "race": [scaled_residual]}


def install(case: str) -> None:
    """Register case ``case``'s broken kernel for ``npu`` (for ``"fake"``: define ``clinic::row_scale``; the cases
    with no kernel, ``"desync"``, ``"module"``, ``"race"`` and ``"factory"``, register nothing)."""
    if case not in CASES:
        raise ValueError(f"no clinic case {case!r}; the cases are {', '.join(CASES)}")
    if case == "fake":  # "factory" registers nothing: its broken state is `with withheld():`
        _define_row_scale()
    elif case in _KERNELS:
        op, kernel = _KERNELS[case]
        library(f"clinic-{case}").impl(op, kernel, "PrivateUse1")


def source(case: str) -> str:
    """The code of case ``case``'s broken piece."""
    if case not in CASES:
        raise ValueError(f"no clinic case {case!r}; the cases are {', '.join(CASES)}")
    if case == "factory":
        return _FACTORY_SOURCE
    return "\n\n".join(inspect.getsource(fn) for fn in _SOURCES[case])
