"""``npu_lab.doctor()`` reports each part of the set-up and how to fix problems."""

from __future__ import annotations

import importlib
import subprocess
import sys

import npu_lab

doctor_mod = importlib.import_module("npu_lab.diagnose")


def test_doctor_reports_every_check_and_is_ok_here():
    report = npu_lab.doctor()
    names = [f.name for f in report.findings]
    for want in ("python", "torch", "numba", "npu device", "graph renderer", "jupyterlab", "ipywidgets"):
        assert want in names
    assert report.ok, str(report)
    assert "ready for the lab" in str(report) and "<table>" in report._repr_html_()


def test_doctor_says_what_to_do_when_something_is_missing(monkeypatch):
    monkeypatch.setattr(doctor_mod, "_version", lambda dist: None if dist == "ipywidgets" else "1.0")
    report = doctor_mod.doctor()
    widget = next(f for f in report.findings if f.name == "ipywidgets")
    assert widget.status == doctor_mod.WARN and "pip install ipywidgets" in widget.fix
    assert "-> pip install ipywidgets" in str(report)


def test_doctor_command_line():
    out = subprocess.run([sys.executable, "-m", "npu_lab", "doctor"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "npu device" in out.stdout and "ready for the lab" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "npu_lab"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "usage" in bad.stderr


def test_doctor_fails_without_a_cpp_compiler(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    finding = doctor_mod._cpp_compiler()
    assert finding.status == doctor_mod.FAIL and "npu device's runtime" in finding.detail
    assert "apt-get install g++" in finding.fix


def test_without_a_compiler_the_import_says_what_to_install_and_the_doctor_reports_it(tmp_path):
    """A fresh machine with no C++ compiler: one clear sentence on import, and the doctor names the problem."""
    import os

    env = {**os.environ, "CXX": "no-such-compiler", "NPU_LAB_CACHE_DIR": str(tmp_path)}
    imp = subprocess.run([sys.executable, "-c", "import npu_lab"], capture_output=True, text=True, env=env,
                         timeout=300)
    assert imp.returncode != 0
    last = imp.stderr.strip().splitlines()[-1]
    assert last.startswith("npu_lab.device.native.BuildError: npu_lab builds its native NPU runtime from C++")
    assert "install g++" in last and "no-such-compiler" in last
    doc = subprocess.run([sys.executable, "-m", "npu_lab", "doctor"], capture_output=True, text=True, env=env,
                         timeout=300)
    assert doc.returncode == 1
    assert "[problem] native runtime" in doc.stdout and "no-such-compiler" in doc.stdout


def test_the_runtime_rebuilds_when_its_sources_change(tmp_path, monkeypatch):
    """The build is keyed by a hash of csrc/: any edit to a source or header makes it out of date."""
    from npu_lab.device import native

    assert native.is_built()
    before = native.source_hash()
    header = native.CSRC / "driver" / "npu_driver.h"
    original = header.read_bytes()
    try:
        header.write_bytes(original + b"\n// touched by a test\n")
        assert native.source_hash() != before and not native.is_built()
    finally:
        header.write_bytes(original)
    assert native.source_hash() == before and native.is_built()
