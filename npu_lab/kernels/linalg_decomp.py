"""numba kernels for matrix decompositions: LU, Cholesky, QR, SVD, eigensolvers, LDL, least squares.

Each kernel loops over a batch of matrices and calls the LAPACK routine for one
matrix from compiled code, as numba's own ``np.linalg`` does. numba binds its
``np.linalg`` to SciPy's LAPACK, which this environment does not have; the
LAPACK here is the one PyTorch's CPU build links and exports (``libtorch_cpu``:
Intel MKL on x86-64), so the npu factors a matrix with the very routines the CPU
backend calls (``sgetrf``, ``dgesdd``, ``zheevd``...). :func:`routine` finds a
routine's address; :func:`_call` is a numba intrinsic that calls a C function
pointer with pointer arguments (the Fortran calling convention: every argument by
reference), so the kernels stay cacheable: the address is an ordinary argument.

Layout: a batch of ``m x n`` matrices is a C-contiguous array of shape
``(batch, n, m)``: each ``a[b]`` is one matrix in column-major (Fortran) order,
with leading dimension ``m``, which is what LAPACK reads and writes in place.
Integer parameters are 32-bit (LAPACK's LP64 interface); pivots are LAPACK's
1-based ``int32`` indices. Every kernel returns nothing and writes its outputs.
"""

from __future__ import annotations

import ctypes
import os

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_opts = dict(cache=True, nogil=True)

_PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
           np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}
#: Routines whose complex version has another name (orthogonal -> unitary, symmetric -> Hermitian).
_COMPLEX_NAME = {"orgqr": "ungqr", "ormqr": "unmqr", "syevd": "heevd"}
_lib: ctypes.CDLL | None = None
_addresses: dict[str, int | None] = {}


def _library() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        import torch

        _lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
    return _lib


def routine(name: str, dtype: np.dtype) -> int | None:
    """Address of the LAPACK/BLAS routine ``name`` ("getrf", "gesdd"...) for ``dtype``; None if unavailable."""
    dtype = np.dtype(dtype)
    prefix = _PREFIX.get(dtype)
    if prefix is None:
        return None
    if prefix in "cz":
        name = _COMPLEX_NAME.get(name, name)
    symbol = f"{prefix}{name}_"
    if symbol not in _addresses:
        try:
            _addresses[symbol] = ctypes.cast(getattr(_library(), symbol), ctypes.c_void_p).value
        except (OSError, AttributeError):
            _addresses[symbol] = None
    return _addresses[symbol]


@intrinsic
def _call(typingctx, fn, ptrs):
    """Call the C function at address ``fn`` with the pointers in the tuple ``ptrs`` (returns nothing)."""
    if not isinstance(fn, types.Integer) or not isinstance(ptrs, types.BaseTuple):
        return None
    count = len(ptrs)
    sig = types.void(fn, ptrs)

    def codegen(context, builder, signature, args):
        ptr = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [ptr] * count)
        callee = builder.inttoptr(args[0], fnty.as_pointer())
        values = [builder.inttoptr(builder.extract_value(args[1], i), ptr) for i in range(count)]
        builder.call(callee, values)
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(**_opts)
def _ints(*values):
    """An int32 array of the scalar parameters (LAPACK takes them by reference)."""
    out = np.empty(len(values), np.int32)
    for i in range(len(values)):
        out[i] = values[i]
    return out


@numba.njit(**_opts)
def _lwork(x):
    """LAPACK's workspace query answer (a float) as a size, rounded up."""
    return max(1, int(x.real * 1.000001) + 1)


@numba.njit(**_opts)
def getrf(fn, a, piv, info):
    """LU with partial pivoting, A = P L U, of each m x n matrix a[b] (overwritten by L below and U on the diagonal)."""
    nb, n, m = a.shape
    iv = _ints(m, n, max(1, m))
    for b in range(nb):
        _call(fn, (iv[0:].ctypes.data, iv[1:].ctypes.data, a[b].ctypes.data, iv[2:].ctypes.data,
                   piv[b].ctypes.data, info[b:].ctypes.data))


