"""The :class:`Profile` a ``with npu_lab.profile()`` block produces, and its views."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..device import clock
from . import recorder
from .recorder import HostEvent, KernelEvent, MemoryEvent, OpEvent


@dataclass
class Row:
    """One line of the summary table (all calls of one kernel name)."""

    name: str
    calls: int = 0
    sim_us: float = 0.0
    wall_us: float = 0.0
    flops: float = 0.0
    bytes: int = 0

    @property
    def avg_sim_us(self) -> float:
        return self.sim_us / self.calls if self.calls else 0.0


@dataclass
class Profile:
    """Everything recorded in one profiling block.

    Attributes:
        ops: top-level ATen operator calls, in order.
        kernels: kernel launches and copies on the simulated device, in order.
        memory: allocations and frees.
        fallbacks: operators that ran on the CPU through the fallback.
        host: where the simulated host waited for the device, or launched a graph (each kernel's
            issue interval is on the kernel itself: ``host_start_us`` .. ``host_end_us``).
    """

    ops: list[OpEvent] = field(default_factory=list)
    kernels: list[KernelEvent] = field(default_factory=list)
    host: list[HostEvent] = field(default_factory=list)
    memory: list[MemoryEvent] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)
    _t0: float = 0.0
    _rec: object = None

    # -- context manager -----------------------------------------------------------
    def __enter__(self) -> Profile:
        self._t0 = time.perf_counter()
        self._rec = recorder.start(self)
        return self

    def __exit__(self, *exc: object) -> None:
        recorder.stop(self._rec)
        self._rec = None

    # -- numbers ---------------------------------------------------------------------
    @property
    def launches(self) -> int:
        return sum(k.kind == "kernel" for k in self.kernels)

    @property
    def sim_time_us(self) -> float:
        """Simulated device time from the first kernel's start to the last one's end."""
        if not self.kernels:
            return 0.0
        return max(k.end_us for k in self.kernels) - min(k.start_us for k in self.kernels)

    @property
    def host_issue_us(self) -> float:
        """Simulated host time spent issuing the kernels and copies."""
        return sum(k.host_end_us - k.host_start_us for k in self.kernels)

    @property
    def host_span_us(self) -> float:
        """Simulated host time from the first launch it issued to the end of its last launch or wait:
        what the program took as the host saw it (a copy from pageable memory includes its staging)."""
        spans = [(k.host_start_us, k.host_end_us) for k in self.kernels] + [(h.start_us, h.end_us) for h in self.host]
        if not spans:
            return 0.0
        return max(e for _, e in spans) - min(s for s, _ in spans)

    @property
    def host_wait_us(self) -> float:
        """Simulated host time spent waiting for the device."""
        return sum(h.sim_us for h in self.host if h.kind == "sync")

    @property
    def device_busy_us(self) -> float:
        """Simulated time at least one stream of the device was running something."""
        spans = sorted((k.start_us, k.end_us) for k in self.kernels)
        busy, end = 0.0, float("-inf")
        for s, e in spans:
            if e > end:
                busy += e - max(s, end)
                end = e
        return busy

    @property
    def device_idle_us(self) -> float:
        """Simulated time between the first kernel's start and the last one's end with every stream
        idle: in a launch-bound program, the device waiting for the host."""
        return self.sim_time_us - self.device_busy_us

    @property
    def bytes_moved(self) -> int:
        return sum(k.bytes for k in self.kernels if k.kind == "kernel")

    @property
    def copy_bytes(self) -> int:
        return sum(k.bytes_read for k in self.kernels if k.kind == "copy")

    @property
    def peak_allocated(self) -> int:
        return max((m.allocated_after for m in self.memory), default=0)

    def key_averages(self, group_by: str = "kernel") -> list[Row]:
        """Rows grouped by kernel name (``group_by="kernel"``) or by ATen operator (``"op"``)."""
        rows: dict[str, Row] = {}
        for k in self.kernels:
            key = k.name if group_by == "kernel" else (k.op or k.name)
            row = rows.setdefault(key, Row(key))
            row.calls += 1
            row.sim_us += k.sim_us
            row.flops += k.flops
            row.bytes += k.bytes
        if group_by == "op":
            for op in self.ops:
                rows.setdefault(op.name, Row(op.name)).wall_us += op.wall_us
        else:
            counted: set[int] = set()
            for op in self.ops:
                for i in op.kernels:
                    if i not in counted:
                        counted.add(i)
                        rows[self.kernels[i].name].wall_us += op.wall_us / max(1, len(op.kernels))
        return list(rows.values())

    def table(self, sort_by: str = "sim_us", row_limit: int = 20, group_by: str = "kernel") -> str:
        """A text table like ``prof.key_averages().table()``, sorted by ``sort_by``.

        ``sort_by`` is one of ``sim_us``, ``wall_us``, ``calls``, ``flops``, ``bytes``.
        """
        rows = sorted(self.key_averages(group_by), key=lambda r: getattr(r, sort_by), reverse=True)
        total = sum(r.sim_us for r in rows) or 1.0
        head = (f"{'name':<34}{'calls':>6}{'sim total us':>14}{'sim %':>7}{'sim avg us':>12}"
                f"{'host us':>11}{'GFLOP':>9}{'MB':>9}")
        lines = [head, "-" * len(head)]
        for r in rows[:row_limit]:
            lines.append(f"{r.name[:33]:<34}{r.calls:>6}{r.sim_us:>14.1f}{100 * r.sim_us / total:>6.1f}%"
                         f"{r.avg_sim_us:>12.2f}{r.wall_us:>11.1f}{r.flops / 1e9:>9.3f}{r.bytes / 1e6:>9.2f}")
        lines.append("-" * len(head))
        lines.append(f"{len(self.kernels)} events ({self.launches} kernel launches), simulated device time "
                     f"{self.sim_time_us:.1f} us, {self.bytes_moved / 1e6:.2f} MB moved by kernels, "
                     f"{self.copy_bytes / 1e6:.2f} MB copied host<->device"
                     + (f", {len(self.fallbacks)} CPU fallbacks" if self.fallbacks else ""))
        if self.host_issue_us:  # a chip whose host costs something to issue work (not the teaching chip)
            lines.append(f"simulated host: {self.host_issue_us:.1f} us issuing, {self.host_wait_us:.1f} us waiting; "
                         f"device idle {self.device_idle_us:.1f} us of {self.sim_time_us:.1f} us")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return "<pre>" + self.table().replace("&", "&amp;").replace("<", "&lt;") + "</pre>"

    # -- exports and plots ---------------------------------------------------------------
    def chrome_trace(self) -> dict:
        """The profile in the Trace Event format (Perfetto, chrome://tracing)."""
        events = [
            {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "npu:0 (simulated clock)"}},
            {"name": "thread_name", "ph": "M", "pid": 0, "tid": -1, "args": {"name": "host"}},
        ]
        for k in self.kernels:
            if k.host_end_us > k.host_start_us:
                events.append({"name": "launch " + k.name, "cat": "host", "ph": "X", "pid": 0, "tid": -1,
                               "ts": k.host_start_us, "dur": k.host_end_us - k.host_start_us})
        for h in self.host:
            events.append({"name": h.name, "cat": h.kind, "ph": "X", "pid": 0, "tid": -1, "ts": h.start_us,
                           "dur": max(h.sim_us, 0.001)})
        for s in sorted({k.stream for k in self.kernels}):
            events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": s,
                           "args": {"name": self.lane_name(s)}})
        for k in self.kernels:
            events.append({
                "name": k.name, "cat": k.kind, "ph": "X", "pid": 0, "tid": k.stream,
                "ts": k.start_us, "dur": max(k.sim_us, 0.001),
                "args": {"op": k.op, "flops": k.flops, "bytes_read": k.bytes_read,
                         "bytes_written": k.bytes_written, "ranges": list(k.ranges)},
            })
        for m in self.memory:
            events.append({"name": "allocated", "ph": "C", "pid": 0, "ts": m.sim_us,
                           "args": {"bytes": m.allocated_after}})
        return {"traceEvents": events, "displayTimeUnit": "ns"}

    @property
    def comm_streams(self) -> set[int]:
        """Streams that ran only collectives (npuccl's communication stream): the comm lanes."""
        kinds: dict[int, set[str]] = defaultdict(set)
        for k in self.kernels:
            kinds[k.stream].add(k.kind)
        return {s for s, ks in kinds.items() if ks == {"collective"}}

    def lane_name(self, stream: int) -> str:
        """How timelines label ``stream``: ``"stream 1 (comm)"`` for a communication stream."""
        return f"stream {stream} (comm)" if stream in self.comm_streams else f"stream {stream}"

    def export_chrome_trace(self, path: str | Path) -> Path:
        """Write :meth:`chrome_trace` as JSON to ``path``."""
        path = Path(path)
        path.write_text(json.dumps(self.chrome_trace()))
        return path

    @property
    def has_host_lane(self) -> bool:
        """Whether the host's time line has something to draw: issue costs (a chip whose host costs
        something per launch) or graph launches."""
        return any(h.kind == "graph" for h in self.host) or any(k.host_end_us > k.host_start_us for k in self.kernels)

    def plot_timeline(self, ax=None, host: bool | None = None, relative: bool = False, title: str = "NPU timeline"):
        """A Gantt chart of kernels per stream on the simulated clock, under a host lane (issuing
        in grey, a graph launch dark, waiting for the device hatched) when the chip's host costs
        something per launch or a graph was launched (``host=True`` / ``False`` forces it on or off).
        ``relative=True`` starts the time axis at the profile's first event (to compare profiles)."""
        import matplotlib.pyplot as plt

        host = self.has_host_lane if host is None else host
        ax = ax or plt.subplots(figsize=(10, 2.5))[1]
        t0 = 0.0
        if relative:
            starts = [k.start_us for k in self.kernels] + [h.start_us for h in self.host]
            starts += [k.host_start_us for k in self.kernels] if host else []
            t0 = min(starts, default=0.0)
        colors: dict[str, str] = {}
        palette = plt.get_cmap("tab20").colors
        for k in self.kernels:
            c = colors.setdefault(k.name, palette[len(colors) % len(palette)])
            ax.broken_barh([(k.start_us - t0, max(k.sim_us, 0.01))], (k.stream - 0.4, 0.8), color=c)
        lanes = sorted({k.stream for k in self.kernels}) or [0]
        labels = [self.lane_name(s) for s in lanes]
        if host:
            y = min(lanes) - 1
            issued = [(k.host_start_us - t0, k.host_end_us - k.host_start_us) for k in self.kernels
                      if k.host_end_us > k.host_start_us]
            ax.broken_barh(issued, (y - 0.4, 0.8), facecolor="0.65", edgecolor="white", linewidth=0.5)
            waits = [(h.start_us - t0, h.sim_us) for h in self.host if h.kind == "sync"]
            ax.broken_barh(waits, (y - 0.4, 0.8), facecolor="white", edgecolor="0.3", hatch="///")
            graphs = [(h.start_us - t0, max(h.sim_us, 0.01)) for h in self.host if h.kind == "graph"]
            ax.broken_barh(graphs, (y - 0.4, 0.8), facecolor="0.2")
            lanes, labels = [y, *lanes], ["host", *labels]
        ax.set_xlabel("simulated time (us)" + (" from the first event" if relative else ""))
        ax.set_ylabel("lane")
        ax.set_yticks(lanes, labels)
        ax.invert_yaxis()
        ax.set_title(title)
        handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()][:12]
        ax.legend(handles, list(colors)[:12], fontsize=7, ncol=4, loc="upper left", bbox_to_anchor=(0, -0.35))
        return ax

    def plot_memory(self, ax=None):
        """Device memory allocated over simulated time."""
        import matplotlib.pyplot as plt

        ax = ax or plt.subplots(figsize=(8, 2.5))[1]
        ts = [m.sim_us for m in self.memory]
        ys = [m.allocated_after / 1e6 for m in self.memory]
        ax.step(ts, ys, where="post")
        ax.set_xlabel("simulated time (us)")
        ax.set_ylabel("allocated (MB)")
        ax.set_title("NPU memory")
        return ax

    def plot_roofline(self, ax=None):
        """Each kernel placed on the cost model's roofline (FLOP/s vs FLOPs per byte)."""
        import matplotlib.pyplot as plt

        model = clock.cost_model
        ax = ax or plt.subplots(figsize=(6, 4))[1]
        xs = [10 ** (i / 10) for i in range(-30, 41)]
        ax.loglog(xs, [min(model.peak_gflops, x * model.bandwidth_gbs) for x in xs], "k-", lw=1)
        groups: dict[str, list[KernelEvent]] = defaultdict(list)
        for k in self.kernels:
            if k.kind == "kernel" and k.flops > 0 and k.bytes > 0:
                groups[k.name].append(k)
        for name, ks in groups.items():
            ax.scatter([k.intensity for k in ks], [k.flops / (k.sim_us * 1e3) for k in ks], s=12, label=name)
        ax.axvline(model.ridge_point, color="gray", ls=":", lw=1)
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("achieved GFLOP/s (simulated)")
        ax.set_title("roofline of the simulated NPU")
        if groups:
            ax.legend(fontsize=7)
        return ax


def profile() -> Profile:
    """Profile the NPU inside a ``with`` block::

        with npu_lab.profile() as prof:
            model(x).sum().backward()
        print(prof.table())
        prof.export_chrome_trace("trace.json")
    """
    return Profile()
