"""Plausible wrong answers to the NPU puzzles (P1): wrong values, right values over the cost budget, and right
values from a kernel that breaks how the work is split between blocks.

``WRONG[id]`` lists them all (the exercise tests run each and expect it to fail with a hint);
``OVER_BUDGET[id]`` holds the ones whose values are right but which move too many bytes (or need too
much scratchpad), so the puzzle tests can check that the cost feedback is what fails them;
``RULES[id]`` the ones whose values are right and whose bytes may be within the budget, but where a block
stores outside its part of the output, stores an element twice, or uses input it never loaded itself
(kept in Python between blocks): the puzzle tests check that the parts rule is what fails them.
A kernel may use the other puzzles' kernels by name, as in the notebook.
"""

VALUES: dict[str, list[str]] = {
    "p1.map": [
        # adds 1, not 10
        "def map_kernel(ctx, x, out, n, B):\n"
        "    offs = ctx.program_id(0) * B + ctx.arange(B)\n"
        "    ctx.store(out, offs, ctx.load(x, offs) + 1.0)",
        # every block writes the first tile
        "def map_kernel(ctx, x, out, n, B):\n"
        "    offs = ctx.arange(B)\n"
        "    ctx.store(out, offs, ctx.load(x, offs) + 10.0)",
    ],
    "p1.zip": [
        "def zip_kernel(ctx, x, y, out, n, B):\n"
        "    offs = ctx.program_id(0) * B + ctx.arange(B)\n"
        "    ctx.store(out, offs, ctx.load(x, offs) * ctx.load(y, offs))",
    ],
    "p1.outer": [
        # transposed: out[i, j] addressed as i + j * n
        "def outer_kernel(ctx, x, y, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    cols = ctx.program_id(1) * B1 + ctx.arange(B1)\n"
        "    ctx.store(out, rows[:, None] + cols[None, :] * n, ctx.load(x, rows)[:, None] + ctx.load(y,"
        " cols)[None, :])",
    ],
    "p1.relu2d": [
        # an off-by-one mask: row n is let through
        "def relu2d_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    cols = ctx.program_id(1) * B1 + ctx.arange(B1)\n"
        "    offs = rows[:, None] * m + cols[None, :]\n"
        "    mask = (rows[:, None] <= n) & (cols[None, :] < m)\n"
        "    ctx.store(out, offs, ctx.maximum(ctx.load(x, offs, mask), 0.0), mask)",
        # no mask at all: out of bounds
        "def relu2d_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    cols = ctx.program_id(1) * B1 + ctx.arange(B1)\n"
        "    offs = rows[:, None] * m + cols[None, :]\n"
        "    ctx.store(out, offs, ctx.maximum(ctx.load(x, offs), 0.0))",
    ],
    "p1.rowsum": [
        # only the first column tile
        "def rowsum_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    cols = ctx.arange(B1)\n"
        "    mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "    ctx.store(out, rows, ctx.load(x, rows[:, None] * m + cols[None, :], mask).sum(axis=1), rows < n)",
    ],
    "p1.cumsum": [
        # forgets the carry between column tiles
        "def cumsum_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        offs = rows[:, None] * m + cols[None, :]\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        ctx.store(out, offs, ctx.load(x, offs, mask).cumsum(axis=1), mask)",
        # the carry updated before the store: each tile adds its own sum too
        "def cumsum_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    carry = ctx.zeros(B0)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        offs = rows[:, None] * m + cols[None, :]\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        t = ctx.load(x, offs, mask)\n"
        "        carry += t.sum(axis=1)\n"
        "        ctx.store(out, offs, t.cumsum(axis=1) + carry[:, None], mask)",
    ],
    "p1.softmax": [
        # no max subtracted: large logits overflow
        "def softmax_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    total = ctx.zeros(B0)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        total += ctx.load(x, rows[:, None] * m + cols[None, :], mask, -math.inf).exp().sum(axis=1)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        offs = rows[:, None] * m + cols[None, :]\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        ctx.store(out, offs, ctx.load(x, offs, mask).exp() / total[:, None], mask)",
        # the max of the first column tile only: right for logits of moderate spread, overflows on a wide one
        "def softmax_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    cols = ctx.arange(B1)\n"
        "    mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "    row_max = ctx.load(x, rows[:, None] * m + cols[None, :], mask, -math.inf).max(axis=1)\n"
        "    total = ctx.zeros(B0)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        t = ctx.load(x, rows[:, None] * m + cols[None, :], mask, -math.inf)\n"
        "        total += (t - row_max[:, None]).exp().sum(axis=1)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        offs = rows[:, None] * m + cols[None, :]\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        t = ctx.load(x, offs, mask, -math.inf)\n"
        "        ctx.store(out, offs, (t - row_max[:, None]).exp() / total[:, None], mask)",
    ],
    "p1.online_softmax": [
        # forgets to rescale the running sum when the max grows
        "def online_softmax_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    row_max = ctx.full(B0, -math.inf)\n"
        "    total = ctx.zeros(B0)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        t = ctx.load(x, rows[:, None] * m + cols[None, :], mask, -math.inf)\n"
        "        row_max = ctx.maximum(row_max, t.max(axis=1))\n"
        "        total += (t - row_max[:, None]).exp().sum(axis=1)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        offs = rows[:, None] * m + cols[None, :]\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        t = ctx.load(x, offs, mask, -math.inf)\n"
        "        ctx.store(out, offs, (t - row_max[:, None]).exp() / total[:, None], mask)",
        # the rescale factor upside down: exp(new_max - old_max)
        "def online_softmax_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    row_max = ctx.full(B0, -math.inf)\n"
        "    total = ctx.zeros(B0)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        t = ctx.load(x, rows[:, None] * m + cols[None, :], mask, -math.inf)\n"
        "        new_max = ctx.maximum(row_max, t.max(axis=1))\n"
        "        total = total * ctx.where(row_max > -math.inf, (new_max - row_max).exp(), 0.0)"
        " + (t - new_max[:, None]).exp().sum(axis=1)\n"
        "        row_max = new_max\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        offs = rows[:, None] * m + cols[None, :]\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        t = ctx.load(x, offs, mask, -math.inf)\n"
        "        ctx.store(out, offs, (t - row_max[:, None]).exp() / total[:, None], mask)",
    ],
    "p1.layernorm": [
        # the padded columns are not zeroed before the variance
        "def layernorm_kernel(ctx, x, w, b, out, n, m, eps, R, BM):\n"
        "    rows = ctx.program_id(0) * R + ctx.arange(R)\n"
        "    cols = ctx.arange(BM)\n"
        "    offs = rows[:, None] * m + cols[None, :]\n"
        "    mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "    t = ctx.load(x, offs, mask)\n"
        "    xc = t - (t.sum(axis=1) / m)[:, None]\n"
        "    rstd = 1.0 / ((xc * xc).sum(axis=1) / m + eps).sqrt()\n"
        "    ws = ctx.load(w, cols, cols < m)\n"
        "    bs = ctx.load(b, cols, cols < m)\n"
        "    ctx.store(out, offs, xc * rstd[:, None] * ws[None, :] + bs[None, :], mask)",
        # eps left out: right whenever the variance is far above eps
        "def layernorm_kernel(ctx, x, w, b, out, n, m, eps, R, BM):\n"
        "    rows = ctx.program_id(0) * R + ctx.arange(R)\n"
        "    cols = ctx.arange(BM)\n"
        "    offs = rows[:, None] * m + cols[None, :]\n"
        "    mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "    t = ctx.load(x, offs, mask)\n"
        "    mean = t.sum(axis=1) / m\n"
        "    xc = ctx.where(mask, t - mean[:, None], 0.0)\n"
        "    del t\n"
        "    rstd = 1.0 / ((xc * xc).sum(axis=1) / m).sqrt()\n"
        "    ws = ctx.load(w, cols, cols < m)\n"
        "    bs = ctx.load(b, cols, cols < m)\n"
        "    ctx.store(out, offs, xc * rstd[:, None] * ws[None, :] + bs[None, :], mask)",
        # eps added outside the square root
        "def layernorm_kernel(ctx, x, w, b, out, n, m, eps, R, BM):\n"
        "    rows = ctx.program_id(0) * R + ctx.arange(R)\n"
        "    cols = ctx.arange(BM)\n"
        "    offs = rows[:, None] * m + cols[None, :]\n"
        "    mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "    t = ctx.load(x, offs, mask)\n"
        "    mean = t.sum(axis=1) / m\n"
        "    xc = ctx.where(mask, t - mean[:, None], 0.0)\n"
        "    del t\n"
        "    rstd = 1.0 / (((xc * xc).sum(axis=1) / m).sqrt() + eps)\n"
        "    ws = ctx.load(w, cols, cols < m)\n"
        "    bs = ctx.load(b, cols, cols < m)\n"
        "    ctx.store(out, offs, xc * rstd[:, None] * ws[None, :] + bs[None, :], mask)",
        # a one-pass variance, mean of squares minus the squared mean: rounding eats it on rows of nearly equal values
        "def layernorm_kernel(ctx, x, w, b, out, n, m, eps, R, BM):\n"
        "    rows = ctx.program_id(0) * R + ctx.arange(R)\n"
        "    cols = ctx.arange(BM)\n"
        "    offs = rows[:, None] * m + cols[None, :]\n"
        "    mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "    t = ctx.load(x, offs, mask)\n"
        "    mean = t.sum(axis=1) / m\n"
        "    var = (t * t).sum(axis=1) / m - mean * mean\n"
        "    rstd = 1.0 / (var + eps).sqrt()\n"
        "    ws = ctx.load(w, cols, cols < m)\n"
        "    bs = ctx.load(b, cols, cols < m)\n"
        "    ctx.store(out, offs, (t - mean[:, None]) * rstd[:, None] * ws[None, :] + bs[None, :], mask)",
    ],
    "p1.matmul": [
        # K not masked: reads past the end of each row of a
        "def matmul_kernel(ctx, a, b, out, M, N, K, BM, BN, BK):\n"
        "    rows = ctx.program_id(0) * BM + ctx.arange(BM)\n"
        "    cols = ctx.program_id(1) * BN + ctx.arange(BN)\n"
        "    ks = ctx.arange(BK)\n"
        "    at = ctx.load(a, rows[:, None] * K + ks[None, :], rows[:, None] < M)\n"
        "    bt = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))\n"
        "    ctx.store(out, rows[:, None] * N + cols[None, :], ctx.dot(at, bt), (rows[:, None] < M) &"
        " (cols[None, :] < N))",
        # the rows of out addressed with M columns (right only for square products)
        "def matmul_kernel(ctx, a, b, out, M, N, K, BM, BN, BK):\n"
        "    rows = ctx.program_id(0) * BM + ctx.arange(BM)\n"
        "    cols = ctx.program_id(1) * BN + ctx.arange(BN)\n"
        "    ks = ctx.arange(BK)\n"
        "    at = ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K))\n"
        "    bt = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))\n"
        "    ctx.store(out, rows[:, None] * M + cols[None, :], ctx.dot(at, bt), (rows[:, None] < M) &"
        " (cols[None, :] < N))",
    ],
    "p1.matmul_tiled": [
        # only the first K slice
        "def matmul_tiled_kernel(ctx, a, b, out, M, N, K, BM, BN, BK):\n"
        "    rows = ctx.program_id(0) * BM + ctx.arange(BM)\n"
        "    cols = ctx.program_id(1) * BN + ctx.arange(BN)\n"
        "    ks = ctx.arange(BK)\n"
        "    at = ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K))\n"
        "    bt = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))\n"
        "    ctx.store(out, rows[:, None] * N + cols[None, :], ctx.dot(at, bt), (rows[:, None] < M) &"
        " (cols[None, :] < N))",
        # the accumulator made by the first slice's product: there is none when K is 0
        "def matmul_tiled_kernel(ctx, a, b, out, M, N, K, BM, BN, BK):\n"
        "    rows = ctx.program_id(0) * BM + ctx.arange(BM)\n"
        "    cols = ctx.program_id(1) * BN + ctx.arange(BN)\n"
        "    acc = None\n"
        "    for k0 in range(0, K, BK):\n"
        "        ks = k0 + ctx.arange(BK)\n"
        "        at = ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K))\n"
        "        bt = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))\n"
        "        acc = ctx.dot(at, bt) if acc is None else ctx.dot(at, bt, acc=acc)\n"
        "    ctx.store(out, rows[:, None] * N + cols[None, :], acc, (rows[:, None] < M) & (cols[None, :] < N))",
    ],
    "p1.conv1d": [
        # the kernel flipped (a true convolution, not torch's cross-correlation)
        "def conv1d_kernel(ctx, x, w, out, n, k, B, BK):\n"
        "    start = ctx.program_id(0) * B\n"
        "    offs = start + ctx.arange(B + BK)\n"
        "    xs = ctx.load(x, offs, (offs < n) & (offs < start + B + k - 1))\n"
        "    ws = ctx.load(w, ctx.arange(BK), ctx.arange(BK) < k)\n"
        "    acc = ctx.zeros(B)\n"
        "    for j in range(k):\n"
        "        acc += xs[j:j + B] * ws[k - 1 - j]\n"
        "    outs = start + ctx.arange(B)\n"
        "    ctx.store(out, outs, acc, outs < n - k + 1)",
        # the output mask as the input's (outs < n): the last block writes past the end of out
        "def conv1d_kernel(ctx, x, w, out, n, k, B, BK):\n"
        "    start = ctx.program_id(0) * B\n"
        "    offs = start + ctx.arange(B + BK)\n"
        "    xs = ctx.load(x, offs, (offs < n) & (offs < start + B + k - 1))\n"
        "    ws = ctx.load(w, ctx.arange(BK), ctx.arange(BK) < k)\n"
        "    acc = ctx.zeros(B)\n"
        "    for j in range(k):\n"
        "        acc += xs[j:j + B] * ws[j]\n"
        "    outs = start + ctx.arange(B)\n"
        "    ctx.store(out, outs, acc, outs < n)",
    ],
    "p1.attention": [
        # forgets the 1/sqrt(d) scale
        "def attention_kernel(ctx, q, k, v, out, n, m, d, BQ, BKV, BD):\n"
        "    rows = ctx.program_id(0) * BQ + ctx.arange(BQ)\n"
        "    dims = ctx.arange(BD)\n"
        "    qt = ctx.load(q, rows[:, None] * d + dims[None, :], (rows[:, None] < n) & (dims[None, :] < d))\n"
        "    row_max = ctx.full(BQ, -math.inf)\n"
        "    total = ctx.zeros(BQ)\n"
        "    acc = ctx.zeros((BQ, BD))\n"
        "    for k0 in range(0, m, BKV):\n"
        "        keys = k0 + ctx.arange(BKV)\n"
        "        kv_mask = (keys[:, None] < m) & (dims[None, :] < d)\n"
        "        s = ctx.where(keys[None, :] < m, ctx.dot(qt, ctx.load(k, keys[:, None] * d + dims[None,"
        " :], kv_mask).T),"
        " -math.inf)\n"
        "        new_max = ctx.maximum(row_max, s.max(axis=1))\n"
        "        alpha = (row_max - new_max).exp()\n"
        "        p = (s - new_max[:, None]).exp()\n"
        "        total = total * alpha + p.sum(axis=1)\n"
        "        acc = acc * alpha[:, None] + ctx.dot(p, ctx.load(v, keys[:, None] * d + dims[None, :], kv_mask))\n"
        "        row_max = new_max\n"
        "    ctx.store(out, rows[:, None] * d + dims[None, :], acc / total[:, None], (rows[:, None] < n) &"
        " (dims[None, :] < d))",
        # scaled by 1/sqrt(BD), the tile's width, not 1/sqrt(d): the same whenever d is a power of two
        "def attention_kernel(ctx, q, k, v, out, n, m, d, BQ, BKV, BD):\n"
        "    rows = ctx.program_id(0) * BQ + ctx.arange(BQ)\n"
        "    dims = ctx.arange(BD)\n"
        "    qt = ctx.load(q, rows[:, None] * d + dims[None, :], (rows[:, None] < n) & (dims[None, :] < d))\n"
        "    scale = 1.0 / math.sqrt(BD)\n"
        "    row_max = ctx.full(BQ, -math.inf)\n"
        "    total = ctx.zeros(BQ)\n"
        "    acc = ctx.zeros((BQ, BD))\n"
        "    for k0 in range(0, m, BKV):\n"
        "        keys = k0 + ctx.arange(BKV)\n"
        "        kv_mask = (keys[:, None] < m) & (dims[None, :] < d)\n"
        "        kt = ctx.load(k, keys[:, None] * d + dims[None, :], kv_mask)\n"
        "        s = ctx.where(keys[None, :] < m, ctx.dot(qt, kt.T) * scale, -math.inf)\n"
        "        new_max = ctx.maximum(row_max, s.max(axis=1))\n"
        "        alpha = (row_max - new_max).exp()\n"
        "        p = (s - new_max[:, None]).exp()\n"
        "        total = total * alpha + p.sum(axis=1)\n"
        "        vt = ctx.load(v, keys[:, None] * d + dims[None, :], kv_mask)\n"
        "        acc = acc * alpha[:, None] + ctx.dot(p, vt)\n"
        "        row_max = new_max\n"
        "    ctx.store(out, rows[:, None] * d + dims[None, :], acc / total[:, None], (rows[:, None] < n) &"
        " (dims[None, :] < d))",
        # no mask on the columns d..BD of q, k and v (only on the rows): fine while d is a power of two
        "def attention_kernel(ctx, q, k, v, out, n, m, d, BQ, BKV, BD):\n"
        "    rows = ctx.program_id(0) * BQ + ctx.arange(BQ)\n"
        "    dims = ctx.arange(BD)\n"
        "    qt = ctx.load(q, rows[:, None] * d + dims[None, :], rows[:, None] < n)\n"
        "    scale = 1.0 / math.sqrt(d)\n"
        "    row_max = ctx.full(BQ, -math.inf)\n"
        "    total = ctx.zeros(BQ)\n"
        "    acc = ctx.zeros((BQ, BD))\n"
        "    for k0 in range(0, m, BKV):\n"
        "        keys = k0 + ctx.arange(BKV)\n"
        "        kv_mask = keys[:, None] < m\n"
        "        kt = ctx.load(k, keys[:, None] * d + dims[None, :], kv_mask)\n"
        "        s = ctx.where(keys[None, :] < m, ctx.dot(qt, kt.T) * scale, -math.inf)\n"
        "        new_max = ctx.maximum(row_max, s.max(axis=1))\n"
        "        alpha = (row_max - new_max).exp()\n"
        "        p = (s - new_max[:, None]).exp()\n"
        "        total = total * alpha + p.sum(axis=1)\n"
        "        vt = ctx.load(v, keys[:, None] * d + dims[None, :], kv_mask)\n"
        "        acc = acc * alpha[:, None] + ctx.dot(p, vt)\n"
        "        row_max = new_max\n"
        "    ctx.store(out, rows[:, None] * d + dims[None, :], acc / total[:, None], (rows[:, None] < n) &"
        " (dims[None, :] < d))",
    ],
    "p1.linear_relu": [
        # the ReLU before the bias
        "def linear_relu_kernel(ctx, a, b, bias, out, M, N, K, BM, BN, BK):\n"
        "    rows = ctx.program_id(0) * BM + ctx.arange(BM)\n"
        "    cols = ctx.program_id(1) * BN + ctx.arange(BN)\n"
        "    acc = ctx.zeros((BM, BN))\n"
        "    for k0 in range(0, K, BK):\n"
        "        ks = k0 + ctx.arange(BK)\n"
        "        at = ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K))\n"
        "        bt = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))\n"
        "        ctx.dot(at, bt, acc=acc)\n"
        "    res = ctx.maximum(acc, 0.0) + ctx.load(bias, cols, cols < N)[None, :]\n"
        "    ctx.store(out, rows[:, None] * N + cols[None, :], res, (rows[:, None] < M) & (cols[None, :] < N))",
        # the epilogue inside the K loop, applied to every partial sum
        "def linear_relu_kernel(ctx, a, b, bias, out, M, N, K, BM, BN, BK):\n"
        "    rows = ctx.program_id(0) * BM + ctx.arange(BM)\n"
        "    cols = ctx.program_id(1) * BN + ctx.arange(BN)\n"
        "    bias_row = ctx.load(bias, cols, cols < N)\n"
        "    acc = ctx.zeros((BM, BN))\n"
        "    for k0 in range(0, K, BK):\n"
        "        ks = k0 + ctx.arange(BK)\n"
        "        at = ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K))\n"
        "        bt = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))\n"
        "        acc = ctx.maximum(ctx.dot(at, bt, acc=acc) + bias_row[None, :], 0.0)\n"
        "    ctx.store(out, rows[:, None] * N + cols[None, :], acc, (rows[:, None] < M) & (cols[None, :] < N))",
        # the accumulator made by the first slice's product: with K = 0 there is none to add the bias to
        "def linear_relu_kernel(ctx, a, b, bias, out, M, N, K, BM, BN, BK):\n"
        "    rows = ctx.program_id(0) * BM + ctx.arange(BM)\n"
        "    cols = ctx.program_id(1) * BN + ctx.arange(BN)\n"
        "    acc = None\n"
        "    for k0 in range(0, K, BK):\n"
        "        ks = k0 + ctx.arange(BK)\n"
        "        at = ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K))\n"
        "        bt = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))\n"
        "        acc = ctx.dot(at, bt) if acc is None else ctx.dot(at, bt, acc=acc)\n"
        "    acc += ctx.load(bias, cols, cols < N)[None, :]\n"
        "    ctx.store(out, rows[:, None] * N + cols[None, :], ctx.maximum(acc, 0.0), (rows[:, None] < M) &"
        " (cols[None, :] < N))",
    ],
}

