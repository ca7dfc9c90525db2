"""Chapter 8's drawings and measurements (npu_lab.adaptation.pictures / measure / roadmap) show real data."""

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
