"""Chapter 6: AOTAutograd - saved tensors, a partitioner of your own, a backend's compiler pair that does real work.

Three exercises:

* ``ch6.count_saved`` - count the tensors (and the bytes they keep alive) a model's forward graph saves for
  its backward graph, by asking AOTAutograd itself (a backward compiler of your own), not the lab's
  inspector; graded on hidden models whose saved tensors share storages, are views of bigger storages,
  hold int64 indices or float64 values;
* ``ch6.partitioner`` - a partition function written with torch.fx: split the joint graph into a forward
  and a backward graph that save only the inputs and the results of operators that are not cheap to
  recompute, recomputing pointwise operators and views in the backward; graded by outputs, gradients and
  the bytes really kept alive, against a reference policy and next to PyTorch's two partitioners;
* ``ch6.compiler_pair`` - a ``fw_compiler``/``bw_compiler`` pair that keeps the saved activations in
  bfloat16 (half the bytes between forward and backward) and converts them back in the backward graph;
  graded on what the compiled forward really returns at run time (dtypes, bytes per storage) and on
  training steps against eager PyTorch.

The references are private (``_`` names) and computed before the learner's code runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..grading.inputs import randn
from ..grading.predictions import question
from ..grading.references import measured
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester
from ..grading.values import is_plain_tensor, tensors_close

chapter("ch6", "AOTAutograd: forward and backward graphs ahead of time", [
    "AOTAutograd traces the forward and the backward together into one joint graph of ATen operators",
    "A partitioner splits the joint graph into a forward graph and a backward graph",
    "The forward graph returns the tensors the backward needs (saved tensors) as extra outputs",
    "Saved memory is counted by storage: an alias or a view keeps its whole storage alive, once",
    "Functionalization removes in-place operators; a mutated input becomes an extra output copied back",
    "Decompositions lower operators to core ATen; the npu backend decomposes only what it has no kernel for",
    "Rematerialization saves fewer bytes by recomputing cheap operators in the backward",
    "A backend receives both graphs through fw_compiler/bw_compiler and may rewrite both (boxed callables)",
])

# Predict, then run (the chapter's questions; the cells measure the answers)
question("ch6.eager_saved",
         "Eager autograd runs f(x, w) = tanh(x @ w).sin().sum() with only w requiring grad. How many tensors do the "
         "grad_fn nodes of loss keep in their _saved_* attributes?",
         why="sin keeps its input, tanh its result, mm its self (x, for w's gradient xᵀ·grad); sum needs only a "
             "shape, and w itself is not needed because x needs no gradient: 3",
         choices=tuple(range(0, 9)))
question("ch6.saved_bytes",
         "x is 8×6 and w is 6×4 (float32). How many bytes does the default partitioner keep alive between f's "
         "forward and its backward?",
         why="x (192 bytes) for w's gradient and tanh's output (8×4×4 = 128 bytes) for cos and tanh_backward; the "
             "detach alias of tanh shares its storage and adds nothing: 320")
question("ch6.sigmoid_partitioner",
         "For x * sigmoid(x) (x of 64×64 requiring grad), which partitioner keeps fewer bytes alive: 'default', "
         "'min_cut' or 'same'?",
         why="the backward needs x and sigmoid(x) either way (x·s·(1-s) + s); min-cut cannot recompute its way to "
             "fewer storages than those two, and the default's third saved tensor is an alias: the same bytes",
         choices=("default", "min_cut", "same"))
question("ch6.plan_reuse",
         "The npu backend's memory planner lets intermediates whose lifetimes do not overlap share a buffer. In "
         "the QuickGeluMLP's training forward graph, does it save any bytes (True or False)?",
         why="a buffer can be reused only after its tensor dies inside the graph; here every intermediate leaves "
             "the graph, as the output or as a tensor saved for the backward, so nothing dies early",
         choices=(True, False))


# ---------------------------------------------------------------------------------------------
# helpers shared with the notebooks
# ---------------------------------------------------------------------------------------------

def functional(model: nn.Module) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    """``(fn, params)`` with ``fn(x, *params) == model(x)``: the parameters become inputs.

    AOTAutograd differentiates with respect to a function's inputs, so a module's parameters are
    passed in explicitly (``torch.func.functional_call``), as ``aot_module`` does internally.
    """
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]

    def fn(x: torch.Tensor, *ps: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(model, dict(zip(names, ps)), (x,))

    return fn, params


def _seeded(seed: int, *layers: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    """A maker of ``nn.Sequential(*layers)`` whose parameters come from ``manual_seed(seed)``."""
    def make() -> nn.Module:
        torch.manual_seed(seed)
        return nn.Sequential(*(layer() for layer in layers))
    return make


def _storage_key(t: torch.Tensor) -> Any:
    from torch.multiprocessing.reductions import StorageWeakRef

    return StorageWeakRef(t.untyped_storage())


# ---------------------------------------------------------------------------------------------
# ch6.count_saved
# ---------------------------------------------------------------------------------------------

def _saved_by_default_partitioner(model: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """(number of tensors, bytes kept alive) the default partitioner saves for ``model(x)`` (the check's reference,
    through the lab's inspector)."""
    from ..inspect.aot import inspect_aot

    fn, params = functional(model)
    part = inspect_aot(fn, x, *params).default
    return len(part.saved), part.saved_bytes


class _FirstColumns(nn.Module):
    """A linear layer on the first 8 columns of its input: it saves a slice, a view of the whole input."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x[:, :8])


def _first_columns() -> nn.Module:
    torch.manual_seed(7)
    return _FirstColumns()


_relu_mlp = _seeded(0, lambda: nn.Linear(16, 32), nn.ReLU, lambda: nn.Linear(32, 4))
_tanh_mlp = _seeded(1, lambda: nn.Linear(16, 32), nn.Tanh, lambda: nn.Linear(32, 4))
_norm_gelu = _seeded(2, lambda: nn.Linear(16, 32), lambda: nn.LayerNorm(32), nn.GELU, lambda: nn.Linear(32, 4))
_sigmoid_gate = _seeded(3, lambda: nn.Linear(16, 16), nn.Sigmoid)
_embedding = _seeded(5, lambda: nn.Embedding(50, 6), nn.Flatten, nn.Tanh, lambda: nn.Linear(30, 3))


def _small_conv() -> nn.Module:
    torch.manual_seed(4)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))


def _double_mlp() -> nn.Module:
    return _seeded(6, lambda: nn.Linear(16, 24), nn.Tanh, lambda: nn.Linear(24, 4))().double()


def _count_input(shape: tuple[int, ...], seed: int, kind: str) -> torch.Tensor:
    if kind == "indices":
        return torch.randint(0, 50, shape, generator=torch.Generator().manual_seed(seed))
    return randn(*shape, seed=seed, dtype=torch.float64 if kind == "float64" else torch.float32)


#: (description, model factory, input shape, input kind, input requires grad, hidden)
COUNT_CASES = [
    ("Linear(16, 32) -> ReLU -> Linear(32, 4), x of (8, 16)", _relu_mlp, (8, 16), "float32", False, False),
    ("Linear(16, 32) -> Tanh -> Linear(32, 4), x of (8, 16)", _tanh_mlp, (8, 16), "float32", False, False),
    ("Linear -> LayerNorm -> GELU -> Linear", _norm_gelu, (8, 16), "float32", False, True),
    ("Linear -> Sigmoid with an input that requires grad", _sigmoid_gate, (8, 16), "float32", True, True),
    ("Conv2d -> ReLU -> Flatten -> Linear", _small_conv, (2, 3, 8, 8), "float32", False, True),
    ("a Linear on the first 8 of 16 columns of x", _first_columns, (6, 16), "float32", False, True),
    ("Embedding(50, 6) -> Flatten -> Tanh -> Linear, x of int64 indices", _embedding, (4, 5), "indices", False,
     True),
    ("Linear -> Tanh -> Linear in float64", _double_mlp, (8, 16), "float64", False, True),
]


def _count_check(expected: tuple[int, int]) -> Callable[[Any], tuple[bool, str]]:
    def check(got: Any) -> tuple[bool, str]:
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return False, "return a pair (number of saved tensors, their bytes)" + (
                " (did you forget to `return`?)" if got is None else "")
        if type(got[0]) is not int or type(got[1]) is not int:
            return False, "both numbers must be ints"
        n, b = got[0], got[1]
        if (n, b) == tuple(expected):
            return True, ""
        if n == expected[0]:
            return False, "the count is right, the bytes are not"
        if b == expected[1]:
            return False, "the bytes are right, the count is not"
        return False, ""
    return check


#: What the hidden cases of ch6.count_saved try (said in their hints, never their data).
_COUNT_ABOUT = {
    "Linear -> LayerNorm -> GELU -> Linear": "LayerNorm's backward needs more than its input (its mean and "
                                             "reciprocal standard deviation are saved too), and so does GELU's: ",
    "Linear -> Sigmoid with an input that requires grad": "x requires grad here, so the backward also computes x's "
                                                          "gradient, and what that needs is saved too: ",
    "Conv2d -> ReLU -> Flatten -> Linear": "a convolution saves its input and weight, and a 4-D tensor counts "
                                           "all its elements: ",
    "a Linear on the first 8 of 16 columns of x": "the saved tensor is a slice of x, a view: it keeps x's whole "
                                                  "storage alive (untyped_storage().nbytes()), not only its own "
                                                  "elements: ",
    "Embedding(50, 6) -> Flatten -> Tanh -> Linear, x of int64 indices": "the embedding's backward needs the "
                                                                         "indices, int64: 8 bytes each: ",
    "Linear -> Tanh -> Linear in float64": "float64 elements are 8 bytes: ",
}


def _aot_inspector_calls() -> int:
    from ..inspect import aot

    return aot.calls()


@exercise("ch6.count_saved", "Count the tensors saved for backward", names=["count_saved"], timeout=60)
def _count_saved(t: Tester, count_saved) -> None:
    hint = ("the backward graph's placeholders are the saved tensors plus one 'tangents_*' input per output; "
            "saved tensors sharing a storage (autograd's detach aliases, views) count once: group "
            "node.meta['val'] by StorageWeakRef(val.untyped_storage()) and add untyped_storage().nbytes() "
            "per group; default partitioner")
    cases = []
    for i, (desc, make, shape, kind, x_grad, hidden) in enumerate(COUNT_CASES):  # references before the learner's
        model = make().to("npu")
        x = _count_input(shape, 10 + i, kind).to("npu").requires_grad_(x_grad)
        cases.append((desc, model, x, hidden, measured(("ch6.count_saved", desc),
                                                        lambda m=model, x=x: _saved_by_default_partitioner(m, x))))
    inspected: list[int] = []

    def counted(model: nn.Module, x: torch.Tensor) -> Any:
        before = _aot_inspector_calls()
        try:
            return count_saved(model, x)
        finally:
            inspected.append(_aot_inspector_calls() - before)

    for desc, model, x, hidden, expected in cases:
        t.case(f"count_saved({desc})", counted, model, x, expected=expected, hidden=hidden,
               hint=_COUNT_ABOUT.get(desc, "") + hint if hidden else hint, check=_count_check(expected))
    used = sum(inspected)
    t.expect("count_saved asks AOTAutograd itself (it calls nothing in npu_lab.inspect.aot)", used == 0,
             expected="no call of inspect_aot or saved_tensors", got=f"{used} call(s)",
             hint="the inspector counts the saved tensors for you: compile the model with aot_module and a backward "
                  "compiler of your own, and count its placeholders' storages")


# ---------------------------------------------------------------------------------------------
# ch6.partitioner
# ---------------------------------------------------------------------------------------------

def _cheap(node: torch.fx.Node) -> bool:
    """The policy's 'cheap to recompute': a pointwise ATen operator or a view, without randomness."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in target.tags:
        return False
    return torch.Tag.pointwise in target.tags or target.is_view


def _reference_partition(joint: torch.fx.GraphModule, joint_inputs: Any, *, num_fwd_outputs: int,
                         **kwargs: Any) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """The check's own partitioner of the policy (see the exercise): save inputs and the results of operators that
    are not cheap; recompute cheap ones in the backward."""
    graph = joint.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    primals = [n for n in placeholders if not n.name.startswith("tangents")]
    tangents = [n for n in placeholders if n.name.startswith("tangents")]
    outputs = list(next(n for n in graph.nodes if n.op == "output").args[0])
    fwd_outs, grads = outputs[:num_fwd_outputs], outputs[num_fwd_outputs:]
    after_tangents = set(tangents)
    for n in graph.nodes:
        if n.op == "call_function" and any(a in after_tangents for a in n.all_input_nodes):
            after_tangents.add(n)
    forward = [n for n in graph.nodes if n.op not in ("output", "placeholder") and n not in after_tangents]
    in_forward = set(forward) | set(primals)
    saved: list[torch.fx.Node] = []
    needed: set[torch.fx.Node] = set()

    def need(n: torch.fx.Node) -> None:
        if n in needed or n in tangents:
            return
        needed.add(n)
        if n in in_forward and (n.op == "placeholder" or not _cheap(n)):
            if n not in saved:
                saved.append(n)
            return
        for a in n.all_input_nodes:
            need(a)

    for g in grads:
        if isinstance(g, torch.fx.Node):
            need(g)
    fw_graph, env = torch.fx.Graph(), {}
    for p in primals:
        env[p] = fw_graph.placeholder(p.name)
        env[p].meta = p.meta
    for n in forward:
        env[n] = fw_graph.node_copy(n, lambda a: env[a])
    fw_graph.output(tuple(env[o] if isinstance(o, torch.fx.Node) else o for o in fwd_outs)
                    + tuple(env[s] for s in saved))
    fw_module = torch.fx.GraphModule(joint, fw_graph)
    fw_module.graph.eliminate_dead_code()
    fw_module.recompile()
    bw_graph, benv = torch.fx.Graph(), {}
    for s in saved + tangents:
        benv[s] = bw_graph.placeholder(s.name)
        benv[s].meta = s.meta
    for n in graph.nodes:
        if n in needed and n not in benv and n.op == "call_function":
            benv[n] = bw_graph.node_copy(n, lambda a: benv[a])
    bw_graph.output(tuple(benv[g] if isinstance(g, torch.fx.Node) else g for g in grads))
    bw_module = torch.fx.GraphModule(joint, bw_graph)
    bw_module.recompile()
    return fw_module, bw_module


def _sin(x):
    return x.sin()


def _sin_times_cos(x):
    return x.sin() * x.cos()


def _matmul(x, w):
    return x @ w


def _outer_product_sin(x):
    return (x.unsqueeze(1) * x.unsqueeze(2)).sin()


def _cube_sum(x):
    return (x ** 3).sum()


def _centered_square_mean(x):
    return (x - x.mean()).pow(2).mean()


def _exp_of_exp(x):
    return x.exp().exp()


def _tanh_layer(x, w):
    return torch.tanh(x @ w).sin().sum()


def _pairwise_exp(p):
    return (p.unsqueeze(0) - p.unsqueeze(1)).exp().sum(-1)


def _norm_then_exp(x):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],)).exp()


