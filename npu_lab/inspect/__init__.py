"""Inspectors: look inside the dispatcher, Dynamo, AOTAutograd and the NPU compiler."""

from . import dispatch

__all__ = ["dispatch"]
