"""Register-blocked, parallel matrix multiplication in numba.

``C = A @ B`` with ``A: (M, K)`` and ``B: (K, N)``. The kernel works on
``A`` and ``W = B.T`` (shape ``(N, K)``), both *packed* so that each row is
contiguous in ``K``: then every ``C[i, j]`` is a dot product of two contiguous
rows, ``A[i, :]`` and ``W[j, :]``. An ``nn.Linear`` weight is already stored as
``W``, so ``x @ weight.T`` packs nothing; other layouts are packed once by a
blocked transpose (:func:`pack_rows`), as real GEMM libraries pack panels.

The output is cut into *register tiles* of ``TM`` rows by ``TN`` columns, shared
out across threads (``prange``). A tile keeps its ``TM x TN`` sums in local
variables, which LLVM holds in vector registers, and walks ``K`` once:

    for k:                              # contiguous in k: SIMD loads, fused multiply-adds
        s_0_0 += a_0[k] * w_0[k]  ...  s_{TM-1}_{TN-1} += a_{TM-1}[k] * w_{TN-1}[k]

Each ``A`` value loaded is used ``TN`` times and each ``W`` value ``TM`` times,
so the kernel is limited by multiply-adds, not by loads: the sums never go to
memory until the tile is done. (A tile of sums kept in a scratch buffer instead
costs a load and a store per multiply-add.) Rows and columns left over when
``TM`` or ``TN`` does not divide the matrix are the *edge*: one plain dot
product per output value, about half the speed. For float32/float64 the tile
loop is the LLVM-IR micro-kernel :func:`npu_lab.kernels.simd.dot_tile_4x4` (and
its siblings), which also folds the tile's vectors of partial sums together at
the end; the kernel above remains the generic one (integers). ``TM`` and ``TN`` are unrolled
in the generated source (one variant per pair); they are the *tile sizes* an
autotuner picks per shape (``npu_lab.compiler.autotune``).

The dot-product form needs both operands contiguous along ``K``. Backward
products are the opposite: ``grad @ W`` (``W`` stored ``(out, in)``) and
``x.T @ grad`` have ``B`` with contiguous rows and ``K`` as the *row* index, so
the dot form would first pack a transposed copy of one or both operands. For
those the kernel takes the *outer-product* form instead (``mm_outer``): each
``k`` adds ``A[i0:i0+MR, k]`` times ``B[k, j0:j0+NR]`` to a block of sums held
in vector registers, one row of ``B`` loaded once for ``MR`` rows of ``C``.
numba does not vectorise that loop by itself; its inner loop is the LLVM-IR
micro-kernel :func:`npu_lab.kernels.simd.outer_tile`. Nothing is packed, and
there is no horizontal sum at the end, which also suits a short ``K``.

The outer form runs closer to the multiply-add limit than the dot form, whose
vectors of partial sums must be folded and stored one value at a time at the
end of every tile (a fifth of the work when ``K`` is 256). So ``x @ weight.T``
with enough rows (:data:`PACK_OUTER_MIN_ROWS`) takes it too ("packed outer"):
the weight is transposed once, in 16 x 16 blocks held in vector registers
(:func:`npu_lab.kernels.simd.transpose_into`), into a buffer reused from call
to call (:func:`workspace`). The copy costs about a tenth of the product.

What is left, integer matrices and a few rows or a short ``K`` when ``B`` would
have to be packed, runs row by row (``mm_rows``): ``TM`` rows of ``C`` at a
time, each updated by a scaled row of ``B`` per ``k`` (an *axpy*, vectorised
along ``N``), in a scratch buffer of ``TM x 256`` values.
:func:`choose_kernel` says which form a product takes.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np
from numba import prange

from . import blas as _blas
from . import codegen, simd, threads
from .pointers import ptr_array

#: (TM, TN) used when no tuned choice exists for a shape.
DEFAULT_TILES = (4, 4)
#: TM values with a generated kernel.
TM_CHOICES = (1, 2, 4)
#: TN values with a generated kernel.
TN_CHOICES = (1, 2, 4)
#: Products with fewer multiply-adds than this run on one thread.
PARALLEL_MIN_WORK = 1 << 18
#: With fewer rows than this, ``B`` is not packed (the row-by-row kernel runs instead).
PACK_MIN_ROWS = 16
#: Products ``x @ weight.T`` with at least this many rows transpose ``weight`` once and take the outer form.
PACK_OUTER_MIN_ROWS = 64
#: Dot products shorter than this leave vector registers idle: the row-by-row kernel runs instead.
DOT_MIN_K = 48
#: ... unless the output is narrower than this (then a row of B is too short to vectorise).
ROWS_MIN_COLS = 16
#: Columns of the row-by-row kernel's scratch buffer.
ROWS_CHUNK = 256
#: An epilogue pass after a BLAS product runs on all threads from this many output values.
PARALLEL_MIN_EPILOGUE = 1 << 16


#: Epilogues fused into the final write of each output value: ``v`` is the sum,
#: ``bias`` a per-column vector, ``j`` the column. The compiler's linear+activation
#: fusion uses them.
EPILOGUES = {
    "none": "v",
    "bias": "v + bias[j]",
    "relu": "max(v, zero)",
    "bias_relu": "max(v + bias[j], zero)",
}


@dataclass(frozen=True)
class Epilogue:
    """Code run on each finished sum before it is stored: an elementwise *epilogue*.

    The named epilogues (:data:`EPILOGUES`) store one value. The compiler's
    matmul epilogue fusion generates richer ones: ``body`` is statements run
    for each finished sum ``v`` at row ``i`` and column ``j`` (they may read
    ``bias[j]``, ``zero`` and every name in ``params``), and ``writes[q]`` is
    the expression stored to the q-th output: ``out``, then ``out1``,
    ``out2``... ``params`` are the kernel's extra parameters after ``zero``:
    the extra outputs first, then input arrays (broadcast to the output's
    shape, read as ``name[i, j]``), then scalars.
    """

    name: str
    body: tuple[str, ...] = ()
    writes: tuple[str, ...] = ("v",)
    params: tuple[str, ...] = ()


def _as_epilogue(epilogue: str | Epilogue) -> Epilogue:
    if isinstance(epilogue, Epilogue):
        return epilogue
    if epilogue not in EPILOGUES:
        raise ValueError(f"unknown matmul epilogue {epilogue!r}; choose from {list(EPILOGUES)}")
    return Epilogue(epilogue, (), (EPILOGUES[epilogue],))


def _store_code(ep: Epilogue, row: str, pre: str) -> list[str]:
    """Statements that finish the sum ``v`` of (row, j) and store it to every output."""
    lines = [] if row == "i" else [f"i = {row}"]
    lines += list(ep.body)
    lines += [f"out{q or ''}[{pre}i, j] = {w}" for q, w in enumerate(ep.writes)]
    return lines


def _tile_code(tm: int, tn: int, epilogue: Epilogue, indent: str, pre: str) -> str:
    """Sums of one full TM x TN tile at (i0, j0); ``pre`` indexes the batch ("p, " or "")."""
    rows, cols = range(tm), range(tn)
    lines = [f"s{r}_{c} = zero" for r in rows for c in cols]
    lines += [f"a{r} = a[{pre}i0 + {r}]" for r in rows]
    lines += [f"w{c} = w[{pre}j0 + {c}]" for c in cols]
    lines.append("for kk in range(k):")
    lines += [f"    s{r}_{c} += a{r}[kk] * w{c}[kk]" for r in rows for c in cols]
    for c in cols:
        lines.append(f"j = j0 + {c}")
        for r in rows:
            lines.append(f"v = s{r}_{c}")
            lines += _store_code(epilogue, f"i0 + {r}", pre)
    return "\n".join(indent + line for line in lines)


def _edge_code(epilogue: Epilogue, indent: str, pre: str) -> str:
    """One output value (i, j) as a plain dot product."""
    lines = ["v = zero", "ar = a[" + pre + "i]", "wr = w[" + pre + "j]", "for kk in range(k):",
             "    v += ar[kk] * wr[kk]", *_store_code(epilogue, "i", pre)]
    return "\n".join(indent + line for line in lines)


def _source(tm: int, tn: int, epilogue: str | Epilogue = "none") -> str:
    if tm not in TM_CHOICES or tn not in TN_CHOICES:
        raise ValueError(f"no matmul kernel for tiles ({tm}, {tn}); TM in {TM_CHOICES}, TN in {TN_CHOICES}")
    epilogue = _as_epilogue(epilogue)
    extra = "".join(f", {p}" for p in epilogue.params)
    header = f'''"""Generated by npu_lab.kernels.matmul: register tiles TM={tm} x TN={tn}, epilogue {epilogue.name}.