OVER_BUDGET: dict[str, list[str]] = {
    "p1.map": [
        # loads x twice
        "def map_kernel(ctx, x, out, n, B):\n"
        "    offs = ctx.program_id(0) * B + ctx.arange(B)\n"
        "    ctx.store(out, offs, ctx.load(x, offs) + ctx.load(x, offs) - ctx.load(x, offs) + 10.0)",
    ],
    "p1.zip": [
        # stores, then reads its own output back and stores again
        "def zip_kernel(ctx, x, y, out, n, B):\n"
        "    offs = ctx.program_id(0) * B + ctx.arange(B)\n"
        "    ctx.store(out, offs, ctx.load(x, offs))\n"
        "    ctx.store(out, offs, ctx.load(out, offs) + ctx.load(y, offs))",
    ],
    "p1.outer": [
        # loads y again for every row of the tile
        "def outer_kernel(ctx, x, y, out, n, m, B0, B1):\n"
        "    cols = ctx.program_id(1) * B1 + ctx.arange(B1)\n"
        "    for r in range(B0):\n"
        "        i = ctx.program_id(0) * B0 + r\n"
        "        ctx.store(out, i * m + cols, ctx.load(x, i + 0 * cols) + ctx.load(y, cols))",
    ],
    "p1.relu2d": [
        # masks the flat offset only: columns >= m read (and write) the next row's elements again
        "def relu2d_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    cols = ctx.program_id(1) * B1 + ctx.arange(B1)\n"
        "    offs = rows[:, None] * m + cols[None, :]\n"
        "    mask = offs < n * m\n"
        "    ctx.store(out, offs, ctx.maximum(ctx.load(x, offs, mask), 0.0), mask)",
        # reads the whole tile, then again for the store
        "def relu2d_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    cols = ctx.program_id(1) * B1 + ctx.arange(B1)\n"
        "    offs = rows[:, None] * m + cols[None, :]\n"
        "    mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "    t = ctx.load(x, offs, mask)\n"
        "    ctx.store(out, offs, ctx.where(ctx.load(x, offs, mask) > 0.0, t, 0.0), mask)",
    ],
    "p1.rowsum": [
        # loads the whole row at once: does not fit the scratchpad on long rows
        "def rowsum_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    cols = ctx.arange(m)\n"
        "    mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "    ctx.store(out, rows, ctx.load(x, rows[:, None] * m + cols[None, :], mask).sum(axis=1), rows < n)",
        # one row at a time, each column tile loaded as a whole B0-row tile
        "def rowsum_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    acc = ctx.zeros(B0)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        acc = acc + ctx.load(x, rows[:, None] * m + cols[None, :], mask).sum(axis=1) * 0.5\n"
        "        acc = acc + ctx.load(x, rows[:, None] * m + cols[None, :], mask).sum(axis=1) * 0.5\n"
        "    ctx.store(out, rows, acc, rows < n)",
    ],
    "p1.cumsum": [
        # re-reads every earlier tile of the row to get the carry
        "def cumsum_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    for c0 in range(0, m, B1):\n"
        "        carry = ctx.zeros(B0)\n"
        "        for p0 in range(0, c0, B1):\n"
        "            pc = p0 + ctx.arange(B1)\n"
        "            carry += ctx.load(x, rows[:, None] * m + pc[None, :], (rows[:, None] < n) & (pc[None, :] < m))"
        ".sum(axis=1)\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        offs = rows[:, None] * m + cols[None, :]\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        ctx.store(out, offs, ctx.load(x, offs, mask).cumsum(axis=1) + carry[:, None], mask)",
    ],
    "p1.softmax": [
        # the max computed twice: four passes
        "def softmax_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    def row_max():\n"
        "        mx = ctx.full(B0, -math.inf)\n"
        "        for c0 in range(0, m, B1):\n"
        "            cols = c0 + ctx.arange(B1)\n"
        "            mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "            mx = ctx.maximum(mx, ctx.load(x, rows[:, None] * m + cols[None, :], mask,"
        " -math.inf).max(axis=1))\n"
        "        return mx\n"
        "    total = ctx.zeros(B0)\n"
        "    mx = row_max()\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        total += (ctx.load(x, rows[:, None] * m + cols[None, :], mask, -math.inf) - mx[:,"
        " None]).exp().sum(axis=1)\n"
        "    mx = row_max()\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        offs = rows[:, None] * m + cols[None, :]\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        ctx.store(out, offs, (ctx.load(x, offs, mask, -math.inf) - mx[:, None]).exp() / total[:, None], mask)",
    ],
    "p1.online_softmax": [
        # the three-pass softmax: right values, one pass too many
        "def online_softmax_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    row_max = ctx.full(B0, -math.inf)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        row_max = ctx.maximum(row_max, ctx.load(x, rows[:, None] * m + cols[None, :], mask,"
        " -math.inf).max(axis=1))\n"
        "    total = ctx.zeros(B0)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        total += (ctx.load(x, rows[:, None] * m + cols[None, :], mask, -math.inf) - row_max[:,"
        " None]).exp().sum(axis=1)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        offs = rows[:, None] * m + cols[None, :]\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        t = ctx.load(x, offs, mask, -math.inf)\n"
        "        ctx.store(out, offs, (t - row_max[:, None]).exp() / total[:, None], mask)",
        # the three-pass kernel of puzzle 7, called by name
        "def online_softmax_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    softmax_kernel(ctx, x, out, n, m, B0, B1)",
    ],
    "p1.layernorm": [
        # one row at a time: w and b loaded for every row
        "def layernorm_kernel(ctx, x, w, b, out, n, m, eps, R, BM):\n"
        "    cols = ctx.arange(BM)\n"
        "    for r in range(R):\n"
        "        row = ctx.program_id(0) * R + r\n"
        "        if row >= n:\n"
        "            break\n"
        "        offs = row * m + cols\n"
        "        mask = cols < m\n"
        "        t = ctx.load(x, offs, mask)\n"
        "        xc = ctx.where(mask, t - t.sum() / m, 0.0)\n"
        "        rstd = 1.0 / ((xc * xc).sum() / m + eps).sqrt()\n"
        "        ctx.store(out, offs, xc * rstd * ctx.load(w, cols, mask) + ctx.load(b, cols, mask), mask)",
    ],
    "p1.matmul": [
        # one row of the tile at a time: b's strip loaded BM times
        "def matmul_kernel(ctx, a, b, out, M, N, K, BM, BN, BK):\n"
        "    cols = ctx.program_id(1) * BN + ctx.arange(BN)\n"
        "    ks = ctx.arange(BK)\n"
        "    for r in range(BM):\n"
        "        row = ctx.program_id(0) * BM + r\n"
        "        if row >= M:\n"
        "            break\n"
        "        at = ctx.load(a, row * K + ks[None, :], ks[None, :] < K)\n"
        "        bt = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))\n"
        "        ctx.store(out, row * N + cols[None, :], ctx.dot(at, bt), cols[None, :] < N)",
    ],
    "p1.matmul_tiled": [
        # the whole-K strips of the naive matmul: do not fit the scratchpad
        "def matmul_tiled_kernel(ctx, a, b, out, M, N, K, BM, BN, BK):\n"
        "    rows = ctx.program_id(0) * BM + ctx.arange(BM)\n"
        "    cols = ctx.program_id(1) * BN + ctx.arange(BN)\n"
        "    ks = ctx.arange(K)\n"
        "    at = ctx.load(a, rows[:, None] * K + ks[None, :], rows[:, None] < M)\n"
        "    bt = ctx.load(b, ks[:, None] * N + cols[None, :], cols[None, :] < N)\n"
        "    ctx.store(out, rows[:, None] * N + cols[None, :], ctx.dot(at, bt), (rows[:, None] < M) &"
        " (cols[None, :] < N))",
        # four 16 x 16 sub-tiles, each reloading its slices
        "def matmul_tiled_kernel(ctx, a, b, out, M, N, K, BM, BN, BK):\n"
        "    S = 16\n"
        "    for i0 in range(0, BM, S):\n"
        "        for j0 in range(0, BN, S):\n"
        "            rows = ctx.program_id(0) * BM + i0 + ctx.arange(S)\n"
        "            cols = ctx.program_id(1) * BN + j0 + ctx.arange(S)\n"
        "            acc = ctx.zeros((S, S))\n"
        "            for k0 in range(0, K, BK):\n"
        "                ks = k0 + ctx.arange(BK)\n"
        "                at = ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K))\n"
        "                bt = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))\n"
        "                ctx.dot(at, bt, acc=acc)\n"
        "            ctx.store(out, rows[:, None] * N + cols[None, :], acc, (rows[:, None] < M) & (cols[None, :] < N))",
    ],
    "p1.conv1d": [
        # k shifted loads of x
        "def conv1d_kernel(ctx, x, w, out, n, k, B, BK):\n"
        "    outs = ctx.program_id(0) * B + ctx.arange(B)\n"
        "    mask = outs < n - k + 1\n"
        "    ws = ctx.load(w, ctx.arange(BK), ctx.arange(BK) < k)\n"
        "    acc = ctx.zeros(B)\n"
        "    for j in range(k):\n"
        "        acc += ctx.load(x, outs + j, mask) * ws[j]\n"
        "    ctx.store(out, outs, acc, mask)",
    ],
    "p1.attention": [
        # two passes over the keys: max and sum first, then the output
        "def attention_kernel(ctx, q, k, v, out, n, m, d, BQ, BKV, BD):\n"
        "    rows = ctx.program_id(0) * BQ + ctx.arange(BQ)\n"
        "    dims = ctx.arange(BD)\n"
        "    qt = ctx.load(q, rows[:, None] * d + dims[None, :], (rows[:, None] < n) & (dims[None, :] < d))\n"
        "    scale = 1.0 / math.sqrt(d)\n"
        "    def scores(k0):\n"
        "        keys = k0 + ctx.arange(BKV)\n"
        "        kt = ctx.load(k, keys[:, None] * d + dims[None, :], (keys[:, None] < m) & (dims[None, :] < d))\n"
        "        return keys, ctx.where(keys[None, :] < m, ctx.dot(qt, kt.T) * scale, -math.inf)\n"
        "    row_max = ctx.full(BQ, -math.inf)\n"
        "    for k0 in range(0, m, BKV):\n"
        "        row_max = ctx.maximum(row_max, scores(k0)[1].max(axis=1))\n"
        "    total = ctx.zeros(BQ)\n"
        "    acc = ctx.zeros((BQ, BD))\n"
        "    for k0 in range(0, m, BKV):\n"
        "        keys, s = scores(k0)\n"
        "        p = (s - row_max[:, None]).exp()\n"
        "        total += p.sum(axis=1)\n"
        "        vt = ctx.load(v, keys[:, None] * d + dims[None, :], (keys[:, None] < m) & (dims[None, :] < d))\n"
        "        acc += ctx.dot(p, vt)\n"
        "    ctx.store(out, rows[:, None] * d + dims[None, :], acc / total[:, None], (rows[:, None] < n) &"
        " (dims[None, :] < d))",
    ],
    "p1.linear_relu": [
        # not fused: stores the product, loads it back for the epilogue
        "def linear_relu_kernel(ctx, a, b, bias, out, M, N, K, BM, BN, BK):\n"
        "    rows = ctx.program_id(0) * BM + ctx.arange(BM)\n"
        "    cols = ctx.program_id(1) * BN + ctx.arange(BN)\n"
        "    offs = rows[:, None] * N + cols[None, :]\n"
        "    mask = (rows[:, None] < M) & (cols[None, :] < N)\n"
        "    acc = ctx.zeros((BM, BN))\n"
        "    for k0 in range(0, K, BK):\n"
        "        ks = k0 + ctx.arange(BK)\n"
        "        at = ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K))\n"
        "        bt = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))\n"
        "        ctx.dot(at, bt, acc=acc)\n"
        "    ctx.store(out, offs, acc, mask)\n"
        "    del acc\n"
        "    c = ctx.load(out, offs, mask) + ctx.load(bias, cols, cols < N)[None, :]\n"
        "    ctx.store(out, offs, ctx.maximum(c, 0.0), mask)",
    ],
}

RULES: dict[str, list[str]] = {
    "p1.map": [
        # block b takes every G-th element from b on (G blocks), not its B consecutive ones
        "def map_kernel(ctx, x, out, n, B):\n"
        "    offs = ctx.program_id(0) + ctx.arange(B) * ctx.num_programs(0)\n"
        "    ctx.store(out, offs, ctx.load(x, offs) + 10.0)",
    ],
    "p1.zip": [
        # block 0 walks the whole vector; the other blocks do nothing
        "def zip_kernel(ctx, x, y, out, n, B):\n"
        "    if ctx.program_id(0) == 0:\n"
        "        for s in range(0, n, B):\n"
        "            offs = s + ctx.arange(B)\n"
        "            ctx.store(out, offs, ctx.load(x, offs) + ctx.load(y, offs))",
    ],
    "p1.outer": [
        # the blocks of the first column compute whole rows of out; the others do nothing
        "def outer_kernel(ctx, x, y, out, n, m, B0, B1):\n"
        "    if ctx.program_id(1) > 0:\n"
        "        return\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    xs = ctx.load(x, rows)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        ctx.store(out, rows[:, None] * m + cols[None, :], xs[:, None] + ctx.load(y, cols)[None, :])",
    ],
    "p1.relu2d": [
        # the right mask for the load, the flat offset for the store: columns >= m land on the next row's elements
        "def relu2d_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    cols = ctx.program_id(1) * B1 + ctx.arange(B1)\n"
        "    offs = rows[:, None] * m + cols[None, :]\n"
        "    t = ctx.load(x, offs, (rows[:, None] < n) & (cols[None, :] < m))\n"
        "    ctx.store(out, offs, ctx.maximum(t, 0.0), offs < n * m)",
    ],
    "p1.rowsum": [
        # the store inside the loop: every partial sum is stored, the last one stays
        "def rowsum_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    acc = ctx.zeros(B0)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        acc += ctx.load(x, rows[:, None] * m + cols[None, :], mask).sum(axis=1)\n"
        "        ctx.store(out, rows, acc, rows < n)\n"
        "    if m == 0:\n"
        "        ctx.store(out, rows, acc, rows < n)",
    ],
    "p1.cumsum": [
        # block 0 walks every group of rows; the other blocks do nothing
        "def cumsum_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    if ctx.program_id(0) > 0:\n"
        "        return\n"
        "    for r0 in range(0, n, B0):\n"
        "        rows = r0 + ctx.arange(B0)\n"
        "        carry = ctx.zeros(B0)\n"
        "        for c0 in range(0, m, B1):\n"
        "            cols = c0 + ctx.arange(B1)\n"
        "            offs = rows[:, None] * m + cols[None, :]\n"
        "            mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "            t = ctx.load(x, offs, mask)\n"
        "            ctx.store(out, offs, t.cumsum(axis=1) + carry[:, None], mask)\n"
        "            carry += t.sum(axis=1)",
    ],
    "p1.softmax": [
        # exp(x - max) stored in the second pass as well, then overwritten by the third
        "def softmax_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    rows = ctx.program_id(0) * B0 + ctx.arange(B0)\n"
        "    row_max = ctx.full(B0, -math.inf)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        row_max = ctx.maximum(row_max, ctx.load(x, rows[:, None] * m + cols[None, :], mask,"
        " -math.inf).max(axis=1))\n"
        "    total = ctx.zeros(B0)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        offs = rows[:, None] * m + cols[None, :]\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        e = (ctx.load(x, offs, mask, -math.inf) - row_max[:, None]).exp()\n"
        "        ctx.store(out, offs, e, mask)\n"
        "        total += e.sum(axis=1)\n"
        "    for c0 in range(0, m, B1):\n"
        "        cols = c0 + ctx.arange(B1)\n"
        "        offs = rows[:, None] * m + cols[None, :]\n"
        "        mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "        ctx.store(out, offs, (ctx.load(x, offs, mask, -math.inf) - row_max[:, None]).exp() / total[:, None],"
        " mask)",
    ],
    "p1.online_softmax": [
        # block 0 walks every group of rows; the other blocks do nothing
        "def online_softmax_kernel(ctx, x, out, n, m, B0, B1):\n"
        "    if ctx.program_id(0) > 0:\n"
        "        return\n"
        "    for r0 in range(0, n, B0):\n"
        "        rows = r0 + ctx.arange(B0)\n"
        "        row_max = ctx.full(B0, -math.inf)\n"
        "        total = ctx.zeros(B0)\n"
        "        for c0 in range(0, m, B1):\n"
        "            cols = c0 + ctx.arange(B1)\n"
        "            mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "            t = ctx.load(x, rows[:, None] * m + cols[None, :], mask, -math.inf)\n"
        "            new_max = ctx.maximum(row_max, t.max(axis=1))\n"
        "            total = total * (row_max - new_max).exp() + (t - new_max[:, None]).exp().sum(axis=1)\n"
        "            row_max = new_max\n"
        "        for c0 in range(0, m, B1):\n"
        "            cols = c0 + ctx.arange(B1)\n"
        "            offs = rows[:, None] * m + cols[None, :]\n"
        "            mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "            t = ctx.load(x, offs, mask, -math.inf)\n"
        "            ctx.store(out, offs, (t - row_max[:, None]).exp() / total[:, None], mask)",
    ],
    "p1.layernorm": [
        # w and b loaded by the first block only and kept in Python for the others ("load them once")
        "_kept = {}\n"
        "def layernorm_kernel(ctx, x, w, b, out, n, m, eps, R, BM):\n"
        "    rows = ctx.program_id(0) * R + ctx.arange(R)\n"
        "    cols = ctx.arange(BM)\n"
        "    offs = rows[:, None] * m + cols[None, :]\n"
        "    mask = (rows[:, None] < n) & (cols[None, :] < m)\n"
        "    t = ctx.load(x, offs, mask)\n"
        "    mean = t.sum(axis=1) / m\n"
        "    xc = ctx.where(mask, t - mean[:, None], 0.0)\n"
        "    del t\n"
        "    rstd = 1.0 / ((xc * xc).sum(axis=1) / m + eps).sqrt()\n"
        "    if id(w) not in _kept:\n"
        "        _kept.clear()\n"
        "        _kept[id(w)] = (ctx.load(w, cols, cols < m), ctx.load(b, cols, cols < m))\n"
        "    ws, bs = _kept[id(w)]\n"
        "    ctx.store(out, offs, xc * rstd[:, None] * ws[None, :] + bs[None, :], mask)",
    ],
    "p1.matmul": [
        # the strip of b kept in Python for the next block of the same column
        "_kept = {}\n"
        "def matmul_kernel(ctx, a, b, out, M, N, K, BM, BN, BK):\n"
        "    rows = ctx.program_id(0) * BM + ctx.arange(BM)\n"
        "    cols = ctx.program_id(1) * BN + ctx.arange(BN)\n"
        "    ks = ctx.arange(BK)\n"
        "    at = ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K))\n"
        "    key = (id(b), ctx.program_id(1))\n"
        "    if key not in _kept:\n"
        "        _kept[key] = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))\n"
        "    ctx.store(out, rows[:, None] * N + cols[None, :], ctx.dot(at, _kept[key]), (rows[:, None] < M) &"
        " (cols[None, :] < N))",
    ],
    "p1.matmul_tiled": [
        # the slices of b kept in Python for the next block of the same column: b read once in all
        "_kept = {}\n"
        "def matmul_tiled_kernel(ctx, a, b, out, M, N, K, BM, BN, BK):\n"
        "    rows = ctx.program_id(0) * BM + ctx.arange(BM)\n"
        "    cols = ctx.program_id(1) * BN + ctx.arange(BN)\n"
        "    acc = ctx.zeros((BM, BN))\n"
        "    for k0 in range(0, K, BK):\n"
        "        ks = k0 + ctx.arange(BK)\n"
        "        at = ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K))\n"
        "        key = (id(b), ctx.program_id(1), k0)\n"
        "        if key not in _kept:\n"
        "            _kept[key] = ctx.load(b, ks[:, None] * N + cols[None, :],\n"
        "                                  (ks[:, None] < K) & (cols[None, :] < N))\n"
        "        ctx.dot(at, _kept[key], acc=acc)\n"
        "    ctx.store(out, rows[:, None] * N + cols[None, :], acc, (rows[:, None] < M) & (cols[None, :] < N))",
    ],
    "p1.conv1d": [
        # w loaded by the first block only and kept in Python for the others
        "_kept = {}\n"
        "def conv1d_kernel(ctx, x, w, out, n, k, B, BK):\n"
        "    start = ctx.program_id(0) * B\n"
        "    offs = start + ctx.arange(B + BK)\n"
        "    xs = ctx.load(x, offs, (offs < n) & (offs < start + B + k - 1))\n"
        "    if id(w) not in _kept:\n"
        "        _kept.clear()\n"
        "        _kept[id(w)] = ctx.load(w, ctx.arange(BK), ctx.arange(BK) < k)\n"
        "    ws = _kept[id(w)]\n"
        "    acc = ctx.zeros(B)\n"
        "    for j in range(k):\n"
        "        acc += xs[j:j + B] * ws[j]\n"
        "    outs = start + ctx.arange(B)\n"
        "    ctx.store(out, outs, acc, outs < n - k + 1)",
    ],
    "p1.attention": [
        # the tiles of k and v kept in Python after the first block loaded them: every block needs them all
        "_kept = {}\n"
        "def attention_kernel(ctx, q, k, v, out, n, m, d, BQ, BKV, BD):\n"
        "    rows = ctx.program_id(0) * BQ + ctx.arange(BQ)\n"
        "    dims = ctx.arange(BD)\n"
        "    qt = ctx.load(q, rows[:, None] * d + dims[None, :], (rows[:, None] < n) & (dims[None, :] < d))\n"
        "    row_max = ctx.full(BQ, -math.inf)\n"
        "    total = ctx.zeros(BQ)\n"
        "    acc = ctx.zeros((BQ, BD))\n"
        "    scale = 1.0 / math.sqrt(d)\n"
        "    for k0 in range(0, m, BKV):\n"
        "        keys = k0 + ctx.arange(BKV)\n"
        "        kv_mask = (keys[:, None] < m) & (dims[None, :] < d)\n"
        "        if (id(k), k0) not in _kept:\n"
        "            _kept[(id(k), k0)] = (ctx.load(k, keys[:, None] * d + dims[None, :], kv_mask),\n"
        "                                  ctx.load(v, keys[:, None] * d + dims[None, :], kv_mask))\n"
        "        kt, vt = _kept[(id(k), k0)]\n"
        "        s = ctx.where(keys[None, :] < m, ctx.dot(qt, kt.T) * scale, -math.inf)\n"
        "        new_max = ctx.maximum(row_max, s.max(axis=1))\n"
        "        alpha = (row_max - new_max).exp()\n"
        "        p = (s - new_max[:, None]).exp()\n"
        "        total = total * alpha + p.sum(axis=1)\n"
        "        acc = acc * alpha[:, None] + ctx.dot(p, vt)\n"
        "        row_max = new_max\n"
        "    ctx.store(out, rows[:, None] * d + dims[None, :], acc / total[:, None], (rows[:, None] < n) &"
        " (dims[None, :] < d))",
    ],
    "p1.linear_relu": [
        # the bias row kept in Python for the next block of the same column
        "_kept = {}\n"
        "def linear_relu_kernel(ctx, a, b, bias, out, M, N, K, BM, BN, BK):\n"
        "    rows = ctx.program_id(0) * BM + ctx.arange(BM)\n"
        "    cols = ctx.program_id(1) * BN + ctx.arange(BN)\n"
        "    acc = ctx.zeros((BM, BN))\n"
        "    for k0 in range(0, K, BK):\n"
        "        ks = k0 + ctx.arange(BK)\n"
        "        at = ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K))\n"
        "        bt = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))\n"
        "        ctx.dot(at, bt, acc=acc)\n"
        "    key = (id(bias), ctx.program_id(1))\n"
        "    if key not in _kept:\n"
        "        _kept[key] = ctx.load(bias, cols, cols < N)\n"
        "    acc += _kept[key][None, :]\n"
        "    ctx.store(out, rows[:, None] * N + cols[None, :], ctx.maximum(acc, 0.0), (rows[:, None] < M) &"
        " (cols[None, :] < N))",
    ],
}

WRONG: dict[str, list[str]] = {k: VALUES.get(k, []) + OVER_BUDGET.get(k, []) + RULES.get(k, [])
                               for k in {*VALUES, *OVER_BUDGET, *RULES}}
