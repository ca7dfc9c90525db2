"""Matmul autotuning: time candidate tile sizes per shape, keep the fastest.

The best register tile sizes for the matmul kernel depend on the shape (how the
tiles cover M and N, how many rows are left to the slower edge code, how many
registers the sums need). The autotuner times every candidate ``(TM, TN)`` on
random data of the shape, laid out as ``x @ weight.T`` is (the weight's rows are
read as they are), stores the winner in
``npu_lab.ops.linalg.tiles`` (which ``mm``/``addmm``/``linear_relu`` consult), and
remembers it in a JSON file so the next process does not time it again.
Shapes that take BLAS (float32 and float64 products: :mod:`npu_lab.kernels.blas`)
or the outer-product kernel (a fixed block of sums) have nothing to tune and are
reported as such; ``tune(..., blas=False)`` tunes the numba kernels that run
when BLAS is switched off (``NPU_LAB_BLAS=0``).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.fx

from ..kernels import codegen, simd
from ..kernels import matmul as mk
from ..ops import linalg

CANDIDATES: list[tuple[int, int]] = [(tm, tn) for tm in mk.TM_CHOICES for tn in mk.TN_CHOICES]
#: The matmul kernel forms whose register tiles the autotuner chooses.
TILED = ("dot", "rows")


@dataclass
class TuneResult:
    """What the autotuner tried for one (M, N, K) and what it chose."""

    shape: tuple[int, int, int]
    timings_us: dict[tuple[int, int], float] = field(default_factory=dict)
    best: tuple[int, int] = mk.DEFAULT_TILES
    from_cache: bool = False
    kernel: str = "dot"  #: the form :func:`npu_lab.kernels.matmul.choose_kernel` picks for the shape

    def describe(self) -> str:
        m, n, k = self.shape
        if self.kernel == "blas":
            which = "PyTorch's" if mk._blas.backend() == "torch" else "NumPy's"
            return f"mm {m}x{k} @ {k}x{n}: takes BLAS ({which}, tuned for this CPU): no tiles to tune"
        if self.kernel not in TILED:
            return (f"mm {m}x{k} @ {k}x{n}: takes the {self.kernel} kernel (a fixed block of "
                    f"{simd.MR}x{simd.TILE_COLS[np.dtype(np.float32)]} sums in registers): no tiles to tune")
        if self.from_cache:
            return f"mm {m}x{k} @ {k}x{n}: tiles {self.best} (from the on-disk cache)"
        tried = ", ".join(f"{t}: {us:.0f}us" for t, us in sorted(self.timings_us.items()))
        return f"mm {m}x{k} @ {k}x{n}: tried {tried} -> chose {self.best}"


def cache_file() -> Path:
    return codegen.cache_dir().parent / "autotune.json"


def _load() -> dict[str, list[int]]:
    path = cache_file()
    if path.exists():
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return {}
    return {}


def _store(entries: dict[str, list[int]]) -> None:
    path = cache_file()
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(entries, indent=1, sort_keys=True))
    os.replace(tmp, path)


def tune(m: int, n: int, k: int, repeat: int = 3, use_cache: bool = True, blas: bool = True) -> TuneResult:
    """Pick tile sizes for ``(m, k) @ (k, n)`` and install them for that shape.

    Only the dot-product and row-by-row kernels have tile sizes; a shape that takes BLAS or the outer-product
    form (:func:`npu_lab.kernels.matmul.choose_kernel`) is reported as such and not timed. ``blas=False``
    tunes the numba kernels a float32 product runs when BLAS is off.
    """
    key = f"{m}x{n}x{k}"
    result = TuneResult((m, n, k))
    a = np.empty((m, k), np.float32)
    b = np.empty((n, k), np.float32).T  # nn.Linear's weight.T
    out = np.empty((m, n), np.float32)
    result.kernel = mk.choose_kernel(a, b, out, blas=blas)
    if result.kernel not in TILED:
        return result
    entries = _load() if use_cache else {}
    if key in entries and tuple(entries[key]) in CANDIDATES:  # entries of an older kernel are timed again
        result.best = tuple(entries[key])  # type: ignore[assignment]
        result.from_cache = True
    else:
        rng = np.random.default_rng(0)
        a[:] = rng.standard_normal((m, k), dtype=np.float32)
        b[:] = rng.standard_normal((k, n), dtype=np.float32)
        for tiles in CANDIDATES:
            mk.mm(a, b, out, tiles, blas=False)  # compile / warm up
            best = float("inf")
            for _ in range(repeat):
                t0 = time.perf_counter()
                mk.mm(a, b, out, tiles, blas=False)
                best = min(best, time.perf_counter() - t0)
            result.timings_us[tiles] = best * 1e6
        result.best = min(result.timings_us, key=result.timings_us.get)
        entries = _load()
        entries[key] = list(result.best)
        _store(entries)
    linalg.tiles[(m, n, k)] = result.best
    return result


def _mm_shapes(gm: torch.fx.GraphModule) -> set[tuple[int, int, int]]:
    aten = torch.ops.aten
    shapes = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in node.args]
        if node.target == aten.mm.default and all(v is not None for v in vals[:2]):
            (m, k), n = vals[0].shape, vals[1].shape[1]
        elif node.target == aten.addmm.default and all(v is not None for v in vals[1:3]):
            (m, k), n = vals[1].shape, vals[2].shape[1]
        elif node.target == torch.ops.npu.linear_relu.default and vals[0] is not None:
            m, k = int(np.prod(vals[0].shape[:-1])), vals[0].shape[-1]
            n = vals[1].shape[0]
        else:
            continue
        if all(isinstance(d, int) for d in (m, n, k)):
            shapes.add((int(m), int(n), int(k)))
    return shapes


def tune_graph(gm: torch.fx.GraphModule) -> list[str]:
    """Tune every matmul shape in a graph; returns one line per shape."""
    return [tune(*shape).describe() for shape in sorted(_mm_shapes(gm))]
