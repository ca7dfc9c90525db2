"""Look at what AOTAutograd does with a function: joint graph, partition, saved tensors.

:func:`inspect_aot` traces ``fn`` with AOTAutograd twice, once with the
default partitioner and once with the min-cut rematerialising partitioner, and
keeps for each: the forward and backward graphs, the tensors the forward
saves for the backward (with their bytes), and the joint forward+backward
graph AOTAutograd partitioned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.fx
from functorch.compile import aot_function, default_partition, make_boxed_func, min_cut_rematerialization_partition

from .draw import Drawing, describe_value, draw_fx


@dataclass
class SavedTensor:
    name: str
    description: str
    nbytes: int


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
        return sum(s.nbytes for s in self.saved)

    def draw(self) -> tuple[Drawing, Drawing]:
        return (draw_fx(self.forward, f"forward ({self.partitioner})"),
                draw_fx(self.backward, f"backward ({self.partitioner})"))


@dataclass
class AOTReport:
    default: Partition
    min_cut: Partition

    def summary(self) -> str:
        d, m = self.default, self.min_cut
        return (f"default partitioner saves {len(d.saved)} tensors ({d.saved_bytes:,} bytes); "
                f"min-cut saves {len(m.saved)} tensors ({m.saved_bytes:,} bytes)")

    def _repr_html_(self) -> str:
        def table(p: Partition) -> str:
            rows = "".join(f"<tr><td><code>{s.name}</code></td><td>{s.description}</td><td>{s.nbytes:,}</td></tr>"
                           for s in p.saved)
            return (f"<h4>{p.partitioner}: {len(p.saved)} saved, {p.saved_bytes:,} bytes</h4>"
                    f"<table><tr><th>saved</th><th>tensor</th><th>bytes</th></tr>{rows}</table>")

        fw_d, bw_d = self.default.draw()
        svg_f, svg_b = fw_d.svg(), bw_d.svg()
        graphs = ""
        if svg_f and svg_b:
            graphs = (f"<div style='display:flex;gap:12px'><div>{svg_f}</div><div>{svg_b}</div></div>")
        return f"<p>{self.summary()}</p>{graphs}{table(self.default)}{table(self.min_cut)}"


def _nbytes(val: object) -> int:
    if isinstance(val, torch.Tensor):
        return int(val.numel()) * val.element_size()
    return 0


def _saved(backward: torch.fx.GraphModule) -> list[SavedTensor]:
    """The backward graph's inputs other than the incoming gradients are what forward saved."""
    out = []
    for n in backward.graph.nodes:
        if n.op == "placeholder" and not n.name.startswith("tangents"):
            val = n.meta.get("val")
            out.append(SavedTensor(n.name, describe_value(val), _nbytes(val)))
    return out


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
        part.saved = _saved(gm)
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
    fresh = [lambda: [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                      for a in args] for _ in range(2)]
    return AOTReport(_run(fn, fresh[0](), "default"), _run(fn, fresh[1](), "min_cut"))
