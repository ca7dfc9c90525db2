"""Chapters 6 and 9: what their checks do beyond the wrong answers of tests/wrong/.

* a rank that raises (anything) ends the ranks at once, and the check says which rank raised what;
* correct answers written differently from the solutions pass;
* the partition drawing fits a notebook column (the cut side by side; a big backward graph by its inputs).
"""

from __future__ import annotations

import math
import time

import pytest
import torch
import torch.distributed as dist
from torch import nn

import npu_lab  # noqa: F401 - registers npuccl and the npu device
from npu_lab.exercises import ch9
from npu_lab.grading import EXERCISES, NOT_YET, PASSED, grade, load_all

load_all()
pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built in this torch")


# ---------------------------------------------------------------------------------------------
# a rank that raises
# ---------------------------------------------------------------------------------------------

class _Odd(BaseException):
    pass


@pytest.mark.parametrize(("exc", "kind"), [(ValueError("broken"), ValueError), (KeyboardInterrupt(), KeyboardInterrupt),
                                           (SystemExit(3), SystemExit), (_Odd("odd"), ch9.RankError)])
def test_a_rank_that_raises_ends_every_rank_at_once_and_is_named(exc, kind):
    def body(rank, group):
        if rank == 1:
            raise exc
        t = torch.empty(4, device="npu")
        group.recv([t], 1, 0).wait()  # waits for rank 1, which never sends

    start = time.monotonic()
    with pytest.raises(kind) as info:
        ch9.run_ranks(3, body, collective_timeout=20)
    assert time.monotonic() - start < 5, "the other ranks' receive (20 s) was waited out"
    assert f"rank 1 raised {type(exc).__name__}" in str(info.value)
    assert info.value.rank == 1


def _ring_interrupted_on_rank_one(tensor, rank, world_size, send, recv):
    if rank == 1:
        raise KeyboardInterrupt
    recv(torch.empty_like(tensor), (rank - 1) % world_size)  # rank 2 waits for rank 1
    return tensor


def test_the_ring_check_says_what_a_rank_raised_without_waiting_for_the_others():
    start = time.monotonic()
    r = grade(EXERCISES["ch9.ring_allreduce"], {"ring_allreduce": _ring_interrupted_on_rank_one})
    assert time.monotonic() - start < 15
    text = str(r)
    assert r.status == NOT_YET and "interrupted" in text and "rank 1 raised KeyboardInterrupt" in text, text


class _ExitsInFinish:
    def __init__(self, model, bucket_mb, all_reduce, world_size):
        pass

    def finish(self):
        raise SystemExit("bye")


def _tp_forward_fails(x, w1, b1, w2, b2, all_reduce):
    raise ValueError("no forward today")


@pytest.mark.parametrize(("eid", "answers", "said"), [
    ("ch9.grad_buckets", {"GradBuckets": _ExitsInFinish}, "raised SystemExit: bye"),
    ("ch9.tp_mlp", {"tp_mlp_forward": _tp_forward_fails, "tp_mlp_backward": _tp_forward_fails},
     "raised ValueError: no forward today"),
])
def test_every_rank_check_says_what_a_rank_raised(eid, answers, said):
    start = time.monotonic()
    r = grade(EXERCISES[eid], answers)
    assert time.monotonic() - start < 30
    assert r.status == NOT_YET and said in str(r), str(r)


# ---------------------------------------------------------------------------------------------
# correct answers written differently from the solutions
# ---------------------------------------------------------------------------------------------

def alt_ring(tensor, rank, world_size, send, recv):
    """Chunks copied out (not views), the result put together with torch.cat at the end."""
    pieces = [c.clone() for c in torch.tensor_split(tensor.flatten(), world_size)]
    nxt, prev = (rank + 1) % world_size, (rank + world_size - 1) % world_size
    for s in range(world_size - 1):
        send(pieces[(rank - s) % world_size], nxt)
        k = (rank - s - 1) % world_size
        got = torch.zeros_like(pieces[k])
        recv(got, prev)
        pieces[k] = pieces[k] + got
    for s in range(world_size - 1):
        send(pieces[(rank + 1 - s) % world_size], nxt)
        k = (rank - s) % world_size
        got = torch.zeros_like(pieces[k])
        recv(got, prev)
        pieces[k] = got
    return torch.cat(pieces).view(tensor.shape)


