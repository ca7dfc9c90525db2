"""Your own passes in the NPU compiler: register a function and the backend runs it.

A custom pass has the same shape as the built-in ones: it takes the ATen
``torch.fx.GraphModule`` of a forward, backward or inference graph, rewrites
it in place, and returns a list of human-readable changes (an empty list if
it changed nothing). It runs right after the built-in pattern fusion and
before pointwise fusion, and is recorded like every pass, under its name::

    def fuse_my_pattern(gm): ...; return ["x + y -> my_op"]

    npu_lab.compiler.register_pass(fuse_my_pattern)
    torch.compile(model, backend="npu")          # now runs fuse_my_pattern
    npu_lab.compiler.unregister_pass("fuse_my_pattern")

or, for one block of code, ``with npu_lab.compiler.extra_pass(fuse_my_pattern): ...``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch.fx

CustomPass = Callable[[torch.fx.GraphModule], "list[str] | None"]

#: name -> pass, in the order they run.
REGISTERED: dict[str, CustomPass] = {}


def register_pass(fn: CustomPass, name: str | None = None) -> str:
    """Run ``fn`` on every graph the ``npu`` backend compiles from now on; returns its name."""
    if not callable(fn):
        raise TypeError(f"a pass must be callable (GraphModule -> list[str]), got {type(fn).__name__}")
    name = name or getattr(fn, "__name__", "custom_pass")
    REGISTERED[name] = fn
    return name


def unregister_pass(name: str) -> None:
    """Stop running the pass registered under ``name``."""
    REGISTERED.pop(name, None)


@contextmanager
def extra_pass(fn: CustomPass, name: str | None = None) -> Iterator[str]:
    """Run ``fn`` in the ``npu`` backend inside a ``with`` block only."""
    key = register_pass(fn, name)
    try:
        yield key
    finally:
        unregister_pass(key)


def signature() -> str:
    """What identifies the registered passes (part of the compiled-graph cache key)."""
    return ";".join(f"{name}:{id(fn)}" for name, fn in REGISTERED.items())


def run(gm: torch.fx.GraphModule) -> list[tuple[str, list[str]]]:
    """Run every registered pass; (name, changes) for each."""
    out = []
    for name, fn in list(REGISTERED.items()):
        changes = fn(gm)
        if changes is not None and not isinstance(changes, list):
            raise TypeError(f"custom pass {name!r} must return a list of changes (or None), "
                            f"got {type(changes).__name__}")
        gm.graph.lint()
        gm.recompile()
        out.append((name, list(changes or [])))
    return out