@numba.njit(**_opts)
def lu_nopivot(a, piv, info):
    """LU without pivoting (right-looking, as CUDA's unpivoted path): A = L U; pivots are the identity.

    A zero pivot sets info to its 1-based column and skips that column's scaling (no NaNs), as PyTorch does.
    """
    nb, n, m = a.shape
    k = min(m, n)
    for b in range(nb):
        x = a[b]
        info[b] = 0
        for j in range(k):
            d = x[j, j]
            if d == 0:
                if info[b] == 0:
                    info[b] = j + 1
                continue
            for r in range(j + 1, m):
                x[j, r] /= d
            for c in range(j + 1, n):
                u = x[c, j]
                for r in range(j + 1, m):
                    x[c, r] -= x[j, r] * u
        for j in range(piv.shape[1]):
            piv[b, j] = j + 1


@numba.njit(**_opts)
def getrs(fn, trans, lu, piv, rhs, info):
    """Solve op(A) X = B from A's LU factors lu[b] (n x n) and pivots; rhs[b] (n x nrhs) is overwritten by X.

    ``trans`` is ord('N'), ord('T') or ord('C').
    """
    nb, nrhs, n = rhs.shape
    iv = _ints(n, nrhs, max(1, n), trans)
    ch = iv[3:].astype(np.uint8)
    for b in range(nb):
        _call(fn, (ch.ctypes.data, iv[0:].ctypes.data, iv[1:].ctypes.data, lu[b].ctypes.data, iv[2:].ctypes.data,
                   piv[b].ctypes.data, rhs[b].ctypes.data, iv[2:].ctypes.data, info[b:].ctypes.data))


@numba.njit(**_opts)
def potrf(fn, uplo, a, info):
    """Cholesky factor of each Hermitian positive-definite a[b], written in its ``uplo`` triangle."""
    nb, n, _ = a.shape
    iv = _ints(n, max(1, n), uplo)
    ch = iv[2:].astype(np.uint8)
    for b in range(nb):
        _call(fn, (ch.ctypes.data, iv[0:].ctypes.data, a[b].ctypes.data, iv[1:].ctypes.data, info[b:].ctypes.data))


@numba.njit(**_opts)
def potri(fn, uplo, a, info):
    """Inverse of A from its Cholesky factor a[b]; the other triangle is filled with the conjugate transpose."""
    nb, n, _ = a.shape
    iv = _ints(n, max(1, n), uplo)
    ch = iv[2:].astype(np.uint8)
    upper = uplo == 85  # 'U'
    for b in range(nb):
        _call(fn, (ch.ctypes.data, iv[0:].ctypes.data, a[b].ctypes.data, iv[1:].ctypes.data, info[b:].ctypes.data))
        x = a[b]  # x[col, row]
        for c in range(n):
            for r in range(n):
                if (upper and r > c) or (not upper and r < c):
                    x[c, r] = np.conj(x[r, c])


@numba.njit(**_opts)
def potrs(fn, uplo, a, rhs, info):
    """Solve A X = B from A's Cholesky factor a[b] (``uplo`` triangle); rhs[b] (n x nrhs) is overwritten by X."""
    nb, nrhs, n = rhs.shape
    iv = _ints(n, nrhs, max(1, n), uplo)
    ch = iv[3:].astype(np.uint8)
    for b in range(nb):
        _call(fn, (ch.ctypes.data, iv[0:].ctypes.data, iv[1:].ctypes.data, a[b].ctypes.data, iv[2:].ctypes.data,
                   rhs[b].ctypes.data, iv[2:].ctypes.data, info[b:].ctypes.data))


@numba.njit(**_opts)
def geqrf(fn, a, tau, info):
    """Householder QR of each m x n a[b]: R on and above the diagonal, reflectors below, their scales in tau[b]."""
    nb, n, m = a.shape
    iv = _ints(m, n, max(1, m), -1)
    query = np.zeros(1, a.dtype)
    _call(fn, (iv[0:].ctypes.data, iv[1:].ctypes.data, a[0].ctypes.data, iv[2:].ctypes.data, tau[0].ctypes.data,
               query.ctypes.data, iv[3:].ctypes.data, info[0:].ctypes.data))
    iv[3] = max(n, _lwork(query[0]))
    work = np.empty(iv[3], a.dtype)
    for b in range(nb):
        _call(fn, (iv[0:].ctypes.data, iv[1:].ctypes.data, a[b].ctypes.data, iv[2:].ctypes.data, tau[b].ctypes.data,
                   work.ctypes.data, iv[3:].ctypes.data, info[b:].ctypes.data))


