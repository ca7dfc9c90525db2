"""The tests' copy of the NPU puzzles' reference solutions (one kernel per puzzle, each within its budget).

The answers live in ``solutions/P1_npu_puzzles.ipynb`` (between ``### BEGIN SOLUTION`` and
``### END SOLUTION``); this copy is for the tests that need a finished kernel (tests/test_puzzles.py,
the bring-up track's tile-kernel softmax in tests/bringup/worker.py). Nothing under ``npu_lab/`` may
hold these answers (tests/test_no_leaked_answers.py), and tests/test_puzzles.py checks that this copy
is the notebook's, kernel for kernel.
"""

from __future__ import annotations

import math


def map_kernel(ctx, x, out, n, B):
    """out[i] = x[i] + 10: each block handles B consecutive elements."""
    offs = ctx.program_id(0) * B + ctx.arange(B)
    ctx.store(out, offs, ctx.load(x, offs) + 10.0)


def zip_kernel(ctx, x, y, out, n, B):
    """out[i] = x[i] + y[i]."""
    offs = ctx.program_id(0) * B + ctx.arange(B)
    ctx.store(out, offs, ctx.load(x, offs) + ctx.load(y, offs))


def outer_kernel(ctx, x, y, out, n, m, B0, B1):
    """out[i, j] = x[i] + y[j]: block (p0, p1) handles a B0 x B1 tile of out."""
    rows = ctx.program_id(0) * B0 + ctx.arange(B0)
    cols = ctx.program_id(1) * B1 + ctx.arange(B1)
    xs = ctx.load(x, rows)
    ys = ctx.load(y, cols)
    ctx.store(out, rows[:, None] * m + cols[None, :], xs[:, None] + ys[None, :])


def relu2d_kernel(ctx, x, out, n, m, B0, B1):
    """out = relu(x) for an n x m tensor whose sizes need not be multiples of the tile."""
    rows = ctx.program_id(0) * B0 + ctx.arange(B0)
    cols = ctx.program_id(1) * B1 + ctx.arange(B1)
    offs = rows[:, None] * m + cols[None, :]
    mask = (rows[:, None] < n) & (cols[None, :] < m)
    ctx.store(out, offs, ctx.maximum(ctx.load(x, offs, mask), 0.0), mask)


def rowsum_kernel(ctx, x, out, n, m, B0, B1):
    """out[i] = sum of row i of x: a block owns B0 rows and walks along them B1 columns at a time."""
    rows = ctx.program_id(0) * B0 + ctx.arange(B0)
    acc = ctx.zeros(B0)
    for c0 in range(0, m, B1):
        cols = c0 + ctx.arange(B1)
        mask = (rows[:, None] < n) & (cols[None, :] < m)
        acc += ctx.load(x, rows[:, None] * m + cols[None, :], mask).sum(axis=1)
    ctx.store(out, rows, acc, rows < n)


def cumsum_kernel(ctx, x, out, n, m, B0, B1):
    """out[i, :] = running sum of row i: each column tile adds the carry of the tiles before it."""
    rows = ctx.program_id(0) * B0 + ctx.arange(B0)
    carry = ctx.zeros(B0)
    for c0 in range(0, m, B1):
        cols = c0 + ctx.arange(B1)
        offs = rows[:, None] * m + cols[None, :]
        mask = (rows[:, None] < n) & (cols[None, :] < m)
        t = ctx.load(x, offs, mask)
        ctx.store(out, offs, t.cumsum(axis=1) + carry[:, None], mask)
        carry += t.sum(axis=1)


