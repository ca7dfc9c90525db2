"""Random number generation on the simulated NPU.

Like CUDA's default generator, each device's generator state is just two
numbers: a **seed** and an **offset**. A random kernel asks for ``n`` raw
64-bit values; they come from the counter-based Philox4x64 generator keyed by
the seed, starting at counter ``offset``, and the offset then moves past them.
Because the stream is a pure function of (seed, offset), saving and restoring
those 16 bytes (``get_rng_state``/``set_rng_state``) replays it exactly.
"""

from __future__ import annotations

import numpy as np
import torch

DEFAULT_SEED = 67280421310721  # the same default seed as PyTorch's generators


class DeviceGenerator:
    """The default random generator of one simulated device."""

    def __init__(self, index: int, seed: int = DEFAULT_SEED) -> None:
        self.index = index
        self.seed = seed
        self.offset = 0

    def manual_seed(self, seed: int) -> None:
        self.seed = int(seed) & 0xFFFFFFFFFFFFFFFF
        self.offset = 0

    def raw(self, n: int) -> np.ndarray:
        """``n`` raw uint64 values; advances the offset past them."""
        bits = np.random.Philox(key=self.seed, counter=self.offset)
        out = bits.random_raw(n) if n else np.empty(0, dtype=np.uint64)
        self.offset += (n + 3) // 4  # Philox4x64 yields four values per counter step
        return out

    def get_state(self) -> torch.Tensor:
        return torch.tensor(
            np.array([self.seed, self.offset], dtype=np.uint64).view(np.uint8), dtype=torch.uint8
        )

    def set_state(self, state: torch.Tensor) -> None:
        if not (isinstance(state, torch.Tensor) and state.dtype == torch.uint8 and state.numel() == 16):
            raise RuntimeError("npu RNG state must be a uint8 tensor of 16 bytes (seed, offset)")
        seed, offset = state.cpu().numpy().view(np.uint64)
        self.seed, self.offset = int(seed), int(offset)


_generators: dict[int, DeviceGenerator] = {}


def generator(index: int = 0) -> DeviceGenerator:
    g = _generators.get(index)
    if g is None:
        g = _generators[index] = DeviceGenerator(index)
    return g
