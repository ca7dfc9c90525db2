"""Turn generated kernel source into cached numba functions.

The NPU's elementwise kernels (and, later, the compiler's fused kernels) are
*generated* Python source. Source that only lives in memory cannot be cached
by numba, so each generated module is written once to a cache directory,
named by a hash of its text, and imported from there. numba's ``cache=True``
then stores the machine code beside it, and the next process (or the next
notebook kernel restart) loads the compiled kernel in milliseconds.

The cache lives in ``$NPU_LAB_CACHE_DIR`` or ``~/.cache/npu_lab``, in a folder
named for the Python and numba versions and a hash of the helper modules every
generated kernel inlines (``scalar_math``, ``fast_math``): numba checks only the
kernel's own file when it reuses cached machine code, so a changed helper must
lead to a fresh folder, or kernels would keep running the old helper.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import numba

_loaded: dict[str, ModuleType] = {}


_INLINED_HELPERS = ("scalar_math.py", "fast_math.py")


@functools.cache
def _helpers_hash() -> str:
    here = Path(__file__).parent
    return hashlib.sha1(b"".join((here / name).read_bytes() for name in _INLINED_HELPERS)).hexdigest()[:8]


def cache_dir() -> Path:
    """Where generated kernel modules and their compiled code are kept."""
    root = os.environ.get("NPU_LAB_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "npu_lab"
    tag = f"py{sys.version_info.major}{sys.version_info.minor}-numba{numba.__version__}-{_helpers_hash()}"
    path = base / tag / "kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def source_hash(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()[:16]


def load_module(source: str, stem: str) -> ModuleType:
    """Write ``source`` to the cache (once) and import it as a module."""
    key = f"{stem}_{source_hash(source)}"
    mod = _loaded.get(key)
    if mod is not None:
        return mod
    path = cache_dir() / f"{key}.py"
    if not path.exists() or path.read_text() != source:
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    modname = f"npu_lab_generated.{key}"
    spec = importlib.util.spec_from_file_location(modname, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    _loaded[key] = mod
    return mod


def generated_sources() -> dict[str, str]:
    """Every generated kernel module loaded in this process, by name."""
    return {k: Path(m.__file__).read_text() for k, m in _loaded.items() if m.__file__}
