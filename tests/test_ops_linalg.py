"""Linear algebra on the npu (npu_lab/ops/linalg_decomp.py) against PyTorch's CPU.

Two layers: PyTorch's OpInfo samples (float32, fallback off, forward and backward) must be "native"; then the
cases the samples miss: column-major, sliced (offset) and batched inputs, float64 and complex128, empty matrices,
``out=`` and in-place forms, integer dtypes where the CPU has them, the CPU's errors (type and message) for bad
input, gradients in float64, and inputs left unchanged.

The npu calls the same LAPACK routines as the CPU, so even the outputs that are unique only up to sign or phase
(singular vectors, eigenvectors, Q) are compared directly.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

import npu_lab
from npu_lab.ops.sweep import sweep

pytest.importorskip("expecttest", reason="OpInfo's op_db needs the expecttest test dependency")

NPU = "npu"
linalg = torch.linalg

#: The family's OpInfos: all native with the CPU fallback off.
NATIVE = [
    "addmv", "addbmm", "vdot", "cross", "linalg.cross", "cholesky", "cholesky_inverse", "cholesky_solve", "geqrf",
    "lu_unpack", "lu", "lu_solve", "matrix_exp", "ormqr", "qr", "triangular_solve", "svd", "pinverse", "logdet",
    "linalg.det", "linalg.cholesky", "linalg.cholesky_ex", "linalg.cond", "linalg.eig", "linalg.eigvals",
    "linalg.eigh", "linalg.eigvalsh", "linalg.householder_product", "linalg.ldl_factor", "linalg.ldl_factor_ex",
    "linalg.ldl_solve", "linalg.lstsq", "linalg.lstsq.grad_oriented", "linalg.matrix_power", "linalg.qr",
    "linalg.slogdet", "linalg.vander", "linalg.lu_factor", "linalg.lu_factor_ex", "linalg.lu", "linalg.lu_solve",
    "linalg.inv", "linalg.inv_ex", "linalg.solve", "linalg.solve_ex", "linalg.solve_triangular",
    "linalg.matrix_rank", "linalg.matrix_rank.hermitian", "linalg.pinv", "linalg.pinv.singular",
    "linalg.pinv.hermitian", "linalg.svd", "linalg.svdvals", "linalg.tensorinv", "linalg.tensorsolve",
]
FLOATS = [torch.float64, torch.complex128]


@pytest.fixture(autouse=True)
def _fallback_off(fallback_off):
    """Nothing here may run on the CPU behind the test's back."""
    yield


@pytest.fixture(scope="module")
def report():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {o.name: o for o in sweep(False, names=NATIVE).ops}


@pytest.mark.parametrize("name", NATIVE)
def test_opinfo_native(report, name):
    o = report[name]
    assert o.status == "native", (o.status, o.detail)
    assert o.samples > 0


# ------------------------------------------------------------------------------------------------ helpers


def _npu(x):
    return x.to(NPU) if isinstance(x, torch.Tensor) else x


def _cpu(x):
    return x.cpu() if isinstance(x, torch.Tensor) else x


def _tensors(tree):
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def check(fn, *args, rtol=None, atol=None, npu_args=None, **kwargs):
    """fn on the CPU and on the npu give the same results, and the npu inputs are left unchanged."""
    npu_args = tree_map(_npu, args) if npu_args is None else npu_args
    before = [t.cpu().clone() for t in _tensors(npu_args)]
    expected = fn(*args, **kwargs)
    actual = fn(*npu_args, **kwargs)
    for e, a in zip(_tensors(expected), _tensors(actual), strict=True):
        assert a.device.type == NPU
        torch.testing.assert_close(a.cpu(), e, rtol=rtol, atol=atol, equal_nan=True)
    for b, t in zip(before, _tensors(npu_args)):
        assert torch.equal(t.cpu(), b) or torch.allclose(t.cpu(), b, equal_nan=True), "an input was modified"
    return expected, actual


def layouts(t):
    """(cpu, npu) pairs holding ``t`` contiguous, column-major, and as an offset slice of a larger tensor."""
    yield t, t.to(NPU)
    f = t.mT.contiguous()
    yield f.mT, f.to(NPU).mT
    big = torch.zeros(*t.shape[:-2], t.shape[-2] + 2, t.shape[-1] + 3, dtype=t.dtype)
    big[..., 1:-1, 2:-1] = t
    yield big[..., 1:-1, 2:-1], big.to(NPU)[..., 1:-1, 2:-1]


