"""``npu_lab.doctor()`` / ``python -m npu_lab doctor``: is this machine ready for the lab?

Each check says what it found and, when something is wrong, what to do about it.
"""

from __future__ import annotations

import html
import importlib
import importlib.metadata as md
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

OK, WARN, FAIL = "ok", "warning", "problem"


@dataclass
class Finding:
    name: str
    status: str
    detail: str
    fix: str = ""


@dataclass
class DoctorReport:
    """What :func:`doctor` found; ``ok`` is False if any check found a problem."""

    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(f.status != FAIL for f in self.findings)

    def __str__(self) -> str:
        width = max(len(f.name) for f in self.findings)
        lines = []
        for f in self.findings:
            lines.append(f"[{f.status:>7}] {f.name:<{width}}  {f.detail}")
            if f.fix and f.status != OK:
                lines.append(f"{'':>10}{'':<{width}}  -> {f.fix}")
        lines.append("ready for the lab" if self.ok else "fix the problems above, then run the doctor again")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = {OK: "#1a7f37", WARN: "#b35900", FAIL: "#cf222e"}
        rows = "".join(
            f"<tr><td style='color:{colour[f.status]}'><b>{f.status}</b></td><td>{html.escape(f.name)}</td>"
            f"<td style='text-align:left'>{html.escape(f.detail)}</td>"
            f"<td style='text-align:left'>{html.escape(f.fix) if f.status != OK else ''}</td></tr>"
            for f in self.findings)
        return f"<table><tr><th></th><th>check</th><th>found</th><th>what to do</th></tr>{rows}</table>"


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _python() -> Finding:
    v = sys.version_info
    if v < (3, 10):
        return Finding("python", FAIL, f"{v.major}.{v.minor}", "use Python 3.10 or newer")
    return Finding("python", OK, f"{v.major}.{v.minor}.{v.micro} ({sys.executable})")


def _torch() -> Finding:
    import torch

    cuda = torch.version.cuda
    detail = f"{torch.__version__}" + (f" (CUDA {cuda} build: works, but a large download)" if cuda else " (CPU build)")
    if not torch.__version__.startswith("2.13."):
        return Finding("torch", FAIL, detail, "the lab is pinned to PyTorch 2.13: pip install 'torch==2.13.0'")
    return Finding("torch", WARN if cuda else OK, detail,
                   "fine; the CPU wheel is smaller: pip install torch==2.13.0 --index-url "
                   "https://download.pytorch.org/whl/cpu")


def _numba() -> Finding:
    from .kernels.codegen import cache_dir

    v = _version("numba")
    if v is None:
        return Finding("numba", FAIL, "not installed", "pip install numba")
    path = cache_dir()
    writable = os.access(path, os.W_OK)
    kernels = len(list(path.glob("*.py"))) if path.exists() else 0
    detail = f"{v}; generated-kernel cache {path} ({kernels} kernels)"
    if not writable:
        return Finding("numba", WARN, detail + " is not writable",
                       "set NPU_LAB_CACHE_DIR to a writable directory so compiled kernels are reused")
    return Finding("numba", OK, detail)


def _native_runtime() -> Finding:
    """The device runtime is C++ built on this machine by torch.utils.cpp_extension."""
    import npu_lab
    from npu_lab.device import native

    fix = "sudo apt-get install g++ (the npu device's runtime is C++ compiled on this machine)"
    if native.compiler() is None:
        return Finding("native runtime", FAIL, f"no C++ compiler ({os.environ.get('CXX') or 'c++'} not found)", fix)
    if npu_lab.build_error is not None:
        return Finding("native runtime", FAIL, str(npu_lab.build_error).splitlines()[0][:300],
                       "fix the problem above, then: python -m npu_lab build")
    state = "built" if native.is_built() else "not built for the current sources"
    return Finding("native runtime", OK if native.is_built() else WARN,
                   f"{state}: {native.library_path()} (compiler {native.compiler()})",
                   "python -m npu_lab build")


