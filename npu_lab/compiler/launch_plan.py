"""Launch plans: a compiled graph as straight-line code that calls its kernels itself.

An FX ``GraphModule`` runs a graph node by node, and every node is a full
PyTorch operator call: the dispatcher finds the ``npu`` kernel, the kernel
allocates a ``torch.Tensor`` for its output, wraps each input's device memory
in a NumPy array, checks devices, picks a numba variant and accounts the
launch. On this simulated device that host work costs 5 to 60 µs per node,
as much as a small kernel itself. A graph compiled ahead of time needs none
of it at run time: shapes, strides and dtypes were all fixed when it was
traced, so which kernel runs on which memory can be decided once.

A *launch plan* is that decision written down as Python source (print
:attr:`LaunchPlan.source`), in the spirit of the wrapper code TorchInductor
generates around its kernels (``call(args)``) and of what a CUDA graph
replays:

* **kernels are called directly**: the generated numba functions of fused
  nodes, the matmul for ``mm``/``addmm``/``npu.linear_relu``, on NumPy arrays
  that alias device memory, followed by the launch's entry on the device
  clock (FLOPs and bytes computed at build time);
* **views cost nothing**: a ``view``/``permute``/``alias`` between two
  kernels becomes an array over the same device block, with the geometry
  worked out at build time; a ``torch.Tensor`` is made only for values that
  leave the graph or feed an operator the plan does not lower, and a view
  that leaves the graph is made from that geometry too (``_rt.view``), or is
  the very tensor its kernel writes when it only reshapes the kernel's output;
* **intermediates are raw device buffers**, allocated and freed like tensors
  (the allocator's counters see them), released right after their last use,
  and handed from one intermediate to the next as the memory planner
  (:mod:`npu_lab.compiler.passes.memory_plan`) decided;
* **every other operator** runs as before: a registered ``npu`` kernel is
  called as a Python function (the graph runs below autograd, so skipping the
  dispatcher changes nothing but its cost), and anything else (views that
  escape, in-place ``copy_``, CPU fallbacks) goes through the dispatcher.

The plan guards itself: if an input arrives with other sizes or strides than
the graph was built for, while a profiler records (it attributes kernels to
operators) or while a ``TorchDispatchMode`` is active (it must see every
operator), the graph runs node by node instead. Switch plans off with
``options={"launch_plan": False}``.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.fx
from functorch.compile import make_boxed_func

from .. import _torch_private as private
from ..device import clock
from ..device.memory import round_size
from ..device.tensors import NUMPY_DTYPES, contiguous_strides, storage_bytes
from ..kernels.elementwise import Operand
from ..ops.registry import CLAIMED
from ..profiler import hooks
from . import lowering, plan_runtime

aten = torch.ops.aten

#: View operators the plan turns into arrays over the same device block.
VIEW_OPS = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.permute.default, aten.t.default, aten.transpose.int,
    aten.expand.default, aten.alias.default, aten.detach.default, aten.slice.Tensor, aten.select.int,
    aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.as_strided.default,
})

#: In-place operators that change a tensor's geometry: arrays made earlier would go stale.
_GEOMETRY_MUTATIONS = frozenset({"resize_", "resize_as_", "set_", "as_strided_", "squeeze_", "unsqueeze_",
                                 "transpose_", "t_", "swapdims_", "swapaxes_", "detach_"})


@dataclass(eq=False)
class Value:
    """What the plan knows about one tensor value of the graph.

    ``root`` is the value whose memory this one lives in (itself for graph
    inputs, kernel outputs and results of operators called through PyTorch);
    a view sits ``delta`` elements after its root's first element.
    """

    name: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    kind: str  # "input" | "new" | "call" | "view"
    trusted: bool  # the layout at run time is the one above (checked, allocated or conformed)
    node: torch.fx.Node | None = None
    delta: int = 0
    root: Value | None = None
    conformable: bool = False  # a fresh result of a non-view operator: may be copied to the layout above
    conform: bool = False
    needs_torch: bool = False  # a torch.Tensor must exist (graph output, or an operator called with it)
    buffer: int | None = None  # the memory planner's buffer id (new values)
    tensor_view: Value | None = None  # a kernel output whose only tensor is this reshaping view of it
    # emission state
    tvar: str | None = None
    avar: str | None = None
    fvar: str | None = None
    blk: str | None = None
    eoff: str | None = None  # the root's element offset at run time (an expression)

    def __post_init__(self) -> None:
        if self.root is None:
            self.root = self

    @property
    def itemsize(self) -> int:
        return np.dtype(NUMPY_DTYPES[self.dtype]).itemsize

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def contiguous(self) -> bool:
        return self.stride == contiguous_strides(self.shape) or self.numel <= 1


@dataclass
class PlanStats:
    """How the plan runs each node of its graph."""

    kernels: int = 0  # nodes lowered to a direct kernel call
    views: int = 0  # views that became arrays (no operator call)
    direct: int = 0  # operators called as the npu kernel's Python function
    dispatched: int = 0  # operators called through PyTorch's dispatcher
    buffers_reused: int = 0  # intermediates that took over a dead intermediate's buffer

    def describe(self) -> str:
        return (f"{self.kernels} kernels called directly, {self.views} views as arrays, "
                f"{self.direct} operators called as Python functions, {self.dispatched} through the dispatcher, "
                f"{self.buffers_reused} buffers reused")


class LaunchPlan:
    """A compiled graph's run-time code (see the module docstring).

    Call it AOTAutograd's way, with a list of inputs (boxed). ``source`` is the
    generated Python; ``stats`` says how each node runs; ``fallbacks`` counts
    the calls that ran the graph node by node instead (and ``why`` the reason of
    the last one).
    """

    def __init__(self, gm: torch.fx.GraphModule, source: str, namespace: dict[str, Any], stats: PlanStats,
                 expected: list[tuple[str, tuple[int, ...], tuple[int, ...]] | None]) -> None:
        self._boxed_call = True  # an instance attribute: wrappers copy ``__dict__``, not class attributes
        self.gm = gm
        self.expected = expected  # per input: (name, shape, stride) the plan was built for, or None
        self.source = source
        self.stats = stats
        self.fallbacks = 0
        self.why = ""
        self._graph = make_boxed_func(gm.forward)
        namespace["_fallback"] = self._fallback
        exec(compile(source, f"<npu launch plan {id(self):x}>", "exec"), namespace)
        self._call = namespace["call"]

    def __call__(self, args: list) -> Any:
        return self._call(args)

    def _fallback(self, args: list) -> Any:
        self.fallbacks += 1
        self.why = self._reason(args)
        return self._graph(args)

    def _reason(self, args: list) -> str:
        if hooks.recorder is not None:
            return "a profiler was recording"
        if plan_runtime.modes_active():
            modes = ", ".join(type(m).__name__ for m in torch.utils._python_dispatch._get_current_dispatch_mode_stack())
            return f"a TorchDispatchMode was active ({modes})"
        for arg, want in zip(args, self.expected):
            if want is not None and (arg.shape != want[1] or arg.stride() != want[2]):
                return (f"input {want[0]} had shape {tuple(arg.shape)} and strides {arg.stride()}, "
                        f"the plan was built for {want[1]} and {want[2]}")
        return "unknown"

    def __repr__(self) -> str:
        return f"<LaunchPlan: {self.stats.describe()}>"


def runner(gm: torch.fx.GraphModule) -> Any:
    """What runs a compiled graph: its launch plan if it has one, else the graph (boxed)."""
    plan = gm.meta.get("launch_plan")
    return plan if plan is not None else make_boxed_func(gm.forward)


def build(gm: torch.fx.GraphModule) -> LaunchPlan | str:
    """The launch plan of ``gm``, or the reason it has none (a string)."""
    builder = _Builder(gm)
    reason = builder.analyse()
    if reason:
        return reason
    source = builder.emit()
    expected = []
    for p in builder.placeholders:
        v = builder.vals.get(p)
        expected.append((p.name, v.shape, v.stride) if v is not None and v.trusted else None)
    return LaunchPlan(gm, source, builder.namespace, builder.stats, expected)


def _static(v: torch.Tensor) -> bool:
    return all(isinstance(d, int) for d in (*v.shape, *v.stride())) and isinstance(v.storage_offset(), int)


def _kernel_function(target: Any) -> Any:
    """The npu kernel's Python function for an operator the plan may call without the dispatcher."""
    if not isinstance(target, torch._ops.OpOverload):
        return target if callable(target) and not isinstance(target, type) else None
    schema = target._schema
    if schema.is_mutable or any(r.alias_info is not None for r in schema.returns):
        return None  # in-place and view operators keep the dispatcher's bookkeeping (versions, views)
    name = schema.name if target._overloadname == "default" else f"{schema.name}.{target._overloadname}"
    fn = CLAIMED.get(name)
    if fn is not None:
        return fn
    return private.custom_op_function(target, "npu")