def rand(*shape, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype)


def spd(*shape, dtype=torch.float64):
    a = rand(*shape, dtype=dtype)
    return a @ a.mH + shape[-1] * torch.eye(shape[-1], dtype=dtype)


def hermitian(*shape, dtype=torch.float64):
    a = rand(*shape, dtype=dtype)
    return a + a.mH


def raises_like(fn, *args, **kwargs):
    """The npu raises what the CPU raises (type and message) for the same arguments."""
    with pytest.raises(Exception) as cpu_exc:
        fn(*args, **kwargs)
    with pytest.raises(type(cpu_exc.value)) as npu_exc:
        fn(*tree_map(_npu, args), **tree_map(_npu, kwargs))
    assert str(npu_exc.value).split("\n")[0] == str(cpu_exc.value).split("\n")[0]


# ------------------------------------------------------------------------------- decompositions by layout


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_factorisations_any_layout(dtype):
    for shape in [(4, 4), (2, 5, 3), (3, 4)]:
        for a, an in layouts(rand(*shape, dtype=dtype)):
            for full in (False, True):
                check(linalg.svd, a, npu_args=(an,), full_matrices=full)
            check(linalg.svdvals, a, npu_args=(an,))
            for mode in ("reduced", "complete", "r"):
                check(linalg.qr, a, npu_args=(an,), mode=mode)
            check(torch.geqrf, a, npu_args=(an,))
            check(linalg.lu_factor_ex, a, npu_args=(an,))
            check(linalg.lu, a, npu_args=(an,))
            check(lambda x: torch.lu_unpack(*linalg.lu_factor(x)), a, npu_args=(an,))
            check(linalg.pinv, a, npu_args=(an,))
            check(linalg.matrix_rank, a, npu_args=(an,))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_square_matrix_functions_any_layout(dtype):
    for shape in [(4, 4), (2, 3, 3)]:
        for a, an in layouts(rand(*shape, dtype=dtype)):
            check(linalg.inv_ex, a, npu_args=(an,))
            check(linalg.det, a, npu_args=(an,))
            check(linalg.slogdet, a, npu_args=(an,))
            check(torch.ops.aten._linalg_det, a, npu_args=(an,))  # the LU factors the backward uses, too
            check(torch.ops.aten._linalg_slogdet, a, npu_args=(an,))
            check(linalg.eig, a, npu_args=(an,))
            check(linalg.eigvals, a, npu_args=(an,))
            check(linalg.matrix_exp, a, npu_args=(an,))
            check(linalg.matrix_power, a, npu_args=(an,), n=-2)
        for a, an in layouts(hermitian(*shape, dtype=dtype)):
            for uplo in ("L", "U"):
                check(linalg.eigh, a, npu_args=(an,), UPLO=uplo)
                check(linalg.eigvalsh, a, npu_args=(an,), UPLO=uplo)
            for herm in (False, True):
                check(linalg.ldl_factor_ex, a, npu_args=(an,), hermitian=herm)
        for a, an in layouts(spd(*shape, dtype=dtype)):
            for upper in (False, True):
                check(linalg.cholesky_ex, a, npu_args=(an,), upper=upper)
                check(torch.cholesky, a, npu_args=(an,), upper=upper)
                check(torch.cholesky_inverse, a, npu_args=(an,), upper=upper)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_solvers_any_layout(dtype):
    A, B = rand(2, 4, 4, dtype=dtype), rand(2, 4, 3, dtype=dtype)
    for (a, an), (b, bn) in zip(layouts(A), layouts(B)):
        check(linalg.solve, a, b, npu_args=(an, bn))
        check(linalg.solve, a, b.mT, npu_args=(an, bn.mT), left=False)
        check(torch.ops.aten._linalg_solve_ex, a, b, npu_args=(an, bn))
        check(linalg.solve, a, b[..., 0], npu_args=(an, bn[..., 0]))  # a batch of vectors
        check(linalg.solve, a[0], b, npu_args=(an[0], bn))  # A broadcast over B's batch
        LU, piv = linalg.lu_factor(a)
        for left in (True, False):
            for adjoint in (False, True):
                rhs, rhs_n = (b, bn) if left else (b.mT, bn.mT)
                check(linalg.lu_solve, LU, piv, rhs, npu_args=(LU.to(NPU), piv.to(NPU), rhs_n), left=left,
                      adjoint=adjoint)
        check(torch.lu_solve, b, LU, piv, npu_args=(bn, LU.to(NPU), piv.to(NPU)))
        for upper in (False, True):
            for unit in (False, True):
                check(linalg.solve_triangular, a, b, npu_args=(an, bn), upper=upper, unitriangular=unit)
                check(linalg.solve_triangular, a, b.mT, npu_args=(an, bn.mT), upper=upper, left=False,
                      unitriangular=unit)
                check(torch.triangular_solve, b, a, npu_args=(bn, an), upper=upper, transpose=unit)
        S = a @ a.mH + 4 * torch.eye(4, dtype=dtype)
        for upper in (False, True):
            L = linalg.cholesky(S, upper=upper)
            check(torch.cholesky_solve, b, L, npu_args=(bn, L.to(NPU)), upper=upper)
        H = a + a.mH
        LD, ldl_piv = linalg.ldl_factor(H)
        check(linalg.ldl_solve, LD, ldl_piv, b, npu_args=(LD.to(NPU), ldl_piv.to(NPU), bn))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_householder_and_ormqr(dtype):
    A, C = rand(2, 5, 3, dtype=dtype), rand(2, 5, 4, dtype=dtype)
    for a, (c, cn) in zip(A.unbind(0), layouts(C)):
        qr, tau = torch.geqrf(a.expand(2, 5, 3))
        check(linalg.householder_product, qr, tau, npu_args=(qr.to(NPU), tau.to(NPU)))
        check(linalg.householder_product, qr, tau[..., :2], npu_args=(qr.to(NPU), tau[..., :2].to(NPU)))
        for transpose in (False, True):
            check(torch.ormqr, qr, tau, c, npu_args=(qr.to(NPU), tau.to(NPU), cn), transpose=transpose)
            check(torch.ormqr, qr, tau, c.mT, npu_args=(qr.to(NPU), tau.to(NPU), cn.mT), left=False,
                  transpose=transpose)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("driver", ["gels", "gelsy", "gelsd", "gelss"])
