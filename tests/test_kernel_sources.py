"""Rules every numba kernel module follows, checked on the source.

A numba function compiled with ``cache=True`` that calls itself compiles and runs the first
time, but when a later process loads it from the disk cache LLVM cannot resolve its own
symbol and aborts the interpreter ("LLVM ERROR: Symbol not found: .numba.unresolved$...").
So no kernel may be recursive: write the recursion as a loop or a helper.
"""

from __future__ import annotations

import ast
from pathlib import Path

import npu_lab

KERNELS = Path(npu_lab.__file__).parent / "kernels"


def _self_calls(path: Path) -> list[str]:
    found = []
    for fn in ast.walk(ast.parse(path.read_text())):
        if isinstance(fn, ast.FunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == fn.name:
                    found.append(f"{path.name}:{node.lineno} {fn.name} calls itself")
    return found


def test_no_kernel_is_recursive():
    found = [hit for path in sorted(KERNELS.glob("*.py")) for hit in _self_calls(path)]
    assert not found, found


def test_the_check_finds_recursion(tmp_path):
    src = tmp_path / "k.py"
    src.write_text("def f(x):\n    return f(x - 1) if x else 0\n")
    assert _self_calls(src) == ["k.py:2 f calls itself"]
