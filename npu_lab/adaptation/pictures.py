"""Chapters 8a and 8b's pictures, drawn as plain SVG text (deterministic, so notebooks can compare them).

* :func:`three_ways_svg` - the three ways into PyTorch as one stack: what the chip
  team writes at each layer;
* :func:`timeline_svg` - profiles of the same work on one simulated time axis;
* :func:`roofline_svg` - kernels placed on the cost model's roofline;
* :func:`coverage_svg` - which ATen operators real models reach, and how the NPU runs them;
* :func:`partitions_drawing` - an FX graph with the partitions of a ``CapabilityBasedPartitioner`` boxed.

Every function but the last returns an :class:`Svg`, which a notebook displays as a drawing and
whose ``.text`` is the SVG source (the last, a graphviz drawing). Widths stay at or under 1100 px.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .measure import CATEGORY_COLORS, category

MAX_WIDTH = 1100
_FONT = "font-family='DejaVu Sans, Arial, sans-serif'"


@dataclass(frozen=True)
class Svg:
    """An SVG drawing: ``text`` is its source, a notebook shows it as a picture."""

    text: str
    width: int
    height: int

    def _repr_svg_(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"<Svg drawing, {self.width}x{self.height} px>"


def _esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def _svg(width: int, height: int, body: list[str]) -> Svg:
    if width > MAX_WIDTH:
        raise ValueError(f"drawing is {width} px wide; the notebook fits {MAX_WIDTH} px")
    head = (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
            f"viewBox='0 0 {width} {height}' {_FONT} font-size='12'>")
    return Svg("\n".join([head, f"<rect width='{width}' height='{height}' fill='white'/>", *body, "</svg>"]),
               width, height)


def _text(x: float, y: float, s: str, size: int = 12, anchor: str = "start", weight: str = "normal",
          color: str = "#222") -> str:
    return (f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='{anchor}' font-weight='{weight}' "
            f"fill='{color}'>{_esc(s)}</text>")


def _box(x: float, y: float, w: float, h: float, fill: str, lines: Sequence[str], stroke: str = "#555",
         title: str = "", bold_first: bool = True) -> list[str]:
    out = [f"<rect x='{x}' y='{y}' width='{w}' height='{h}' rx='6' fill='{fill}' stroke='{stroke}'/>"]
    top = y + h / 2 - 7 * (len(lines) - 1) + 4
    for i, line in enumerate(lines):
        out.append(_text(x + w / 2, top + 14 * i, line, 12 if i == 0 else 11, "middle",
                         "bold" if (i == 0 and bold_first) else "normal"))
    if title:
        out.append(_text(x + w - 6, y + h - 6, title, 10, "end", "bold", stroke))
    return out


def _arrow(x1: float, y1: float, x2: float, y2: float, color: str = "#444", dash: bool = False) -> str:
    d = " stroke-dasharray='5,4'" if dash else ""
    return (f"<line x1='{x1}' y1='{y1}' x2='{x2}' y2='{y2}' stroke='{color}' stroke-width='1.6'{d} "
            f"marker-end='url(#arrow)'/>")


#: The colour of each way's boxes in :func:`three_ways_svg`.
WAY_COLORS = {1: "#cfe2ff", 2: "#ffe0b3", 3: "#d3f2d3"}
_WAY_STROKES = {1: "#2f62b5", 2: "#c77700", 3: "#2e8b2e"}
_PYTORCH = "#eeeeee"


def three_ways_svg() -> Svg:
    """The three ways into PyTorch as one stack: grey layers are PyTorch's, coloured ones the chip team writes.

    Way 1 (blue) is under everything: the ATen kernels registered on ``PrivateUse1`` and
    the C++ runtime. Way 2 (orange) is a ``torch.compile`` backend with graph passes.
    Way 3 (green) is the device's scheduling and wrapper inside Inductor.
    """
    w, h = 960, 560
    lane = [(20, 290), (330, 290), (650, 290)]
    body = ["<defs><marker id='arrow' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='7' markerHeight='7' "
            "orient='auto-start-reverse'><path d='M 0 0 L 10 5 L 0 10 z' fill='#444'/></marker></defs>"]
    body.append(_text(w / 2, 22, "Three ways into PyTorch: grey = PyTorch's, coloured = what the chip team writes",
                      14, "middle", "bold"))
    body += _box(20, 36, 920, 40, _PYTORCH, ["your program: model(x), loss.backward(), optimizer.step()"])
    for i, (x, wd) in enumerate(lane, start=1):
        body.append(_text(x + wd / 2, 96, ["way 1 · eager", "way 2 · torch.compile(backend='npu')",
                                            "way 3 · torch.compile(backend='inductor')"][i - 1],
                          12, "middle", "bold", _WAY_STROKES[i]))
    # way 1: straight to the dispatcher
    body += _box(20, 106, 290, 170, _PYTORCH, ["each operator call, one at a time", "autograd records the graph",
                                               "as it runs (no capture)"])
    # ways 2 and 3: capture
    body += _box(330, 106, 610, 50, _PYTORCH, ["Dynamo captures an FX graph; AOTAutograd traces",
                                               "forward and backward ATen graphs (chapters 5b, 6)"])
    body += _box(330, 166, 290, 110, WAY_COLORS[2],
                 ["the npu backend's passes", "pattern + pointwise fusion, layout,", "constant folding, memory plan,",
                  "launch plans (npu_lab/compiler)"], _WAY_STROKES[2], "way 2")
    body += _box(650, 166, 290, 40, _PYTORCH, ["Inductor: lowering, fusion decisions,",
                                               "memory planning"])
    body += _box(650, 214, 290, 62, WAY_COLORS[3], ["the device's scheduling + wrapper",
                                                    "numba code for fused loop nests",
                                                    "(npu_lab/inductor)"], _WAY_STROKES[3], "way 3")
    # dispatcher and below: shared
    # the dispatcher's text stays left of way 2's arrow, which passes by it
    body += _box(20, 300, 920, 40, _PYTORCH, [])
    body.append(_text(245, 317, "the dispatcher: tensors on npu carry the PrivateUse1 key;", 12, "middle", "bold"))
    body.append(_text(245, 331, "each ATen call finds its kernel (chapter 7)", 11, "middle"))
    body += _box(20, 350, 920, 56, WAY_COLORS[1],
                 ["ATen kernels for PrivateUse1", "numba kernels registered with torch.library (npu_lab/ops);"
                  " empty, views, copies with TORCH_LIBRARY_IMPL in C++ (csrc/aten)"], _WAY_STROKES[1], "way 1")
    body += _box(20, 416, 920, 56, WAY_COLORS[1],
                 ["the C++ runtime (csrc/runtime)", "caching allocator (REGISTER_ALLOCATOR), device guard "
                  "(C10_REGISTER_GUARD_IMPL), PrivateUse1 hooks, generators"], _WAY_STROKES[1], "way 1")
    body += _box(20, 482, 920, 56, WAY_COLORS[1],
                 ["the driver and the chip (csrc/driver: simulated here; the chip team's, like libcudart)",
                  "device memory, streams, events, the roofline clock every kernel advances"], _WAY_STROKES[1])
    # arrows
    body.append(_arrow(34, 76, 34, 106))
    body.append(_arrow(344, 76, 344, 106))
    body.append(_arrow(165, 276, 165, 300))
    body.append(_arrow(475, 156, 475, 166))
    body.append(_arrow(795, 156, 795, 166))
    body.append(_arrow(795, 206, 795, 214))
    body.append(_arrow(475, 276, 475, 350))  # launch plans call the kernels, past the dispatcher
    body.append(_arrow(795, 276, 795, 300))
    body.append(_text(480, 293, "kernels, called directly (past the dispatcher)", 10, "start", "normal",
                      _WAY_STROKES[2]))
    body.append(_text(800, 293, "ATen calls (mm, conv)", 10, "start", "normal", _WAY_STROKES[3]))
    return _svg(w, h, body)


def _nice_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), default=10 * mag)
    first = math.ceil(lo / step) * step
    return [round(first + i * step, 6) for i in range(int((hi - first) / step + 1e-9) + 1)]


def timeline_svg(profiles: Mapping[str, Any], width: int = 1000, title: str = "") -> Svg:
    """Each profile's device events on one shared simulated-time axis, a row per profile.

    ``profiles`` maps a label to an ``npu_lab.profile()`` result. Time starts at each
    profile's first event; colours are :func:`npu_lab.adaptation.measure.category`'s.
    Hover over a bar for the kernel's name and simulated time.
    """
    if not profiles:
        raise ValueError("timeline_svg needs at least one profile")
    rows = []
    for label, prof in profiles.items():
        events = list(prof.kernels)
        if not events:
            raise ValueError(f"profile {label!r} recorded no device events")
        t0 = min(k.start_us for k in events)
        rows.append((label, t0, events, max(k.end_us for k in events) - t0))
    longest = max(r[3] for r in rows)
    left, right, row_h, top = 250, 70, 30, 34 if title else 14
    plot_w = width - left - right
    scale = plot_w / longest
    height = top + len(rows) * (row_h + 12) + 70
    body = [_text(width / 2, 20, title, 13, "middle", "bold")] if title else []
    axis_y = top + len(rows) * (row_h + 12)
    for t in _nice_ticks(0, longest):
        x = left + t * scale
        body.append(f"<line x1='{x:.1f}' y1='{top - 4}' x2='{x:.1f}' y2='{axis_y}' stroke='#ddd'/>")
        body.append(_text(x, axis_y + 14, f"{t:g}", 10, "middle"))
    body.append(_text(left + plot_w / 2, axis_y + 30, "simulated device time (us)", 11, "middle"))
    for i, (label, t0, events, total) in enumerate(rows):
        y = top + i * (row_h + 12)
        n = sum(k.kind == "kernel" for k in events)
        body.append(_text(left - 8, y + 13, label, 12, "end", "bold"))
        body.append(_text(left - 8, y + 27, f"{n} launches, {len(events) - n} copies", 10, "end"))
        for k in events:
            x = left + (k.start_us - t0) * scale
            wd = max((k.end_us - k.start_us) * scale - 1.0, 1.0)
            c = CATEGORY_COLORS[category(k)]
            body.append(f"<rect x='{x:.1f}' y='{y}' width='{wd:.1f}' height='{row_h}' fill='{c}' stroke='#333' "
                        f"stroke-width='0.4'><title>{_esc(k.name)}: {k.end_us - k.start_us:.2f} us</title></rect>")
        body.append(_text(left + total * scale + 6, y + 19, f"{total:.1f} us", 11))
    lx = left
    for name, color in CATEGORY_COLORS.items():
        body.append(f"<rect x='{lx}' y='{axis_y + 42}' width='12' height='12' fill='{color}' stroke='#333' "
                    "stroke-width='0.4'/>")
        body.append(_text(lx + 16, axis_y + 52, name, 11))
        lx += 24 + 6.6 * len(name)
    return _svg(width, height, body)


def _log_pos(v: float, lo: float, hi: float, size: float) -> float:
    return (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * size


def roofline_svg(groups: Mapping[str, Sequence[Any]], cost_model: Any, width: int = 860,
                 height: int = 440) -> Svg:
    """Kernels on the cost model's roofline: achieved GFLOP/s against FLOPs per byte, both log scale.

    ``groups`` maps a legend label to kernel events (``prof.kernels``); copies and kernels
    without FLOPs (whose intensity is zero) cannot be placed and are counted in the legend.
    The solid line is the roof ``min(peak, intensity x bandwidth)``; the dashed curves are what
    kernels moving 10 KB and 10 MB reach once the launch latency is included. As in chapter P0's
    drawing (its axes' wording, the peak and the ridge point labelled, the bounds named along the bottom),
    with the lines named in the legend on the right: no label sits on a line.
    """
    peak, bw, launch = cost_model.peak_gflops, cost_model.bandwidth_gbs, cost_model.launch_us
    xlo, xhi, ylo, yhi = 0.01, 1000.0, 0.001, peak * 10
    left, bottom, top, right = 70, 50, 30, 290
    pw, ph = width - left - right, height - top - bottom

    def px(v: float) -> float:
        return left + _log_pos(min(max(v, xlo), xhi), xlo, xhi, pw)

    def py(v: float) -> float:
        return top + ph - _log_pos(min(max(v, ylo), yhi), ylo, yhi, ph)

    body = [_text(left + pw / 2, 18, f"roofline of the simulated NPU: peak {peak:g} GFLOP/s, {bw:g} GB/s, "
                  f"launch {launch:g} us", 12, "middle", "bold")]
    for e in range(-2, 4):
        x = px(10.0 ** e)
        body.append(f"<line x1='{x:.1f}' y1='{top}' x2='{x:.1f}' y2='{top + ph}' stroke='#eee'/>")
        body.append(_text(x, top + ph + 14, f"{10.0 ** e:g}", 10, "middle"))
    for e in range(-3, int(math.log10(yhi)) + 1):
        y = py(10.0 ** e)
        body.append(f"<line x1='{left}' y1='{y:.1f}' x2='{left + pw}' y2='{y:.1f}' stroke='#eee'/>")
        body.append(_text(left - 6, y + 4, f"{10.0 ** e:g}", 10, "end"))
    body.append(f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='none' stroke='#888'/>")
    body.append(_text(left + pw / 2, top + ph + 32, "arithmetic intensity: FLOPs per byte of device memory moved "
                      "(log)", 11, "middle"))
    body.append(f"<text x='16' y='{top + ph / 2:.1f}' font-size='11' text-anchor='middle' "
                f"transform='rotate(-90 16 {top + ph / 2:.1f})'>GFLOP/s reached, simulated (log)</text>")
    ridge = peak / bw
    body.append(f"<line x1='{px(ridge):.1f}' y1='{py(peak):.1f}' x2='{px(ridge):.1f}' y2='{top + ph}' "
                "stroke='#777' stroke-dasharray='2,3'/>")
    body.append(f"<circle cx='{px(ridge):.1f}' cy='{py(peak):.1f}' r='3' fill='#000'/>")
    xs = [10 ** (i / 20) for i in range(-40, 61)]
    roof = " ".join(f"{px(x):.1f},{py(min(peak, x * bw)):.1f}" for x in xs)
    body.append(f"<polyline points='{roof}' fill='none' stroke='#000' stroke-width='2'/>")
    curves = []
    for nbytes, label, dash in ((1e7, "10 MB", "6,3"), (1e4, "10 KB", "2,3")):
        def reach(x: float, nbytes: float = nbytes) -> float:
            return x * nbytes / 1e3 / cost_model.kernel_us(x * nbytes, nbytes)

        pts = " ".join(f"{px(x):.1f},{py(reach(x)):.1f}" for x in xs)
        body.append(f"<polyline points='{pts}' fill='none' stroke='#888' stroke-dasharray='{dash}'/>")
        curves.append((f"best of a {label} kernel, launch included", dash))
    # as chapter P0 labels its roofline: the peak above the flat roof, the ridge point beside its dotted line,
    # the bounds along the bottom (no label on a line)
    body.append(_text(left + pw - 6, py(peak * 3.2), f"peak: {peak:g} GFLOP/s", 10, "end", "normal", "#333"))
    body.append(_text(px(ridge) + 6, py(math.sqrt(ylo * peak)), f"ridge point: {ridge:g} FLOP/B", 10, "start",
                      "normal", "#333"))
    body.append(_text(left + 6, top + ph - 8, "memory-bound: left of the ridge", 10, "start", "normal", "#555"))
    body.append(_text(left + pw - 6, top + ph - 8, "compute-bound: right of it", 10, "end", "normal", "#555"))
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
    lx, ly = left + pw + 16, top + 8
    body.append(f"<line x1='{lx - 6}' y1='{ly}' x2='{lx + 14}' y2='{ly}' stroke='#000' stroke-width='2'/>")
    body.append(_text(lx + 20, ly + 4, "the roof: min(peak, intensity x bandwidth)", 11))
    for label, dash in curves:
        ly += 18
        body.append(f"<line x1='{lx - 6}' y1='{ly}' x2='{lx + 14}' y2='{ly}' stroke='#888' "
                    f"stroke-dasharray='{dash}'/>")
        body.append(_text(lx + 20, ly + 4, label, 11))
    ly += 30
    for gi, (label, kernels) in enumerate(groups.items()):
        color = palette[gi % len(palette)]
        placed = [k for k in kernels if k.kind == "kernel" and k.flops > 0 and k.bytes > 0]
        unplaced = sum(1 for k in kernels if k not in placed)
        for k in placed:
            achieved = k.flops / ((k.end_us - k.start_us) * 1e3)
            body.append(f"<circle cx='{px(k.intensity):.1f}' cy='{py(achieved):.1f}' r='4' fill='{color}' "
                        f"fill-opacity='0.75' stroke='#222' stroke-width='0.5'><title>{_esc(k.name)}: "
                        f"{k.intensity:.2f} FLOP/B, {achieved:.2f} GFLOP/s</title></circle>")
        body.append(f"<circle cx='{lx + 4}' cy='{ly}' r='5' fill='{color}'/>")
        body.append(_text(lx + 20, ly + 4, f"{label}: {len(placed)} kernel{'s' if len(placed) != 1 else ''}", 11))
        if unplaced:
            body.append(_text(lx + 20, ly + 17, f"({unplaced} without FLOPs, not placed)", 9, "start", "normal",
                              "#777"))
        ly += 32 if unplaced else 22
    return _svg(width, max(height, int(ly) + 10), body)


COVERAGE_COLORS = {"native": "#4caf50", "composite": "#90caf9", "fallback": "#ffb74d", "missing": "#e57373"}


def coverage_svg(reports: Mapping[str, Any], width: int = 1000) -> Svg:
    """Which ATen operators each model reaches (forward and backward) and how the NPU runs them.

    ``reports`` maps a model name to ``npu_lab.coverage(...)``'s report. The top part is a
    bar per model (native / composite / CPU fallback / missing operators); below, a grid of
    the operators with an NPU kernel: one row per operator, most widely needed first, a
    filled cell when that model reaches it.
    """
    if not reports:
        raise ValueError("coverage_svg needs at least one report")
    names = list(reports)
    users: dict[str, list[str]] = {}
    for name, r in reports.items():
        for op in r.native:
            users.setdefault(op, []).append(name)
    ops = sorted(users, key=lambda op: (-len(users[op]), op))
    cols = 2
    per_col = math.ceil(len(ops) / cols)
    cell, label_w = 18, 210
    block_w = label_w + cell * len(names) + 20
    if cols * block_w + 20 > width:
        raise ValueError(f"{len(names)} models do not fit in {width} px")
    bar_top, bar_h = 40, 18
    most = max(len(r.ops) for r in reports.values())
    bar_scale = (width - 420) / most
    grid_top = bar_top + len(names) * (bar_h + 6) + 110
    height = grid_top + per_col * 14 + 40
    body = [_text(width / 2, 20, "ATen operators real models reach (forward + backward) and how the npu runs them",
                  13, "middle", "bold")]
    for i, name in enumerate(names):
        r = reports[name]
        y = bar_top + i * (bar_h + 6)
        body.append(_text(170, y + 13, name, 12, "end"))
        x = 180.0
        for kind in ("native", "composite", "fallback", "missing"):
            n = len(getattr(r, kind))
            if n:
                body.append(f"<rect x='{x:.1f}' y='{y}' width='{n * bar_scale:.1f}' height='{bar_h}' "
                            f"fill='{COVERAGE_COLORS[kind]}'><title>{n} {kind}</title></rect>")
                body.append(_text(x + n * bar_scale / 2, y + 13, str(n), 10, "middle"))
                x += n * bar_scale
        body.append(_text(x + 8, y + 13, f"{len(r.ops)} operators", 11))
    ly = bar_top + len(names) * (bar_h + 6) + 6
    lx = 180
    for kind, color in COVERAGE_COLORS.items():
        body.append(f"<rect x='{lx}' y='{ly}' width='12' height='12' fill='{color}'/>")
        body.append(_text(lx + 16, ly + 10, kind if kind != "fallback" else "CPU fallback", 11))
        lx += 110
    body.append(_text(20, grid_top - 68, f"the {len(ops)} operators with an npu kernel that these models reach, "
                      "most widely needed first", 12, "start", "bold"))
    for c in range(cols):
        x0 = 20 + c * block_w
        for j, name in enumerate(names):
            cx = x0 + label_w + j * cell + cell / 2
            body.append(f"<text x='{cx:.1f}' y='{grid_top - 6}' font-size='9' text-anchor='start' "
                        f"transform='rotate(-35 {cx:.1f} {grid_top - 6})'>{_esc(name[:10])}</text>")
        for r_i, op in enumerate(ops[c * per_col:(c + 1) * per_col]):
            y = grid_top + r_i * 14
            body.append(_text(x0 + label_w - 6, y + 10, op.removeprefix("aten::"), 10, "end"))
            for j, name in enumerate(names):
                fill = COVERAGE_COLORS["native"] if name in users[op] else "#f2f2f2"
                body.append(f"<rect x='{x0 + label_w + j * cell + 1}' y='{y}' width='{cell - 2}' height='12' "
                            f"fill='{fill}'/>")
    return _svg(width, height, body)


#: Fill colours of the partitions in :func:`partitions_drawing` (a node no partition holds: the CPU's colour).
PARTITION_COLORS = ["#cfe2ff", "#d3f2d3", "#ffe0b3", "#e9d5ff", "#c7f0f0", "#fde2e4"]
_CPU_COLOR = "#f8d7da"


def partitions_drawing(gm: Any, partitions: Sequence[Any], title: str = "", max_nodes: int = 80) -> Any:
    """An FX graph with the partitions a ``CapabilityBasedPartitioner`` proposed drawn as boxes around their nodes.

    Each partition is a cluster of its own colour; an operator no partition holds (one the device lacks: it
    runs on the CPU) is red. Parameters and inputs stay outside. Returns a graph :class:`~npu_lab.inspect.draw
    .Drawing` (SVG from graphviz-pure).
    """
    from ..inspect.draw import Drawing, _esc, fx_lines

    graph = gm.graph
    owner = {n.name: i for i, p in enumerate(partitions) for n in p.nodes}
    style = {}
    for n in graph.nodes:
        if n.name in owner:
            style[n.name] = (None, PARTITION_COLORS[owner[n.name] % len(PARTITION_COLORS)], "")
        elif n.op == "call_function":
            style[n.name] = (None, _CPU_COLOR, 'color="#b02a37", penwidth=1.5')
    lines = fx_lines(graph, max_nodes=max_nodes, style=style,
                     notes={n: "on the CPU" for n, s in style.items() if s[1] == _CPU_COLOR})
    node_lines = {line.split('"')[1]: line for line in lines if " [label=" in line and " -> " not in line}
    rest = [line for line in lines if line not in node_lines.values()]
    out = ["digraph G {", '  rankdir=TB; node [fontname="Helvetica", fontsize=10, style=filled];',
           '  edge [fontname="Helvetica", fontsize=8, color="#6b7280"];']
    if title:
        out.append(f'  label="{_esc(title)}"; labelloc=t; fontname="Helvetica";')
    for i, p in enumerate(partitions):
        names = [n.name for n in graph.nodes if n.name in owner and owner[n.name] == i and n.name in node_lines]
        out.append(f'  subgraph "cluster_{i}" {{ label="partition {getattr(p, "id", i)}: on the npu"; '
                   f'style="rounded"; color="#2f62b5"; fontname="Helvetica"; fontsize=10;')
        out += ["  " + node_lines[name] for name in names]
        out.append("  }")
    clustered = set(owner)
    out += [line for name, line in node_lines.items() if name not in clustered]
    out += rest
    out.append("}")
    return Drawing("\n".join(out), title, max_width_px=900)
