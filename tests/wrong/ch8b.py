"""Plausible wrong answers to chapter 8b's exercises (compilers and performance).

They run in the namespace of solutions/C8b_compilers_and_performance.ipynb (``copy``, ``Counter``, ``fx``,
``nn``, ``aten``, ``statistics``, ``side``, ``naive_compare`` are defined there).
"""

_FOLD_HEAD = (
    "import copy\n"
    "from torch import fx, nn\n"
)


def _fold(condition: str, algebra: str = "", trace: str = "fx.symbolic_trace(copy.deepcopy(model))",
          lookup: str = "mods = dict(gm.named_modules())") -> str:
    """A fold_bn whose foldability test is ``condition`` (on src, conv, bn, node), the algebra right unless given."""
    algebra = algebra or (
        "                    s = torch.rsqrt(bn.running_var + bn.eps)\n"
        "                    s = s * bn.weight if bn.weight is not None else s\n"
        "                    b = conv.bias if conv.bias is not None else torch.zeros_like(s)\n"
        "                    t = (b - bn.running_mean) * s + (bn.bias if bn.bias is not None else 0)\n"
        "                    conv.weight = nn.Parameter(conv.weight * s.reshape(-1, 1, 1, 1))\n"
        "                    conv.bias = nn.Parameter(t)\n")
    return (_FOLD_HEAD +
            "def fold_bn(model):\n"
            f"    gm = {trace}\n"
            f"    {lookup}\n"
            "    for node in list(gm.graph.nodes):\n"
            "        if node.op == 'call_module' and type(mods[node.target]) is nn.BatchNorm2d:\n"
            "            src = node.args[0]\n"
            "            if src.op == 'call_module' and type(mods[src.target]) is nn.Conv2d:\n"
            "                conv, bn = mods[src.target], mods[node.target]\n"
            f"                if not ({condition}):\n"
            "                    continue\n"
            "                with torch.no_grad():\n"
            f"{algebra}"
            "                node.replace_all_uses_with(src)\n"
            "                gm.graph.erase_node(node)\n"
            "    gm.recompile()\n"
            "    return gm")


_MERGE = (
    "def merge_projections(gm):\n"
    "    changes = []\n"
    "    while True:\n"
    "        order = {n: i for i, n in enumerate(gm.graph.nodes)}\n"
    "        group = None\n"
    "        for x in gm.graph.nodes:\n"
    "            products = sorted((u for u in x.users if u.op == 'call_function' and u.target == aten.mm.default\n"
    "                               and {SHARED}), key=order.get)\n"
    "            ready = {READY}\n"
    "            if len(ready) >= 2:\n"
    "                group = (x, ready)\n"
    "                break\n"
    "        if group is None:\n"
    "            return changes\n"
    "        x, products = group\n"
    "        widths = [p.args[1].meta['val'].shape[1] for p in products]\n"
    "        with gm.graph.inserting_before({WHERE}):\n"
    "            weights = gm.graph.call_function(aten.cat.default, ([p.args[1] for p in products], 1))\n"
    "            merged = gm.graph.call_function(aten.mm.default, (x, weights))\n"
    "            start = 0\n"
    "            for p, width in zip(products, widths):\n"
    "                p.replace_all_uses_with(gm.graph.call_function(aten.slice.Tensor, (merged, 1, {START}, "
    "start + width)))\n"
    "                start += width\n"
    "        for p in products:\n"
    "            gm.graph.erase_node(p)\n"
    "        changes.append('merged')\n"
)


def _merge(shared: str = "u.args[0] is x",
           ready: str = "[p for p in products if order[p.args[1]] < order[products[0]]] if products else []",
           where: str = "products[0]", start: str = "start") -> str:
    return (_MERGE.replace("{SHARED}", shared).replace("{READY}", ready).replace("{WHERE}", where)
            .replace("{START}", start))


_COMPARE = (
    "def compare(fn_a, fn_b, *args, repeats=5):\n"
    "    device = next(a.device for a in args if isinstance(a, torch.Tensor))\n"
    "    with torch.npu.device(device):\n"
    "        {WARM}\n"
    "        times, launches = {'a': [], 'b': []}, {'a': [], 'b': []}\n"
    "        {LOOP}\n"
    "                torch.npu.synchronize()\n"
    "                with npu_lab.profile() as prof:\n"
    "                    fn(*args)\n"
    "                    torch.npu.synchronize()\n"
    "                times[key].append(prof.sim_time_us / 1000)\n"
    "                launches[key].append(prof.launches)\n"
    "    return {'a_ms': {MID}(times['a']), 'b_ms': {MID}(times['b']),\n"
    "            'a_launches': int({MID}(launches['a'])), 'b_launches': int({MID}(launches['b']))}\n"
)
_CHECKED_WARM = ("out_a, out_b = fn_a(*args), fn_b(*args)\n"
                 "        torch.npu.synchronize()\n"
                 "        pairs = zip(out_a, out_b) if isinstance(out_a, (tuple, list)) else [(out_a, out_b)]\n"
                 "        if not all(torch.allclose(p, q, rtol=1e-4, atol=1e-5) for p, q in pairs):\n"
                 "            raise ValueError('different results')")
