"""Plausible wrong answers to chapter 9's exercises (distributed training)."""

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
    ],
    "ch9.bucket_size": [
        # one bucket for everything: no overlap at all
        "def choose_bucket_mb(trace, world_size):\n"
        "    return trace.total_bytes / 2 ** 20 + 1",
        # one gradient per bucket: a latency per gradient
        "def choose_bucket_mb(trace, world_size):\n"
        "    return 1e-3",
        # PyTorch's default bucket_cap_mb
        "def choose_bucket_mb(trace, world_size):\n"
        "    return 25.0",
        # the size that was best for the public model, hard-coded
        "def choose_bucket_mb(trace, world_size):\n"
        "    return 16.0",
    ],
    "ch9.column_parallel": [
        # forgets the all-reduce: grad_x is only this rank's share
        "def column_parallel_forward(x, weight_shard, bias_shard):\n"
        "    return x @ weight_shard.T + bias_shard\n"
        "def column_parallel_backward(x, weight_shard, grad_y_shard, all_reduce):\n"
        "    return grad_y_shard @ weight_shard, grad_y_shard.T @ x, grad_y_shard.sum(0)",
        # all-reduces the weight gradient too: shards get summed across ranks (wrong shapes or values)
        "def column_parallel_forward(x, weight_shard, bias_shard):\n"
        "    return x @ weight_shard.T + bias_shard\n"
        "def column_parallel_backward(x, weight_shard, grad_y_shard, all_reduce):\n"
        "    return (all_reduce(grad_y_shard @ weight_shard), all_reduce(grad_y_shard.T @ x),\n"
        "            all_reduce(grad_y_shard.sum(0)))",
        # the weight gradient transposed (x.T @ grad_y)
        "def column_parallel_forward(x, weight_shard, bias_shard):\n"
        "    return x @ weight_shard.T + bias_shard\n"
        "def column_parallel_backward(x, weight_shard, grad_y_shard, all_reduce):\n"
        "    return all_reduce(grad_y_shard @ weight_shard), (x.T @ grad_y_shard).T.contiguous().T, "
        "grad_y_shard.sum(0)",
        # averages instead of summing the input gradient
        "def column_parallel_forward(x, weight_shard, bias_shard):\n"
        "    return x @ weight_shard.T + bias_shard\n"
        "def column_parallel_backward(x, weight_shard, grad_y_shard, all_reduce):\n"
        "    n = 2\n"
        "    return all_reduce(grad_y_shard @ weight_shard) / n, grad_y_shard.T @ x, grad_y_shard.sum(0)",
    ],
    "ch9.predict_time": [
        # ring all-reduce without the factor 2 (one pass around the ring)
        "def predict_us(op, nbytes, world_size, alpha_us, gbs, algorithm='ring'):\n"
        "    p = world_size\n"
        "    if p == 1:\n"
        "        return 0.0\n"
        "    beta = nbytes / (gbs * 1e3)\n"
        "    if op == 'broadcast':\n"
        "        return (p - 1) * alpha_us + beta\n"
        "    return (p - 1) * alpha_us + (p - 1) / p * beta",
        # bandwidth in bytes per second, time in seconds (units)
        "def predict_us(op, nbytes, world_size, alpha_us, gbs, algorithm='ring'):\n"
        "    import math\n"
        "    p = world_size\n"
        "    if p == 1:\n"
        "        return 0.0\n"
        "    beta = nbytes / (gbs * 1e9)\n"
        "    if op == 'allreduce':\n"
        "        if algorithm == 'tree':\n"
        "            return 2 * math.ceil(math.log2(p)) * alpha_us + 2 * beta\n"
        "        return 2 * (p - 1) * alpha_us + 2 * (p - 1) / p * beta\n"
        "    if op == 'broadcast':\n"
        "        return (p - 1) * alpha_us + beta\n"
        "    return (p - 1) * alpha_us + (p - 1) / p * beta",
        # tree depth log2(p) without rounding up, and broadcast like an all-gather
        "def predict_us(op, nbytes, world_size, alpha_us, gbs, algorithm='ring'):\n"
        "    import math\n"
        "    p = world_size\n"
        "    if p == 1:\n"
        "        return 0.0\n"
        "    beta = nbytes / (gbs * 1e3)\n"
        "    if op == 'allreduce':\n"
        "        if algorithm == 'tree':\n"
        "            return 2 * math.log2(p) * alpha_us + 2 * beta\n"
        "        return 2 * (p - 1) * alpha_us + 2 * (p - 1) / p * beta\n"
        "    return (p - 1) * alpha_us + (p - 1) / p * beta",
    ],
}
