"""Chapter 3: TorchFX - trace a module, read its graph, interpret it, and rewrite it.

Besides the exercises, this module provides the two functions the exercises'
passes insert into graphs (import them in the notebook):

* :func:`hard_sigmoid` - a piecewise-linear stand-in for ``sigmoid`` (no ``exp``);
* :func:`fused_add_relu` - ``relu(a + b)`` as one call: on ``npu`` tensors one
  elementwise kernel instead of two (with autograd), elsewhere plain PyTorch.
"""

from __future__ import annotations

import copy
import operator
from typing import Any

import torch
import torch.fx
from torch import nn
from torch.nn import functional as F

from ..grading.inputs import randn
from ..grading.predictions import question
from ..grading.registry import chapter, exercise
from ..grading.structure import count_calls, is_graph_module
from ..grading.tester import STUB_MESSAGE, Tester, short
from ..grading.values import check_plain, tensors_close

chapter("ch3", "TorchFX: graph capture and graph transforms", [
    "symbolic_trace runs forward once on Proxy objects and records every call as a Node",
    "The six node kinds: placeholder, get_attr, call_function, call_method, call_module, output",
    "A GraphModule is an nn.Module whose forward is Python code generated from its Graph",
    "An Interpreter runs a graph node by node; ShapeProp records each node's shape that way",
    "A pass edits the graph (insert, replace uses, erase) and then calls recompile()",
    "A fusion is only safe when the intermediate result has no other user",
    "Symbolic tracing cannot follow data-dependent control flow; wrap and concrete_args work around it",
    "torch.compile hands FX graphs to its backend, and the npu backend's passes are FX passes",
])

KINDS = ("placeholder", "get_attr", "call_function", "call_method", "call_module", "output")

# --- predict, then run: the chapter's questions ---------------------------------------------------------------

question("ch3.node_count", "How many nodes does symbolic_trace record for TwoLayer, the placeholder and the output "
         "included?",
         why="one placeholder (x), one node per call on a proxy (fc1, relu, mul, fc2, softmax), one get_attr for "
             "self.gate, and the output: 8")
question("ch3.slowest_node", "On a batch of 64 rows, which node takes longer on the NPU's clock: fc1 (a Linear) or "
         "relu? Answer \"fc1\", \"relu\" or \"the same\".",
         why="at this size every kernel is launch-bound: the cost model's 4 us launch latency is far more than the "
             "arithmetic and the memory traffic, so a matrix product costs what a relu costs",
         choices=("fc1", "relu", "the same"))
question("ch3.fused_launches", "The unfused MLP launches 5 kernels. How many does it launch after fuse_linear_relu?",
         why="each Linear followed by a ReLU becomes one linear_relu kernel (two pairs); the last Linear has no ReLU "
             "after it and stays one addmm: 3")
question("ch3.rewrite_nodes", "The traced HandGelu has 12 nodes. How many are left after replace_pattern?",
         why="the pattern's eight operator nodes become one gelu call: x, fc1, gelu, fc2 and the output remain")


# --- functions the learner's passes call ---------------------------------------------------

def hard_sigmoid(x: torch.Tensor) -> torch.Tensor:
    """A piecewise-linear sigmoid: ``clamp(x / 6 + 1/2, 0, 1)`` (cheap: no exponential)."""
    return torch.clamp(x / 6 + 0.5, 0.0, 1.0)


class _AddReLU(torch.autograd.Function):
    """relu(a + b) in one generated elementwise kernel on npu; gradients as for add then relu."""

    @staticmethod
    def forward(ctx: Any, a: Any, b: Any) -> torch.Tensor:
        from ..ops.pointwise import pointwise

        out = pointwise("add_relu", "relu({0} + {1})", (a, b), flops=2.0)
        ctx.save_for_backward(out)
        ctx.shapes = [x.shape if isinstance(x, torch.Tensor) else None for x in (a, b)]
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (out,) = ctx.saved_tensors
        g = grad * (out > 0)
        return tuple(None if s is None else g.sum_to_size(s) for s in ctx.shapes)