@numba.njit(**_opts)
def orgqr(fn, a, tau, info):
    """The m x n matrix Q = H_1 ... H_k of the reflectors stored below the diagonal of a[b] (overwritten by Q)."""
    nb, n, m = a.shape
    k = tau.shape[1]
    iv = _ints(m, n, k, max(1, m), -1)
    query = np.zeros(1, a.dtype)
    _call(fn, (iv[0:].ctypes.data, iv[1:].ctypes.data, iv[2:].ctypes.data, a[0].ctypes.data, iv[3:].ctypes.data,
               tau[0].ctypes.data, query.ctypes.data, iv[4:].ctypes.data, info[0:].ctypes.data))
    iv[4] = _lwork(query[0])
    work = np.empty(iv[4], a.dtype)
    for b in range(nb):
        _call(fn, (iv[0:].ctypes.data, iv[1:].ctypes.data, iv[2:].ctypes.data, a[b].ctypes.data, iv[3:].ctypes.data,
                   tau[b].ctypes.data, work.ctypes.data, iv[4:].ctypes.data, info[b:].ctypes.data))


@numba.njit(**_opts)
def ormqr(fn, side, trans, a, tau, c, info):
    """c[b] = op(Q) c[b] (side 'L') or c[b] op(Q) (side 'R'), Q given by the reflectors of a[b] and tau[b]."""
    nb, ncols, mrows = c.shape
    k = tau.shape[1]
    lda = a.shape[2]
    iv = _ints(mrows, ncols, k, max(1, lda), max(1, mrows), -1, side, trans)
    ch = iv[6:].astype(np.uint8)
    query = np.zeros(1, a.dtype)
    _call(fn, (ch[0:].ctypes.data, ch[1:].ctypes.data, iv[0:].ctypes.data, iv[1:].ctypes.data, iv[2:].ctypes.data,
               a[0].ctypes.data, iv[3:].ctypes.data, tau[0].ctypes.data, c[0].ctypes.data, iv[4:].ctypes.data,
               query.ctypes.data, iv[5:].ctypes.data, info[0:].ctypes.data))
    iv[5] = _lwork(query[0])
    work = np.empty(iv[5], a.dtype)
    for b in range(nb):
        _call(fn, (ch[0:].ctypes.data, ch[1:].ctypes.data, iv[0:].ctypes.data, iv[1:].ctypes.data,
                   iv[2:].ctypes.data, a[b].ctypes.data, iv[3:].ctypes.data, tau[b].ctypes.data, c[b].ctypes.data,
                   iv[4:].ctypes.data, work.ctypes.data, iv[5:].ctypes.data, info[b:].ctypes.data))


@numba.njit(**_opts)
def _gesdd_call(fn, ch, iv, a, s, u, vt, work, rwork, iwork, info, cplx):
    if cplx:
        _call(fn, (ch.ctypes.data, iv[0:].ctypes.data, iv[1:].ctypes.data, a.ctypes.data, iv[2:].ctypes.data,
                   s.ctypes.data, u.ctypes.data, iv[3:].ctypes.data, vt.ctypes.data, iv[4:].ctypes.data,
                   work.ctypes.data, iv[5:].ctypes.data, rwork.ctypes.data, iwork.ctypes.data, info.ctypes.data))
    else:
        _call(fn, (ch.ctypes.data, iv[0:].ctypes.data, iv[1:].ctypes.data, a.ctypes.data, iv[2:].ctypes.data,
                   s.ctypes.data, u.ctypes.data, iv[3:].ctypes.data, vt.ctypes.data, iv[4:].ctypes.data,
                   work.ctypes.data, iv[5:].ctypes.data, iwork.ctypes.data, info.ctypes.data))


