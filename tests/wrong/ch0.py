"""Plausible wrong answers to the technology-choice exercises (chapter ``ch0``)."""

_ALL = '{"torch.compile", "jit.trace", "jit.script", "fx", "export", "lazy"}'

#: The decision tree around a ``branches()`` measurement (the wrong answers differ in how they measure).
_TREE = ("    g = lambda k: req.get(k, False)\n    if g('deploy_without_python'):\n"
         "        return 'torchscript' if g('legacy_torchscript_runtime') else 'torch.export'\n"
         "    if g('whole_step_graphs'):\n        return 'lazy'\n    if g('custom_graph_pass'):\n"
         "        return 'torch.compile' if branches() else 'torch.fx'\n"
         "    return 'torch.compile' if g('needs_speedup') else 'eager'")

#: ch0.onnx_deploy: the solution's deploy in pieces, so that each wrong answer changes one of them.
_HEAD = ("import copy as _copy\nimport onnxruntime as _ort\n"
         "def deploy(model, example_inputs):\n")
_EXPORT = ("    frozen = _copy.deepcopy(model).eval()\n    batch = torch.export.Dim('batch')\n"
           "    program = torch.onnx.export(frozen, example_inputs, dynamo=True, verbose=False,\n"
           "                                dynamic_shapes=tuple({0: batch} for _ in example_inputs))\n")
_SESSION = ("    session = _ort.InferenceSession(program.model_proto.SerializeToString(),\n"
            "                                    providers=['CPUExecutionProvider'])\n"
            "    names = [i.name for i in session.get_inputs()]\n")
_RUN = ("    def run(*inputs):\n"
        "        feeds = {n: x.detach().cpu().numpy() for n, x in zip(names, inputs)}\n"
        "        return torch.from_numpy(session.run(None, feeds)[0]).to(inputs[0].device)\n"
        "    return run\n")