class AltBuckets:
    """One flat buffer per bucket made up front; gradients copied in as they arrive; torch.split to copy back."""

    def __init__(self, model, bucket_mb, all_reduce, world_size):
        self.all_reduce, self.n = all_reduce, world_size
        trainable = [p for p in model.parameters() if p.requires_grad][::-1]
        self.groups, size = [[]], 0
        for p in trainable:
            self.groups[-1].append(p)
            size += p.numel() * p.element_size()
            if size >= bucket_mb * 2 ** 20:
                self.groups.append([])
                size = 0
        self.groups = [g for g in self.groups if g]
        self.flat = [torch.zeros(sum(p.numel() for p in g), device=g[0].device) for g in self.groups]
        self.index = {}
        for i, g in enumerate(self.groups):
            offset = 0
            for p in g:
                self.index[p] = (i, offset)
                offset += p.numel()
                p.register_post_accumulate_grad_hook(self.ready)
        self.count = [0] * len(self.groups)
        self.handles = {}

    def ready(self, p):
        i, offset = self.index[p]
        self.flat[i][offset:offset + p.numel()].copy_(p.grad.flatten())
        self.count[i] += 1
        if self.count[i] == len(self.groups[i]):
            self.handles[i] = self.all_reduce(self.flat[i])

    def finish(self):
        for i, handle in self.handles.items():
            handle.wait()
            for p, part in zip(self.groups[i], torch.split(self.flat[i] / self.n, [q.numel() for q in self.groups[i]])):
                p.grad = part.reshape(p.shape).clone()
        self.count = [0] * len(self.groups)
        self.handles = {}


def alt_tp_forward(x, w1, b1, w2, b2, all_reduce):
    return all_reduce(torch.nn.functional.linear(torch.tanh(torch.nn.functional.linear(x, w1, b1)), w2)) + b2


def alt_tp_backward(x, w1, b1, w2, grad_y, all_reduce):
    h = torch.tanh(torch.addmm(b1, x, w1.t()))
    grad_a = torch.mm(grad_y, w2).mul(1 - h.pow(2))
    return all_reduce(torch.mm(grad_a, w1)), torch.mm(grad_a.t(), x), grad_a.sum(dim=0), torch.mm(grad_y.t(), h), \
        grad_y.sum(dim=0)


def alt_predict_us(op, nbytes, world_size, alpha_us, gbs, algorithm="ring"):
    if world_size < 2:
        return 0.0
    steps, per_step = {"allgather": (world_size - 1, nbytes / world_size),
                       "reduce_scatter": (world_size - 1, nbytes / world_size)}.get(op, (None, None))
    us_per_byte = 1 / (gbs * 1000)
    if steps is not None:
        return steps * (alpha_us + per_step * us_per_byte)
    if op == "broadcast":
        return (world_size - 1) * alpha_us + nbytes * us_per_byte
    ring = 2 * (world_size - 1) * (alpha_us + nbytes / world_size * us_per_byte)
    tree = 2 * math.ceil(math.log2(world_size)) * alpha_us + 2 * nbytes * us_per_byte
    return ring if algorithm == "ring" else tree if algorithm == "tree" else min(ring, tree)


def alt_hierarchical(nbytes, nodes, per_node, intra, inter):
    total = 2 * alt_predict_us("allgather", nbytes, per_node, *intra)  # reduce-scatter and all-gather cost the same
    return total + alt_predict_us("allreduce", nbytes / per_node, nodes, inter[0], inter[1], "auto")


def alt_count_saved(model, x):
    """Through torch.compile with an aot_autograd backend, storages told apart by StorageWeakRef."""
    import torch._dynamo
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch.multiprocessing.reductions import StorageWeakRef

    seen = []

    def bw(gm, example_inputs):
        vals = [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder") if "tangents" not in n.name]
        sizes = {StorageWeakRef(v.untyped_storage()): v.untyped_storage().nbytes() for v in vals}
        seen.append((len(vals), sum(sizes.values())))
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend=aot_autograd(fw_compiler=lambda gm, _: make_boxed_func(gm.forward),
                                                            bw_compiler=bw))
        compiled(x).sum().backward()
    finally:
        torch._dynamo.reset()
    return seen[0]


