"""Carry your backend from one milestone notebook to the next.

Each milestone of the track is a notebook, and each builds on the ones before: milestone 2's CNN needs
milestone 1's matmul. The code that makes up your backend lives in the cells you mark with a first line

    # my_npu

(kernels, the helpers they use, the ``library(...).impl(...)`` calls). ``load("B1_eager_mlp")`` reads those
cells from that notebook *as you saved it* (the ``.ipynb`` file next to the notebook you are in), writes
them out as one Python module and imports it, so its kernels register in this process too (and numba's
``cache=True`` finds a source file). The ranks of milestone 7 (B7_two_ranks) call it to bring your kernels into
every rank. Loading a notebook again replaces what its previous load registered (the named libraries of
:func:`npu_lab.bringup.library`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

#: The first line of a cell that belongs to your backend.
MARKER = "# my_npu"


def marked_cells(path: Path) -> list[str]:
    """The source of every code cell of ``path`` whose first line is :data:`MARKER` (in order)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        first = cell.source.lstrip().splitlines()[:1]
        if first and first[0].strip().lower().startswith(MARKER):
            cells.append(cell.source)
    return cells


def notebook_dir() -> Path:
    """Where milestone notebooks are looked up: ``$NPU_LAB_NOTEBOOK_DIR``, else the working directory (Jupyter
    runs a notebook in its own folder)."""
    return Path(os.environ.get("NPU_LAB_NOTEBOOK_DIR") or os.getcwd())


def find(name: str, folder: str | os.PathLike | None = None) -> Path:
    """The notebook ``name`` (``"B1_eager_mlp"`` or ``"B1_eager_mlp.ipynb"``) in ``folder``."""
    base = Path(folder) if folder is not None else notebook_dir()
    path = base / (name if name.endswith(".ipynb") else f"{name}.ipynb")
    if not path.exists():
        raise FileNotFoundError(f"no notebook {path.name} in {base} (load() reads the milestone notebooks next to "
                                "the one you are in; pass folder=... if yours are elsewhere)")
    return path


def _cache() -> Path:
    from ..kernels.codegen import cache_dir

    path = cache_dir().parent / "bringup"
    path.mkdir(parents=True, exist_ok=True)
    return path


def load(name: str, folder: str | os.PathLike | None = None) -> ModuleType:
    """Run the ``# my_npu`` cells of notebook ``name`` as one module, ``my_npu_<stem>``, and return it.

    The module is written to the lab's cache under a name that includes a hash of its source, so numba's
    cache stays valid and an edited notebook gives a new module. An error in those cells raises as it would
    in the notebook, naming the module's file and line.
    """
    path = find(name, folder)
    cells = marked_cells(path)
    stem = path.stem
    source = (f'"""The `{MARKER}` cells of {path.name}, as saved (loaded by npu_lab.bringup.load)."""\n\n'
              + "\n\n".join(f"# --- cell {i + 1} ---\n{c}" for i, c in enumerate(cells)) + "\n")
    digest = hashlib.sha1(source.encode()).hexdigest()[:12]
    modname = f"my_npu_{stem}"
    file = _cache() / f"{modname}_{digest}.py"
    if not file.exists() or file.read_text() != source:
        tmp = file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, file)
    spec = importlib.util.spec_from_file_location(modname, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__dict__["__npu_lab_cells__"] = len(cells)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return module