@numba.njit(**_opts)
def gesdd(fn, jobz, a, s, u, vt, info, cplx):
    """SVD by divide and conquer: a[b] = u[b] diag(s[b]) vt[b] (``jobz`` 'A' full, 'S' reduced, 'N' values only).

    u[b] is m x ucols (leading dimension m), vt[b] is vrows x n; a[b] is destroyed.
    """
    nb, n, m = a.shape
    k = min(m, n)
    iv = _ints(m, n, max(1, m), max(1, u.shape[2]), max(1, vt.shape[2]), -1, jobz)
    ch = iv[6:].astype(np.uint8)
    iwork = np.empty(max(1, 8 * k), np.int32)
    lrwork = max(1, 7 * k) if jobz == 78 else max(1, k * max(5 * k + 7, 2 * max(m, n) + 2 * k + 1))  # 78: 'N'
    rwork = np.empty(lrwork if cplx else 1, s.dtype)
    query = np.zeros(1, a.dtype)
    _gesdd_call(fn, ch, iv, a[0], s[0], u[0], vt[0], query, rwork, iwork, info[0:], cplx)
    iv[5] = _lwork(query[0])
    work = np.empty(iv[5], a.dtype)
    for b in range(nb):
        _gesdd_call(fn, ch, iv, a[b], s[b], u[b], vt[b], work, rwork, iwork, info[b:], cplx)


@numba.njit(**_opts)
def _syevd_call(fn, ch, iv, a, w, work, rwork, iwork, info, cplx):
    if cplx:
        _call(fn, (ch[0:].ctypes.data, ch[1:].ctypes.data, iv[0:].ctypes.data, a.ctypes.data, iv[1:].ctypes.data,
                   w.ctypes.data, work.ctypes.data, iv[2:].ctypes.data, rwork.ctypes.data, iv[3:].ctypes.data,
                   iwork.ctypes.data, iv[4:].ctypes.data, info.ctypes.data))
    else:
        _call(fn, (ch[0:].ctypes.data, ch[1:].ctypes.data, iv[0:].ctypes.data, a.ctypes.data, iv[1:].ctypes.data,
                   w.ctypes.data, work.ctypes.data, iv[2:].ctypes.data, iwork.ctypes.data, iv[4:].ctypes.data,
                   info.ctypes.data))


@numba.njit(**_opts)
def syevd(fn, jobz, uplo, a, w, info, cplx):
    """Eigenvalues (ascending, into w[b]) and, for ``jobz`` 'V', eigenvectors (into a[b]) of Hermitian a[b].

    Only the ``uplo`` triangle of a[b] is read.
    """
    nb, n, _ = a.shape
    iv = _ints(n, max(1, n), -1, -1, -1, jobz, uplo)
    ch = iv[5:].astype(np.uint8)
    query = np.zeros(1, a.dtype)
    rquery = np.zeros(1, w.dtype)
    iquery = np.zeros(1, np.int32)
    _syevd_call(fn, ch, iv, a[0], w[0], query, rquery, iquery, info[0:], cplx)
    iv[2] = _lwork(query[0])
    iv[3] = _lwork(rquery[0])
    iv[4] = max(1, iquery[0])
    work = np.empty(iv[2], a.dtype)
    rwork = np.empty(iv[3], w.dtype)
    iwork = np.empty(iv[4], np.int32)
    for b in range(nb):
        _syevd_call(fn, ch, iv, a[b], w[b], work, rwork, iwork, info[b:], cplx)
        if info[b] != 0:
            return


@numba.njit(**_opts)
def _geev_call(fn, ch, iv, a, w1, w2, vr, work, rwork, info, cplx):
    if cplx:
        _call(fn, (ch[0:].ctypes.data, ch[1:].ctypes.data, iv[0:].ctypes.data, a.ctypes.data, iv[1:].ctypes.data,
                   w1.ctypes.data, rwork.ctypes.data, iv[3:].ctypes.data, vr.ctypes.data, iv[2:].ctypes.data,
                   work.ctypes.data, iv[4:].ctypes.data, rwork.ctypes.data, info.ctypes.data))
    else:
        _call(fn, (ch[0:].ctypes.data, ch[1:].ctypes.data, iv[0:].ctypes.data, a.ctypes.data, iv[1:].ctypes.data,
                   w1.ctypes.data, w2.ctypes.data, rwork.ctypes.data, iv[3:].ctypes.data, vr.ctypes.data,
                   iv[2:].ctypes.data, work.ctypes.data, iv[4:].ctypes.data, info.ctypes.data))


