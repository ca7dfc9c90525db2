"""Inspectors: look inside the dispatcher, Dynamo, AOTAutograd, TorchScript and the NPU compiler."""

from . import aot, dispatch, dispatch_log, draw, dynamo, explorer, graph_breaks, irs, tlparse_report, torchscript
from .draw import Drawing, draw_autograd, draw_fx, side_by_side
from .explorer import GuardExplorer, GuardTrial, PassExplorer, PassStep, explore_guards, explore_passes
from .irs import compare_irs

__all__ = [
    "aot", "compare_irs", "dispatch", "dispatch_log", "draw", "draw_autograd", "draw_fx", "Drawing", "dynamo",
    "explore_guards", "explore_passes", "explorer", "graph_breaks", "GuardExplorer", "GuardTrial", "irs",
    "PassExplorer", "PassStep", "side_by_side", "tlparse_report", "torchscript",
]
