"""The NPU compiler: a ``torch.compile`` backend named ``"npu"``.

    compiled = torch.compile(model, backend="npu")
    compiled = torch.compile(model, backend="npu", options={"pointwise_fusion": False})

After a compile, :func:`last_compile` returns what happened: the Dynamo graph,
and for each ATen graph (forward/backward/inference) the code after every
pass, the fused kernels generated and the graph's launch plan (``.plan.source``
is the straight-line code that runs it, see :mod:`npu_lab.compiler.launch_plan`).
:data:`history` keeps every record since the last :func:`reset`, oldest first.
"""

from __future__ import annotations

import logging

from torch._dynamo import register_backend

from . import autotune, launch_plan, passes
from .backend import compile_graph, decompositions, npu_backend, reset, stats
from .config import CompilerConfig, config
from .custom_passes import extra_pass, register_pass, unregister_pass
from .record import CompileRecord, GraphRecord, PassSnapshot, history, last_compile

if "npu" not in __import__("torch")._dynamo.list_backends(exclude_tags=()):
    register_backend(name="npu")(npu_backend)


class _QuietOptimizerProfiling(logging.Filter):
    """Drop Dynamo's "Profiler record function ... will be ignored" warning (torch 2.13).

    ``Optimizer.step`` wraps itself in ``torch.autograd.profiler.record_function``,
    which Dynamo leaves out of graphs by design; it says so once per process, on
    every ``torch.compile(optimizer.step)``. The line is about PyTorch's own code,
    not the learner's, and carries a timestamp and process id into notebook outputs.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Profiler record function")


logging.getLogger("torch._dynamo.variables.ctx_manager").addFilter(_QuietOptimizerProfiling())

__all__ = [
    "CompileRecord", "CompilerConfig", "GraphRecord", "PassSnapshot", "autotune", "compile_graph",
    "config", "decompositions", "extra_pass", "history", "last_compile", "launch_plan", "npu_backend", "passes",
    "register_pass", "reset", "stats", "unregister_pass",
]