def _device() -> Finding:
    import torch

    import npu_lab

    if npu_lab.build_error is not None:
        return Finding("npu device", FAIL, "not registered: the native runtime did not build", "see above")

    try:
        x = torch.arange(4.0, device="npu")
        y = (x * 2 + 1).sum().item()
    except Exception as exc:  # noqa: BLE001 - report whatever broke
        return Finding("npu device", FAIL, f"{type(exc).__name__}: {exc}",
                       "reinstall the lab (pip install -e .) and check the torch version above")
    cap = torch.npu.mem_get_info()[1]
    if y != 16.0:
        return Finding("npu device", FAIL, f"(x*2+1).sum() gave {y}, expected 16.0", "report this as a bug")
    return Finding("npu device", OK, f"{torch.npu.device_count()} device(s), {cap / 2**30:.1f} GiB simulated memory")


def _renderer() -> Finding:
    from .inspect.draw import renderer

    r = renderer()
    if r is None:
        return Finding("graph renderer", WARN, "none found: drawings show their DOT source instead",
                       "pip install graphviz-pure (or: sudo apt-get install graphviz)")
    return Finding("graph renderer", OK, f"{r[0]} ({r[1]})")


def _cpp_compiler() -> Finding:
    """The npu runtime and Inductor on the CPU (chapters 0, 1 and 8a) compile C++: a compiler and Python's headers."""
    import shutil
    import sysconfig

    names = [os.environ["CXX"]] if os.environ.get("CXX") else ["c++", "g++", "clang++"]
    found = next((shutil.which(n) for n in names if shutil.which(n)), None)
    fix = "sudo apt-get install g++ python3-dev  (the npu runtime and Inductor's CPU backend are compiled C++)"
    if found is None:
        return Finding("C++ compiler", FAIL, f"none of {', '.join(names)} on PATH: the npu device's runtime "
                       "cannot be built, and torch.compile's default backend (Inductor) cannot run on the CPU", fix)
    header = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if not os.path.exists(header):
        return Finding("C++ compiler", FAIL, f"{found}, but no {header}", fix)
    return Finding("C++ compiler", OK, f"{found} (builds the npu runtime; Inductor on the CPU)")


def _package(dist: str, module: str, purpose: str, level: str = WARN) -> Callable[[], Finding]:
    def check() -> Finding:
        v = _version(dist)
        if v is None:
            return Finding(dist, level, f"not installed ({purpose})",
                           f"pip install {dist}  (or: pip install -e '.[lab]')")
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001
            return Finding(dist, level, f"{v} installed but fails to import: {exc}",
                           f"pip install --force-reinstall {dist}")
        return Finding(dist, OK, v)

    return check


def _progress_home() -> Finding:
    from .grading.progress import home

    path = home()
    try:
        path.mkdir(parents=True, exist_ok=True)
        ok = os.access(path, os.W_OK)
    except OSError:
        ok = False
    if not ok:
        return Finding("progress file", WARN, f"{path} is not writable",
                       "set NPU_LAB_HOME to a writable directory to keep your progress")
    return Finding("progress file", OK, str(path / "progress.json"))


CHECKS: list[Callable[[], Finding]] = [
    _python, _torch, _numba, _native_runtime, _device, _renderer, _cpp_compiler,
    _package("jupyterlab", "jupyterlab", "opens the chapters"),
    _package("ipywidgets", "ipywidgets", "the interactive explorers"),
    _package("jupyterlab_widgets", "jupyterlab_widgets", "shows ipywidgets in JupyterLab"),
    _package("matplotlib", "matplotlib", "plots"),
    _package("graphviz", "graphviz", "graphviz's Python package"),
    _progress_home,
]


def doctor() -> DoctorReport:
    """Check Python, PyTorch, numba, the npu device, graph drawing and JupyterLab; say how to fix problems."""
    report = DoctorReport()
    for check in CHECKS:
        try:
            report.findings.append(check())
        except Exception as exc:  # noqa: BLE001 - a broken check must not hide the others
            report.findings.append(Finding(check.__name__.strip("_"), FAIL, f"{type(exc).__name__}: {exc}"))
    return report
