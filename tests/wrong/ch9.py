"""Plausible wrong answers to chapter 9's exercises (distributed training)."""

_RING_CORE = (
    "def ring_allreduce(tensor, rank, world_size, send, recv):\n"
    "    flat = tensor.reshape(-1).clone()\n"
    "    chunks = list(torch.tensor_split(flat, world_size))\n"
    "    for step in range(world_size - 1):\n"
    "        i_send, i_recv = (rank - step) % world_size, (rank - step - 1) % world_size\n"
    "        send(chunks[i_send], (rank + 1) % world_size)\n"
    "        incoming = torch.empty_like(chunks[i_recv])\n"
    "        recv(incoming, (rank - 1) % world_size)\n"
    "        chunks[i_recv] += incoming\n"
    "    for step in range(world_size - 1):\n"
    "        i_send, i_recv = (rank - step + 1) % world_size, (rank - step) % world_size\n"
    "        send(chunks[i_send], (rank + 1) % world_size)\n"
    "        recv(chunks[i_recv], (rank - 1) % world_size)\n"
)

#: The solution's bucket class, with one piece replaced in each wrong answer below.
_BUCKETS = (
    "class GradBuckets:\n"
    "    def __init__(self, model, bucket_mb, all_reduce, world_size):\n"
    "        self.all_reduce, self.world_size = all_reduce, world_size\n"
    "        params = [p for p in model.parameters() if p.requires_grad]\n"
    "        cap = bucket_mb * 2 ** 20\n"
    "        self.buckets, current, size = [], [], 0\n"
    "        for p in reversed(params):\n"
    "            current.append(p)\n"
    "            size += p.numel() * p.element_size()\n"
    "            if size >= cap:\n"
    "                self.buckets.append(current)\n"
    "                current, size = [], 0\n"
    "        if current:\n"
    "            self.buckets.append(current)\n"
    "        self.bucket_of = {p: i for i, bucket in enumerate(self.buckets) for p in bucket}\n"
    "        for p in params:\n"
    "            p.register_post_accumulate_grad_hook(self._ready)\n"
    "        self._reset()\n"
    "    def _reset(self):\n"
    "        self.waiting = [len(b) for b in self.buckets]\n"
    "        self.started = []\n"
    "    def _ready(self, p):\n"
    "        i = self.bucket_of[p]\n"
    "        self.waiting[i] -= 1\n"
    "        if self.waiting[i] == 0:\n"
    "            flat = torch.cat([q.grad.reshape(-1) for q in self.buckets[i]])\n"
    "            self.started.append((i, flat, self.all_reduce(flat)))\n"
    "    def finish(self):\n"
    "        for i, flat, handle in self.started:\n"
    "            handle.wait()\n"
    "            flat /= self.world_size\n"
    "            offset = 0\n"
    "            for q in self.buckets[i]:\n"
    "                q.grad.copy_(flat[offset:offset + q.numel()].view_as(q))\n"
    "                offset += q.numel()\n"
    "        self._reset()\n"
)

_TP_FORWARD = (
    "def tp_mlp_forward(x, w1, b1, w2, b2, all_reduce):\n"
    "    h = torch.tanh(x @ w1.T + b1)\n"
    "    return all_reduce(h @ w2.T) + b2\n"
)
_TP_BACKWARD = (
    "def tp_mlp_backward(x, w1, b1, w2, grad_y, all_reduce):\n"
    "    h = torch.tanh(x @ w1.T + b1)\n"
    "    grad_a = (grad_y @ w2) * (1 - h * h)\n"
    "    return all_reduce(grad_a @ w1), grad_a.T @ x, grad_a.sum(0), grad_y.T @ h, grad_y.sum(0)\n"
)

_PREDICT = (
    "def predict_us(op, nbytes, world_size, alpha_us, gbs, algorithm='ring'):\n"
    "    import math\n"
    "    p = world_size\n"
    "    if p == 1:\n"
    "        return 0.0\n"
    "    beta = nbytes / (gbs * 1e3)\n"
    "    if op == 'allreduce':\n"
    "        ring = 2 * (p - 1) * alpha_us + 2 * (p - 1) / p * beta\n"
    "        tree = 2 * math.ceil(math.log2(p)) * alpha_us + 2 * beta\n"
    "        return {'ring': ring, 'tree': tree, 'auto': min(ring, tree)}[algorithm]\n"
    "    if op == 'broadcast':\n"
    "        return (p - 1) * alpha_us + beta\n"
    "    return (p - 1) * alpha_us + (p - 1) / p * beta\n"
)
_HIERARCHY = (
    "def hierarchical_allreduce_us(nbytes, nodes, per_node, intra, inter):\n"
    "    inside = predict_us('reduce_scatter', nbytes, per_node, *intra)\n"
    "    across = predict_us('allreduce', nbytes / per_node, nodes, *inter, algorithm='auto')\n"
    "    return inside + across + predict_us('allgather', nbytes, per_node, *intra)\n"
)

