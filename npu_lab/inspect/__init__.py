"""Inspectors: look inside the dispatcher, Dynamo, AOTAutograd and the NPU compiler."""

from . import dispatch, draw
from .draw import Drawing, draw_autograd, draw_fx

__all__ = ["Drawing", "dispatch", "draw", "draw_autograd", "draw_fx"]
