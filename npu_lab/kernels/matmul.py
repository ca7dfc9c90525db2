"""Blocked, parallel matrix multiplication in numba.

``C = A @ B`` with ``A: (M, K)`` and ``B: (K, N)``, all row-major. The loops are
tiled so that a ``(TM, TK)`` panel of A and a ``(TK, TN)`` panel of B stay in
cache while they are used; the rows of C are shared out across threads.
The innermost loop runs along a contiguous row of B and C, which LLVM turns
into SIMD instructions. Tile sizes are arguments so an autotuner can pick them.

``mm_nt`` is the same product when B arrives transposed (``B.T`` row-major),
as it does for ``nn.Linear`` weights: each output is a dot product of two
contiguous rows.
"""

import numba
from numba import prange

DEFAULT_TILES = (64, 256, 256)  # (TM, TN, TK)

_opts = dict(cache=True, nogil=True, fastmath=True, error_model="numpy")


@numba.njit(parallel=True, **_opts)
def mm_nn(a, b, c, tm, tn, tk):
    """c[:] = a @ b, tiled."""
    m, k = a.shape
    n = b.shape[1]
    n_row_tiles = (m + tm - 1) // tm
    for ti in prange(n_row_tiles):
        i0 = ti * tm
        i1 = min(m, i0 + tm)
        for i in range(i0, i1):
            for j in range(n):
                c[i, j] = 0
        for k0 in range(0, k, tk):
            k1 = min(k, k0 + tk)
            for j0 in range(0, n, tn):
                j1 = min(n, j0 + tn)
                for i in range(i0, i1):
                    for kk in range(k0, k1):
                        aik = a[i, kk]
                        for j in range(j0, j1):
                            c[i, j] += aik * b[kk, j]


@numba.njit(parallel=True, **_opts)
def mm_nt(a, bt, c, tm, tn, tk):
    """c[:] = a @ bt.T where bt is (N, K) row-major."""
    m, k = a.shape
    n = bt.shape[0]
    n_row_tiles = (m + tm - 1) // tm
    for ti in prange(n_row_tiles):
        i0 = ti * tm
        i1 = min(m, i0 + tm)
        for i in range(i0, i1):
            for j in range(n):
                c[i, j] = 0
        for k0 in range(0, k, tk):
            k1 = min(k, k0 + tk)
            for j0 in range(0, n, tn):
                j1 = min(n, j0 + tn)
                for i in range(i0, i1):
                    for j in range(j0, j1):
                        acc = c[i, j]
                        for kk in range(k0, k1):
                            acc += a[i, kk] * bt[j, kk]
                        c[i, j] = acc


@numba.njit(parallel=True, **_opts)
def bmm_nn(a, b, c, tm, tn, tk):
    """Batched c[p] = a[p] @ b[p]; the batch is shared out across threads."""
    batch, m, k = a.shape
    n = b.shape[2]
    for p in prange(batch):
        for i in range(m):
            for j in range(n):
                c[p, i, j] = 0
        for k0 in range(0, k, tk):
            k1 = min(k, k0 + tk)
            for i in range(m):
                for kk in range(k0, k1):
                    aik = a[p, i, kk]
                    for j in range(n):
                        c[p, i, j] += aik * b[p, kk, j]


@numba.njit(parallel=True, **_opts)
def axpby(out, x, y, alpha, beta):
    """out = beta * x + alpha * y over 2-D arrays (x may broadcast by zero strides)."""
    for i in prange(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = beta * x[i, j] + alpha * y[i, j]


