"""Build and load the NPU's native runtime, ``npu_lab._C``, from the C++ in ``npu_lab/csrc``.

The runtime is compiled on this machine by ``torch.utils.cpp_extension`` against
the installed PyTorch, the first time ``npu_lab`` is imported (or by
``python -m npu_lab build``, which the set-up scripts run). The build lives in
the lab's cache (``~/.cache/npu_lab/native``, or ``$NPU_LAB_CACHE_DIR``), keyed
by the PyTorch and Python versions and the machine's architecture (a home directory
shared by an x86-64 and an ARM machine keeps one build for each); a hash of the
sources and the compiler decides whether it is
up to date, so an edit to any file in ``csrc/`` rebuilds what changed (ninja
recompiles only the files that need it) and an unchanged tree loads in
milliseconds.

Loading the library is what registers the device with PyTorch: its static
initialisers register the allocator, the device guard, the PrivateUse1 hooks,
the generator, the C++ kernels, autocast and the profiler plugin.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import torch

NAME = "npu_lab_C"
CSRC = Path(__file__).resolve().parent.parent / "csrc"
#: Compiler flags of the runtime (also part of the build's hash).
CFLAGS = ["-O2", "-DUSE_KINETO", "-Wno-unused-parameter"]

_module: ModuleType | None = None


class BuildError(ImportError):
    """The native runtime could not be built (the message says what to install or fix)."""


def sources() -> list[Path]:
    """The C++ translation units of the runtime, in a stable order."""
    return sorted(CSRC.rglob("*.cpp"))


def source_hash() -> str:
    """A hash of every source and header, the compiler (its version) and flags, and the PyTorch version."""
    h = hashlib.sha1()
    h.update(torch.__version__.encode())
    h.update(" ".join(CFLAGS).encode())
    h.update(_compiler_version().encode())
    for path in sorted([*CSRC.rglob("*.cpp"), *CSRC.rglob("*.h")]):
        h.update(str(path.relative_to(CSRC)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def build_directory() -> Path:
    """Where the runtime is built and cached."""
    root = os.environ.get("NPU_LAB_CACHE_DIR") or os.path.join(Path.home(), ".cache", "npu_lab")
    tag = f"torch{torch.__version__.replace('+', '_')}-{sys.implementation.cache_tag}-{platform.machine()}"
    return Path(root) / "native" / tag


def compiler() -> str | None:
    """The C++ compiler PyTorch's extension builder will use (``$CXX``, else ``c++``), if it exists."""
    cxx = os.environ.get("CXX")
    if cxx:
        return shutil.which(cxx)
    return shutil.which("c++")


_compiler_versions: dict[str | None, str] = {}


def _compiler_version() -> str:
    """The first line of ``c++ --version`` (empty when there is no compiler): a new compiler rebuilds."""
    cxx = compiler()
    if cxx not in _compiler_versions:
        try:
            out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout if cxx else ""
        except (OSError, subprocess.SubprocessError):
            out = ""
        _compiler_versions[cxx] = out.splitlines()[0] if out else ""
    return _compiler_versions[cxx]


def library_path() -> Path:
    return build_directory() / f"{NAME}.so"


def is_built() -> bool:
    """Is a build of the current sources in the cache?"""
    stamp = build_directory() / f"{NAME}.sha1"
    return library_path().exists() and stamp.exists() and stamp.read_text().strip() == source_hash()


def _import(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(NAME, str(path))
    spec = importlib.util.spec_from_file_location(NAME, str(path), loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[NAME] = module
    return module


def build(verbose: bool = False) -> Path:
    """Compile the runtime if its sources changed (ninja rebuilds only what it must). Returns the library."""
    if compiler() is None:
        wanted = os.environ.get("CXX") or "c++"
        raise BuildError(
            f"npu_lab builds its native NPU runtime from C++ and found no C++ compiler ({wanted}): "
            "install g++ (Debian/Ubuntu: sudo apt-get install g++), then import npu_lab again."
        )
    # ninja may come from pip (into this environment's bin/, which need not be on PATH)
    bindir = os.path.dirname(sys.executable)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    from torch.utils import cpp_extension

    directory = build_directory()
    directory.mkdir(parents=True, exist_ok=True)
    digest = source_hash()
    if not verbose:
        print("npu-lab: building the native NPU runtime (first use or changed sources; about a minute)...",
              file=sys.stderr, flush=True)
    include = Path(torch.__file__).parent / "include"
    with _builder_lock(directory):
        _build_locked(cpp_extension, directory, include, verbose)
    (directory / f"{NAME}.sha1").write_text(digest)
    return library_path()


@contextlib.contextmanager
def _builder_lock(directory: Path) -> Iterator[None]:
    """Hold an OS lock (released by the kernel when the process dies) while this process builds.

    torch.utils.cpp_extension marks a build with a ``lock`` file and waits, without end, while one
    exists; a build interrupted at the wrong moment (Ctrl-C, a killed notebook kernel) leaves the file
    behind and every later import would hang. Whoever holds this lock is the only builder, so a
    ``lock`` file found then is stale and removed.
    """
    with open(directory / "builder.flock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        (directory / "lock").unlink(missing_ok=True)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_locked(cpp_extension: ModuleType, directory: Path, include: Path, verbose: bool) -> None:
    import numpy

    try:
        cpp_extension.load(
            name=NAME,
            sources=[str(p) for p in sources()],
            extra_cflags=CFLAGS,
            extra_include_paths=[str(CSRC), numpy.get_include(), str(include / "kineto"),
                                 sysconfig.get_paths()["include"]],
            build_directory=str(directory),
            verbose=verbose,
            is_python_module=False,
        )
    except (RuntimeError, OSError, ImportError) as exc:
        raise BuildError(f"building npu_lab's native runtime failed: {exc}") from exc


def load() -> ModuleType:
    """The loaded runtime module (building it first if needed)."""
    global _module
    if _module is not None:
        return _module
    if NAME in sys.modules:
        _module = sys.modules[NAME]
        return _module
    if not is_built():
        build()
    try:
        _module = _import(library_path())
    except ImportError:
        # A build this machine cannot load (made elsewhere, against another C library): build it here.
        (build_directory() / f"{NAME}.sha1").unlink(missing_ok=True)
        build()
        _module = _import(library_path())
    return _module


def excerpt(relpath: str, start: str, lines: int = 12) -> str:
    """``lines`` lines of ``npu_lab/csrc/<relpath>``, from the first line containing ``start`` (for the chapters)."""
    text = (CSRC / relpath).read_text().splitlines()
    first = next((i for i, line in enumerate(text) if start in line), None)
    if first is None:
        raise ValueError(f"{start!r} is not in csrc/{relpath}")
    return f"// csrc/{relpath}\n" + "\n".join(text[first:first + lines])


def summary(relpath: str) -> str:
    """The first line of a source file's header comment: what the file is."""
    first = (CSRC / relpath).read_text().splitlines()[0]
    return first.removeprefix("//").strip()
