"""The cheap hook every registered NPU kernel passes through.

``npu_lab.ops.registry.register`` wraps each kernel so that, while a profile
is recording, the call is timed and the kernels it launches are attributed to
its ATen operator. When nothing records, the wrapper costs one flag check.
(A ``TorchDispatchMode`` would see the operators too, but ``torch.compile``
runs eagerly under an unknown dispatch mode, and compiled code must be
profiled as it really runs.)
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: The recorder currently listening, or None.
recorder = None


def call(name: str, fn: Callable, args: tuple, kwargs: dict):
    rec = recorder
    if rec is None:
        return fn(*args, **kwargs)
    return rec.around_op(name, fn, args, kwargs)


def timed(name: str, fn: Callable, args: tuple, kwargs: dict):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, (time.perf_counter() - t0) * 1e6
