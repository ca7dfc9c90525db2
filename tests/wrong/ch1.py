"""Plausible wrong answers to the torch.compile exercises (chapter ``ch1``).

Each is run in the namespace of the executed solution notebook, which has imported ``logging``,
``torch``, ``torch._dynamo``, ``nn``, ``npu_lab``, ``CompileCounter`` and ``explore_guards``.
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
    ],
    "ch1.any_batch": [
        # the default: automatic dynamic shapes compile a second graph on the second batch size
        "def compile_for_any_batch(fn, backend):\n    return torch.compile(fn, backend=backend)",
        # static shapes: one graph per batch size
        "def compile_for_any_batch(fn, backend):\n    return torch.compile(fn, backend=backend, dynamic=False)",
        # marks only the first input dynamic: the second input's batch dimension still recompiles
        "def compile_for_any_batch(fn, backend):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    def run(x, *rest):\n        torch._dynamo.mark_dynamic(x, 0)\n        return compiled(x, *rest)\n"
        "    return run",
        # no recompiles because nothing is compiled: fn itself runs
        "def compile_for_any_batch(fn, backend):\n    return fn",
        # the chapter's answer for sizes >= 2: dynamic from the first call, but 1 is still specialised
        "def compile_for_any_batch(fn, backend):\n    return torch.compile(fn, backend=backend, dynamic=True)",
        # mark_dynamic on every input: a batch of 1 still gets a graph of its own (or raises when it comes first)
        "def compile_for_any_batch(fn, backend):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    def run(*xs):\n        for x in xs:\n            torch._dynamo.mark_dynamic(x, 0)\n"
        "        return compiled(*xs)\n    return run",
        # unbacked only on the first input: the second input's batch dimension still specialises
        "def compile_for_any_batch(fn, backend):\n    compiled = torch.compile(fn, backend=backend)\n"
        "    def run(x, *rest):\n        torch._dynamo.decorators.mark_unbacked(x, 0)\n"
        "        return compiled(x, *rest)\n    return run",
        # pads a batch of 1 to 2 rows and keeps row 0: right for row-wise functions, wrong when fn mixes rows
        # (softmax + x.mean(0)), and the size-2 graph is still a second graph next to the dynamic one
        "def compile_for_any_batch(fn, backend):\n    compiled = torch.compile(fn, backend=backend, dynamic=True)\n"
        "    def run(*xs):\n        if xs[0].shape[0] == 1:\n"
        "            return compiled(*[torch.cat([x, torch.zeros_like(x)]) for x in xs])[:1]\n"
        "        return compiled(*xs)\n    return run",
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
        # rewrites right, then runs the graph on CPU copies of its inputs (values right, bytes cross)
        (_SILU % _OK).replace("    return gm.forward",
                              "    def run(*args):\n        cpu = gm.cpu()\n"
                              "        out = cpu.forward(*[a.cpu() for a in args])\n"
                              "        gm.to('npu')\n"
                              "        return type(out)(o.to('npu') for o in out)\n    return run"),
    ],
}