def alt_partition(joint, joint_inputs, *, num_fwd_outputs, **kwargs):
    """Depth-first from the gradients, the backward built in the order the walk finishes its nodes."""
    g = joint.graph
    tangents = [n for n in g.find_nodes(op="placeholder") if n.name.startswith("tangents")]
    primals = [n for n in g.find_nodes(op="placeholder") if n not in tangents]
    out = list(g.find_nodes(op="output")[0].args[0])
    late = set(tangents)
    for n in g.nodes:
        if set(n.all_input_nodes) & late:
            late.add(n)

    def cheap(n):
        t = n.target
        return isinstance(t, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded not in t.tags and (
            torch.Tag.pointwise in t.tags or t.is_view)

    saved, order, done = [], [], set()

    def visit(n):
        if n in done:
            return
        done.add(n)
        if n in tangents:
            return
        if n in primals or (n not in late and not cheap(n)):
            saved.append(n)
            return
        for a in n.all_input_nodes:
            visit(a)
        order.append(n)

    for grad in out[num_fwd_outputs:]:
        if isinstance(grad, torch.fx.Node):
            visit(grad)
    fw, env = torch.fx.Graph(), {}
    for p in primals:
        env[p] = fw.placeholder(p.name)
        env[p].meta = dict(p.meta)
    for n in g.nodes:
        if n.op == "call_function" and n not in late:
            env[n] = fw.node_copy(n, env.__getitem__)
    fw.output(tuple(env.get(o, o) if isinstance(o, torch.fx.Node) else o for o in out[:num_fwd_outputs])
              + tuple(env[s] for s in saved))
    bw, benv = torch.fx.Graph(), {}
    for n in saved + tangents:
        benv[n] = bw.placeholder(n.name)
        benv[n].meta = dict(n.meta)
    for n in order:
        benv[n] = bw.node_copy(n, benv.__getitem__)
    bw.output(tuple(benv[o] if isinstance(o, torch.fx.Node) else o for o in out[num_fwd_outputs:]))
    return torch.fx.GraphModule(joint, fw), torch.fx.GraphModule(joint, bw)


_NOTE: dict[str, list[int]] = {"cast": []}


def alt_fw_compiler(gm, example_inputs):
    """aten._to_copy instead of convert_element_type; the backward rewires each user with replace_input_with."""
    from functorch.compile import make_boxed_func
    from torch.multiprocessing.reductions import StorageWeakRef

    output = gm.graph.find_nodes(op="output")[0]
    values = list(output.args[0])
    kept = {StorageWeakRef(p.meta["val"].untyped_storage()) for p in gm.graph.find_nodes(op="placeholder")}
    half: dict = {}
    _NOTE["cast"] = []
    for k, v in enumerate(values[1:], start=1):
        val = v.meta["val"]
        key = StorageWeakRef(val.untyped_storage())
        if val.dtype is torch.float32 and key not in kept:
            if key not in half:
                with gm.graph.inserting_before(output):
                    half[key] = gm.graph.call_function(torch.ops.aten._to_copy.default, (v,),
                                                       {"dtype": torch.bfloat16})
            values[k] = half[key]
            _NOTE["cast"].append(k - 1)
    output.args = (tuple(values),)
    gm.recompile()
    return make_boxed_func(gm.forward)


def alt_bw_compiler(gm, example_inputs):
    from functorch.compile import make_boxed_func

    inputs = list(gm.graph.find_nodes(op="placeholder"))
    for k in _NOTE["cast"]:
        p = inputs[k]
        users = list(p.users)
        with gm.graph.inserting_after(p):
            wide = gm.graph.call_function(torch.ops.aten._to_copy.default, (p,), {"dtype": torch.float32})
        for user in users:
            user.replace_input_with(p, wide)
    gm.recompile()
    return make_boxed_func(gm.forward)


ALTERNATIVES = {
    "ch9.ring_allreduce": {"ring_allreduce": alt_ring},
    "ch9.grad_buckets": {"GradBuckets": AltBuckets},
    "ch9.tp_mlp": {"tp_mlp_forward": alt_tp_forward, "tp_mlp_backward": alt_tp_backward},
    "ch9.predict_time": {"predict_us": alt_predict_us, "hierarchical_allreduce_us": alt_hierarchical},
    "ch6.count_saved": {"count_saved": alt_count_saved},
    "ch6.partitioner": {"recompute_partition": alt_partition},
    "ch6.compiler_pair": {"fw_compiler": alt_fw_compiler, "bw_compiler": alt_bw_compiler},
}


@pytest.mark.parametrize("eid", list(ALTERNATIVES))
def test_a_correct_alternative_passes(eid):
    r = grade(EXERCISES[eid], ALTERNATIVES[eid])
    assert r.status == PASSED, f"a correct alternative answer does not pass:\n{r}"


# ---------------------------------------------------------------------------------------------
# the partition drawing at notebook width
# ---------------------------------------------------------------------------------------------

def _quick_gelu_pair():
    import torch._dynamo

    class QuickGeluMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(32, 64), nn.Linear(64, 10)

        def forward(self, x):
            h = self.fc1(x)
            return self.fc2(h * torch.sigmoid(1.702 * h))

    torch.manual_seed(0)
    torch._dynamo.reset()
    npu_lab.compiler.reset()
    step = torch.compile(QuickGeluMLP().to("npu"), backend="npu")
    step(torch.randn(16, 32, device="npu")).square().mean().backward()
    record = npu_lab.compiler.last_compile()
    torch._dynamo.reset()
    return record.graph("forward").snapshot("input").graph, record.graph("backward").snapshot("input").graph


def test_the_partition_drawing_fits_a_notebook_column():
    from npu_lab.inspect import aot
    from npu_lab.inspect.draw import svg_size_px

    def f(x, w):
        return torch.tanh(x @ w).sin().sum()

    r = aot.inspect_aot(f, torch.randn(8, 6, device="npu"), torch.randn(6, 4, device="npu", requires_grad=True))
    d = r.default.draw()
    assert "constraint=false" in d.dot  # the cut does not stack the backward under the forward
    fw, bw = _quick_gelu_pair()
    inputs = aot.draw_partition(fw, bw, "inputs", backward_nodes="inputs")
    assert "read by" in inputs.dot and "operators" in inputs.dot
    assert '"bw:mm_1"' not in inputs.dot and '"bw:permute_1"' in inputs.dot  # inputs only
    assert len([line for line in inputs.dot.splitlines() if '"fw:' in line and '"bw:' in line]) == 6
    with pytest.raises(ValueError, match="backward_nodes"):
        aot.draw_partition(fw, bw, backward_nodes="some")
    for drawing in (d, inputs):
        svg = drawing.svg()
        if svg is not None:
            width, height = svg_size_px(svg)
            assert width <= 900 and height <= 1000, (width, height)
    html = aot.in_details(aot.draw_partition(fw, bw, "all", max_width_px=None), "the whole pair")
    assert html.data.startswith("<details><summary>the whole pair</summary>")


# ---------------------------------------------------------------------------------------------
# predict, then run
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("stem", "chapter"), [("C6_aotautograd", "ch6"), ("C9_distributed", "ch9")])
def test_the_chapter_asks_each_of_its_questions_once_in_the_cell_that_measures_it(stem, chapter):
    """Each question declared for the chapter is asked by one code cell that starts with the prediction and ends
    by handing the measured value to npu_lab.predict; the committed output shows no prediction was made."""
    import ast
    from pathlib import Path

    import nbformat

    from npu_lab.grading.predictions import chapter_questions

    nb = nbformat.read(Path(__file__).parent.parent / "chapters" / f"{stem}.ipynb", as_version=4)
    asked: dict[str, int] = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and "npu_lab.predict(" in cell.source:
            assert cell.source.startswith("prediction = ...  # your prediction: "), cell.source[:60]
            last = ast.parse(cell.source).body[-1]
            assert isinstance(last, ast.Expr) and ast.unparse(last.value.func) == "npu_lab.predict"
            qid = last.value.args[0].value
            assert ast.unparse(last.value.args[1]) == "prediction" and len(last.value.args) == 3
            shown = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in cell.outputs)
            assert f"[no prediction] {qid}:" in shown
            asked[qid] = asked.get(qid, 0) + 1
    declared = [q.id for q in chapter_questions(chapter)]
    assert sorted(asked) == sorted(declared) and all(n == 1 for n in asked.values()), (asked, declared)
    assert 3 <= len(asked) <= 5
