"""Matplotlib figures of kernel runs: the chip's roofline with measured kernels on it, and the walk of a product.

* :func:`roofline_figure` - the roofline (log-log axes: FLOP per byte against GFLOP/s), its ridge point,
  and each run as two points from its counters: the time without the launch latency (on the roof, by the
  cost model's rule) and the whole time of the launch;
* :func:`walk_figure` - for runs of matrix products (debug runs, which keep a trace): how many times each
  element of ``a`` and ``b`` was read, the tiles one block loaded (numbered in order), and the part of the
  output each block computed.

Both return the figure (``fig = roofline_figure(...)`` shows it once in a notebook).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .cost import Stats, device_model

#: One colour per kernel, told apart in print and by colour-blind readers (Okabe-Ito).
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")


def _decade_floor(v: float) -> float:
    return 10.0 ** math.floor(math.log10(v))


def _decade_ceil(v: float) -> float:
    return 10.0 ** math.ceil(math.log10(v))


def roofline_figure(runs: Mapping[str, Stats], model: Any = None, width_in: float = 9.0) -> Any:
    """The chip's roofline with every run of ``runs`` (label -> :class:`Stats`) placed by its counters.

    x: arithmetic intensity, the run's FLOPs per byte of device memory it moved; y: GFLOP/s. The roof is
    ``min(peak, intensity * bandwidth)``; the ridge point is where its two parts meet. A filled marker is
    FLOPs / (time - launch latency), which the cost model puts on the roof; a hollow one FLOPs / time, the
    launch included. A run that does no arithmetic has no place on a log axis and is left out (say so).
    """
    import matplotlib.pyplot as plt

    m = model or device_model()
    placed = {label: s for label, s in runs.items() if s.flops > 0 and s.bytes > 0}
    xs = [s.intensity for s in placed.values()] + [m.ridge_point]
    lo_x, hi_x = _decade_floor(min(xs) / 2), _decade_ceil(max(xs) * 4)
    whole = [s.flops / (s.time_us * 1e3) for s in placed.values() if s.time_us > 0]
    lo_y = _decade_floor(min([lo_x * m.bandwidth_gbs / 2] + whole) / 2)
    hi_y = _decade_ceil(m.peak_gflops * 3)

    fig, ax = plt.subplots(figsize=(width_in, width_in * 0.62), layout="constrained")
    roof_x = np.array([lo_x, m.ridge_point, hi_x])
    ax.plot(roof_x, np.minimum(roof_x * m.bandwidth_gbs, m.peak_gflops), color="#333333", lw=2.2, zorder=2)
    ax.axvline(m.ridge_point, color="#777777", lw=1, ls=":", zorder=1)
    middle = math.sqrt(lo_y * m.peak_gflops)
    ax.text(m.ridge_point * 1.1, middle, f"ridge point:\n{m.ridge_point:g} FLOP/B", fontsize=9, color="#333333",
            va="center")
    ax.text(hi_x / 1.3, m.peak_gflops * 1.4, f"peak: {m.peak_gflops:g} GFLOP/s", fontsize=9, color="#333333",
            ha="right")
    slope_x = math.sqrt(lo_x * m.ridge_point)  # under the middle of the sloped roof
    ax.text(slope_x, slope_x * m.bandwidth_gbs / 6, f"bandwidth: {m.bandwidth_gbs:g} GB/s x intensity",
            fontsize=9, color="#333333")
    ax.text(0.02, 0.03, "memory-bound: left of the ridge", transform=ax.transAxes, fontsize=9, color="#555555")
    ax.text(0.98, 0.03, "compute-bound: right of it", transform=ax.transAxes, fontsize=9, color="#555555",
            ha="right")
    for k, (label, s) in enumerate(placed.items()):
        colour = COLOURS[k % len(COLOURS)]
        body_us = s.time_us - m.launch_us * s.launches
        body = s.flops / (body_us * 1e3) if body_us > 0 else m.peak_gflops
        with_launch = s.flops / (s.time_us * 1e3)
        ax.plot([s.intensity, s.intensity], [with_launch, body], color=colour, lw=0.8, alpha=0.6, zorder=3)
        ax.plot(s.intensity, body, "o", ms=8, color=colour, zorder=4, label=f"{label} ({s.intensity:.2g} FLOP/B)")
        ax.plot(s.intensity, with_launch, "o", ms=8, mfc="white", mec=colour, mew=1.6, zorder=4)
    ax.plot([], [], "o", color="#777777", label="filled: time without the launch")
    ax.plot([], [], "o", mfc="white", mec="#777777", label=f"hollow: with the {m.launch_us:g} us launch")
    ax.set(xscale="log", yscale="log", xlim=(lo_x, hi_x), ylim=(lo_y, hi_y))
    ax.set_xlabel("arithmetic intensity: FLOPs per byte of device memory moved (log)", fontsize=10)
    ax.set_ylabel("GFLOP/s (log)", fontsize=10)
    ax.tick_params(labelsize=9)
    ax.grid(True, which="major", color="#dddddd", lw=0.6)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=9, frameon=False)
    return fig


def _matrix(stats: Stats, name: str, counts: Mapping[str, Any]) -> np.ndarray:
    shape = stats.shapes[name]
    arr = np.asarray(counts[name])
    return arr.reshape(shape if len(shape) == 2 else (1, -1))


def walk_figure(runs: Mapping[str, Stats], inputs: tuple[str, str] = ("a", "b"), output: str = "out",
                block: tuple[int, ...] = (0,), width_in: float = 9.0) -> Any:
    """One row per debug run of a matrix product: reads per element of each input, and the output's split.

    Each input is coloured by how many times its elements were read (one colour scale for the whole figure,
    logarithmic); the tiles ``block`` loaded are outlined in orange and numbered in the order it loaded them.
    The output is shaded by which block computed each part (alternating shades), ``block``'s part outlined.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Rectangle

    for label, s in runs.items():
        if s.trace is None:
            raise ValueError(f"{label}: walk_figure needs debug runs (launch(..., debug=True)), which keep a trace")
    top = max(int(np.asarray(s.reads[n]).max()) for s in runs.values() for n in inputs)
    norm = LogNorm(vmin=0.6, vmax=max(2, top))  # once read: a light blue; never read: white
    cmap = plt.get_cmap("Blues").with_extremes(under="white")
    widths = [runs[next(iter(runs))].shapes[n][1] for n in (*inputs, output)]
    fig, axes = plt.subplots(len(runs), 3, figsize=(width_in, 3.1 * len(runs) + 0.8), squeeze=False,
                             gridspec_kw={"width_ratios": widths}, layout="constrained")
    image = None
    for row, (label, s) in enumerate(runs.items()):
        trace = s.trace
        mine = trace.of_block(block)
        for col, name in enumerate(inputs):
            ax = axes[row][col]
            counts = _matrix(s, name, s.reads)
            image = ax.imshow(np.where(counts > 0, counts, 0.1), cmap=cmap, norm=norm, interpolation="nearest")
            lo, hi = int(counts.min()), int(counts.max())
            reads = f"{lo}x" if lo == hi else f"{lo}x to {hi}x"
            ax.set_title((f"{label}:\n" if col == 0 else "\n") + f"{name} {s.shapes[name]}, each element read {reads}",
                         fontsize=9, loc="left")
            height_all, width = s.shapes[name]
            for a in (a for a in mine if a.kind == "load" and a.tensor == name):
                r, c = np.divmod(a.flat, width)
                if not r.size:
                    continue
                ax.add_patch(Rectangle((c.min() - 0.5, r.min() - 0.5), c.max() - c.min() + 1, r.max() - r.min() + 1,
                                       fill=False, ec="#D55E00", lw=1.6))
                thin = r.max() - r.min() < height_all / 12
                y = r.max() + height_all / 12 if thin else (r.min() + r.max()) / 2
                ax.text((c.min() + c.max()) / 2, y, str(mine.index(a) + 1), color="#D55E00", fontsize=9, ha="center",
                        va="center", fontweight="bold")
        ax = axes[row][2]
        owner = np.full(s.shapes[output], -1.0)
        stores = [a for a in trace.accesses if a.kind == "store" and a.tensor == output]
        order = {pid: i for i, pid in enumerate(sorted({a.pid for a in stores}))}
        for a in stores:
            owner.reshape(-1)[a.flat] = order[a.pid] % 2
        ax.imshow(owner, cmap="Greys", vmin=-1.5, vmax=3, interpolation="nearest")
        for a in stores:
            if a.pid == block:
                r, c = np.divmod(a.flat, s.shapes[output][1])
                ax.add_patch(Rectangle((c.min() - 0.5, r.min() - 0.5), c.max() - c.min() + 1, r.max() - r.min() + 1,
                                       fill=False, ec="#D55E00", lw=1.6))
        which = block[0] if len(block) == 1 else block
        ax.set_title(f"{output} {s.shapes[output]}: the parts of {len(order)} blocks,\nblock {which}'s part in orange",
                     fontsize=9, loc="left")
        for ax in axes[row]:
            ax.tick_params(labelsize=8)
    if image is not None:
        bar = fig.colorbar(image, ax=[axes[-1][0], axes[-1][1]], location="bottom", shrink=0.7, aspect=40)
        bar.set_label(f"reads per element of {' and '.join(inputs)} (log scale); orange: the tiles block {which} "
                      "loaded, in order", fontsize=9)
        bar.ax.tick_params(labelsize=8)
    return fig