def test_lstsq_drivers(dtype, driver):
    for shape in [(2, 6, 3), (4, 4)]:
        A = rand(*shape, dtype=dtype)
        B = rand(*shape[:-1], 2, dtype=dtype)
        for (a, an), (b, bn) in zip(layouts(A), layouts(B)):
            check(linalg.lstsq, a, b, npu_args=(an, bn), driver=driver)
            check(linalg.lstsq, a, b[..., 0], npu_args=(an, bn[..., 0]), driver=driver)  # vector right sides
    low_rank = rand(6, 2, dtype=dtype) @ rand(2, 4, dtype=dtype)  # rank 2 of 4: gels would fail, the rest not
    if driver != "gels":
        check(linalg.lstsq, low_rank, rand(6, 2, dtype=dtype), driver=driver, rcond=1e-10)
    check(linalg.lstsq, rand(3, 4, 4, dtype=dtype), rand(1, 4, 2, dtype=dtype), driver=driver)  # B broadcast
    check(linalg.lstsq, rand(1, 4, 4, dtype=dtype), rand(3, 4, 2, dtype=dtype), driver=driver)  # A broadcast


# ------------------------------------------------------------------------------------------ products


def test_addmv_addbmm_cross_dtypes_and_layouts():
    for dtype in (torch.float32, torch.float64, torch.int64, torch.complex128):
        m = (torch.randn(5, 4) * 4).to(dtype)
        v, s = (torch.randn(4) * 4).to(dtype), (torch.randn(5) * 4).to(dtype)
        check(torch.addmv, s, m, v)
        check(torch.addmv, s, m.mT.contiguous().mT, v[None, :].expand(3, 4)[1], beta=2, alpha=3)
        check(torch.addmv, s[:1], m, v, beta=0)  # broadcast self, ignored
        b1, b2, c = ((torch.randn(3, 5, 2) * 4).to(dtype), (torch.randn(3, 2, 4) * 4).to(dtype),
                     (torch.randn(5, 4) * 4).to(dtype))
        check(torch.addbmm, c, b1, b2)
        check(torch.addbmm, c[:1], b1.transpose(1, 2).contiguous().transpose(1, 2), b2, beta=2, alpha=-1)
        x, y = (torch.randn(4, 3, 5) * 4).to(dtype), (torch.randn(1, 3, 5) * 4).to(dtype)
        check(torch.linalg.cross, x, y, dim=1)
        check(torch.cross, x.transpose(0, 2), y.transpose(0, 2), dim=1)
    nan_self = torch.full((5,), float("nan"))
    check(torch.addmv, nan_self, torch.randn(5, 4), torch.randn(4), beta=0)