def _two_outputs(x, w):
    h = x @ w
    return h.sigmoid(), (h * x.sum()).cos()


def _softmax_scale(x):
    return torch.softmax(x, dim=-1) * x


def _silu_mlp(x, w1, w2):
    h = x @ w1
    return (h * torch.sigmoid(h)) @ w2


#: name -> (function, input shapes, which inputs require grad, hidden); the chapter's and PARTITION_FUNCS's
PARTITION_FUNCS: dict[str, tuple[Callable[..., Any], list[tuple[int, ...]], tuple[bool, ...], bool]] = {
    "tanh_layer": (_tanh_layer, [(8, 6), (6, 4)], (False, True), False),
    "outer_product_sin": (_outer_product_sin, [(16, 32)], (True,), False),
    "pairwise_exp": (_pairwise_exp, [(32, 16)], (True,), False),
    "sin": (_sin, [(64, 64)], (True,), True),
    "sin_times_cos": (_sin_times_cos, [(64, 64)], (True,), True),
    "matmul": (_matmul, [(64, 32), (32, 16)], (True, True), True),
    "cube_sum": (_cube_sum, [(64, 64)], (True,), True),
    "centered_square_mean": (_centered_square_mean, [(64, 64)], (True,), True),
    "exp_of_exp": (_exp_of_exp, [(64, 64)], (True,), True),
    "norm_then_exp": (_norm_then_exp, [(8, 16)], (True,), True),
    "two_outputs": (_two_outputs, [(6, 6), (6, 6)], (True, False), True),
    "softmax_scale": (_softmax_scale, [(8, 12)], (True,), True),
    "silu_mlp": (_silu_mlp, [(16, 32), (32, 64), (64, 8)], (False, True, True), True),
}


