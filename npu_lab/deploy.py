"""Deployment without Python: an npu model exported to ONNX and run by ONNX Runtime.

``torch.onnx.export(model, args, dynamo=True)`` is built on ``torch.export``: it
captures the program to ATen operators (an ``ExportedProgram``), decomposes them,
translates each into ONNX operators (with onnxscript) and optimises the ONNX graph.
The result is a ``.onnx`` file any ONNX runtime can load: ONNX Runtime on a CPU or
GPU, or a vendor's toolchain that compiles ONNX for its own chip.

    program = export_onnx(model, (x,), dynamic_batch=True)
    print(onnx_listing(program))                      # Gemm, Relu, ...
    (out,) = run_onnx(program, x)                     # ONNX Runtime on the host CPU
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from typing import Any

import numpy as np
import torch

__all__ = ["export_onnx", "onnx_listing", "onnx_session", "run_onnx"]


def export_onnx(module: torch.nn.Module, args: tuple, dynamic_batch: bool = False) -> torch.onnx.ONNXProgram:
    """``torch.onnx.export(module, args, dynamo=True)``, without its progress lines and log noise.

    Args:
        module: the model (its parameters may live on ``npu``: they become the ONNX initializers).
        args: example inputs, a tuple.
        dynamic_batch: make dimension 0 of every tensor input symbolic (``batch``).

    Raises PyTorch's ``torch.onnx.OnnxExporterError`` if the program cannot be exported (the
    first step is ``torch.export``, so whatever export refuses, ONNX export refuses too).
    """
    if not isinstance(args, tuple):
        raise TypeError(f"args must be a tuple of example inputs, got {type(args).__name__}")
    dynamic_shapes = None
    if dynamic_batch:
        batch = torch.export.Dim("batch")
        dynamic_shapes = tuple({0: batch} if isinstance(a, torch.Tensor) else None for a in args)
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._export",
                                              "torch.fx.experimental.symbolic_shapes", "torch._dynamo")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.CRITICAL)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            return torch.onnx.export(module, args, dynamo=True, verbose=False, dynamic_shapes=dynamic_shapes)
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def onnx_session(program: torch.onnx.ONNXProgram) -> Any:
    """An ONNX Runtime session (CPU execution provider) for the exported model."""
    import onnxruntime

    return onnxruntime.InferenceSession(program.model_proto.SerializeToString(),
                                        providers=["CPUExecutionProvider"])


def run_onnx(program: torch.onnx.ONNXProgram | Any, *args: torch.Tensor) -> list[torch.Tensor]:
    """Run the exported model with ONNX Runtime; inputs from any device, outputs as CPU tensors."""
    session = onnx_session(program) if isinstance(program, torch.onnx.ONNXProgram) else program
    names = [i.name for i in session.get_inputs()]
    if len(names) != len(args):
        raise ValueError(f"the ONNX model takes {len(names)} inputs ({', '.join(names)}), got {len(args)}")
    feeds = {n: np.ascontiguousarray(a.detach().cpu().numpy()) for n, a in zip(names, args)}
    return [torch.from_numpy(o) for o in session.run(None, feeds)]


def _shape(value_info: Any) -> str:
    dims = value_info.type.tensor_type.shape.dim
    return "[" + ", ".join(d.dim_param or str(d.dim_value) for d in dims) + "]"


def onnx_listing(program: torch.onnx.ONNXProgram) -> str:
    """The ONNX graph in a few lines: inputs, one line per node (its number attributes in braces,
    subgraphs indented), outputs, initializers."""
    import onnx

    graph = program.model_proto.graph
    lines = ["inputs: " + ", ".join(f"{i.name}{_shape(i)}" for i in graph.input)]

    def nodes(g: Any, indent: str) -> None:
        for n in g.node:
            attrs = [f"{a.name}={onnx.helper.get_attribute_value(a)}"
                     for a in sorted(n.attribute, key=lambda a: a.name)
                     if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT)]
            lines.append(f"{indent}{', '.join(n.output)} = {n.op_type}({', '.join(n.input)})"
                         + (f"  {{{', '.join(attrs)}}}" if attrs else ""))
            for attr in n.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    lines.append(f"{indent}  {attr.name}:")
                    nodes(attr.g, indent + "    ")

    nodes(graph, "")
    lines.append("outputs: " + ", ".join(f"{o.name}{_shape(o)}" for o in graph.output))
    lines.append("initializers (weights stored in the file): "
                 + ", ".join(f"{t.name}{list(t.dims)}" for t in graph.initializer))
    return "\n".join(lines)
