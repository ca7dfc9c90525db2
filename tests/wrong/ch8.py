"""Plausible wrong answers to chapter 8's exercises."""

WRONG: dict[str, list[str]] = {
    "ch8.elu_kernel": [
        # computes on the CPU and copies back: right values, but falls back to CPU kernels... and forgets alpha
        "def elu_npu(self, alpha=1.0, scale=1.0, input_scale=1.0):\n"
        "    return torch.where(self > 0, self, torch.exp(self) - 1)",
        # ReLU instead of ELU
        "def elu_npu(self, alpha=1.0, scale=1.0, input_scale=1.0):\n"
        "    out = torch.empty_like(self)\n"
        "    npu_lab.device_array(out)[...] = np.maximum(npu_lab.device_array(self), 0)\n"
        "    return out",
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
    ],
    "ch8.tiles": [
        "def choose_tiles(m, n, k):\n    return (4, 4)",  # the default everywhere
        "def choose_tiles(m, n, k):\n    return (4, 1) if m < 4 else (4, 4)",  # narrower, still 4 rows
        "def choose_tiles(m, n, k):\n    return (2, 4) if m < 4 else (4, 4)",  # right for 2 rows only
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
    ],
}
