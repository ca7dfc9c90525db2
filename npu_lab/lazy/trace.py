"""Lazy tensors: record operators into a graph, run the graph at a sync point.

Inside ``with npu_lab.lazy.mode():`` operators on ``npu`` tensors are not
executed. Each call adds a node to the current *trace* (an FX graph of ATen
operators) and returns a :class:`LazyTensor`, a placeholder that knows its
shape and dtype (computed with FakeTensors) but holds no data. Real ``npu``
tensors that the trace reads (model parameters, data moved in before) become
the graph's inputs; in-place updates of them (an optimizer step) are recorded
in order and applied when the graph runs.

The graph runs when a value is needed on the host, a *sync point*:
``.item()``, ``.cpu()``, printing, an operator whose output shape depends on
data (``nonzero``), or an explicit :func:`mark_step`. It is compiled with the
NPU compiler's passes, cached by structure (step 2 of a training loop reuses
step 1's compiled graph), executed, and every live lazy tensor receives its
value. This is PyTorch/XLA's design, on the simulated NPU.
"""

from __future__ import annotations

import operator
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.fx
from torch._subclasses.fake_tensor import DynamicOutputShapeException, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map, tree_map_only

aten = torch.ops.aten

#: Operators that need the data on the host: they end the trace and run eagerly.
SYNC_OPS = {aten._local_scalar_dense.default: "item()", aten.equal.default: "equal()"}


@dataclass
class LazyMetrics:
    """Counters in the spirit of PyTorch/XLA's ``metrics_report()``.

    ``graphs_built`` counts graphs compiled; a graph whose structure was seen
    before is served from the compile cache and counts in ``cache_hits``
    instead. Every executed graph counts in ``graphs_executed``.
    """

    ops_recorded: int = 0
    graphs_built: int = 0
    graphs_executed: int = 0
    cache_hits: int = 0
    compile_seconds: float = 0.0
    execute_seconds: float = 0.0
    sync_points: Counter = field(default_factory=Counter)

    def report(self) -> str:
        lines = [
            f"ops recorded:      {self.ops_recorded}",
            f"graphs built:      {self.graphs_built}",
            f"graphs executed:   {self.graphs_executed}",
            f"compile cache hits:{self.cache_hits:>4}",
            f"compile time:      {self.compile_seconds * 1e3:.1f} ms",
            f"execute time:      {self.execute_seconds * 1e3:.1f} ms",
            "sync points:       " + (", ".join(f"{k} x{v}" for k, v in sorted(self.sync_points.items()))
                                     or "none"),
        ]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{line.split(':', 1)[0]}</td><td>{line.split(':', 1)[1].strip()}</td></tr>"
                       for line in self.report().splitlines())
        return f"<table>{rows}</table>"


metrics = LazyMetrics()


class LazyTensor(torch.Tensor):
    """An ``npu`` tensor whose value is a node of the current lazy trace."""

    @staticmethod
    def __new__(cls, fake: torch.Tensor, node: torch.fx.Node | None, trace: Trace | None):
        r = torch.Tensor._make_wrapper_subclass(
            cls, fake.shape, strides=fake.stride(), storage_offset=fake.storage_offset(),
            dtype=fake.dtype, device=torch.device("npu", 0), requires_grad=False,
        )
        r._fake = fake
        r._node = node
        r._trace = trace
        r._value = None
        return r

    def __init__(self, fake, node, trace):  # noqa: D107 (state set in __new__)
        pass

    def __repr__(self, *, tensor_contents=None) -> str:
        return f"LazyTensor({repr(materialize(self, 'print'))[7:-1]})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        trace = _active_trace()
        if trace is not None:
            return trace.dispatch(func, args, kwargs)
        # outside lazy mode: materialise and run eagerly
        real_args, real_kwargs = tree_map_only(LazyTensor, lambda t: materialize(t, "eager use"),
                                               (args, kwargs))
        return func(*real_args, **real_kwargs)


def materialize(t: LazyTensor, reason: str) -> torch.Tensor:
    """The real npu tensor behind ``t`` (running its trace if needed)."""
    if t._value is None:
        if t._trace is None:
            raise RuntimeError("lazy tensor has neither a value nor a trace")
        t._trace.flush(reason)
    return t._value


@dataclass(frozen=True)
class _Lowered:
    """One operator argument as the trace sees it: graph argument and fake value."""

    node: object
    fake: object