a: (M, K) and w: (N, K), rows contiguous; out[i, j] = epilogue(dot(a[i], w[j])).
"""
import math

import numba
import numpy as np
from numba import prange

from npu_lab.kernels.scalar_math import *  # noqa: F401,F403
from npu_lab.kernels.simd import MR, dot_tile_{tm}x{tn}, outer_tile  # micro-kernels version {simd.VERSION}

_opts = dict(cache=True, nogil=True, fastmath={{"reassoc", "contract"}}, error_model="numpy", boundscheck=False)
'''
    fns = []
    for name, loop in (("mm", "prange"), ("mm_serial", "range")):
        fns.append(f'''@numba.njit(parallel={loop == "prange"}, **_opts)
def {name}(a, w, out, bias, zero{extra}):
    m, k = a.shape
    n = w.shape[0]
    ni = m // {tm}
    nj = n // {tn}
    for t in {loop}(ni * nj):          # full tiles
        i0 = (t // nj) * {tm}
        j0 = (t % nj) * {tn}
{_tile_code(tm, tn, epilogue, "        ", "")}
    mf = ni * {tm}
    nf = nj * {tn}
    for i in {loop}(m):                # edge: columns right of the last full tile, rows below it
        for j in range(nf if i < mf else 0, n):
{_edge_code(epilogue, "            ", "")}
''')
    # batched products take the named epilogues only (the compiler fuses epilogues into mm)
    for name, loop in (("bmm", "prange"), ("bmm_serial", "range")) if not epilogue.params else ():
        fns.append(f'''@numba.njit(parallel={loop == "prange"}, **_opts)
def {name}(a, w, out, bias, zero):
    batch, m, k = a.shape
    n = w.shape[1]
    ni = m // {tm}
    nj = n // {tn}
    for tt in {loop}(batch * ni * nj):  # the batch joins the tiles in the parallel loop
        p = tt // (ni * nj)
        t = tt % (ni * nj)
        i0 = (t // nj) * {tm}
        j0 = (t % nj) * {tn}
{_tile_code(tm, tn, epilogue, "        ", "p, ")}
    mf = ni * {tm}
    nf = nj * {tn}
    for pi in {loop}(batch * m):
        p = pi // m
        i = pi % m
        for j in range(nf if i < mf else 0, n):
{_edge_code(epilogue, "            ", "p, ")}
''')
    fns += [_epilogue_source(epilogue, "epilogue_pass", True),
            _epilogue_source(epilogue, "epilogue_pass_serial", False)]
    fns += [_rows_source(tm, epilogue, "mm_rows", True), _rows_source(tm, epilogue, "mm_rows_serial", False)]
    fns += [_outer_source(epilogue, "mm_outer", True), _outer_source(epilogue, "mm_outer_serial", False)]
    fns += [_dot_source(tm, tn, epilogue, "mm_simd", True), _dot_source(tm, tn, epilogue, "mm_simd_serial", False)]
    return header + "\n\n" + "\n\n".join(fns)


def _dot_source(tm: int, tn: int, epilogue: Epilogue, name: str, parallel: bool) -> str:
    """The dot-product kernel for floats: each tile's sums from :func:`npu_lab.kernels.simd` (``dot_tile``),
    whose vectors of partial sums are folded together rather than summed one by one; the last
    ``k % lanes`` terms and the epilogue follow per value."""
    loop = "prange" if parallel else "range"
    extra = "".join(f", {p}" for p in epilogue.params)
    store = "\n".join("                " + line for line in _store_code(epilogue, "i", ""))
    return f'''@numba.njit(parallel={parallel}, **_opts)
def {name}(a, w, out, lanes, bias, zero{extra}):
    m, k = a.shape
    n = w.shape[0]
    ni = m // {tm}
    nj = n // {tn}
    kmain = k - k % lanes
    for t in {loop}(ni * nj):          # full tiles
        i0 = (t // nj) * {tm}
        j0 = (t % nj) * {tn}
        dot_tile_{tm}x{tn}(a, w, out, i0, j0, kmain)
        for i in range(i0, i0 + {tm}):
            for j in range(j0, j0 + {tn}):
                v = out[i, j]
                for kk in range(kmain, k):
                    v += a[i, kk] * w[j, kk]
{store}
    mf = ni * {tm}
    nf = nj * {tn}
    for i in {loop}(m):                # edge: columns right of the last full tile, rows below it
        for j in range(nf if i < mf else 0, n):
{_edge_code(epilogue, "            ", "")}
'''


def _epilogue_source(epilogue: Epilogue, name: str, parallel: bool) -> str:
    """The epilogue alone, over a finished product in ``out`` (after a BLAS product, :func:`mm`): each
    value ``v = out[i, j]`` is finished and stored as the fused kernels do it."""
    loop = "prange" if parallel else "range"
    extra = "".join(f", {p}" for p in epilogue.params)
    store = "\n".join("            " + line for line in _store_code(epilogue, "i", ""))
    return f'''@numba.njit(parallel={parallel}, **_opts)
def {name}(out, bias, zero{extra}):
    m, n = out.shape
    for i in {loop}(np.uintp(m)):
        for j in range(np.uintp(n)):
            v = out[i, j]
{store}
'''


def _outer_source(epilogue: Epilogue, name: str, parallel: bool) -> str:
    """The outer-product kernel: b is (K, N) with contiguous rows, a in any layout, nothing packed.

    Full MR x nr blocks of ``out`` come from :func:`npu_lab.kernels.simd.outer_tile`
    (sums held in vector registers), then the epilogue runs over the block while it
    is in cache. Rows and columns outside whole blocks are summed row by row.

    The loops after the micro-kernel count with unsigned integers (``np.uintp``):
    numba wraps a negative index around, and LLVM does not vectorise a loop whose
    index it cannot prove non-negative. With signed loops the epilogue and the edge
    rows ran one value at a time (a 10 x 128 @ 128 x 512 product took 90 us, now 16).
    """
    loop = "prange" if parallel else "range"
    extra = "".join(f", {p}" for p in epilogue.params)
    plain = not epilogue.body and epilogue.writes == ("v",)
    store = "\n".join("                " + line for line in _store_code(epilogue, "i", ""))
    block = "" if plain else f"""
        for i in range(np.uintp(i0), np.uintp(i0 + MR)):
            for j in range(np.uintp(j0), np.uintp(j0 + nr)):
                v = out[i, j]
{store}"""
    edge_store = "\n".join("            " + line for line in _store_code(epilogue, "i", ""))
    return f'''@numba.njit(parallel={parallel}, **_opts)
def {name}(a, b, out, nr, bias, zero{extra}):
    m, k = a.shape
    n = b.shape[1]
    ni = m // MR
    nj = n // nr
    for t in {loop}(ni * nj):          # whole blocks; consecutive t share a panel of b
        i0 = (t % ni) * MR
        j0 = (t // ni) * nr
        outer_tile(a, b, out, i0, j0, k){block}
    mf = ni * MR
    nf = nj * nr
    for i in {loop}(np.uintp(m)):      # edge: columns right of the last block, rows below it
        j1 = np.uintp(nf if i < mf else 0)
        if j1 >= n:
            continue
        for j in range(j1, np.uintp(n)):
            out[i, j] = zero
        for kk in range(np.uintp(k)):
            aik = a[i, kk]
            for j in range(j1, np.uintp(n)):
                out[i, j] += aik * b[kk, j]
        for j in range(j1, np.uintp(n)):
            v = out[i, j]
{edge_store}
'''


def _rows_source(tm: int, epilogue: Epilogue, name: str, parallel: bool) -> str:
    """The row-by-row (axpy) kernel: b is (K, N) with contiguous rows, nothing packed."""
    rows = range(tm)
    views = "; ".join(f"c{r} = c[{r}]" for r in rows)
    load_a = "; ".join(f"a{r} = a[i0 + {r}, kk]" for r in rows)
    update = "; ".join(f"c{r}[jj] += a{r} * bj" for r in rows)
    loop = "prange" if parallel else "range"
    extra = "".join(f", {p}" for p in epilogue.params)
    store = "\n".join("                " + line for line in _store_code(epilogue, "i0 + ir", ""))
    return f'''@numba.njit(parallel={parallel}, **_opts)
def {name}(a, b, out, bias, zero{extra}):
    m, k = a.shape
    n = b.shape[1]
    nc = (n + {ROWS_CHUNK} - 1) // {ROWS_CHUNK}
    ni = (m + {tm} - 1) // {tm}
    for t in {loop}(ni * nc):
        i0 = (t // nc) * {tm}
        j0 = (t % nc) * {ROWS_CHUNK}
        mr = min({tm}, m - i0)
        nr = min({ROWS_CHUNK}, n - j0)
        c = np.zeros(({tm}, {ROWS_CHUNK}), out.dtype)
        if mr == {tm}:
            {views}
            for kk in range(k):
                {load_a}
                brow = b[kk, j0:j0 + nr]
                for jj in range(nr):
                    bj = brow[jj]
                    {update}
        else:
            for kk in range(k):
                for i in range(mr):
                    ai = a[i0 + i, kk]
                    for jj in range(nr):
                        c[i, jj] += ai * b[kk, j0 + jj]
        for ir in range(mr):
            for jj in range(nr):
                v = c[ir, jj]
                j = j0 + jj
{store}
'''


_modules: dict[tuple[int, int, str | Epilogue], object] = {}


def module(tm: int, tn: int, epilogue: str | Epilogue = "none"):
    """The generated kernel module for register tiles ``tm x tn`` (compiled once, cached on disk)."""
    key = (tm, tn, epilogue)
    mod = _modules.get(key)
    if mod is None:
        name = epilogue.name if isinstance(epilogue, Epilogue) else epilogue
        mod = _modules[key] = codegen.load_module(_source(tm, tn, epilogue), f"matmul_{tm}x{tn}_{name}")
    return mod


def source(tiles: tuple[int, int] = DEFAULT_TILES, epilogue: str | Epilogue = "none") -> str:
    """The generated numba source of the matmul kernels for register tiles ``(TM, TN)``."""
    return _source(*tiles, epilogue)


@numba.njit(cache=True, nogil=True, boundscheck=False, parallel=True)
def _transpose_into_parallel(src, dst):  # pragma: no cover - compiled
    """dst[j, i] = src[i, j], in 16 x 16 blocks so both sides stay in cache; each block is written
    one contiguous ``dst`` row at a time, and the bands of 16 ``dst`` rows are shared out across threads."""
    m, n = src.shape
    for jb in prange((n + 15) // 16):
        j0 = jb * 16
        for i0 in range(0, m, 16):
            i1 = min(i0 + 16, m)
            for j in range(j0, min(j0 + 16, n)):
                d = dst[j]
                for i in range(i0, i1):
                    d[i] = src[i, j]


#: The same loops on the calling thread only (for small matrices).
_transpose_into = threads._serial_twin(_transpose_into_parallel)

#: Matrices with at least this many values are transposed by all threads.
PARALLEL_MIN_TRANSPOSE = 1 << 14


_workspaces = threading.local()


def workspace(slot: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A scratch array for packed operands, reused from call to call: one buffer per thread and ``slot``,
    grown when a larger one is asked for. Its contents are valid until the next request for the same slot.

    A fresh NumPy array of a megabyte may be fresh pages from the operating system (glibc hands large
    freed blocks back until its threshold adapts), and the first write to each page then faults; once
    measured here at a few hundred microseconds for a 512 x 512 float matrix. Packing into the same
    buffer every call makes the cost predictable, as GEMM libraries keep their packing buffers.
    """
    bufs = getattr(_workspaces, "bufs", None)
    if bufs is None:
        bufs = _workspaces.bufs = {}
    dtype = np.dtype(dtype)
    nbytes = dtype.itemsize
    for d in shape:
        nbytes *= d
    buf = bufs.get(slot)
    if buf is None or buf.nbytes < nbytes:
        buf = bufs[slot] = np.empty(max(nbytes, 64), np.uint8)
    return buf[:nbytes].view(dtype).reshape(shape)


