"""Record a compile's structured trace (``TORCH_TRACE``) and read it with ``tlparse``.

PyTorch writes a *structured trace* of every compile when the ``TORCH_TRACE`` environment
variable names a directory: one JSON record per event (Dynamo started on a frame, the graph it
captured, the guards, AOTAutograd's graphs, the compile metrics, each graph break and recompile
reason), grouped by **compile id** ``frame/compile`` (``1/0``: the second frame Dynamo compiled,
its first compile; ``1/1``: that frame recompiled once). The ``tlparse`` tool (PyPI package
``tlparse``, a Rust binary) turns such a log into an HTML report.

``TORCH_TRACE`` is read once, when torch is imported: setting it later in a running process does
nothing. :func:`torch_trace` therefore attaches PyTorch's own trace handler
(``torch._logging._internal.LazyTraceHandler``, what ``TORCH_TRACE`` installs) for the duration
of a ``with`` block. :func:`run_tlparse` runs the tool on the log and returns a
:class:`TlparseReport` read from the files tlparse wrote (``compile_directory.json`` and
``raw.jsonl``), which shows as a compact table in a notebook.
"""

from __future__ import annotations

import html
import json
import logging
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CompileEntry", "TlparseReport", "TraceCapture", "find_tlparse", "run_tlparse", "torch_trace"]

_BREAK_AT = re.compile(r"Graph break in user code at (.*):(\d+)")


@dataclass
class TraceCapture:
    """The directory a :func:`torch_trace` block wrote to, and the log files it made."""

    directory: Path
    log_files: list[Path] = field(default_factory=list)

    @property
    def log_file(self) -> Path:
        """The (single) trace log written by the block."""
        if len(self.log_files) != 1:
            raise RuntimeError(f"expected one trace log in {self.directory}, found {len(self.log_files)} "
                               "(did anything compile inside the block?)")
        return self.log_files[0]


@contextmanager
def torch_trace(directory: str | Path) -> Iterator[TraceCapture]:
    """Write PyTorch's structured compile trace into ``directory`` while the block runs.

    The in-process equivalent of starting Python with ``TORCH_TRACE=directory``: PyTorch's own
    ``LazyTraceHandler`` is attached to the ``torch.__trace`` logger, and removed at the end.
    The log file appears with the first event, i.e. at the first compile inside the block.
    """
    import torch._logging._internal as internal

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    before = set(directory.glob("*.log"))
    handler = internal.LazyTraceHandler(str(directory))
    handler.setFormatter(internal.TorchLogsFormatter(trace=True))
    previous_level = internal.trace_log.level
    internal.trace_log.setLevel(logging.DEBUG)
    internal.trace_log.addHandler(handler)
    capture = TraceCapture(directory)
    try:
        yield capture
    finally:
        internal.trace_log.removeHandler(handler)
        handler.close()
        internal.trace_log.setLevel(previous_level)
        capture.log_files = sorted(set(directory.glob("*.log")) - before)


def find_tlparse() -> Path:
    """The ``tlparse`` executable (next to this Python, or on ``PATH``)."""
    here = Path(sys.executable).parent / "tlparse"
    found = here if here.exists() else (Path(p) if (p := shutil.which("tlparse")) else None)
    if found is None:
        raise FileNotFoundError("the tlparse tool is not installed: pip install tlparse")
    return found


