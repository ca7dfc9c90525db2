"""Plausible wrong answers to the TorchFX exercises (chapter ``ch3``).

Each is run in the namespace of the executed solution notebook, which has imported
``operator``, ``torch``, ``torch.fx``, ``nn``, ``F``, ``fused_add_relu`` and ``hard_sigmoid``.
"""

WRONG: dict[str, list[str]] = {
    "ch3.node_kinds": [
        # only the kinds that occur: no zero entries
        "def count_node_kinds(module):\n    counts = {}\n    for n in torch.fx.symbolic_trace(module).graph.nodes:\n"
        "        counts[n.op] = counts.get(n.op, 0) + 1\n    return counts",
        # counts the module's own structure instead of the graph: children as call_module, parameters as get_attr
        "def count_node_kinds(module):\n    gm = torch.fx.symbolic_trace(module)\n"
        "    counts = {k: 0 for k in ('placeholder', 'get_attr', 'call_function', 'call_method', 'call_module',"
        " 'output')}\n    for n in gm.graph.nodes:\n        counts[n.op] += 1\n"
        "    counts['call_module'] = len(list(gm.children()))\n    return counts",
        # forgets the output node (and placeholders) - only 'real' operations
        "def count_node_kinds(module):\n    counts = {k: 0 for k in ('placeholder', 'get_attr', 'call_function',"
        " 'call_method', 'call_module', 'output')}\n    for n in torch.fx.symbolic_trace(module).graph.nodes:\n"
        "        if n.op.startswith('call') or n.op == 'get_attr':\n            counts[n.op] += 1\n    return counts",
    ],
    "ch3.swap_sigmoid": [
        # only the torch.sigmoid spelling
        "def swap_sigmoid(gm):\n    for n in list(gm.graph.nodes):\n"
        "        if n.op == 'call_function' and n.target is torch.sigmoid:\n"
        "            n.target = hard_sigmoid\n    gm.recompile()\n    return gm",
        # functions and methods, but not nn.Sigmoid submodules
        "def swap_sigmoid(gm):\n    for n in list(gm.graph.nodes):\n"
        "        if (n.op == 'call_function' and n.target is torch.sigmoid) or "
        "(n.op == 'call_method' and n.target == 'sigmoid'):\n"
        "            with gm.graph.inserting_before(n):\n"
        "                new = gm.graph.call_function(hard_sigmoid, (n.args[0],))\n"
        "            n.replace_all_uses_with(new)\n            gm.graph.erase_node(n)\n"
        "    gm.recompile()\n    return gm",
        # every spelling, but the graph is edited without recompiling: forward still runs sigmoid
        "def swap_sigmoid(gm):\n    for n in list(gm.graph.nodes):\n"
        "        sig = (n.op == 'call_function' and n.target is torch.sigmoid) or "
        "(n.op == 'call_method' and n.target == 'sigmoid') or "
        "(n.op == 'call_module' and isinstance(gm.get_submodule(n.target), nn.Sigmoid))\n"
        "        if sig:\n            with gm.graph.inserting_before(n):\n"
        "                new = gm.graph.call_function(hard_sigmoid, (n.args[0],))\n"
        "            n.replace_all_uses_with(new)\n            gm.graph.erase_node(n)\n    return gm",
    ],
    "ch3.shape_interpreter": [
        # records only plain tensors: tuple-valued nodes (split, chunk, the output) get nothing
        "class ShapeInterpreter(torch.fx.Interpreter):\n    def run_node(self, n):\n"
        "        result = super().run_node(n)\n        if isinstance(result, torch.Tensor):\n"
        "            n.meta['shape'] = tuple(result.shape)\n        return result",
        # overrides call_function only: placeholders, modules, methods and the output are missed
        "class ShapeInterpreter(torch.fx.Interpreter):\n    def call_function(self, target, args, kwargs):\n"
        "        result = super().call_function(target, args, kwargs)\n"
        "        self._shapes = getattr(self, '_shapes', [])\n        self._shapes.append(tuple(result.shape))\n"
        "        return result\n    def run_node(self, n):\n        result = super().run_node(n)\n"
        "        if n.op == 'call_function' and isinstance(result, torch.Tensor):\n"
        "            n.meta['shape'] = tuple(result.shape)\n        return result",
        # gives every node a shape, also ints and torch.Size values
        "class ShapeInterpreter(torch.fx.Interpreter):\n    def run_node(self, n):\n"
        "        result = super().run_node(n)\n        if isinstance(result, (tuple, list)):\n"
        "            n.meta['shape'] = tuple(tuple(getattr(r, 'shape', ())) for r in result)\n"
        "        else:\n            n.meta['shape'] = tuple(getattr(result, 'shape', ()))\n        return result",
        # lets ShapeProp do the work and copies its tensor_meta (the text: record the shapes yourself)
        "from torch.fx.passes.shape_prop import ShapeProp as _SP\n"
        "class ShapeInterpreter(_SP):\n    def run_node(self, n):\n        result = super().run_node(n)\n"
        "        meta = n.meta.get('tensor_meta')\n        if meta is not None:\n"
        "            n.meta['shape'] = tuple(meta.shape) if hasattr(meta, 'shape') else "
        "tuple(tuple(m.shape) for m in meta)\n        return result",
        # records the shape but forgets to return the value
        "class ShapeInterpreter(torch.fx.Interpreter):\n    def run_node(self, n):\n"
        "        result = super().run_node(n)\n        if isinstance(result, torch.Tensor):\n"
        "            n.meta['shape'] = tuple(result.shape)\n"
        "        elif isinstance(result, (tuple, list)) and not isinstance(result, torch.Size):\n"
        "            n.meta['shape'] = tuple(tuple(r.shape) for r in result)",
    ],
    "ch3.fuse_add_relu": [
        # fuses right, but hands the add's arguments over swapped (the text: "in order")
        "def fuse_add_relu(gm):\n    g = gm.graph\n    for n in list(g.nodes):\n"
        "        relu = (n.op == 'call_function' and n.target in (torch.relu, F.relu)) or "
        "(n.op == 'call_method' and n.target == 'relu') or "
        "(n.op == 'call_module' and isinstance(gm.get_submodule(n.target), nn.ReLU))\n"
        "        a = n.args[0] if n.args else None\n"
        "        if relu and isinstance(a, torch.fx.Node) and a.op == 'call_function' "
        "and a.target in (operator.add, torch.add) and len(a.users) == 1 and not a.kwargs and len(a.args) == 2:\n"
        "            with g.inserting_before(n):\n                f = g.call_function(fused_add_relu, a.args[::-1])\n"
        "            n.replace_all_uses_with(f)\n            g.erase_node(n)\n            g.erase_node(a)\n"
        "    gm.recompile()\n    return gm",
        # ignores other users of the sum: fuses relu(s) even when s is needed elsewhere
        "def fuse_add_relu(gm):\n    g = gm.graph\n    for n in list(g.nodes):\n"
        "        relu = (n.op == 'call_function' and n.target in (torch.relu, F.relu)) or "
        "(n.op == 'call_method' and n.target == 'relu') or "
        "(n.op == 'call_module' and isinstance(gm.get_submodule(n.target), nn.ReLU))\n"
        "        a = n.args[0] if n.args else None\n"
        "        if relu and isinstance(a, torch.fx.Node) and a.op == 'call_function' "
        "and a.target in (operator.add, torch.add) and not a.kwargs:\n"
        "            with g.inserting_before(n):\n                f = g.call_function(fused_add_relu, a.args)\n"
        "            n.replace_all_uses_with(f)\n            g.erase_node(n)\n"
        "            if not a.users:\n                g.erase_node(a)\n    gm.recompile()\n    return gm",
        # handles torch.relu only (not F.relu, .relu() or nn.ReLU)
        "def fuse_add_relu(gm):\n    g = gm.graph\n    for n in list(g.nodes):\n"
        "        a = n.args[0] if n.args else None\n"
        "        if n.op == 'call_function' and n.target is torch.relu and isinstance(a, torch.fx.Node) "
        "and a.target in (operator.add, torch.add) and len(a.users) == 1 and not a.kwargs:\n"
        "            with g.inserting_before(n):\n                f = g.call_function(fused_add_relu, a.args)\n"
        "            n.replace_all_uses_with(f)\n            g.erase_node(n)\n            g.erase_node(a)\n"
        "    gm.recompile()\n    return gm",
        # fuses torch.add(a, b, alpha=...) too, dropping alpha
        "def fuse_add_relu(gm):\n    g = gm.graph\n    for n in list(g.nodes):\n"
        "        relu = (n.op == 'call_function' and n.target in (torch.relu, F.relu)) or "
        "(n.op == 'call_method' and n.target == 'relu') or "
        "(n.op == 'call_module' and isinstance(gm.get_submodule(n.target), nn.ReLU))\n"
        "        a = n.args[0] if n.args else None\n"
        "        if relu and isinstance(a, torch.fx.Node) and a.op == 'call_function' "
        "and a.target in (operator.add, torch.add) and len(a.users) == 1:\n"
        "            with g.inserting_before(n):\n                f = g.call_function(fused_add_relu, a.args[:2])\n"
        "            n.replace_all_uses_with(f)\n            g.erase_node(n)\n            g.erase_node(a)\n"
        "    gm.recompile()\n    return gm",
        # rewires the graph but never recompiles: gm.forward still runs add and relu
        "def fuse_add_relu(gm):\n    g = gm.graph\n    for n in list(g.nodes):\n"
        "        relu = (n.op == 'call_function' and n.target in (torch.relu, F.relu)) or "
        "(n.op == 'call_method' and n.target == 'relu') or "
        "(n.op == 'call_module' and isinstance(gm.get_submodule(n.target), nn.ReLU))\n"
        "        a = n.args[0] if n.args else None\n"
        "        if relu and isinstance(a, torch.fx.Node) and a.op == 'call_function' "
        "and a.target in (operator.add, torch.add) and len(a.users) == 1 and not a.kwargs:\n"
        "            with g.inserting_before(n):\n                f = g.call_function(fused_add_relu, a.args)\n"
        "            n.replace_all_uses_with(f)\n            g.erase_node(n)\n            g.erase_node(a)\n"
        "    return gm",
    ],
}
