"""Plausible wrong answers to the TorchDynamo exercises (chapter ``ch5``).

Each is run in the namespace of the executed solution notebook, which has imported ``torch``,
``tensor_guard`` and the chapter's functions from ``npu_lab.exercises.ch5``.
"""


def _predictor(skip: str, tensor_ok: str, other: str = "bool(eval(g.code, {'L': L}))") -> str:
    """A predict_recompiles that skips guards where ``skip`` holds and judges the rest by the two expressions."""
    return f"""
def predict_recompiles(guards, candidates):
    out = []
    for L in candidates:
        fails = False
        for g in guards:
            if {skip}:
                continue
            if g.kind == 'TENSOR_MATCH':
                want = tensor_guard(g.code)
                t = L[want.name]
                ok = {tensor_ok}
            else:
                ok = {other}
            fails = fails or not ok
        out.append(fails)
    return out
"""


_FULL = ("(t.dtype == want.dtype and t.device.type == want.device and t.requires_grad == want.requires_grad "
         "and t.dim() == len(want.size) and all(w is None or w == s for w, s in zip(want.size, t.shape)) "
         "and all(w is None or w == s for w, s in zip(want.stride, t.stride())))")

WRONG: dict[str, list[str]] = {
    "ch5.predict_recompiles": [
        # only sizes matter: dtype, device, requires_grad, strides and the Python values are ignored
        _predictor("g.source == 'global state'",
                   "all(w is None or w == s for w, s in zip(want.size, t.shape))", other="True"),
        # reads the tensor guards properly but not the guards on Python values (n, mode, t, k, clip)
        _predictor("g.source == 'global state'", _FULL, other="True"),
        # skips every guard that is not on an argument: misses the symbolic-shape guard 2 <= size (0/1 specialization)
        _predictor("not g.source.startswith('L[')", _FULL),
        # ignores strides: a transposed tensor of the same shape is taken to reuse the graph
        _predictor("g.source == 'global state'", _FULL.replace(
            " and all(w is None or w == s for w, s in zip(want.stride, t.stride())))", ")")),
        # compares sizes and strides pairwise with zip and forgets the number of dimensions: (4, 8, 1) "matches"
        _predictor("g.source == 'global state'", _FULL.replace("and t.dim() == len(want.size) ", "")),
        # treats a dynamic size (None) as a size that must still match: every new batch size "recompiles"
        _predictor("g.source == 'global state'",
                   "(t.dtype == want.dtype and t.device.type == want.device and t.requires_grad == want.requires_grad"
                   " and list(t.shape) == want.size and list(t.stride()) == want.stride)"),
    ],
    "ch5.remove_graph_break": [
        # only the print removed: .item() and the if on a tensor still break the graph
        "def gated_norm_fixed(x, w):\n    h = x @ w\n    h = h / h.abs().max().item()\n"
        "    if h.mean() > 0:\n        return torch.relu(h)\n    return torch.tanh(h)",
        # the if replaced by torch.where, but .item() kept
        "def gated_norm_fixed(x, w):\n    h = x @ w\n    scale = h.abs().max().item()\n    h = h / scale\n"
        "    return torch.where(h.mean() > 0, torch.relu(h), torch.tanh(h))",
        # no break, but the branch dropped: always relu
        "def gated_norm_fixed(x, w):\n    h = x @ w\n    h = h / h.abs().max()\n    return torch.relu(h)",
        # no break, but the normalisation dropped
        "def gated_norm_fixed(x, w):\n    h = x @ w\n"
        "    return torch.where(h.mean() > 0, torch.relu(h), torch.tanh(h))",
        # >= instead of >: a mean of exactly 0 takes the relu side, where gated_norm takes tanh
        "def gated_norm_fixed(x, w):\n    h = x @ w\n    h = h / h.abs().max()\n"
        "    return torch.where(h.mean() >= 0, torch.relu(h), torch.tanh(h))",
        # divides by the largest value, not the largest magnitude
        "def gated_norm_fixed(x, w):\n    h = x @ w\n    h = h / h.max()\n"
        "    return torch.where(h.mean() > 0, torch.relu(h), torch.tanh(h))",
        # hides the function from Dynamo: no graph break reported, but no graph either
        "@torch._dynamo.disable\ndef gated_norm_fixed(x, w):\n    h = x @ w\n    h = h / h.abs().max().item()\n"
        "    return torch.relu(h) if h.mean() > 0 else torch.tanh(h)",
    ],
    "ch5.compile_once": [
        # just compiles: the second call changes both the size and the int, so Dynamo compiles again
        "def run_compiled_once(fn, requests, backend):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    return [compiled(*r) for r in requests]",
        # dynamic=True: the sizes are symbolic, but the int values 0 and 1 are still specialized
        "def run_compiled_once(fn, requests, backend):\n"
        "    compiled = torch.compile(fn, backend=backend, dynamic=True)\n    return [compiled(*r) for r in requests]",
        # marks the changing dimensions but keeps the Python numbers (a guard on their values)
        "def run_compiled_once(fn, requests, backend):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    outs = []\n    for r in requests:\n        for i, a in enumerate(r):\n"
        "            if isinstance(a, torch.Tensor):\n"
        "                for d in range(a.dim()):\n"
        "                    if any(q[i].shape[d] != a.shape[d] for q in requests):\n"
        "                        torch._dynamo.mark_dynamic(a, d)\n        outs.append(compiled(*r))\n    return outs",
        # numbers as tensors, but no dimension marked: a new batch size still recompiles once
        "def run_compiled_once(fn, requests, backend):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    return [compiled(*[torch.tensor(a) if isinstance(a, (int, float)) else a for a in r]) "
        "for r in requests]",
        # marks every dimension of every tensor: w's rows are tied to x's features, so Dynamo refuses
        "def run_compiled_once(fn, requests, backend):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    outs = []\n    for r in requests:\n        args = []\n        for a in r:\n"
        "            if isinstance(a, torch.Tensor):\n                for d in range(a.dim()):\n"
        "                    torch._dynamo.mark_dynamic(a, d)\n                args.append(a)\n"
        "            else:\n                args.append(torch.tensor(a))\n        outs.append(compiled(*args))\n"
        "    return outs",
        # finds the changing dimensions from the first two requests only: a dimension that changes later is missed
        "def run_compiled_once(fn, requests, backend):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    a0, a1 = requests[0], requests[min(1, len(requests) - 1)]\n"
        "    changing = {i: [d for d in range(t.dim()) if a1[i].shape[d] != t.shape[d]]\n"
        "                for i, t in enumerate(a0) if isinstance(t, torch.Tensor)}\n"
        "    outs = []\n    for r in requests:\n        args = []\n        for i, a in enumerate(r):\n"
        "            if isinstance(a, torch.Tensor):\n                for d in changing[i]:\n"
        "                    torch._dynamo.mark_dynamic(a, d)\n            else:\n                a = torch.tensor(a)\n"
        "            args.append(a)\n        outs.append(compiled(*args))\n    return outs",
        # the batch dimension (0) of every tensor input and numbers as tensors: seq, and w's fixed rows, differ
        "def run_compiled_once(fn, requests, backend):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    outs = []\n    for r in requests:\n        args = []\n        for a in r:\n"
        "            if isinstance(a, torch.Tensor):\n                if a.shape[0] != 8:\n"
        "                    torch._dynamo.mark_dynamic(a, 0)\n            else:\n                a = torch.tensor(a)\n"
        "            args.append(a)\n        outs.append(compiled(*args))\n    return outs",
        # marks what changes and makes each number a tensor of its own dtype: an int 1 (int64), then 1.5 (float32)
        "def run_compiled_once(fn, requests, backend):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    first = requests[0]\n"
        "    changing = {i: [d for d in range(a.dim()) if any(r[i].shape[d] != a.shape[d] for r in requests)]\n"
        "                for i, a in enumerate(first) if isinstance(a, torch.Tensor)}\n"
        "    outs = []\n    for r in requests:\n        args = []\n        for i, a in enumerate(r):\n"
        "            if isinstance(a, torch.Tensor):\n                for d in changing[i]:\n"
        "                    torch._dynamo.mark_dynamic(a, d)\n"
        "            elif isinstance(a, (int, float)):\n                a = torch.tensor(a)\n"
        "            args.append(a)\n        outs.append(compiled(*args))\n    return outs",
        # compiles once and runs every request through the compiled function, but returns eager results
        "def run_compiled_once(fn, requests, backend):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    first = requests[0]\n"
        "    changing = {i: [d for d in range(a.dim()) if any(r[i].shape[d] != a.shape[d] for r in requests)]\n"
        "                for i, a in enumerate(first) if isinstance(a, torch.Tensor)}\n"
        "    floats = {i for i in range(len(first)) if any(isinstance(r[i], float) for r in requests)}\n"
        "    outs = []\n    for r in requests:\n        args = []\n        for i, a in enumerate(r):\n"
        "            if isinstance(a, torch.Tensor):\n                for d in changing[i]:\n"
        "                    torch._dynamo.mark_dynamic(a, d)\n"
        "            elif isinstance(a, (int, float)):\n"
        "                a = torch.tensor(float(a) if i in floats else a)\n"
        "            args.append(a)\n        compiled(*args)\n        outs.append(fn(*r))\n    return outs",
        # compiles the first request only and runs the rest eagerly
        "def run_compiled_once(fn, requests, backend):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    return [compiled(*requests[0])] + [fn(*r) for r in requests[1:]]",
    ],
    "ch5.lean_guards": [
        # PyTorch's own filter for nn modules: drops the training flag and attributes too
        "lean_guards = torch.compiler.skip_guard_on_all_nn_modules_unsafe",
        # drops every tensor guard (the inputs' dtype and shape too)
        "def lean_guards(entries):\n    return [e.guard_type != 'TENSOR_MATCH' for e in entries]",
        # drops every guard on the module (its name starts with fn._modules or fn.)
        "def lean_guards(entries):\n    return [not e.name.startswith('fn.') for e in entries]",
        # drops the parameters' guards but keeps the buffers'
        "def lean_guards(entries):\n"
        "    return [not (e.guard_type == 'TENSOR_MATCH' and '._parameters[' in e.name) for e in entries]",
        # drops every guard on parameters and buffers, of any type (the containers' type checks too)
        "def lean_guards(entries):\n"
        "    return [not ('_parameters' in e.name or '_buffers' in e.name) for e in entries]",
        # drops every tensor guard on what is reached through the model (names starting with fn): a plain tensor
        # attribute too, which is neither a parameter nor a buffer
        "def lean_guards(entries):\n"
        "    return [not (e.guard_type == 'TENSOR_MATCH' and e.name.startswith('fn')) for e in entries]",
        # drops the globals too ("they never change")
        "def lean_guards(entries):\n    weights = ('._parameters[', '._buffers[')\n"
        "    return [not e.is_global and not (e.guard_type == 'TENSOR_MATCH' and any(w in e.name for w in weights))\n"
        "            for e in entries]",
    ],
}
