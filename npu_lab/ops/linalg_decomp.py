"""Matrix decompositions and solvers on the npu: LU, Cholesky, QR, SVD, eigen, LDL, least squares, matrix_exp.

Most of ATen's linear algebra is *structured*: the functional operator
(``_linalg_svd``, ``linalg_qr``...) is a CompositeExplicitAutogradNonFunctional
wrapper that runs the meta function (shape checks, PyTorch's own error
messages), allocates the outputs with the strides the meta function chose and
calls the ``out=`` overload. So the npu registers the ``out=`` overloads and
gets the functional forms, ``torch.linalg.*`` wrappers and their autograd
formulas (which decompose into these and the matrix products) for free.

Each kernel here: checks its arguments by running the operator on meta copies
of them (the same checks and messages as the CPU), copies the input matrices
into batched column-major buffers, runs the LAPACK-calling numba kernels of
:mod:`npu_lab.kernels.linalg_decomp`, and writes the outputs through
:func:`as_array` (any strides). LAPACK's error codes go through
``torch._linalg_check_errors``, so singular or indefinite inputs raise
``torch.linalg.LinAlgError`` with the CPU's message. Numerics follow the CPU's
choices where they are visible: ``det``/``slogdet`` factor ``A^T`` when ``A``
is contiguous and real, ``solve``/``inv`` factor ``A`` (the LU factors they
return feed their backward formulas), ``lstsq`` defaults to ``gelsy``,
``svd`` is ``gesdd``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ..device import fallback
from ..kernels import linalg_decomp as lk
from .common import NUMPY_DTYPES, as_array, empty, empty_strided, launch, nbytes, resize_out
from .linalg import _epilogue, mm
from .pointwise import pointwise
from .registry import register

aten = torch.ops.aten

_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}
_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}
_LAPACK_TYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)
# ATen's ScalarType names, as its messages print them.
_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.complex64: "ComplexFloat",
          torch.complex128: "ComplexDouble", torch.float16: "Half", torch.bfloat16: "BFloat16", torch.int64: "Long",
          torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool"}
# ... and as a TypeMeta prints them ("Expected out tensor to have dtype float").
_META_NAMES = {torch.float32: "float", torch.float64: "double", torch.complex64: "c10::complex<float>",
               torch.complex128: "c10::complex<double>", torch.int32: "int", torch.int64: "long int"}


# ----------------------------------------------------------------------------------------------- helpers


def _to_meta(x: object) -> object:
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if type(x) in (list, tuple):
        return type(x)(_to_meta(v) for v in x)
    return x


def _meta(op: Callable, *args: object, **kwargs: object) -> object:
    """``op`` run on meta copies of the arguments: PyTorch's argument checks, and the outputs' geometry."""
    return op(*(_to_meta(a) for a in args), **{k: _to_meta(v) for k, v in kwargs.items()})


def _like(meta: torch.Tensor) -> torch.Tensor:
    """A new npu tensor with a meta tensor's shape, strides and dtype."""
    return empty_strided(tuple(meta.shape), tuple(meta.stride()), meta.dtype)


def _out(out: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
    """Check a structured operator's ``out=`` tensor against its meta output and resize it (ATen's rules)."""
    if out.dtype != meta.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {_META_NAMES.get(meta.dtype, meta.dtype)}, but got "
                           f"{_META_NAMES.get(out.dtype, out.dtype)} instead")
    if out.device.type != "npu":
        raise RuntimeError(f"Expected out tensor to have device npu:{torch.npu.current_device()}, but got "
                           f"{out.device} instead")
    return resize_out(out, meta.shape)


def _compatible_out(fn_name: str, out: torch.Tensor, dtype: torch.dtype, out_name: str = "result") -> None:
    """checkLinalgCompatibleDtype: the result must cast safely to ``out``'s dtype (the unstructured operators)."""
    if out.device.type != "npu":
        raise RuntimeError(f"{fn_name}: Expected {out_name} and input tensors to be on the same device, but got "
                           f"{out_name} on {out.device} and input on npu:{torch.npu.current_device()}")
    if not torch.can_cast(dtype, out.dtype):
        raise RuntimeError(f"{fn_name}: Expected {out_name} to be safely castable from {_NAMES.get(dtype, dtype)} "
                           f"dtype, but got {out_name} with dtype {_NAMES.get(out.dtype, out.dtype)}")


def _write(out: torch.Tensor, value: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Resize ``out`` to ``value``'s shape and write it (casting to ``out``'s dtype)."""
    if isinstance(value, torch.Tensor):
        resize_out(out, value.shape)
        if out.numel():
            out.copy_(value)
        return out
    resize_out(out, value.shape)
    if out.numel():
        as_array(out)[...] = value
    return out


def _resolved(t: torch.Tensor) -> torch.Tensor:
    """``t`` with lazy conjugation/negation applied (some operators get them unresolved)."""
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    return t


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return np.dtype(NUMPY_DTYPES[dtype])


def _count(shape: Sequence[int]) -> int:
    return math.prod(shape) if len(shape) else 1


def _fmat(x: np.ndarray | torch.Tensor, batch: Sequence[int] | None = None) -> np.ndarray:
    """A batched column-major copy, shape (batch, n, m), of the m x n matrices of ``x`` (broadcast to ``batch``)."""
    arr = as_array(_resolved(x)) if isinstance(x, torch.Tensor) else x
    m, n = arr.shape[-2:]
    batch = tuple(arr.shape[:-2]) if batch is None else tuple(batch)
    buf = np.empty((_count(batch), n, m), arr.dtype)  # always a copy: LAPACK overwrites it
    buf.reshape((*batch, n, m))[...] = np.swapaxes(arr, -1, -2)
    return buf


def _unf(buf: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """The (..., m, n) view of a column-major batch buffer (batch, n, m)."""
    return np.swapaxes(buf, -1, -2).reshape(tuple(shape))


def _tri(arr: np.ndarray, upper: bool, k: int = 0) -> np.ndarray:
    return np.triu(arr, k) if upper else np.tril(arr, k)


def _routine(name: str, dtype: torch.dtype) -> int | None:
    return lk.routine(name, _np_dtype(dtype)) if dtype in _LAPACK_TYPES else None


def _unsupported(op: torch._ops.OpOverload, args: tuple, kwargs: dict, routine: str, dtype: torch.dtype) -> object:
    return fallback.unsupported(op, args, kwargs, f"no LAPACK {routine} for {dtype} on this host")


def _check_errors(info: np.ndarray, api: str, is_matrix: bool) -> None:
    """LAPACK's error codes as PyTorch reports them (``torch.linalg.LinAlgError`` and the CPU's messages)."""
    if info.size and np.any(info):
        codes = torch.from_numpy(np.ascontiguousarray(info, dtype=np.int32))
        torch._linalg_check_errors(codes.reshape(()) if is_matrix else codes.reshape(-1), api, is_matrix=is_matrix)


def _batch_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    return tuple(torch.broadcast_shapes(*(torch.Size(s) for s in shapes)))


def _eye_into(t: torch.Tensor) -> None:
    arr = as_array(t)
    arr[...] = 0
    k = min(arr.shape[-2:])
    idx = np.arange(k)
    arr[..., idx, idx] = 1


# ------------------------------------------------------------------------------------------------- LU


def _lu_factor(a: np.ndarray, dtype: torch.dtype, pivot: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """LU-factor the column-major batch ``a`` in place; (pivots, info)."""
    nb, n, m = a.shape
    piv = np.empty((nb, min(m, n)), np.int32)
    info = np.zeros(nb, np.int32)
    if nb and m and n:
        if pivot:
            lk.getrf(_routine("getrf", dtype), a, piv, info)
        else:
            lk.lu_nopivot(a, piv, info)
    else:
        piv[...] = np.arange(1, piv.shape[1] + 1, dtype=np.int32)
    launch("getrf", 2.0 * nb * m * n * min(m, n) / 3, a.nbytes, a.nbytes + piv.nbytes)
    return piv, info


def _lu_solve(lu: np.ndarray, piv: np.ndarray, lu_batch: Sequence[int], b: np.ndarray, left: bool, adjoint: bool,
              dtype: torch.dtype) -> np.ndarray:
    """X with op(A) X = B (left) or X op(A) = B, from A's column-major LU batch (batch shape ``lu_batch``)."""
    n = lu.shape[-1]
    if not left:  # X A = B  <=>  A^H X^H = B^H
        adjoint = not adjoint
        b = np.conj(np.swapaxes(b, -1, -2)) if dtype.is_complex else np.swapaxes(b, -1, -2)
    batch = _batch_shape(lu_batch, b.shape[:-2])
    nrhs = b.shape[-1]
    rhs = _fmat(b, batch)
    if rhs.size and n:
        lu_b = lu if tuple(lu_batch) == batch else _fmat(_unf(lu, (*lu_batch, n, n)), batch)
        piv_b = np.broadcast_to(piv.reshape((*lu_batch, n)), (*batch, n))
        piv_b = np.ascontiguousarray(piv_b).reshape(_count(batch), n)
        trans = "N" if not adjoint else ("C" if dtype.is_complex else "T")
        info = np.zeros(rhs.shape[0], np.int32)
        lk.getrs(_routine("getrs", dtype), ord(trans), lu_b, piv_b, rhs, info)
    launch("getrs", 2.0 * rhs.shape[0] * n * n * nrhs, lu.nbytes + rhs.nbytes, rhs.nbytes)
    x = _unf(rhs, (*batch, n, nrhs))
    if not left:
        x = np.conj(np.swapaxes(x, -1, -2)) if dtype.is_complex else np.swapaxes(x, -1, -2)
    return x


