"""Dynamo and AOTAutograd inspectors report what those systems really did."""

import torch

from npu_lab.inspect import aot, dynamo


def _branchy(x, n):
    y = x.sin() * n
    if y.sum() > 0:  # data-dependent: a graph break
        return y.relu()
    return y - 1


def test_dynamo_explain_graphs_breaks_guards_bytecode():
    r = dynamo.explain(_branchy, torch.randn(4, device="npu"), 3)
    assert len(r.graphs) == 2 and r.compile_count == 2
    assert len(r.graph_breaks) == 1
    brk = r.graph_breaks[0]
    assert brk.filename.endswith("test_inspect_compile.py") and brk.lineno > 0 and brk.reason
    groups = r.guard_groups()
    assert "TENSOR_MATCH" in {g.kind for g in groups["L['x']"]}
    assert any("== 3" in g.code for g in groups["L['n']"])
    assert "LOAD_FAST" in r.original_bytecode and r.transformed_bytecode
    assert "graph break" in r.summary()
    assert r.draw(0).dot.startswith("digraph")


def test_guard_check_and_recompile_demo():
    def g(x):
        return x.cos() + 1

    demo = dynamo.recompile_demo(g, (torch.randn(4, device="npu"),), (torch.randn(8, device="npu"),))
    assert demo.recompiled
    assert "size mismatch" in demo.checks[0].failed_guard
    same = dynamo.recompile_demo(g, (torch.randn(4, device="npu"),), (torch.randn(4, device="npu"),))
    assert not same.recompiled and all(c.passed for c in same.checks)
    dtype = dynamo.recompile_demo(g, (torch.randn(4, device="npu"),),
                                  (torch.randn(4, device="npu", dtype=torch.float64),))
    assert dtype.recompiled and "dtype" in dtype.checks[0].failed_guard.lower()

    def h(x, n):
        return x * n

    value = dynamo.recompile_demo(h, (torch.randn(4, device="npu"), 2), (torch.randn(4, device="npu"), 3))
    assert value.checks[0].failed_guard == "L['n'] == 2"  # no trailing source-line comment


def test_aot_partitions_and_saved_tensors():
    def f(x, w):
        return torch.nn.functional.gelu(x @ w).sin().sum(-1)

    x = torch.randn(16, 32, device="npu", requires_grad=True)
    w = torch.randn(32, 64, device="npu", requires_grad=True)
    r = aot.inspect_aot(f, x, w)
    for part in (r.default, r.min_cut):
        consumed = [n.name for n in part.backward.graph.nodes
                    if n.op == "placeholder" and not n.name.startswith("tangents")]
        assert [s.name for s in part.saved] == consumed  # saved == what backward consumes
        assert part.joint is not None and "tangents" in part.joint.code
    assert r.min_cut.saved_bytes < r.default.saved_bytes
    assert "min-cut" in r.summary()


def test_saved_memory_counts_each_storage_once():
    """A detach/alias of a saved tensor, or a view of a saved input, keeps no new bytes alive."""
    def f(x, w):
        return torch.tanh(x @ w).sin().sum()

    x = torch.randn(8, 6, device="npu")
    w = torch.randn(6, 4, device="npu", requires_grad=True)
    r = aot.inspect_aot(f, x, w)
    d, m = r.default, r.min_cut
    by_name = {s.name: s for s in d.saved}
    assert set(by_name) == {"primals_1", "tanh", "detach"}  # detach: autograd's alias of tanh
    assert by_name["detach"].alias_of == "tanh" and by_name["detach"].extra_bytes == 0
    assert by_name["tanh"].extra_bytes == by_name["detach"].nbytes == 8 * 4 * 4
    assert by_name["primals_1"].input == "primals_1" and by_name["primals_1"].note == "input"
    assert d.tensor_bytes == 448 and d.saved_bytes == 320 and d.storages == 2  # x and tanh(x @ w)
    assert m.saved_bytes == d.saved_bytes == 320  # min-cut saves the same storages (t is a view of x)
    assert {s.name: s.input for s in m.saved}["t"] == "primals_1"
    assert "3 tensors in 2 storages (320 bytes)" in r.summary()

    def gate(t):
        return t * torch.sigmoid(t)  # the default saves sigmoid(t) and its alias

    g = aot.inspect_aot(gate, torch.randn(64, 64, device="npu", requires_grad=True))
    assert g.default.tensor_bytes == 3 * 64 * 64 * 4
    assert g.default.saved_bytes == g.min_cut.saved_bytes == 2 * 64 * 64 * 4


