"""Plausible wrong answers to the getting-started exercises (chapter ``lab``)."""

WRONG: dict[str, list[str]] = {
    "lab.contiguous_strides": [
        # right numbers, but a list: the text asks for a tuple of ints
        "def contiguous_strides(shape):\n    out, step = [], 1\n    for s in reversed(shape):\n"
        "        out.append(step)\n        step *= max(s, 1)\n    return out[::-1]",
        "def contiguous_strides(shape):\n    return tuple(1 for _ in shape)",
        # forgets that PyTorch treats size-0 dimensions as size 1
        "def contiguous_strides(shape):\n    out, step = [], 1\n    for s in reversed(shape):\n"
        "        out.append(step)\n        step *= s\n    return tuple(reversed(out))",
        # right answers, by asking PyTorch (the text: work it out, no tensor)
        "def contiguous_strides(shape):\n    return tuple(torch.empty(shape).stride())",
    ],
    "lab.block_bytes": [
        "def block_bytes(shape, dtype):\n    n = 1\n    for s in shape:\n        n *= s\n"
        "    return n * torch.empty((), dtype=dtype).element_size()",  # forgets the rounding
        "def block_bytes(shape, dtype):\n    n = 1\n    for s in shape:\n        n *= s\n"
        "    return (n * 4 + 511) // 512 * 512",  # assumes float32
        # measures instead of predicting: allocates on npu and reads the counter
        "def block_bytes(shape, dtype):\n    before = torch.npu.memory_allocated()\n"
        "    t = torch.empty(shape, dtype=dtype, device='npu')\n    return torch.npu.memory_allocated() - before",
    ],
    "lab.leaky_relu_kernel": [
        # right values, but the input is overwritten on the way (x is the kernel's input: read it only)
        # (cache=True needs a source file: these run from strings, so they also fail the cache rule)
        "@numba.njit\ndef leaky_relu_kernel(x, out, slope):\n    for i in range(x.size):\n"
        "        if x[i] <= 0:\n            x[i] = slope * x[i]\n        out[i] = x[i]",
        # right values, but compiled without cache=True (the text asks for it)
        "@numba.njit\ndef leaky_relu_kernel(x, out, slope):\n    for i in range(x.size):\n"
        "        out[i] = x[i] if x[i] > 0 else slope * x[i]",
        # only for positive slopes: "any slope" is broken by abs()
        "@numba.njit\ndef leaky_relu_kernel(x, out, slope):\n    for i in range(x.size):\n"
        "        out[i] = x[i] if x[i] > 0 else abs(slope) * x[i]",
        "@numba.njit\ndef leaky_relu_kernel(x, out, slope):\n    for i in range(x.size):\n"
        "        out[i] = max(x[i], 0.0)",  # plain ReLU
        "def leaky_relu_kernel(x, out, slope):\n    out[:] = np.where(x > 0, x, slope * x)",  # not numba
    ],
    "lab.square_to_mul": [
        # torch.mul instead of the ATen operator the text asks for
        "def square_to_mul(gm):\n    for n in list(gm.graph.nodes):\n"
        "        if n.target == torch.ops.aten.pow.Tensor_Scalar and n.args[1] == 2:\n"
        "            with gm.graph.inserting_before(n):\n"
        "                m = gm.graph.call_function(torch.mul, (n.args[0], n.args[0]))\n"
        "            n.replace_all_uses_with(m)\n            gm.graph.erase_node(n)\n"
        "    gm.recompile()\n    return gm",
        # moves only the first use of the square to the new node, then leaves the old one in place
        "def square_to_mul(gm):\n    for n in list(gm.graph.nodes):\n"
        "        if n.target == torch.ops.aten.pow.Tensor_Scalar and n.args[1] == 2:\n"
        "            with gm.graph.inserting_before(n):\n"
        "                m = gm.graph.call_function(torch.ops.aten.mul.Tensor, (n.args[0], n.args[0]))\n"
        "            first = next(iter(n.users))\n            first.replace_input_with(n, m)\n"
        "            if not n.users:\n                gm.graph.erase_node(n)\n"
        "    gm.recompile()\n    return gm",
        "def square_to_mul(gm):\n    for n in list(gm.graph.nodes):\n"
        "        if n.target == torch.ops.aten.pow.Tensor_Scalar:\n"
        "            with gm.graph.inserting_before(n):\n"
        "                m = gm.graph.call_function(torch.ops.aten.mul.Tensor, (n.args[0], n.args[0]))\n"
        "            n.replace_all_uses_with(m)\n            gm.graph.erase_node(n)\n"
        "    gm.recompile()\n    return gm",  # rewrites every exponent, also 3
        # matches the exponent as the int 2 only: x ** 2.0 (a float 2.0) is a square too
        "def square_to_mul(gm):\n    for n in list(gm.graph.nodes):\n"
        "        if n.target == torch.ops.aten.pow.Tensor_Scalar and type(n.args[1]) is int and n.args[1] == 2:\n"
        "            with gm.graph.inserting_before(n):\n"
        "                m = gm.graph.call_function(torch.ops.aten.mul.Tensor, (n.args[0], n.args[0]))\n"
        "            n.replace_all_uses_with(m)\n            gm.graph.erase_node(n)\n"
        "    gm.recompile()\n    return gm",
        "def square_to_mul(gm):\n    for n in list(gm.graph.nodes):\n"
        "        if n.target == torch.ops.aten.pow.Tensor_Scalar and n.args[1] == 2:\n"
        "            n.target = torch.ops.aten.mul.Tensor\n            n.args = (n.args[0], n.args[0])\n"
        "    return gm",  # forgets recompile
    ],
}


