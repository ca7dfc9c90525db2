"""Plausible wrong answers to the torch.compile exercises (chapter ``ch1``).

Each is run in the namespace of the executed solution notebook, which has imported ``logging``, ``operator``,
``torch``, ``torch._dynamo``, ``F`` (``torch.nn.functional``), ``nn``, ``mark_unbacked``, ``npu_lab``,
``CompileCounter`` and ``explore_guards``.
"""

#: The rewrite of ``silu_backend`` around a match condition and a clean-up (the wrong answers differ there).
_SILU = ("import operator\nimport torch.nn.functional as F\n"
         "def silu_backend(gm, example_inputs):\n    g = gm.graph\n"
         "    def is_sig(n):\n        return isinstance(n, torch.fx.Node) and (\n"
         "            (n.op == 'call_function' and n.target in (torch.sigmoid, F.sigmoid))\n"
         "            or (n.op == 'call_method' and n.target == 'sigmoid'))\n"
         "    for n in list(g.nodes):\n"
         "        if not ((n.op == 'call_function' and n.target in %(muls)s)\n"
         "                or (n.op == 'call_method' and n.target == 'mul')):\n            continue\n"
         "        a, b = n.args[:2]\n        for s, o in %(orders)s:\n"
         "            if is_sig(s)%(same)s:\n"
         "                with g.inserting_before(n):\n"
         "                    new = g.call_function(F.silu, (s.args[0],))\n"
         "                n.replace_all_uses_with(new)\n                g.erase_node(n)\n%(cleanup)s"
         "                break\n    g.eliminate_dead_code()\n    gm.recompile()\n    return gm.forward")
_OK = {"muls": "(operator.mul, torch.mul)", "orders": "((a, b), (b, a))", "same": " and s.args[0] is o",
       "cleanup": ""}