def fused_add_relu(a: Any, b: Any) -> torch.Tensor:
    """``relu(a + b)`` as one call (``a`` or ``b`` may be a number).

    On ``npu`` this launches one elementwise kernel (``add_relu``) where the
    unfused pair launches two and writes the sum to memory in between; on other
    devices it is ``torch.relu(a + b)``.
    """
    tensors = [x for x in (a, b) if isinstance(x, torch.Tensor)]
    if tensors and all(t.device.type == "npu" or t.dim() == 0 for t in tensors) \
            and any(t.device.type == "npu" for t in tensors):
        return _AddReLU.apply(a, b)
    return torch.relu(a + b)


# --- recognising spellings in a graph (the checks' own reference) --------------------------

def _submodule(gm: torch.nn.Module, node: torch.fx.Node) -> torch.nn.Module | None:
    try:
        return gm.get_submodule(node.target)
    except AttributeError:
        return None


def _is_add(node: object) -> bool:
    """``a + b`` or ``torch.add(a, b)`` (no ``alpha``)."""
    return (isinstance(node, torch.fx.Node) and node.op == "call_function"
            and node.target in (operator.add, torch.add) and len(node.args) == 2 and not node.kwargs)


def _is_relu(gm: torch.nn.Module, node: torch.fx.Node) -> bool:
    """``torch.relu(t)``, ``F.relu(t)``, ``t.relu()`` or an ``nn.ReLU`` submodule."""
    if node.op == "call_function":
        return node.target in (torch.relu, F.relu) and not node.kwargs.get("inplace", False)
    if node.op == "call_method":
        return node.target == "relu"
    if node.op == "call_module":
        return isinstance(_submodule(gm, node), nn.ReLU)
    return False


def _is_sigmoid(gm: torch.nn.Module, node: torch.fx.Node) -> bool:
    if node.op == "call_function":
        return node.target in (torch.sigmoid, F.sigmoid)
    if node.op == "call_method":
        return node.target == "sigmoid"
    if node.op == "call_module":
        return isinstance(_submodule(gm, node), nn.Sigmoid)
    return False


def _fusable_pairs(gm: torch.fx.GraphModule) -> int:
    """relu nodes whose input is an add that nothing else uses."""
    return sum(1 for n in gm.graph.nodes if _is_relu(gm, n) and n.args and _is_add(n.args[0])
               and len(n.args[0].users) == 1)


def _recompiled(gm: torch.fx.GraphModule) -> bool:
    return gm.code == gm.graph.python_code(root_module="self").src


def _device_and_values(out: Any) -> Any:
    """(device types, values on the host) of a result (a tensor or a tuple of tensors): compared on the host,
    where formatting a value is cheap. Anything else comes back as it is (and fails the comparison)."""
    if type(out) is torch.Tensor:
        return out.device.type, out.detach().cpu()
    if type(out) is tuple and all(type(o) is torch.Tensor for o in out):
        return tuple(o.device.type for o in out), tuple(o.detach().cpu() for o in out)
    return out


def _swap_sigmoid_reference(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    for node in list(gm.graph.nodes):
        if _is_sigmoid(gm, node):
            with gm.graph.inserting_before(node):
                new = gm.graph.call_function(hard_sigmoid, (node.args[0],))
            node.replace_all_uses_with(new)
            gm.graph.erase_node(node)
    gm.recompile()
    return gm


# --- modules the checks trace ----------------------------------------------------------------

class _TwoLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 3)
        self.gate = nn.Parameter(torch.linspace(-1, 1, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x)) * self.gate
        return self.fc2(h).softmax(dim=-1)


class _Reshaper(nn.Module):
    """Splits, views with the input's own shape, a tuple of tensors, a bias buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("bias", torch.arange(2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = torch.split(x, 2, dim=1)
        y = (a * b).reshape(x.shape[0], -1) + self.bias
        return y.t().contiguous().sum(0, keepdim=True)


class _Pieces(nn.Module):
    """Returns a tuple; has a chunk (tuple-valued node), a permute and a matmul."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        parts = self.proj(x).chunk(3, dim=-1)
        scores = parts[0] @ parts[1].transpose(-2, -1)
        return scores, torch.cat(parts, dim=0).permute(1, 0)


class _Reuse(nn.Module):
    """One Linear called twice; a Sequential of two modules; a parameter used twice."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.post = nn.Sequential(nn.Tanh(), nn.Dropout(0.0))
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(self.fc(x) * self.w)
        return self.post(h).view(-1, 2) * self.w.sum()


class _SigGate(nn.Module):
    """torch.sigmoid and x.sigmoid() (call_function and call_method)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(5, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.fc(x)) * x.sigmoid()