def test_products_out_and_in_place():
    m, v, s = torch.randn(5, 4), torch.randn(4), torch.randn(5)
    out = torch.empty(5, device=NPU)
    torch.addmv(s.to(NPU), m.to(NPU), v.to(NPU), out=out)
    torch.testing.assert_close(out.cpu(), torch.addmv(s, m, v))
    sn = s.to(NPU)
    sn.addmv_(m.to(NPU), v.to(NPU), alpha=2)
    torch.testing.assert_close(sn.cpu(), s.clone().addmv_(m, v, alpha=2))
    b1, b2, c = torch.randn(3, 5, 2), torch.randn(3, 2, 4), torch.randn(5, 4)
    out = torch.empty(0, device=NPU)
    torch.addbmm(c.to(NPU), b1.to(NPU), b2.to(NPU), out=out)
    torch.testing.assert_close(out.cpu(), torch.addbmm(c, b1, b2))
    cn = c.to(NPU)
    cn.addbmm_(b1.to(NPU), b2.to(NPU), beta=0.5)
    torch.testing.assert_close(cn.cpu(), c.clone().addbmm_(b1, b2, beta=0.5))
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    xn = x.to(NPU)
    torch.linalg.cross(xn, y.to(NPU), out=xn)  # the output is an input
    torch.testing.assert_close(xn.cpu(), torch.linalg.cross(x, y))
    raises_like(torch.addmv, s, m, torch.randn(3))
    raises_like(torch.addbmm, c, b1, torch.randn(2, 2, 4))
    raises_like(torch.linalg.cross, torch.randn(4, 2), torch.randn(4, 2))


# ------------------------------------------------------------------------------------------------ out=


def test_out_variants():
    A = rand(2, 4, 4)
    An = A.to(NPU)
    U, S, Vh = (torch.empty(0, dtype=torch.float64, device=NPU) for _ in range(3))
    linalg.svd(An, out=(U, S, Vh))
    for got, want in zip((U, S, Vh), linalg.svd(A)):
        torch.testing.assert_close(got.cpu(), want)
    Q, R = torch.empty(0, dtype=torch.float64, device=NPU), torch.empty(0, dtype=torch.float64, device=NPU)
    linalg.qr(An, mode="complete", out=(Q, R))
    for got, want in zip((Q, R), linalg.qr(A, mode="complete")):
        torch.testing.assert_close(got.cpu(), want)
    inv = torch.empty(2, 4, 4, dtype=torch.float64, device=NPU)
    linalg.inv(An, out=inv)
    torch.testing.assert_close(inv.cpu(), linalg.inv(A))
    x = torch.empty(2, 4, 4, dtype=torch.float64, device=NPU)[..., ::2]  # a non-contiguous out, resized
    linalg.solve(An, An[..., :2], out=x)
    torch.testing.assert_close(x.cpu(), linalg.solve(A, A[..., :2]))
    LU, piv = torch.empty(0, dtype=torch.float64, device=NPU), torch.empty(0, dtype=torch.int32, device=NPU)
    linalg.lu_factor(An, out=(LU, piv))
    for got, want in zip((LU, piv), linalg.lu_factor(A)):
        torch.testing.assert_close(got.cpu(), want)
    H = hermitian(3, 3)
    w, v = torch.empty(0, dtype=torch.float64, device=NPU), torch.empty(0, dtype=torch.float64, device=NPU)
    linalg.eigh(H.to(NPU), out=(w, v))
    for got, want in zip((w, v), linalg.eigh(H)):
        torch.testing.assert_close(got.cpu(), want)
    ew, ev = torch.empty(0, dtype=torch.complex128, device=NPU), torch.empty(0, dtype=torch.complex128, device=NPU)
    linalg.eig(An, out=(ew, ev))
    for got, want in zip((ew, ev), linalg.eig(A)):
        torch.testing.assert_close(got.cpu(), want)
    vals = torch.empty(0, dtype=torch.complex128, device=NPU)
    linalg.eigvals(An, out=vals)
    torch.testing.assert_close(vals.cpu(), linalg.eigvals(A))
    L = torch.empty(0, dtype=torch.float64, device=NPU)
    S = spd(3, 3)
    torch.cholesky(S.to(NPU), out=L)
    torch.testing.assert_close(L.cpu(), torch.cholesky(S))
    B = rand(2, 4, 2)
    Bn = B.to(NPU)
    linalg.solve_triangular(An, Bn, upper=True, out=Bn)  # in place on B
    torch.testing.assert_close(Bn.cpu(), linalg.solve_triangular(A, B, upper=True))
    outs = [torch.empty(0, dtype=dt, device=NPU) for dt in (torch.float64, torch.float64, torch.int64, torch.float64)]
    linalg.lstsq(An, An[..., :2], driver="gelsd", out=outs)
    for got, want in zip(outs, linalg.lstsq(A, A[..., :2], driver="gelsd")):
        torch.testing.assert_close(got.cpu(), want)
    qr, tau = torch.empty(0, dtype=torch.float64, device=NPU), torch.empty(0, dtype=torch.float64, device=NPU)
    torch.geqrf(An, out=(qr, tau))
    for got, want in zip((qr, tau), torch.geqrf(A)):
        torch.testing.assert_close(got.cpu(), want)
    det = torch.empty(0, dtype=torch.float64, device=NPU)
    linalg.det(An, out=det)
    torch.testing.assert_close(det.cpu(), linalg.det(A))
    with pytest.raises(RuntimeError, match="dtype"):
        linalg.inv(An, out=torch.empty(2, 4, 4, dtype=torch.float32, device=NPU))
    with pytest.raises(RuntimeError, match="dtype"):
        linalg.svd(An, out=tuple(torch.empty(0, dtype=torch.float32, device=NPU) for _ in range(3)))


