"""Plausible wrong answers to the lazy-tensor exercises (chapter ``ch4``).

Each is run in the namespace of the executed solution notebook, which has imported ``torch``,
``F`` (``torch.nn.functional``), ``npu_lab``, ``lazy`` (``npu_lab.lazy``) and ``BATCH``.
"""

_CLIP_HEAD = (
    "def clipped_step(model, x, y, lr, max_norm):\n"
    "    model.zero_grad()\n"
    "    loss = F.cross_entropy(model(x), y)\n"
)
_CLIP_NORM = (
    "    loss.backward()\n"
    "    grads = [p.grad for p in model.parameters()]\n"
    "    norm = torch.stack([(g * g).sum() for g in grads]).sum().sqrt()\n"
)
_CLIP_UPDATE = (
    "    with torch.no_grad():\n"
    "        for p in model.parameters():\n"
    "            p.sub_(lr * p.grad)\n"
    "    return loss\n"
)

_PAD = (
    "    rows = x.shape[0]\n"
    "    xp = torch.zeros(BATCH, x.shape[1]); xp[:rows] = x\n"
    "    yp = torch.zeros(BATCH, dtype=y.dtype); yp[:rows] = y\n"
    "    mask = (torch.arange(BATCH) < rows).float()\n"
    "    xp, yp, mask = xp.to('npu'), yp.to('npu'), mask.to('npu')\n"
    "    model.zero_grad()\n"
    "    ce = F.cross_entropy(model(xp), yp, reduction='none')\n"
)

