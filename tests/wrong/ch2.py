"""Plausible wrong answers to the TorchScript exercises (chapter ``ch2``).

Each is run in the namespace of the executed solution notebook, which has imported ``copy``,
``Optional``, ``torch``, ``nn``, ``Screen``, ``Smoother`` and defined ``TypedSmoother`` and
``ScreenCond`` (the solutions' helper classes).
"""

#: A fuse_linear pass around its match conditions (the wrong answers differ there).
_FUSE = ("def fuse_linear(module):\n    def fuse(graph):\n"
         "        for mm in graph.findAllNodes('aten::matmul'):\n"
         "            x, wt = mm.inputsAt(0), mm.inputsAt(1)\n"
         "%(t_check)s"
         "            for use in mm.output().uses():\n                add = use.user\n"
         "                if add.kind() != 'aten::add'%(order)s:\n                    continue\n"
         "%(alpha)s"
         "                other = add.inputsAt(1) if use.offset == 0 else add.inputsAt(0)\n"
         "                w = wt.node().inputsAt(0) if wt.node().kind() == 'aten::t' else wt\n"
         "                lin = graph.create('aten::linear', [x, w, other])\n"
         "                lin.insertBefore(add)\n                lin.output().setType(add.output().type())\n"
         "                add.output().replaceAllUsesWith(lin.output())\n"
         "%(dce)s"
         "    for sub in %(subs)s:\n        if hasattr(sub, 'graph'):\n            fuse(sub.graph)\n"
         "    return module")
_FUSE_OK = {"t_check": "            if wt.node().kind() != 'aten::t':\n                continue\n", "order": "",
            "alpha": "                a = add.inputsAt(2).node()\n"
                     "                if a.kind() != 'prim::Constant' or a.output().toIValue() != 1:\n"
                     "                    continue\n",
            "dce": "        torch._C._jit_pass_dce(graph)\n", "subs": "module.modules()"}