def pack_rows(x: np.ndarray, slot: str | None = None) -> np.ndarray:
    """``x`` (2-D or batched 3-D) with C-contiguous rows: itself when it is, else a packed copy.

    A transposed view of a contiguous matrix (the common case: ``weight.T``,
    ``grad.T``) is packed by a blocked transpose (for floats, 16 x 16 blocks
    transposed in vector registers: :func:`npu_lab.kernels.simd.transpose_into`);
    anything else by NumPy. With ``slot``, a 2-D copy goes into that
    :func:`workspace` buffer instead of a new array.
    """
    if x.flags.c_contiguous:
        return x
    if x.ndim == 2 and x.T.flags.c_contiguous and x.dtype.kind in "fiu":
        out = np.empty(x.shape, x.dtype) if slot is None else workspace(slot, x.shape, x.dtype)
        lanes = simd.LANES_OF.get(x.dtype)
        if lanes is not None and x.size >= PARALLEL_MIN_TRANSPOSE:
            simd.transpose_into(x.T, out, lanes)
        else:
            (_transpose_into_parallel if x.size >= PARALLEL_MIN_TRANSPOSE else _transpose_into)(x.T, out)
        return out
    return np.ascontiguousarray(x)


_ZEROS: dict[np.dtype, np.ndarray] = {}


