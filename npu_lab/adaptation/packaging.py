"""Packaging a backend: write a package's files, build its wheel once, install it where a fresh process finds it.

A chip vendor ships its PyTorch support as a pip package: Python code, C++ extensions compiled with
``torch.utils.cpp_extension.BuildExtension`` (setuptools), and an entry point in the ``torch.backends`` group
that ``import torch`` calls by itself. Chapter 8a builds a small one::

    root = write_package(tmp, {"setup.py": SETUP, "npu_extra/__init__.py": INIT, "npu_extra/csrc/ops.cpp": CPP})
    built = build_wheel(root, "ch8a_npu_extra", env=sdk_environment())   # pip wheel, cached by the files' hash
    site = install(built.wheel, tmp / "site")                            # pip install --target: no network

A C++ build costs 10-20 s, so :func:`build_wheel` keeps the wheel in torch's extension directory under
``name`` and builds again only when a file of the package, PyTorch, the compiler or the npu runtime changed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch


def write_package(root: str | Path, files: Mapping[str, str]) -> Path:
    """Write ``files`` (relative path -> text) under ``root``; returns ``root``."""
    root = Path(root)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def sdk_environment() -> dict[str, str]:
    """Where a package finds the device's "SDK": the runtime's headers (``NPU_LAB_CSRC``) and the runtime
    library it links against (``NPU_LAB_RUNTIME``), as a vendor's toolkit sets ``ASCEND_HOME`` or ``CUDA_HOME``."""
    from ..device import native

    return {"NPU_LAB_CSRC": str(native.CSRC), "NPU_LAB_RUNTIME": str(native.library_path())}


def _digest(root: Path, env: Mapping[str, str]) -> str:
    from ..device import native

    h = hashlib.sha1()
    h.update(f"{torch.__version__}|{sys.version}|{native.source_hash()}".encode())
    for key in sorted(env):
        h.update(f"{key}={env[key]}".encode())
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if not path.is_file() or parts[0] == "build" or any(p.endswith(".egg-info") or p == "__pycache__"
                                                             for p in parts):
            continue  # what a build leaves in the source tree
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@dataclass
class Built:
    """A wheel, whether this call built it (``False``: reused from the cache) and the seconds it took."""

    wheel: Path
    built: bool
    seconds: float

    def __repr__(self) -> str:
        how = f"built in {self.seconds:.1f} s" if self.built else "reused from the cache"
        return f"{self.wheel.name} ({how})"


def build_wheel(root: str | Path, name: str, env: Mapping[str, str] | None = None, timeout: float = 900.0) -> Built:
    """``pip wheel --no-deps --no-build-isolation`` of the package at ``root``, cached under ``name``.

    The wheel lands in ``torch.utils.cpp_extension``'s build directory for ``name``; a later call with the
    same files (and the same PyTorch, Python and npu runtime) returns it without building.
    """
    from .. import _torch_private as private

    root = Path(root)
    env = dict(env or {})
    cache = Path(private.extension_directory(name))
    stamp = cache / "wheel.sha1"
    digest = _digest(root, env)
    wheels = sorted(cache.glob("*.whl"))
    if wheels and stamp.exists() and stamp.read_text().strip() == digest:
        return Built(wheels[-1], False, 0.0)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        environment = {**os.environ, **env}
        # ninja and the compiler wrappers of this environment (its bin/ need not be on PATH)
        environment["PATH"] = os.path.dirname(sys.executable) + os.pathsep + environment.get("PATH", "")
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                               "--no-index", "-q", "-w", out, str(root)], capture_output=True, text=True,
                              timeout=timeout, env=environment)
        if proc.returncode:
            raise RuntimeError(f"building the wheel of {root.name} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
        made = sorted(Path(out).glob("*.whl"))
        if not made:
            raise RuntimeError(f"pip wheel made no wheel for {root}")
        for old in wheels:
            old.unlink()
        wheel = cache / made[-1].name
        shutil.copy2(made[-1], wheel)
    stamp.write_text(digest)
    return Built(wheel, True, time.perf_counter() - start)


def install(wheel: str | Path, target: str | Path) -> Path:
    """``pip install --no-deps --no-index --target target wheel``: no network, nothing outside ``target``.

    A fresh process finds the package (and its ``.dist-info`` with the entry points) once ``target`` is on its
    ``PYTHONPATH``. Returns ``target``.
    """
    target = Path(target)
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile", "-q",
                           "--disable-pip-version-check", "--target", str(target), str(wheel)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode:
        raise RuntimeError(f"installing {Path(wheel).name} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return target


def files_under(root: str | Path) -> list[str]:
    """The files under ``root`` (relative paths, sorted), compiled caches left out: what a package holds."""
    root = Path(root)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)