def softmax_kernel(ctx, x, out, n, m, B0, B1):
    """Row softmax in three passes over each row: the max, the sum of exp(x - max), the output."""
    rows = ctx.program_id(0) * B0 + ctx.arange(B0)
    row_max = ctx.full(B0, -math.inf)
    for c0 in range(0, m, B1):
        cols = c0 + ctx.arange(B1)
        mask = (rows[:, None] < n) & (cols[None, :] < m)
        row_max = ctx.maximum(row_max, ctx.load(x, rows[:, None] * m + cols[None, :], mask, -math.inf).max(axis=1))
    total = ctx.zeros(B0)
    for c0 in range(0, m, B1):
        cols = c0 + ctx.arange(B1)
        mask = (rows[:, None] < n) & (cols[None, :] < m)
        t = ctx.load(x, rows[:, None] * m + cols[None, :], mask, -math.inf)
        total += (t - row_max[:, None]).exp().sum(axis=1)
    for c0 in range(0, m, B1):
        cols = c0 + ctx.arange(B1)
        offs = rows[:, None] * m + cols[None, :]
        mask = (rows[:, None] < n) & (cols[None, :] < m)
        t = ctx.load(x, offs, mask, -math.inf)
        ctx.store(out, offs, (t - row_max[:, None]).exp() / total[:, None], mask)


def online_softmax_kernel(ctx, x, out, n, m, B0, B1):
    """Row softmax in two passes: a running max and a running sum rescaled when the max grows."""
    rows = ctx.program_id(0) * B0 + ctx.arange(B0)
    row_max = ctx.full(B0, -math.inf)
    total = ctx.zeros(B0)
    for c0 in range(0, m, B1):
        cols = c0 + ctx.arange(B1)
        mask = (rows[:, None] < n) & (cols[None, :] < m)
        t = ctx.load(x, rows[:, None] * m + cols[None, :], mask, -math.inf)
        new_max = ctx.maximum(row_max, t.max(axis=1))
        total = total * (row_max - new_max).exp() + (t - new_max[:, None]).exp().sum(axis=1)
        row_max = new_max
    for c0 in range(0, m, B1):
        cols = c0 + ctx.arange(B1)
        offs = rows[:, None] * m + cols[None, :]
        mask = (rows[:, None] < n) & (cols[None, :] < m)
        t = ctx.load(x, offs, mask, -math.inf)
        ctx.store(out, offs, (t - row_max[:, None]).exp() / total[:, None], mask)


def layernorm_kernel(ctx, x, w, b, out, n, m, eps, R, BM):
    """Layer norm of R rows per block; w and b are loaded once per block, not once per row."""
    rows = ctx.program_id(0) * R + ctx.arange(R)
    cols = ctx.arange(BM)
    offs = rows[:, None] * m + cols[None, :]
    mask = (rows[:, None] < n) & (cols[None, :] < m)
    t = ctx.load(x, offs, mask)
    mean = t.sum(axis=1) / m
    xc = ctx.where(mask, t - mean[:, None], 0.0)
    del t
    rstd = 1.0 / ((xc * xc).sum(axis=1) / m + eps).sqrt()
    ws = ctx.load(w, cols, cols < m)
    bs = ctx.load(b, cols, cols < m)
    ctx.store(out, offs, xc * rstd[:, None] * ws[None, :] + bs[None, :], mask)


def matmul_kernel(ctx, a, b, out, M, N, K, BM, BN, BK):
    """out = a @ b: each block computes a BM x BN tile from a BM x K strip of a and a K x BN strip of b."""
    rows = ctx.program_id(0) * BM + ctx.arange(BM)
    cols = ctx.program_id(1) * BN + ctx.arange(BN)
    ks = ctx.arange(BK)
    at = ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K))
    bt = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))
    ctx.store(out, rows[:, None] * N + cols[None, :], ctx.dot(at, bt), (rows[:, None] < M) & (cols[None, :] < N))


def matmul_tiled_kernel(ctx, a, b, out, M, N, K, BM, BN, BK):
    """out = a @ b with K too long for the scratchpad: walk K in slices of BK into an accumulator."""
    rows = ctx.program_id(0) * BM + ctx.arange(BM)
    cols = ctx.program_id(1) * BN + ctx.arange(BN)
    acc = ctx.zeros((BM, BN))
    for k0 in range(0, K, BK):
        ks = k0 + ctx.arange(BK)
        at = ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K))
        bt = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))
        ctx.dot(at, bt, acc=acc)
    ctx.store(out, rows[:, None] * N + cols[None, :], acc, (rows[:, None] < M) & (cols[None, :] < N))