@numba.njit(**_opts)
def geev(fn, jobvr, a, w1, w2, vr, info, cplx):
    """Eigenvalues and right eigenvectors (``jobvr`` 'V', into vr[b]) of general square a[b] (destroyed).

    Real input: w1 gets the real parts and w2 the imaginary parts (conjugate pairs adjacent, positive imaginary
    part first; the pair's eigenvectors are vr[:, j] +- i vr[:, j+1]). Complex input: w1 gets the eigenvalues
    (w2 is a real array whose dtype names the real type).
    """
    nb, n, _ = a.shape
    iv = _ints(n, max(1, n), max(1, vr.shape[2]), 1, -1, 78, jobvr)  # jobvl 'N': no left vectors, ldvl 1
    ch = iv[5:].astype(np.uint8)
    rwork = np.empty(max(1, 2 * n), w2.dtype)  # also the (never written) left-vector argument
    query = np.zeros(1, a.dtype)
    _geev_call(fn, ch, iv, a[0], w1[0], w2[0], vr[0], query, rwork, info[0:], cplx)
    iv[4] = _lwork(query[0])
    work = np.empty(iv[4], a.dtype)
    for b in range(nb):
        _geev_call(fn, ch, iv, a[b], w1[b], w2[b], vr[b], work, rwork, info[b:], cplx)


@numba.njit(**_opts)
def sytrf(fn, uplo, a, piv, info):
    """Bunch-Kaufman LDL^T (sytrf) or LDL^H (hetrf: pass its address) of symmetric a[b], in its ``uplo`` triangle."""
    nb, n, _ = a.shape
    iv = _ints(n, max(1, n), -1, uplo)
    ch = iv[3:].astype(np.uint8)
    query = np.zeros(1, a.dtype)
    _call(fn, (ch.ctypes.data, iv[0:].ctypes.data, a[0].ctypes.data, iv[1:].ctypes.data, piv[0].ctypes.data,
               query.ctypes.data, iv[2:].ctypes.data, info[0:].ctypes.data))
    iv[2] = _lwork(query[0])
    work = np.empty(iv[2], a.dtype)
    for b in range(nb):
        _call(fn, (ch.ctypes.data, iv[0:].ctypes.data, a[b].ctypes.data, iv[1:].ctypes.data, piv[b].ctypes.data,
                   work.ctypes.data, iv[2:].ctypes.data, info[b:].ctypes.data))


@numba.njit(**_opts)
def sytrs(fn, uplo, a, piv, rhs, info):
    """Solve A X = B from the LDL factors a[b] and pivots of sytrf/hetrf; rhs[b] (n x nrhs) is overwritten by X."""
    nb, nrhs, n = rhs.shape
    iv = _ints(n, nrhs, max(1, n), uplo)
    ch = iv[3:].astype(np.uint8)
    for b in range(nb):
        _call(fn, (ch.ctypes.data, iv[0:].ctypes.data, iv[1:].ctypes.data, a[b].ctypes.data, iv[2:].ctypes.data,
                   piv[b].ctypes.data, rhs[b].ctypes.data, iv[2:].ctypes.data, info[b:].ctypes.data))


@numba.njit(**_opts)
def trsm(fn, side, uplo, trans, diag, a, rhs):
    """Triangular solve op(A) X = B (side 'L') or X op(A) = B (side 'R'); rhs[b] (m x n) is overwritten by X."""
    nb, n, m = rhs.shape
    iv = _ints(m, n, max(1, a.shape[2]), max(1, m), side, uplo, trans, diag)
    ch = iv[4:].astype(np.uint8)
    alpha = np.ones(1, a.dtype)
    for b in range(nb):
        _call(fn, (ch[0:].ctypes.data, ch[1:].ctypes.data, ch[2:].ctypes.data, ch[3:].ctypes.data,
                   iv[0:].ctypes.data, iv[1:].ctypes.data, alpha.ctypes.data, a[b].ctypes.data, iv[2:].ctypes.data,
                   rhs[b].ctypes.data, iv[3:].ctypes.data))


