"""Bring-up milestone 6: a matrix product at the chip's roofline, as a tile kernel whose cost the device counts.

Until this milestone a kernel of the learner's *declared* its cost (``bringup.launch(name, inputs, outputs,
flops)``), and the device charged the roofline's ideal: every byte moved once. A tile kernel
(:mod:`npu_lab.puzzles`) has its cost *counted*: every ``ctx.load`` from device memory is charged, so a kernel
that reloads its inputs is slower on the device's clock. The milestone is on the ``gpu-like`` chip (float32 at
19.5 TFLOP/s, 2039 GB/s: a ridge near 9.6 FLOP/B), with a scratchpad of 16 KiB per block. Four checks:

* ``b6.kernel`` - ``gemm_kernel(ctx, a, b, c, out, M, N, K, alpha, beta, BM, BN, BK)`` computes
  ``out = alpha * (a @ b) + beta * c`` over contiguous float32 matrices, on hidden sizes and tiles: edges
  that are not multiples of a tile, rectangular tiles, ``K`` shorter than a tile or 0, ``beta == 0`` with NaN
  in ``c`` (``c`` must not be read), and loads of at most one tile of ``a`` and of ``b`` per block and step;
* ``b6.tiles`` - ``TILES = (BM, BN, BK)``: the kernel on 1024 x 1024 x 1024 reaches the 80% tier of the
  roofline within the scratchpad (the 50% tier is reported on the way);
* ``b6.mm`` - ``aten::mm`` and ``aten::addmm`` registered over the tile kernel: milestone 1's hidden cases, and
  every kernel they launch is a tile kernel's (counted, not declared); ``torch.mm`` at 1024 reaches the 80% tier;
* ``b6.step`` - the MLP of milestone 1, wider, trains to the CPU's losses with your matrix products, and its step
  on the device clock is compared with the same step on the lab's shipped matrix products.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.nn import functional as F

from ..adaptation.measure import counted_launches
from ..grading import device
from ..grading.device import Property
from ..grading.registry import chapter, exercise
from ..grading.tester import NotStarted, Tester
from . import b1, bringup_checks
from .bringup_checks import TIMEOUT, Training, randn

chapter("b6", "Bring-up 6: a matrix product at the roofline", [
    "A declared launch is charged the roofline's ideal; a tile kernel is charged for every byte it loads",
    "A block's tile of the output reuses each loaded tile of a and b: intensity BM * BN / (2 * (BM + BN)) FLOP/B",
    "Below the ridge point a kernel is memory-bound: only larger tiles (fewer reloads) make it faster",
    "The scratchpad bounds the tiles: the accumulator, one tile of a and of b, and the temporaries must fit",
    "An operator is only as fast as its slowest launch: copies and extra launches count against the roofline",
])

#: The chip of this milestone, and what each block may hold.
CHIP = "gpu-like"
SCRATCHPAD = 16 * 1024
#: The product the tiers are measured on, and the tiers (fractions of the roofline's time).
SIZE = 1024
GOOD, MINIMUM = 0.8, 0.5
#: b6.step: your step on the device clock at most this many times the step on the shipped matrix products.
STEP_RATIO = 1.5

KERNEL_SIGNATURE = "gemm_kernel(ctx, a, b, c, out, M, N, K, alpha, beta, BM, BN, BK)"


def _require_kernel(fn: object) -> None:
    from ..bringup.library import is_stub
    from ..device import bare

    bare.require_bare("the bring-up checks")
    if not callable(fn) or is_stub(fn):
        raise NotStarted(f"define {KERNEL_SIGNATURE}")


def expected_bytes_read(M: int, N: int, K: int, BM: int, BN: int, beta: float) -> int:  # noqa: N803
    """The bytes a kernel reads when each block loads every tile of its rows of ``a`` and its columns of ``b``
    once (masked loads count only the elements inside the matrices), and ``c`` once where ``beta != 0``."""
    a = M * K * math.ceil(N / BN)
    b = K * N * math.ceil(M / BM)
    return 4 * (a + b + (M * N if beta != 0 else 0))


def _launch(kernel: Callable, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, out: torch.Tensor,
            alpha: float, beta: float, tiles: tuple[int, int, int]):
    from ..puzzles import cdiv, launch

    (M, K), N = a.shape, b.shape[1]  # noqa: N806
    BM, BN, BK = tiles  # noqa: N806
    return launch(kernel, (cdiv(M, BM), cdiv(N, BN)), a, b, c, out, M, N, K, float(alpha), float(beta),
                  BM, BN, BK, scratchpad=SCRATCHPAD, name="gemm")


# ---------------------------------------------------------------------------------------------
# b6.kernel
# ---------------------------------------------------------------------------------------------

def _kernel_case(kernel: Callable, what: str, M: int, N: int, K: int, tiles: tuple[int, int, int],  # noqa: N803
                 alpha: float = 1.0, beta: float = 0.0, nan_c: bool = False, hidden: bool = False,
                 hint: str = "") -> Property:
    def test() -> str:
        a, b = randn(M, K, seed=M + K), randn(K, N, seed=N + 1)
        c = torch.full((M, N), float("nan")) if nan_c else randn(M, N, seed=7)
        want = alpha * (a.double() @ b.double()) + (beta * c.double() if beta != 0 else 0.0)
        out = torch.full((M, N), float("nan"), device="npu")  # an element the kernel does not write stays NaN
        stats = _launch(kernel, a.to("npu"), b.to("npu"), c.to("npu"), out, alpha, beta, tiles)
        got = out.cpu().double()
        bad = ~torch.isclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, math.sqrt(K)))
        if bool(bad.any()):
            i, j = (int(v) for v in bad.nonzero()[0])
            return (f"out[{i}, {j}] = {got[i, j].item():.6g}, expected {want[i, j].item():.6g} "
                    f"({int(bad.sum())} of {M * N} elements differ)")
        limit = expected_bytes_read(M, N, K, tiles[0], tiles[1], beta)
        if stats.bytes_read > limit:
            return (f"it read {stats.bytes_read:,} B of device memory; loading each tile of a and b once per block "
                    f"and step{' and c once' if beta else ''} reads {limit:,} B")
        if stats.bytes_read < limit:  # every element it multiplies reaches its block through a counted load
            return (f"it read only {stats.bytes_read:,} B of device memory, but the product needs {limit:,} B to "
                    "reach the blocks (each tile of a and b once per block and step"
                    f"{', c once' if beta else ''}): every element must come in through ctx.load, not around it")
        if stats.bytes_written != 4 * M * N:
            return (f"it wrote {stats.bytes_written:,} B; storing each element of out once writes "
                    f"{4 * M * N:,} B")
        return ""

    BM, BN, BK = tiles  # noqa: N806
    return Property(f"{M}x{K} @ {K}x{N}, tiles BM={BM} BN={BN} BK={BK}, alpha={alpha:g}, beta={beta:g}: {what}",
                    "gemm_kernel", test, "alpha * (a @ b) + beta * c in every element, at most one load of each "
                    "tile of a and b per block and step, one store per element", hidden=hidden, hint=hint,
                    blame=False)


def kernel_cases(kernel: Callable) -> list[Property]:
    k = _kernel_case
    return [
        k(kernel, "sizes that are multiples of the tiles", 64, 48, 80, (16, 16, 16),
          hint="block (i, j) computes out's tile of rows i*BM.. and columns j*BN..; walk K in steps of BK, "
               "accumulating ctx.dot of a tile of a and a tile of b"),
        k(kernel, "edges: no size a multiple of its tile", 37, 29, 53, (16, 8, 16),
          hint="mask every load and the store: rows < M, columns < N, and k < K inside the last step"),
        k(kernel, "rectangular tiles (BM != BN)", 40, 70, 24, (8, 32, 8), hidden=True,
          hint="program_id(0) walks the rows in steps of BM, program_id(1) the columns in steps of BN"),
        k(kernel, "beta and alpha", 33, 17, 9, (16, 16, 8), alpha=2.0, beta=0.5,
          hint="scale the accumulator by alpha, then add beta times the tile of c, before the one store"),
        k(kernel, "beta = 0 with NaN in c: c is not read", 12, 20, 16, (8, 8, 8), beta=0.0, nan_c=True, hidden=True,
          hint="as PyTorch's addmm: with beta == 0, c is not read at all (so NaN in it cannot reach out)"),
        k(kernel, "K shorter than one tile", 20, 20, 3, (16, 16, 16), hidden=True,
          hint="the only step of K is partial: mask the k index of both loads"),
        k(kernel, "a 1 x 1 product", 1, 1, 1, (8, 8, 8), hidden=True, hint="one element, inside a masked tile"),
        k(kernel, "K = 0: out = beta * c", 6, 5, 0, (8, 8, 8), alpha=1.0, beta=1.0, hidden=True,
          hint="a sum of no products is 0: the store still writes every element (here beta * c)"),
        k(kernel, "one block per tile, many steps", 16, 16, 96, (16, 16, 8), hidden=True,
          hint="the accumulator lives across the steps of K; each step loads one new tile of a and of b"),
    ]


@exercise("b6.kernel", "A tile kernel for out = alpha * (a @ b) + beta * c", names=["gemm_kernel"],
          timeout=TIMEOUT)
def _kernel(t: Tester, gemm_kernel) -> None:
    _require_kernel(gemm_kernel)
    device.record(t, device.run_cases(kernel_cases(gemm_kernel), device.case_limit(TIMEOUT), ))


# ---------------------------------------------------------------------------------------------
# b6.tiles
# ---------------------------------------------------------------------------------------------

def roofline_fraction(prof) -> float:
    """The roofline's time for a SIZE-cubed float32 product on the milestone's chip over the time ``prof``
    recorded (``prof`` measured on that chip)."""
    from ..adaptation.measure import matmul_efficiency
    from ..device.chips import PRESETS

    return matmul_efficiency(prof, SIZE, PRESETS[CHIP].figures).fraction


def _tier(fraction: float) -> str:
    from ..adaptation.measure import TIERS

    return next(name for floor, name in TIERS if fraction >= floor - 1e-9)


def _tiles_case(kernel: Callable, tiles: object) -> Property:
    def test() -> str:
        from ..device.chips import use_chip
        from ..profiler import profile

        a, b = randn(SIZE, SIZE, seed=1), randn(SIZE, SIZE, seed=2)
        an, bn = a.to("npu"), b.to("npu")
        out = torch.full((SIZE, SIZE), float("nan"), device="npu")
        with use_chip(CHIP), profile() as prof:
            stats = _launch(kernel, an, bn, out, out, 1.0, 0.0, tiles)  # type: ignore[arg-type]
            torch.npu.synchronize()
        want = a @ b
        if not torch.allclose(out.cpu(), want, rtol=1e-4, atol=1e-3):
            return f"the product differs from the CPU's by up to {(out.cpu() - want).abs().max().item():.3g}"
        fraction = roofline_fraction(prof)
        report = (f"{stats.time_us:.1f} us for {stats.bytes_read / 1e6:.0f} MB read: {fraction:.1%} of the roofline, "
                  f"tier {_tier(fraction)!r}; scratchpad peak {stats.scratchpad_peak / 1024:.1f} of "
                  f"{SCRATCHPAD // 1024} KiB")
        return "" if fraction >= GOOD - 1e-9 else report

    return Property(f"TILES = {tiles!r} on {SIZE} x {SIZE} x {SIZE}, {CHIP} chip, {SCRATCHPAD // 1024} KiB scratchpad",
                    "gemm_kernel", test, f"at least {GOOD:.0%} of the roofline (the tier '80%: good')",
                    hint="each block loads its BM rows of a and BN columns of b once per step: the bytes read "
                         "are about 4 * M * N * K * (1/BN + 1/BM), so larger tiles read less; the accumulator, "
                         "one tile of a and of b, and the temporaries must fit in the scratchpad",
                    blame=False)


def _valid_tiles(tiles: object) -> str:
    if (not isinstance(tiles, tuple) or len(tiles) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in tiles)):
        return f"TILES must be a tuple of three ints (BM, BN, BK), got {tiles!r}"
    if not all(v > 0 and v & (v - 1) == 0 for v in tiles):
        return f"each tile size must be a power of two (ctx.arange needs one), got {tiles!r}"
    return ""


@exercise("b6.tiles", "Tiles that reach the 80% tier of the roofline at 1024", names=["gemm_kernel", "TILES"],
          timeout=TIMEOUT)
def _tiles(t: Tester, gemm_kernel, TILES) -> None:  # noqa: N803 - the notebook's name
    _require_kernel(gemm_kernel)
    if TILES is None:
        raise NotStarted("set TILES = (BM, BN, BK)")
    why = _valid_tiles(TILES)
    if why:
        t.expect("TILES", False, expected="(BM, BN, BK), powers of two", got=why,
                 hint="e.g. TILES = (16, 16, 16): the rows and columns of out per block, and the step along K")
        return
    device.record(t, device.run_cases([_tiles_case(gemm_kernel, TILES)], device.case_limit(TIMEOUT),
                                      memcheck_on=False))


# ---------------------------------------------------------------------------------------------
# b6.mm
# ---------------------------------------------------------------------------------------------

MATMUL_OPS = ["aten::mm", "aten::addmm"]


def _counted_case(what: str, make: Callable[[], list[torch.Tensor]], fn: Callable[..., object],
                  hidden: bool = False) -> Property:
    def test() -> str:
        args = [x.to("npu") for x in make()]
        n, declared, _ = counted_launches(lambda: fn(*args))
        if declared:
            return f"{len(declared)} launch(es) not of a tile kernel: {', '.join(sorted(set(declared)))}"
        return "" if n else "no kernel launched"

    return Property(what, "mm", test, "every kernel mm and addmm launch is your tile kernel (copies aside)",
                    hidden=hidden,
                    hint="register mm.out and addmm.out over a wrapper that launches gemm_kernel with "
                         "npu_lab.puzzles.launch; inputs that are not contiguous may be copied first "
                         "(.contiguous()), but no other kernel may run", blame=False)


def _roofline_case() -> Property:
    def test() -> str:
        from ..device.chips import use_chip

        a, b = randn(SIZE, SIZE, seed=3).to("npu"), randn(SIZE, SIZE, seed=4).to("npu")
        with use_chip(CHIP):
            torch.mm(a, b)  # warm-up
            n, declared, prof = counted_launches(lambda: torch.mm(a, b))
        if declared or not n:
            return f"torch.mm launched {', '.join(declared) or 'nothing'}: not a tile kernel, its cost not counted"
        fraction = roofline_fraction(prof)
        if fraction < GOOD - 1e-9:
            return (f"{prof.sim_time_us:.1f} us in {prof.launches} launch(es): {fraction:.1%} of the roofline, "
                    f"tier {_tier(fraction)!r}")
        return ""

    return Property(f"torch.mm of two {SIZE} x {SIZE} matrices on the {CHIP} chip", "mm", test,
                    f"at least {GOOD:.0%} of the roofline", hint="use the TILES of b6.tiles; an extra copy or "
                    "launch (an output copied into place, an input copied although it is contiguous) costs time",
                    blame=False)


def mm_cases() -> list:
    cases: list = list(b1.matmul_cases())
    cases += [
        _counted_case("torch.mm (20, 30) @ (30, 40) runs only your tile kernel", lambda: [randn(20, 30), randn(30, 40)],
                      torch.mm),
        _counted_case("nn.Linear's forward and its backward's products run only your tile kernel",
                      lambda: [randn(12, 20), randn(16, 20, seed=1), randn(16, seed=2)],
                      lambda x, w, bias: F.linear(x.requires_grad_(), w.requires_grad_(), bias).sum().backward(),
                      hidden=True),
        _roofline_case(),
    ]
    return cases


@exercise("b6.mm", "mm and addmm over your tile kernel: correct, counted, at the roofline", names=[],
          timeout=2 * TIMEOUT)
def _mm(t: Tester) -> None:
    bringup_checks.grade_cases(t, mm_cases(), MATMUL_OPS)


# ---------------------------------------------------------------------------------------------
# b6.step
# ---------------------------------------------------------------------------------------------

def _wide_mlp(device_name: str):
    from .. import models

    model = models.mlp(256, 256, 10).to(device_name)
    x, y = models.example_batch(model, 128, device_name, seed=3)
    return model, x, y, F.cross_entropy


TRAINING = Training(
    "a wider MLP (256 inputs, 256 hidden, batch 128; SGD, momentum 0.9)", _wide_mlp,
    lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9), 3,
    "the optimizer's step runs on your kernels of milestone 1")


def step_times() -> dict:
    """One training step of :data:`TRAINING` on the ``gpu-like`` chip: with your kernels, then with the lab's shipped
    ``mm`` and ``addmm`` in place of yours (``npu_lab.ops.registry.register_shipped``)."""
    from ..device.chips import use_chip
    from ..ops.registry import register_shipped

    torch.manual_seed(0)
    model, x, y, loss_fn = TRAINING.make("npu")

    def step() -> None:
        model.zero_grad()
        loss_fn(model(x), y).backward()

    out: dict = {}
    with use_chip(CHIP):
        step()  # warm-up
        n, declared, prof = counted_launches(step)
        out["yours_us"], out["counted"], out["idle_us"] = prof.sim_time_us, n, prof.device_idle_us
        copies = [k for k in prof.kernels if k.kind == "copy"]
        out["copies"], out["copy_us"] = len(copies), sum(k.end_us - k.start_us for k in copies)
        out["tile_us"] = sum(k.end_us - k.start_us for k in prof.kernels if k.name.startswith("puzzle:"))
        out["matmul_declared"] = sorted(set(declared))
        with register_shipped(*MATMUL_OPS):
            step()
            _, _, shipped = counted_launches(step)
        out["shipped_us"], out["shipped_idle_us"] = shipped.sim_time_us, shipped.device_idle_us
        shipped_copies = [k for k in shipped.kernels if k.kind == "copy"]
        out["shipped_copies"] = len(shipped_copies)
        out["shipped_copy_us"] = sum(k.end_us - k.start_us for k in shipped_copies)
        out["shipped_matmul_us"] = sum(k.end_us - k.start_us for k in shipped.kernels
                                       if k.kind == "kernel" and k.op.split("::")[-1].split(".")[0] in ("mm", "addmm"))
    return out


@exercise("b6.step", "The wider MLP trains with your matrix products; its step against the shipped ones", names=[],
          timeout=2 * TIMEOUT)
def _step(t: Tester) -> None:
    from ..grading import forked

    bringup_checks.train_check(t, TRAINING, b1.ELEMENTWISE_OPS + MATMUL_OPS + b1.LOSS_OPS)
    if not all(c.passed for c in t.cases):
        return
    limit = device.case_limit(TIMEOUT)
    try:
        got = forked.call_forked(step_times, limit)
    except Exception as exc:  # noqa: BLE001 - the learner's kernels raised, or never returned
        t.expect("one step on the gpu-like chip", False, expected="no error", got=forked.trimmed(exc) or str(exc))
        return
    t.expect("the step's matrix products are your tile kernel's launches (counted, not declared)",
             not got["matmul_declared"], expected="every mm and addmm launch a tile kernel's",
             got=", ".join(got["matmul_declared"]) or "all counted",
             hint="b6.mm's kernels: mm.out and addmm.out over gemm_kernel")
    ratio = got["yours_us"] / got["shipped_us"] if got["shipped_us"] else float("inf")
    t.expect(f"the step on the device clock within {STEP_RATIO:g}x of the step on the shipped matrix products",
             ratio <= STEP_RATIO, expected=f"at most {STEP_RATIO:g}x",
             got=f"{got['yours_us']:.1f} us against {got['shipped_us']:.1f} us: {ratio:.2f}x",
             hint="the shipped kernels are charged the roofline's ideal; yours, what they load: look for copies "
                  "and launches your wrappers add (npu_lab.profile() lists them)")
