"""Plausible wrong answers to chapter 6's exercises (AOTAutograd)."""

_COUNT_HEAD = (
    "def count_saved(model, x):\n"
    "    found = {}\n"
    "    def bw(gm, inputs):\n"
    "        ph = [n for n in gm.graph.nodes if n.op == 'placeholder' and not n.name.startswith('tangents')]\n"
    "        found['n'] = len(ph)\n"
)
_COUNT_TAIL = (
    "        return make_boxed_func(gm.forward)\n"
    "    fw = lambda gm, i: make_boxed_func(gm.forward)\n"
    "    aot_module(model, fw_compiler=fw, bw_compiler=bw)(x).sum().backward()\n"
    "    return found['n'], found['b']"
)

#: The solution's partitioner, with one piece replaced in each wrong answer below.
_PARTITION = (
    "def cheap(node):\n"
    "    t = node.target\n"
    "    if node.op != 'call_function' or not isinstance(t, torch._ops.OpOverload):\n"
    "        return False\n"
    "    if torch.Tag.nondeterministic_seeded in t.tags:\n"
    "        return False\n"
    "    return torch.Tag.pointwise in t.tags or t.is_view\n"
    "def recompute_partition(joint, joint_inputs, *, num_fwd_outputs, **kwargs):\n"
    "    graph = joint.graph\n"
    "    primals = [n for n in graph.nodes if n.op == 'placeholder' and not n.name.startswith('tangents')]\n"
    "    tangents = [n for n in graph.nodes if n.op == 'placeholder' and n.name.startswith('tangents')]\n"
    "    outputs = list(next(n for n in graph.nodes if n.op == 'output').args[0])\n"
    "    fwd_outs, grads = outputs[:num_fwd_outputs], outputs[num_fwd_outputs:]\n"
    "    backward = set(tangents)\n"
    "    for n in graph.nodes:\n"
    "        if any(a in backward for a in n.all_input_nodes):\n"
    "            backward.add(n)\n"
    "    forward = [n for n in graph.nodes if n.op == 'call_function' and n not in backward]\n"
    "    saved, needed = [], set()\n"
    "    todo = [g for g in grads if isinstance(g, torch.fx.Node)]\n"
    "    while todo:\n"
    "        n = todo.pop()\n"
    "        if n in needed or n in tangents:\n"
    "            continue\n"
    "        needed.add(n)\n"
    "        if n in primals or (n in forward and not cheap(n)):\n"
    "            saved.append(n)\n"
    "        else:\n"
    "            todo.extend(n.all_input_nodes)\n"
    "    saved = [n for n in graph.nodes if n in saved]\n"
    "    fw, env = torch.fx.Graph(), {}\n"
    "    for p in primals:\n"
    "        env[p] = fw.placeholder(p.name)\n"
    "        env[p].meta = p.meta\n"
    "    for n in forward:\n"
    "        env[n] = fw.node_copy(n, lambda a: env[a])\n"
    "    fw.output(tuple(env[o] if isinstance(o, torch.fx.Node) else o for o in fwd_outs)\n"
    "              + tuple(env[s] for s in saved))\n"
    "    bw, benv = torch.fx.Graph(), {}\n"
    "    for s in saved + tangents:\n"
    "        benv[s] = bw.placeholder(s.name)\n"
    "        benv[s].meta = s.meta\n"
    "    for n in graph.nodes:\n"
    "        if n in needed and n not in benv:\n"
    "            benv[n] = bw.node_copy(n, lambda a: benv[a])\n"
    "    bw.output(tuple(benv[g] if isinstance(g, torch.fx.Node) else g for g in grads))\n"
    "    fw_module, bw_module = torch.fx.GraphModule(joint, fw), torch.fx.GraphModule(joint, bw)\n"
    "    fw_module.graph.eliminate_dead_code()\n"
    "    fw_module.recompile()\n"
    "    return fw_module, bw_module\n"
)