WRONG: dict[str, list[str]] = {
    "ch2.graph_ops": [
        # only the top level: the nodes inside prim::If / prim::Loop blocks are missed
        "def graph_ops(module):\n    counts = {}\n    for node in module.inlined_graph.nodes():\n"
        "        if node.kind() != 'prim::Constant':\n"
        "            counts[node.kind()] = counts.get(node.kind(), 0) + 1\n    return counts",
        # recursive, but on .graph: submodule calls stay prim::CallMethod instead of aten::linear...
        "def graph_ops(module):\n    counts = {}\n    def visit(block):\n        for node in block.nodes():\n"
        "            if node.kind() != 'prim::Constant':\n"
        "                counts[node.kind()] = counts.get(node.kind(), 0) + 1\n"
        "            for inner in node.blocks():\n                visit(inner)\n    visit(module.graph)\n"
        "    return counts",
        # recursive and inlined, but the constants are counted too
        "def graph_ops(module):\n    counts = {}\n    def visit(block):\n        for node in block.nodes():\n"
        "            counts[node.kind()] = counts.get(node.kind(), 0) + 1\n"
        "            for inner in node.blocks():\n                visit(inner)\n    visit(module.inlined_graph)\n"
        "    return counts",
        # reads the printed IR: only the aten:: operators, no prim:: nodes
        "import re\nfrom collections import Counter\n"
        "def graph_ops(module):\n    return dict(Counter(re.findall(r'= (aten::\\w+)', str(module.inlined_graph))))",
    ],
    "ch2.fix_trace": [
        # works, but replaces the backbone of the caller's model ("deploy the model you are given")
        "def deploy(model, example):\n    model.backbone = torch.jit.trace(model.backbone, (example,))\n"
        "    return torch.jit.script(model)",
        # the bug itself: trace the whole model (one branch frozen, TracerWarning)
        "def deploy(model, example):\n    return torch.jit.trace(model, (example,))",
        # script the whole model: the backbone's ModuleDict indexing does not compile
        "def deploy(model, example):\n    return torch.jit.script(model)",
        # half the fix: the backbone traced, but then the whole model traced too
        "def deploy(model, example):\n    model = copy.deepcopy(model)\n"
        "    model.backbone = torch.jit.trace(model.backbone, (example,))\n"
        "    return torch.jit.trace(model, (example,))",
        # both sides computed and selected with torch.where: right values, but no branch left in the graph
        "class Selected(nn.Module):\n    def __init__(self, model):\n        super().__init__()\n"
        "        self.backbone, self.head, self.threshold = model.backbone, model.head, model.threshold\n"
        "    def forward(self, x):\n        h = self.backbone(x)\n"
        "        damped = h / (h.abs().sum(dim=-1, keepdim=True) + 1)\n"
        "        h = torch.where(h.abs().mean() > self.threshold, damped, h * 2)\n        return self.head(h)\n"
        "def deploy(model, example):\n    return torch.jit.trace(Selected(copy.deepcopy(model)), (example,))",
        # traced with the example of the other branch as well: still one branch only
        "def deploy(model, example):\n"
        "    return torch.jit.trace(model, (example * 30,), check_trace=False)",
    ],
    "ch2.script_loop": [
        # scripted with the weights loaded into a model of the wrong width: load_state_dict refuses
        "def save_smoother(model, path):\n    typed = TypedSmoother(model.mix.in_features).to('npu')\n"
        "    typed.load_state_dict(model.state_dict())\n    torch.jit.save(torch.jit.script(typed), path)",
        # traced on a CPU copy: the loop is unrolled for the example's length
        "def save_smoother(model, path):\n    cpu = copy.deepcopy(model).cpu()\n"
        "    example = torch.randn(3, model.mix.in_features // 2)\n"
        "    torch.jit.save(torch.jit.trace(cpu, (example,), check_trace=False), path)",
        # scripted on CPU, but with fresh weights (no load_state_dict)
        "def save_smoother(model, path):\n"
        "    torch.jit.save(torch.jit.script(TypedSmoother(model.mix.in_features // 2)), path)",
    ],
    "ch2.export_cond": [
        # works, but moves the caller's model to the CPU (model.cpu() is in place)
        "def export_screen(model, example):\n    batch = torch.export.Dim('batch')\n"
        "    return torch.export.export(ScreenCond(model.cpu()).eval(), (example.cpu(),),\n"
        "                               dynamic_shapes={'x': {0: batch}})",
        # export the model as it is: the Python `if` on a tensor is refused
        "def export_screen(model, example):\n    cpu = copy.deepcopy(model).cpu()\n"
        "    return torch.export.export(cpu, (example.cpu(),), dynamic_shapes={'x': {0: torch.export.Dim('batch')}})",
        # torch.cond, but the batch size is specialised to the example's
        "def export_screen(model, example):\n    cpu = ScreenCond(copy.deepcopy(model).cpu()).eval()\n"
        "    return torch.export.export(cpu, (example.cpu(),))",
        # torch.cond and a dynamic batch, but the damping branch lost its +1 (wrong on that branch)
        "class Wrong(nn.Module):\n    def __init__(self, model):\n        super().__init__()\n"
        "        self.backbone, self.head, self.threshold = model.backbone, model.head, model.threshold\n"
        "    def forward(self, x):\n        h = self.backbone(x)\n"
        "        h = torch.cond(h.abs().mean() > self.threshold, lambda h: h / h.abs().sum(dim=-1, keepdim=True),\n"
        "                       lambda h: h * 2, (h,))\n        return self.head(h)\n"
        "def export_screen(model, example):\n    m = Wrong(copy.deepcopy(model)).eval()\n"
        "    return torch.export.export(m, (example,), dynamic_shapes={'x': {0: torch.export.Dim('batch')}})",
        # torch.where: right values, but both sides are computed and there is no cond in the graph
        "class Where(nn.Module):\n    def __init__(self, model):\n        super().__init__()\n"
        "        self.backbone, self.head, self.threshold = model.backbone, model.head, model.threshold\n"
        "    def forward(self, x):\n        h = self.backbone(x)\n"
        "        damped = h / (h.abs().sum(dim=-1, keepdim=True) + 1)\n"
        "        return self.head(torch.where(h.abs().mean() > self.threshold, damped, h * 2))\n"
        "def export_screen(model, example):\n    cpu = Where(copy.deepcopy(model).cpu()).eval()\n"
        "    return torch.export.export(cpu, (example.cpu(),), dynamic_shapes={'x': {0: torch.export.Dim('batch')}})",
    ],
    "ch2.fuse_linear": [
        # ignores alpha: torch.add(y, b, alpha=2) becomes linear (the bias counted once)
        _FUSE % {**_FUSE_OK, "alpha": ""},
        # fuses any matmul + add, transpose or not
        _FUSE % {**_FUSE_OK, "t_check": ""},
        # only the matmul on the left of the add
        _FUSE % {**_FUSE_OK, "order": " or use.offset != 0"},
        # only the module's own forward: the submodules' graphs keep their matmuls
        _FUSE % {**_FUSE_OK, "subs": "[module]"},
        # leaves the replaced nodes in the graph (no dead code elimination)
        _FUSE % {**_FUSE_OK, "dce": ""},
        # rewrites a copy (torch.jit.script of a fresh module is not possible): returns the original untouched
        "def fuse_linear(module):\n    import copy\n    fused = copy.deepcopy(module)\n    return module",
    ],
}
