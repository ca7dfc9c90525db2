"""The NPU compiler's FX passes, in the order the backend runs them.

Each pass takes a ``torch.fx.GraphModule`` of ATen operators, rewrites it in
place and returns a list of human-readable changes. The backend records the
graph after every pass, so each step can be inspected (and switched off
through :class:`npu_lab.compiler.config.CompilerConfig`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch.fx

from .constant_folding import constant_folding
from .dce import dead_code_elimination
from .horizontal_fusion import horizontal_fusion
from .layout import layout_nhwc
from .memory_plan import memory_planning
from .pattern_fusion import pattern_fusion
from .pointwise_fusion import pointwise_fusion

Pass = Callable[[torch.fx.GraphModule], list[str]]

#: (config switch, pass) in pipeline order.
PIPELINE: list[tuple[str, Pass]] = [
    ("dead_code_elimination", dead_code_elimination),
    ("constant_folding", constant_folding),
    ("pattern_fusion", pattern_fusion),
    ("layout", layout_nhwc),  # inference graphs only (see backend.compile_graph)
    ("pointwise_fusion", pointwise_fusion),
    ("horizontal_fusion", horizontal_fusion),  # needs pointwise fusion's in-place kernels
    ("memory_planning", memory_planning),
]

__all__ = ["PIPELINE", "constant_folding", "dead_code_elimination", "horizontal_fusion", "layout_nhwc",
           "memory_planning", "pattern_fusion", "pointwise_fusion"]
