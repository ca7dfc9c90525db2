"""Plausible wrong answers to milestone B6 (a matrix product at the roofline), as a learner would write them.

The answers to ``b6.kernel`` redefine ``gemm_kernel``, those to ``b6.tiles`` set ``TILES``, in the namespace of the
solved notebook; the answers to ``b6.mm`` and ``b6.step`` register broken ``mm.out`` / ``addmm.out`` kernels in a
library of their own, ``bringup.library("wrong")``, over the solution's.
"""

_KERNEL = '''
def gemm_kernel(ctx, a, b, c, out, M, N, K, alpha, beta, BM, BN, BK):
    rows = ctx.program_id({row_axis}) * BM + ctx.arange(BM)
    cols = ctx.program_id({col_axis}) * BN + ctx.arange(BN)
    acc = ctx.zeros((BM, BN))
    for k0 in range(0, K, BK):
        ks = k0 + ctx.arange(BK)
        at = ctx.load(a, rows[:, None] * K + ks[None, :], {a_mask})
        bt = ctx.load(b, ks[:, None] * N + cols[None, :], (ks[:, None] < K) & (cols[None, :] < N))
        ctx.dot(at, bt, acc=acc)
        {in_loop}
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    acc = acc * alpha
    {epilogue}
    ctx.store(out, rows[:, None] * N + cols[None, :], acc, mask)
'''

_RIGHT = {"row_axis": "0", "col_axis": "1", "a_mask": "(rows[:, None] < M) & (ks[None, :] < K)", "in_loop": "pass",
          "epilogue": "if beta != 0.0:\n        acc += beta * ctx.load(c, rows[:, None] * N + cols[None, :], mask)"}


def _kernel(**change: str) -> str:
    return _KERNEL.format(**{**_RIGHT, **change})


_WRAPPER = '''
def bad_into(out, a, b, alpha=1.0, beta=0.0, bias=None):
    (M, K), N = a.shape, b.shape[1]
    if M == 0 or N == 0:
        return out
    res = {res}
    c = {c}
    BM, BN, BK = {tiles}
    launch(gemm_kernel, (cdiv(M, BM), cdiv(N, BN)), {a}, {b}, c, res, M, N, K, {alpha}, {beta}, BM, BN, BK,
           name="gemm")
    {after}
    if res is not out:
        out.copy_(res)
    return out


lib = bringup.library("wrong")
lib.impl("mm.out", lambda self, mat2, *, out: bad_into(out, self, mat2), "PrivateUse1")
lib.impl("addmm.out", lambda self, m1, m2, *, beta=1, alpha=1, out: bad_into(out, m1, m2, alpha, beta, self),
         "PrivateUse1")
'''

_RIGHT_WRAPPER = {"res": "out if out.is_contiguous() else torch.empty((M, N), device=out.device)",
                  "c": "bias.expand(M, N).contiguous() if beta != 0 and bias is not None else res",
                  "tiles": "TILES", "a": "a.contiguous()", "b": "b.contiguous()", "alpha": "float(alpha)",
                  "beta": "float(beta)", "after": "pass"}


def _wrapper(**change: str) -> str:
    return _WRAPPER.format(**{**_RIGHT_WRAPPER, **change})


#: milestone 1's numba product (its module is the notebook's ``mine[0]``): its launch declares the roofline's ideal
_DECLARED = '''
lib = bringup.library("wrong")
lib.impl("mm.out", mine[0].mm_out, "PrivateUse1")
lib.impl("addmm.out", mine[0].addmm_out, "PrivateUse1")
'''

WRONG: dict[str, list[str]] = {
    "b6.kernel": [
        # the k index of a's load is not masked: the last, partial step reads past the end of a's rows
        _kernel(a_mask="rows[:, None] < M"),
        # program ids swapped: right for square tiles and square grids only
        _kernel(row_axis="1", col_axis="0"),
        # c is never added: mm is right, addmm is not
        _kernel(epilogue="pass"),
        # c always loaded and scaled: with beta == 0, NaN in c reaches out (0 * NaN is NaN)
        _kernel(epilogue="acc += beta * ctx.load(c, rows[:, None] * N + cols[None, :], mask)"),
        # the accumulator stored at every step of K, not once at the end: K / BK times the bytes written
        _kernel(in_loop="ctx.store(out, rows[:, None] * N + cols[None, :], acc, "
                        "(rows[:, None] < M) & (cols[None, :] < N))"),
        # a's tile loaded twice per step (once more for a check nobody needed): twice the bytes of a
        _kernel(in_loop="ctx.load(a, rows[:, None] * K + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K))"),
    ],
    "b6.tiles": [
        "TILES = (16, 16, 16)",  # 4 FLOP/B: 42% of the roofline
        "TILES = (16, 32, 16)",  # 5.3 FLOP/B: the 50% tier, not the 80% one
        "TILES = (64, 64, 8)",   # the accumulator alone fills the scratchpad
        "TILES = (32, 64, 8)",   # fits without the temporaries, not with them
        "TILES = (32, 32)",      # BK missing
        "TILES = (32, 32, 12)",  # not a power of two
    ],
    "b6.mm": [
        _DECLARED,
        # alpha dropped: addmm(beta=0.5, alpha=2) is wrong
        _wrapper(alpha="1.0"),
        # transposed operands passed as they are: the kernel reads them as if they were row-major
        _wrapper(a="a", b="b"),
        # the 1-D bias passed without broadcasting it: out of its bounds from the second row on
        _wrapper(c="bias if beta != 0 and bias is not None else res"),
        # every result through a temporary, copied into out: one more copy at 1024 puts mm below 80%
        _wrapper(res="torch.empty((M, N), device=out.device)"),
        # small tiles in the wrapper instead of TILES: right values, 21% of the roofline
        _wrapper(tiles="(8, 8, 8)"),
        # the tile kernel's launch, and then a declared one as well ("to be sure the clock sees it")
        _wrapper(after='bringup.launch("mm", (a, b), (res,), flops=2 * M * N * K)'),
    ],
    "b6.step": [
        _DECLARED,
        # the bias forgotten (beta passed as 0): the losses differ from the CPU's
        _wrapper(beta="0.0"),
        # the bias added by milestone 1's add after the product: a declared launch inside addmm
        _wrapper(c="res", beta="0.0", after="if bias is not None and beta != 0:\n        res.add_(bias, alpha=beta)"),
        # every operand moved through the host to make it contiguous: the copies cost more than the products
        _wrapper(a="a.cpu().contiguous().to(a.device)", b="b.cpu().contiguous().to(b.device)"),
        # transposed operands passed as they are: wrong gradients
        _wrapper(a="a", b="b"),
    ],
}