WRONG: dict[str, list[str]] = {
    "ch4.count_graphs": [
        # counts the sync points that read a value, but not the graph run when the mode ends
        "graphs = {'chain': 0, 'item_in_the_middle': 1, 'python_if': 1, 'shapes_only': 0,"
        " 'format_then_mark_step': 2, 'boolean_mask': 1, 'where_instead_of_if': 0, 'loop_with_mark_step': 3,"
        " 'round_trip_through_cpu': 1}",
        # thinks reading a shape is a sync, and that mark_step and the end of the mode make one graph
        "graphs = {'chain': 1, 'item_in_the_middle': 2, 'python_if': 2, 'shapes_only': 2,"
        " 'format_then_mark_step': 2, 'boolean_mask': 2, 'where_instead_of_if': 1, 'loop_with_mark_step': 3,"
        " 'round_trip_through_cpu': 2}",
        # right for the shown ones, but a Python-side torch.where and a data-dependent shape are misjudged
        "graphs = {'chain': 1, 'item_in_the_middle': 2, 'python_if': 2, 'shapes_only': 1,"
        " 'format_then_mark_step': 3, 'boolean_mask': 1, 'where_instead_of_if': 2, 'loop_with_mark_step': 3,"
        " 'round_trip_through_cpu': 2}",
        # everything is one graph per block
        "graphs = {name: 1 for name in ('chain', 'item_in_the_middle', 'python_if', 'shapes_only',"
        " 'format_then_mark_step', 'boolean_mask', 'where_instead_of_if', 'loop_with_mark_step',"
        " 'round_trip_through_cpu')}",
        # right everywhere but the loop: thinks leaving the mode runs one more (empty) graph
        "graphs = {'chain': 1, 'item_in_the_middle': 2, 'python_if': 2, 'shapes_only': 1,"
        " 'format_then_mark_step': 3, 'boolean_mask': 2, 'where_instead_of_if': 1, 'loop_with_mark_step': 4,"
        " 'round_trip_through_cpu': 2}",
        # right everywhere but the round trip: thinks the CPU tensor coming back runs eagerly, outside any graph
        "graphs = {'chain': 1, 'item_in_the_middle': 2, 'python_if': 2, 'shapes_only': 1,"
        " 'format_then_mark_step': 3, 'boolean_mask': 2, 'where_instead_of_if': 1, 'loop_with_mark_step': 3,"
        " 'round_trip_through_cpu': 1}",
    ],
    "ch4.remove_sync": [
        # the `if` is gone, but the step still logs with .item()
        _CLIP_HEAD + "    print_value = loss.item()\n" + _CLIP_NORM
        + "    scale = torch.clamp(max_norm / norm, max=1.0)\n"
        "    for g in grads:\n        g.mul_(scale)\n" + _CLIP_UPDATE,
        # the logging is gone, but the clipping still decides in Python
        _CLIP_HEAD + _CLIP_NORM
        + "    if norm > max_norm:\n        for g in grads:\n            g.mul_(max_norm / norm)\n" + _CLIP_UPDATE,
        # no sync points left - because the clipping was dropped
        _CLIP_HEAD + "    loss.backward()\n" + _CLIP_UPDATE,
        # always scales to max_norm, also when the norm is already smaller (it grows the gradients)
        _CLIP_HEAD + _CLIP_NORM + "    for g in grads:\n        g.mul_(max_norm / norm)\n" + _CLIP_UPDATE,
        # returns the loss as a Python number: .item() inside the step is a sync
        _CLIP_HEAD + _CLIP_NORM
        + "    scale = torch.clamp(max_norm / norm, max=1.0)\n"
        "    with torch.no_grad():\n        for p in model.parameters():\n            p.sub_(lr * p.grad * scale)\n"
        "    return loss.item()\n",
        # Python's min() of a number and a tensor: comparing them reads the norm on the host (a sync)
        _CLIP_HEAD + _CLIP_NORM
        + "    scale = min(1.0, max_norm / norm)\n"
        "    with torch.no_grad():\n        for p in model.parameters():\n            p.sub_(lr * p.grad * scale)\n"
        "    return loss\n",
        # clips every gradient by its own norm instead of the norm of all gradients together
        _CLIP_HEAD + "    loss.backward()\n"
        "    with torch.no_grad():\n        for p in model.parameters():\n"
        "            n = (p.grad * p.grad).sum().sqrt()\n"
        "            p.sub_(lr * p.grad * torch.clamp(max_norm / n, max=1.0))\n    return loss\n",
        # forgets zero_grad: the gradients of every step add up
        "def clipped_step(model, x, y, lr, max_norm):\n    loss = F.cross_entropy(model(x), y)\n"
        + _CLIP_NORM + "    scale = torch.clamp(max_norm / norm, max=1.0)\n"
        "    with torch.no_grad():\n        for p in model.parameters():\n            p.sub_(lr * p.grad * scale)\n"
        "    return loss\n",
        # returns the loss of a second forward pass, after the update
        _CLIP_HEAD + _CLIP_NORM + "    scale = torch.clamp(max_norm / norm, max=1.0)\n"
        "    with torch.no_grad():\n        for p in model.parameters():\n            p.sub_(lr * p.grad * scale)\n"
        "        return F.cross_entropy(model(x), y)\n",
    ],
    "ch4.reuse_cache": [
        # the learning rate is a tensor now, but batches with fewer rows are new shapes
        "def cached_sgd_step(model, x, y, lr):\n"
        "    x, y, lr = x.to('npu'), y.to('npu'), torch.tensor(lr)\n"
        "    model.zero_grad()\n"
        "    loss = F.cross_entropy(model(x), y)\n"
        "    loss.backward()\n"
        "    with torch.no_grad():\n        for p in model.parameters():\n            p.sub_(lr * p.grad)\n"
        "    return loss\n",
        # padded and masked, but the learning rate is still a Python float baked into the graph
        "def cached_sgd_step(model, x, y, lr):\n" + _PAD
        + "    loss = (ce * mask).sum() / mask.sum()\n    loss.backward()\n"
        "    with torch.no_grad():\n        for p in model.parameters():\n            p.sub_(lr * p.grad)\n"
        "    return loss\n",
        # padded, but the mean runs over the padding rows too
        "def cached_sgd_step(model, x, y, lr):\n" + _PAD
        + "    loss = ce.mean()\n    loss.backward()\n    lr = torch.tensor(lr)\n"
        "    with torch.no_grad():\n        for p in model.parameters():\n            p.sub_(lr * p.grad)\n"
        "    return loss\n",
        # masked, but divided by the Python row count: a number that changes with the batch
        "def cached_sgd_step(model, x, y, lr):\n" + _PAD
        + "    loss = (ce * mask).sum() / rows\n    loss.backward()\n    lr = torch.tensor(lr)\n"
        "    with torch.no_grad():\n        for p in model.parameters():\n            p.sub_(lr * p.grad)\n"
        "    return loss\n",
        # the learning rate made on the device with torch.full: its value is still an argument of the graph
        "def cached_sgd_step(model, x, y, lr):\n" + _PAD
        + "    loss = (ce * mask).sum() / mask.sum()\n    loss.backward()\n"
        "    lr = torch.full((), lr, device='npu')\n"
        "    with torch.no_grad():\n        for p in model.parameters():\n            p.sub_(lr * p.grad)\n"
        "    return loss\n",
        # the mask made on the device from the Python row count: the count is a constant of the graph
        "def cached_sgd_step(model, x, y, lr):\n    rows = x.shape[0]\n"
        "    xp = torch.zeros(BATCH, x.shape[1]); xp[:rows] = x\n"
        "    yp = torch.zeros(BATCH, dtype=y.dtype); yp[:rows] = y\n"
        "    xp, yp = xp.to('npu'), yp.to('npu')\n"
        "    mask = (torch.arange(BATCH, device='npu') < rows).float()\n    model.zero_grad()\n"
        "    ce = F.cross_entropy(model(xp), yp, reduction='none')\n"
        "    loss = (ce * mask).sum() / mask.sum()\n    loss.backward()\n    lr = torch.tensor(lr)\n"
        "    with torch.no_grad():\n        for p in model.parameters():\n            p.sub_(lr * p.grad)\n"
        "    return loss\n",
        # pads on the device with F.pad: the padding amount is a Python number that changes with the batch
        "def cached_sgd_step(model, x, y, lr):\n    rows = x.shape[0]\n"
        "    xp = F.pad(x.to('npu'), (0, 0, 0, BATCH - rows))\n    yp = F.pad(y.to('npu'), (0, BATCH - rows))\n"
        "    mask = (torch.arange(BATCH) < rows).float().to('npu')\n    model.zero_grad()\n"
        "    ce = F.cross_entropy(model(xp), yp, reduction='none')\n"
        "    loss = (ce * mask).sum() / mask.sum()\n    loss.backward()\n    lr = torch.tensor(lr)\n"
        "    with torch.no_grad():\n        for p in model.parameters():\n            p.sub_(lr * p.grad)\n"
        "    return loss\n",
        # masked, but divided by BATCH: a batch with fewer rows gets a smaller loss and smaller gradients
        "def cached_sgd_step(model, x, y, lr):\n" + _PAD
        + "    loss = (ce * mask).sum() / BATCH\n    loss.backward()\n    lr = torch.tensor(lr)\n"
        "    with torch.no_grad():\n        for p in model.parameters():\n            p.sub_(lr * p.grad)\n"
        "    return loss\n",
    ],
    "ch4.step_closures": [
        # reads the values in add(): each read is a sync point, a second graph in the step
        "class StepClosures:\n    def __init__(self):\n        self.ready = []\n"
        "    def add(self, fn, *tensors):\n        self.ready.append((fn, [t.cpu() for t in tensors]))\n"
        "    def mark_step(self):\n        lazy.mark_step()\n"
        "        for fn, values in self.ready:\n            fn(*values)\n        self.ready = []",
        # hands the lazy tensors themselves to the closures
        "class StepClosures:\n    def __init__(self):\n        self.pending = []\n"
        "    def add(self, fn, *tensors):\n        self.pending.append((fn, tensors))\n"
        "    def mark_step(self):\n        lazy.mark_step()\n"
        "        for fn, tensors in self.pending:\n            fn(*tensors)\n        self.pending = []",
        # never forgets: every closure runs again at every later mark_step
        "class StepClosures:\n    def __init__(self):\n        self.pending = []\n"
        "    def add(self, fn, *tensors):\n        self.pending.append((fn, tensors))\n"
        "    def mark_step(self):\n        lazy.mark_step()\n"
        "        for fn, tensors in self.pending:\n            fn(*[t.cpu() for t in tensors])",
        # last in, first out
        "class StepClosures:\n    def __init__(self):\n        self.pending = []\n"
        "    def add(self, fn, *tensors):\n        self.pending.append((fn, tensors))\n"
        "    def mark_step(self):\n        lazy.mark_step()\n"
        "        while self.pending:\n            fn, tensors = self.pending.pop()\n"
        "            fn(*[t.cpu() for t in tensors])",
        # passes only the first tensor
        "class StepClosures:\n    def __init__(self):\n        self.pending = []\n"
        "    def add(self, fn, *tensors):\n        self.pending.append((fn, tensors[0]))\n"
        "    def mark_step(self):\n        lazy.mark_step()\n"
        "        for fn, t in self.pending:\n            fn(t.cpu())\n        self.pending = []",
        # Python numbers instead of CPU tensors
        "class StepClosures:\n    def __init__(self):\n        self.pending = []\n"
        "    def add(self, fn, *tensors):\n        self.pending.append((fn, tensors))\n"
        "    def mark_step(self):\n        lazy.mark_step()\n"
        "        for fn, tensors in self.pending:\n            fn(*[t.item() for t in tensors])\n"
        "        self.pending = []",
        # copies the values with clone() after the graph ran: each clone is recorded, a second graph per step
        "class StepClosures:\n    def __init__(self):\n        self.pending = []\n"
        "    def add(self, fn, *tensors):\n        self.pending.append((fn, tensors))\n"
        "    def mark_step(self):\n        lazy.mark_step()\n"
        "        for fn, tensors in self.pending:\n            fn(*[t.clone().cpu() for t in tensors])\n"
        "        self.pending = []",
        # runs the closures first and the graph after: reading the values before mark_step is a sync of its own
        "class StepClosures:\n    def __init__(self):\n        self.pending = []\n"
        "    def add(self, fn, *tensors):\n        self.pending.append((fn, tensors))\n"
        "    def mark_step(self):\n"
        "        for fn, tensors in self.pending:\n            fn(*[t.cpu() for t in tensors])\n"
        "        self.pending = []\n        lazy.mark_step()",
        # runs the closures at the *next* mark_step (one step late)
        "class StepClosures:\n    def __init__(self):\n        self.pending, self.last = [], []\n"
        "    def add(self, fn, *tensors):\n        self.pending.append((fn, tensors))\n"
        "    def mark_step(self):\n        lazy.mark_step()\n"
        "        for fn, tensors in self.last:\n            fn(*[t.cpu() for t in tensors])\n"
        "        self.last, self.pending = self.pending, []",
    ],
}
