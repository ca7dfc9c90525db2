"""Look at what AOTAutograd does with a function: joint graph, partition, saved tensors.

:func:`inspect_aot` traces ``fn`` with AOTAutograd twice, once with the
default partitioner and once with the min-cut rematerialising partitioner, and
keeps for each: the forward and backward graphs, the tensors the forward
saves for the backward (with their bytes), and the joint forward+backward
graph AOTAutograd partitioned.

Saved memory is counted by **storage**, not by tensor: a view or an alias
(``detach``, ``t``, ``unsqueeze``...) of a tensor that is already kept shares
its storage and keeps no new bytes alive. :func:`saved_tensors` finds which
saved values share a storage from the fake tensors AOTAutograd traced with
(``node.meta["val"]``: views of one fake tensor share its fake storage, as
they would at run time). :func:`draw_partition` draws the cut.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from functorch.compile import aot_function, default_partition, make_boxed_func, min_cut_rematerialization_partition
from torch.multiprocessing.reductions import StorageWeakRef

from .draw import TANGENT_STYLE, Drawing, _esc, describe_value, fx_lines

#: How many times :func:`saved_tensors` and :func:`inspect_aot` have run in this process (:func:`calls`).
_asked = [0]


def calls() -> int:
    """How many times this inspector has counted saved tensors (chapter 6's check sees whether an answer that
    should count them itself asked the inspector instead)."""
    return _asked[0]


#: how saved values and the cut look in :func:`draw_partition`
SAVED_STYLE = ("box", "#ffedd5", 'color="#c2410c", penwidth=2')
SAVED_ALIAS_STYLE = ("box", "#fff7ed", 'color="#c2410c", style="filled,dashed"')
FORWARD_SAVED_EXTRA = 'color="#c2410c", penwidth=2'  # a forward value that crosses the cut: orange border
#: the forward graph's output node, drawn small (it only gathers the edges of what the forward returns)
OUTPUT_EXTRA = 'width=0.3, height=0.3, fixedsize=true, label="out", fontsize=8'
#: cut edges do not constrain the layout: the two graphs stand side by side, each as tall as itself
CUT_EDGE = 'color="#c2410c", penwidth=1.6, style=dashed, fontcolor="#c2410c", constraint=false'


@dataclass
class SavedTensor:
    """One value the forward saves for the backward (one non-tangent input of the backward graph).

    ``nbytes`` is the tensor's own size (``numel * element_size``); ``extra_bytes`` is what it adds
    to the memory kept alive: its storage's size the first time that storage is saved, 0 for a
    view or alias of a storage already saved (``alias_of`` names the saved tensor that owns it).
    ``input`` names the forward input (``primals_*``) whose storage it is, if any.
    """

    name: str
    description: str
    nbytes: int
    extra_bytes: int = 0
    alias_of: str | None = None
    input: str | None = None

    @property
    def note(self) -> str:
        """'alias of tanh', 'input', 'view of input primals_1' or ''."""
        if self.alias_of:
            return f"alias of {self.alias_of}"
        if self.input:
            return "input" if self.input == self.name else f"view of input {self.input}"
        return ""


@dataclass
class Partition:
    """One partitioner's result."""

    partitioner: str
    forward: torch.fx.GraphModule | None = None
    backward: torch.fx.GraphModule | None = None
    joint: torch.fx.GraphModule | None = None
    saved: list[SavedTensor] = field(default_factory=list)

    @property
    def saved_bytes(self) -> int:
        """Bytes the saved tensors keep alive: each storage once (aliases and views add nothing)."""
        return sum(s.extra_bytes for s in self.saved)

    @property
    def tensor_bytes(self) -> int:
        """The saved tensors' sizes added up, an alias counted as if it were a copy (overcounts)."""
        return sum(s.nbytes for s in self.saved)

    @property
    def storages(self) -> int:
        """How many distinct storages the saved tensors keep alive."""
        return sum(1 for s in self.saved if s.alias_of is None)

    def describe(self) -> str:
        n, k = len(self.saved), self.storages
        shared = f" in {k} storage{'s' * (k != 1)}" if k != n else ""
        return f"saves {n} tensor{'s' * (n != 1)}{shared} ({self.saved_bytes:,} bytes)"

    def draw(self, title: str | None = None, max_width_px: int | None = 900) -> Drawing:
        """The forward and the backward graph in one drawing, with the cut between them."""
        if title is None:
            title = f"{self.partitioner.replace('_', '-')} partitioner: {self.describe()}"
        return draw_partition(self.forward, self.backward, title, max_width_px=max_width_px)