def conv1d_kernel(ctx, x, w, out, n, k, B, BK):
    """out[i] = sum_j x[i + j] * w[j]: one load of B + k - 1 elements (the tile and its halo) per block."""
    start = ctx.program_id(0) * B
    n_out = n - k + 1
    offs = start + ctx.arange(B + BK)
    xs = ctx.load(x, offs, (offs < n) & (offs < start + B + k - 1))
    ws = ctx.load(w, ctx.arange(BK), ctx.arange(BK) < k)
    acc = ctx.zeros(B)
    for j in range(k):
        acc += xs[j:j + B] * ws[j]
    outs = start + ctx.arange(B)
    ctx.store(out, outs, acc, outs < n_out)


def attention_kernel(ctx, q, k, v, out, n, m, d, BQ, BKV, BD):
    """Flash attention: BQ query rows per block, keys and values in tiles of BKV, softmax online."""
    rows = ctx.program_id(0) * BQ + ctx.arange(BQ)
    dims = ctx.arange(BD)
    qt = ctx.load(q, rows[:, None] * d + dims[None, :], (rows[:, None] < n) & (dims[None, :] < d))
    row_max = ctx.full(BQ, -math.inf)
    total = ctx.zeros(BQ)
    acc = ctx.zeros((BQ, BD))
    scale = 1.0 / math.sqrt(d)
    for k0 in range(0, m, BKV):
        keys = k0 + ctx.arange(BKV)
        kv_mask = (keys[:, None] < m) & (dims[None, :] < d)
        kt = ctx.load(k, keys[:, None] * d + dims[None, :], kv_mask)
        s = ctx.where(keys[None, :] < m, ctx.dot(qt, kt.T) * scale, -math.inf)
        new_max = ctx.maximum(row_max, s.max(axis=1))
        alpha = (row_max - new_max).exp()
        p = (s - new_max[:, None]).exp()
        total = total * alpha + p.sum(axis=1)
        vt = ctx.load(v, keys[:, None] * d + dims[None, :], kv_mask)
        acc = acc * alpha[:, None] + ctx.dot(p, vt)
        row_max = new_max
    ctx.store(out, rows[:, None] * d + dims[None, :], acc / total[:, None], (rows[:, None] < n) & (dims[None, :] < d))


def linear_relu_kernel(ctx, a, b, bias, out, M, N, K, BM, BN, BK):
    """out = relu(a @ b + bias): the bias and the ReLU applied to the accumulator before the one store."""
    rows = ctx.program_id(0) * BM + ctx.arange(BM)
    cols = ctx.program_id(1) * BN + ctx.arange(BN)
    acc = ctx.zeros((BM, BN))
    for k0 in range(0, K, BK):
        ks = k0 + ctx.arange(BK)
        at = ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K))
        bt = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))
        ctx.dot(at, bt, acc=acc)
    acc += ctx.load(bias, cols, cols < N)[None, :]
    ctx.store(out, rows[:, None] * N + cols[None, :], ctx.maximum(acc, 0.0), (rows[:, None] < M) & (cols[None, :] < N))


#: puzzle name -> reference kernel
SOLUTIONS = {
    "map": map_kernel, "zip": zip_kernel, "outer": outer_kernel, "relu2d": relu2d_kernel,
    "rowsum": rowsum_kernel, "cumsum": cumsum_kernel, "softmax": softmax_kernel,
    "online_softmax": online_softmax_kernel, "layernorm": layernorm_kernel, "matmul": matmul_kernel,
    "matmul_tiled": matmul_tiled_kernel, "conv1d": conv1d_kernel, "attention": attention_kernel,
    "linear_relu": linear_relu_kernel,
}
