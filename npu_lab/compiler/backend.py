"""``torch.compile(model, backend="npu")``: Dynamo -> AOTAutograd -> NPU passes -> kernels.

1. **Dynamo** hands the backend an FX graph of torch-level calls and example inputs.
   If every input is a CPU tensor, the backend inserts copies to ``npu`` at the
   start and back to the CPU at the end (parameters included: keep models on
   ``npu`` to avoid paying that on every call). Two passes run on this
   torch-level graph: the attention rewrite, and foreach expansion
   (an optimizer's ``torch._foreach_*`` calls become per-parameter calls).
2. **AOTAutograd** traces the graph down to ATen operators, splits it into a
   forward and a backward graph (or one inference graph), and decomposes
   operators the NPU has no kernel for into ones it has. In-place updates of
   inputs in an inference graph (``optimizer.step()``) stay in the graph as
   ``copy_`` nodes (``keep_inference_input_mutations``).
3. Each ATen graph goes through the **passes** (:mod:`npu_lab.compiler.passes`),
   each recorded for inspection. Its nodes are NPU kernels: ATen operators of
   the npu device, fused operators from the ``npu`` namespace, and generated
   fused numba kernels.
4. The graph becomes a **launch plan** (:mod:`npu_lab.compiler.launch_plan`):
   generated straight-line code that calls those kernels directly on device
   memory, with views as arrays and intermediates in planned buffers, instead
   of running each node as an operator call through the dispatcher.

Compiled graphs are cached by graph code and input signature, so a recompile
that produces an identical graph (or a second model with the same structure)
skips the passes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from torch._dynamo.backends.common import aot_autograd
from torch.utils._pytree import tree_flatten

from ..device import bare
from ..ops.registry import CLAIMED
from . import autotune, custom_passes, launch_plan
from .config import CompilerConfig, config, for_bare_device
from .passes import PIPELINE
from .passes.foreach_expansion import expand_foreach
from .passes.pattern_fusion import fuse_attention
from .record import CompileRecord, GraphRecord, PassSnapshot, history

_cache: dict[str, torch.fx.GraphModule] = {}
stats = {"graphs_compiled": 0, "cache_hits": 0, "backend_calls": 0}


def decompositions() -> dict:
    """PyTorch's core ATen decompositions, minus every operator the NPU runs natively.

    On a bare device, "natively" means with a kernel registered for ``npu`` now (yours or the runtime's) in any
    overload of the operator: ``gelu`` stays ``gelu`` when you registered ``gelu.out`` (PyTorch runs the functional
    form through the ``out=`` kernel), and an operator with no kernel of yours is decomposed into ones you may have.
    """
    if bare.BARE:
        families = {name.split(".")[0] for name in bare.registered()}
    table = {}
    for op, fn in torch._decomp.core_aten_decompositions().items():
        if not isinstance(op, torch._ops.OpOverload):
            continue
        name = op._schema.name
        qualified = name if op._overloadname == "default" else f"{name}.{op._overloadname}"
        native = name in families if bare.BARE else qualified in CLAIMED
        if not native:
            table[op] = fn
    return table


def _signature(inputs: Sequence[object]) -> str:
    parts = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            parts.append(f"{x.device.type}:{x.dtype}:{tuple(x.shape)}:{x.stride()}")
        else:
            parts.append(repr(type(x)))
    return ";".join(parts)


def _snapshot(name: str, gm: torch.fx.GraphModule, changes: list[str]) -> PassSnapshot:
    return PassSnapshot(name, gm.code, _copy_graph(gm), changes)


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[object], kind: str,
                  cfg: CompilerConfig, record: CompileRecord | None = None) -> torch.fx.GraphModule:
    """Run the NPU passes over one ATen graph and return the runnable module."""
    graph_record = GraphRecord(kind)
    if record is not None:
        record.graphs.append(graph_record)
    key = hashlib.sha1(
        f"{kind}|{gm.code}|{_signature(example_inputs)}|{cfg}|{custom_passes.signature()}".encode()).hexdigest()
    if cfg.cache and key in _cache:
        stats["cache_hits"] += 1
        graph_record.cache_hit = True
        cached = _cache[key]
        graph_record.snapshots.append(_snapshot("cached", cached, ["reused a compiled graph"]))
        graph_record.kernels = [n.meta["fused"] for n in cached.graph.nodes if "fused" in n.meta]
        graph_record.plan = cached.meta.get("launch_plan")
        graph_record.plan_skipped = cached.meta.get("launch_plan_skipped", "")
        return cached
    graph_record.snapshots.append(_snapshot("input", gm, []))
    for switch, run in PIPELINE:
        # the layout pass has no backward for its NHWC kernels: it rewrites inference graphs only
        if getattr(cfg, switch) and (switch != "layout" or kind == "inference"):
            changes = run(gm)
            graph_record.snapshots.append(_snapshot(switch, gm, changes))
        if switch == "pattern_fusion":
            for name, changes in custom_passes.run(gm):
                graph_record.snapshots.append(_snapshot(name, gm, changes))
    if cfg.autotune:
        tried = autotune.tune_graph(gm)
        graph_record.snapshots.append(_snapshot("autotune", gm, tried))
    graph_record.kernels = [n.meta["fused"] for n in gm.graph.nodes if "fused" in n.meta]
    if cfg.launch_plan:
        plan = launch_plan.build(gm)
        if isinstance(plan, str):
            gm.meta["launch_plan_skipped"] = graph_record.plan_skipped = plan
        else:
            gm.meta["launch_plan"] = graph_record.plan = plan
    else:
        gm.meta["launch_plan_skipped"] = graph_record.plan_skipped = "switched off (launch_plan=False)"
    stats["graphs_compiled"] += 1
    if cfg.cache:
        _cache[key] = gm
    return gm


def _outputs_to_cpu(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A CPU graph made to return its tensor outputs on the CPU (its inputs arrive on npu: :func:`_on_npu`)."""
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op == "output":
            with graph.inserting_before(node):
                outs = torch.fx.node.map_arg(node.args[0], lambda n: graph.call_function(_to_cpu, (n,)))
            node.args = (outs,)
    graph.lint()
    gm.recompile()
    return gm


def _on_npu(compiled: Any) -> Any:
    """``compiled`` called with npu copies of its CPU inputs; the inputs it mutates are written back.

    The graph updates the copies (``x.add_(1)``, a BatchNorm's running statistics...), not the
    caller's tensors: an input whose copy's version counter moved during the call gets the copy back.
    The copies are made outside the graph, so autograd still reaches the CPU leaves through them.
    """

    def run(*args):
        moved = [_to_npu(a) for a in args]
        versions = [m._version if isinstance(m, torch.Tensor) else None for m in moved]
        outs = compiled(*moved)
        with torch.no_grad():
            for a, m, v in zip(args, moved, versions):
                if v is not None and m._version != v:
                    a.copy_(m)
        return outs

    return run


def _to_npu(x: object) -> object:
    return x.to("npu") if isinstance(x, torch.Tensor) else x


def _to_cpu(x: object) -> object:
    return x.to("cpu") if isinstance(x, torch.Tensor) else x


def npu_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[object],
                options: dict[str, Any] | None = None, mode: str | None = None) -> Any:
    """The ``npu`` backend for ``torch.compile`` (see the module docstring)."""
    cfg = config.replace(options)
    if bare.BARE:
        cfg = for_bare_device(cfg, options)
    stats["backend_calls"] += 1
    record = CompileRecord(gm.code, _copy_graph(gm), dict(options or {}))
    history.append(record)
    # (compiled autograd passes its inputs as one list, and its sizes as CPU tensors: look inside lists)
    tensors = [x for x in tree_flatten(list(example_inputs))[0] if isinstance(x, torch.Tensor)]
    from_cpu = bool(tensors) and all(t.device.type == "cpu" for t in tensors)
    if from_cpu:
        # AOTAutograd traces the graph for npu inputs: Dynamo's fake inputs (whose symbolic sizes it
        # knows the sources of) moved to npu; at run time the real inputs are (:func:`_on_npu`).
        fakes = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
        example_inputs = [_to_npu(f) if isinstance(x, torch.Tensor) and isinstance(f, torch.Tensor) else x
                          for x, f in zip(example_inputs, fakes)]
        gm = _outputs_to_cpu(gm)
        record.moved_from_cpu = True
    if cfg.pattern_fusion:
        record.dynamo_changes += fuse_attention(gm)
    if cfg.foreach_expansion:
        record.dynamo_changes += expand_foreach(gm)

    def make(kind: str):
        def compiler(graph: torch.fx.GraphModule, inputs: Sequence[object]):
            compiled = compile_graph(graph, inputs, kind, cfg, record)
            run = launch_plan.runner(compiled)
            if mode == "reduce-overhead" and kind == "inference":
                from . import reduce_overhead

                return reduce_overhead.wrap(run)  # replayed as an NPU graph from its second call
            return run

        return compiler

    compiled = aot_autograd(
        fw_compiler=make("forward"),
        bw_compiler=make("backward"),
        inference_compiler=make("inference"),
        decompositions=decompositions(),
        # In-place updates of graph inputs (an optimizer's parameters) stay in the graph as
        # ``copy_`` nodes, which pointwise fusion turns into kernels writing in place.
        keep_inference_input_mutations=True,
    )(gm, example_inputs)
    return _on_npu(compiled) if from_cpu else compiled


def _copy_graph(gm: torch.fx.GraphModule) -> torch.fx.Graph:
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return graph


def reset() -> None:
    """Forget compiled graphs and records (``torch._dynamo.reset()`` forgets Dynamo's)."""
    _cache.clear()
    history.clear()
    for k in stats:
        stats[k] = 0
