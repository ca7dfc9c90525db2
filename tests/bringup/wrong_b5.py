"""Plausible wrong answers to milestone B5 (see wrong_b1.py for how they are run).

Each runs in the solved notebook's namespace (``addmm_gelu``, ``add_layer_norm``, ``fuse_addmm_gelu``,
``behind_views``, ``is_call``, ``B1``... are the solution's). A wrong kernel is registered in the library "wrong",
which replaces the solution's until it is destroyed; a wrong pass is a new definition of the pass's name.
"""

#: the addmm's other users get the gelu: training's gelu_backward would read gelu(pre), not pre
PRE_READ_AS_GELU = """
_right = fuse_addmm_gelu
def fuse_addmm_gelu(gm):
    changes = _right(gm)
    for n in list(gm.graph.nodes):
        if n.op == "call_function" and n.target is operator.getitem and is_call(n.args[0],
                torch.ops.mynpu.addmm_gelu.default) and n.args[1] == 0:
            n.args = (n.args[0], 1)
    gm.recompile()
    return changes
"""

WRONG: dict[str, list[str]] = {
    "b5.fused_ops": [
        # the tanh approximation of gelu: close, but not the exact gelu the graph computed
        """
def bad(bias, x, w):
    pre, _ = addmm_gelu(bias, x, w)
    return pre, torch.ops.aten.gelu(pre, approximate="tanh")
bringup.library("wrong", ns="mynpu").impl("addmm_gelu", bad, "PrivateUse1")
""",
        # right values, but two kernels: the milestone-1 matrix product, then milestone 3's gelu
        """
def bad(bias, x, w):
    pre = torch.addmm(bias, x, w)
    return pre, torch.nn.functional.gelu(pre)
bringup.library("wrong", ns="mynpu").impl("addmm_gelu", bad, "PrivateUse1")
""",
        # the kernel reads w as if it were contiguous (k, n): F.linear passes weight.t(), a view
        """
def bad(bias, x, w):
    m, n = x.shape[0], w.shape[1]
    pre = torch.empty((m, n), dtype=x.dtype, device=x.device)
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if pre.numel():
        base = arr(w)
        as_if = np.lib.stride_tricks.as_strided(base, base.shape, (base.shape[1] * base.itemsize, base.itemsize))
        addmm_gelu_kernel(arr(bias), arr(x), as_if, arr(pre), arr(out))
        bringup.launch("addmm_gelu", (bias, x, w), (pre, out))
    return pre, out
bringup.library("wrong", ns="mynpu").impl("addmm_gelu", bad, "PrivateUse1")
""",
        # no weight: a tensor of ones filled on the device (and a zero bias), three launches instead of one
        """
def bad(a, b, normalized_shape, weight, bias, eps):
    n = math.prod(normalized_shape)
    weight = weight if weight is not None else torch.ones(n, dtype=a.dtype, device=a.device)
    bias = bias if bias is not None else torch.zeros(n, dtype=a.dtype, device=a.device)
    return add_layer_norm(a, b, normalized_shape, weight, bias, eps)
bringup.library("wrong", ns="mynpu").impl("add_layer_norm", bad, "PrivateUse1")
""",
        # mean and rstd one per row, (rows,): native_layer_norm gives them the input's leading dims, then 1s
        """
def bad(a, b, normalized_shape, weight, bias, eps):
    total, out, mean, rstd = add_layer_norm(a, b, normalized_shape, weight, bias, eps)
    return total, out, mean.reshape(-1), rstd.reshape(-1)
def bad_fake(a, b, normalized_shape, weight, bias, eps):
    rows = a.numel() // math.prod(normalized_shape)
    return a.new_empty(a.shape), a.new_empty(a.shape), a.new_empty(rows), a.new_empty(rows)
lib = bringup.library("wrong", ns="mynpu")
lib.impl("add_layer_norm", bad, "PrivateUse1")
torch.library.register_fake("mynpu::add_layer_norm", bad_fake, lib=lib, allow_override=True)
""",
        # the fake of addmm_gelu says (x's rows, w's rows): right for F.linear's weight, wrong for addmm's w
        """
def bad_fake(bias, x, w):
    shape = (x.shape[0], w.shape[0])
    return x.new_empty(shape), x.new_empty(shape)
lib = bringup.library("wrong", ns="mynpu")
torch.library.register_fake("mynpu::addmm_gelu", bad_fake, lib=lib, allow_override=True)
""",
        # the launch reports x only: the simulated clock never sees w and the bias being read
        """
def bad(bias, x, w):
    m, n = x.shape[0], w.shape[1]
    pre = torch.empty((m, n), dtype=x.dtype, device=x.device)
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if pre.numel():
        addmm_gelu_kernel(arr(bias), arr(x), arr(w), arr(pre), arr(out))
        bringup.launch("addmm_gelu", (x,), (pre, out), flops=2 * m * n * x.shape[1])
    return pre, out
bringup.library("wrong", ns="mynpu").impl("addmm_gelu", bad, "PrivateUse1")
""",
    ],
    "b5.passes": [
        # fuses the tanh gelu too: the fused kernel computes the exact one
        """
_right = fuse_addmm_gelu
def fuse_addmm_gelu(gm):
    for n in gm.graph.nodes:
        if is_call(n, aten.gelu.default) and n.kwargs.get("approximate") == "tanh":
            n.kwargs = {}
    return _right(gm)
""",
        # does not look through views: a 3-D input's addmm is behind a view
        """
def fuse_addmm_gelu(gm):
    g, changes = gm.graph, []
    for gelu in list(g.nodes):
        if not is_call(gelu, aten.gelu.default) or gelu.kwargs.get("approximate", "none") != "none":
            continue
        mm = gelu.args[0]
        if not is_call(mm, aten.addmm.default) or mm.kwargs or len(mm.args) != 3 or mm.args[0].meta["val"].dim() != 1:
            continue
        with g.inserting_before(gelu):
            fused = g.call_function(torch.ops.mynpu.addmm_gelu.default, tuple(mm.args))
            pre = g.call_function(operator.getitem, (fused, 0))
            act = g.call_function(operator.getitem, (fused, 1))
        gelu.replace_all_uses_with(act)
        mm.replace_all_uses_with(pre)
        g.erase_node(gelu)
        g.erase_node(mm)
        changes.append("gelu(addmm) -> addmm_gelu")
    g.lint()
    gm.recompile()
    return changes
""",
        # the addmm's other users get the gelu: training's gelu_backward would read gelu(pre), not pre
        PRE_READ_AS_GELU,
        # the first match only
        """
_right = fuse_addmm_gelu
def fuse_addmm_gelu(gm):
    g = gm.graph
    gelus = [n for n in g.nodes if is_call(n, aten.gelu.default)]
    for extra in gelus[1:]:
        extra.target = aten.relu.default  # hidden from the pass...
    changes = _right(gm)
    for n in g.nodes:
        if is_call(n, aten.relu.default):
            n.target = aten.gelu.default  # ... and put back unfused
    gm.recompile()
    return changes
""",
        # fuses a broadcast add (b of shape (16,)): the fused kernel adds two tensors of one shape
        """
def fuse_add_layer_norm(gm):
    g, changes = gm.graph, []
    for norm in list(g.nodes):
        if not is_call(norm, aten.native_layer_norm.default) or not is_call(norm.args[0], aten.add.Tensor):
            continue
        add = norm.args[0]
        a, b = add.args[:2]
        if not isinstance(b, torch.fx.Node):
            continue
        with g.inserting_before(norm):
            b2 = g.call_function(aten.expand.default, (b, list(a.meta["val"].shape)))
            fused = g.call_function(torch.ops.mynpu.add_layer_norm.default, (a, b2, *norm.args[1:]))
            total = g.call_function(operator.getitem, (fused, 0))
            parts = [g.call_function(operator.getitem, (fused, i)) for i in (1, 2, 3)]
        add.replace_all_uses_with(total)
        for user in list(norm.users):
            user.replace_all_uses_with(parts[user.args[1]])
            g.erase_node(user)
        g.erase_node(norm)
        g.erase_node(add)
        changes.append("add + layer norm")
    g.lint()
    gm.recompile()
    return changes
""",
        # mean and rstd swapped
        """
_right = fuse_add_layer_norm
def fuse_add_layer_norm(gm):
    changes = _right(gm)
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is operator.getitem and is_call(n.args[0],
                torch.ops.mynpu.add_layer_norm.default) and n.args[1] in (2, 3):
            n.args = (n.args[0], 5 - n.args[1])
    gm.recompile()
    return changes
""",
        # changes made, none reported
        """
_right = fuse_add_layer_norm
def fuse_add_layer_norm(gm):
    _right(gm)
    return []
""",
    ],
    "b5.step": [
        # passes that look and change nothing
        """
def fuse_addmm_gelu(gm):
    return []
def fuse_add_layer_norm(gm):
    return []
""",
        # only the norm of a single-use output: in training mean and rstd are saved for the backward
        """
_right = fuse_add_layer_norm
def fuse_add_layer_norm(gm):
    if any(is_call(n, aten.native_layer_norm.default) and len(n.users) > 1 for n in gm.graph.nodes):
        return []
    return _right(gm)
""",
        # the addmm's other users get the gelu: gelu_backward reads gelu(pre) instead of pre
        PRE_READ_AS_GELU,
        # matches only an add of two graph inputs: right on small graphs, but in the step the residual add reads
        # the embedding and the attention's projection, which are nodes
        """
_right = fuse_add_layer_norm
def fuse_add_layer_norm(gm):
    for norm in gm.graph.nodes:
        if is_call(norm, aten.native_layer_norm.default) and is_call(norm.args[0], aten.add.Tensor):
            if not all(a.op == "placeholder" for a in norm.args[0].args if isinstance(a, torch.fx.Node)):
                return []
    return _right(gm)
""",
        # add_layer_norm as two kernels (add, then milestone 3's layer norm): one launch saved, not two
        """
def bad(a, b, normalized_shape, weight, bias, eps):
    total = torch.add(a, b)
    out, mean, rstd = torch.native_layer_norm(total, normalized_shape, weight, bias, eps)
    return total, out, mean, rstd
bringup.library("wrong", ns="mynpu").impl("add_layer_norm", bad, "PrivateUse1")
""",
    ],
}