WRONG: dict[str, list[str]] = {
    "ch9.ring_allreduce": [
        # every rank sends its whole tensor to every other rank: right sum, N-1 peers, (N-1)·size per rank
        "def ring_allreduce(tensor, rank, world_size, send, recv):\n"
        "    for peer in range(world_size):\n"
        "        if peer != rank:\n"
        "            send(tensor, peer)\n"
        "    total = tensor.clone()\n"
        "    for peer in range(world_size):\n"
        "        if peer != rank:\n"
        "            other = torch.empty_like(tensor)\n"
        "            recv(other, peer)\n"
        "            total += other\n"
        "    return total",
        # passes the whole tensor around the ring N-1 times: right sum, N-1 times the bytes of a chunk ring
        "def ring_allreduce(tensor, rank, world_size, send, recv):\n"
        "    total, passing = tensor.clone(), tensor.clone()\n"
        "    for _ in range(world_size - 1):\n"
        "        send(passing, (rank + 1) % world_size)\n"
        "        passing = torch.empty_like(tensor)\n"
        "        recv(passing, (rank - 1) % world_size)\n"
        "        total += passing\n"
        "    return total",
        # the reduce-scatter only: each rank ends with one finished chunk, the rest partial
        "def ring_allreduce(tensor, rank, world_size, send, recv):\n"
        "    flat = tensor.reshape(-1).clone()\n"
        "    chunks = list(torch.tensor_split(flat, world_size))\n"
        "    for step in range(world_size - 1):\n"
        "        i_send, i_recv = (rank - step) % world_size, (rank - step - 1) % world_size\n"
        "        send(chunks[i_send], (rank + 1) % world_size)\n"
        "        incoming = torch.empty_like(chunks[i_recv])\n"
        "        recv(incoming, (rank - 1) % world_size)\n"
        "        chunks[i_recv] += incoming\n"
        "    return flat.reshape(tensor.shape)",
        # chunks of size // world_size: the remainder elements are never reduced (uneven sizes)
        "def ring_allreduce(tensor, rank, world_size, send, recv):\n"
        "    flat = tensor.reshape(-1).clone()\n"
        "    n = flat.numel() // world_size\n"
        "    chunks = [flat[i * n:(i + 1) * n] for i in range(world_size)]\n"
        "    for step in range(world_size - 1):\n"
        "        i_send, i_recv = (rank - step) % world_size, (rank - step - 1) % world_size\n"
        "        send(chunks[i_send], (rank + 1) % world_size)\n"
        "        incoming = torch.empty_like(chunks[i_recv])\n"
        "        recv(incoming, (rank - 1) % world_size)\n"
        "        chunks[i_recv] += incoming\n"
        "    for step in range(world_size - 1):\n"
        "        i_send, i_recv = (rank - step + 1) % world_size, (rank - step) % world_size\n"
        "        send(chunks[i_send], (rank + 1) % world_size)\n"
        "        recv(chunks[i_recv], (rank - 1) % world_size)\n"
        "    return flat.reshape(tensor.shape)",
        # torch.chunk instead of tensor_split: 3 elements over 4 ranks make only 3 chunks (an IndexError)
        _RING_CORE.replace("list(torch.tensor_split(flat, world_size))", "list(torch.chunk(flat, world_size))")
        + "    return flat.reshape(tensor.shape)",
        # forgets to put the shape back: a (2, 13) tensor comes back flat, a 0-d one with one dimension
        _RING_CORE + "    return flat",
        # incoming chunks in the default dtype: a float64 tensor is received into float32 buffers
        _RING_CORE.replace("torch.empty_like(chunks[i_recv])",
                           "torch.empty(chunks[i_recv].numel(), device='npu')")
        + "    return flat.reshape(tensor.shape)",
        # hands back a CPU copy of the sum
        _RING_CORE + "    return flat.reshape(tensor.shape).cpu()",
    ],
    "ch9.grad_buckets": [
        # one all-reduce per gradient, no buckets
        _BUCKETS.replace("            if size >= cap:\n", "            if True:\n"),
        # the bucket closes before the gradient that would pass the cap (fills up to the cap, never past it)
        _BUCKETS.replace(
            "            current.append(p)\n"
            "            size += p.numel() * p.element_size()\n"
            "            if size >= cap:\n"
            "                self.buckets.append(current)\n"
            "                current, size = [], 0\n",
            "            n = p.numel() * p.element_size()\n"
            "            if current and size + n > cap:\n"
            "                self.buckets.append(current)\n"
            "                current, size = [], 0\n"
            "            current.append(p)\n"
            "            size += n\n"),
        # buckets in the order of model.parameters() (the first layer first)
        _BUCKETS.replace("for p in reversed(params):", "for p in params:"),
        # every parameter, frozen ones too: the bucket holding the frozen layer never completes
        _BUCKETS.replace("params = [p for p in model.parameters() if p.requires_grad]",
                         "params = list(model.parameters())"),
        # sums instead of averaging
        _BUCKETS.replace("            flat /= self.world_size\n", ""),
        # never resets after a step: the second step's counters run below zero, the first step's buckets come back
        "".join(_BUCKETS.rsplit("        self._reset()\n", 1)),
        # waits for each bucket's all-reduce inside the hook: right gradients, no overlap
        _BUCKETS.replace("            self.started.append((i, flat, self.all_reduce(flat)))\n",
                         "            handle = self.all_reduce(flat)\n"
                         "            handle.wait()\n"
                         "            self.started.append((i, flat, handle))\n"),
        # the hooks only collect; finish() starts and waits for every bucket's all-reduce after the backward
        _BUCKETS.replace("            self.started.append((i, flat, self.all_reduce(flat)))\n",
                         "            self.started.append((i, flat, None))\n")
        .replace("        for i, flat, handle in self.started:\n            handle.wait()\n",
                 "        for i, flat, _ in self.started:\n            self.all_reduce(flat).wait()\n"),
        # buckets filled in the order the gradients arrive, the last (partial) one sent from finish()
        "class GradBuckets:\n"
        "    def __init__(self, model, bucket_mb, all_reduce, world_size):\n"
        "        self.cap, self.all_reduce, self.world_size = bucket_mb * 2 ** 20, all_reduce, world_size\n"
        "        for p in model.parameters():\n"
        "            if p.requires_grad:\n"
        "                p.register_post_accumulate_grad_hook(self._ready)\n"
        "        self.open, self.size, self.started = [], 0, []\n"
        "    def _send(self):\n"
        "        flat = torch.cat([q.grad.reshape(-1) for q in self.open])\n"
        "        self.started.append((self.open, flat, self.all_reduce(flat)))\n"
        "        self.open, self.size = [], 0\n"
        "    def _ready(self, p):\n"
        "        self.open.append(p)\n"
        "        self.size += p.numel() * p.element_size()\n"
        "        if self.size >= self.cap:\n"
        "            self._send()\n"
        "    def finish(self):\n"
        "        if self.open:\n"
        "            self._send()\n"
        "        for params, flat, handle in self.started:\n"
        "            handle.wait()\n"
        "            flat /= self.world_size\n"
        "            offset = 0\n"
        "            for q in params:\n"
        "                q.grad.copy_(flat[offset:offset + q.numel()].view_as(q))\n"
        "                offset += q.numel()\n"
        "        self.started = []",
    ],
    "ch9.tp_mlp": [
        # b2 added on every rank before the all-reduce: the sum adds it world_size times
        "def tp_mlp_forward(x, w1, b1, w2, b2, all_reduce):\n"
        "    h = torch.tanh(x @ w1.T + b1)\n"
        "    return all_reduce(h @ w2.T + b2)\n" + _TP_BACKWARD,
        # forgets the backward's all-reduce: grad_x is this rank's share only
        _TP_FORWARD + _TP_BACKWARD.replace("all_reduce(grad_a @ w1)", "grad_a @ w1"),
        # all-reduces every gradient "to be safe": shards summed over the ranks, and four all-reduces too many
        _TP_FORWARD
        + "def tp_mlp_backward(x, w1, b1, w2, grad_y, all_reduce):\n"
          "    h = torch.tanh(x @ w1.T + b1)\n"
          "    grad_a = (grad_y @ w2) * (1 - h * h)\n"
          "    return (all_reduce(grad_a @ w1), grad_a.T @ x, grad_a.sum(0), grad_y.T @ h,\n"
          "            all_reduce(grad_y.sum(0)) / 1)\n",
        # tanh's derivative taken at the pre-activation a instead of the output h
        _TP_FORWARD
        + "def tp_mlp_backward(x, w1, b1, w2, grad_y, all_reduce):\n"
          "    a = x @ w1.T + b1\n"
          "    h = torch.tanh(a)\n"
          "    grad_a = (grad_y @ w2) * (1 - a * a)\n"
          "    return all_reduce(grad_a @ w1), grad_a.T @ x, grad_a.sum(0), grad_y.T @ h, grad_y.sum(0)\n",
        # autograd in the backward: the block run again with requires_grad, torch.autograd.grad
        _TP_FORWARD
        + "def tp_mlp_backward(x, w1, b1, w2, grad_y, all_reduce):\n"
          "    x, w1, b1, w2 = (t.detach().requires_grad_(True) for t in (x, w1, b1, w2))\n"
          "    b2 = torch.zeros(grad_y.shape[1], device=grad_y.device, requires_grad=True)\n"
          "    y = torch.tanh(x @ w1.T + b1) @ w2.T + b2\n"
          "    gx, gw1, gb1, gw2, gb2 = torch.autograd.grad(y, (x, w1, b1, w2, b2), grad_y)\n"
          "    return all_reduce(gx), gw1, gb1, gw2, gb2\n",
        # the bias gradient of fc2 divided among the ranks (it is whole on every rank)
        _TP_FORWARD
        + "def tp_mlp_backward(x, w1, b1, w2, grad_y, all_reduce):\n"
          "    h = torch.tanh(x @ w1.T + b1)\n"
          "    grad_a = (grad_y @ w2) * (1 - h * h)\n"
          "    n = all_reduce(torch.ones(1, device=x.device)).item()\n"
          "    return all_reduce(grad_a @ w1), grad_a.T @ x, grad_a.sum(0), grad_y.T @ h, grad_y.sum(0) / n\n",
    ],
    "ch9.predict_time": [
        # ring all-reduce without the factor 2 (one pass around the ring)
        _PREDICT.replace("        ring = 2 * (p - 1) * alpha_us + 2 * (p - 1) / p * beta\n",
                         "        ring = (p - 1) * alpha_us + (p - 1) / p * beta\n") + _HIERARCHY,
        # bandwidth in bytes per second, time in seconds (units)
        _PREDICT.replace("beta = nbytes / (gbs * 1e3)", "beta = nbytes / (gbs * 1e9)") + _HIERARCHY,
        # tree depth log2(p) without rounding up
        _PREDICT.replace("math.ceil(math.log2(p))", "math.log2(p)") + _HIERARCHY,
        # no special case for one rank: a broadcast or a tree of one rank still pays n/β
        _PREDICT.replace("    if p == 1:\n        return 0.0\n", "") + _HIERARCHY,
        # 'auto' taken as the ring
        _PREDICT.replace("'auto': min(ring, tree)", "'auto': ring") + _HIERARCHY,
        # the simulator's own formulas, called instead of worked out
        "from npu_lab.distributed import cost as _cost\n"
        "def predict_us(op, nbytes, world_size, alpha_us, gbs, algorithm='ring'):\n"
        "    link = _cost.Link(alpha_us, gbs)\n"
        "    if algorithm == 'auto':\n"
        "        algorithm = _cost.choose_algorithm(nbytes, world_size, link)\n"
        "    return _cost.collective_us(op, nbytes, world_size, link, algorithm)\n" + _HIERARCHY,
        # two-level: the whole buffer all-reduced across the nodes (not each rank's 1/per_node shard)
        _PREDICT + _HIERARCHY.replace("nbytes / per_node", "nbytes"),
        # two-level: the ring across the nodes, whatever the size
        _PREDICT + _HIERARCHY.replace("algorithm='auto'", "algorithm='ring'"),
        # two-level: a full all-reduce inside the node, then across the nodes (no reduce-scatter/all-gather split)
        _PREDICT
        + "def hierarchical_allreduce_us(nbytes, nodes, per_node, intra, inter):\n"
          "    return (predict_us('allreduce', nbytes, per_node, *intra, algorithm='auto')\n"
          "            + predict_us('allreduce', nbytes, nodes, *inter, algorithm='auto'))\n",
    ],
}
