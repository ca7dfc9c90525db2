"""Chapters 8a and 8b's drawings and measurements (npu_lab.adaptation: pictures, measure, roadmap, fresh processes,
packaging) show real data."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
import torch

import npu_lab
from npu_lab import adaptation, models
from npu_lab.adaptation.readiness import Item, Readiness

SVG = "{http://www.w3.org/2000/svg}"


def _parse(svg: adaptation.Svg) -> ET.Element:
    root = ET.fromstring(svg.text)
    assert int(root.get("width")) == svg.width <= 1100
    return root


def _profile(fn):
    fn()
    with npu_lab.profile() as prof:
        fn()
        torch.npu.synchronize()
    return prof


def test_three_ways_diagram_is_valid_deterministic_and_names_each_layer():
    svg = adaptation.three_ways_svg()
    root = _parse(svg)
    text = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    for needle in ("way 1", "way 2", "way 3", "PrivateUse1", "REGISTER_ALLOCATOR", "C10_REGISTER_GUARD_IMPL",
                   "Inductor", "dispatcher"):
        assert needle in text, needle
    assert svg.text == adaptation.three_ways_svg().text
    assert svg._repr_svg_() == svg.text and repr(svg) == f"<Svg drawing, {svg.width}x{svg.height} px>"


def test_timeline_draws_every_event_at_its_simulated_time():
    a, b = torch.randn(64, 64, device="npu"), torch.randn(64, 64, device="npu")
    prof = _profile(lambda: (a @ b).relu().cpu())
    assert [k.kind for k in prof.kernels] == ["kernel", "kernel", "copy"]
    root = _parse(adaptation.timeline_svg({"step": prof}))
    bars = [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert [r.find(f"{SVG}title").text.split(":")[0] for r in bars] == [k.name for k in prof.kernels]
    widths = [float(r.get("width")) + 1.0 for r in bars]  # bars are drawn 1 px short, to show gaps
    sims = [k.end_us - k.start_us for k in prof.kernels]
    assert widths[0] / sims[0] == pytest.approx(widths[1] / sims[1], rel=0.02)
    assert f"{prof.sim_time_us:.1f} us" in ET.tostring(root, encoding="unicode")
    colors = {r.get("fill") for r in bars}
    assert adaptation.measure.CATEGORY_COLORS["copy"] in colors
    with pytest.raises(ValueError, match="no device events"):
        adaptation.timeline_svg({"empty": npu_lab.profile()})


def test_roofline_places_a_big_matmul_above_a_small_add():
    a = torch.randn(256, 256, device="npu")
    big = _profile(lambda: a @ a)
    small = _profile(lambda: a[:4] + a[:4])
    root = _parse(adaptation.roofline_svg({"mm": big.kernels, "add": small.kernels}, npu_lab.cost_model))
    dots = {c.find(f"{SVG}title").text.split(":")[0]: c for c in root.iter(f"{SVG}circle")
            if c.find(f"{SVG}title") is not None}
    assert set(dots) == {"mm", "add"}
    assert float(dots["mm"].get("cy")) < float(dots["add"].get("cy"))  # higher GFLOP/s is further up
    assert float(dots["mm"].get("cx")) > float(dots["add"].get("cx"))  # and more FLOPs per byte
    with pytest.raises(ValueError, match="1100"):
        adaptation.roofline_svg({"mm": big.kernels}, npu_lab.cost_model, width=1400)


def test_roofline_labels_sit_off_the_lines():
    """No label inside the plot lies on the roof or on a dashed curve: the lines are named in the legend, the
    bounds in the empty band above the roof, the ridge under the axis."""
    a = torch.randn(256, 256, device="npu")
    root = _parse(adaptation.roofline_svg({"mm": _profile(lambda: a @ a).kernels}, npu_lab.cost_model))
    frame = next(r for r in root.iter(f"{SVG}rect") if r.get("fill") == "none")
    left, top = float(frame.get("x")), float(frame.get("y"))
    right, bottom = left + float(frame.get("width")), top + float(frame.get("height"))
    lines = []
    for poly in root.iter(f"{SVG}polyline"):
        lines.append([tuple(map(float, p.split(","))) for p in poly.get("points").split()])

    def y_at(points, x):
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            if x0 <= x <= x1:
                return y0 + (y1 - y0) * (x - x0) / (x1 - x0 or 1)
        return None

    inside = [t for t in root.iter(f"{SVG}text")
              if left < float(t.get("x")) < right and top < float(t.get("y")) < bottom]
    assert inside, "the bound labels are drawn inside the plot"
    for t in inside:
        x, y = float(t.get("x")), float(t.get("y"))
        width = 6.5 * len(t.text or "")
        xs = [x - width, x] if t.get("text-anchor") == "end" else [x, x + width]
        for points in lines:
            for xx in (xs[0], (xs[0] + xs[1]) / 2, xs[1]):
                line_y = y_at(points, xx)
                assert line_y is None or not (y - 12 <= line_y <= y + 3), (t.text, xx, line_y)


def test_partitions_drawing_boxes_each_partition_and_marks_the_cpu_nodes():
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupport

    def f(x):
        return torch.relu(torch.sin(x.exp()) + 1).sum()

    gm = make_fx(f)(torch.randn(4))

    class NoSin(OperatorSupport):
        def is_node_supported(self, submodules, node):
            return node.op == "call_function" and "sin" not in str(node.target)

    partitions = CapabilityBasedPartitioner(gm, NoSin(), allows_single_node_partition=True).propose_partitions()
    assert len(partitions) == 2
    drawing = adaptation.partitions_drawing(gm, partitions, title="t")
    assert drawing.dot.count("subgraph \"cluster_") == 2
    assert "on the CPU" in drawing.dot and adaptation.pictures._CPU_COLOR in drawing.dot
    sin_line = next(line for line in drawing.dot.splitlines() if '"sin"' in line and "label=" in line)
    assert adaptation.pictures._CPU_COLOR in sin_line


def test_run_fresh_runs_a_function_in_a_new_process():
    def probe(word: str) -> None:
        import sys

        print(word, "npu_lab" in sys.modules, "torch" in sys.modules)

    fresh = adaptation.run_fresh(probe, "hello", env={"NPU_LAB_BARE": "1"})
    assert fresh.ok and fresh.stdout.split() == ["hello", "False", "False"]
    failing = adaptation.run_fresh("import sys\nprint('before')\nsys.exit(3)")
    assert not failing.ok and failing.returncode == 3 and "exited with 3" in repr(failing)


def test_host_breakdown_names_where_the_time_goes():
    import time

    def slow():
        time.sleep(0.01)

    parts = adaptation.measure.host_breakdown(slow, calls=3, top=2)
    assert parts[-1][0] == "everything else" and len(parts) == 3
    assert parts[0][0] == "built-in calls" and parts[0][1] >= 9.0  # time.sleep, per call


def test_packaging_writes_a_package_and_lists_its_files(tmp_path):
    root = adaptation.write_package(tmp_path / "pkg", {"setup.py": "x = 1\n", "pkg/__init__.py": "",
                                                         "pkg/csrc/a.cpp": "int f();\n"})
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "x.pyc").write_text("")
    assert adaptation.files_under(root) == ["pkg/__init__.py", "pkg/csrc/a.cpp", "setup.py"]
    env = adaptation.sdk_environment()
    assert set(env) == {"NPU_LAB_CSRC", "NPU_LAB_RUNTIME"} and env["NPU_LAB_RUNTIME"].endswith(".so")


def test_breakdown_counts_categories_and_latency():
    a = torch.randn(32, 32, device="npu")
    prof = _profile(lambda: (a @ a).relu().cpu())
    cm = npu_lab.cost_model
    b = adaptation.breakdown(prof, cm)
    assert b.by_category["matmul / conv"][0] == 1 and b.by_category["other ATen kernel"][0] == 1
    assert b.by_category["copy"][0] == 1 and b.events == 3 and b.launches == 2
    assert b.launch_us == pytest.approx(2 * cm.launch_us + cm.link_latency_us)
    assert b.latency_share == pytest.approx(b.launch_us / prof.sim_time_us)
    assert sum(us for _, us in b.by_category.values()) == pytest.approx(prof.sim_time_us, rel=1e-6)
    table = adaptation.breakdown_table({"eager": prof}, cm)
    assert "matmul / conv" in table and f"{prof.sim_time_us:7.1f} us" in table


def test_efficiency_scores_one_kernel_at_the_roof_and_a_chain_below_it():
    cm = npu_lab.cost_model
    u, v = torch.randn(1 << 18, device="npu"), torch.randn(1 << 18, device="npu")
    n = u.numel()
    one = adaptation.efficiency("add", _profile(lambda: u + v), n, 12 * n, cm)
    assert one.fraction == pytest.approx(1.0, rel=1e-3) and one.tier.startswith("100%")
    chain = adaptation.efficiency("chain", _profile(lambda: ((u + v) * v).relu()), 3 * n, 12 * n, cm)
    assert chain.launches == 3 and chain.fraction < 0.5 and chain.tier == "below the minimum"
    assert re.search(r"3 launch\(es\)", str(chain))
    with pytest.raises(ValueError):
        adaptation.measure.ideal_us(-1, 0, cm)


def test_coverage_picture_fills_one_cell_per_native_operator():
    reports = {}
    for make in (models.mlp, models.SmallCNN):
        m = make()
        reports[make.__name__] = npu_lab.coverage(m, (models.example_batch(m, 2)[0],))
    root = _parse(adaptation.coverage_svg(reports))
    native = adaptation.pictures.COVERAGE_COLORS["native"]
    cells = [r for r in root.iter(f"{SVG}rect") if r.get("fill") == native and r.get("height") == "12"
             and r.find(f"{SVG}title") is None]
    legend = 1
    assert len(cells) - legend == sum(len(r.native) for r in reports.values())
    with pytest.raises(ValueError):
        adaptation.coverage_svg({})


def test_roadmap_follows_the_readiness_items():
    ready = Readiness(items=[Item("operators covered", "done", "all"), Item("results match the CPU", "to do", "off")])
    weeks = adaptation.roadmap(ready)
    by_check = {w.check: w.status for w in weeks}
    assert by_check["device registered"] == "done"  # the npu is registered in this process
    assert by_check["operators covered"] == "done" and by_check["results match the CPU"] == "to do"
    assert by_check["fusion enabled in the compiled graph"] == "not measured"
    table = adaptation.roadmap_table(weeks)
    assert "[ ] week 4" in table and "[x] week 2-3" in table and "[-] week 10" in table
    with pytest.raises(TypeError):
        adaptation.roadmap(object())