def partition_inputs(name: str, device: str = "npu") -> list[torch.Tensor]:
    """The inputs the check uses for ``PARTITION_FUNCS[name]`` (fixed seeds)."""
    _, shapes, grads, _ = PARTITION_FUNCS[name]
    return [randn(*s, seed=30 + i).to(device).requires_grad_(g) for i, (s, g) in enumerate(zip(shapes, grads))]


def _saved_storage_bytes(tensors: list[Any]) -> tuple[int, int]:
    """(number of tensors, bytes of their distinct storages)."""
    storages: dict[Any, int] = {}
    count = 0
    for v in tensors:
        if is_plain_tensor(v):
            count += 1
            storages[_storage_key(v)] = v.untyped_storage().nbytes()
    return count, sum(storages.values())


def _run_partitioner(fn: Callable[..., Any], args: list[torch.Tensor], partition_fn: Callable[..., Any]
                     ) -> dict[str, Any]:
    """``aot_function(fn, partition_fn=partition_fn)`` run forward and backward: outputs, gradients, the tensors the
    compiled forward really returned for the backward (their count and bytes, each storage once), the number of
    operators of each graph, and how often PyTorch's own partitioners split a graph meanwhile."""
    from functorch.compile import aot_function, make_boxed_func

    from .._torch_private import partitioner_splits

    seen: dict[str, Any] = {}

    def fw(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        run = make_boxed_func(gm.forward)
        seen["fw ops"] = sum(1 for n in gm.graph.nodes if n.op == "call_function")

        def forward(flat_args: list[Any]) -> Any:
            out = run(flat_args)
            seen["returned"] = list(out)
            return out
        forward._boxed_call = True
        return forward

    def bw(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        seen["bw ops"] = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        return make_boxed_func(gm.forward)

    args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    with partitioner_splits() as splits:
        out = aot_function(fn, fw_compiler=fw, bw_compiler=bw, partition_fn=partition_fn)(*args)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        sum(o.float().sum() * (k + 1) for k, o in enumerate(outs)).backward()
    saved = seen["returned"][len(outs):]
    n, nbytes = _saved_storage_bytes(saved)
    return {"outputs": [o.detach().cpu() for o in outs],
            "grads": [a.grad.cpu() if a.grad is not None else None for a in args],
            "saved": n, "bytes": nbytes, "fw ops": seen["fw ops"], "bw ops": seen["bw ops"],
            "pytorch splits": splits[0]}


def _partition_reference(name: str) -> dict[str, Any]:
    """What the policy saves for ``PARTITION_FUNCS[name]``, what the default and min-cut partitioners save, and
    eager PyTorch's outputs and gradients (measured once per settings, before the learner's code runs)."""
    from functorch.compile import default_partition, min_cut_rematerialization_partition

    fn = PARTITION_FUNCS[name][0]

    def measure() -> dict[str, Any]:
        args = [a.detach().clone().requires_grad_(a.requires_grad) for a in partition_inputs(name)]
        out = fn(*args)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        sum(o.float().sum() * (k + 1) for k, o in enumerate(outs)).backward()
        eager = {"outputs": [o.detach().cpu() for o in outs],
                 "grads": [a.grad.cpu() if a.grad is not None else None for a in args]}
        return {"eager": eager, "policy": _run_partitioner(fn, partition_inputs(name), _reference_partition),
                "default": _run_partitioner(fn, partition_inputs(name), default_partition),
                "min_cut": _run_partitioner(fn, partition_inputs(name), min_cut_rematerialization_partition)}

    return measured(("ch6.partitioner", name), measure)


def _same_values(got: list[Any], want: list[Any]) -> bool:
    return len(got) == len(want) and all(
        (g is None and w is None) or tensors_close(g, w, rtol=1e-4, atol=1e-5) for g, w in zip(got, want))


@exercise("ch6.partitioner", "A partitioner of your own: save inputs and expensive results, recompute the rest",
          names=["recompute_partition"], timeout=60)
def _partitioner(t: Tester, recompute_partition) -> None:
    references = [(name, _partition_reference(name)) for name in PARTITION_FUNCS]  # before the learner's code
    for name, ref in references:
        fn, shapes, _, hidden = PARTITION_FUNCS[name]
        label = f"{name} (inputs {', '.join(str(s) for s in shapes)})"
        outcome = t.call(_run_partitioner, fn, partition_inputs(name), recompute_partition)
        if not outcome.ok:
            t.error(f"{label}: aot_function(..., partition_fn=recompute_partition), forward and backward", outcome,
                    hidden=hidden, hint="return (forward module, backward module): the forward's outputs are the "
                    "function's outputs then the saved values; the backward's placeholders are the saved values "
                    "(same order) then the tangents; its outputs are the joint graph's gradient outputs")
            continue
        got = outcome.value
        t.expect(f"{label}: outputs and gradients equal eager PyTorch's",
                 _same_values(got["outputs"], ref["eager"]["outputs"])
                 and _same_values(got["grads"], ref["eager"]["grads"]), hidden=hidden, expected="equal",
                 got="different", hint="the backward must compute the joint graph's gradient outputs: copy every "
                 "node they need that is not saved (node_copy), in graph order")
        t.expect(f"{label}: your code splits the graphs itself", got["pytorch splits"] == 0, hidden=hidden,
                 expected="no call of PyTorch's partitioners", got=f"{got['pytorch splits']} split(s) by PyTorch",
                 hint="build both graphs with torch.fx (Graph, placeholder, node_copy, output, GraphModule) instead "
                      "of handing the joint graph to default_partition or min_cut_rematerialization_partition")
        want = ref["policy"]
        t.expect(f"{label}: the forward keeps {want['bytes']:,} bytes alive for the backward "
                 f"(default partitioner {ref['default']['bytes']:,}, min-cut {ref['min_cut']['bytes']:,})",
                 got["bytes"] == want["bytes"], hidden=hidden, expected=f"{want['bytes']:,} bytes",
                 got=f"{got['bytes']:,} bytes in {got['saved']} saved tensor(s)",
                 hint="save a forward node when the backward needs it and it is an input (a primal) or an operator "
                      "that is not cheap; a cheap one (torch.Tag.pointwise in its tags, or target.is_view, and not "
                      "nondeterministic_seeded) is copied into the backward and recomputed from what it needs")


# ---------------------------------------------------------------------------------------------
# ch6.compiler_pair
# ---------------------------------------------------------------------------------------------

def _pool_net() -> nn.Module:
    torch.manual_seed(8)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 3 * 3, 2))