def _zeros(dtype: np.dtype) -> np.ndarray:
    """A cached one-value zero array: the ``bias`` of a product without one, and (``[0]``) the
    typed zero the kernels start their sums from."""
    z = _ZEROS.get(dtype)
    if z is None:
        z = _ZEROS[dtype] = np.zeros(1, dtype)
    return z


@numba.njit(cache=True, nogil=True, boundscheck=False, fastmath={"reassoc", "contract"})
def _row_sums(a, out, zero):  # pragma: no cover - compiled
    for i in range(a.shape[0]):
        row = a[i]
        s = zero
        for kk in range(a.shape[1]):
            s += row[kk]
        out[i] = s


@numba.njit(cache=True, nogil=True, boundscheck=False, fastmath={"reassoc", "contract"})
def _col_sums(at, out, zero):  # pragma: no cover - compiled
    """out[i] = sum over k of at[k, i]: the row sums of ``a = at.T``, read along at's contiguous rows."""
    for i in range(at.shape[1]):
        out[i] = zero
    for kk in range(at.shape[0]):
        row = at[kk]
        for i in range(at.shape[1]):
            out[i] += row[i]


@numba.njit(parallel=True, cache=True, nogil=True)
def _add_bias_rows(out, bias):  # pragma: no cover - compiled
    """out[i, j] = out[i, j] + bias[j] over rows shared out across threads (the "bias" epilogue)."""
    m, n = out.shape
    for i in prange(np.uintp(m)):
        for j in range(np.uintp(n)):
            out[i, j] = out[i, j] + bias[j]


