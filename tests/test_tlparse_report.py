"""A compile's structured trace (TORCH_TRACE), read back with tlparse (a test dependency: never skipped)."""

import inspect

import pytest
import torch

from npu_lab.inspect import tlparse_report


def breaks_then_recompiles(x):
    y = x.sin() * 2
    print("in between")  # a graph break
    return y.cos() + 1


def test_tlparse_is_installed():
    assert tlparse_report.find_tlparse().exists()


def test_trace_of_a_graph_break_and_a_recompile(tmp_path, fresh_dynamo, capsys):
    compiled = torch.compile(breaks_then_recompiles, backend="eager")
    with tlparse_report.torch_trace(tmp_path / "trace") as capture:
        compiled(torch.randn(8, device="npu"))
        compiled(torch.randn(8, device="npu", dtype=torch.float64))  # dtype guard fails: recompile
    assert capture.log_file.stat().st_size > 0
    report = tlparse_report.run_tlparse(capture.log_file, tmp_path / "out")
    ids = [e.compile_id for e in report.entries]
    assert ids[:2] == ["0/0", "0/1"] and "1/0" in ids
    first = report.entries[0]
    assert first.frame == "breaks_then_recompiles"
    assert first.graph_ops == 2  # sin, mul before the break
    assert first.graph_breaks == ["Failed to trace builtin operator"]
    print_line = inspect.getsourcelines(breaks_then_recompiles)[1] + 2
    assert first.break_lines == [print_line]
    reason = report.entries[1].recompile_reason
    assert reason.startswith("0/0:") and "dtype mismatch" in reason
    assert report.frames[0] == "breaks_then_recompiles"
    assert report.frames[1].startswith("torch_dynamo_resume_in_breaks_then_recompiles")
    assert len(report.recompiles) == 2  # the function and its resume function, once each
    assert report.graph_breaks == 2  # the print, once per compile of the function
    assert "2 graph breaks, 2 recompiles" in report.summary()
    html = report._repr_html_()
    assert "[0/1]" in html and "dtype mismatch" in html and f"graph break at line {print_line}" in html


def test_nothing_is_traced_outside_the_block(tmp_path, fresh_dynamo):
    with tlparse_report.torch_trace(tmp_path / "trace") as capture:
        pass
    torch.compile(lambda t: t + 1, backend="eager")(torch.ones(2))
    assert capture.log_files == []
    with pytest.raises(RuntimeError, match="expected one trace log"):
        _ = capture.log_file


def test_bad_paths_raise_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no trace log"):
        tlparse_report.run_tlparse(tmp_path / "missing.log", tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="tlparse output directory"):
        tlparse_report.TlparseReport.load(tmp_path)


def test_torch_trace_environment_variable_in_a_fresh_process(tmp_path):
    """The standard way (TORCH_TRACE set before torch is imported) writes the log tlparse reads."""
    import os
    import subprocess
    import sys

    script = ("import torch\n"
              "torch.compile(lambda t: t.sin() + 1, backend='eager')(torch.randn(4))\n")
    env = dict(os.environ, TORCH_TRACE=str(tmp_path / "trace"))
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=300)
    (log,) = (tmp_path / "trace").glob("*.log")
    report = tlparse_report.run_tlparse(log, tmp_path / "out")
    assert [(e.compile_id, e.graph_ops, e.graph_breaks) for e in report.entries] == [("0/0", 2, [])]