#: (description, model factory, input shape, input requires grad, hidden)
PAIR_CASES: list[tuple[str, Callable[[], nn.Module], tuple[int, ...], bool, bool]] = [
    ("Linear(8, 16) -> Tanh -> Linear(16, 3)", _seeded(20, lambda: nn.Linear(8, 16), nn.Tanh,
                                                       lambda: nn.Linear(16, 3)), (4, 8), False, False),
    ("Linear(8, 16) -> ReLU -> Linear(16, 3), x requires grad",
     _seeded(21, lambda: nn.Linear(8, 16), nn.ReLU, lambda: nn.Linear(16, 3)), (4, 8), True, False),
    ("Linear -> LayerNorm -> GELU -> Linear", _seeded(22, lambda: nn.Linear(8, 16), lambda: nn.LayerNorm(16),
                                                      nn.GELU, lambda: nn.Linear(16, 3)), (4, 8), False, True),
    ("Conv2d -> MaxPool2d -> Flatten -> Linear (max pooling saves int64 indices)", _pool_net, (2, 3, 8, 8), False,
     True),
    ("Linear -> Sigmoid -> Linear -> Tanh", _seeded(23, lambda: nn.Linear(6, 12), nn.Sigmoid,
                                                    lambda: nn.Linear(12, 12), nn.Tanh), (5, 6), False, True),
]


