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


def test_doctor_warns_without_a_cpp_compiler(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    finding = doctor_mod._cpp_compiler()
    assert finding.status == doctor_mod.WARN and "Inductor" in finding.detail
    assert "apt-get install g++" in finding.fix
