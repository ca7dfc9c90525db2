"""The numba-compiled memory moves of the compiled runner: masked gathers and scatters.

These loops touch the npu tensors' real device memory (``npu_lab.device_array`` views, no
copies). Each works on flat 1-d arrays (indices, mask, values) covering *every block of the grid*
at once, counts the elements its mask lets through (the bytes the cost model charges) and stops
at the first element outside the tensor, reporting its position so the caller can hand the run to
the Python runner, which raises the clear :class:`~npu_lab.puzzles.model.OutOfBounds` message.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def gather(flat: np.ndarray, idx: np.ndarray, mask: np.ndarray, has_mask: bool, other: float,
           out: np.ndarray) -> int:
    """``out[i] = flat[idx[i]]`` where ``mask[i]`` (else ``other``).

    Returns the elements read, or -1-i if ``idx[i]`` is outside ``flat``.
    """
    n = flat.shape[0]
    count = 0
    for i in range(idx.shape[0]):
        if has_mask and not mask[i]:
            out[i] = other
            continue
        j = idx[i]
        if j < 0 or j >= n:
            return -1 - i
        out[i] = flat[j]
        count += 1
    return count


@numba.njit(cache=True)
def scatter(flat: np.ndarray, idx: np.ndarray, mask: np.ndarray, has_mask: bool, values: np.ndarray,
            old: np.ndarray) -> int:
    """``flat[idx[i]] = values[i]`` where ``mask[i]``, in order, keeping the overwritten value in ``old[i]``.

    Returns the elements written, or -1-i if ``idx[i]`` is outside (checked before anything is written).
    """
    n = flat.shape[0]
    for i in range(idx.shape[0]):
        if has_mask and not mask[i]:
            continue
        j = idx[i]
        if j < 0 or j >= n:
            return -1 - i
    count = 0
    for i in range(idx.shape[0]):
        if has_mask and not mask[i]:
            continue
        j = idx[i]
        old[i] = flat[j]
        flat[j] = values[i]
        count += 1
    return count


@numba.njit(cache=True)
def unscatter(flat: np.ndarray, idx: np.ndarray, mask: np.ndarray, has_mask: bool, old: np.ndarray) -> None:
    """Undo one :func:`scatter`: put the overwritten values back, last write first."""
    for i in range(idx.shape[0] - 1, -1, -1):
        if has_mask and not mask[i]:
            continue
        flat[idx[i]] = old[i]
