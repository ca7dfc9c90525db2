"""Plausible wrong answers to chapter 6's exercises (AOTAutograd)."""

WRONG: dict[str, list[str]] = {
    "ch6.count_saved": [
        # counts every input of the backward graph, the incoming gradients (tangents) included
        "def count_saved(model, x):\n"
        "    found = {}\n"
        "    def bw(gm, inputs):\n"
        "        ph = [n for n in gm.graph.nodes if n.op == 'placeholder']\n"
        "        found['n'] = len(ph)\n"
        "        found['b'] = sum(n.meta['val'].numel() * n.meta['val'].element_size() for n in ph)\n"
        "        return make_boxed_func(gm.forward)\n"
        "    fw = lambda gm, i: make_boxed_func(gm.forward)\n"
        "    aot_module(model, fw_compiler=fw, bw_compiler=bw)(x).sum().backward()\n"
        "    return found['n'], found['b']",
        # adds up every saved tensor's bytes: the detach aliases autograd saves are counted twice
        "def count_saved(model, x):\n"
        "    found = {}\n"
        "    def bw(gm, inputs):\n"
        "        ph = [n for n in gm.graph.nodes if n.op == 'placeholder' and not n.name.startswith('tangents')]\n"
        "        found['n'] = len(ph)\n"
        "        found['b'] = sum(n.meta['val'].numel() * n.meta['val'].element_size() for n in ph)\n"
        "        return make_boxed_func(gm.forward)\n"
        "    fw = lambda gm, i: make_boxed_func(gm.forward)\n"
        "    aot_module(model, fw_compiler=fw, bw_compiler=bw)(x).sum().backward()\n"
        "    return found['n'], found['b']",
        # counts elements instead of bytes
        "def count_saved(model, x):\n"
        "    found = {}\n"
        "    def bw(gm, inputs):\n"
        "        ph = [n for n in gm.graph.nodes if n.op == 'placeholder' and not n.name.startswith('tangents')]\n"
        "        found['n'] = len(ph)\n"
        "        found['b'] = sum(n.meta['val'].numel() for n in ph)\n"
        "        return make_boxed_func(gm.forward)\n"
        "    fw = lambda gm, i: make_boxed_func(gm.forward)\n"
        "    aot_module(model, fw_compiler=fw, bw_compiler=bw)(x).sum().backward()\n"
        "    return found['n'], found['b']",
        # asks the min-cut partitioner instead of the default one
        "def count_saved(model, x):\n"
        "    from npu_lab.exercises.ch6 import functional\n"
        "    fn, params = functional(model)\n"
        "    part = inspect_aot(fn, x, *params).min_cut\n"
        "    return len(part.saved), part.saved_bytes",
    ],
    "ch6.compiler_pair": [
        # logs and runs, but returns the graph's forward unboxed
        "def fw_compiler(gm, example_inputs):\n"
        "    compile_log.append(('forward', sum(1 for n in gm.graph.nodes if n.op == 'call_function')))\n"
        "    return gm.forward\n"
        "def bw_compiler(gm, example_inputs):\n"
        "    compile_log.append(('backward', sum(1 for n in gm.graph.nodes if n.op == 'call_function')))\n"
        "    return gm.forward",
        # one compiler copied for both: the backward graph is logged as 'forward'
        "def fw_compiler(gm, example_inputs):\n"
        "    compile_log.append(('forward', sum(1 for n in gm.graph.nodes if n.op == 'call_function')))\n"
        "    return make_boxed_func(gm.forward)\n"
        "bw_compiler = fw_compiler",
        # counts every node (placeholders and output too)
        "def fw_compiler(gm, example_inputs):\n"
        "    compile_log.append(('forward', len(gm.graph.nodes)))\n"
        "    return make_boxed_func(gm.forward)\n"
        "def bw_compiler(gm, example_inputs):\n"
        "    compile_log.append(('backward', len(gm.graph.nodes)))\n"
        "    return make_boxed_func(gm.forward)",
    ],
    "ch6.predict_partitioner": [
        "fewer_bytes = {name: 'same' for name in PARTITION_FUNCS}",
        "fewer_bytes = {name: 'min_cut' for name in PARTITION_FUNCS}",
        # min-cut is never worse... except that it can be, by a few bytes
        "fewer_bytes = {'sin': 'same', 'sin_times_cos': 'min_cut', 'matmul': 'same', 'outer_product_sin': 'min_cut',\n"
        "               'cube_sum': 'same', 'centered_square_mean': 'same', 'exp_of_exp': 'same'}",
    ],
}