class _SigModule(nn.Module):
    """An nn.Sigmoid submodule (call_module) next to a tanh that must stay."""

    def __init__(self) -> None:
        super().__init__()
        self.act = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x) + torch.tanh(x)


class _SigMixed(nn.Module):
    """All three spellings; one sigmoid result is used twice and one is an output."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Sequential(nn.Linear(5, 5), nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = torch.sigmoid(x)
        g = self.gate(s * s)
        return g.sigmoid() - s, torch.sigmoid(g)


class _AddReluBasic(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + y) * 2


class _Residual(nn.Module):
    """F.relu(linear + x), then (a + y).relu(): two pairs, two spellings."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = F.relu(self.fc(x) + x)
        return (a + y).relu()


class _SharedSum(nn.Module):
    """The sum is also used after the relu: the add has two users and must stay."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        s = x + y
        return torch.relu(s) + s


class _ModuleRelu(nn.Module):
    """torch.add before an nn.ReLU submodule; a relu of a product (not an add)."""

    def __init__(self) -> None:
        super().__init__()
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.act(torch.add(x, y))
        return torch.relu(h * y)


class _ScalarsAndAlpha(nn.Module):
    """Adds with a number on either side; an add with alpha (not a plain add); a chain."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = torch.relu(x + 1.0)
        b = F.relu(0.5 + y)
        c = torch.relu(torch.add(a, b, alpha=2.0))
        return (c + a).relu()


