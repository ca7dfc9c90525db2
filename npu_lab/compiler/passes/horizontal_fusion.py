"""Horizontal fusion: independent in-place kernels, one launch.

After foreach expansion and pointwise fusion, a compiled ``optimizer.step()``
is one fused kernel per parameter, each writing the parameter (and its
optimizer state) in place. Those kernels do not feed each other: they are the
same update applied to different tensors. Launching them one by one costs the
host the same bookkeeping N times (argument checks, array views, a numba call,
launch accounting), which for small parameters is most of the time they take.

This pass combines such kernels *horizontally* into one generated numba
function that runs each member's loop in turn (PyTorch's Inductor does the
same with its "combo kernels" for foreach optimizers). Vertical fusion
(pointwise fusion) saved memory traffic; this one saves launches.

A kernel joins when every tensor it reads or writes is a graph input on the
npu (so it can run anywhere in the graph), contiguous and of its output's
shape, and it returns nothing (all its outputs are written in place). Members
keep their graph order, and no other operator between the first and the last
member may touch a tensor a member writes.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import numpy as np
import torch
import torch.fx

from ...device.tensors import as_array
from ...kernels import codegen, elementwise
from ...ops.common import launch, nbytes
from .pointwise_fusion import FusedKernel, _val

_counter = itertools.count()
_NAME = re.compile(r"\b([xts])(\d+)\b")

#: Fewer members than this stay separate kernels.
MIN_MEMBERS = 2


class CombinedKernel:
    """Several in-place fused kernels run by one generated numba function.

    Called with the members' arguments one after the other (each member's
    inputs, then the tensors it writes); returns nothing.

    Attributes:
        members: the :class:`~npu_lab.compiler.passes.pointwise_fusion.FusedKernel` objects, in order.
        source: the generated numba source.
    """

    __module__ = "npu_lab.compiler.passes.horizontal_fusion"

    def __init__(self, name: str, members: Sequence[FusedKernel], arities: Sequence[int],
                 numels: Sequence[int]) -> None:
        self.__name__ = self.__qualname__ = name
        self.members = list(members)
        self.arities = list(arities)  # call arguments per member
        self.numels = list(numels)
        self.fused_ops = [f"{m.__name__}({'+'.join(m.fused_ops)})" for m in members]
        self.source = self._source()
        self._fn = None

    def _source(self) -> str:
        params: list[str] = []
        body: list[str] = []
        for j, (member, numel) in enumerate(zip(self.members, self.numels)):
            k = member.kernel
            outs = [f"m{j}_out{o}" for o in range(len(k.exprs))]
            params += outs + [f"m{j}_in{i}" for i in range(k.n_inputs)] + [f"m{j}_{s}" for s in k.scalars]

            def rename(code: str, j: int = j) -> str:
                return _NAME.sub(lambda m: f"m{j}_{m.group(1)}{m.group(2)}", code)

            loop = "prange" if numel >= elementwise.PARALLEL_THRESHOLD else "range"
            body.append(f"    # member {j}: {member.__name__} ({' -> '.join(member.fused_ops)})")
            body.append(f"    for i in {loop}({outs[0]}.shape[0]):")
            body += [f"        m{j}_x{i} = m{j}_in{i}[i]" for i in range(k.n_inputs)]
            body += [f"        {rename(stmt)}" for stmt in k.prelude]
            body += [f"        {out}[i] = {rename(e)}" for out, e in zip(outs, k.exprs)]
        header = elementwise._HEADER.format(name=self.__name__)
        parallel = any(n >= elementwise.PARALLEL_THRESHOLD for n in self.numels)
        return (header + f'\n@numba.njit(parallel={parallel}, cache=True, nogil=True, error_model="numpy")\n'
                f"def combined({', '.join(params)}):\n" + "\n".join(body) + "\n")

    @property
    def fn(self):
        if self._fn is None:
            self._fn = codegen.load_module(self.source, "hf_combined").combined
        return self._fn

    def __call__(self, *args: torch.Tensor) -> tuple:
        groups, pos = [], 0
        for arity in self.arities:
            groups.append(args[pos:pos + arity])
            pos += arity
        if not all(t.is_contiguous() and t.numel() == n for g, n in zip(groups, self.numels) for t in g):
            for member, g in zip(self.members, groups):  # not the layout it was planned for: one by one
                member(*g)
            return ()
        flat: list = []
        flops = read = written = 0
        for member, g, n in zip(self.members, groups, self.numels):
            n_in = len(g) - len(member.into)
            outs = [g[member.into[k]] for k in range(len(member.kernel.exprs))]
            flat += [as_array(t).reshape(-1) for t in outs]
            flat += [as_array(t).reshape(-1) for t in g[:n_in]]
            flat += member.scalars
            flops += n * len(member.fused_ops)
            read += sum(nbytes(t) for t in g[:n_in])
            written += sum(nbytes(t) for t in outs)
        self.fn(*flat)
        launch(self.__name__, flops, read, written)
        return ()

    def __repr__(self) -> str:
        return f"<CombinedKernel {self.__name__}: {len(self.members)} kernels>"


def _eligible(node: torch.fx.Node) -> bool:
    fk = node.target
    if node.op != "call_function" or type(fk) is not FusedKernel or node.users:
        return False
    if len(fk.into) != len(fk.kernel.exprs):  # some output is returned, not written in place
        return False
    for a in node.args:
        v = _val(a)
        if not isinstance(a, torch.fx.Node) or a.op != "placeholder" or not isinstance(v, torch.Tensor):
            return False
        if v.device.type != "npu" or v.dtype != fk.dtype or not all(isinstance(d, int) for d in v.shape):
            return False
        if not v.is_contiguous() or tuple(v.shape) != tuple(fk.shape):
            return False
    return True


def horizontal_fusion(gm: torch.fx.GraphModule) -> list[str]:
    """Combine the graph's independent in-place fused kernels into one launch (in place)."""
    nodes = list(gm.graph.nodes)
    members = [n for n in nodes if _eligible(n)]
    if len(members) < MIN_MEMBERS:
        return []
    order = {n: i for i, n in enumerate(nodes)}
    written = {n.args[pos] for n in members for pos in n.target.into.values()}
    member_set = set(members)
    first, last = order[members[0]], order[members[-1]]
    for n in nodes[first + 1:last]:
        if n not in member_set and any(a in written for a in n.all_input_nodes):
            return []  # something between the members reads or writes what they write
    name = f"combined_{next(_counter)}"
    numels = [int(np.prod(n.target.shape)) for n in members]
    ck = CombinedKernel(name, [n.target for n in members], [len(n.args) for n in members], numels)
    with gm.graph.inserting_after(members[-1]):
        call = gm.graph.call_function(ck, tuple(a for n in members for a in n.args))
    call.meta["fused"] = ck
    call.meta["val"] = ()
    for n in reversed(members):
        gm.graph.erase_node(n)
    gm.graph.lint()
    gm.recompile()
    return [f"{name}: {len(members)} in-place kernels ({', '.join(m.__name__ for m in ck.members)}) "
            f"-> 1 launch, {sum(numels):,} elements"]
