"""Inspectors: look inside the dispatcher, Dynamo, AOTAutograd and the NPU compiler."""

from . import aot, dispatch, draw, dynamo, irs
from .draw import Drawing, draw_autograd, draw_fx
from .irs import compare_irs

__all__ = ["Drawing", "aot", "compare_irs", "irs", "dispatch", "draw", "draw_autograd", "draw_fx", "dynamo"]