class _SumAlsoReturned(nn.Module):
    """The add is an output as well as the relu's input: no fusion."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = x + y
        return torch.relu(s), s


def _seeded(cls: type[nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    return cls().eval()


# --- 1. count node kinds ----------------------------------------------------------------------

def _reference_kinds(module: Any) -> dict[str, int]:
    gm = torch.fx.symbolic_trace(module)
    counts = dict.fromkeys(KINDS, 0)
    for n in gm.graph.nodes:
        counts[n.op] += 1
    return counts


def _kinds_ok(got: Any, expected: dict[str, int]) -> tuple[bool, str]:
    if not isinstance(got, dict):
        return False, f"expected a dict, got {type(got).__name__}" + (
            " (did you forget to `return`?)" if got is None else "")
    missing = [k for k in KINDS if k not in got]
    if missing:
        return False, f"missing keys {missing} (every kind must be a key, 0 if absent)"
    extra = [k for k in got if k not in KINDS]
    if extra:
        return False, f"unexpected keys {extra}"
    wrong = [f"{k}: {got[k]} instead of {expected[k]}" for k in KINDS if got[k] != expected[k]]
    return (not wrong), "; ".join(wrong)


def _scaled_tanh(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * y.mean() + 1


@exercise("ch3.node_kinds", "Count the node kinds of a traced module", names=["count_node_kinds"])
def _node_kinds(t: Tester, count_node_kinds) -> None:
    from .. import models

    hint = ("symbolic_trace the module, then count node.op over gm.graph.nodes; start from a dict with "
            "all six kinds at 0")
    cases = [("the chapter's two-layer module (fc1, relu, gate, fc2, softmax)", _seeded(_TwoLayer), False),
             ("models.mlp() (an nn.Sequential)", _seeded(models.mlp), False),
             ("a plain function tanh(x) * y.mean() + 1", _scaled_tanh, False),
             ("one Linear called twice, a Sequential inside, a parameter used twice", _seeded(_Reuse), False),
             ("a module with a buffer, split and reshape", _seeded(_Reshaper), True),
             ("models.SmallCNN()", _seeded(models.SmallCNN), True)]
    for desc, module, hidden in cases:
        expected = _reference_kinds(module)
        t.case(f"count_node_kinds({desc})", count_node_kinds, module, expected=expected, hidden=hidden,
               hint=hint if not hidden else "count every node of the traced graph, and keep all six kinds "
                                            "as keys (a function has no get_attr or call_module nodes)",
               check=lambda got, e=expected: _kinds_ok(got, e))


# --- 2. swap sigmoid for hard_sigmoid -----------------------------------------------------------

def _sigmoids(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if _is_sigmoid(gm, n))


def _other_calls(gm: torch.fx.GraphModule) -> list[str]:
    """The calls that are neither a sigmoid nor hard_sigmoid, as sorted strings."""
    return sorted(f"{n.op}:{n.target if isinstance(n.target, str) else getattr(n.target, '__name__', n.target)}"
                  for n in gm.graph.nodes if n.op.startswith("call") and not _is_sigmoid(gm, n)
                  and n.target is not hard_sigmoid)


@exercise("ch3.swap_sigmoid", "Replace every sigmoid, however it is spelled, by hard_sigmoid",
          names=["swap_sigmoid"])
def _swap_sigmoid(t: Tester, swap_sigmoid) -> None:
    cases = [("torch.sigmoid(fc(x)) * x.sigmoid()", _SigGate, (4, 5), False),
             ("an nn.Sigmoid submodule next to torch.tanh", _SigModule, (3, 5), False),
             ("all three spellings, a sigmoid used twice, one as an output", _SigMixed, (4, 5), True)]
    mixed = ("(this graph has all three spellings, inside an nn.Sequential too; one sigmoid's result is used "
             "twice and one is returned) ")
    for name, cls, shape, hidden in cases:
        about = mixed if hidden else ""
        module = _seeded(cls)
        gm = torch.fx.symbolic_trace(module)
        before = _sigmoids(gm)
        others = _other_calls(gm)
        reference = _swap_sigmoid_reference(copy.deepcopy(gm))
        x = randn(*shape, seed=3)
        want_cpu = reference(x)
        ref_npu = copy.deepcopy(reference).to("npu")
        x_npu = x.to("npu")
        want_npu = ref_npu(x_npu)
        outcome = t.call(swap_sigmoid, gm)
        if not outcome.ok:
            t.error(f"swap_sigmoid(graph of {name})", outcome, hidden=hidden,
                    hint="take the GraphModule, edit gm.graph, call gm.recompile(), return gm")
            continue
        new = outcome.value
        if not is_graph_module(new):
            t.expect(f"swap_sigmoid(graph of {name}) returns a GraphModule", False, hidden=hidden,
                     expected="torch.fx.GraphModule", got=short(new),
                     hint="return the GraphModule you changed (did you forget `return gm`?)")
            continue
        left = _sigmoids(new)
        hards = count_calls(new, hard_sigmoid)
        t.expect(f"{name}: no sigmoid is left", left == 0, hidden=hidden, expected="0 sigmoid nodes",
                 got=f"{left} left",
                 hint=about + "a sigmoid can be a call_function (torch.sigmoid), a call_method (target 'sigmoid') or "
                      "a call_module whose submodule (gm.get_submodule(node.target)) is an nn.Sigmoid")
        t.expect(f"{name}: each sigmoid became one call_function of hard_sigmoid", hards == before, hidden=hidden,
                 expected=f"{before} hard_sigmoid calls", got=str(hards),
                 hint=about + "insert graph.call_function(hard_sigmoid, (node.args[0],)) before the node, then "
                      "node.replace_all_uses_with(new) and graph.erase_node(node); a call_method node's target is "
                      "a string, so make a new node rather than changing the target")
        t.expect(f"{name}: the other calls are unchanged", _other_calls(new) == others, hidden=hidden,
                 expected=short(others), got=short(_other_calls(new)),
                 hint=about + "only sigmoid nodes may change (tanh, mul, linear... stay)")
        t.expect(f"{name}: the module's code was regenerated from the edited graph", _recompiled(new),
                 hidden=hidden, expected="gm.code matches gm.graph",
                 got="up to date" if _recompiled(new) else "gm.code is stale",
                 hint="after editing gm.graph, call gm.recompile() so gm.forward runs the new graph")
        t.case(f"{name}: the rewritten module on cpu", new, x, expected=want_cpu, hidden=hidden,
               hint=about + "the result must equal the module with hard_sigmoid in place of each sigmoid: every use "
                            "of a sigmoid's result (also the output) must read the new node")
        t.case(f"{name}: the rewritten module on npu", lambda g, a: _device_and_values(g.to("npu")(a)), new, x_npu,
               expected=_device_and_values(want_npu), hidden=hidden,
               hint="the rewritten module must also run on npu tensors (and give an npu result)")


# --- 3. a shape-propagating interpreter ---------------------------------------------------------

_ABSENT = "<no 'shape'>"


def _meta_shape(meta: Any) -> Any:
    """ShapeProp's tensor_meta as shapes: a tuple for a tensor, nested tuples for tuples of tensors."""
    from torch.fx.passes.shape_prop import TensorMetadata

    if isinstance(meta, TensorMetadata):
        return tuple(meta.shape)
    if isinstance(meta, (tuple, list)):
        return tuple(_meta_shape(m) for m in meta)
    return _ABSENT


