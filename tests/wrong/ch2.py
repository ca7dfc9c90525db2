"""Plausible wrong answers to the TorchScript exercises (chapter ``ch2``).

Each is run in the namespace of the executed solution notebook, which has imported ``copy``,
``Optional``, ``torch``, ``nn``, ``Backbone``, ``Screen``, ``Smoother`` and defined ``TypedSmoother`` and
``ScreenCond`` (the solutions' helper classes).
"""

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
        # one level of blocks only: a prim::If inside a prim::Loop body is never opened
        "def graph_ops(module):\n    counts = {}\n    def count(node):\n"
        "        if node.kind() != 'prim::Constant':\n"
        "            counts[node.kind()] = counts.get(node.kind(), 0) + 1\n"
        "    for node in module.inlined_graph.nodes():\n        count(node)\n"
        "        for block in node.blocks():\n            for inner in block.nodes():\n                count(inner)\n"
        "    return counts",
        # counts the kinds of the values the nodes produce: nodes without outputs are missed
        "def graph_ops(module):\n    counts = {}\n    def visit(block):\n        for node in block.nodes():\n"
        "            for out in node.outputs():\n                if node.kind() != 'prim::Constant':\n"
        "                    counts[node.kind()] = counts.get(node.kind(), 0) + 1\n"
        "                break\n"
        "            for inner in node.blocks():\n                visit(inner)\n    visit(module.inlined_graph)\n"
        "    return counts",
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
        # rewrites Backbone.forward with literal keys so that the whole model scripts: the class changed for everyone
        "def _literal_forward(self, x):\n    x = torch.tanh(self.layers['inp'](x))\n"
        "    return torch.tanh(self.layers['out'](x))\n"
        "def deploy(model, example):\n    Backbone.forward = _literal_forward\n"
        "    return torch.jit.script(copy.deepcopy(model))",
        # keeps the backbone in Python with @torch.jit.ignore: the branch is scripted, but the module needs Python
        "class Ignored(nn.Module):\n    def __init__(self, model):\n        super().__init__()\n"
        "        self.backbone, self.head, self.threshold = model.backbone, model.head, model.threshold\n"
        "    @torch.jit.ignore\n    def features(self, x: torch.Tensor) -> torch.Tensor:\n"
        "        return self.backbone(x)\n"
        "    def forward(self, x):\n        h = self.features(x)\n"
        "        if h.abs().mean() > self.threshold:\n            h = h / (h.abs().sum(dim=-1, keepdim=True) + 1)\n"
        "        else:\n            h = h * 2\n        return self.head(h)\n"
        "def deploy(model, example):\n    return torch.jit.script(Ignored(copy.deepcopy(model)))",
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
        # scripted with the model's weights, but saved from the npu: a server without the npu cannot load it
        "def save_smoother(model, path):\n    typed = TypedSmoother(model.mix.in_features // 2).to('npu')\n"
        "    typed.load_state_dict(model.state_dict())\n    torch.jit.save(torch.jit.script(typed), path)",
        # moves the caller's model to the CPU to copy its weights (model.cpu() is in place)
        "def save_smoother(model, path):\n    typed = TypedSmoother(model.mix.in_features // 2)\n"
        "    typed.load_state_dict(model.cpu().state_dict())\n    torch.jit.save(torch.jit.script(typed), path)",
        # starts the state at zeros instead of the first row: the first rows differ from the model's
        "class ZeroStart(Smoother):\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        "        state = torch.zeros_like(x[0])\n        outs: list[torch.Tensor] = []\n"
        "        for t in range(x.shape[0]):\n"
        "            gate = torch.sigmoid(self.mix(torch.cat([x[t], state])))\n"
        "            state = gate * x[t] + (1 - gate) * state\n            outs.append(state)\n"
        "        return torch.stack(outs)\n"
        "def save_smoother(model, path):\n    typed = ZeroStart(model.mix.in_features // 2)\n"
        "    typed.load_state_dict(model.state_dict())\n    torch.jit.save(torch.jit.script(typed), path)",
        # the loop starts at row 1 and forgets to emit row 0: one output row short
        "class FromOne(Smoother):\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        "        state = x[0]\n        outs: list[torch.Tensor] = []\n"
        "        for t in range(1, x.shape[0]):\n"
        "            gate = torch.sigmoid(self.mix(torch.cat([x[t], state])))\n"
        "            state = gate * x[t] + (1 - gate) * state\n            outs.append(state)\n"
        "        return torch.stack(outs) if len(outs) > 0 else x[:1]\n"
        "def save_smoother(model, path):\n    typed = FromOne(model.mix.in_features // 2)\n"
        "    typed.load_state_dict(model.state_dict())\n    torch.jit.save(torch.jit.script(typed), path)",
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
        # the threshold of the Screen in the notebook (0.3) written into the branch instead of the model's own
        "class Fixed(nn.Module):\n    def __init__(self, model):\n        super().__init__()\n"
        "        self.backbone, self.head = model.backbone, model.head\n"
        "    def forward(self, x):\n        h = self.backbone(x)\n"
        "        h = torch.cond(h.abs().mean() > 0.3, lambda h: h / (h.abs().sum(dim=-1, keepdim=True) + 1),\n"
        "                       lambda h: h * 2, (h,))\n        return self.head(h)\n"
        "def export_screen(model, example):\n    m = Fixed(copy.deepcopy(model).cpu()).eval()\n"
        "    return torch.export.export(m, (example.cpu(),), dynamic_shapes={'x': {0: torch.export.Dim('batch')}})",
    ],
}