def _check_lu_pivots(pivots: torch.Tensor, n: int) -> np.ndarray:
    piv = as_array(pivots)
    if piv.size and not (piv > 0).all():
        raise RuntimeError("Pivots given to lu_solve must all be greater or equal to 1. Did you properly pass the "
                           "result of lu_factor?")
    if piv.size and not (piv <= n).all():
        raise RuntimeError("Pivots given to lu_solve must all be smaller or equal to LU.size(-2). Did you properly "
                           "pass the result of lu_factor?")
    return piv


@register("linalg_lu_factor_ex.out")
def linalg_lu_factor_ex_out(A, *, pivot=True, check_errors=False, LU, pivots, info):
    """LU factorisation with partial pivoting (getrf), or without pivoting (pivot=False); LAPACK info codes."""
    m_lu, m_piv, m_info = _meta(aten.linalg_lu_factor_ex.default, A, pivot=pivot, check_errors=check_errors)
    for out, meta in ((LU, m_lu), (pivots, m_piv), (info, m_info)):
        _out(out, meta)
    if A.numel() == 0:
        as_array(info)[...] = 0
        return LU, pivots, info
    if _routine("getrf", A.dtype) is None:
        return _unsupported(aten.linalg_lu_factor_ex.out, (A,), dict(pivot=pivot, check_errors=check_errors, LU=LU,
                                                                     pivots=pivots, info=info), "getrf", A.dtype)
    a = _fmat(A)
    piv, codes = _lu_factor(a, A.dtype, pivot)
    as_array(LU)[...] = _unf(a, A.shape)
    as_array(pivots)[...] = piv.reshape(pivots.shape)
    as_array(info)[...] = codes.reshape(info.shape)
    if check_errors:
        _check_errors(codes, "torch.linalg.lu_factor_ex", A.dim() == 2)
    return LU, pivots, info