def _reference_shapes(module: Any, inputs: tuple) -> dict[str, Any]:
    from torch.fx.passes.shape_prop import ShapeProp

    gm = torch.fx.symbolic_trace(module)
    ShapeProp(gm).propagate(*inputs)
    return {n.name: _meta_shape(n.meta["tensor_meta"]) if "tensor_meta" in n.meta else _ABSENT
            for n in gm.graph.nodes}


def _normalise(shape: Any) -> Any:
    if isinstance(shape, (tuple, list)):
        return tuple(_normalise(s) for s in shape)
    return shape


def _shape_map_ok(got: dict[str, Any], expected: dict[str, Any]) -> tuple[bool, str]:
    wrong = []
    for name, want in expected.items():
        have = got.get(name, _ABSENT)
        if have is not _ABSENT:
            ok, plain_have, why = check_plain(have)  # node.meta["shape"] is the learner's value
            have = _normalise(plain_have) if ok else f"<{why}>"
        if have != want:
            wrong.append(f"{name}: {have} instead of {want}")
    return (not wrong), "; ".join(wrong[:3]) + (f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else "")


@exercise("ch3.shape_interpreter", "An Interpreter that records every node's output shape",
          names=["ShapeInterpreter"])
def _shape_interpreter(t: Tester, ShapeInterpreter) -> None:
    from torch.fx.passes.shape_prop import ShapeProp

    from .. import models

    if not (isinstance(ShapeInterpreter, type) and issubclass(ShapeInterpreter, torch.fx.Interpreter)):
        t.expect("ShapeInterpreter is a subclass of torch.fx.Interpreter", False,
                 expected="class ShapeInterpreter(torch.fx.Interpreter)", got=short(ShapeInterpreter),
                 hint="write `class ShapeInterpreter(torch.fx.Interpreter):` and override run_node")
        return
    t.expect("ShapeInterpreter records the shapes itself (it is not a ShapeProp)",
             not issubclass(ShapeInterpreter, ShapeProp), expected="a subclass of torch.fx.Interpreter",
             got="a subclass of ShapeProp" if issubclass(ShapeInterpreter, ShapeProp) else "its own",
             hint="derive from torch.fx.Interpreter and read the shape from the value super().run_node(n) returns; "
                  "ShapeProp is the interpreter the exercise asks you to write")

    def drive(gm: torch.fx.GraphModule, device: str, *inputs: Any) -> tuple[Any, dict[str, Any]]:
        gm = gm.to(device)  # traced on the cpu: Tester.call deep-copies the module it is given
        try:
            out = ShapeInterpreter(gm).run(*inputs)
        except NotImplementedError as e:
            if str(e).startswith(STUB_MESSAGE):  # the stub, with FX's note of the node it was running
                raise NotImplementedError(STUB_MESSAGE) from None
            raise
        return out, {n.name: n.meta.get("shape", _ABSENT) for n in gm.graph.nodes}, \
            sum("tensor_meta" in n.meta for n in gm.graph.nodes)

    cases = [("the chapter's two-layer module on npu, x of (4, 6)", _seeded(_TwoLayer), ((4, 6),), "npu", False),
             ("split, reshape with x.shape, a buffer; on cpu, x of (3, 4)", _seeded(_Reshaper), ((3, 4),), "cpu",
              False),
             ("chunk (a tuple of tensors), matmul, tuple output; on npu", _seeded(_Pieces), ((5, 6),), "npu", True),
             ("models.SmallCNN on npu", _seeded(models.SmallCNN), ((2, 3, 32, 32),), "npu", True),
             ("a function of two inputs on cpu", _scaled_tanh, ((2, 7), (7,)), "cpu", True)]
    abouts = {"chunk (a tuple of tensors), matmul, tuple output; on npu":
              "(here chunk gives a tuple of tensors, getitem nodes pick from it, and the output is a tuple) ",
              "models.SmallCNN on npu": "(here a convolutional network: call_module nodes, a flatten, 4-D shapes) ",
              "a function of two inputs on cpu": "(here a plain function: two placeholders, a 0-dim mean) "}
    for desc, module, shapes, device, hidden in cases:
        about = abouts.get(desc, "")
        on_device = copy.deepcopy(module).to(device) if isinstance(module, nn.Module) else module
        inputs = tuple(randn(*s, seed=i, device=device) for i, s in enumerate(shapes))
        expected = _reference_shapes(on_device, inputs)
        want_out = on_device(*inputs)
        gm = torch.fx.symbolic_trace(module)
        outcome = t.call(drive, gm, device, *inputs)
        if not outcome.ok:
            t.error(f"ShapeInterpreter(traced {desc}).run(...)", outcome, hidden=hidden,
                    hint="override run_node(self, n): result = super().run_node(n); record; return result")
            continue
        out, got, propagated = outcome.value
        t.expect(f"{desc}: the shapes come from your run_node, not from ShapeProp", propagated == 0, hidden=hidden,
                 expected="no node.meta['tensor_meta']", got=f"{propagated} node(s) with ShapeProp's tensor_meta",
                 hint="do not run ShapeProp inside your interpreter: record tuple(value.shape) from each node's "
                      "value yourself")
        t.expect(f"{desc}: run() still returns the module's result", _same(out, want_out), hidden=hidden,
                 expected=short(want_out), got=short(out),
                 hint=about + "run_node must return the value super().run_node(n) computed")
        shapes_ok, shapes_why = _shape_map_ok(got, expected)
        t.expect(f"{desc}: node.meta['shape'] of every node matches ShapeProp", shapes_ok, hidden=hidden,
                 expected=short({k: v for k, v in expected.items() if v != _ABSENT}, 300), got=shapes_why,
                 hint=about + "a tensor gives tuple(value.shape); a tuple/list of tensors a tuple of their shapes; any "
                      "other value (an int, a torch.Size) gets no 'shape' entry - placeholders and output count too")