# ---------------------------------------------------------------------------------------------- empty


@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 3, 3), (3, 0), (0, 3), (2, 3, 0)], ids=str)
def test_empty_matrices(shape):
    a = rand(*shape)
    check(linalg.svd, a, full_matrices=True)
    check(linalg.svd, a, full_matrices=False)
    check(linalg.svdvals, a)
    check(linalg.qr, a, mode="complete")
    check(linalg.qr, a)
    check(torch.geqrf, a)
    check(linalg.lu_factor_ex, a)
    check(linalg.lu, a)
    check(linalg.pinv, a)
    if shape[-1] == shape[-2]:
        for fn in (linalg.inv, linalg.det, linalg.slogdet, linalg.eigh, linalg.eig, linalg.cholesky,
                   linalg.matrix_exp, linalg.ldl_factor, torch.cholesky_inverse):
            check(fn, a)
        check(linalg.solve, a, rand(*shape[:-1], 2))


# -------------------------------------------------------------------------------------------- errors


def test_errors_match_the_cpu():
    singular = torch.zeros(3, 3)
    raises_like(linalg.inv, singular)
    raises_like(linalg.inv, torch.stack([torch.eye(3), singular]))  # "(Batch element 1)"
    raises_like(linalg.solve, singular, torch.randn(3, 2))
    raises_like(linalg.cholesky, -torch.eye(3))
    raises_like(torch.cholesky, -torch.eye(3))
    raises_like(linalg.cholesky, torch.randn(3, 4))
    raises_like(linalg.lu_factor, singular)
    raises_like(linalg.svd, torch.randn(3))
    raises_like(linalg.svd, torch.randint(0, 5, (3, 3)))
    raises_like(linalg.qr, torch.randn(3, 3), mode="bad")
    raises_like(linalg.eigh, torch.randn(3, 3), UPLO="X")
    raises_like(linalg.eig, torch.tensor([[1.0, float("nan")], [0.0, 1.0]]))
    raises_like(linalg.solve, torch.randn(3, 3), torch.randn(3, 2, dtype=torch.float64))
    raises_like(linalg.lstsq, torch.randn(3, 3), torch.randn(3, 2), driver="nope")
    raises_like(linalg.lstsq, torch.randn(3, 3), torch.randn(4, 2))
    LU, piv = linalg.lu_factor(torch.randn(3, 3))
    raises_like(linalg.lu_solve, LU, piv * 0, torch.randn(3, 2))
    raises_like(linalg.lu_solve, LU, piv + 5, torch.randn(3, 2))
    raises_like(torch.lu_unpack, LU, piv + 5)
    LD, ldl_piv = linalg.ldl_factor(hermitian(3, 3, dtype=torch.float32))
    raises_like(linalg.ldl_solve, LD, ldl_piv * 0, torch.randn(3, 2))
    raises_like(linalg.householder_product, torch.randn(2, 3), torch.randn(2))
    raises_like(linalg.householder_product, torch.randn(3, 2), torch.randn(3))
    raises_like(torch.ormqr, torch.randn(3, 2), torch.randn(2), torch.randn(4, 2))
    raises_like(torch.geqrf, torch.randn(3))
    raises_like(linalg.solve_triangular, torch.randn(3, 3), torch.randn(4, 2), upper=True)
    raises_like(linalg.matrix_exp, torch.randn(3, 4))
    raises_like(linalg.cross, torch.randn(3, 4), torch.randn(3, 4))


