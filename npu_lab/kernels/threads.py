"""Serial twins of the parallel kernels, for inputs too small to pay for threads.

A ``parallel=True`` numba kernel starts its ``prange`` loop on every thread of
the pool, even for a few hundred elements. That costs 10-20 µs when the
threads are spinning and up to 100 µs when they have gone to sleep (which they
do between the kernels of a small model, since most of its kernels are small).
Below :data:`PARALLEL_MIN_WORK` elements the operator layer calls a *serial
twin* instead: the same Python source compiled without ``parallel`` (``prange``
then runs as ``range``). Elementwise kernels make the same choice with their
``flat``/``flat_par`` pair (:data:`npu_lab.kernels.elementwise.PARALLEL_THRESHOLD`).
"""

from __future__ import annotations

import types

import numba
from numba.core.caching import NullCache

#: Kernels touching fewer elements than this run serially.
PARALLEL_MIN_WORK = 1 << 16

_twins: dict[object, object] = {}


def _serial_twin(kernel):
    py = kernel.py_func
    # A distinct function object and name: numba's on-disk cache is keyed by the qualified name.
    fn = types.FunctionType(py.__code__, py.__globals__, f"{py.__name__}_serial", py.__defaults__, py.__closure__)
    fn.__qualname__ = f"{py.__qualname__}_serial"
    fn.__module__ = py.__module__
    fn.__doc__ = py.__doc__
    options = {k: v for k, v in kernel.targetoptions.items() if k not in ("parallel", "nopython")}
    # ``cache`` is not a target option: without it each process would compile every twin again (1-2 s each).
    return numba.njit(cache=not isinstance(kernel._cache, NullCache), **options)(fn)


def sized(kernel, work: int):
    """``kernel`` itself for ``work`` elements or more, else its serial twin (made once)."""
    if work >= PARALLEL_MIN_WORK:
        return kernel
    twin = _twins.get(kernel)
    if twin is None:
        twin = _twins[kernel] = _serial_twin(kernel)
    return twin