def _same(a: Any, b: Any) -> bool:
    """``a`` (the learner's) equals ``b`` (the check's), compared with the check's own functions."""
    if isinstance(b, torch.Tensor):
        return tensors_close(a, b, atol=1e-5)
    if type(b) in (tuple, list):
        return type(a) in (tuple, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    ok, plain_a, _ = check_plain(a)
    return ok and type(plain_a) is type(b) and b == plain_a


# --- 4. fuse add + relu -----------------------------------------------------------------------

def _adds(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if _is_add(n))


def _relus(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if _is_relu(gm, n))


def _describe_arg(gm: torch.fx.GraphModule, a: Any, fused: set[torch.fx.Node]) -> Any:
    """An argument as a name that survives the rewrite: inputs, attributes and modules by name, the result
    of a fused pair as "fused", other calls by their target, numbers as they are."""
    if not isinstance(a, torch.fx.Node):
        return a
    if a.op in ("placeholder", "get_attr", "call_module"):
        return f"{a.op}:{a.target}"
    if a in fused:
        return "fused"
    target = a.target if isinstance(a.target, str) else getattr(a.target, "__name__", str(a.target))
    return f"{a.op}:{target}"


def _pair_args(gm: torch.fx.GraphModule) -> list[tuple]:
    """The arguments of each fusable add, in graph order."""
    relus = [n for n in gm.graph.nodes if _is_relu(gm, n) and n.args and _is_add(n.args[0])
             and len(n.args[0].users) == 1]
    return [tuple(_describe_arg(gm, a, set(relus)) for a in n.args[0].args) for n in relus]


def _fused_args(gm: torch.fx.GraphModule) -> list[tuple]:
    """The arguments of each fused_add_relu call, described as in :func:`_pair_args`."""
    fused = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is fused_add_relu]
    return [tuple(_describe_arg(gm, a, set(fused)) for a in n.args) for n in fused]


def _warm_add_relu() -> None:
    """Compile the add_relu kernels (contiguous, broadcast, scalar) before timing the learner."""
    a, b = randn(4, 6, device="npu"), randn(4, 6, seed=1, device="npu")
    fused_add_relu(a, b)
    fused_add_relu(a, b[0])
    fused_add_relu(a, 1.0)
    fused_add_relu(1.0, a)


@exercise("ch3.fuse_add_relu", "An FX pass: fuse add + relu into one fused_add_relu call",
          names=["fuse_add_relu"])