#: The solution's compiler pair, with one piece replaced in each wrong answer below.
_PAIR = (
    "cast_positions = []\n"
    "def fw_compiler(gm, example_inputs):\n"
    "    out = next(n for n in gm.graph.nodes if n.op == 'output')\n"
    "    values = list(out.args[0])\n"
    "    inputs = {StorageWeakRef(n.meta['val'].untyped_storage()) for n in gm.graph.nodes if n.op == 'placeholder'}\n"
    "    copies = {}\n"
    "    cast_positions.clear()\n"
    "    for i in range(1, len(values)):\n"
    "        val = values[i].meta['val']\n"
    "        if val.dtype != torch.float32:\n"
    "            continue\n"
    "        key = StorageWeakRef(val.untyped_storage())\n"
    "        if key in inputs:\n"
    "            continue\n"
    "        if key not in copies:\n"
    "            with gm.graph.inserting_before(out):\n"
    "                copies[key] = gm.graph.call_function(torch.ops.prims.convert_element_type.default,\n"
    "                                                     (values[i], torch.bfloat16))\n"
    "        values[i] = copies[key]\n"
    "        cast_positions.append(i - 1)\n"
    "    out.args = (tuple(values),)\n"
    "    gm.recompile()\n"
    "    return make_boxed_func(gm.forward)\n"
    "def bw_compiler(gm, example_inputs):\n"
    "    placeholders = [n for n in gm.graph.nodes if n.op == 'placeholder']\n"
    "    for i in cast_positions:\n"
    "        p = placeholders[i]\n"
    "        with gm.graph.inserting_after(p):\n"
    "            back = gm.graph.call_function(torch.ops.prims.convert_element_type.default, (p, torch.float32))\n"
    "        p.replace_all_uses_with(back, delete_user_cb=lambda user, back=back: user is not back)\n"
    "    gm.recompile()\n"
    "    return make_boxed_func(gm.forward)\n"
)