@numba.njit(**_opts)
def _lstsq_call(fn, driver, ch, iv, a, rhs, jpvt, s, rcond, rank, work, rwork, iwork, info, cplx):
    if driver == 0:  # gels
        _call(fn, (ch.ctypes.data, iv[0:].ctypes.data, iv[1:].ctypes.data, iv[2:].ctypes.data, a.ctypes.data,
                   iv[3:].ctypes.data, rhs.ctypes.data, iv[4:].ctypes.data, work.ctypes.data, iv[5:].ctypes.data,
                   info.ctypes.data))
    elif driver == 1:  # gelsy
        if cplx:
            _call(fn, (iv[0:].ctypes.data, iv[1:].ctypes.data, iv[2:].ctypes.data, a.ctypes.data,
                       iv[3:].ctypes.data, rhs.ctypes.data, iv[4:].ctypes.data, jpvt.ctypes.data, rcond.ctypes.data,
                       rank.ctypes.data, work.ctypes.data, iv[5:].ctypes.data, rwork.ctypes.data, info.ctypes.data))
        else:
            _call(fn, (iv[0:].ctypes.data, iv[1:].ctypes.data, iv[2:].ctypes.data, a.ctypes.data,
                       iv[3:].ctypes.data, rhs.ctypes.data, iv[4:].ctypes.data, jpvt.ctypes.data, rcond.ctypes.data,
                       rank.ctypes.data, work.ctypes.data, iv[5:].ctypes.data, info.ctypes.data))
    elif driver == 2:  # gelsd
        if cplx:
            _call(fn, (iv[0:].ctypes.data, iv[1:].ctypes.data, iv[2:].ctypes.data, a.ctypes.data,
                       iv[3:].ctypes.data, rhs.ctypes.data, iv[4:].ctypes.data, s.ctypes.data, rcond.ctypes.data,
                       rank.ctypes.data, work.ctypes.data, iv[5:].ctypes.data, rwork.ctypes.data, iwork.ctypes.data,
                       info.ctypes.data))
        else:
            _call(fn, (iv[0:].ctypes.data, iv[1:].ctypes.data, iv[2:].ctypes.data, a.ctypes.data,
                       iv[3:].ctypes.data, rhs.ctypes.data, iv[4:].ctypes.data, s.ctypes.data, rcond.ctypes.data,
                       rank.ctypes.data, work.ctypes.data, iv[5:].ctypes.data, iwork.ctypes.data, info.ctypes.data))
    else:  # gelss
        if cplx:
            _call(fn, (iv[0:].ctypes.data, iv[1:].ctypes.data, iv[2:].ctypes.data, a.ctypes.data,
                       iv[3:].ctypes.data, rhs.ctypes.data, iv[4:].ctypes.data, s.ctypes.data, rcond.ctypes.data,
                       rank.ctypes.data, work.ctypes.data, iv[5:].ctypes.data, rwork.ctypes.data, info.ctypes.data))
        else:
            _call(fn, (iv[0:].ctypes.data, iv[1:].ctypes.data, iv[2:].ctypes.data, a.ctypes.data,
                       iv[3:].ctypes.data, rhs.ctypes.data, iv[4:].ctypes.data, s.ctypes.data, rcond.ctypes.data,
                       rank.ctypes.data, work.ctypes.data, iv[5:].ctypes.data, info.ctypes.data))


@numba.njit(**_opts)
def lstsq(fn, driver, a, rhs, rcond, rank, s, info, cplx):
    """Least squares min ||B - A X|| of m x n a[b] (destroyed) and rhs[b] (max(m, n) x nrhs, overwritten: X on top).

    ``driver``: 0 gels (QR, full rank), 1 gelsy (pivoted QR), 2 gelsd (SVD, divide and conquer), 3 gelss (SVD).
    rank[b] gets the effective rank (not gels), s[b] the singular values (gelsd, gelss); rcond is a 1-element
    real array: singular values below rcond * s_max count as zero.
    """
    nb, n, m = a.shape
    nrhs = rhs.shape[1]
    iv = _ints(m, n, nrhs, max(1, m), max(1, rhs.shape[2]), -1, 78)
    ch = iv[6:].astype(np.uint8)
    jpvt = np.zeros(max(1, n), np.int32)
    query = np.zeros(1, a.dtype)
    rquery = np.zeros(1, rcond.dtype)
    iquery = np.zeros(1, np.int32)
    _lstsq_call(fn, driver, ch, iv, a[0], rhs[0], jpvt, s[0], rcond, rank[0:], query, rquery, iquery, info[0:], cplx)
    iv[5] = _lwork(query[0])
    work = np.empty(iv[5], a.dtype)
    k = min(m, n)
    if driver == 1:
        lrwork = max(1, 2 * n)
    elif driver == 3:
        lrwork = max(1, 5 * k)
    else:
        lrwork = _lwork(rquery[0])
    rwork = np.empty(lrwork, rcond.dtype)
    iwork = np.empty(max(1, iquery[0]), np.int32)
    for b in range(nb):
        jpvt[:] = 0  # gelsy: nonzero entries would mark fixed columns
        _lstsq_call(fn, driver, ch, iv, a[b], rhs[b], jpvt, s[b], rcond, rank[b:], work, rwork, iwork, info[b:],
                    cplx)