def _fuse_add_relu(t: Tester, fuse_add_relu) -> None:
    _warm_add_relu()
    cases = [("torch.relu(x + y) * 2", _AddReluBasic, False, ""),
             ("F.relu(fc(x) + x), then (a + y).relu()", _Residual, False, ""),
             ("s = x + y; relu(s) + s (the sum has two users)", _SharedSum, False, ""),
             ("nn.ReLU after torch.add; relu of a product", _ModuleRelu, True,
              "(here an nn.ReLU submodule follows torch.add(x, y), and a relu follows a product, not an add) "),
             ("numbers on either side of +, torch.add with alpha, a chain", _ScalarsAndAlpha, True,
              "(here x + 1.0 and 0.5 + y have a number on one side, torch.add(a, b, alpha=2.0) is not a plain add, and "
              "one fused result feeds the next pair) "),
             ("the sum is also returned", _SumAlsoReturned, True,
              "(here the sum is also an output of the graph: the output node is another user of the add) ")]
    for name, cls, hidden, about in cases:
        module = _seeded(cls)
        gm = torch.fx.symbolic_trace(module)
        pairs, adds, relus = _fusable_pairs(gm), _adds(gm), _relus(gm)
        pair_args = _pair_args(gm)
        x, y = randn(4, 6, seed=1), randn(4, 6, seed=2)
        want_cpu = module(x, y)
        npu_module = copy.deepcopy(module).to("npu")
        x_npu, y_npu = x.to("npu"), y.to("npu")
        want_npu = npu_module(x_npu, y_npu)
        outcome = t.call(fuse_add_relu, gm)
        if not outcome.ok:
            t.error(f"fuse_add_relu(graph of {name})", outcome, hidden=hidden,
                    hint="take the GraphModule, edit gm.graph, call gm.recompile(), return gm; erase a node only "
                         "after nothing uses it")
            continue
        new = outcome.value
        if not is_graph_module(new):
            t.expect(f"fuse_add_relu(graph of {name}) returns a GraphModule", False, hidden=hidden,
                     expected="torch.fx.GraphModule", got=short(new),
                     hint="return the GraphModule you changed (did you forget `return gm`?)")
            continue
        left = _fusable_pairs(new)
        fused = count_calls(new, fused_add_relu)
        t.expect(f"{name}: no relu is left right after a single-user add", left == 0, hidden=hidden,
                 expected="0 add -> relu pairs", got=f"{left} left",
                 hint=about + "a relu is torch.relu / F.relu (call_function), .relu() (call_method, target 'relu') or "
                      "an nn.ReLU submodule (call_module); an add is a + b (operator.add) or torch.add(a, b)")
        t.expect(f"{name}: one fused_add_relu call per fusable pair", fused == pairs, hidden=hidden,
                 expected=f"{pairs} fused_add_relu call(s)", got=str(fused),
                 hint=about + "fuse only when len(add_node.users) == 1 and the add has no keyword arguments "
                      "(torch.add(a, b, alpha=2) is a + 2*b); a relu of anything else stays")
        kept = (_adds(new), _relus(new))
        t.expect(f"{name}: the adds and relus that cannot be fused are kept", kept == (adds - pairs, relus - pairs),
                 hidden=hidden, expected=f"{adds - pairs} add(s), {relus - pairs} relu(s)",
                 got=f"{kept[0]} add(s), {kept[1]} relu(s)",
                 hint=about + "an add whose result is used elsewhere too must stay, and so must its relu")
        got_args = _fused_args(new)
        if fused == pairs and pair_args:
            t.expect(f"{name}: fused_add_relu gets the add's two arguments, in order", got_args == pair_args,
                     hidden=hidden, expected=short(pair_args), got=short(got_args),
                     hint=about + "call fused_add_relu with add_node.args as they are: (a, b) for a + b, not (b, a)")
        t.expect(f"{name}: the module's code was regenerated from the edited graph", _recompiled(new),
                 hidden=hidden, expected="gm.code matches gm.graph",
                 got="up to date" if _recompiled(new) else "gm.code is stale",
                 hint="after editing gm.graph, call gm.recompile() so gm.forward runs the new graph")
        t.case(f"{name}: the fused module on cpu", new, x, y, expected=want_cpu, hidden=hidden,
               hint="fused_add_relu(a, b) takes the add's two arguments, in order")
        t.case(f"{name}: the fused module on npu", lambda g, a, b: g.to("npu")(a, b), new, x_npu, y_npu,
               expected=want_npu, hidden=hidden, hint="the fused module must give the same values on npu tensors")