def run_tlparse(log_file: str | Path, out_dir: str | Path) -> TlparseReport:
    """Run ``tlparse LOG -o OUT --overwrite --no-browser`` and read the report it wrote."""
    log_file, out_dir = Path(log_file), Path(out_dir)
    if not log_file.is_file():
        raise FileNotFoundError(f"no trace log at {log_file}")
    done = subprocess.run([str(find_tlparse()), str(log_file), "-o", str(out_dir), "--overwrite", "--no-browser"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"tlparse failed ({done.returncode}): {done.stderr.strip()[:500]}")
    return TlparseReport.load(out_dir)


def _parse_break(text: str) -> tuple[int, str]:
    """(source line, reason's first line) from a ``dynamo_graph_break_reason`` artifact."""
    where = _BREAK_AT.search(text)
    lines = [ln.strip() for ln in text.splitlines()]
    reason = "?"
    for i, ln in enumerate(lines):
        if ln.startswith("Graph Break Reason:"):
            reason = ln.removeprefix("Graph Break Reason:").strip()
            if reason.startswith("Encountered graph break when attempting"):  # the real reason follows
                reason = next((r for r in lines[i + 1:] if r), reason)
            break
    return (int(where.group(2)) if where else 0), reason


@dataclass
class CompileEntry:
    """One compile id of the report: which frame, what came out, and what went wrong or changed."""

    compile_id: str
    frame: str
    first_line: int
    graph_ops: int | None
    guards: int | None
    graph_breaks: list[str] = field(default_factory=list)  # the reason of each graph break (first line)
    break_lines: list[int] = field(default_factory=list)  # the source line of each (in its file)
    recompile_reason: str | None = None
    failure: str | None = None
    artifacts: int = 0

    @property
    def frame_id(self) -> int:
        return int(self.compile_id.split("/")[0])

    @property
    def is_recompile(self) -> bool:
        return int(self.compile_id.split("/")[1]) > 0


@dataclass
class TlparseReport:
    """What tlparse found in a trace, read from its output directory."""

    out_dir: Path
    entries: list[CompileEntry]

    @classmethod
    def load(cls, out_dir: str | Path) -> TlparseReport:
        """Read ``compile_directory.json`` and ``raw.jsonl`` from a tlparse output directory."""
        out_dir = Path(out_dir)
        directory_file, raw_file = out_dir / "compile_directory.json", out_dir / "raw.jsonl"
        for f in (directory_file, raw_file, out_dir / "index.html"):
            if not f.is_file():
                raise FileNotFoundError(f"{f} is missing: is {out_dir} a tlparse output directory?")
        directory = json.loads(directory_file.read_text())
        artifacts: dict[str, int] = {}
        breaks: dict[str, list[tuple[int, str]]] = {}
        for key, value in directory.items():
            cid = key.strip("[]").split("_")[0]  # "[0/1_1]" -> "0/1" (attempt 1 of compile 0/1)
            for art in value.get("artifacts", []):
                artifacts[cid] = artifacts.get(cid, 0) + 1
                if art["name"].startswith("dynamo_graph_break_reason"):
                    found = _parse_break((out_dir / art["url"]).read_text(errors="replace"))
                    if found not in breaks.setdefault(cid, []):  # a restarted attempt reports it again
                        breaks[cid].append(found)
        entries: list[CompileEntry] = []
        with raw_file.open() as f:
            for line in f:
                record = json.loads(line)
                metrics = record.get("compilation_metrics")
                if not metrics:
                    continue
                cid = metrics.get("compile_id") or f"{record.get('frame_id')}/{record.get('frame_compile_id')}"
                failure = metrics.get("fail_type")
                if failure and metrics.get("fail_reason"):
                    failure += ": " + str(metrics["fail_reason"]).strip().splitlines()[0]
                recompile = metrics.get("recompile_reason")
                entries.append(CompileEntry(
                    cid, metrics.get("co_name") or "?", metrics.get("co_firstlineno") or 0,
                    metrics.get("graph_op_count"), metrics.get("guard_count"),
                    [reason for _, reason in breaks.get(cid, [])], [line for line, _ in breaks.get(cid, [])],
                    recompile.strip() if recompile else None,
                    failure, artifacts.get(cid, 0)))
        entries.sort(key=lambda e: tuple(int(p) for p in e.compile_id.split("/")))
        return cls(out_dir, entries)

    # ---- summaries ---------------------------------------------------------------------------
    @property
    def frames(self) -> list[str]:
        """Names of the frames Dynamo compiled, by frame id."""
        return list(dict.fromkeys(e.frame for e in sorted(self.entries, key=lambda e: e.frame_id)))

    @property
    def graph_breaks(self) -> int:
        """Number of graph breaks the trace recorded (over all compile ids)."""
        return sum(len(e.graph_breaks) for e in self.entries)

    @property
    def recompiles(self) -> list[CompileEntry]:
        """The compile ids that were recompiles, each with its reason."""
        return [e for e in self.entries if e.is_recompile]

    def summary(self) -> str:
        """One line: compile ids, frames, graph breaks, recompiles, failures."""
        failures = sum(1 for e in self.entries if e.failure)
        return (f"{len(self.entries)} compile ids in {len(self.frames)} frames, {self.graph_breaks} graph breaks, "
                f"{len(self.recompiles)} recompiles, {failures} failures")

    def _repr_html_(self) -> str:
        rows = []
        for e in self.entries:
            events = []
            for i, reason in enumerate(e.graph_breaks):
                where = f" at line {e.break_lines[i]}" if i < len(e.break_lines) else ""
                events.append(f"<span style='color:#b91c1c'>&#9986; graph break{where}</span>: {html.escape(reason)}")
            if e.recompile_reason:
                events.append(f"<span style='color:#1d4ed8'>&#8635; recompile</span>: "
                              f"{html.escape(e.recompile_reason)}")
            if e.failure:
                events.append(f"<b>failed</b>: {html.escape(e.failure)}")
            shade = " style='background:#eff6ff'" if e.is_recompile else ""
            rows.append(f"<tr{shade}><td><code>[{e.compile_id}]</code></td><td style='text-align:left'>"
                         f"<code>{html.escape(e.frame)}</code></td><td>{e.graph_ops if e.graph_ops is not None else ''}"
                         f"</td><td>{e.guards if e.guards is not None else ''}</td>"
                         f"<td style='text-align:left'>{'<br>'.join(events)}</td></tr>")
        return (f"<p><b>tlparse</b>: {html.escape(self.summary())} "
                f"(full report: <code>{html.escape(self.out_dir.name)}/index.html</code>)</p>"
                "<table style='font-size:12px'><tr><th>compile id</th><th style='text-align:left'>frame</th>"
                "<th>graph ops</th><th>guards</th>"
                "<th style='text-align:left'>graph breaks (line in the source file) and recompiles</th></tr>"
                + "".join(rows) + "</table>")

    def __repr__(self) -> str:
        return f"TlparseReport({self.summary()})"