@dataclass
class AOTReport:
    default: Partition
    min_cut: Partition

    def summary(self) -> str:
        return f"default partitioner {self.default.describe()}; min-cut {self.min_cut.describe()}"

    def _repr_html_(self) -> str:
        def table(p: Partition) -> str:
            rows = "".join(f"<tr><td><code>{s.name}</code></td><td>{s.description}</td><td>{s.nbytes:,}</td>"
                           f"<td>{s.extra_bytes:,}</td><td>{s.note}</td></tr>" for s in p.saved)
            return (f"<h4>{p.partitioner}: {len(p.saved)} saved, {p.saved_bytes:,} bytes</h4>"
                    "<table><tr><th>saved</th><th>tensor</th><th>its bytes</th><th>bytes kept alive</th>"
                    f"<th></th></tr>{rows}</table>")

        svg = self.default.draw().svg()
        return f"<p>{self.summary()}</p>{svg or ''}{table(self.default)}{table(self.min_cut)}"


def _nbytes(val: object) -> int:
    if isinstance(val, torch.Tensor):
        return int(val.numel()) * val.element_size()
    return 0


def _storage(val: object) -> StorageWeakRef | None:
    """A key equal for tensors that share a storage (fake tensors included), or None."""
    if not isinstance(val, torch.Tensor):
        return None
    try:
        return StorageWeakRef(val.untyped_storage())
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def _storage_nbytes(val: object) -> int:
    """Bytes of the storage behind ``val`` (what a view of it keeps alive), else its own size."""
    try:
        return int(val.untyped_storage().nbytes())
    except (AttributeError, RuntimeError, NotImplementedError, TypeError):
        return _nbytes(val)


def _graph(g: torch.fx.Graph | torch.fx.GraphModule) -> torch.fx.Graph:
    return g.graph if isinstance(g, torch.fx.GraphModule) else g


def _is_saved(node: torch.fx.Node) -> bool:
    return node.op == "placeholder" and not node.name.startswith("tangents")


def saved_tensors(backward: torch.fx.Graph | torch.fx.GraphModule,
                  forward: torch.fx.Graph | torch.fx.GraphModule | None = None) -> list[SavedTensor]:
    """What the forward saved: the backward graph's inputs other than the incoming gradients.

    Each storage is counted once, by the first saved tensor on it; later ones (views, ``detach``
    aliases) get ``extra_bytes == 0`` and ``alias_of``. With ``forward``, saved tensors on an input's
    storage name that input.
    """
    _asked[0] += 1
    inputs: dict[StorageWeakRef, str] = {}
    if forward is not None:
        for n in _graph(forward).nodes:
            key = _storage(n.meta.get("val")) if n.op == "placeholder" else None
            if key is not None:
                inputs.setdefault(key, n.name)
    owner: dict[StorageWeakRef, str] = {}
    out = []
    for n in _graph(backward).nodes:
        if not _is_saved(n):
            continue
        val = n.meta.get("val")
        key = _storage(val)
        alias_of = owner.get(key) if key is not None else None
        if key is not None and alias_of is None:
            owner[key] = n.name
        extra = 0 if alias_of else (_storage_nbytes(val) if key is not None else _nbytes(val))
        out.append(SavedTensor(n.name, describe_value(val), _nbytes(val), extra, alias_of,
                               inputs.get(key) if key is not None else None))
    return out


def _output_args(g: torch.fx.Graph) -> list:
    out = next((n for n in g.nodes if n.op == "output"), None)
    if out is None:
        return []
    args = out.args[0] if out.args else ()
    return list(args) if isinstance(args, (tuple, list)) else [args]


