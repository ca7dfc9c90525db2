"""Plausible wrong answers to chapter 8's exercises."""

_FOLD_HEAD = (
    "import copy\n"
    "from torch import fx, nn\n"
)

WRONG: dict[str, list[str]] = {
    "ch8.fold_bn": [
        # folds in place: the caller's model loses its BatchNorms and its weights change
        _FOLD_HEAD +
        "def fold_bn(model):\n"
        "    gm = fx.symbolic_trace(model)\n"
        "    mods = dict(gm.named_modules())\n"
        "    for node in list(gm.graph.nodes):\n"
        "        if node.op == 'call_module' and type(mods[node.target]) is nn.BatchNorm2d:\n"
        "            src = node.args[0]\n"
        "            if src.op == 'call_module' and type(mods[src.target]) is nn.Conv2d and len(src.users) == 1:\n"
        "                conv, bn = mods[src.target], mods[node.target]\n"
        "                with torch.no_grad():\n"
        "                    s = bn.weight / torch.sqrt(bn.running_var + bn.eps)\n"
        "                    b = conv.bias if conv.bias is not None else torch.zeros_like(s)\n"
        "                    conv.weight.mul_(s.reshape(-1, 1, 1, 1))\n"
        "                    conv.bias = nn.Parameter((b - bn.running_mean) * s + bn.bias)\n"
        "                node.replace_all_uses_with(src)\n"
        "                gm.graph.erase_node(node)\n"
        "    gm.recompile()\n"
        "    return gm",
        # forgets the running mean: only scales
        _FOLD_HEAD +
        "def fold_bn(model):\n"
        "    gm = fx.symbolic_trace(copy.deepcopy(model))\n"
        "    mods = dict(gm.named_modules())\n"
        "    for node in list(gm.graph.nodes):\n"
        "        if node.op == 'call_module' and type(mods[node.target]) is nn.BatchNorm2d:\n"
        "            src = node.args[0]\n"
        "            if src.op == 'call_module' and type(mods[src.target]) is nn.Conv2d:\n"
        "                conv, bn = mods[src.target], mods[node.target]\n"
        "                with torch.no_grad():\n"
        "                    s = torch.rsqrt(bn.running_var + bn.eps)\n"
        "                    s = s * bn.weight if bn.weight is not None else s\n"
        "                    conv.weight = nn.Parameter(conv.weight * s.reshape(-1, 1, 1, 1))\n"
        "                node.replace_all_uses_with(src)\n"
        "                gm.graph.erase_node(node)\n"
        "    gm.recompile()\n"
        "    return gm",
        # folds whenever a BN follows a conv, even when the conv's output has another user
        _FOLD_HEAD +
        "def fold_bn(model):\n"
        "    gm = fx.symbolic_trace(copy.deepcopy(model))\n"
        "    mods = dict(gm.named_modules())\n"
        "    for node in list(gm.graph.nodes):\n"
        "        if node.op == 'call_module' and type(mods[node.target]) is nn.BatchNorm2d:\n"
        "            src = node.args[0]\n"
        "            if src.op == 'call_module' and type(mods[src.target]) is nn.Conv2d:\n"
        "                conv, bn = mods[src.target], mods[node.target]\n"
        "                with torch.no_grad():\n"
        "                    s = torch.rsqrt(bn.running_var + bn.eps)\n"
        "                    s = s * bn.weight if bn.weight is not None else s\n"
        "                    b = conv.bias if conv.bias is not None else torch.zeros_like(s)\n"
        "                    t = (b - bn.running_mean) * s + (bn.bias if bn.bias is not None else 0)\n"
        "                    conv.weight = nn.Parameter(conv.weight * s.reshape(-1, 1, 1, 1))\n"
        "                    conv.bias = nn.Parameter(t)\n"
        "                node.replace_all_uses_with(src)\n"
        "                gm.graph.erase_node(node)\n"
        "    gm.recompile()\n"
        "    return gm",
        # hard-codes eps = 1e-5 and assumes every BN has affine parameters
        _FOLD_HEAD +
        "def fold_bn(model):\n"
        "    gm = fx.symbolic_trace(copy.deepcopy(model))\n"
        "    mods = dict(gm.named_modules())\n"
        "    for node in list(gm.graph.nodes):\n"
        "        if node.op == 'call_module' and type(mods[node.target]) is nn.BatchNorm2d:\n"
        "            src = node.args[0]\n"
        "            if src.op == 'call_module' and type(mods[src.target]) is nn.Conv2d and len(src.users) == 1:\n"
        "                conv, bn = mods[src.target], mods[node.target]\n"
        "                with torch.no_grad():\n"
        "                    s = bn.weight * torch.rsqrt(bn.running_var + 1e-5)\n"
        "                    b = conv.bias if conv.bias is not None else torch.zeros_like(s)\n"
        "                    conv.weight = nn.Parameter(conv.weight * s.reshape(-1, 1, 1, 1))\n"
        "                    conv.bias = nn.Parameter((b - bn.running_mean) * s + bn.bias)\n"
        "                node.replace_all_uses_with(src)\n"
        "                gm.graph.erase_node(node)\n"
        "    gm.recompile()\n"
        "    return gm",
        # computes the folded parameters in NumPy and leaves them on the CPU
        _FOLD_HEAD +
        "def fold_bn(model):\n"
        "    gm = fx.symbolic_trace(copy.deepcopy(model).cpu())\n"
        "    mods = dict(gm.named_modules())\n"
        "    for node in list(gm.graph.nodes):\n"
        "        if node.op == 'call_module' and type(mods[node.target]) is nn.BatchNorm2d:\n"
        "            src = node.args[0]\n"
        "            if src.op == 'call_module' and type(mods[src.target]) is nn.Conv2d and len(src.users) == 1:\n"
        "                conv, bn = mods[src.target], mods[node.target]\n"
        "                with torch.no_grad():\n"
        "                    s = torch.rsqrt(bn.running_var + bn.eps)\n"
        "                    s = s * bn.weight if bn.weight is not None else s\n"
        "                    b = conv.bias if conv.bias is not None else torch.zeros_like(s)\n"
        "                    t = (b - bn.running_mean) * s + (bn.bias if bn.bias is not None else 0)\n"
        "                    conv.weight = nn.Parameter(conv.weight * s.reshape(-1, 1, 1, 1))\n"
        "                    conv.bias = nn.Parameter(t)\n"
        "                node.replace_all_uses_with(src)\n"
        "                gm.graph.erase_node(node)\n"
        "    gm.recompile()\n"
        "    return gm",
        # returns a copy that still runs the BatchNorms (values right, nothing folded)
        "import copy\n"
        "def fold_bn(model):\n"
        "    return copy.deepcopy(model)",
    ],
    "ch8.silu_pass": [
        # rewrites every mul with a sigmoid operand, even x * sigmoid(y)
        "def fuse_silu(gm):\n"
        "    ch = []\n"
        "    for n in list(gm.graph.nodes):\n"
        "        if n.op == 'call_function' and n.target == aten.mul.Tensor:\n"
        "            s = n.args[1]\n"
        "            if isinstance(s, torch.fx.Node) and s.target == aten.sigmoid.default:\n"
        "                with gm.graph.inserting_before(n):\n"
        "                    new = gm.graph.call_function(aten.silu.default, (n.args[0],))\n"
        "                n.replace_all_uses_with(new)\n"
        "                gm.graph.erase_node(n)\n"
        "                ch.append('silu')\n"
        "    gm.recompile()\n"
        "    return ch",
        # finds the pattern but changes nothing and says nothing
        "def fuse_silu(gm):\n    return []",
        # one operand order only: mul(x, sigmoid(x))
        "def fuse_silu(gm):\n"
        "    ch = []\n"
        "    for n in list(gm.graph.nodes):\n"
        "        if n.op == 'call_function' and n.target == aten.mul.Tensor:\n"
        "            a, s = n.args\n"
        "            if isinstance(s, torch.fx.Node) and s.target == aten.sigmoid.default and s.args[0] is a:\n"
        "                with gm.graph.inserting_before(n):\n"
        "                    new = gm.graph.call_function(aten.silu.default, (a,))\n"
        "                n.replace_all_uses_with(new)\n"
        "                gm.graph.erase_node(n)\n"
        "                if not s.users:\n"
        "                    gm.graph.erase_node(s)\n"
        "                ch.append('silu')\n"
        "    gm.recompile()\n"
        "    return ch",
        # rewrites the mul but leaves the unused sigmoid in the graph
        "def fuse_silu(gm):\n"
        "    ch = []\n"
        "    for n in list(gm.graph.nodes):\n"
        "        if n.op == 'call_function' and n.target == aten.mul.Tensor:\n"
        "            for a, s in (n.args, n.args[::-1]):\n"
        "                if isinstance(s, torch.fx.Node) and s.target == aten.sigmoid.default and s.args[0] is a:\n"
        "                    with gm.graph.inserting_before(n):\n"
        "                        new = gm.graph.call_function(aten.silu.default, (a,))\n"
        "                    n.replace_all_uses_with(new)\n"
        "                    gm.graph.erase_node(n)\n"
        "                    ch.append('silu')\n"
        "                    break\n"
        "    gm.recompile()\n"
        "    return ch",
        # stops after the first rewrite, and reports a single summary string
        "def fuse_silu(gm):\n"
        "    for n in list(gm.graph.nodes):\n"
        "        if n.op == 'call_function' and n.target == aten.mul.Tensor:\n"
        "            for a, s in (n.args, n.args[::-1]):\n"
        "                if isinstance(s, torch.fx.Node) and s.target == aten.sigmoid.default and s.args[0] is a:\n"
        "                    with gm.graph.inserting_before(n):\n"
        "                        new = gm.graph.call_function(aten.silu.default, (a,))\n"
        "                    n.replace_all_uses_with(new)\n"
        "                    gm.graph.erase_node(n)\n"
        "                    if not s.users:\n"
        "                        gm.graph.erase_node(s)\n"
        "                    gm.recompile()\n"
        "                    return ['fused silu']\n"
        "    return []",
    ],
    "ch8.tiles": [
        "def choose_tiles(m, n, k):\n    return (4, 4)",  # the default everywhere
        "def choose_tiles(m, n, k):\n    return (4, 1) if m < 4 else (4, 4)",  # narrower, still 4 rows
        "def choose_tiles(m, n, k):\n    return (2, 4) if m < 4 else (4, 4)",  # right for 2 rows only
        # divides the rows, forgets the columns
        "def choose_tiles(m, n, k):\n    return (max(t for t in (1, 2, 4) if m % t == 0), 4)",
        # right tiles, returned as a list of NumPy ints
        "def choose_tiles(m, n, k):\n"
        "    return [np.int64(max(t for t in (1, 2, 4) if m % t == 0)), np.int64(max(t for t in (1, 2, 4) if n % t "
        "== 0))]",
    ],
    "ch8.fix_benchmark": [
        "def measure_fixed(fn, *args):\n    return measure(fn, *args)",  # the original bug
        # synchronizes but measures on the default stream while the work runs on the side stream
        "def measure_fixed(fn, *args):\n"
        "    torch.npu.synchronize()\n"
        "    s, e = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)\n"
        "    s.record()\n"
        "    with torch.npu.stream(side):\n"
        "        fn(*args)\n"
        "    e.record()\n"
        "    return s.elapsed_time(e)",
        # waits for the one side stream it knows of (the chapter's fix), not for fn's own streams
        "def measure_fixed(fn, *args):\n"
        "    fn(*args)\n"
        "    torch.npu.synchronize()\n"
        "    s, e = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)\n"
        "    s.record()\n"
        "    fn(*args)\n"
        "    torch.npu.current_stream().wait_stream(side)\n"
        "    e.record()\n"
        "    e.synchronize()\n"
        "    return s.elapsed_time(e)",
        # synchronizes the whole device, but times the first (cold) call
        "def measure_fixed(fn, *args):\n"
        "    torch.npu.synchronize()\n"
        "    s, e = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)\n"
        "    s.record()\n"
        "    fn(*args)\n"
        "    torch.npu.synchronize()\n"
        "    e.record()\n"
        "    e.synchronize()\n"
        "    return s.elapsed_time(e)",
        # host wall-clock time instead of the device's
        "import time\n"
        "def measure_fixed(fn, *args):\n"
        "    fn(*args)\n"
        "    torch.npu.synchronize()\n"
        "    t0 = time.perf_counter()\n"
        "    fn(*args)\n"
        "    torch.npu.synchronize()\n"
        "    return (time.perf_counter() - t0) * 1000",
    ],
}

# tiles of 1 never leave anything to the edge code, and reuse nothing: slow wherever the default fits
WRONG["ch8.tiles"].append("def choose_tiles(m, n, k):\n    return (1, 1)")
