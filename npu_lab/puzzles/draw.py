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


def _shrink(arr: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, int, int]:
    """``arr`` cut into at most ``rows`` x ``cols`` cells, each the largest value in it; and the cell's size."""
    ry, rx = max(1, math.ceil(arr.shape[0] / rows)), max(1, math.ceil(arr.shape[1] / cols))
    h, w = math.ceil(arr.shape[0] / ry), math.ceil(arr.shape[1] / rx)
    padded = np.zeros((h * ry, w * rx), arr.dtype)
    padded[:arr.shape[0], :arr.shape[1]] = arr
    return padded.reshape(h, ry, w, rx).max(axis=(1, 3)), ry, rx


def _heatmap_svg(arr: np.ndarray, title: str, size: int = 150, max_cells: tuple[int, int] = (24, 48)) -> str:
    """Reads per element as a small SVG: white never read, darker blue more often.

    Large tensors are shrunk to at most ``max_cells`` cells (each showing the most-read element in
    it), and a run of equal cells in a row is one rectangle, so the drawing stays a few KB.
    """
    cells, ry, rx = _shrink(arr, *max_cells)
    rows, cols = cells.shape
    cell = max(2, min(size // max(rows, cols), 12))  # whole pixels: no seams between rows
    top = max(1, int(arr.max()))
    lo = int(arr[arr > 0].min()) if arr.any() else 1
    rects = []
    for r in range(rows):
        c = 0
        while c < cols:
            v = int(cells[r, c])
            end = c
            while end + 1 < cols and int(cells[r, end + 1]) == v:
                end += 1
            if v:
                shade = int(220 - 170 * (v - lo) / (top - lo)) if top > lo else 140
                rects.append(f'<rect x="{c * cell:.1f}" y="{r * cell:.1f}" width="{(end - c + 1) * cell:.1f}" '
                             f'height="{cell:.1f}" fill="rgb({shade},{shade},255)"/>')
            c = end + 1
    scale = f"; 1 cell = {ry}x{rx} elements" if ry * rx > 1 else ""
    what = f"every element read {top}x" if lo == top else f"read {lo}x (light) to {top}x (dark), white never"
    return (f'<div style="display:inline-block;margin:4px;vertical-align:top;font-size:12px">'
            f'<div><b>{html.escape(title)}</b>: {what}{scale}</div><svg width="{cols * cell + 2:.0f}" '
            f'height="{rows * cell + 2:.0f}" shape-rendering="crispEdges" style="border:1px solid #999">'
            f'{"".join(rects)}</svg></div>')


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


def chip_svg(blocks: int = 4, scratchpad: int = 16 * 1024, width: int = 760, height: int = 210) -> str:
    """The picture of the programming model: a grid of cores, each with a scratchpad, over device memory."""
    from .model import _fmt_bytes

    gap = 14
    core_w = (width - 40 - gap * (blocks - 1)) / blocks
    parts = [f'<svg width="{width}" height="{height}" font-size="12" style="border:1px solid #ccc">',
             '<defs><marker id="arr" markerWidth="8" markerHeight="8" refX="6" refY="3" orient="auto">'
             '<path d="M0,0 L6,3 L0,6 z" fill="#555"/></marker></defs>',
             f'<text x="20" y="18">the chip: a grid of {blocks} blocks (cores), each runs the kernel with its own '
             'ctx.program_id(0)</text>']
    for b in range(blocks):
        x = 20 + b * (core_w + gap)
        parts.append(f'<rect x="{x:.1f}" y="28" width="{core_w:.1f}" height="86" rx="6" fill="#e7f5ff" '
                     'stroke="#1971c2"/>'
                     f'<text x="{x + 8:.1f}" y="46">block {b}: program_id = {b}</text>'
                     f'<rect x="{x + 8:.1f}" y="56" width="{core_w - 16:.1f}" height="48" rx="4" fill="#fff4e6" '
                     'stroke="#f08c00"/>'
                     f'<text x="{x + 14:.1f}" y="76">scratchpad {_fmt_bytes(scratchpad)}</text>'
                     f'<text x="{x + 14:.1f}" y="94" fill="#555">tiles live here</text>'
                     f'<line x1="{x + core_w * 0.35:.1f}" y1="150" x2="{x + core_w * 0.35:.1f}" y2="108" '
                     'stroke="#555" marker-end="url(#arr)"/>'
                     f'<line x1="{x + core_w * 0.65:.1f}" y1="108" x2="{x + core_w * 0.65:.1f}" y2="150" '
                     'stroke="#555" marker-end="url(#arr)"/>')
    parts.append(f'<text x="{20 + core_w * 0.35 + 4:.1f}" y="132" fill="#555">load</text>'
                 f'<text x="{20 + core_w * 0.65 + 4:.1f}" y="132" fill="#555">store</text>'
                 f'<rect x="20" y="152" width="{width - 40}" height="40" rx="6" fill="#ebfbee" stroke="#2f9e44"/>'
                 '<text x="32" y="176">device memory: the npu tensors (large, slow: every byte loaded or stored is '
                 'counted and costs time)</text></svg>')
    return "".join(parts)


def stats_html(stats: Stats) -> str:
    """The run's summary, its roofline and (debug runs) a reads-per-element map of each input and its first tiles."""
    maps = "".join(_heatmap_svg(read_counts(stats, n), n) for n in stats.reads if np.asarray(stats.reads[n]).any())
    steps = ""
    if stats.trace is not None:
        steps = (f"<details><summary>which tiles the first blocks loaded and stored, in order</summary>"
                 f"<pre>{html.escape(timeline_text(stats, blocks=2, per_block=6))}</pre></details>")
    return (f"<pre>{html.escape(stats.summary())}</pre><div>{roofline_svg(stats)}{maps}</div>{steps}")


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