def test_check_errors_flags():
    """``*_ex`` report failures in ``info`` (no exception) unless check_errors=True."""
    for fn, bad in ((linalg.inv_ex, torch.zeros(2, 3, 3)), (linalg.cholesky_ex, -torch.eye(3).expand(2, 3, 3)),
                    (linalg.lu_factor_ex, torch.zeros(2, 3, 3))):
        check(fn, bad)
        raises_like(fn, bad, check_errors=True)
    check(linalg.solve_ex, torch.zeros(3, 3), torch.ones(3))


# ------------------------------------------------------------------------------------------ gradients


def _grads(fn, inputs, device):
    xs = [x.to(device).requires_grad_() for x in inputs]
    outs = [o for o in tree_flatten(fn(*xs))[0] if isinstance(o, torch.Tensor) and o.requires_grad]
    gen = torch.Generator().manual_seed(0)
    cots = [torch.randn(o.shape, dtype=o.dtype, generator=gen).to(device) for o in outs]
    return [g.cpu() for g in torch.autograd.grad(outs, xs, cots)]


@pytest.mark.parametrize("name", ["svd", "eigh", "qr", "solve", "det", "slogdet", "cholesky", "lstsq", "inv",
                                  "solve_triangular", "lu", "matrix_exp", "eig"])
def test_gradients_float64(name):
    a, s, b = rand(2, 4, 4), spd(2, 4, 4), rand(2, 4, 3)
    fns = {
        "svd": (lambda x: linalg.svd(x, full_matrices=False), [rand(2, 5, 3)]),
        "eigh": (linalg.eigh, [s]),
        "qr": (linalg.qr, [rand(2, 5, 3)]),
        "solve": (linalg.solve, [a, b]),
        "det": (linalg.det, [a]),
        "slogdet": (lambda x: linalg.slogdet(x)[1], [a]),
        "cholesky": (linalg.cholesky, [s]),
        "lstsq": (lambda x, y: linalg.lstsq(x, y).solution, [rand(2, 6, 3), rand(2, 6, 2)]),
        "inv": (linalg.inv, [a]),
        "solve_triangular": (lambda x, y: linalg.solve_triangular(x, y, upper=False), [s, b]),
        "lu": (linalg.lu, [a]),
        "matrix_exp": (linalg.matrix_exp, [a / 4]),
        "eig": (lambda x: torch.view_as_real(linalg.eigvals(x)), [a]),
    }
    fn, inputs = fns[name]
    for gc, gn in zip(_grads(fn, inputs, "cpu"), _grads(fn, inputs, NPU), strict=True):
        torch.testing.assert_close(gn, gc)


def test_addmm_out_writes_into_out_without_a_copy():
    """Inductor calls nn.Linear's product as addmm(..., out=buf): the kernel writes into buf (one launch, no
    device copy); aliasing, non-contiguous and wrongly typed outs behave as on the CPU."""
    torch.manual_seed(0)
    b, a, w = torch.randn(5), torch.randn(3, 4), torch.randn(4, 5)
    want = torch.addmm(b, a, w)
    out = torch.empty(3, 5, device="npu")
    bn, an, wn = b.npu(), a.npu(), w.npu()
    with npu_lab.profile() as prof:
        got = torch.addmm(bn, an, wn, out=out)
    assert got is out
    torch.testing.assert_close(out.cpu(), want)
    assert [k.name for k in prof.kernels] == ["addmm"] and prof.launches == 1, prof.table()
    transposed = torch.empty(5, 3, device="npu").t()
    torch.addmm(b.npu(), a.npu(), w.npu(), out=transposed)
    torch.testing.assert_close(transposed.cpu(), want)
    sq, wsq, bsq = torch.randn(4, 4), torch.randn(4, 4), torch.randn(4)
    alias = sq.npu()
    torch.addmm(bsq.npu(), alias, wsq.npu(), out=alias)
    torch.testing.assert_close(alias.cpu(), torch.addmm(bsq, sq, wsq))
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float, but got double instead"):
        torch.addmm(b.npu(), a.npu(), w.npu(), out=torch.empty(3, 5, device="npu", dtype=torch.float64))