WRONG: dict[str, list[str]] = {
    "ch6.count_saved": [
        # counts every input of the backward graph, the incoming gradients (tangents) included
        "def count_saved(model, x):\n"
        "    found = {}\n"
        "    def bw(gm, inputs):\n"
        "        ph = [n for n in gm.graph.nodes if n.op == 'placeholder']\n"
        "        found['n'] = len(ph)\n"
        "        found['b'] = sum(n.meta['val'].numel() * n.meta['val'].element_size() for n in ph)\n" + _COUNT_TAIL,
        # adds up every saved tensor's bytes: the detach aliases autograd saves are counted twice
        _COUNT_HEAD
        + "        found['b'] = sum(n.meta['val'].numel() * n.meta['val'].element_size() for n in ph)\n" + _COUNT_TAIL,
        # counts elements instead of bytes
        _COUNT_HEAD + "        found['b'] = sum(n.meta['val'].numel() for n in ph)\n" + _COUNT_TAIL,
        # one count per storage, but each storage's bytes taken from the first tensor's own elements (a slice of x
        # keeps all of x alive, not only its own elements)
        _COUNT_HEAD
        + "        sizes = {}\n"
          "        for n in ph:\n"
          "            v = n.meta['val']\n"
          "            sizes.setdefault(StorageWeakRef(v.untyped_storage()), v.numel() * v.element_size())\n"
          "        found['b'] = sum(sizes.values())\n" + _COUNT_TAIL,
        # storages grouped, 4 bytes per element assumed (float32 everywhere)
        _COUNT_HEAD
        + "        sizes = {StorageWeakRef(n.meta['val'].untyped_storage()):\n"
          "                 n.meta['val'].untyped_storage().size() * 4 for n in ph}\n"
          "        found['b'] = sum(sizes.values())\n" + _COUNT_TAIL,
        # asks the min-cut partitioner instead of the default one
        "def count_saved(model, x):\n"
        "    from npu_lab.exercises.ch6 import functional\n"
        "    fn, params = functional(model)\n"
        "    part = inspect_aot(fn, x, *params).min_cut\n"
        "    return len(part.saved), part.saved_bytes",
        # the lab's inspector does the counting: right numbers, not the learner's own count
        "def count_saved(model, x):\n"
        "    from npu_lab.exercises.ch6 import functional\n"
        "    fn, params = functional(model)\n"
        "    part = inspect_aot(fn, x, *params).default\n"
        "    return len(part.saved), part.saved_bytes",
    ],
    "ch6.partitioner": [
        # PyTorch's default partitioner: it saves what the backward reads, recomputes nothing
        "from functorch.compile import default_partition\n"
        "def recompute_partition(joint, joint_inputs, *, num_fwd_outputs, **kwargs):\n"
        "    return default_partition(joint, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)",
        # PyTorch's min-cut partitioner: its own choice of what to recompute
        "from functorch.compile import min_cut_rematerialization_partition\n"
        "def recompute_partition(joint, joint_inputs, *, num_fwd_outputs, **kwargs):\n"
        "    return min_cut_rematerialization_partition(joint, joint_inputs, num_fwd_outputs=num_fwd_outputs,\n"
        "                                               **kwargs)",
        # the policy as recompute tags, the split left to the default partitioner
        "from functorch.compile import default_partition\n"
        "from torch.utils.checkpoint import CheckpointPolicy\n"
        + _PARTITION.split("def recompute_partition")[0]
        + "def recompute_partition(joint, joint_inputs, *, num_fwd_outputs, **kwargs):\n"
          "    for n in joint.graph.nodes:\n"
          "        if cheap(n):\n"
          "            n.meta['recompute'] = CheckpointPolicy.MUST_RECOMPUTE\n"
          "    return default_partition(joint, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)",
        # saves every forward value the backward reads (the default partitioner's choice, written out)
        _PARTITION.replace("if n in primals or (n in forward and not cheap(n)):", "if n in primals or n in forward:"),
        # recomputes everything from the inputs, matrix products and reductions too
        _PARTITION.replace("if n in primals or (n in forward and not cheap(n)):", "if n in primals:"),
        # 'cheap' is anything but a matrix product: reductions (mean, sum) and normalizations get recomputed too
        _PARTITION.replace("    return torch.Tag.pointwise in t.tags or t.is_view\n",
                           "    return t not in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default,\n"
                           "                     torch.ops.aten.bmm.default)\n"),
        # assumes the function has one output
        _PARTITION.replace("outputs[:num_fwd_outputs], outputs[num_fwd_outputs:]", "outputs[:1], outputs[1:]"),
        # copies the recomputed nodes in the order the walk found them (from the gradients back), not graph order
        _PARTITION.replace("    for n in graph.nodes:\n        if n in needed and n not in benv:\n",
                           "    for n in needed:\n        if n not in benv:\n"),
    ],
    "ch6.compiler_pair": [
        # only logs and runs the graphs (the previous edition's exercise): nothing is kept in bfloat16
        "compile_log = []\n"
        "def fw_compiler(gm, example_inputs):\n"
        "    compile_log.append(('forward', sum(1 for n in gm.graph.nodes if n.op == 'call_function')))\n"
        "    return make_boxed_func(gm.forward)\n"
        "def bw_compiler(gm, example_inputs):\n"
        "    compile_log.append(('backward', sum(1 for n in gm.graph.nodes if n.op == 'call_function')))\n"
        "    return make_boxed_func(gm.forward)",
        # converts inputs too (x, a transposed weight): bfloat16 copies of tensors that stay alive anyway
        _PAIR.replace("        if key in inputs:\n            continue\n", ""),
        # one conversion per saved tensor: an activation and its detach alias get two copies
        _PAIR.replace("        if key not in copies:\n", "        if True:\n"),
        # float16 instead of bfloat16
        _PAIR.replace("(values[i], torch.bfloat16)", "(values[i], torch.float16)"),
        # converts every saved tensor that is not an input, int64 indices too
        _PAIR.replace("        if val.dtype != torch.float32:\n            continue\n", ""),
        # the model's output converted too
        _PAIR.replace("    for i in range(1, len(values)):", "    for i in range(0, len(values)):")
        .replace("cast_positions.append(i - 1)", "cast_positions.append(i - 1) if i else None"),
        # casts in the forward, forgets to convert back in the backward
        _PAIR.split("def bw_compiler")[0]
        + "def bw_compiler(gm, example_inputs):\n"
          "    return make_boxed_func(gm.forward)\n",
    ],
}
