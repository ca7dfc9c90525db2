"""Drawings of a kernel run: which tiles were loaded when, reads per element, the roofline.

Text for the checks' feedback (:func:`reads_text`, :func:`timeline_text`) and SVG for the
notebook (:func:`stats_html`, which a :class:`~npu_lab.puzzles.cost.Stats` shows in Jupyter).
"""

from __future__ import annotations

import html
import math

import numpy as np

from .cost import Stats
from .debug import describe

_SHADES = " .:-=+*#%@"


def read_counts(stats: Stats, tensor: str) -> np.ndarray | None:
    """How many times each element of ``tensor`` was read, in the tensor's shape (2-d; debug runs only)."""
    counts = stats.reads.get(tensor)
    if counts is None:
        return None
    shape = stats.shapes.get(tensor, (len(counts),))
    arr = np.asarray(counts).reshape(shape) if shape else np.asarray(counts).reshape(1)
    return arr.reshape(1, -1) if arr.ndim == 1 else arr.reshape(arr.shape[0], -1)


def reads_summary(stats: Stats) -> str:
    """E.g. ``x read 1x per element, w read 5x`` (the tensors a debug run loaded from)."""
    parts = []
    for name, counts in stats.reads.items():
        c = np.asarray(counts)
        if c.size == 0 or not c.any():
            continue
        mean, top = c.mean(), int(c.max())
        parts.append(f"{name} read {mean:.3g}x per element" + (f" (up to {top}x)" if top > round(mean) else ""))
    return ", ".join(parts)


def reads_text(stats: Stats, tensor: str, width: int = 64, height: int = 16) -> str:
    """A character map of reads per element of ``tensor`` (``.`` once, darker more often, space never).

    Large tensors are shrunk to ``height`` x ``width`` cells, each showing the most-read element in it.
    """
    arr = read_counts(stats, tensor)
    if arr is None:
        return f"{tensor}: (no trace: run with debug=True)"
    rows, cols = arr.shape
    ry, rx = max(1, math.ceil(rows / height)), max(1, math.ceil(cols / width))
    top = max(1, int(arr.max()))
    lines = [f"{tensor} {stats.shapes.get(tensor)}: reads per element (' ' 0, '.' 1, '@' {top})"]
    for r in range(0, rows, ry):
        line = ""
        for c in range(0, cols, rx):
            v = int(arr[r:r + ry, c:c + rx].max())
            if v == 0:
                line += " "
            else:
                level = 1 + (v - 1) * (len(_SHADES) - 2) // max(1, top - 1) if top > 1 else 1
                line += _SHADES[min(len(_SHADES) - 1, level)]
        lines.append("|" + line + "|")
    return "\n".join(lines)


def timeline_text(stats: Stats, blocks: int = 3, per_block: int = 8) -> str:
    """Which tiles the first ``blocks`` blocks (in run order) loaded and stored, step by step."""
    trace = stats.trace
    if trace is None:
        return "(no trace: run with debug=True)"
    lines = []
    for pid in trace.blocks()[:blocks]:
        acc = trace.of_block(pid)
        label = pid if len(pid) > 1 else pid[0]
        lines.append(f"block {label}:")
        for a in acc[:per_block]:
            lines.append(f"  {a.step:3d}. {describe(a, stats.shapes)}")
        if len(acc) > per_block:
            lines.append(f"  ... {len(acc) - per_block} more")
    more = len(trace.blocks()) - blocks
    if more > 0:
        lines.append(f"... and {more} more blocks")
    return "\n".join(lines)


def _heatmap_svg(arr: np.ndarray, title: str, size: int = 180) -> str:
    rows, cols = arr.shape
    cell = max(1.0, min(size / max(rows, cols), 24.0))
    w, h = cols * cell, rows * cell
    top = max(1, int(arr.max()))
    rects = []
    for r in range(rows):
        for c in range(cols):
            v = int(arr[r, c])
            shade = 255 if v == 0 else int(230 - 180 * (v - 1) / max(1, top - 1)) if top > 1 else 180
            colour = "#ffffff" if v == 0 else f"rgb({shade},{shade},255)"
            rects.append(f'<rect x="{c * cell:.1f}" y="{r * cell:.1f}" width="{cell:.1f}" height="{cell:.1f}" '
                         f'fill="{colour}"><title>[{r},{c}] read {v}x</title></rect>')
    return (f'<div style="display:inline-block;margin:4px"><div>{html.escape(title)} (max {top}x)</div>'
            f'<svg width="{w + 2:.0f}" height="{h + 2:.0f}" style="border:1px solid #999">{"".join(rects)}</svg></div>')


def roofline_svg(stats: Stats, width: int = 320, height: int = 200) -> str:
    """The device's roofline (log-log) with this run as a dot."""
    r = stats.roofline()
    lo_i, hi_i = 1 / 64, 1024.0
    lo_p, hi_p = r.peak_gflops / 4096, r.peak_gflops * 2

    def xy(i: float, p: float) -> tuple[float, float]:
        x = (math.log(i) - math.log(lo_i)) / (math.log(hi_i) - math.log(lo_i)) * (width - 40) + 35
        y = height - 20 - (math.log(p) - math.log(lo_p)) / (math.log(hi_p) - math.log(lo_p)) * (height - 30)
        return x, y

    pts = [xy(lo_i, lo_i * r.bandwidth_gbs), xy(r.ridge, r.peak_gflops), xy(hi_i, r.peak_gflops)]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
    i = min(max(r.intensity, lo_i), hi_i)
    px, py = xy(i, max(min(r.attained_gflops, hi_p), lo_p))
    return (f'<svg width="{width}" height="{height}" style="border:1px solid #ccc">'
            f'<polyline points="{line}" fill="none" stroke="#333" stroke-width="2"/>'
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="5" fill="#d9480f"/>'
            f'<text x="40" y="14" font-size="11">GFLOP/s vs FLOP/B (log-log); ridge {r.ridge:.3g} FLOP/B</text>'
            f'<text x="{px + 8:.1f}" y="{py + 4:.1f}" font-size="11">{html.escape(stats.name)}</text></svg>')


def stats_html(stats: Stats) -> str:
    """The run's summary, its roofline and (debug runs) a reads-per-element map of each input."""
    maps = "".join(_heatmap_svg(read_counts(stats, n), n) for n in stats.reads
                   if np.asarray(stats.reads[n]).any() and np.asarray(stats.reads[n]).size <= 65536)
    return (f"<pre>{html.escape(stats.summary())}</pre>{roofline_svg(stats)}"
            + (f"<div>{maps}</div>" if maps else ""))


def first_block_text(stats: Stats, limit: int = 8) -> str:
    """One line: what the first block that ran loaded and stored, in order (debug runs only)."""
    trace = stats.trace
    if trace is None or not trace.blocks():
        return ""
    pid = trace.blocks()[0]
    acc = trace.of_block(pid)
    steps = ", ".join(describe(a, stats.shapes) for a in acc[:limit])
    more = f", ... ({len(acc) - limit} more)" if len(acc) > limit else ""
    return f"block {pid if len(pid) > 1 else pid[0]} did: {steps}{more}"