_TURNS = ("for _ in range(repeats):\n"
          "            for key, fn in (('a', fn_a), ('b', fn_b)):")
_BLOCKS = ("for key, fn in (('a', fn_a), ('b', fn_b)):\n"
           "            for _ in range(repeats):")


def _compare(warm: str = _CHECKED_WARM, loop: str = _TURNS, mid: str = "statistics.median") -> str:
    return _COMPARE.replace("{WARM}", warm).replace("{LOOP}", loop).replace("{MID}", mid)


WRONG: dict[str, list[str]] = {
    "ch8b.fold_bn": [
        # folds in place: the caller's model loses its BatchNorms and its weights change
        _fold("len(src.users) == 1", trace="fx.symbolic_trace(model)"),
        # forgets the running mean: only scales
        _fold("len(src.users) == 1",
              algebra="                    s = torch.rsqrt(bn.running_var + bn.eps)\n"
                      "                    s = s * bn.weight if bn.weight is not None else s\n"
                      "                    conv.weight = nn.Parameter(conv.weight * s.reshape(-1, 1, 1, 1))\n"),
        # folds whenever a BN follows a conv, even when the conv's output has another user
        _fold("True"),
        # hard-codes eps = 1e-5 and assumes every BN has affine parameters
        _fold("len(src.users) == 1",
              algebra="                    s = bn.weight * torch.rsqrt(bn.running_var + 1e-5)\n"
                      "                    b = conv.bias if conv.bias is not None else torch.zeros_like(s)\n"
                      "                    conv.weight = nn.Parameter(conv.weight * s.reshape(-1, 1, 1, 1))\n"
                      "                    conv.bias = nn.Parameter((b - bn.running_mean) * s + bn.bias)\n"),
        # computes the folded parameters on the CPU and leaves them there
        _fold("len(src.users) == 1", trace="fx.symbolic_trace(copy.deepcopy(model).cpu())"),
        # returns a copy that still runs the BatchNorms (values right, nothing folded)
        "import copy\n"
        "def fold_bn(model):\n"
        "    return copy.deepcopy(model)",
        # a convolution module called at two places is folded anyway (its other call changes too)
        _fold("len(src.users) == 1 and bn.running_mean is not None"),
        # a BatchNorm without running statistics is folded as if its mean were 0 and its variance 1
        _fold("len(src.users) == 1 and sum(n.target == src.target for n in gm.graph.nodes) == 1",
              algebra="                    mean = bn.running_mean if bn.running_mean is not None else "
                      "torch.zeros(bn.num_features, device=conv.weight.device)\n"
                      "                    var = bn.running_var if bn.running_var is not None else "
                      "torch.ones(bn.num_features, device=conv.weight.device)\n"
                      "                    s = torch.rsqrt(var + bn.eps)\n"
                      "                    s = s * bn.weight if bn.weight is not None else s\n"
                      "                    b = conv.bias if conv.bias is not None else torch.zeros_like(s)\n"
                      "                    t = (b - mean) * s + (bn.bias if bn.bias is not None else 0)\n"
                      "                    conv.weight = nn.Parameter(conv.weight * s.reshape(-1, 1, 1, 1))\n"
                      "                    conv.bias = nn.Parameter(t)\n"),
        # finds modules with getattr(gm, target): a nested path such as 'features.block1.0' is not an attribute
        _fold("len(src.users) == 1 and bn.running_mean is not None and sum(n.target == src.target for n in "
              "gm.graph.nodes) == 1",
              lookup="mods = {n.target: getattr(gm, n.target) for n in gm.graph.nodes if n.op == 'call_module'}"),
        # PyTorch's ready-made pass instead of one's own
        "import copy\n"
        "from torch.fx.experimental import optimization\n"
        "def fold_bn(model):\n"
        "    return optimization.fuse(copy.deepcopy(model))",
    ],
    "ch8b.merge_projections": [
        # finds the groups and changes nothing
        "def merge_projections(gm):\n    return []",
        # x anywhere in the product, first or second operand
        _merge(shared="x in u.args"),
        # every product of x, wherever its weight is computed, merged where the first one was
        _merge(ready="products"),
        # one pass over a snapshot of the nodes: the slices a merge makes are never looked at
        "def merge_projections(gm):\n"
        "    changes = []\n"
        "    order = {n: i for i, n in enumerate(gm.graph.nodes)}\n"
        "    for x in list(gm.graph.nodes):\n"
        "        products = sorted((u for u in x.users if u.op == 'call_function' and u.target == aten.mm.default\n"
        "                           and u.args[0] is x), key=order.get)\n"
        "        products = [p for p in products if order[p.args[1]] < order[products[0]]] if products else []\n"
        "        if len(products) < 2:\n"
        "            continue\n"
        "        widths = [p.args[1].meta['val'].shape[1] for p in products]\n"
        "        with gm.graph.inserting_before(products[0]):\n"
        "            weights = gm.graph.call_function(aten.cat.default, ([p.args[1] for p in products], 1))\n"
        "            merged = gm.graph.call_function(aten.mm.default, (x, weights))\n"
        "            start = 0\n"
        "            for p, width in zip(products, widths):\n"
        "                p.replace_all_uses_with(gm.graph.call_function(aten.slice.Tensor, (merged, 1, start, "
        "start + width)))\n"
        "                start += width\n"
        "        for p in products:\n"
        "            gm.graph.erase_node(p)\n"
        "        changes.append('merged')\n"
        "    return changes",
        # every slice starts at column 0
        _merge(start="0"),
        # the merged product goes where the last product was
        _merge(ready="products", where="products[-1]"),
        # one string for the whole pass, however many merges
        _merge() + "\n_first = merge_projections\n"
        "def merge_projections(gm):\n"
        "    return ['merged'] if _first(gm) else []",
    ],
    "ch8b.compare": [
        # the notebook's naive comparison
        "def compare(fn_a, fn_b, *args, repeats=5):\n    return naive_compare(fn_a, fn_b, *args, repeats=repeats)",
        # no warm-up: the first call's one-time work is timed
        _compare(warm="pass"),
        # each function in a block of its own: state that drifts lands on the second only
        _compare(loop=_BLOCKS),
        # the mean, not the median
        _compare(mid="statistics.mean"),
        # events on the current stream, no synchronize before the end event: side streams go unseen
        "def compare(fn_a, fn_b, *args, repeats=5):\n"
        "    out_a, out_b = fn_a(*args), fn_b(*args)\n"
        "    torch.npu.synchronize()\n"
        "    pairs = zip(out_a, out_b) if isinstance(out_a, (tuple, list)) else [(out_a, out_b)]\n"
        "    if not all(torch.allclose(p, q, rtol=1e-4, atol=1e-5) for p, q in pairs):\n"
        "        raise ValueError('different results')\n"
        "    times, launches = {'a': [], 'b': []}, {'a': [], 'b': []}\n"
        "    for _ in range(repeats):\n"
        "        for key, fn in (('a', fn_a), ('b', fn_b)):\n"
        "            torch.npu.synchronize()\n"
        "            start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)\n"
        "            with npu_lab.profile() as prof:\n"
        "                start.record()\n"
        "                fn(*args)\n"
        "                end.record()\n"
        "            end.synchronize()\n"
        "            times[key].append(start.elapsed_time(end))\n"
        "            launches[key].append(prof.launches)\n"
        "    return {'a_ms': statistics.median(times['a']), 'b_ms': statistics.median(times['b']),\n"
        "            'a_launches': int(statistics.median(launches['a'])),\n"
        "            'b_launches': int(statistics.median(launches['b']))}",
        # events and synchronize on the current device, whatever device the arguments are on
        "def compare(fn_a, fn_b, *args, repeats=5):\n"
        "    out_a, out_b = fn_a(*args), fn_b(*args)\n"
        "    torch.npu.synchronize()\n"
        "    pairs = zip(out_a, out_b) if isinstance(out_a, (tuple, list)) else [(out_a, out_b)]\n"
        "    if not all(torch.allclose(p, q, rtol=1e-4, atol=1e-5) for p, q in pairs):\n"
        "        raise ValueError('different results')\n"
        "    times, launches = {'a': [], 'b': []}, {'a': [], 'b': []}\n"
        "    for _ in range(repeats):\n"
        "        for key, fn in (('a', fn_a), ('b', fn_b)):\n"
        "            torch.npu.synchronize()\n"
        "            start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)\n"
        "            with npu_lab.profile() as prof:\n"
        "                start.record()\n"
        "                fn(*args)\n"
        "                torch.npu.synchronize()\n"
        "                end.record()\n"
        "            end.synchronize()\n"
        "            times[key].append(start.elapsed_time(end))\n"
        "            launches[key].append(prof.launches)\n"
        "    return {'a_ms': statistics.median(times['a']), 'b_ms': statistics.median(times['b']),\n"
        "            'a_launches': int(statistics.median(launches['a'])),\n"
        "            'b_launches': int(statistics.median(launches['b']))}",
        # no correctness check: times two different computations
        _compare(warm="fn_a(*args), fn_b(*args)"),
        # switches the current device for the arguments' and leaves it switched
        _compare().replace("    with torch.npu.device(device):\n",
                           "    torch.npu.set_device(device)\n    if True:\n"),
    ],
}