def test_saved_views_of_one_storage_share_it():
    def outer(x):
        return (x.unsqueeze(1) * x.unsqueeze(2)).sin()

    r = aot.inspect_aot(outer, torch.randn(16, 32, device="npu", requires_grad=True))
    views = [s for s in r.default.saved if s.description in ("f32[16, 1, 32]", "f32[16, 32, 1]")]
    assert len(views) == 2 and sum(s.extra_bytes for s in views) == 16 * 32 * 4  # two views of x: x once
    assert r.default.saved_bytes == 16 * 32 * 4 + 16 * 32 * 32 * 4
    assert r.min_cut.saved_bytes == 16 * 32 * 4


def test_partition_drawing_shows_the_cut():
    def f(x, w):
        return torch.tanh(x @ w).sin().sum()

    r = aot.inspect_aot(f, torch.randn(8, 6, device="npu"), torch.randn(6, 4, device="npu", requires_grad=True))
    d = r.default.draw()
    assert "cluster_forward" in d.dot and "cluster_backward" in d.dot
    cut = [line for line in d.dot.splitlines() if '"fw:' in line and '"bw:' in line]
    assert len(cut) == 3  # one edge per saved tensor, forward value -> backward input
    assert '"fw:detach" -> "bw:detach"' in d.dot and "alias of tanh: 0 B more" in d.dot
    assert aot.SAVED_STYLE[1] in d.dot and "incoming gradient" in d.dot
    tangent = next(line for line in d.dot.splitlines() if line.strip().startswith('"bw:tangents_1" ['))
    saved = next(line for line in d.dot.splitlines() if line.strip().startswith('"bw:tanh" ['))
    assert tangent.split("fillcolor=")[1] != saved.split("fillcolor=")[1]  # the two kinds of input differ
    svg = d.svg()
    if svg is not None:
        from npu_lab.inspect.draw import svg_size_px
        assert svg_size_px(svg)[0] <= 1100


def test_three_irs_side_by_side():
    from npu_lab import models
    from npu_lab.inspect import compare_irs

    m = models.mlp()
    x, _ = models.example_batch(m, 2)
    irs = compare_irs(m, x)
    assert "aten::linear" in irs.torchscript or "aten::addmm" in irs.torchscript
    assert 'getattr(self, "0")' in irs.fx  # FX keeps the module call
    assert "torch.ops.aten.addmm" in irs.aten and "torch.ops.aten.relu" in irs.aten
    counts = irs.counts()
    assert counts["aten"] >= counts["torchscript"] > 0
    assert "TorchScript IR" in irs._repr_html_()


def test_shape_guards_are_grouped_apart_from_global_state():
    def h(x):
        return x.sin()

    x = torch.randn(4, 8, device="npu")
    torch._dynamo.mark_dynamic(x, 0)
    groups = dynamo.explain(h, x).guard_groups()
    shapes = [g.code for g in groups["symbolic shapes"]]
    assert "2 <= L['x'].size()[0]" in shapes  # 0/1 specialization, a guard on x's size
    assert not any("L[" in g.code for g in groups["global state"])
    assert "size=[None, 8]" in next(g.code for g in groups["L['x']"] if g.kind == "TENSOR_MATCH")


SCALE = 1.5


def _helper_sin(t):
    return t.sin()


def _baked(x, n):
    y = _helper_sin(x) * n
    return y.relu() + SCALE + 2


def test_drawing_shows_the_baked_constants_and_the_guards_that_pin_them():
    r = dynamo.explain(_baked, torch.randn(4, 8, device="npu"), 3)
    dot = r.draw(0).dot
    assert 'label="3\\nconstant"' in dot and "guard: L['n'] == 3" in dot
    assert 'label="1.5\\nconstant"' in dot and "guard: G['SCALE'] == 1.5" in dot
    assert 'label="2\\nconstant\\n(a literal in the code)"' in dot  # no guard mentions the literal 2
    assert "guard: L['x']: float32 on npu, size=[4, 8]" in dot
    assert "G['_helper_sin'].__code__ (its code is inlined here)" in dot
    assert "guard:" not in r.draw(0, guards=False).dot


def test_graph_call_offsets_follow_the_value_stack():
    import dis

    r = dynamo.explain(_baked, torch.randn(4, 8, device="npu"), 3)
    code = r.transformed_code[0]
    load, call = dynamo.graph_call_offsets(code)
    by_offset = {i.offset: i for i in dis.get_instructions(code)}
    assert by_offset[load].opname == "LOAD_GLOBAL" and str(by_offset[load].argval).startswith("__compiled_fn")
    assert by_offset[call].opname == "CALL" and call > load
    later_calls = [o for o, i in by_offset.items() if i.opname == "CALL" and load < o < call]
    assert later_calls  # the profiler marker's calls in between are not the graph's call