def _runs_on_npu(node: torch.fx.Node) -> bool:
    """Would the dispatcher choose the npu kernel for ``node``? (A tensor argument on npu, or, for an
    operator without tensor arguments, a result on npu.) A CPU-only call, such as Adam's step
    counter ``step + 1``, must reach the CPU kernel."""
    devices = [a.meta["val"].device.type for a in node.all_input_nodes
               if isinstance(a.meta.get("val"), torch.Tensor)]
    if devices:
        return "npu" in devices
    return any(isinstance(v, torch.Tensor) and v.device.type == "npu"
               for v in torch.utils._pytree.tree_leaves(node.meta.get("val")))


class _Builder:
    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm
        self.nodes = list(gm.graph.nodes)
        self.order = {n: i for i, n in enumerate(self.nodes)}
        self.vals: dict[Any, Value] = {}  # node (or (node, output index)) -> Value
        self.lowered: dict[torch.fx.Node, tuple[lowering.Lowering, list[Value]]] = {}
        self.how: dict[torch.fx.Node, str] = {}  # "kernel" | "view" | "alias" | "direct" | "dispatch" | ...
        self.namespace: dict[str, Any] = {"np": np, "torch": torch, "_Op": Operand, "_hooks": hooks,
                                          "_rt": plan_runtime, "_nd": plan_runtime.nd,
                                          "_launch": plan_runtime.launch}
        self._consts: dict[int, str] = {}
        self._reserved = {n.name for n in self.nodes}
        self.lines: list[str] = []
        self.stats = PlanStats()
        self.placeholders: list[torch.fx.Node] = []
        self.constants: dict[torch.fx.Node, str] = {}  # get_attr node -> its global name

    # -- analysis ---------------------------------------------------------------------------
    def analyse(self) -> str | None:
        for node in self.nodes:
            if node.op == "placeholder":
                reason = self._placeholder(node)
            elif node.op == "call_function":
                reason = self._call_function(node)
            elif node.op == "get_attr":
                reason = self._constant(node)
            elif node.op == "output":
                reason = None
            else:
                reason = f"node {node.name} is a {node.op}"
            if reason:
                return reason
        self._needs_torch()
        return None

    def _placeholder(self, node: torch.fx.Node) -> str | None:
        self.placeholders.append(node)
        v = node.meta.get("val")
        if isinstance(v, torch.Tensor):
            if not _static(v):
                return f"input {node.name} has a symbolic shape"
            trusted = v.device.type == "npu" and v.numel() > 0 and v.dtype in NUMPY_DTYPES
            self.vals[node] = Value(node.name, tuple(v.shape), tuple(v.stride()), v.dtype, "input", trusted, node)
        elif isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return f"input {node.name} is a symbolic number"
        return None

    def _constant(self, node: torch.fx.Node) -> str | None:
        """A constant of the graph (constant folding's results): bound once, used like an input."""
        obj: Any = self.gm
        for part in str(node.target).split("."):
            obj = getattr(obj, part)
        self.constants[node] = self.const(obj, node.name)
        if isinstance(obj, torch.Tensor):
            trusted = obj.device.type == "npu" and obj.numel() > 0 and obj.dtype in NUMPY_DTYPES
            v = Value(node.name, tuple(obj.shape), tuple(obj.stride()), obj.dtype, "input", trusted, node)
            v.tvar = self.constants[node]
            self.vals[node] = v
        return None

    def _call_function(self, node: torch.fx.Node) -> str | None:
        target = node.target
        if isinstance(target, torch._ops.OpOverload) and target._schema.name.split("::")[-1] in _GEOMETRY_MUTATIONS:
            return f"{node.name} changes a tensor's geometry in place ({target})"
        for v in torch.utils._pytree.tree_leaves(node.meta.get("val")):
            if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) or (
                    isinstance(v, torch.Tensor) and not _static(v)):
                return f"{node.name} has a symbolic shape"
        src = node.args[0] if node.args else None
        if target is operator.getitem and src in self.lowered:
            self.vals[node] = self.vals[(src, node.args[1])]
            self.how[node] = "alias"
            return None
        if target in VIEW_OPS and self._view(node):
            return None
        low = lowering.find(node)
        outs = low.accepts(node, self) if low is not None else None
        if outs is not None:
            values = []
            single = len(outs) == 1 and not isinstance(node.meta.get("val"), (tuple, list))
            for i, spec in enumerate(outs):
                if spec[0] == "into":
                    values.append(self.vals[node.args[spec[1]]])
                else:
                    _, shape, stride, dtype = spec
                    v = Value(node.name if single else f"{node.name}_{i}", tuple(shape), tuple(stride),
                              dtype, "new", True, node)
                    values.append(v)
                self.vals[(node, i)] = values[-1]
            if single:
                self.vals[node] = values[0]
            self.lowered[node] = (low, values)
            self.how[node] = "kernel"
            return None
        self._called(node)
        return None

    def _called(self, node: torch.fx.Node) -> None:
        """``node`` runs as an operator call; its tensor results are values of kind "call"."""
        target = node.target
        src = node.args[0] if node.args else None
        if target is operator.getitem:
            self.how[node] = "getitem"
            parent_ok = self.how.get(src) == "direct"
        else:
            self.how[node] = "direct" if _runs_on_npu(node) and _kernel_function(target) is not None else "dispatch"
            # only a fresh result of an ATen/npu operator may be copied to the recorded layout
            parent_ok = self.how[node] == "direct" and isinstance(target, torch._ops.OpOverload)
        v = node.meta.get("val")
        if isinstance(v, torch.Tensor):
            ok = parent_ok and v.device.type == "npu" and v.numel() > 0 and v.dtype in NUMPY_DTYPES
            self.vals[node] = Value(node.name, tuple(v.shape), tuple(v.stride()), v.dtype, "call", False, node,
                                    conformable=ok)

    def _view(self, node: torch.fx.Node) -> bool:
        """Make ``node`` an array view of its (trusted) base, with the geometry the Meta kernel gives."""
        if not self.use_arrays(node.args[0]):
            return False
        base = self.vals[node.args[0]]
        r = base.root
        numel = storage_bytes(r.shape, r.stride, 1) + base.delta + 1
        meta_base = torch.empty(numel, dtype=base.dtype, device="meta").as_strided(
            base.shape, base.stride, base.delta)
        args = torch.fx.node.map_arg(node.args, lambda n: meta_base if n is node.args[0] else n)
        if any(isinstance(a, torch.fx.Node) for a in torch.utils._pytree.tree_leaves((args, node.kwargs))):
            return False
        try:
            out = node.target(*args, **node.kwargs)
        except Exception:  # noqa: BLE001 - anything the Meta kernel refuses runs as a call
            return False
        val = node.meta.get("val")
        if not isinstance(out, torch.Tensor) or out.numel() == 0 or (
                isinstance(val, torch.Tensor) and tuple(val.shape) != tuple(out.shape)):
            return False
        self.vals[node] = Value(node.name, tuple(out.shape), tuple(out.stride()), out.dtype, "view", True, node,
                                delta=out.storage_offset(), root=r)
        self.how[node] = "view"
        return True

    def use_arrays(self, *nodes: object) -> bool:
        """May a lowered kernel read these values as arrays? (Marks results to conform.)"""
        for n in nodes:
            v = self.vals.get(n)
            if v is None or v.dtype not in NUMPY_DTYPES:
                return False
            if not v.trusted:
                if not v.conformable:
                    return False
                v.conform = v.trusted = True
        return True

    def val(self, node: object) -> Value:
        return self.vals[node]

    def _needs_torch(self) -> None:
        """Mark the values a ``torch.Tensor`` must exist for, and plan the buffers of the others."""
        for node in reversed(self.nodes):
            how = self.how.get(node)
            if node.op == "output" or how in ("direct", "dispatch", "getitem"):
                for a in node.all_input_nodes:
                    if a in self.vals:
                        self.vals[a].needs_torch = True
            elif how == "view" and self.vals[node].needs_torch:
                v, base = self.vals[node], self.vals[node.args[0]]
                if (base.kind == "new" and base.root is base and base.tensor_view is None and v.delta == 0
                        and v.contiguous and base.contiguous and v.numel == base.numel):
                    base.tensor_view = v  # allocate the tensor in the view's shape (unless base needs its own)
                else:
                    base.needs_torch = True
        for v in self.vals.values():
            if v.tensor_view is not None and v.needs_torch:
                v.tensor_view = None  # the base needs a tensor of its own: the view is made from it
        for node, (_, values) in self.lowered.items():
            for v in values:
                if v.kind == "new" and v.node is node:
                    v.buffer = node.meta.get("buffer") if len(values) == 1 and v.tensor_view is None else None

    # -- emission -----------------------------------------------------------------------------
    def const(self, obj: object, hint: str = "c") -> str:
        """A name in the generated code's globals bound to ``obj``."""
        name = self._consts.get(id(obj))
        if name is None:
            stem = "".join(ch if ch.isalnum() else "_" for ch in hint)[:24].strip("_") or "c"
            name = f"_{stem}_{len(self._consts)}"
            # variables of the code are node names and names made from them ("relu_blk", "mm_own"):
            # a constant's name must be none of those (a node may be called "_to_copy_default_1")
            while any(name == r or name.startswith(r + "_") for r in self._reserved):
                name = "_k" + name
            self._consts[id(obj)] = name
            self.namespace[name] = obj
        return name

    def dtype(self, dtype: torch.dtype) -> str:
        np_dtype = np.dtype(NUMPY_DTYPES[dtype])
        name = f"_{np_dtype.name}"
        self.namespace[name] = np_dtype
        return name

    def line(self, code: str) -> None:
        self.lines.append("    " + code)

    def launch(self, name: str, flops: float, read: int, written: int, matrix: torch.dtype | None = None) -> None:
        """Account the kernel on the clock; ``matrix``: a matrix product's operand dtype (the matrix unit)."""
        unit = "" if matrix is None else f", matrix={clock.matrix_unit(matrix)}"
        self.line(f"_launch({name!r}, {float(flops)!r}, {int(read)}, {int(written)}{unit})")

    def _root_block(self, r: Value) -> tuple[str, str]:
        """Variables holding the root's device block and element offset (emitted on first use)."""
        if r.blk is None:
            r.blk = f"{r.name}_blk"
            self.line(f"{r.blk} = _rt.block({r.tvar})")
            if r.kind in ("input", "call"):
                r.eoff = f"{r.name}_off"
                self.line(f"{r.eoff} = {r.tvar}.storage_offset()")
            else:
                r.eoff = "0"
        return r.blk, r.eoff

    def _offset(self, v: Value, extra_bytes: int = 0) -> str:
        r = v.root
        _, eoff = self._root_block(r)
        const = v.delta * v.itemsize + extra_bytes
        if eoff == "0":
            return str(const)
        return f"{eoff} * {v.itemsize} + {const}" if const else f"{eoff} * {v.itemsize}"

    def array_as(self, v: Value, shape: tuple[int, ...], byte_strides: tuple[int, ...], extra_bytes: int = 0,
                 var: str | None = None) -> str:
        """Emit an array over ``v``'s memory with the given geometry; returns its variable."""
        blk, _ = self._root_block(v.root)
        off = self._offset(v, extra_bytes)
        var = var or f"{v.name}_a{len(self.lines)}"
        # np.ndarray(shape, dtype, buffer, offset, strides): positional, which NumPy parses in half the time
        self.line(f"{var} = _nd({tuple(shape)!r}, {self.dtype(v.dtype)}, {blk}, {off}, {tuple(byte_strides)!r})")
        return var

    def array(self, node: object) -> str:
        """The array of a value in its own geometry (made once)."""
        v = self.vals[node]
        if v.avar is None:
            v.avar = self.array_as(v, v.shape, tuple(s * v.itemsize for s in v.stride), var=f"{v.name}_a")
        return v.avar

    def flat(self, node: object) -> str:
        """A 1-D array of a contiguous value (made once)."""
        v = self.vals[node]
        if v.fvar is None:
            v.fvar = self.array_as(v, (v.numel,), (v.itemsize,), var=f"{v.name}_f")
        return v.fvar

    def operand(self, node: object, strides: tuple[int, ...]) -> str:
        """A strided-kernel operand over ``node``'s storage (element strides given)."""
        v = self.vals[node]
        r = v.root
        blk, eoff = self._root_block(r)
        flat_var = f"{r.name}_{np.dtype(NUMPY_DTYPES[v.dtype]).name}"
        if flat_var not in self._flats.setdefault(r, []):
            self._flats[r].append(flat_var)
            self.line(f"{flat_var} = {blk}.view({self.dtype(v.dtype)})")
        off = str(v.delta) if eoff == "0" else (f"{eoff} + {v.delta}" if v.delta else eoff)
        return f"_Op({flat_var}, {tuple(strides)!r}, {off})"

    def bump(self, nodes: list[object]) -> None:
        """Record in-place writes to these nodes' tensors (those that have one)."""
        names = [self.vals[n].root.tvar for n in nodes if self.vals[n].root.tvar is not None]
        if names:
            self.line(f"_rt.bump({', '.join(dict.fromkeys(names))})")

    def _alloc(self, v: Value, reuse: dict[int, str]) -> None:
        """Emit the allocation of a kernel output."""
        if v.tensor_view is not None:  # a reshaping view leaves the graph: its tensor holds the kernel's output
            t = v.tensor_view
            t.tvar = t.name
            self.line(f"{t.tvar} = _rt.empty({t.shape!r}, {self._torch_dtype(t.dtype)})")
            v.blk, v.eoff = f"{v.name}_blk", "0"
            self.line(f"{v.blk} = _rt.block({t.tvar})")
            return
        if v.needs_torch:
            v.tvar = v.name
            if v.contiguous:
                self.line(f"{v.tvar} = _rt.empty({v.shape!r}, {self._torch_dtype(v.dtype)})")
            else:
                self.line(f"{v.tvar} = _rt.empty_strided({v.shape!r}, {v.stride!r}, {self._torch_dtype(v.dtype)})")
            v.blk = f"{v.name}_blk"
            v.eoff = "0"
            self.line(f"{v.blk} = _rt.block({v.tvar})")
            return
        nbytes = round_size(storage_bytes(v.shape, v.stride, v.itemsize))
        v.blk, v.eoff = f"{v.name}_blk", "0"
        owner = reuse.pop(v.buffer, None) if v.buffer is not None else None
        if owner is not None and self._owner_bytes[owner] >= nbytes:
            self.stats.buffers_reused += 1
            self._owner_of[v] = owner
            self.line(f"{v.blk} = {owner}  # memory plan: buffer {v.buffer}, reused")
            return
        if owner is not None:  # too small for this value: free it now rather than at return
            self.line(f"{owner} = None")
        own = f"{v.name}_own"
        self._owner_of[v] = own
        self._owner_bytes[own] = nbytes
        note = f"  # memory plan: buffer {v.buffer}" if v.buffer is not None else ""
        self.line(f"{own} = _rt.alloc({nbytes})")
        self.line(f"{v.blk} = {own}{note}")

    def _torch_dtype(self, dtype: torch.dtype) -> str:
        return self.const(dtype, str(dtype).replace("torch.", "t_"))

    def lit(self, x: object) -> str:
        """Source for an argument of an operator call."""
        if isinstance(x, torch.fx.Node):
            v = self.vals.get(x)
            if v is not None:
                return self._torch_of(v)
            return self.constants.get(x, x.name)
        if x is None or isinstance(x, (bool, int, str)):
            return repr(x)
        if isinstance(x, float) and math.isfinite(x):
            return repr(x)
        if isinstance(x, list):
            return "[" + ", ".join(self.lit(a) for a in x) + "]"
        if isinstance(x, tuple):
            return "(" + "".join(self.lit(a) + ", " for a in x) + ")"
        return self.const(x, type(x).__name__)

    def _torch_of(self, v: Value) -> str:
        if v.tvar is None:
            raise AssertionError(f"launch plan: {v.name} has no tensor (needs_torch was not propagated)")
        return v.tvar

    def emit(self) -> str:
        """The generated source of ``call(args)``."""
        self._flats: dict[Value, list[str]] = {}  # root -> its storage viewed as each dtype
        self._owner_of: dict[Value, str] = {}
        self._owner_bytes: dict[str, int] = {}
        reuse: dict[int, str] = {}  # memory-plan buffer id -> owner of a dead intermediate
        last = self._last_uses()
        names = [p.name for p in self.placeholders]
        head = ["def call(args):"]
        unpack = ", ".join(names) + ("," if len(names) == 1 else "")
        if names:
            head.append(f"    {unpack} = args")
        checks = ["_hooks.recorder is not None", "_rt.modes_active()"]
        for p in self.placeholders:
            v = self.vals.get(p)
            if v is not None and v.trusted:
                v.tvar = p.name
                checks.append(f"{p.name}.stride() != {v.stride!r} or {p.name}.shape != {v.shape!r}")
            elif v is not None:
                v.tvar = p.name
        head.append("    if " + " or ".join(f"({c})" for c in checks) + ":")
        head.append("        return _fallback(args)")
        head.append("    args.clear()")
        for idx, node in enumerate(self.nodes):
            how = self.how.get(node)
            if node.op in ("placeholder", "get_attr"):
                pass  # inputs are unpacked above; constants are globals of the generated code
            elif node.op == "output":
                self.line("return " + self.lit(tuple(node.args[0]) if isinstance(node.args[0], (list, tuple))
                                               else node.args[0]))
            elif how == "kernel":
                low, values = self.lowered[node]
                self.line(f"# {node.name}: {lowering.describe(node)}")
                for v in values:
                    if v.kind == "new" and v.node is node:
                        self._alloc(v, reuse)
                low.emit(node, self, values)
                self.stats.kernels += 1
            elif how == "view":
                self.stats.views += 1
                v = self.vals[node]
                if v.needs_torch and v.tvar is None:  # (set already if its base was allocated as this view)
                    v.tvar = node.name
                    self._emit_view(node, v)
            elif how == "alias":
                pass
            else:
                self._emit_call(node, how)
            if node.op != "output":
                for dead in last.get(idx, ()):
                    self._free(dead, reuse)
        return "\n".join(head + self.lines) + "\n"

    def _emit_view(self, node: torch.fx.Node, v: Value) -> None:
        """A view that must exist as a tensor: made from its build-time geometry (``_rt.view``).
        ``alias`` and ``detach`` keep their operator call, which is already cheap."""
        op = self.const(node.target, str(node.target))
        base = self.vals[node.args[0]]
        if node.target in (aten.alias.default, aten.detach.default) or node.kwargs or base.tvar is None:
            self.line(f"{node.name} = {op}({', '.join(self._call_args(node))})")
            return
        shift = v.delta - base.delta
        offset = f"{base.tvar}.storage_offset()" + (f" + {shift}" if shift else "")
        rest = "".join(self.lit(a) + ", " for a in node.args[1:])
        self.line(f"{node.name} = _rt.view({base.tvar}, {v.shape!r}, {v.stride!r}, {offset}, {op}, ({rest}))")

    def _call_args(self, node: torch.fx.Node) -> list[str]:
        args = [self.lit(a) for a in node.args]
        args += [f"{k}={self.lit(a)}" for k, a in node.kwargs.items()]
        return args

    def _emit_call(self, node: torch.fx.Node, how: str) -> None:
        if how == "getitem":
            self.line(f"{node.name} = {self.lit(node.args[0])}[{node.args[1]!r}]")
        else:
            fn = _kernel_function(node.target) if how == "direct" else node.target
            if how == "direct":
                self.stats.direct += 1
            else:
                self.stats.dispatched += 1
            self.line(f"{node.name} = {self.const(fn, getattr(fn, '__name__', str(fn)))}"
                      f"({', '.join(self._call_args(node))})")
        v = self.vals.get(node)
        if v is not None:
            v.tvar = node.name
            if v.conform:
                self.line(f"{node.name} = _rt.conform({node.name}, {v.shape!r}, {v.stride!r})")

    def _last_uses(self) -> dict[int, list[object]]:
        """Position after which each root (and each opaque value) is dead."""
        last: dict[object, int] = {}
        for idx, node in enumerate(self.nodes):
            for a in node.all_input_nodes:
                v = self.vals.get(a)
                if v is None and a in self.lowered:
                    continue  # a lowered node's results are its values (getitem reads them)
                key = v.root if v is not None else a
                last[key] = idx
        for node in self.nodes:  # results nobody reads die where they are made
            if (node.op == "placeholder" or node.op == "call_function") and node not in self.lowered:
                v = self.vals.get(node)
                key = v.root if v is not None else node
                last.setdefault(key, self.order[node])
        for node, (_, values) in self.lowered.items():
            for v in values:
                last.setdefault(v.root, self.order[node])
        out: dict[int, list[object]] = {}
        for key, idx in last.items():
            out.setdefault(idx, []).append(key)
        return out

    def _free(self, key: object, reuse: dict[int, str]) -> None:
        names: list[str] = []
        if isinstance(key, Value) and key.node in self.constants:
            return  # a constant of the graph module stays bound
        if isinstance(key, Value):
            values = [v for v in self.vals.values() if v.root is key]
            names += [x for v in values for x in (v.tvar, v.avar, v.fvar) if x]
            if key.blk:
                names.append(key.blk)
            names += self._flats.get(key, [])
            owner = self._owner_of.get(key)
            if owner is not None:
                if key.buffer is not None and not key.needs_torch:
                    reuse[key.buffer] = owner  # the next intermediate of this buffer takes it over
                else:
                    names.append(owner)
        elif isinstance(key, torch.fx.Node) and key.op not in ("output", "get_attr"):
            names.append(key.name)
        names = sorted(set(names))
        if names:
            self.line(" = ".join(names) + " = None")



__all__ = ["LaunchPlan", "PlanStats", "VIEW_OPS", "Value", "build", "runner"]