def _find_output(gm: torch.fx.GraphModule) -> torch.fx.Node:
    return next(n for n in gm.graph.nodes if n.op == "output")


def _compress_pair() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The check's own pair: each saved float32 activation (not on an input's storage) kept in bfloat16, one copy per
    storage (aliases share it), converted back to float32 in the backward."""
    from functorch.compile import make_boxed_func

    positions: list[int] = []

    def fw(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        out = _find_output(gm)
        values = list(out.args[0])
        inputs = {_storage_key(n.meta["val"]) for n in gm.graph.nodes if n.op == "placeholder"}
        copies: dict[Any, torch.fx.Node] = {}
        positions.clear()
        for i, v in enumerate(values[1:], start=1):
            val = v.meta.get("val") if isinstance(v, torch.fx.Node) else None
            if not isinstance(val, torch.Tensor) or val.dtype != torch.float32:
                continue
            key = _storage_key(val)
            if key in inputs:
                continue
            if key not in copies:
                with gm.graph.inserting_before(out):
                    copies[key] = gm.graph.call_function(torch.ops.prims.convert_element_type.default,
                                                         (v, torch.bfloat16))
            values[i] = copies[key]
            positions.append(i - 1)
        out.args = (tuple(values),)
        gm.recompile()
        return make_boxed_func(gm.forward)

    def bw(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for i in positions:
            p = placeholders[i]
            with gm.graph.inserting_after(p):
                back = gm.graph.call_function(torch.ops.prims.convert_element_type.default, (p, torch.float32))
            p.replace_all_uses_with(back, delete_user_cb=lambda user, back=back: user is not back)
        gm.recompile()
        return make_boxed_func(gm.forward)

    return fw, bw


def _train_steps(module: nn.Module, xs: list[torch.Tensor], x_grad: bool) -> list[list[torch.Tensor]]:
    """Per step: the output, then the gradient of every parameter (and of x, if it requires grad)."""
    results = []
    for x in xs:
        module.zero_grad(set_to_none=True)
        x = x.detach().clone().requires_grad_(x_grad)
        out = module(x)
        out.square().sum().backward()
        results.append([out.detach().cpu()] + [p.grad.cpu() for p in module.parameters()]
                       + ([x.grad.cpu()] if x_grad else []))
    return results


class _MixedPrecision:
    """A dispatch mode (made on first use) that counts the ATen calls whose floating-point tensor arguments do not
    all have one dtype (a float32 operand next to a bfloat16 one), conversions and copies aside."""

    _CONVERSIONS = ("convert_element_type", "_to_copy", "copy_", "copy", "to")

    @classmethod
    def make(cls) -> Any:
        from torch.utils._python_dispatch import TorchDispatchMode

        class Mixed(TorchDispatchMode):
            def __init__(self) -> None:
                super().__init__()
                self.mixed: list[str] = []

            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                if func.__name__.split(".")[0] not in cls._CONVERSIONS:
                    dtypes = {a.dtype for a in torch.utils._pytree.tree_leaves((args, kwargs or {}))
                              if isinstance(a, torch.Tensor) and a.dtype.is_floating_point}
                    if len(dtypes) > 1:
                        self.mixed.append(func.__name__)
                return func(*args, **(kwargs or {}))

        return Mixed()


def _run_pair(fw_compiler: Any, bw_compiler: Any, make: Callable[[], nn.Module], xs: list[torch.Tensor],
              x_grad: bool) -> dict[str, Any]:
    """Compile ``make()`` on npu with the given compilers; train steps; what the compiled forward really returned
    for the backward (dtypes, whether each is on an input's storage, bytes of the storages that are not inputs')."""
    import torch._dynamo
    from torch._dynamo.backends.common import aot_autograd

    seen: dict[str, Any] = {"fw calls": 0, "bw calls": 0, "runs": [], "mixed": []}

    def spy_fw(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        seen["fw calls"] += 1
        compiled = fw_compiler(gm, example_inputs)

        def forward(flat_args: list[Any]) -> Any:
            inputs = {_storage_key(a) for a in flat_args if is_plain_tensor(a)}
            out = compiled(flat_args) if getattr(compiled, "_boxed_call", False) else compiled(*flat_args)
            saved = list(out)[1:]
            storages: dict[Any, int] = {}
            kinds = []
            for v in saved:
                if not is_plain_tensor(v):
                    kinds.append(("not a tensor", False))
                    continue
                key = _storage_key(v)
                kinds.append((str(v.dtype).removeprefix("torch."), key in inputs))
                if key not in inputs:
                    storages[key] = v.untyped_storage().nbytes()
            seen["runs"].append({"kinds": kinds, "bytes": sum(storages.values())})
            return out
        forward._boxed_call = True
        return forward

    def spy_bw(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        seen["bw calls"] += 1
        compiled = bw_compiler(gm, example_inputs)

        def backward(flat_args: list[Any]) -> Any:
            with _MixedPrecision.make() as mode:
                out = compiled(flat_args) if getattr(compiled, "_boxed_call", False) else compiled(*flat_args)
            seen["mixed"] += mode.mixed
            return out
        backward._boxed_call = True
        return backward

    model = make().to("npu")
    torch._dynamo.reset()
    try:
        steps = _train_steps(torch.compile(model, backend=aot_autograd(fw_compiler=spy_fw, bw_compiler=spy_bw)), xs,
                             x_grad)
    finally:
        torch._dynamo.reset()
    return {"steps": steps, "fw calls": seen["fw calls"], "bw calls": seen["bw calls"], "runs": seen["runs"],
            "mixed": sorted(set(seen["mixed"]))}


def _pair_reference(desc: str, make: Callable[[], nn.Module], xs: list[torch.Tensor], x_grad: bool) -> dict[str, Any]:
    """Eager PyTorch's steps, and what the check's own pair keeps (measured once per settings)."""
    def measure() -> dict[str, Any]:
        fw, bw = _compress_pair()
        return {"eager": _train_steps(make().to("npu"), xs, x_grad), "policy": _run_pair(fw, bw, make, xs, x_grad)}
    return measured(("ch6.compiler_pair", desc), measure)


def _kinds_text(kinds: list[tuple[str, bool]]) -> str:
    return ", ".join(f"{d}{' (input)' if on_input else ''}" for d, on_input in kinds)


@exercise("ch6.compiler_pair", "A compiler pair that keeps saved activations in bfloat16",
          names=["fw_compiler", "bw_compiler"], timeout=60)
def _compiler_pair(t: Tester, fw_compiler, bw_compiler) -> None:
    cases = []
    for i, (desc, make, shape, x_grad, hidden) in enumerate(PAIR_CASES):  # references before the learner's code
        xs = [randn(*shape, seed=40 + 2 * i).to("npu"), randn(*shape, seed=41 + 2 * i).to("npu")]
        cases.append((desc, make, xs, x_grad, hidden, _pair_reference(desc, make, xs, x_grad)))
    for desc, make, xs, x_grad, hidden, ref in cases:
        outcome = t.call(_run_pair, fw_compiler, bw_compiler, make, xs, x_grad)
        if not outcome.ok:
            t.error(f"{desc}: torch.compile with aot_autograd(fw_compiler, bw_compiler) on npu, two training steps",
                    outcome, hidden=hidden, hint="each compiler takes (gm, example_inputs), edits gm.graph, calls "
                    "gm.recompile() and returns make_boxed_func(gm.forward)")
            continue
        got, want = outcome.value, ref["policy"]
        if not t.expect(f"{desc}: AOTAutograd called fw_compiler once and bw_compiler once",
                        got["fw calls"] == 1 and got["bw calls"] == 1 and len(got["runs"]) == 2, hidden=hidden,
                        expected="1 forward graph, 1 backward graph",
                        got=f"{got['fw calls']} forward, {got['bw calls']} backward",
                        hint="pass your functions as fw_compiler= and bw_compiler= (the check does); did one raise?"):
            continue
        kinds, want_kinds = got["runs"][0]["kinds"], want["runs"][0]["kinds"]
        t.expect(f"{desc}: saved float32 activations come back in bfloat16; inputs and non-float tensors unchanged",
                 kinds == want_kinds, hidden=hidden, expected=_kinds_text(want_kinds), got=_kinds_text(kinds),
                 hint="convert a saved value when it is float32 and not on an input's storage (a placeholder's, "
                      "views such as a transposed weight included: the input stays alive anyway); int64 indices "
                      "stay as they are")
        t.expect(f"{desc}: the saved activations keep {want['runs'][0]['bytes']:,} bytes alive (half of float32, "
                 "one bfloat16 copy per storage)", got["runs"][0]["bytes"] == want["runs"][0]["bytes"],
                 hidden=hidden, expected=f"{want['runs'][0]['bytes']:,} bytes",
                 got=f"{got['runs'][0]['bytes']:,} bytes",
                 hint="saved tensors that share a storage (an activation and its detach alias) must share one "
                      "bfloat16 copy: converting each separately keeps two half-size copies, as many bytes as before")
        steps, eager = got["steps"], ref["eager"]
        outs_ok = all(tensors_close(s[0], e[0], rtol=1e-5, atol=1e-6) for s, e in zip(steps, eager))
        t.expect(f"{desc}: the model's output is exactly eager PyTorch's (the forward computes in float32)", outs_ok,
                 hidden=hidden, expected="equal", got="equal" if outs_ok else "different",
                 hint="convert only the saved values, after the forward has used them: the output must not change")
        mixed = got["mixed"]
        t.expect(f"{desc}: the backward computes in float32 (no operator mixes bfloat16 and float32 operands)",
                 not mixed, hidden=hidden, expected="none", got=", ".join(mixed[:4]) or "none",
                 hint="in bw_compiler, convert each bfloat16 placeholder back to float32 right after it "
                      "(convert_element_type) and make every other user read the converted value")
        grads_ok = all(len(s) == len(e) and all(tensors_close(g, w, rtol=2e-2, atol=2e-2) for g, w in zip(s[1:],
                       e[1:])) for s, e in zip(steps, eager))
        t.expect(f"{desc}: two training steps' gradients equal eager's to bfloat16 precision (rtol 2e-2)", grads_ok,
                 hidden=hidden, expected="close to eager", got="close" if grads_ok else "different",
                 hint="in bw_compiler, convert each bfloat16 placeholder back to float32 right after it "
                      "(convert_element_type) and make every other user read the converted value")