WRONG: dict[str, list[str]] = {
    "ch1.count_graphs": [
        # never resets Dynamo: graphs and "this dimension changed" from earlier compiles leak into the counts
        "def count_graphs(fn, calls, **compile_kwargs):\n    counter = CompileCounter()\n"
        "    compiled = torch.compile(fn, backend=counter, **compile_kwargs)\n    totals = []\n"
        "    for args in calls:\n        compiled(*args)\n        totals.append(counter.frames)\n    return totals",
        # counts calls that compiled something, not graphs: a graph break's second graph is missed
        "def count_graphs(fn, calls, **compile_kwargs):\n    torch._dynamo.reset()\n    counter = CompileCounter()\n"
        "    compiled = torch.compile(fn, backend=counter, **compile_kwargs)\n    totals, compiles, seen = [], 0, 0\n"
        "    for args in calls:\n        compiled(*args)\n        if counter.frames > seen:\n"
        "            compiles += 1\n        seen = counter.frames\n        totals.append(compiles)\n    return totals",
        # ignores compile_kwargs (dynamic=False / dynamic=True are lost)
        "def count_graphs(fn, calls, **compile_kwargs):\n    torch._dynamo.reset()\n    counter = CompileCounter()\n"
        "    compiled = torch.compile(fn, backend=counter)\n    totals = []\n"
        "    for args in calls:\n        compiled(*args)\n        totals.append(counter.frames)\n    return totals",
        # returns only the final total
        "def count_graphs(fn, calls, **compile_kwargs):\n    torch._dynamo.reset()\n    counter = CompileCounter()\n"
        "    compiled = torch.compile(fn, backend=counter, **compile_kwargs)\n"
        "    for args in calls:\n        compiled(*args)\n    return [counter.frames]",
        # works the count out from the arguments (one graph per new dtype and shape) instead of compiling
        "def count_graphs(fn, calls, **compile_kwargs):\n    seen, totals = set(), []\n"
        "    for args in calls:\n"
        "        seen.add(tuple((a.dtype, tuple(a.shape)) if isinstance(a, torch.Tensor) else a for a in args))\n"
        "        totals.append(len(seen))\n    return totals",
        # the graphs each call compiled, not the running total
        "def count_graphs(fn, calls, **compile_kwargs):\n    torch._dynamo.reset()\n    counter = CompileCounter()\n"
        "    compiled = torch.compile(fn, backend=counter, **compile_kwargs)\n    out = []\n"
        "    for args in calls:\n        before = counter.frames\n        compiled(*args)\n"
        "        out.append(counter.frames - before)\n    return out",
        # a fresh Dynamo state before every call: everything compiles again, every time
        "def count_graphs(fn, calls, **compile_kwargs):\n    counter = CompileCounter()\n"
        "    compiled = torch.compile(fn, backend=counter, **compile_kwargs)\n    totals = []\n"
        "    for args in calls:\n        torch._dynamo.reset()\n        compiled(*args)\n"
        "        totals.append(counter.frames)\n    return totals",
        # passes on only `dynamic`, and treats a missing one as dynamic=True
        "def count_graphs(fn, calls, **compile_kwargs):\n    torch._dynamo.reset()\n    counter = CompileCounter()\n"
        "    compiled = torch.compile(fn, backend=counter, dynamic=compile_kwargs.get('dynamic', True))\n"
        "    totals = []\n    for args in calls:\n        compiled(*args)\n        totals.append(counter.frames)\n"
        "    return totals",
    ],
    "ch1.serving": [
        # the default: the first shapes static, then dynamic, with sizes 0 and 1 specialised
        "def compile_for_serving(fn, backend, varying):\n    return torch.compile(fn, backend=backend)",
        # dynamic from the first call: sizes 1 are still specialised, and the widths become symbols too
        "def compile_for_serving(fn, backend, varying):\n    return torch.compile(fn, backend=backend, dynamic=True)",
        # static shapes: one graph per shape
        "def compile_for_serving(fn, backend, varying):\n    return torch.compile(fn, backend=backend, dynamic=False)",
        # no recompiles because nothing is compiled: fn itself runs
        "def compile_for_serving(fn, backend, varying):\n    return fn",
        # mark_dynamic on the varying dimensions: a batch or a sequence of 1 still gets a graph of its own
        "def compile_for_serving(fn, backend, varying):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    def serve(*xs):\n        for x, dims in zip(xs, varying):\n            if dims:\n"
        "                torch._dynamo.mark_dynamic(x, list(dims))\n        return compiled(*xs)\n    return serve",
        # the batch dimension only (the chapter's example): a new sequence length recompiles
        "def compile_for_serving(fn, backend, varying):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    def serve(*xs):\n        for x, dims in zip(xs, varying):\n            if dims:\n"
        "                mark_unbacked(x, 0)\n        return compiled(*xs)\n    return serve",
        # dimensions 0 and 1 of every input, whatever `varying` says: a broadcasting 1 taken for a batch size
        "def compile_for_serving(fn, backend, varying):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    def serve(*xs):\n        for x in xs:\n            mark_unbacked(x, [0, 1])\n"
        "        return compiled(*xs)\n    return serve",
        # every dimension of every input that varies somewhere: the widths are no longer constants
        "def compile_for_serving(fn, backend, varying):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    def serve(*xs):\n        for x, dims in zip(xs, varying):\n            if dims:\n"
        "                mark_unbacked(x, list(range(x.dim())))\n        return compiled(*xs)\n    return serve",
        # the varying dimensions of the first input only: the others recompile
        "def compile_for_serving(fn, backend, varying):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    def serve(x, *rest):\n        mark_unbacked(x, list(varying[0]))\n        return compiled(x, *rest)\n"
        "    return serve",
        # the right marks, and dynamic=True "to be safe": every other dimension becomes a symbol too
        "def compile_for_serving(fn, backend, varying):\n"
        "    compiled = torch.compile(fn, backend=backend, dynamic=True)\n"
        "    def serve(*xs):\n        for x, dims in zip(xs, varying):\n            if dims:\n"
        "                mark_unbacked(x, list(dims))\n        return compiled(*xs)\n    return serve",
        # a fresh Dynamo state for every request: each call compiles anew
        "def compile_for_serving(fn, backend, varying):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    def serve(*xs):\n        torch._dynamo.reset()\n        for x, dims in zip(xs, varying):\n"
        "            if dims:\n                mark_unbacked(x, list(dims))\n        return compiled(*xs)\n"
        "    return serve",
        # pads sizes of 1 up to 2 and cuts the result: wrong for functions that mix positions, and still 2 graphs
        "def compile_for_serving(fn, backend, varying):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    def serve(*xs):\n        padded = []\n        for x, dims in zip(xs, varying):\n"
        "            for d in dims:\n                if x.shape[d] == 1:\n"
        "                    x = torch.cat([x, torch.zeros_like(x)], dim=d)\n            padded.append(x)\n"
        "        return compiled(*padded)\n    return serve",
    ],
    "ch1.decayed_step": [
        # the original: a global Python counter, guarded by value, recompiles every call (then runs eagerly)
        "_calls = 0\n"
        "def make_decayed_step(backend):\n    @torch.compile(backend=backend)\n    def step(w, grad):\n"
        "        global _calls\n        _calls += 1\n        return w - (0.5 / _calls) * grad\n    return step",
        # a Python counter in a closure list: the list element is guarded just the same
        "def make_decayed_step(backend):\n    state = [0]\n    @torch.compile(backend=backend)\n"
        "    def step(w, grad):\n        state[0] += 1\n        return w - (0.5 / state[0]) * grad\n    return step",
        # passes k as a Python int argument: automatic dynamic makes it symbolic on the second call (2 graphs)
        "def make_decayed_step(backend):\n    state = {'k': 0}\n"
        "    inner = torch.compile(lambda w, g, k: w - (0.5 / k) * g, backend=backend)\n"
        "    def step(w, grad):\n        state['k'] += 1\n        return inner(w, grad, state['k'])\n    return step",
        # a tensor counter shared by every stepper (made once, outside the factory)
        "_shared = torch.zeros(())\n"
        "def make_decayed_step(backend):\n    @torch.compile(backend=backend)\n    def step(w, grad):\n"
        "        _shared.add_(1)\n        return w - (0.5 / _shared) * grad\n    return step",
        # off by one: increments after computing, so the first call divides by 0
        "def make_decayed_step(backend):\n    count = torch.zeros(())\n    @torch.compile(backend=backend)\n"
        "    def step(w, grad):\n        out = w - (0.5 / count) * grad\n        count.add_(1)\n        return out\n"
        "    return step",
        # the count in a tensor, but read back with .item() inside the compiled step: a graph break and a guard
        "def make_decayed_step(backend):\n    count = torch.zeros(())\n    @torch.compile(backend=backend)\n"
        "    def step(w, grad):\n        count.add_(1)\n        return w - (0.5 / count.item()) * grad\n"
        "    return step",
        # the learning rate from a helper Dynamo may not trace: the float it returns is a new constant each call
        "def make_decayed_step(backend):\n    state = {'k': 0}\n    @torch.compiler.disable\n    def lr():\n"
        "        state['k'] += 1\n        return 0.5 / state['k']\n    @torch.compile(backend=backend)\n"
        "    def step(w, grad):\n        return w - lr() * grad\n    return step",
        # a new tensor made from a Python counter inside the step: the counter's value is still guarded
        "def make_decayed_step(backend):\n    state = {'k': 0}\n    @torch.compile(backend=backend)\n"
        "    def step(w, grad):\n        state['k'] += 1\n        k = torch.tensor(float(state['k']))\n"
        "        return w - (0.5 / k) * grad\n"
        "    return step",
    ],
    "ch1.silu_backend": [
        # any product with a sigmoid becomes silu, whatever the sigmoid was taken of
        _SILU % {**_OK, "same": ""},
        # only x * sigmoid(x): sigmoid(x) * x is missed
        _SILU % {**_OK, "orders": "((b, a),)"},
        # only operator.mul: torch.mul(y, F.sigmoid(y)) is missed
        _SILU % {**_OK, "muls": "(operator.mul,)"},
        # erases the sigmoid too, although another node still uses it
        _SILU % {**_OK, "cleanup": "                if s.users == {}:\n                    pass\n"
                                   "                s.replace_all_uses_with(new)\n                g.erase_node(s)\n"},
        # a backend that counts, but never rewrites
        "def silu_backend(gm, example_inputs):\n    return gm.forward",
        # only call_function products: the mul method (x.mul(...)) is missed
        _SILU.replace("                or (n.op == 'call_method' and n.target == 'mul')):",
                      "                or False):") % _OK,
        # rewrites right, then runs the graph on CPU copies of its inputs (values right, bytes cross)
        (_SILU % _OK).replace("    return gm.forward",
                              "    def run(*args):\n        cpu = gm.cpu()\n"
                              "        out = cpu.forward(*[a.cpu() for a in args])\n"
                              "        gm.to('npu')\n"
                              "        return type(out)(o.to('npu') for o in out)\n    return run"),
    ],
}
