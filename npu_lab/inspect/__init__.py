"""Inspectors: look inside the dispatcher, Dynamo, AOTAutograd and the NPU compiler."""

from . import aot, dispatch, draw, dynamo
from .draw import Drawing, draw_autograd, draw_fx

__all__ = ["Drawing", "aot", "dispatch", "draw", "draw_autograd", "draw_fx", "dynamo"]
