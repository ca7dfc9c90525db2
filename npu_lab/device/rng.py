"""Random number generation on the simulated NPU.

Like CUDA's, each generator's state is two numbers kept by the native runtime
(``csrc/runtime/NpuGenerator.cpp``): a **seed** and an **offset**. A random
kernel asks for ``n`` raw 64-bit values; the runtime hands out the (seed, offset)
to start from and moves the offset past them; the values come from the
counter-based Philox4x64 generator keyed by the seed, starting at counter
``offset``. Because the stream is a pure function of (seed, offset), saving and
restoring those 16 bytes (``get_rng_state``/``set_rng_state``,
``torch.Generator.get_state``) replays it exactly.

Every device has a default generator (``torch.npu.default_generators``) and
``torch.Generator(device="npu")`` makes new ones; random operators take either.
"""

from __future__ import annotations

import numpy as np
import torch

from . import native

_C = native.load()

DEFAULT_SEED = 67280421310721  # the same default seed as PyTorch's generators


class DeviceGenerator:
    """Draws raw random bits for kernels from one of the runtime's generators.

    Args:
        index: the device whose default generator to use (-1: the current device).
        generator: a ``torch.Generator(device="npu")`` to use instead of the default.
    """

    def __init__(self, index: int = -1, generator: torch.Generator | None = None) -> None:
        if generator is not None and generator.device.type != "npu":
            raise RuntimeError(
                f"Expected a 'npu' device type for generator but found '{generator.device.type}'"
            )
        self.index = index
        self.generator = generator

    def raw(self, n: int) -> np.ndarray:
        """``n`` raw uint64 values; advances the generator's offset past them."""
        seed, offset = _C.philox_reserve(self.generator, self.index, (n + 3) // 4)
        if not n:
            return np.empty(0, dtype=np.uint64)
        return np.random.Philox(key=seed, counter=offset).random_raw(n)


def generator(index: int = -1, generator: torch.Generator | None = None) -> DeviceGenerator:
    """Random bits from ``generator``, or from device ``index``'s default generator."""
    return DeviceGenerator(index, generator)


def default_generator(index: int) -> torch.Generator:
    """The default ``torch.Generator`` of device ``index``."""
    return _C.default_generator(index)