class Trace:
    """One graph being recorded."""

    def __init__(self, options: dict | None = None) -> None:
        self.options = options or {}
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=False)
        self._reset()

    def _reset(self) -> None:
        self.graph = torch.fx.Graph()
        self.inputs: list[torch.Tensor] = []
        self.input_nodes: dict[int, torch.fx.Node] = {}
        self.fakes: dict[int, torch.Tensor] = {}
        self.live: weakref.WeakValueDictionary[torch.fx.Node, LazyTensor] = weakref.WeakValueDictionary()
        self.mutated: set[int] = set()
        self.n_ops = 0

    # -- recording ------------------------------------------------------------------
    def _input(self, t: torch.Tensor) -> tuple[torch.fx.Node, torch.Tensor]:
        key = id(t)
        node = self.input_nodes.get(key)
        if node is None:
            node = self.graph.placeholder(f"input_{len(self.inputs)}")
            fake = self.fake_mode.from_tensor(t)
            node.meta["val"] = fake
            self.input_nodes[key] = node
            self.fakes[key] = fake
            self.inputs.append(t)
        return node, self.fakes[key]

    def _lower(self, x: object) -> tuple[object, object]:
        """(graph argument, fake value) for one operator argument."""
        if isinstance(x, LazyTensor):
            if x._trace is self and x._value is None:
                return x._node, x._fake
            return self._input(materialize(x, "cross-trace use"))
        if isinstance(x, torch.Tensor) and x.device.type == "npu":
            return self._input(x)
        if isinstance(x, torch.Tensor):  # CPU tensors enter as constants
            return self._input(x)
        return x, x

    def dispatch(self, func, args, kwargs):
        if func in SYNC_OPS:
            return self._eager(func, args, kwargs, SYNC_OPS[func])
        if func is aten._to_copy.default and kwargs.get("device") is not None \
                and torch.device(kwargs["device"]).type == "cpu":
            return self._eager(func, args, kwargs, "to cpu")
        if func is aten.copy_.default and args[0].device.type == "cpu":
            return self._eager(func, args, kwargs, "copy to cpu")
        flat, _ = tree_flatten((args, kwargs))
        device = kwargs.get("device")
        makes_npu = isinstance(device, (torch.device, str)) and torch.device(device).type == "npu"
        touches_npu = makes_npu or any(isinstance(a, torch.Tensor) and a.device.type == "npu" for a in flat)
        if not touches_npu:
            return func(*args, **kwargs)
        if func._schema.name.startswith("aten::_foreach_"):
            return self._foreach(func, args, kwargs)
        return self._record(func, args, kwargs)

    def _record(self, func, args, kwargs):
        # each argument leaf becomes a _Lowered (a pytree leaf, unlike a tuple: an argument list
        # such as cat's ``([a, b], 1)`` must not be mistaken for a (node, fake) pair)
        lowered = tree_map(lambda x: _Lowered(*self._lower(x)), (args, kwargs),
                           is_leaf=lambda x: isinstance(x, torch.Tensor))
        node_args, node_kwargs = tree_map(lambda p: p.node, lowered)
        fake_args, fake_kwargs = tree_map(lambda p: p.fake, lowered)
        try:
            with self.fake_mode:
                fake_out = func(*fake_args, **fake_kwargs)
        except DynamicOutputShapeException:
            return self._eager(func, args, kwargs, f"data-dependent shape ({func.name()})")
        node = self.graph.call_function(func, tuple(node_args), dict(node_kwargs))
        node.meta["val"] = fake_out
        self.n_ops += 1
        metrics.ops_recorded += 1
        if func._schema.is_mutable:
            for a in tree_flatten((args, kwargs))[0]:
                if isinstance(a, torch.Tensor) and not isinstance(a, LazyTensor):
                    self.mutated.add(id(a))
        return self._wrap(func, args, node, fake_out)

    def _wrap(self, func, args, node, fake_out):
        # in-place and out= operators return their (mutated) argument itself
        if func._schema.is_mutable and isinstance(fake_out, torch.Tensor) and args \
                and isinstance(args[0], torch.Tensor) and func._schema.name.endswith("_"):
            target = args[0]
            if isinstance(target, LazyTensor) and target._trace is self:
                target._node, target._fake = node, fake_out
                self.live[node] = target
            return target
        if isinstance(fake_out, torch.Tensor):
            t = LazyTensor(fake_out, node, self)
            self.live[node] = t
            return t
        if isinstance(fake_out, (tuple, list)):
            outs = []
            for i, f in enumerate(fake_out):
                if isinstance(f, torch.Tensor):
                    item = self.graph.call_function(operator.getitem, (node, i))
                    item.meta["val"] = f
                    t = LazyTensor(f, item, self)
                    self.live[item] = t
                    outs.append(t)
                else:
                    outs.append(f)
            return type(fake_out)(outs) if isinstance(fake_out, tuple) else outs
        return fake_out

    def _foreach(self, func, args, kwargs):
        """``_foreach_op(lists...)`` -> one recorded ``op`` per list element."""
        base = func._schema.name.split("::")[1].replace("_foreach_", "")
        overload = func._overloadname
        single = getattr(aten, base)
        op = None
        for ov in (overload.replace("List", "Tensor").replace("ScalarList", "Scalar"), overload, "Tensor",
                   "Scalar", "default"):
            if ov in single.overloads():
                op = getattr(single, ov)
                break
        if op is None:
            raise NotImplementedError(f"lazy mode cannot split {func.name()}")
        n = len(args[0])
        results = []
        for i in range(n):
            a = [x[i] if isinstance(x, (list, tuple)) and len(x) == n else x for x in args]
            results.append(self.dispatch(op, tuple(a), kwargs))
        return None if func._schema.returns == [] or not func._schema.returns else results

    def _eager(self, func, args, kwargs, reason: str):
        lazies = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, LazyTensor)]
        reals = [a for a in tree_flatten((args, kwargs))[0]
                 if isinstance(a, torch.Tensor) and not isinstance(a, LazyTensor)]
        if lazies or any(id(r) in self.mutated for r in reals) or self.n_ops:
            self.flush(reason)
        real_args, real_kwargs = tree_map_only(LazyTensor, lambda t: materialize(t, reason), (args, kwargs))
        return func(*real_args, **real_kwargs)

    # -- execution ------------------------------------------------------------------
    def flush(self, reason: str) -> None:
        """Compile and run the recorded graph; give every live lazy tensor its value."""
        if self.n_ops == 0:
            self._reset()
            return
        from ..compiler import compile_graph, config, stats
        from ..compiler.launch_plan import runner

        metrics.sync_points[reason] += 1
        live = [(node, t) for node, t in list(self.live.items()) if t._trace is self and t._value is None]
        outputs = [node for node, _ in live]
        self.graph.output(tuple(outputs))
        gm = torch.fx.GraphModule(torch.nn.Module(), self.graph)
        cfg = config.replace(self.options)
        hits = stats["cache_hits"]
        t0 = time.perf_counter()
        try:
            # passes may run operators (constant folding): they must run for real, not be recorded
            with _suspended(), torch.no_grad():
                compiled = compile_graph(gm, self.inputs, "lazy", cfg, None)
            t1 = time.perf_counter()
            hit = stats["cache_hits"] - hits
            metrics.cache_hits += hit
            metrics.graphs_built += 0 if hit else 1
            metrics.compile_seconds += t1 - t0
            global last_graph
            last_graph = compiled
            # the graph is below autograd (it already contains the backward), so run it without
            with _suspended(), torch.no_grad():
                values = runner(compiled)(list(self.inputs))
        except BaseException:
            self._reset()  # drop the failed graph, so the next sync does not fail on it again
            raise
        metrics.execute_seconds += time.perf_counter() - t1
        metrics.graphs_executed += 1
        for (_, t), v in zip(live, values):
            t._value = v
            t._trace = None
            t._node = None
        self._reset()


#: The compiled module of the most recent lazy graph (for drawing and reading).
last_graph: torch.fx.GraphModule | None = None


class LazyMode(TorchDispatchMode):
    """The dispatch mode behind :func:`mode`: routes npu operators into a trace."""

    def __init__(self, options: dict | None = None) -> None:
        super().__init__()
        self.trace = Trace(options)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.trace.dispatch(func, args, kwargs or {})


_stack: list[LazyMode] = []


def _active_trace() -> Trace | None:
    return _stack[-1].trace if _stack else None


class _suspended:
    """Run real kernels (no recording) while a graph executes."""

    def __enter__(self):
        from torch.utils._python_dispatch import _disable_current_modes

        self.saved = list(_stack)
        _stack.clear()
        self.ctx = _disable_current_modes()
        self.ctx.__enter__()

    def __exit__(self, *exc):
        self.ctx.__exit__(*exc)
        _stack.extend(self.saved)
