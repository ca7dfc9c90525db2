"""TorchScript inspectors: machine-independent IR text, drawings with blocks, warnings with their cause."""

import warnings

import torch

from npu_lab.inspect import torchscript as ts


class _Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)

    def forward(self, x):
        h = self.fc(x)
        for _ in range(x.size(0)):
            h = torch.tanh(h)
        if h.sum() > 0:
            return torch.relu(h)
        return -h


def _script(obj):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.script(obj)


def test_clean_removes_source_notes_mangling_and_paths():
    scripted = _script(_Branchy())
    raw = str(scripted.inlined_graph)
    assert " # " in raw and __file__ in raw
    text = ts.clean(raw)
    assert __file__ not in text and " # " not in text and "prim::If" in text
    assert ts.clean('File "/tmp/ipykernel_1/2.py", line 7') == 'File "<source>", line 7'
    assert ts.clean("__torch__.___torch_mangle_12.Gate") == "__torch__.Gate"


def test_drawing_shows_blocks_parameters_and_renders():
    d = ts.draw_script(_script(_Branchy()).to("npu"), "branchy")
    for part in ('label="prim::If"', 'label="prim::Loop"', 'label="then"', 'label="else"', 'label="body"',
                 "fc.weight", "aten::linear", "aten::relu", "aten::neg", "if result", "doublecircle"):
        assert part in d.dot, part
    assert "prim::Constant" not in d.dot
    svg = d.svg()
    assert svg is not None and svg.startswith("<svg")


def test_traced_drawing_has_shapes_and_no_branch():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(_Branchy().to("npu"), (torch.ones(2, 3, device="npu"),), check_trace=False)
    d = ts.draw_script(traced)
    assert "Float(2, 3)" in d.dot and "prim::If" not in d.dot and "aten::tanh" in d.dot


def test_record_warnings_names_the_users_line():
    with ts.record_warnings() as log:
        torch.jit.trace(_Branchy().to("npu"), (torch.ones(2, 3, device="npu"),), check_trace=False)
    tracer = log.unique("TracerWarning")
    assert [w.source for w in tracer] == ["if h.sum() > 0:"]
    assert log.of("DeprecationWarning") and "raised at: if h.sum() > 0:" in str(tracer[0])


def test_loop_edges_name_what_they_carry():
    """A prim::Loop's edges say what flows along them: trip count, counter, carried values in and out."""
    d = ts.draw_script(_script(_Branchy()))
    for label in ('label="trip count"', 'label="h (initial)"', 'label="h (carried)"', 'label="next h"',
                  'label="h (after the loop)"'):
        assert label in d.dot, label
    unlabelled_from_loop = [line for line in d.dot.splitlines()
                            if "->" in line and "label=" not in line and line.strip().startswith('"n')
                            and any(f'"{n}" ->' in line for n in _loop_ids(d.dot))]
    assert not unlabelled_from_loop, unlabelled_from_loop


def _loop_ids(dot: str) -> list[str]:
    import re

    return re.findall(r'"(n\d+)" \[label="loop"', dot)


def test_a_wide_drawing_fits_a_notebook():
    """A drawing wider than a notebook (an if inside a loop: 920 px) is scaled down to 860 px, its layout kept."""
    import re

    from npu_lab.exercises.ch2 import Running

    svg = ts.draw_script(_script(Running()), "an if inside a loop").svg()
    value, unit = re.search(r'<svg width="([\d.]+)(pt|px)"', svg).groups()
    width = float(value) * (4 / 3 if unit == "pt" else 1)
    assert 800 < width <= 860, width