@numba.njit(cache=True, nogil=True)
def add_bias_rows(m, n, out_address, bias_address, zero):  # pragma: no cover - compiled
    """The "bias" epilogue after a BLAS product, on memory given by address: ``out`` (``m x n``, C-contiguous)
    gets ``bias`` (``n`` values) added to every row; ``zero`` is a value of their dtype. From
    :data:`PARALLEL_MIN_EPILOGUE` values on, on all threads."""
    out = ptr_array(out_address, m * n, zero)
    bias = ptr_array(bias_address, n, zero)
    if m * n >= PARALLEL_MIN_EPILOGUE:
        _add_bias_rows(out.reshape((m, n)), bias)
        return
    for i in range(m):
        row = out[i * n:(i + 1) * n]
        for j in range(n):
            row[j] = row[j] + bias[j]


def choose_kernel(a: np.ndarray, b: np.ndarray, out: np.ndarray, blas: bool = True) -> str:
    """Which kernel :func:`mm` runs for ``a @ b`` into ``out``: "blas", "dot", "outer", "packed outer" or "rows".

    * "blas" for float32 and float64 products (:mod:`npu_lab.kernels.blas`: PyTorch's BLAS, else
      NumPy's, tuned for the machine it runs on), unless ``blas`` is False; the epilogue then runs
      as a second pass over the output. The numba kernels below take the rest:
    * "dot" when ``a`` and ``b.T`` already have contiguous rows (``x @ weight.T``) and
      the product is too small or too narrow for "packed outer": nothing to pack, long
      dot products;
    * "outer" when the rows of ``b`` are contiguous (``grad @ weight``,
      ``x.T @ grad``) and the output holds at least one whole block: nothing to pack;
    * "packed outer" when ``b.T`` has contiguous rows (``x @ weight.T``) and ``a``
      has at least :data:`PACK_OUTER_MIN_ROWS` rows: ``b`` is transposed once
      into a workspace (about a tenth of the product's time), then the outer form runs;
    * "rows" for a short ``K`` or a few rows when ``b`` would need packing;
    * "dot" on packed copies otherwise.
    """
    if blas and _blas.takes(a, b, out):
        return "blas"
    m, k = a.shape
    n = b.shape[1]
    dt = out.dtype
    cols = simd.TILE_COLS.get(dt)
    outer_ok = (cols is not None and n >= cols and m >= simd.MR and a.dtype == dt and b.dtype == dt
                and out.flags.c_contiguous)
    if outer_ok and b.strides[1] == dt.itemsize:
        return "outer"
    if outer_ok and m >= PACK_OUTER_MIN_ROWS and b.T.flags.c_contiguous:
        return "packed outer"
    if a.flags.c_contiguous and b.T.flags.c_contiguous and k >= DOT_MIN_K:
        return "dot"
    if n >= ROWS_MIN_COLS and (k < DOT_MIN_K or (m < PACK_MIN_ROWS and not b.T.flags.c_contiguous)):
        return "rows"
    return "dot"