WRONG: dict[str, list[str]] = {
    "ch0.who_captures": [
        # believes jit.trace records control flow
        "captures = {\n"
        '    "shape_branch": {"torch.compile", "jit.trace", "jit.script", "export", "lazy"},\n'
        f'    "counted_loop": {_ALL},\n'
        '    "tensor_while": {"jit.script", "jit.trace"},\n'
        '    "row_list": {"torch.compile", "jit.trace", "jit.script", "export", "lazy"},\n'
        '    "global_counter": {"torch.compile", "lazy"},\n'
        '    "mean_branch": {"jit.script", "jit.trace"},\n}',
        # forgets that fx traces with Proxies that have no real shape
        "captures = {\n"
        f'    "shape_branch": {_ALL},\n'
        f'    "counted_loop": {_ALL},\n'
        '    "tensor_while": {"jit.script"},\n'
        f'    "row_list": {_ALL},\n'
        '    "global_counter": {"torch.compile", "lazy"},\n'
        '    "mean_branch": {"jit.script"},\n}',
        # thinks no graph technology keeps Python side effects
        "captures = {\n"
        '    "shape_branch": {"torch.compile", "jit.trace", "jit.script", "export", "lazy"},\n'
        f'    "counted_loop": {_ALL},\n'
        '    "tensor_while": {"jit.script"},\n'
        '    "row_list": {"torch.compile", "jit.trace", "jit.script", "export", "lazy"},\n'
        '    "global_counter": set(),\n'
        '    "mean_branch": {"jit.script"},\n}',
        # misspelt technology names
        "captures = {name: {'TorchScript', 'TorchFX'} for name in "
        "['shape_branch', 'counted_loop', 'tensor_while', 'row_list', 'global_counter', 'mean_branch']}",
    ],
    "ch0.export_branches": [
        # one torch.where per row in a Python loop: exports for 4 rows, but not "all the row sums at once"
        "def gate(x):\n    return torch.where(x.mean() > 0, x * 2, x / 2)\n"
        "def rowwise(x):\n    return torch.stack([torch.where(r.sum() > 0, r.relu(), -r) for r in x])",
        # keeps the Python branch: torch.export refuses it
        "def gate(x):\n    if x.mean() > 0:\n        return x * 2\n    return x / 2\n"
        "def rowwise(x):\n    return torch.where(x.sum(dim=1, keepdim=True) > 0, x.relu(), -x)",
        # >= instead of >: wrong on the boundary
        "def gate(x):\n    return torch.where(x.mean() >= 0, x * 2, x / 2)\n"
        "def rowwise(x):\n    return torch.where(x.sum(dim=1, keepdim=True) >= 0, x.relu(), -x)",
        # one decision for the whole tensor instead of one per row
        "def gate(x):\n    return torch.where(x.mean() > 0, x * 2, x / 2)\n"
        "def rowwise(x):\n    return torch.where(x.sum() > 0, x.relu(), -x)",
        # the row mask without keepdim broadcasts along the wrong dimension
        "def gate(x):\n    return torch.cond(x.mean() > 0, lambda x: x * 2, lambda x: x / 2, (x,))\n"
        "def rowwise(x):\n    return torch.where(x.sum(dim=1) > 0, x.relu(), -x)",
    ],
    "ch0.choose": [
        # speed first
        "def choose(req, fn, example_inputs):\n    g = lambda k: req.get(k, False)\n"
        "    if g('needs_speedup'):\n        return 'torch.compile'\n"
        "    if g('deploy_without_python'):\n"
        "        return 'torchscript' if g('legacy_torchscript_runtime') else 'torch.export'\n"
        "    if g('whole_step_graphs'):\n        return 'lazy'\n"
        "    if g('custom_graph_pass'):\n        try:\n            torch.fx.symbolic_trace(fn)\n"
        "        except Exception:\n            return 'torch.compile'\n        return 'torch.fx'\n"
        "    return 'eager'",
        # reads every key: a missing key raises KeyError
        "def choose(req, fn, example_inputs):\n    if req['deploy_without_python']:\n"
        "        return 'torchscript' if req['legacy_torchscript_runtime'] else 'torch.export'\n"
        "    if req['whole_step_graphs']:\n        return 'lazy'\n    if req['custom_graph_pass']:\n"
        "        return 'torch.fx'\n    return 'torch.compile' if req['needs_speedup'] else 'eager'",
        # a graph break counts as a branch on values (.item() breaks Dynamo's graph without any branch)
        "def choose(req, fn, example_inputs):\n"
        "    def branches():\n        torch._dynamo.reset()\n"
        "        return torch._dynamo.explain(fn)(*example_inputs).graph_break_count > 0\n" + _TREE,
        # reads the source text for `if`/`while` (a constant `if` is not data-dependent; a helper's is missed)
        "import inspect as _inspect\n"
        "def choose(req, fn, example_inputs):\n"
        "    def branches():\n"
        "        src = _inspect.getsource(fn.forward if isinstance(fn, torch.nn.Module) else fn)\n"
        "        return ' if ' in src or 'while ' in src\n" + _TREE,
        # data-dependent control flow sends deployment to TorchScript
        "def choose(req, fn, example_inputs):\n    g = lambda k: req.get(k, False)\n"
        "    try:\n        torch.fx.symbolic_trace(fn)\n        branches = False\n"
        "    except Exception:\n        branches = True\n"
        "    if g('deploy_without_python'):\n"
        "        return 'torchscript' if g('legacy_torchscript_runtime') or branches else 'torch.export'\n"
        "    if g('whole_step_graphs'):\n        return 'lazy'\n    if g('custom_graph_pass'):\n"
        "        return 'torch.compile' if branches else 'torch.fx'\n"
        "    return 'torch.compile' if g('needs_speedup') else 'eager'",
        # measures by running fn on the inputs (it runs whatever the values say: nothing is learned)
        "def choose(req, fn, example_inputs):\n"
        "    def branches():\n        try:\n            fn(*example_inputs)\n            return False\n"
        "        except Exception:\n            return True\n" + _TREE,
    ],
    "ch0.onnx_deploy": [
        # no dynamic batch: the file only takes the example's batch size
        _HEAD + "    frozen = _copy.deepcopy(model).eval()\n"
        "    program = torch.onnx.export(frozen, example_inputs, dynamo=True, verbose=False)\n" + _SESSION + _RUN,
        # exports, but runs the PyTorch model
        _HEAD + _EXPORT + "    def run(*inputs):\n        with torch.no_grad():\n"
        "            return frozen(*inputs)\n    return run\n",
        # returns what ONNX Runtime gives: NumPy arrays
        _HEAD + _EXPORT + _SESSION + "    def run(*inputs):\n"
        "        feeds = {n: x.detach().cpu().numpy() for n, x in zip(names, inputs)}\n"
        "        return session.run(None, feeds)[0]\n    return run\n",
        # CPU tensors for npu inputs
        _HEAD + _EXPORT + _SESSION + "    def run(*inputs):\n"
        "        feeds = {n: x.detach().cpu().numpy() for n, x in zip(names, inputs)}\n"
        "        return torch.from_numpy(session.run(None, feeds)[0])\n    return run\n",
        # the TorchScript-based exporter (dynamo=False): it cannot export torch.cond
        _HEAD + "    frozen = _copy.deepcopy(model).eval()\n    import io as _io\n    buf = _io.BytesIO()\n"
        "    torch.onnx.export(frozen, example_inputs, buf, dynamo=False,\n"
        "                      dynamic_axes={f'input_{i}': {0: 'batch'} for i in range(len(example_inputs))},\n"
        "                      input_names=[f'input_{i}' for i in range(len(example_inputs))])\n"
        "    session = _ort.InferenceSession(buf.getvalue(), providers=['CPUExecutionProvider'])\n"
        "    names = [i.name for i in session.get_inputs()]\n" + _RUN,
        # puts the caller's model in eval mode instead of exporting a copy
        _HEAD + "    frozen = model.eval()\n    batch = torch.export.Dim('batch')\n"
        "    program = torch.onnx.export(frozen, example_inputs, dynamo=True, verbose=False,\n"
        "                                dynamic_shapes=tuple({0: batch} for _ in example_inputs))\n"
        + _SESSION + _RUN,
        # feeds only the first input
        _HEAD + _EXPORT + _SESSION + "    def run(*inputs):\n"
        "        feeds = {names[0]: inputs[0].detach().cpu().numpy()}\n"
        "        return torch.from_numpy(session.run(None, feeds)[0]).to(inputs[0].device)\n    return run\n",
        # runs the session (and throws its result away), then returns what the PyTorch copy computes
        _HEAD + _EXPORT + _SESSION + "    def run(*inputs):\n"
        "        feeds = {n: x.detach().cpu().numpy() for n, x in zip(names, inputs)}\n"
        "        session.run(None, feeds)  # 'make sure the file runs'\n"
        "        device = next(frozen.parameters()).device\n"
        "        with torch.no_grad():\n"
        "            return frozen(*(x.to(device) for x in inputs)).to(inputs[0].device)\n    return run\n",
        # a new session on every call (the text: load the model into a session once, in deploy)
        _HEAD + _EXPORT + "    model_bytes = program.model_proto.SerializeToString()\n"
        "    def run(*inputs):\n"
        "        session = _ort.InferenceSession(model_bytes, providers=['CPUExecutionProvider'])\n"
        "        names = [i.name for i in session.get_inputs()]\n"
        "        feeds = {n: x.detach().cpu().numpy() for n, x in zip(names, inputs)}\n"
        "        return torch.from_numpy(session.run(None, feeds)[0]).to(inputs[0].device)\n    return run\n",
    ],
}
