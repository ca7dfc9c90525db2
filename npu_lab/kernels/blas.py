"""Matrix products through a BLAS library: PyTorch's own where it exports one, else NumPy's.

The hand-written micro-kernels of :mod:`npu_lab.kernels.simd` are tuned for one
vector width; a learner's machine may have another (AVX2, AVX-512, NEON). A BLAS
library picks the kernels for the machine it runs on, so float32 and float64
products go through one (:func:`matmul`, called by
:func:`npu_lab.kernels.matmul.mm` and ``bmm``), and the numba kernels keep the
other dtypes (integers) and every product when BLAS is switched off.

Which BLAS:

* **PyTorch's** (``sgemm_``/``dgemm_`` exported by ``libtorch_cpu``: Intel MKL on
  x86-64), called from compiled code as :mod:`npu_lab.kernels.linalg_decomp`
  calls LAPACK. It is the routine PyTorch's CPU ``mm`` runs, so the npu's
  products run at PyTorch's CPU speed on every machine. It runs on numba's threads
  (:func:`_gemm_units`): a large product is cut into blocks of columns (of rows
  when it has too few columns), one per thread, and each thread calls the library with a thread count of one
  (``mkl_set_num_threads_local``, for that thread only and put back after). The
  library then never starts an OpenMP team of its own beside numba's: two teams
  whose idle threads spin take the cores from each other, and on a 2-core machine
  a product that followed a numba kernel (or the reverse) ran 2-5 times slower.
* **NumPy's** (``np.matmul``) where PyTorch exports none. Its thread pool gets
  numba's thread count (:func:`sync_threads`, through ``threadpoolctl``). OpenBLAS's
  threads keep spinning for a while after each product, which slows the numba
  kernels that follow on a busy machine: the reason PyTorch's BLAS comes first.

``NPU_LAB_BLAS=0`` in the environment, or :data:`ENABLED` set to False, sends every
product back to the numba kernels.

Everything this module finds out about the libraries (the routines' addresses, NumPy's
thread pools) it finds when it is imported, which ``import npu_lab`` does: importing
``threadpoolctl`` sets the environment variable ``KMP_DUPLICATE_LIB_OK``, and that must
not happen later, inside a learner's code that a graded check watches.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic

from . import linalg_decomp

try:  # imported now, not when first needed: importing it sets KMP_DUPLICATE_LIB_OK (see above)
    import threadpoolctl
except ImportError:  # pragma: no cover - a declared dependency
    threadpoolctl = None

__all__ = ["ENABLED", "backend", "blasable", "gemm_addresses", "matmul", "sync_threads", "takes", "torch_routines"]

#: Products of these dtypes go to BLAS (when :data:`ENABLED`).
DTYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
#: False: every product runs on the numba kernels (``NPU_LAB_BLAS=0`` in the environment).
ENABLED = os.environ.get("NPU_LAB_BLAS", "1") != "0"


def _after_fork_in_child() -> None:
    """A forked child (a graded check's copy of the notebook) runs its products on the numba kernels: BLAS's
    OpenMP team did not come along, and the first multi-threaded product in the child would wait for it forever."""
    global ENABLED
    ENABLED = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

_opts = dict(cache=True, nogil=True)
_T, _N = ord("T"), ord("N")


def takes(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    """Does ``out[...] = a @ b`` go to BLAS: float32 or float64 throughout, ``out`` C-contiguous, nothing empty."""
    dt = out.dtype
    return (ENABLED and dt in DTYPES and a.dtype == dt and b.dtype == dt and out.flags.c_contiguous
            and a.size > 0 and b.size > 0)


def blasable(x: np.ndarray) -> bool:
    """Can BLAS read the last two dimensions of ``x`` as they are: one of them with unit stride, the other
    with a stride of at least a row (what NumPy's ``matmul`` checks before it calls BLAS)?"""
    it = x.itemsize
    r, c = x.shape[-2:]
    s0, s1 = x.strides[-2:]
    return (s1 == it and s0 % it == 0 and s0 >= c * it) or (s0 == it and s1 % it == 0 and s1 >= r * it)


# ---------------------------------------------------------------------------------------------------
# PyTorch's BLAS, called from compiled code

@intrinsic
def _call_int(typingctx, fn, args):  # noqa: ANN001, ARG001 - numba's intrinsic protocol
    """``int fn(int, ...)`` for the C function at address ``fn`` with the integers in the tuple ``args``
    (MKL's thread-count setter, numba's thread-count getter)."""
    if not isinstance(fn, types.Integer) or not isinstance(args, types.BaseTuple):
        return None
    if not all(isinstance(t, types.Integer) for t in args):
        return None
    count = len(args)

    def codegen(context, builder, signature, llargs):
        i32 = ir.IntType(32)
        callee = builder.inttoptr(llargs[0], ir.FunctionType(i32, [i32] * count).as_pointer())
        values = [context.cast(builder, builder.extract_value(llargs[1], i), signature.args[1][i], types.int32)
                  for i in range(count)]
        return builder.call(callee, values)

    return types.int32(fn, args), codegen


#: Products of fewer multiply-adds than this run on the calling thread alone.
PARALLEL_MIN_MACS = 1 << 18


@numba.njit(**_opts)
def call_gemm(fn, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, alpha, beta):
    """Column-major ``C = alpha op(A) op(B) + beta C`` (``m x n``, inner ``k``) with the Fortran ``?gemm`` at
    address ``fn``; ``a``, ``b``, ``c`` are addresses. Row-major ``C = A B`` is column-major ``C^T = B^T A^T``:
    the callers pass their operands in that swapped order."""
    iv = np.empty(6, np.int32)
    iv[0] = m
    iv[1] = n
    iv[2] = k
    iv[3] = lda
    iv[4] = ldb
    iv[5] = ldc
    ch = np.empty(2, np.uint8)
    ch[0] = ta
    ch[1] = tb
    sc = np.full(2, alpha)
    sc[1] = beta
    linalg_decomp._call(fn, (ch[0:].ctypes.data, ch[1:].ctypes.data, iv[0:].ctypes.data, iv[1:].ctypes.data,
                             iv[2:].ctypes.data, sc[0:].ctypes.data, a, iv[3:].ctypes.data, b, iv[4:].ctypes.data,
                             sc[1:].ctypes.data, c, iv[5:].ctypes.data))


@numba.njit(**_opts)
def _gemm_block(fn, set_threads, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, one, zero):
    """One ``?gemm`` call on the calling thread, with the library's thread count for this thread set to one
    (and put back after), so that the library never starts an OpenMP team of its own next to numba's."""
    before = 0
    if set_threads != 0:
        before = _call_int(set_threads, (np.int64(1),))
    call_gemm(fn, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, one, zero)
    if set_threads != 0:
        _call_int(set_threads, (before,))


@numba.njit(parallel=True, **_opts)
def _gemm_units(fn, set_threads, units, splits, by_rows, ta, tb, m, n, k, a, sa, lda, b, sb, ldb, c, s_c, size, one,
                zero):
    """``units`` column-major products ``C = op(A) op(B)`` on numba's threads: matrix ``u // splits`` of a
    batch (address strides ``sa, sb, s_c`` in bytes), cut into ``splits`` blocks of columns (of rows when
    ``by_rows``: a product with few columns), block ``u % splits``, each by :func:`_gemm_block`."""
    for u in prange(units):
        p = u // splits
        part = u % splits
        i0, i1, j0, j1 = 0, m, 0, n
        if by_rows:
            i0 = m * part // splits
            i1 = m * (part + 1) // splits
        else:
            j0 = n * part // splits
            j1 = n * (part + 1) // splits
        # row i of op(A): one element further along when A is not transposed, lda when it is;
        # column j of op(B): ldb elements further along when B is not transposed, one when it is
        pa = a + p * sa + i0 * (1 if ta == _N else lda) * size
        pb = b + p * sb + j0 * (ldb if tb == _N else 1) * size
        pc = c + p * s_c + (j0 * m + i0) * size
        if j1 > j0 and i1 > i0:
            _gemm_block(fn, set_threads, ta, tb, i1 - i0, j1 - j0, k, pa, lda, pb, ldb, pc, m, one, zero)


@numba.njit(**_opts)
def _plan(get_threads, batch, m, n, k):
    """(units, splits, by_rows) for :func:`_gemm_units`: every thread busy on a large product, one unit on a
    small one. Blocks are of columns, or of rows when the product has too few columns to share out (an RNN
    step's ``h @ W^T`` is a 512 x 16 column-major product)."""
    threads = _call_int(get_threads, ()) if get_threads != 0 else 1
    if threads <= 1 or batch * m * n * k < PARALLEL_MIN_MACS:
        return batch, 1, False
    if batch >= threads:
        return batch, 1, False
    wanted = (threads + batch - 1) // batch
    if n // 16 >= min(wanted, m // 16):
        return batch * min(max(1, n // 16), wanted), min(max(1, n // 16), wanted), False
    splits = min(max(1, m // 16), wanted)
    return batch * splits, splits, splits > 1


@numba.njit(**_opts)
def _gemm(fn, set_threads, get_threads, ta, tb, m, n, k, a, lda, b, ldb, c, one, zero):
    """Column-major products C = op(A) op(B) with Fortran's ``?gemm`` (every argument by reference), one
    per matrix of a batch when the arrays are 3-D (``c`` row-major: C is its transpose, leading dimension
    ``m``), on numba's threads (:func:`_gemm_units`)."""
    batch = c.shape[0] if c.ndim == 3 else 1
    sa = a.strides[0] if a.ndim == 3 else 0
    sb = b.strides[0] if b.ndim == 3 else 0
    s_c = c.strides[0] if c.ndim == 3 else 0
    units, splits, by_rows = _plan(get_threads, batch, m, n, k)
    _gemm_units(fn, set_threads, units, splits, by_rows, ta, tb, m, n, k, a.ctypes.data, sa, lda, b.ctypes.data, sb,
                ldb, c.ctypes.data, s_c, c.itemsize, one, zero)


@numba.njit(**_opts)
def gemm_addresses(fn, set_threads, get_threads, ta, tb, m, n, k, a, lda, b, ldb, c, size, one, zero):
    """:func:`_gemm` for one product of operands given by address (the tensors' ``data_ptr()``, ``size`` bytes
    per element)."""
    units, splits, by_rows = _plan(get_threads, 1, m, n, k)
    if units == 1:  # (a small product: no parallel region to start)
        _gemm_block(fn, set_threads, ta, tb, m, n, k, a, lda, b, ldb, c, m, one, zero)
    else:
        _gemm_units(fn, set_threads, units, splits, by_rows, ta, tb, m, n, k, a, 0, lda, b, 0, ldb, c, 0, size, one,
                    zero)




def _address(fn: object) -> int:
    return ctypes.cast(fn, ctypes.c_void_p).value or 0


def _find_torch_routines(dtype: np.dtype) -> tuple[int, int, int] | None:
    """(gemm, thread-count setter, numba's thread-count getter) addresses for ``dtype`` (setter and getter 0
    when not found); None where PyTorch exports no BLAS."""
    gemm = linalg_decomp.routine("gemm", dtype)
    if gemm is None:
        return None
    setter = getter = 0
    try:  # MKL's C setter (takes the count by value; the lower-case names are Fortran's, by reference)
        setter = _address(linalg_decomp._library().MKL_Set_Num_Threads_Local)
        from numba.np.ufunc import parallel

        from ..device.registration import start_kernel_threads

        # numba's pool, started as the device starts it: on a bare device its workqueue layer (a forked
        # check's child cannot run GNU OpenMP), and torch's CPU thread count left as it was
        start_kernel_threads()
        getter = _address(parallel._get_num_threads)
    except (AttributeError, ImportError, TypeError):
        setter = getter = 0
    if not (setter and getter):
        setter = getter = 0
    return gemm, setter, getter


#: :func:`_find_torch_routines` per dtype, found once, at import (read-only afterwards).
_torch_blas: dict[np.dtype, tuple[int, int, int] | None] = {dt: _find_torch_routines(dt) for dt in DTYPES}


def torch_routines(dtype: np.dtype) -> tuple[int, int, int] | None:
    """(``?gemm``, the library's per-thread thread-count setter, numba's thread-count getter) addresses for
    :func:`gemm_addresses` and the kernels that call it, for ``dtype``; None where PyTorch exports no BLAS."""
    return _torch_blas.get(dtype)


def _operand(x: np.ndarray) -> tuple[int, int] | None:
    """(op, leading dimension) of a row-major operand seen by column-major BLAS as its transpose: "N" when its
    rows are contiguous, "T" when its columns are; None if neither (it must be copied first)."""
    it = x.itemsize
    r, c = x.shape[-2:]
    s0, s1 = x.strides[-2:]
    if (s1 == it or c == 1) and s0 % it == 0:
        ld = s0 // it if r > 1 else c
        if ld >= max(1, c):
            return _N, ld
    if (s0 == it or r == 1) and s1 % it == 0:
        ld = s1 // it if c > 1 else r
        if ld >= max(1, r):
            return _T, ld
    return None


def _torch_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, routines: tuple[int, int, int]) -> None:
    """out = a @ b (2-D or 3-D) with PyTorch's ``?gemm``: row-major C = A B is column-major C^T = B^T A^T."""
    la, lb = _operand(a), _operand(b)
    if la is None:
        a = np.ascontiguousarray(a)
        la = _operand(a)
    if lb is None:
        b = np.ascontiguousarray(b)
        lb = _operand(b)
    m, k = a.shape[-2:]
    _compiled_for(out.dtype, out.ndim)
    _gemm(*routines, lb[0], la[0], out.shape[-1], m, k, b, lb[1], a, la[1], out, 1, 0)


_signatures: set[tuple[np.dtype, int]] = set()
#: Held while :func:`_compiled_for` compiles (kernels run on several threads: DataParallel, forked ranks' threads).
_compile_lock = threading.Lock()


def _compiled_for(dtype: np.dtype, ndim: int) -> None:
    """Compile :func:`_gemm` once per dtype and number of dimensions, for arrays of any layout.

    The kernel reads only addresses and strides, so the operands' layouts (C, F or neither) need no
    versions of their own: numba passes every layout to the one taking any ('A'), once it may not
    compile a version for the exact layouts it is given.
    """
    if (dtype, ndim) in _signatures:
        return
    with _compile_lock:
        if (dtype, ndim) in _signatures:
            return
        scalar = numba.from_dtype(dtype)
        read, written = types.Array(scalar, ndim, "A", readonly=True), types.Array(scalar, ndim, "A")
        i = types.int64
        _gemm.disable_compile(False)
        try:
            _gemm.compile((i, i, i, i, i, i, i, i, read, i, read, i, written, scalar, scalar))
        finally:
            _gemm.disable_compile(True)
        _signatures.add((dtype, ndim))


def layout(rows: int, cols: int, row_stride: int, col_stride: int) -> tuple[int, int] | None:
    """(op, leading dimension) of a row-major ``rows x cols`` operand with these strides (in elements), seen by
    column-major BLAS as its transpose: "N" when its rows are contiguous, "T" when its columns are; None if
    neither (BLAS cannot read it as it is)."""
    if col_stride == 1 or cols == 1:
        ld = row_stride if rows > 1 else cols
        if ld >= max(1, cols):
            return _N, ld
    if row_stride == 1 or rows == 1:
        ld = col_stride if cols > 1 else rows
        if ld >= max(1, rows):
            return _T, ld
    return None


def gemm_for(dtype: np.dtype) -> Callable | None:
    """``gemm(m, n, k, a, a_layout, b, b_layout, out)``: ``out = a @ b`` for operands given by address
    (``m x k`` and ``k x n``, each with its :func:`layout`) into a C-contiguous ``m x n`` output, with PyTorch's
    BLAS for ``dtype``; None where PyTorch exports none (the caller then takes another way)."""
    routines = torch_routines(np.dtype(dtype))
    if routines is None:
        return None
    fn, set_threads, get_threads = routines
    one, zero = np.dtype(dtype).type(1), np.dtype(dtype).type(0)
    size = np.dtype(dtype).itemsize
    call = gemm_addresses

    def gemm(m: int, n: int, k: int, a: int, a_layout: tuple[int, int], b: int, b_layout: tuple[int, int],
             out: int) -> None:
        call(fn, set_threads, get_threads, b_layout[0], a_layout[0], n, m, k, b, b_layout[1], a, a_layout[1], out,
             size, one, zero)

    return gemm


# ---------------------------------------------------------------------------------------------------
# NumPy's BLAS

def _find_controllers() -> list:
    """NumPy's BLAS libraries as ``threadpoolctl`` sees them (not PyTorch's own: its CPU speed is not ours
    to change). Empty when ``threadpoolctl`` is not installed."""
    if threadpoolctl is None:  # pragma: no cover - a declared dependency
        return []
    import torch

    torch_dir = os.path.dirname(torch.__file__)
    ctl = threadpoolctl.ThreadpoolController().select(user_api="blas")
    return [lc for lc in ctl.lib_controllers if not str(lc.filepath).startswith(torch_dir)]


#: The ``threadpoolctl`` controllers of NumPy's BLAS, found once, at import (empty if none was found).
_controllers: list = _find_controllers()
#: The thread count last given to them.
_threads = -1
_threads_lock = threading.Lock()


def sync_threads() -> int:
    """Give NumPy's BLAS as many threads as numba's kernels use now (``numba.get_num_threads()``);
    returns that number. Cheap when nothing changed."""
    global _threads
    n = numba.get_num_threads()
    if n != _threads:
        with _threads_lock:
            for lc in _controllers:
                lc.set_num_threads(n)
            _threads = n
    return n


def _numpy_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    if not blasable(a):
        a = np.ascontiguousarray(a)
    if not blasable(b):
        b = np.ascontiguousarray(b)
    if _threads != numba.get_num_threads():
        sync_threads()
    np.matmul(a, b, out=out)


def backend(dtype: np.dtype = np.float32) -> str:
    """Which BLAS :func:`matmul` uses for ``dtype``: "torch" (PyTorch's) or "numpy" (NumPy's)."""
    return "torch" if torch_routines(np.dtype(dtype)) is not None else "numpy"


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = a @ b`` (2-D, or batched 3-D with a batch dimension on every operand) with BLAS;
    operands BLAS cannot read as they are are copied first. The caller checked :func:`takes`."""
    routines = torch_routines(out.dtype)
    if routines is not None:
        _torch_matmul(a, b, out, routines)
    else:
        _numpy_matmul(a, b, out)