@numba.njit(**_opts)
def _gemm(fn, x, y, out):
    """out = x @ y for square column-major matrices (BLAS gemm)."""
    n = x.shape[0]
    iv = _ints(n, max(1, n), 78)
    ch = iv[2:].astype(np.uint8)
    one = np.ones(1, x.dtype)
    zero = np.zeros(1, x.dtype)
    _call(fn, (ch.ctypes.data, ch.ctypes.data, iv[0:].ctypes.data, iv[0:].ctypes.data, iv[0:].ctypes.data,
               one.ctypes.data, x.ctypes.data, iv[1:].ctypes.data, y.ctypes.data, iv[1:].ctypes.data,
               zero.ctypes.data, out.ctypes.data, iv[1:].ctypes.data))


@numba.njit(**_opts)
def matrix_exp(gemm, a, out):
    """exp(a[b]) by scaling and squaring a degree-18 Taylor polynomial (in a[b]'s precision; run it in double).

    a[b] is scaled by 2^-s so that its 1-norm is at most 1/2 (truncation error below 1e-22 relative), the
    polynomial is summed by Horner's rule, and the result squared s times. a and out: (batch, n, n) column-major.
    """
    nb, n, _ = a.shape
    x = np.empty((n, n), a.dtype)
    acc = np.empty((n, n), a.dtype)
    tmp = np.empty((n, n), a.dtype)
    for b in range(nb):
        norm = 0.0
        for c in range(n):
            col = 0.0
            for r in range(n):
                col += abs(a[b, c, r])
            norm = max(norm, col)
        s = 0
        while norm > 0.5 and s < 1000:
            norm *= 0.5
            s += 1
        scale = 0.5 ** s
        for c in range(n):
            for r in range(n):
                x[c, r] = a[b, c, r] * scale
        # Horner: acc = I + x/1 (I + x/2 (I + ... (I + x/18)))
        acc[:, :] = 0
        for i in range(n):
            acc[i, i] = 1
        for d in range(18, 0, -1):
            _gemm(gemm, x, acc, tmp)
            for c in range(n):
                for r in range(n):
                    acc[c, r] = tmp[c, r] / d
            for i in range(n):
                acc[i, i] += 1
        for _ in range(s):
            _gemm(gemm, acc, acc, tmp)
            acc[:, :] = tmp
        out[b] = acc


@numba.njit(**_opts)
def pivots_to_perm(piv, perm):
    """perm[b] = range(m) with the row swaps piv[b] (1-based) applied in order; False if a pivot is out of range."""
    nb, m = perm.shape
    k = piv.shape[1]
    for b in range(nb):
        for i in range(m):
            perm[b, i] = i
        for i in range(k):
            j = piv[b, i] - 1
            if j < 0 or j >= m:
                return False
            t = perm[b, i]
            perm[b, i] = perm[b, j]
            perm[b, j] = t
    return True


@numba.njit(**_opts)
def eig_vectors(w_im, vr, out):
    """Complex eigenvectors from real geev output: vr[:, j] +- i vr[:, j+1] for a conjugate pair (j, j+1).

    w_im: (batch, n) imaginary parts of the eigenvalues; vr: (batch, n, n) column-major; out: complex, same layout.
    """
    nb, n, _ = vr.shape
    for b in range(nb):
        j = 0
        while j < n:
            if w_im[b, j] == 0:
                for i in range(n):
                    out[b, j, i] = vr[b, j, i]
                j += 1
            else:
                for i in range(n):
                    out[b, j, i] = complex(vr[b, j, i], vr[b, j + 1, i])
                    out[b, j + 1, i] = complex(vr[b, j, i], -vr[b, j + 1, i])
                j += 2