def draw_partition(forward: torch.fx.Graph | torch.fx.GraphModule, backward: torch.fx.Graph | torch.fx.GraphModule,
                   title: str = "", max_width_px: int | None = 900, backward_nodes: str = "all") -> Drawing:
    """The forward graph on the left, the backward graph on the right, and the cut between them.

    Orange boxes are the saved tensors (bytes each keeps alive; an alias of a saved storage is
    dashed and keeps none); dashed orange edges cross the cut from the forward value to the
    backward input it becomes. Green ellipses are the tangents (incoming gradients), blue ones the
    forward's inputs. ``backward_nodes="inputs"`` draws only the backward graph's inputs, each with
    the operators that read it, for a backward graph too big to draw whole at notebook width.
    """
    if backward_nodes not in ("all", "inputs"):
        raise ValueError(f"backward_nodes must be 'all' or 'inputs', got {backward_nodes!r}")
    fw, bw = _graph(forward), _graph(backward)
    saved = saved_tensors(bw, fw)
    by_name = {s.name: s for s in saved}
    saved_nodes = [n for n in bw.nodes if _is_saved(n)]
    fw_nodes = {n.name: n for n in fw.nodes}
    # The forward returns (user outputs..., saved values...); the backward takes (saved..., tangents...).
    returned = [a for a in _output_args(fw) if isinstance(a, torch.fx.Node)]
    tail = returned[len(returned) - len(saved_nodes):] if len(saved_nodes) <= len(returned) else []
    sources = {}
    for i, n in enumerate(saved_nodes):
        src = fw_nodes.get(n.name)
        if src is None and len(tail) == len(saved_nodes):
            src = tail[i]
        if src is not None:
            sources[n.name] = src.name
    fw_style = {src: (None, None, FORWARD_SAVED_EXTRA) for src in sources.values()}
    fw_style.update({n.name: (None, None, OUTPUT_EXTRA) for n in fw.nodes if n.op == "output"})
    bw_style = {s.name: SAVED_ALIAS_STYLE if s.alias_of else SAVED_STYLE for s in saved}
    notes = {s.name: f"alias of {s.alias_of}: 0 B more" if s.alias_of else f"saved: {s.extra_bytes:,} B"
             for s in saved}
    notes.update({n.name: "incoming gradient" for n in bw.nodes
                  if n.op == "placeholder" and n.name.startswith("tangents")})

    lines = ["digraph G {", '  rankdir=TB; newrank=true; ranksep=0.2; nodesep=0.25;',
             '  node [fontname="Helvetica", fontsize=10, style=filled, margin="0.08,0.03"];',
             '  edge [fontname="Helvetica", fontsize=8, color="#6b7280"];']
    if title:
        lines.append(f'  label="{_esc(title)}"; labelloc=t; fontname="Helvetica";')
    lines += ["  subgraph cluster_forward {",
              '    label="forward graph (runs now)"; '
              'fontname="Helvetica"; fontsize=10; style=rounded; color="#60a5fa";']
    lines += ["  " + line for line in fx_lines(fw, "fw:", style=fw_style)]
    lines += ["  }", "  subgraph cluster_backward {",
              '    label="backward graph (runs at backward())"; '
              'fontname="Helvetica"; fontsize=10; style=rounded; color="#4ade80";']
    if backward_nodes == "all":
        lines += ["  " + line for line in fx_lines(bw, "bw:", style=bw_style, notes=notes)]
    else:
        inputs = [n for n in bw.nodes if n.op == "placeholder"]
        others = sum(1 for n in bw.nodes if n.op == "call_function")
        for n in inputs:
            readers = sorted(u.name for u in n.users)
            shape, color = TANGENT_STYLE if n.name.startswith("tangents") else ("box", "#f3f4f6")
            shape, color, extra = bw_style.get(n.name, (shape, color, ""))
            label = "\n".join(part for part in (n.name, describe_value(n.meta.get("val")), notes.get(n.name, ""),
                                                "read by " + ", ".join(readers) if readers else "") if part)
            lines.append(f'    "bw:{_esc(n.name)}" [label="{_esc(label)}", shape={shape}, fillcolor="{color}"'
                         f'{", " + extra if extra else ""}];')
        lines.append(f'    "bw:more" [label="... and {others} operators\\nthat compute the gradients", '
                     f'shape=plaintext, fillcolor=white];')
        for a, b in zip(inputs, inputs[1:]):  # one column, in the order of the backward's inputs
            lines.append(f'    "bw:{_esc(a.name)}" -> "bw:{_esc(b.name)}" [style=invis];')
        if inputs:
            lines.append(f'    "bw:{_esc(inputs[-1].name)}" -> "bw:more" [style=invis];')
    lines.append("  }")
    for dst, src in sources.items():
        s = by_name[dst]
        label = "saved" if not s.alias_of else "alias"
        lines.append(f'  "fw:{_esc(src)}" -> "bw:{_esc(dst)}" [label=" {label}", {CUT_EDGE}];')
    lines.append("}")
    return Drawing("\n".join(lines), title, max_width_px=max_width_px)


def in_details(drawing: Drawing, summary: str) -> Any:
    """``drawing`` inside a collapsed ``<details>`` block that opens on a click (for a drawing too big to show
    at notebook width): an ``IPython.display.HTML``."""
    from IPython.display import HTML

    svg = drawing.svg()
    body = svg if svg is not None else f"<pre>{html.escape(drawing.dot)}</pre>"
    return HTML(f"<details><summary>{html.escape(summary)}</summary>"
                f"<div style='overflow-x:auto'>{body}</div></details>")


def _run(fn, args, partitioner: str) -> Partition:
    part = Partition(partitioner)
    base = default_partition if partitioner == "default" else min_cut_rematerialization_partition

    def partition_fn(joint, joint_inputs, **kwargs):
        part.joint = joint
        return base(joint, joint_inputs, **kwargs)

    def fw(gm, _):
        part.forward = gm
        return make_boxed_func(gm.forward)

    def bw(gm, _):
        part.backward = gm
        part.saved = saved_tensors(gm, part.forward)
        return make_boxed_func(gm.forward)

    compiled = aot_function(fn, fw_compiler=fw, bw_compiler=bw, partition_fn=partition_fn)
    out = compiled(*args)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    loss = sum(o.float().sum() for o in outs if isinstance(o, torch.Tensor) and o.requires_grad)
    if isinstance(loss, torch.Tensor):
        loss.backward()
    return part


def inspect_aot(fn, *args: torch.Tensor) -> AOTReport:
    """Trace ``fn(*args)`` with AOTAutograd under both partitioners (some args should require grad)."""
    _asked[0] += 1
    fresh = [lambda: [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                      for a in args] for _ in range(2)]
    return AOTReport(_run(fn, fresh[0](), "default"), _run(fn, fresh[1](), "min_cut"))
