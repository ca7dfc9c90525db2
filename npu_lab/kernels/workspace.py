"""Scratch memory that kernels reuse from call to call (a *workspace*, as cuDNN asks for one).

A convolution builds matrices of several megabytes that live only while it runs (the
patches, the product before it is laid out as NCHW). Fresh host memory for each of them
costs a page fault per page on first touch, and when a multi-threaded product is the
first to write a fresh matrix its threads fault together: a 216 x 10976 float32
product took 8.5 ms into fresh memory and 1.7 ms into memory it had written before
(2 cores). :func:`buffer` hands out views of buffers kept per thread and per name,
grown to the largest size asked for.

A view is valid until the same thread asks for the same name again: a kernel takes one
name per matrix it holds at once and never returns a view to its caller.
:func:`release` drops the calling thread's buffers.
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["buffer", "release"]

_local = threading.local()


def buffer(name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A C-contiguous array of ``shape`` and ``dtype`` (uninitialised) in the calling thread's buffer ``name``."""
    dtype = np.dtype(dtype)
    count = 1
    for s in shape:
        count *= int(s)
    nbytes = count * dtype.itemsize
    buffers = getattr(_local, "buffers", None)
    if buffers is None:
        buffers = _local.buffers = {}
    raw = buffers.get(name)
    if raw is None or raw.size < nbytes:
        raw = buffers[name] = np.empty(max(nbytes, 64), np.uint8)
    return raw[:nbytes].view(dtype).reshape(shape)


def release() -> None:
    """Free the calling thread's buffers (they are made again when next asked for)."""
    _local.buffers = {}
