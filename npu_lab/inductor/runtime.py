"""Running Inductor-generated numba kernels on ``npu`` tensors.

The wrapper code Inductor writes calls each kernel with the graph's tensors
(and integer sizes). :class:`NumbaKernel` turns each ``npu`` tensor into the
NumPy view of its device memory that starts at the tensor's first element
(Inductor's index expressions are relative to it), calls the compiled
function, and reports the launch to the device clock like every NPU kernel.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch

from ..device.clock import launch
from ..device.tensors import flat_array
from ..kernels import codegen


class NumbaKernel:
    """A generated kernel: its source, and the compiled function to call."""

    def __init__(self, name: str, source: str, outputs: tuple[int, ...] = ()):
        self.name = name
        self.source = source
        self.outputs = frozenset(outputs)
        stem = f"inductor_{name}_{hashlib.sha1(source.encode()).hexdigest()[:10]}"
        self.module = codegen.load_module(source, stem)
        self.fn = self.module.kernel

    def __call__(self, *args: Any) -> None:
        arrays: list[Any] = []
        read = written = 0
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                if a.device.type != "npu":
                    raise RuntimeError(f"npu Inductor kernel {self.name} got a tensor on {a.device}")
                if a.dtype in (torch.float16, torch.bfloat16):
                    raise RuntimeError(f"npu Inductor kernels do not support {a.dtype} (numba has no half "
                                       "type); compile the model in float32")
                flat = flat_array(a)
                arrays.append(flat[a.storage_offset():] if a.numel() else flat[:0])
                if i in self.outputs:
                    written += a.numel() * a.element_size()
                else:
                    read += a.numel() * a.element_size()
            else:
                arrays.append(np.int64(a) if isinstance(a, int) else a)
        self.fn(*arrays)
        launch(f"inductor:{self.name}", 0.0, read, written)

    def __repr__(self) -> str:
        return f"NumbaKernel({self.name!r})"


def load_kernel(name: str, source: str, outputs: tuple[int, ...] = ()) -> NumbaKernel:
    """Compile (or load from the on-disk cache) one generated kernel; ``outputs``: written arguments."""
    return NumbaKernel(name, source, outputs)