def _unpack(lu: np.ndarray, m: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """L (unit lower, m x k) and U (upper, k x n) from LU factors (..., m, n)."""
    k = min(m, n)
    low = np.tril(lu[..., :, :k], -1)
    idx = np.arange(k)
    low[..., idx, idx] = 1
    return low, np.triu(lu[..., :k, :])


def _perm_matrix(piv: np.ndarray, batch: Sequence[int], m: int, dtype: np.dtype) -> np.ndarray:
    """The permutation matrices P (A = P L U) of LAPACK's 1-based row swaps ``piv`` (..., k)."""
    k = piv.shape[-1]
    piv_b = np.ascontiguousarray(np.broadcast_to(piv, (*batch, k)), dtype=np.int32).reshape(_count(batch), k)
    perm = np.empty((piv_b.shape[0], m), np.int64)
    if not lk.pivots_to_perm(piv_b, perm):
        raise RuntimeError("pivots passed to lu_unpack must be between 1 and LU.size(-2) inclusive.Did you properly "
                           "pass the result of lu_factor?")
    p = np.zeros((perm.shape[0], m, m), dtype)
    cols = np.broadcast_to(np.arange(m), perm.shape)
    p[np.arange(perm.shape[0])[:, None], perm, cols] = 1
    return p.reshape((*batch, m, m))


@register("lu_unpack.out")
def lu_unpack_out(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True, *, P, L, U):
    """P, L, U with A = P L U from linalg.lu_factor's LU and 1-based pivots."""
    metas = _meta(aten.lu_unpack.default, LU_data, LU_pivots, unpack_data, unpack_pivots)
    for out, meta in zip((P, L, U), metas):
        _out(out, meta)
    m, n = LU_data.shape[-2:]
    lu = as_array(_resolved(LU_data))
    if unpack_data:
        low, up = _unpack(lu, m, n)
        if L.numel():
            as_array(L)[...] = low
        if U.numel():
            as_array(U)[...] = up
    if unpack_pivots:
        p = _perm_matrix(as_array(LU_pivots), LU_data.shape[:-2], m, _np_dtype(LU_data.dtype))
        if P.numel():
            as_array(P)[...] = p
    launch("lu_unpack", 0, nbytes(LU_data) + nbytes(LU_pivots), nbytes(P) + nbytes(L) + nbytes(U))
    return P, L, U


@register("linalg_lu.out")
def linalg_lu_out(A, *, pivot=True, P, L, U):
    """A = P L U (L unit lower m x k, U upper k x n); P is empty when pivot=False."""
    metas = _meta(aten.linalg_lu.default, A, pivot=pivot)
    for out, meta in zip((P, L, U), metas):
        _out(out, meta)
    if A.numel() == 0:
        if pivot and P.numel():
            _eye_into(P)
        if L.numel():
            _eye_into(L)
        return P, L, U
    if _routine("getrf", A.dtype) is None:
        return _unsupported(aten.linalg_lu.out, (A,), dict(pivot=pivot, P=P, L=L, U=U), "getrf", A.dtype)
    m, n = A.shape[-2:]
    a = _fmat(A)
    piv, _ = _lu_factor(a, A.dtype, pivot)
    low, up = _unpack(_unf(a, A.shape), m, n)
    as_array(L)[...] = low
    as_array(U)[...] = up
    if pivot:
        as_array(P)[...] = _perm_matrix(piv.reshape((*A.shape[:-2], piv.shape[-1])), A.shape[:-2], m, a.dtype)
    return P, L, U


@register("linalg_lu_solve.out")
def linalg_lu_solve_out(LU, pivots, B, *, left=True, adjoint=False, out):
    """X with A X = B (or X A = B, with A^H when adjoint) from linalg.lu_factor's LU and pivots (getrs)."""
    m_out = _meta(aten.linalg_lu_solve.default, LU, pivots, B, left=left, adjoint=adjoint)
    _out(out, m_out)
    if out.numel() == 0:
        return out
    if _routine("getrs", LU.dtype) is None:
        return _unsupported(aten.linalg_lu_solve.out, (LU, pivots, B), dict(left=left, adjoint=adjoint, out=out),
                            "getrs", LU.dtype)
    n = LU.shape[-1]
    piv = _check_lu_pivots(pivots, n)
    x = _lu_solve(_fmat(LU), np.ascontiguousarray(piv, dtype=np.int32).reshape(_count(LU.shape[:-2]), n), LU.shape[:-2],
                  as_array(_resolved(B)), left, adjoint, LU.dtype)
    as_array(out)[...] = x
    return out


def _factor_for_solve(A: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """LU of A (column-major batch), pivots and info codes."""
    a = _fmat(A)
    piv, info = _lu_factor(a, A.dtype)
    return a, piv, info


def _is_vector_rhs(A: torch.Tensor, B: torch.Tensor) -> bool:
    return B.dim() == 1 or (A.dim() - 1 == B.dim() and tuple(B.shape) == tuple(A.shape[:-1]))


@register("_linalg_solve_ex.result")
def linalg_solve_ex_out(A, B, *, left=True, check_errors=False, result, LU, pivots, info):
    """X with A X = B (or X A = B), through the LU factorisation it also returns (for the backward)."""
    metas = _meta(aten._linalg_solve_ex.default, A, B, left=left, check_errors=check_errors)
    for out, meta in zip((result, LU, pivots, info), metas):
        _out(out, meta)
    if _routine("getrf", A.dtype) is None:
        return _unsupported(aten._linalg_solve_ex.result, (A, B), dict(left=left, check_errors=check_errors,
                            result=result, LU=LU, pivots=pivots, info=info), "getrf", A.dtype)
    n = A.shape[-1]
    if A.numel():
        a, piv, codes = _factor_for_solve(A)
        as_array(LU)[...] = _unf(a, A.shape)
        as_array(pivots)[...] = piv.reshape(pivots.shape)
    else:
        nb = _count(A.shape[:-2])
        a, piv, codes = np.zeros((nb, n, n), _np_dtype(A.dtype)), np.zeros((nb, n), np.int32), np.zeros(nb, np.int32)
    as_array(info)[...] = codes.reshape(info.shape)
    if check_errors:
        _check_errors(codes, "torch.linalg.solve_ex", A.dim() == 2)
    if result.numel():
        b = as_array(_resolved(B))
        vector = _is_vector_rhs(A, B)
        x = _lu_solve(a, piv, A.shape[:-2], b[..., None] if vector else b, left, False, A.dtype)
        as_array(result)[...] = x[..., 0] if vector else x
    return result, LU, pivots, info


@register("linalg_inv_ex.inverse")
def linalg_inv_ex_out(A, *, check_errors=False, inverse, info):
    """A^-1 by LU (getrf) and solving against the identity (getrs), as the CPU does; LAPACK info codes."""
    m_inv, m_info = _meta(aten.linalg_inv_ex.default, A, check_errors=check_errors)
    _out(inverse, m_inv)
    _out(info, m_info)
    if A.numel() == 0:
        as_array(info)[...] = 0
        return inverse, info
    if _routine("getrf", A.dtype) is None:
        return _unsupported(aten.linalg_inv_ex.inverse, (A,), dict(check_errors=check_errors, inverse=inverse,
                                                                   info=info), "getrf", A.dtype)
    n = A.shape[-1]
    a, piv, codes = _factor_for_solve(A)
    eye = np.broadcast_to(np.eye(n, dtype=a.dtype), A.shape)
    as_array(inverse)[...] = _lu_solve(a, piv, A.shape[:-2], eye, True, False, A.dtype)
    as_array(info)[...] = codes.reshape(info.shape)
    if check_errors:
        _check_errors(codes, "linalg.inv_ex", A.dim() == 2)
    return inverse, info


def _det_factor(A: torch.Tensor, LU: torch.Tensor, pivots: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """LU factors of A (of A^H when A is contiguous and real: same determinant), written to LU and pivots.

    Returns (diagonal of U, sign of the permutation).
    """
    n = A.shape[-1]
    arr = as_array(_resolved(A))
    use_t = A.is_contiguous() and not A.is_complex()
    a = _fmat(np.swapaxes(arr, -1, -2) if use_t else arr)
    piv, _ = _lu_factor(a, A.dtype)
    lu = _unf(a, A.shape)
    if LU.numel():
        as_array(LU)[...] = lu
    if pivots.numel():
        as_array(pivots)[...] = piv.reshape(pivots.shape)
    swaps = (piv != np.arange(1, piv.shape[-1] + 1, dtype=np.int32)).sum(-1).reshape(A.shape[:-2])
    idx = np.arange(n)
    return lu[..., idx, idx], np.where(swaps % 2 == 0, 1.0, -1.0)


@register("_linalg_det.result")
def linalg_det_out(A, *, result, LU, pivots):
    """det(A) = sign(P) prod(diag(U)) from A's LU factors (returned for the backward)."""
    metas = _meta(aten._linalg_det.default, A)
    for out, meta in zip((result, LU, pivots), metas):
        _out(out, meta)
    if _routine("getrf", A.dtype) is None:
        return _unsupported(aten._linalg_det.result, (A,), dict(result=result, LU=LU, pivots=pivots), "getrf",
                            A.dtype)
    diag, sign = _det_factor(A, LU, pivots)
    wide = np.complex128 if A.is_complex() else np.float64
    if result.numel():
        as_array(result)[...] = sign * np.prod(diag.astype(wide), axis=-1)
    launch("det", A.numel(), nbytes(A), nbytes(result))
    return result, LU, pivots


@register("_linalg_slogdet.sign")
def linalg_slogdet_out(A, *, sign, logabsdet, LU, pivots):
    """sign(det A) and log|det A| from A's LU factors (returned for the backward)."""
    metas = _meta(aten._linalg_slogdet.default, A)
    for out, meta in zip((sign, logabsdet, LU, pivots), metas):
        _out(out, meta)
    if _routine("getrf", A.dtype) is None:
        return _unsupported(aten._linalg_slogdet.sign, (A,), dict(sign=sign, logabsdet=logabsdet, LU=LU,
                                                                  pivots=pivots), "getrf", A.dtype)
    diag, psign = _det_factor(A, LU, pivots)
    mag = np.abs(diag)
    with np.errstate(divide="ignore", invalid="ignore"):
        unit = np.where(mag == 0, 0, diag / np.where(mag == 0, 1, mag))
        if sign.numel():
            as_array(sign)[...] = psign * np.prod(unit, axis=-1)
        if logabsdet.numel():
            as_array(logabsdet)[...] = np.sum(np.log(mag.astype(np.float64)), axis=-1)
    launch("slogdet", A.numel(), nbytes(A), nbytes(sign) + nbytes(logabsdet))
    return sign, logabsdet, LU, pivots


# ------------------------------------------------------------------------------------------- Cholesky


def _potrf(a: np.ndarray, dtype: torch.dtype, upper: bool) -> np.ndarray:
    info = np.zeros(a.shape[0], np.int32)
    if a.shape[0] and a.shape[1]:
        lk.potrf(_routine("potrf", dtype), ord("U" if upper else "L"), a, info)
    n = a.shape[1]
    launch("potrf", a.shape[0] * n ** 3 / 3.0, a.nbytes, a.nbytes)
    return info


@register("linalg_cholesky_ex.L")
def linalg_cholesky_ex_out(A, *, upper=False, check_errors=False, L, info):
    """Cholesky factor L (A = L L^H) or U (A = U^H U) of Hermitian positive-definite A (potrf); info codes."""
    m_l, m_info = _meta(aten.linalg_cholesky_ex.default, A, upper=upper, check_errors=check_errors)
    _out(L, m_l)
    _out(info, m_info)
    if L.numel() == 0:
        as_array(info)[...] = 0
        return L, info
    if _routine("potrf", A.dtype) is None:
        return _unsupported(aten.linalg_cholesky_ex.L, (A,), dict(upper=upper, check_errors=check_errors, L=L,
                                                                  info=info), "potrf", A.dtype)
    a = _fmat(_tri(as_array(_resolved(A)), upper))
    codes = _potrf(a, A.dtype, upper)
    as_array(L)[...] = _unf(a, A.shape)
    as_array(info)[...] = codes.reshape(info.shape)
    if check_errors:
        _check_errors(codes, "linalg.cholesky_ex", A.dim() == 2)
    return L, info


@register("cholesky")
def cholesky(self, upper=False):
    """The deprecated torch.cholesky: the factor, or LinAlgError for a matrix that is not positive-definite."""
    meta = _meta(aten.cholesky.default, self, upper)
    if self.numel() == 0:
        return empty(self.shape, self.dtype)
    if _routine("potrf", self.dtype) is None:
        return _unsupported(aten.cholesky.default, (self, upper), {}, "potrf", self.dtype)
    a = _fmat(self)
    codes = _potrf(a, self.dtype, upper)
    _check_errors(codes, "cholesky", self.dim() == 2)
    out = _like(meta)
    as_array(out)[...] = _tri(_unf(a, self.shape), upper)
    return out


@register("cholesky.out")
def cholesky_out(self, upper=False, *, out):
    """torch.cholesky into ``out``."""
    _compatible_out("cholesky", out, self.dtype)
    return _write(out, cholesky(self, upper))


@register("cholesky_inverse")
def cholesky_inverse(self, upper=False):
    """A^-1 from A's Cholesky factor (potri), both triangles filled."""
    meta = _meta(aten.cholesky_inverse.default, self, upper)
    out = _like(meta)
    if self.numel() == 0:
        return out
    if _routine("potri", self.dtype) is None:
        return _unsupported(aten.cholesky_inverse.default, (self, upper), {}, "potri", self.dtype)
    a = _fmat(self)
    info = np.zeros(a.shape[0], np.int32)
    lk.potri(_routine("potri", self.dtype), ord("U" if upper else "L"), a, info)
    launch("potri", a.shape[0] * 2.0 * a.shape[1] ** 3 / 3, a.nbytes, a.nbytes)
    _check_errors(info, "cholesky_inverse", self.dim() == 2)
    as_array(out)[...] = _unf(a, self.shape)
    return out


@register("cholesky_inverse.out")
def cholesky_inverse_out(self, upper=False, *, out):
    """torch.cholesky_inverse into ``out``."""
    _compatible_out("cholesky_inverse", out, self.dtype)
    return _write(out, cholesky_inverse(self, upper))


@register("_cholesky_solve_helper")
def cholesky_solve_helper(self, A, upper):
    """X with A X = B from A's Cholesky factor (potrs); self (B) and A have the same batch shape."""
    meta = _meta(aten._cholesky_solve_helper.default, self, A, upper)
    out = _like(meta)
    if out.numel() == 0:
        return out
    if _routine("potrs", self.dtype) is None:
        return _unsupported(aten._cholesky_solve_helper.default, (self, A, upper), {}, "potrs", self.dtype)
    rhs = _fmat(self)
    a = _fmat(A)
    info = np.zeros(rhs.shape[0], np.int32)
    if a.shape[1]:
        lk.potrs(_routine("potrs", self.dtype), ord("U" if upper else "L"), a, rhs, info)
    launch("potrs", 2.0 * rhs.size * a.shape[1], a.nbytes + rhs.nbytes, rhs.nbytes)
    _check_errors(info, "cholesky_solve_cpu", self.dim() == 2)
    as_array(out)[...] = _unf(rhs, self.shape)
    return out


# ------------------------------------------------------------------------------------ triangular solves


def _trsm(A: torch.Tensor, B: torch.Tensor, batch: Sequence[int], upper: bool, left: bool, trans: str,
          unitriangular: bool) -> np.ndarray:
    """X with op(A) X = B (left) or X op(A) = B, A triangular (BLAS trsm); B's matrices broadcast to ``batch``."""
    m, n = B.shape[-2:]
    rhs = _fmat(B, batch)
    if rhs.size and A.shape[-1]:
        a = _fmat(A, batch)
        lk.trsm(_routine("trsm", A.dtype), ord("L" if left else "R"), ord("U" if upper else "L"), ord(trans),
                ord("U" if unitriangular else "N"), a, rhs)
    k = A.shape[-1]
    launch("trsm", rhs.shape[0] * m * n * k, nbytes(A) + nbytes(B), rhs.nbytes)
    return _unf(rhs, (*batch, m, n))


@register("triangular_solve.X")
def triangular_solve_out(self, A, upper=True, transpose=False, unitriangular=False, *, X, M):
    """The deprecated torch.triangular_solve: X with op(A) X = B, and a copy of A (both broadcast)."""
    m_x, m_m = _meta(aten.triangular_solve.default, self, A, upper, transpose, unitriangular)
    _out(X, m_x)
    _out(M, m_m)
    if _routine("trsm", A.dtype) is None:
        return _unsupported(aten.triangular_solve.X, (self, A, upper, transpose, unitriangular), dict(X=X, M=M),
                            "trsm", A.dtype)
    batch = tuple(m_x.shape[:-2])
    if M.numel():
        as_array(M)[...] = as_array(_resolved(A))
    if X.numel():
        as_array(X)[...] = _trsm(A, self, batch, upper, True, "T" if transpose else "N", unitriangular)
    return X, M


def _solve_triangular(A: torch.Tensor, B: torch.Tensor, upper: bool, left: bool, unitriangular: bool,
                      meta: torch.Tensor) -> np.ndarray:
    batch = tuple(meta.shape[:-2])
    return _trsm(A, B, batch, upper, left, "N", unitriangular)


@register("linalg_solve_triangular")
def linalg_solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """X with A X = B (left) or X A = B for triangular A (BLAS trsm)."""
    meta = _meta(aten.linalg_solve_triangular.default, A, B, upper=upper, left=left, unitriangular=unitriangular)
    if _routine("trsm", A.dtype) is None:
        return _unsupported(aten.linalg_solve_triangular.default, (A, B), dict(upper=upper, left=left,
                                                                               unitriangular=unitriangular),
                            "trsm", A.dtype)
    out = _like(meta)
    if out.numel():
        as_array(out)[...] = _solve_triangular(A, B, upper, left, unitriangular, meta)
    return out


@register("linalg_solve_triangular.out")
def linalg_solve_triangular_out(A, B, *, upper, left=True, unitriangular=False, out):
    """linalg.solve_triangular into ``out`` (which may be B itself)."""
    meta = _meta(aten.linalg_solve_triangular.default, A, B, upper=upper, left=left, unitriangular=unitriangular)
    if _routine("trsm", A.dtype) is None:
        return _unsupported(aten.linalg_solve_triangular.out, (A, B), dict(upper=upper, left=left,
                                                                           unitriangular=unitriangular, out=out),
                            "trsm", A.dtype)
    if out.dtype != meta.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {_META_NAMES.get(meta.dtype, meta.dtype)}, but got "
                           f"{_META_NAMES.get(out.dtype, out.dtype)} instead")
    x = _solve_triangular(A, B, upper, left, unitriangular, meta) if meta.numel() else np.zeros(meta.shape)
    return _write(out, x)


# ------------------------------------------------------------------------------------------------- QR


def _geqrf(a: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    nb, n, m = a.shape
    tau = np.zeros((nb, min(m, n)), a.dtype)
    if nb and m and n:
        lk.geqrf(_routine("geqrf", dtype), a, tau, np.zeros(nb, np.int32))
    launch("geqrf", nb * 2.0 * m * n * min(m, n), a.nbytes, a.nbytes + tau.nbytes)
    return tau


def _orgqr(a: np.ndarray, tau: np.ndarray, dtype: torch.dtype) -> None:
    nb, n, m = a.shape
    if nb and m and n:
        lk.orgqr(_routine("orgqr", dtype), a, np.ascontiguousarray(tau), np.zeros(nb, np.int32))
    launch("orgqr", nb * 4.0 * m * n * tau.shape[-1], a.nbytes + tau.nbytes, a.nbytes)


@register("linalg_qr.out")
def linalg_qr_out(A, mode="reduced", *, Q, R):
    """A = Q R by Householder reflections (geqrf, orgqr); modes 'reduced', 'complete' and 'r'."""
    m_q, m_r = _meta(aten.linalg_qr.default, A, mode)
    _out(Q, m_q)
    _out(R, m_r)
    if _routine("geqrf", A.dtype) is None:
        return _unsupported(aten.linalg_qr.out, (A, mode), dict(Q=Q, R=R), "geqrf", A.dtype)
    m, n = A.shape[-2:]
    batch = tuple(A.shape[:-2])
    a = _fmat(A)
    tau = _geqrf(a, A.dtype)
    qr = _unf(a, A.shape)
    if R.numel():
        as_array(R)[...] = np.triu(qr[..., : R.shape[-2], :])
    if mode != "r" and Q.numel():
        cols = Q.shape[-1]
        q = np.zeros((a.shape[0], cols, m), a.dtype)
        q[:, : min(cols, n), :] = a[:, : min(cols, n), :]
        _orgqr(q, tau, A.dtype)
        as_array(Q)[...] = _unf(q, (*batch, m, cols))
    return Q, R


def _geqrf_checked(input: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    if input.dim() < 2:
        raise RuntimeError("torch.geqrf: input must have at least 2 dimensions.")
    if input.dtype not in _LAPACK_TYPES:
        raise RuntimeError(f"\"geqrf_cpu\" not implemented for '{_NAMES.get(input.dtype, input.dtype)}'")
    a = _fmat(input)
    return a, _geqrf(a, input.dtype)


def _f_strides(shape: Sequence[int]) -> tuple[int, ...]:
    m, n = shape[-2:]
    batch_strides = []
    acc = max(m, 1) * max(n, 1)
    for s in reversed(shape[:-2]):
        batch_strides.append(acc)
        acc *= max(s, 1)
    return (*reversed(batch_strides), 1, max(m, 1))


@register("geqrf")
def geqrf(self):
    """QR in LAPACK's compact form: R on and above the diagonal, Householder vectors below, and their tau."""
    if self.dim() >= 2 and self.dtype in _LAPACK_TYPES and _routine("geqrf", self.dtype) is None:
        return _unsupported(aten.geqrf.default, (self,), {}, "geqrf", self.dtype)
    a, tau = _geqrf_checked(self)
    qr = empty_strided(tuple(self.shape), _f_strides(self.shape), self.dtype)
    if qr.numel():
        as_array(qr)[...] = _unf(a, self.shape)
    t = empty((*self.shape[:-2], tau.shape[-1]), self.dtype)
    if t.numel():
        as_array(t)[...] = tau.reshape(t.shape)
    return qr, t


@register("geqrf.a")
def geqrf_out(self, *, a, tau):
    """torch.geqrf into ``a`` and ``tau``."""
    if self.dim() < 2:
        raise RuntimeError("torch.geqrf: input must have at least 2 dimensions.")
    _compatible_out("torch.geqrf", a, self.dtype, "a")
    _compatible_out("torch.geqrf", tau, self.dtype, "tau")
    qr, t = geqrf(self)
    _write(a, qr)
    _write(tau, t)
    return a, tau


def _check_householder(input: torch.Tensor, tau: torch.Tensor) -> None:
    name = "torch.linalg.householder_product"
    if input.dim() < 2:
        raise RuntimeError(f"{name}: input must have at least 2 dimensions.")
    if input.shape[-2] < input.shape[-1]:
        raise RuntimeError(f"{name}: input.shape[-2] must be greater than or equal to input.shape[-1]")
    if input.shape[-1] < tau.shape[-1]:
        raise RuntimeError(f"{name}: input.shape[-1] must be greater than or equal to tau.shape[-1]")
    if input.dim() - tau.dim() != 1:
        raise RuntimeError(f"{name}: Expected tau to have one dimension less than input, but got tau.ndim equal to "
                           f"{tau.dim()} and input.ndim is equal to {input.dim()}")
    if input.dim() > 2 and tuple(tau.shape[:-1]) != tuple(input.shape[:-2]):
        raise RuntimeError(f"{name}: Expected batch dimensions of tau to be equal to input.shape[:-2], but got "
                           f"{list(tau.shape[:-1])}")
    if tau.dtype != input.dtype:
        raise RuntimeError(f"{name}: tau dtype {_NAMES.get(tau.dtype)} does not match input dtype "
                           f"{_NAMES.get(input.dtype)}")
    if input.dtype not in _LAPACK_TYPES:
        raise RuntimeError(f"\"orgqr_cpu\" not implemented for '{_NAMES.get(input.dtype, input.dtype)}'")


def _householder(input: torch.Tensor, tau: torch.Tensor) -> np.ndarray:
    a = _fmat(input)
    taus = np.ascontiguousarray(as_array(_resolved(tau))).reshape(a.shape[0], tau.shape[-1])
    if input.numel():
        _orgqr(a, taus, input.dtype)
    return _unf(a, input.shape)


@register("linalg_householder_product")
def linalg_householder_product(input, tau):
    """The first n columns of H_1 ... H_k, H_i = I - tau_i v_i v_i^H (orgqr/ungqr)."""
    _check_householder(input, tau)
    if _routine("orgqr", input.dtype) is None:
        return _unsupported(aten.linalg_householder_product.default, (input, tau), {}, "orgqr", input.dtype)
    out = empty_strided(tuple(input.shape), _f_strides(input.shape), input.dtype)
    if out.numel():
        as_array(out)[...] = _householder(input, tau)
    return out


@register("linalg_householder_product.out")
def linalg_householder_product_out(input, tau, *, out):
    """linalg.householder_product into ``out``."""
    _check_householder(input, tau)
    _compatible_out("torch.linalg.householder_product", out, input.dtype)
    return _write(out, linalg_householder_product(input, tau))


def _check_ormqr(input: torch.Tensor, tau: torch.Tensor, other: torch.Tensor, left: bool) -> None:
    if input.dim() < 2:
        raise RuntimeError("torch.ormqr: input must have at least 2 dimensions.")
    if other.dim() < 2:
        raise RuntimeError("torch.ormqr: other must have at least 2 dimensions.")
    side = -2 if left else -1
    if other.shape[side] < tau.shape[-1]:
        raise RuntimeError(f"torch.ormqr: other.shape[{side}] must be greater than or equal to tau.shape[-1]")
    if other.shape[side] != input.shape[-2]:
        raise RuntimeError(f"torch.ormqr: other.shape[{side}] must be equal to input.shape[-2]")
    if tau.shape[-1] > input.shape[-1]:
        raise RuntimeError("torch.ormqr: tau.shape[-1] must be less than or equal to input.shape[-1]")
    if input.dim() - tau.dim() != 1:
        raise RuntimeError(f"torch.ormqr: Expected tau to have one dimension less than input, but got tau.ndim equal "
                           f"to {tau.dim()} and input.ndim is equal to {input.dim()}")
    if input.dim() != other.dim():
        raise RuntimeError(f"torch.ormqr: Expected other to have the same number of dimensions as input, but got "
                           f"other.ndim equal to {other.dim()} and input.ndim is equal to {input.dim()}")
    if input.dim() > 2:
        if tuple(tau.shape[:-1]) != tuple(input.shape[:-2]):
            raise RuntimeError(f"torch.ormqr: Expected batch dimensions of tau to be equal to input.shape[:-2], but "
                               f"got {list(tau.shape[:-1])}")
        if tuple(other.shape[:-2]) != tuple(input.shape[:-2]):
            raise RuntimeError(f"torch.ormqr: Expected batch dimensions of other to be equal to input.shape[:-2], "
                               f"but got {list(other.shape[:-2])}")
    for t, what in ((tau, "tau"), (other, "other")):
        if t.dtype != input.dtype:
            raise RuntimeError(f"torch.ormqr: Expected input and {what} to have the same dtype, but input has "
                               f"dtype{_NAMES.get(input.dtype)} and {what} has dtype {_NAMES.get(t.dtype)}")
    if input.dtype not in _LAPACK_TYPES:
        raise RuntimeError(f"\"ormqr_cpu\" not implemented for '{_NAMES.get(input.dtype, input.dtype)}'")


@register("ormqr")
def ormqr(input, tau, other, left=True, transpose=False):
    """op(Q) C or C op(Q), Q = H_1 ... H_k from geqrf's reflectors (ormqr/unmqr)."""
    _check_ormqr(input, tau, other, left)
    if _routine("ormqr", input.dtype) is None:
        return _unsupported(aten.ormqr.default, (input, tau, other, left, transpose), {}, "ormqr", input.dtype)
    out = empty_strided(tuple(other.shape), _f_strides(other.shape), other.dtype)
    if out.numel() == 0:
        return out
    c = _fmat(other)
    a = _fmat(input)
    taus = np.ascontiguousarray(as_array(_resolved(tau))).reshape(a.shape[0], tau.shape[-1])
    trans = "N" if not transpose else ("C" if input.is_complex() else "T")
    if taus.shape[1]:
        lk.ormqr(_routine("ormqr", input.dtype), ord("L" if left else "R"), ord(trans), a, taus, c,
                 np.zeros(c.shape[0], np.int32))
    launch("ormqr", 4.0 * c.size * taus.shape[1], a.nbytes + c.nbytes, c.nbytes)
    as_array(out)[...] = _unf(c, other.shape)
    return out


@register("ormqr.out")
def ormqr_out(input, tau, other, left=True, transpose=False, *, out):
    """torch.ormqr into ``out``."""
    _check_ormqr(input, tau, other, left)
    if out.dtype != input.dtype:
        raise RuntimeError(f"torch.ormqr: Expected input and result to have the same dtype, but input has "
                           f"dtype{_NAMES.get(input.dtype)} and result has dtype {_NAMES.get(out.dtype)}")
    return _write(out, ormqr(input, tau, other, left, transpose))


# ------------------------------------------------------------------------------------------------ SVD


@register("_linalg_svd.U")
def linalg_svd_out(A, full_matrices=False, compute_uv=True, *, driver=None, U, S, Vh):
    """A = U diag(S) Vh by divide and conquer (gesdd); S descending; reduced unless full_matrices."""
    m_u, m_s, m_vh = _meta(aten._linalg_svd.default, A, full_matrices, compute_uv, driver=driver)
    for out, meta in ((U, m_u), (S, m_s), (Vh, m_vh)):
        _out(out, meta)
    if A.numel() == 0:
        if compute_uv and full_matrices:
            for t in (U, Vh):
                if t.numel():
                    _eye_into(t)
        return U, S, Vh
    if driver is not None:
        raise RuntimeError("torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with "
                           "cuSOLVER backend.")
    fn = _routine("gesdd", A.dtype)
    if fn is None:
        return _unsupported(aten._linalg_svd.U, (A, full_matrices, compute_uv), dict(driver=driver, U=U, S=S, Vh=Vh),
                            "gesdd", A.dtype)
    m, n = A.shape[-2:]
    k = min(m, n)
    batch = tuple(A.shape[:-2])
    a = _fmat(A)
    nb = a.shape[0]
    s = np.empty((nb, k), _np_dtype(_REAL.get(A.dtype, A.dtype)))
    if compute_uv:
        jobz = "A" if full_matrices else "S"
        ucols, vrows = (m, n) if full_matrices else (k, k)
        u = np.empty((nb, ucols, m), a.dtype)
        vt = np.empty((nb, n, vrows), a.dtype)
    else:
        jobz, u, vt = "N", np.empty((nb, 1, 1), a.dtype), np.empty((nb, 1, 1), a.dtype)
    info = np.zeros(nb, np.int32)
    lk.gesdd(fn, ord(jobz), a, s, u, vt, info, A.is_complex())
    launch("gesdd", nb * (4.0 * m * n * k + 8.0 * k ** 3), a.nbytes, s.nbytes + u.nbytes + vt.nbytes)
    _check_errors(info, "linalg.svd", A.dim() == 2)
    as_array(S)[...] = s.reshape(S.shape)
    if compute_uv:
        as_array(U)[...] = _unf(u, (*batch, m, ucols))
        as_array(Vh)[...] = _unf(vt, (*batch, vrows, n))
    return U, S, Vh


# ----------------------------------------------------------------------------------------- eigensolvers


@register("_linalg_eigh.eigenvalues")
def linalg_eigh_out(A, UPLO="L", compute_v=True, *, eigenvalues, eigenvectors):
    """Eigenvalues (ascending) and eigenvectors of Hermitian A from its UPLO triangle (syevd/heevd)."""
    m_w, m_v = _meta(aten._linalg_eigh.default, A, UPLO, compute_v)
    _out(eigenvalues, m_w)
    _out(eigenvectors, m_v)
    if A.numel() == 0:
        return eigenvalues, eigenvectors
    fn = _routine("syevd", A.dtype)
    if fn is None:
        return _unsupported(aten._linalg_eigh.eigenvalues, (A, UPLO, compute_v),
                            dict(eigenvalues=eigenvalues, eigenvectors=eigenvectors), "syevd", A.dtype)
    a = _fmat(A)
    nb, n, _ = a.shape
    w = np.empty((nb, n), _np_dtype(_REAL.get(A.dtype, A.dtype)))
    info = np.zeros(nb, np.int32)
    lk.syevd(fn, ord("V" if compute_v else "N"), ord(UPLO.upper()[0]), a, w, info, A.is_complex())
    launch("syevd", nb * 9.0 * n ** 3, a.nbytes, w.nbytes + (a.nbytes if compute_v else 0))
    _check_errors(info, "linalg.eigh", A.dim() == 2)
    as_array(eigenvalues)[...] = w.reshape(eigenvalues.shape)
    if compute_v:
        as_array(eigenvectors)[...] = _unf(a, A.shape)
    return eigenvalues, eigenvectors


def _eig(A: torch.Tensor, compute_v: bool, api: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Eigenvalues (..., n) and right eigenvectors (..., n, n) of general A (geev), complex; CPU's checks."""
    arr = as_array(_resolved(A))
    if A.numel() and not np.isfinite(arr).all():
        raise RuntimeError("torch.linalg.eig: input tensor should not contain infs or NaNs.")
    ctype = _np_dtype(_COMPLEX.get(A.dtype, A.dtype))
    n = A.shape[-1]
    if A.numel() == 0:
        return np.zeros((*A.shape[:-1],), ctype), np.zeros(tuple(A.shape), ctype)
    a = _fmat(arr)
    nb = a.shape[0]
    cplx = A.is_complex()
    real = _np_dtype(_REAL.get(A.dtype, A.dtype))
    w1 = np.empty((nb, n), a.dtype)
    w2 = np.zeros((nb, n if not cplx else 1), real)
    vr = np.empty((nb, n, n) if compute_v else (nb, 1, 1), a.dtype)
    info = np.zeros(nb, np.int32)
    lk.geev(_routine("geev", A.dtype), ord("V" if compute_v else "N"), a, w1, w2, vr, info, cplx)
    launch("geev", nb * 25.0 * n ** 3, a.nbytes, w1.nbytes + w2.nbytes + vr.nbytes)
    _check_errors(info, api, A.dim() == 2)
    values = w1 if cplx else w1 + 1j * w2
    vectors = None
    if compute_v:
        if cplx:
            vectors = vr
        else:
            vectors = np.empty(vr.shape, ctype)
            lk.eig_vectors(w2, vr, vectors)
        vectors = _unf(vectors, A.shape)
    return values.astype(ctype).reshape(tuple(A.shape[:-1])), vectors


def _eig_unsupported(A: torch.Tensor) -> bool:
    return A.dtype in _LAPACK_TYPES and _routine("geev", A.dtype) is None


@register("linalg_eig")
def linalg_eig(A):
    """Eigenvalues and right eigenvectors of a general square matrix (geev), always complex."""
    m_w, m_v = _meta(aten.linalg_eig.default, A)
    if _eig_unsupported(A):
        return _unsupported(aten.linalg_eig.default, (A,), {}, "geev", A.dtype)
    values, vectors = _eig(A, True, "torch.linalg.eig")
    w, v = _like(m_w), _fcontig_like(m_v)
    if w.numel():
        as_array(w)[...] = values
    if v.numel():
        as_array(v)[...] = vectors
    return w, v


def _fcontig_like(meta: torch.Tensor) -> torch.Tensor:
    return empty_strided(tuple(meta.shape), _f_strides(meta.shape), meta.dtype)


@register("linalg_eig.out")
def linalg_eig_out(A, *, eigenvalues, eigenvectors):
    """linalg.eig into ``eigenvalues`` and ``eigenvectors``."""
    _meta(aten.linalg_eig.default, A)
    ctype = _COMPLEX.get(A.dtype, A.dtype)
    _compatible_out("torch.linalg.eig", eigenvalues, ctype, "eigenvalues")
    _compatible_out("torch.linalg.eig", eigenvectors, ctype, "eigenvectors")
    w, v = linalg_eig(A)
    _write(eigenvalues, w)
    _write(eigenvectors, v)
    return eigenvalues, eigenvectors


@register("_linalg_eigvals")
def linalg_eigvals_(A):
    """Eigenvalues of a general square matrix (geev without vectors), complex."""
    meta = _meta(aten._linalg_eigvals.default, A)
    if _eig_unsupported(A):
        return _unsupported(aten._linalg_eigvals.default, (A,), {}, "geev", A.dtype)
    values, _ = _eig(A, False, "torch.linalg.eigvals")
    w = _like(meta)
    if w.numel():
        as_array(w)[...] = values
    return w


@register("linalg_eigvals.out")
def linalg_eigvals_out(A, *, out):
    """linalg.eigvals into ``out``."""
    _meta(aten._linalg_eigvals.default, A)
    _compatible_out("torch.linalg.eigvals", out, _COMPLEX.get(A.dtype, A.dtype), "eigenvalues")
    return _write(out, linalg_eigvals_(A))


# ------------------------------------------------------------------------------------------------ LDL


def _ldl_routine(dtype: torch.dtype, hermitian: bool, name: str) -> int | None:
    return _routine(name.replace("sy", "he") if hermitian and dtype.is_complex else name, dtype)


@register("linalg_ldl_factor_ex.out")
def linalg_ldl_factor_ex_out(self, *, hermitian=False, check_errors=False, LD, pivots, info):
    """Bunch-Kaufman LDL^T (LDL^H if hermitian) of the lower triangle (sytrf/hetrf); LAPACK pivots and info."""
    metas = _meta(aten.linalg_ldl_factor_ex.default, self, hermitian=hermitian, check_errors=check_errors)
    for out, meta in zip((LD, pivots, info), metas):
        _out(out, meta)
    if self.numel() == 0:
        as_array(info)[...] = 0
        return LD, pivots, info
    fn = _ldl_routine(self.dtype, hermitian, "sytrf")
    if fn is None:
        return _unsupported(aten.linalg_ldl_factor_ex.out, (self,), dict(hermitian=hermitian,
                            check_errors=check_errors, LD=LD, pivots=pivots, info=info), "sytrf", self.dtype)
    a = _fmat(np.tril(as_array(_resolved(self))))
    nb, n, _ = a.shape
    piv = np.zeros((nb, n), np.int32)
    codes = np.zeros(nb, np.int32)
    lk.sytrf(fn, ord("L"), a, piv, codes)
    launch("sytrf", nb * n ** 3 / 3.0, a.nbytes, a.nbytes + piv.nbytes)
    as_array(LD)[...] = _unf(a, self.shape)
    as_array(pivots)[...] = piv.reshape(pivots.shape)
    as_array(info)[...] = codes.reshape(info.shape)
    if check_errors:
        _check_errors(codes, "torch.linalg.ldl_factor_ex", self.dim() == 2)
    return LD, pivots, info


@register("linalg_ldl_solve.out")
def linalg_ldl_solve_out(LD, pivots, B, *, hermitian=False, out):
    """X with A X = B from linalg.ldl_factor's LD and pivots (sytrs/hetrs)."""
    meta = _meta(aten.linalg_ldl_solve.default, LD, pivots, B, hermitian=hermitian)
    _out(out, meta)
    if LD.numel() == 0 or pivots.numel() == 0:
        return out
    fn = _ldl_routine(LD.dtype, hermitian, "sytrs")
    if fn is None:
        return _unsupported(aten.linalg_ldl_solve.out, (LD, pivots, B), dict(hermitian=hermitian, out=out), "sytrs",
                            LD.dtype)
    n = LD.shape[-1]
    piv = as_array(pivots)
    if not (np.abs(piv) >= 1).all():
        raise RuntimeError("Pivots given to ldl_solve must all satisfy |pivot| >= 1. Did you properly pass the result "
                           "of ldl_factor?")
    if not (np.abs(piv) <= n).all():
        raise RuntimeError("Pivots given to ldl_solve must all satisfy |pivot| <= LD.size(-2). Did you properly pass "
                           "the result of ldl_factor?")
    batch = tuple(meta.shape[:-2])
    rhs = _fmat(B, batch)
    if rhs.size:
        a = _fmat(LD, batch)
        piv_b = np.ascontiguousarray(np.broadcast_to(piv, (*batch, n)), dtype=np.int32).reshape(_count(batch), n)
        lk.sytrs(fn, ord("L"), a, piv_b, rhs, np.zeros(rhs.shape[0], np.int32))
    launch("sytrs", 2.0 * rhs.size * n, nbytes(LD) + rhs.nbytes, rhs.nbytes)
    as_array(out)[...] = _unf(rhs, meta.shape)
    return out


# --------------------------------------------------------------------------------------- least squares

_DRIVERS = {"gels": 0, "gelsy": 1, "gelsd": 2, "gelss": 3}


@register("linalg_lstsq.out")
def linalg_lstsq_out(self, b, rcond=None, *, driver=None, solution, residuals, rank, singular_values):
    """Least squares solution of A X = B (LAPACK gels, gelsy (the CPU's default), gelsd or gelss)."""
    name = "torch.linalg.lstsq"
    if self.dim() < 2:
        raise RuntimeError(f"{name}: input must have at least 2 dimensions.")
    if b.dim() < 1:
        raise RuntimeError(f"{name}: other must have at least 1 dimension.")
    if self.dtype != b.dtype:
        raise RuntimeError(f"{name}: Expected input and other to have the same dtype, but got input's dtype "
                           f"{_NAMES.get(self.dtype)} and other's dtype {_NAMES.get(b.dtype)}")
    dim_diff = self.dim() - b.dim()
    if not 0 <= dim_diff <= 1:
        raise RuntimeError(f"{name}: input.dim() must be greater or equal to other.dim() and (input.dim() - "
                           "other.dim()) <= 1")
    b2 = b.unsqueeze(-1) if dim_diff else b
    if self.shape[-2] != b2.shape[-2]:
        raise RuntimeError(f"{name}: input.size(-2) should match other.size(-1)" if dim_diff else
                           f"{name}: input.size(-2) should match other.size(-2)")
    if self.dtype not in _LAPACK_TYPES:
        raise RuntimeError(f"\"linalg_lstsq_cpu\" not implemented for '{_NAMES.get(self.dtype, self.dtype)}'")
    real = _REAL.get(self.dtype, self.dtype)
    _compatible_out(name, solution, self.dtype, "solution")
    _compatible_out(name, residuals, real, "solution")
    _compatible_out(name, rank, torch.int64, "rank")
    _compatible_out(name, singular_values, real, "singular_values")
    drv = (driver or "gelsy").lower()
    if drv not in _DRIVERS:
        raise RuntimeError(f"{name}: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    fn = _routine(drv, self.dtype)
    if fn is None:
        return _unsupported(aten.linalg_lstsq.out, (self, b, rcond), dict(driver=driver, solution=solution,
                            residuals=residuals, rank=rank, singular_values=singular_values), drv, self.dtype)
    m, n = self.shape[-2:]
    rc = rcond if rcond is not None else float(torch.finfo(real).eps) * max(m, n)
    vector = _is_vector_rhs(self, b)
    bmat = as_array(_resolved(b))
    if vector:
        bmat = bmat[..., None]
    nrhs = bmat.shape[-1]
    batch = _batch_shape(self.shape[:-2], bmat.shape[:-2])
    nb = _count(batch)
    a = _fmat(self, batch)
    rhs = np.zeros((nb, nrhs, max(m, n, 1)), a.dtype)
    rhs[:, :, :m] = _fmat(bmat, batch)
    rnp = _np_dtype(real)
    ranks = np.zeros(nb, np.int32)
    sv = np.zeros((nb, min(m, n) if drv in ("gelsd", "gelss") else 1), rnp)
    info = np.zeros(nb, np.int32)
    if nb and m and n and nrhs:
        lk.lstsq(fn, _DRIVERS[drv], a, rhs, np.full(1, rc, rnp), ranks, sv, info, self.is_complex())
    elif nb and (m == 0 or n == 0) and drv != "gels":
        ranks[:] = 0
    launch(drv, nb * 2.0 * m * n * (n + nrhs), a.nbytes + rhs.nbytes, rhs.nbytes)
    _check_errors(info, name, info.size <= 1)
    x = _unf(rhs[:, :, :n], (*batch, n, nrhs))
    if m == 0:
        x = np.zeros_like(x)
    _write(solution, x[..., 0] if vector else x)
    res = np.zeros((0,), rnp)
    if m > n and drv != "gelsy" and (drv == "gels" or (ranks == n).all()):
        raw = _unf(rhs[:, :, n:m], (*batch, m - n, nrhs))
        res = np.sum(np.abs(raw) ** 2, axis=-2).astype(rnp)
    _write(residuals, res)
    self_batch = tuple(self.shape[:-2])

    def per_input(values: np.ndarray, tail: tuple[int, ...]) -> np.ndarray:
        """Values computed per broadcast batch element, read back per matrix of the input (its batch shape)."""
        full = values.reshape((*batch, *tail))
        pad = len(batch) - len(self_batch)
        index = tuple(0 if i < pad else (slice(None) if self_batch[i - pad] == batch[i] else slice(0, 1))
                      for i in range(len(batch)))
        return full[index].reshape((*self_batch, *tail))

    _write(rank, per_input(ranks.astype(np.int64), ()) if drv != "gels" else np.zeros((0,), np.int64))
    _write(singular_values, per_input(sv, (min(m, n),)) if drv in ("gelsd", "gelss") else np.zeros((0,), rnp))
    return solution, residuals, rank, singular_values


# ---------------------------------------------------------------------------------------- matrix_exp


@register("linalg_matrix_exp")
def linalg_matrix_exp(self):
    """exp(A) = sum A^k / k!, by scaling and squaring a Taylor polynomial, computed in double precision."""
    meta = _meta(aten.linalg_matrix_exp.default, self)
    out = _like(meta)
    if out.numel() == 0:
        return out
    wide = torch.complex128 if self.is_complex() else torch.float64
    gemm = _routine("gemm", wide)
    if self.dtype not in _LAPACK_TYPES or gemm is None:
        return _unsupported(aten.linalg_matrix_exp.default, (self,), {}, "gemm", self.dtype)
    a = _fmat(self).astype(_np_dtype(wide))
    res = np.empty_like(a)
    lk.matrix_exp(gemm, a, res)
    n = self.shape[-1]
    launch("matrix_exp", a.shape[0] * 2.0 * n ** 3 * 24, nbytes(self), nbytes(out))
    as_array(out)[...] = _unf(res, self.shape)
    return out


# ------------------------------------------------------------------------------- products: addmv, addbmm, cross


def _storage_overlaps(out: torch.Tensor, *tensors: torch.Tensor) -> bool:
    ptr = out.untyped_storage().data_ptr()
    return any(isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == ptr for t in tensors)


@register("addmv.out")
def addmv_out(self, mat, vec, *, beta=1, alpha=1, out):
    """out = beta * self + alpha * (mat @ vec) (self ignored, NaNs included, when beta is 0)."""
    meta = _meta(aten.addmv.default, self, mat, vec, beta=beta, alpha=alpha)
    _out(out, meta)
    prod = mm(mat, vec.reshape(-1, 1)).reshape(-1)
    res = _epilogue(prod, self, beta, alpha)
    if res.numel():
        out.copy_(res)
    return out


@register("addbmm")
def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """beta * self + alpha * sum_b batch1[b] @ batch2[b], one matrix product over the concatenated batches."""
    meta = _meta(aten.addbmm.default, self, batch1, batch2, beta=beta, alpha=alpha)
    nb, n, k = batch1.shape
    p = batch2.shape[2]
    lhs = batch1.transpose(0, 1).reshape(n, nb * k)  # [b1[0] | b1[1] | ...]
    rhs = batch2.reshape(nb * k, p)  # [b2[0]; b2[1]; ...]
    prod = mm(lhs, rhs)
    res = _epilogue(prod, self, beta, alpha)
    if tuple(res.shape) != tuple(meta.shape):
        res = res.expand(meta.shape).contiguous()
    return res


@register("addbmm.out")
def addbmm_out(self, batch1, batch2, *, beta=1, alpha=1, out):
    """addbmm into ``out``."""
    res = addbmm(self, batch1, batch2, beta=beta, alpha=alpha)
    if out.dtype != res.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {_META_NAMES.get(res.dtype, res.dtype)}, but got "
                           f"{_META_NAMES.get(out.dtype, out.dtype)} instead")
    return _write(out, res)


@register("addbmm_")
def addbmm_(self, batch1, batch2, *, beta=1, alpha=1):
    """addbmm in place on self (whose shape must be the result's)."""
    res = addbmm(self, batch1, batch2, beta=beta, alpha=alpha)
    if tuple(res.shape) != tuple(self.shape):
        raise RuntimeError(f"The expanded size of the tensor ({self.shape[-1]}) must match the existing size "
                           f"({res.shape[-1]}) at non-singleton dimension 1.  Target sizes: {list(self.shape)}.  "
                           f"Tensor sizes: {list(res.shape)}")
    self.copy_(res)
    return self


@register("linalg_cross.out")
def linalg_cross_out(self, other, *, dim=-1, out):
    """The cross product of 3-vectors along ``dim`` (inputs broadcast), three elementwise kernels."""
    meta = _meta(aten.linalg_cross.default, self, other, dim=dim)
    _out(out, meta)
    if out.numel() == 0:
        return out
    d = dim % meta.dim()
    target = empty(meta.shape, meta.dtype) if _storage_overlaps(out, self, other) else out
    a = [self.narrow(d, i, 1) for i in range(3)]
    b = [other.narrow(d, i, 1) for i in range(3)]
    for i in range(3):
        j, k = (i + 1) % 3, (i + 2) % 3
        pointwise("cross", "{0} * {1} - {2} * {3}", (a[j], b[k], a[k], b[j]), out=target.narrow(d, i, 1),
                  compute_dtype=meta.dtype, flops=3)
    if target is not out:
        out.copy_(target)
    return out
