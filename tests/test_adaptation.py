"""verify() and readiness(): chapter 8b's correctness check and live adaptation checklist."""

from __future__ import annotations

import re

import torch

import npu_lab
from npu_lab import models


def test_verify_passes_for_a_correct_model_and_reports_every_gradient():
    m = models.mlp()
    x, _ = models.example_batch(m, 4)
    v = npu_lab.verify(m, x)
    assert v.ok and len(v.tensors) == 1 + len(list(m.parameters()))
    assert "PASS" in str(v) and "<table>" in v._repr_html_()
    assert all(p.device.type == "cpu" for p in m.parameters())  # the model is copied, not moved


def test_verify_prints_no_rounding_noise_for_tensors_within_tolerance():
    """A correct model's errors are float32 rounding noise whose digits differ between CPUs: its printout (and
    so a notebook's compared output) shows the tolerance met, not the digits; errors() has the figures."""
    torch.manual_seed(0)
    m = models.SmallCNN()
    v = npu_lab.verify(m, models.example_batch(m, 2)[0])
    assert v.ok
    number = re.compile(r"\d\.\d+e[-+]\d+")
    assert not number.search(str(v)) and not number.search(v._repr_html_())
    assert number.search(v.errors()) and len(v.errors().splitlines()) == 1 + len(v.tensors)


def test_verify_fails_when_the_npu_result_is_wrong():
    class Skewed(torch.nn.Module):
        def forward(self, x):
            return x * (1.001 if x.device.type == "npu" else 1.0)

    v = npu_lab.verify(Skewed(), torch.ones(3, 4), backward=False)
    assert not v.ok and v.worst.max_abs > 5e-4 and "FAIL" in str(v)
    assert f"{v.worst.max_abs:.2e}" in str(v)  # a failure's figures carry information: they are shown


def test_readiness_measures_every_item():
    m = models.TransformerBlock()
    x, _ = models.example_batch(m, 2)
    r = npu_lab.readiness(m, x)
    names = [i.name for i in r.items]
    assert names == ["operators covered", "results match the CPU",
                     "native operators in the OpInfo conformance suite", "fusion enabled in the compiled graph",
                     "eager step within 2x the CPU's time"]
    assert r.items[0].status == "done" and r.items[1].status == "done"
    # speed is not granted: the item is done only when the measured ratio meets the target
    assert (r.items[4].status == "done") == (r.wall_ratio_vs_cpu <= 2.0)
    assert r.compiled_launches < r.eager_launches and r.compiled_sim_us < r.eager_sim_us
    assert r.wall_ratio_vs_cpu > 0
