"""Inspectors: look inside the dispatcher, Dynamo, AOTAutograd, TorchScript and the NPU compiler."""

from . import aot, dispatch, draw, dynamo, explorer, irs, torchscript
from .draw import Drawing, draw_autograd, draw_fx, side_by_side
from .explorer import GuardExplorer, GuardTrial, PassExplorer, PassStep, explore_guards, explore_passes
from .irs import compare_irs

__all__ = [
    "Drawing", "GuardExplorer", "GuardTrial", "PassExplorer", "PassStep", "aot", "compare_irs", "dispatch", "draw",
    "draw_autograd", "draw_fx", "dynamo", "explore_guards", "explore_passes", "explorer", "irs",
    "side_by_side", "torchscript",
]