def _plain(epilogue: str | Epilogue) -> bool:
    """Does ``epilogue`` store each sum as it is (nothing for a pass after a BLAS product to do)?"""
    if isinstance(epilogue, Epilogue):
        return not epilogue.body and epilogue.writes == ("v",) and not epilogue.params
    return epilogue == "none"


def _row_sums_of(a: np.ndarray, out: np.ndarray, zero: object) -> None:
    """out[i] = the sum of row i of ``a``, read along whichever of its dimensions is contiguous."""
    if a.T.flags.c_contiguous:
        _col_sums(a.T, out, zero)
    else:
        _row_sums(a, out, zero)


def mm(a: np.ndarray, b: np.ndarray, out: np.ndarray, tiles: tuple[int, int] = DEFAULT_TILES,
       epilogue: str | Epilogue = "none", bias: np.ndarray | None = None, extra: Sequence[object] = (),
       a_row_sums: np.ndarray | None = None, blas: bool = True) -> None:
    """out[:] = epilogue(a @ b) for 2-D arrays of any strides (``out`` C-contiguous).

    ``extra`` are the values of an :class:`Epilogue`'s ``params``, in order.
    ``a_row_sums``, if given, receives the sum of each row of ``a`` (a weight
    gradient ``g.T @ x`` gives the bias gradient ``g.sum(0)`` this way).
    :func:`choose_kernel` says which kernel runs (``blas=False``: one of the numba kernels,
    even for float32 and float64).
    """
    if blas and _blas.takes(a, b, out):
        if a_row_sums is not None:
            _row_sums_of(a, a_row_sums, _zeros(out.dtype)[0])
        _blas.matmul(a, b, out)
        if not _plain(epilogue):
            mod = module(*tiles, epilogue)
            zeros = _zeros(out.dtype)
            bias = zeros if bias is None else pack_rows(bias.reshape(-1))
            run = mod.epilogue_pass if out.size >= PARALLEL_MIN_EPILOGUE else mod.epilogue_pass_serial
            run(out, bias, zeros[0], *extra)
        return
    mod = module(*tiles, epilogue)
    m, k = a.shape
    n = b.shape[1]
    zeros = _zeros(out.dtype)
    bias = zeros if bias is None else pack_rows(bias.reshape(-1))
    parallel = m * n * k >= PARALLEL_MIN_WORK
    kind = choose_kernel(a, b, out, blas=False)
    if kind == "packed outer":
        b = pack_rows(b, slot="b")
        kind = "outer"
    if kind == "outer":
        if a_row_sums is not None:
            _row_sums_of(a, a_row_sums, zeros[0])
        (mod.mm_outer if parallel else mod.mm_outer_serial)(a, b, out, simd.TILE_COLS[out.dtype], bias, zeros[0],
                                                            *extra)
        return
    a = pack_rows(a, slot="a")
    if a_row_sums is not None:
        _row_sums(a, a_row_sums, zeros[0])
    if kind == "rows":
        (mod.mm_rows if parallel else mod.mm_rows_serial)(a, pack_rows(b, slot="b"), out, bias, zeros[0], *extra)
    elif out.dtype in simd.TILE_COLS and a.dtype == out.dtype and b.dtype == out.dtype:
        lanes = simd.LANES_OF[out.dtype]
        (mod.mm_simd if parallel else mod.mm_simd_serial)(a, pack_rows(b.T, slot="b"), out, lanes, bias, zeros[0],
                                                          *extra)
    else:
        (mod.mm if parallel else mod.mm_serial)(a, pack_rows(b.T, slot="b"), out, bias, zeros[0], *extra)


def bmm(a: np.ndarray, b: np.ndarray, out: np.ndarray, tiles: tuple[int, int] = DEFAULT_TILES,
        blas: bool = True) -> None:
    """out[p] = a[p] @ b[p] for 3-D arrays of any strides (``out`` C-contiguous); float32 and float64
    through BLAS unless ``blas`` is False."""
    if blas and _blas.takes(a, b, out):
        _blas.matmul(a, b, out)
        return
    a = pack_rows(a)
    w = pack_rows(b.transpose(0, 2, 1))
    mod = module(*tiles)
    run = mod.bmm if a.shape[0] * a.shape[1] * a.shape[2] * w.shape[1] >= PARALLEL_MIN_WORK else mod.bmm_serial
    zeros = _zeros(out.dtype)
    run(a, w, out, zeros, zeros[0])
