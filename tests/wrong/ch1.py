"""Plausible wrong answers to the torch.compile exercises (chapter ``ch1``).

Each is run in the namespace of the executed solution notebook, which has imported ``logging``,
``torch``, ``torch._dynamo``, ``nn``, ``npu_lab``, ``CompileCounter`` and ``explore_guards``.
"""

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
}
