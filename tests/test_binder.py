"""The Binder configuration agrees with pyproject.toml, and its postBuild works in a scratch environment."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"


def _requirements(path: Path) -> dict[str, str]:
    reqs = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        m = re.match(r"^([A-Za-z0-9_.\-\[\]]+)\s*(.*)$", line)
        reqs[m.group(1).lower()] = m.group(2).replace(" ", "")
    return reqs


def _pyproject() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = {}
    for spec in project["dependencies"] + project["optional-dependencies"]["lab"]:
        m = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", spec)
        out[m.group(1).lower()] = m.group(2).replace(" ", "")
    return out


@pytest.mark.skipif(tomllib is None, reason="needs Python 3.11 (tomllib)")
def test_binder_requirements_match_pyproject():
    binder, project = _requirements(BINDER / "requirements.txt"), _pyproject()
    assert set(project) <= set(binder), f"missing from binder/requirements.txt: {set(project) - set(binder)}"
    for name, spec in project.items():
        if name == "torch":
            # pyproject allows the 2.13 line; Binder pins one release of it.
            assert spec == "==2.13.*" and binder[name] == "==2.13.0"
        else:
            assert binder[name] == spec, f"{name}: binder {binder[name]!r} vs pyproject {spec!r}"
    assert "download.pytorch.org/whl/cpu" in (BINDER / "requirements.txt").read_text()
    runtime = (BINDER / "runtime.txt").read_text().strip()
    assert runtime == f"python-{sys.version_info.major}.{sys.version_info.minor}"
    assert os.access(BINDER / "postBuild", os.X_OK)


@pytest.mark.skipif(not shutil.which("git"), reason="needs git to copy the repository")
def test_postbuild_runs_in_a_scratch_environment(tmp_path):
    """A fresh venv that sees this environment's packages (but not the lab) runs postBuild."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    for sub in ("npu_lab", "binder"):  # the working tree, including changes not committed yet
        shutil.rmtree(repo / sub)
        shutil.copytree(ROOT / sub, repo / sub, ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                   "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    ours = Path(sysconfig.get_paths()["purelib"])
    # Everything installed here except npu_lab itself, which postBuild must install.
    (purelib / "_parent_env.pth").write_text(str(ours) + "\n")
    env = dict(os.environ, PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", PYTHONNOUSERSITE="1")
    env.pop("PYTHONPATH", None)
    check = subprocess.run([str(venv / "bin" / "python"), "-c", "import npu_lab; print(npu_lab.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
    if check.returncode == 0 and str(ROOT) in check.stdout:
        pytest.skip("this environment has npu_lab on a .pth path that the scratch venv would inherit")
    out = subprocess.run(["bash", "binder/postBuild"], cwd=repo, env=env, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "kernels compiled and cached" in out.stdout and "ready for the lab" in out.stdout
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import npu_lab; print(npu_lab.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, check=True).stdout
    assert str(repo) in where
