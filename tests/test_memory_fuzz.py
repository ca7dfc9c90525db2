"""Nothing reads or writes outside a tensor's storage; views and in-place ops behave exactly as on the CPU.

1. A seeded fuzz: random base tensors (float32, float64, int64, bool, float16) laid out
   inside a larger byte arena (guard bytes before and after the base), random chains of
   views (slices with steps, transpose/permute, select, narrow, unsqueeze/expand,
   diagonal, unfold, reshape, as_strided with in-bounds geometry including zero and
   overlapping strides, dtype views), then random in-place ops through the views and
   out-of-place ops on them. Every step runs on the CPU too, and after every step the
   npu's *whole storage* must equal the CPU's byte for byte (guards included), the
   unused tail of the allocator block behind the storage must still hold its canary,
   and guard tensors allocated before and after the base must be untouched. Writes the
   CPU refuses (into expanded/overlapping views, with partially overlapping inputs)
   must be refused by the npu with the same exception type, leaving memory unchanged.
2. The scatter family (select/diagonal/slice/as_strided_scatter), forward and backward.
3. Out-of-bounds geometry raises as on the CPU; untyped npu storages.
4. Compiled (``backend="npu"``) in-place updates through views match eager CPU.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

import npu_lab  # noqa: F401  (registers the device)

DTYPES = (torch.float32, torch.float64, torch.int64, torch.bool, torch.float16)
CANARY = 0xA5
SEEDS = range(8)
CASES_PER_SEED = 24
STEPS_PER_CASE = 9
MAX_VIEW_NUMEL = 300_000


# ---------------------------------------------------------------------------------------------
# memory helpers


def storage_bytes(t: torch.Tensor) -> np.ndarray:
    """Every byte of ``t``'s storage (read on the host; for npu through a storage copy)."""
    st = t.untyped_storage()
    if st.device.type != "cpu":
        st = st.cpu()
    return torch.empty(0, dtype=torch.uint8).set_(st).numpy().copy()


def block_round() -> int:
    """The npu caching allocator's block granularity, measured (bytes)."""
    gc.collect()
    before = torch.npu.memory_allocated()
    keep = torch.empty(1, dtype=torch.uint8, device="npu")
    size = torch.npu.memory_allocated() - before
    del keep
    assert size >= 1
    return size


_BLOCK: list[int] = []


def tail_of(t: torch.Tensor) -> tuple[int, int]:
    """(address, length) of the bytes between the end of ``t``'s storage and the end of its allocator block.

    They belong to the storage's block but to no tensor: a write past the end of the storage lands there.
    """
    if not _BLOCK:
        _BLOCK.append(block_round())
    st = t.untyped_storage()
    n = st.nbytes()
    end = -(-n // _BLOCK[0]) * _BLOCK[0]
    return st.data_ptr() + n, end - n


def paint_tail(t: torch.Tensor) -> None:
    addr, n = tail_of(t)
    if n:
        ctypes.memset(addr, CANARY, n)


def tail_intact(t: torch.Tensor) -> bool:
    addr, n = tail_of(t)
    return ctypes.string_at(addr, n) == bytes([CANARY]) * n


def element_starts(t: torch.Tensor) -> np.ndarray:
    """Byte offset (in its storage) of every element of ``t``."""
    if t.numel() == 0:
        return np.empty(0, dtype=np.int64)
    idx = np.full([1] * t.dim(), t.storage_offset(), dtype=np.int64)
    for k, (s, st) in enumerate(zip(t.shape, t.stride())):
        shape = [1] * t.dim()
        shape[k] = s
        idx = idx + (np.arange(s, dtype=np.int64) * st).reshape(shape)
    return idx.reshape(-1) * t.element_size()


def has_internal_overlap(t: torch.Tensor) -> bool:
    starts = element_starts(t)
    return len(np.unique(starts)) != len(starts)


def shares_elements(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    return bool(np.intersect1d(element_starts(a), element_starts(b)).size)


def same_geometry(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.shape == b.shape and a.stride() == b.stride() and a.storage_offset() == b.storage_offset()
            and a.dtype == b.dtype)


# ---------------------------------------------------------------------------------------------
# one fuzz case: a base tensor in a guarded arena, on both devices


@dataclass
class Case:
    dtype: torch.dtype
    shape: tuple[int, ...]
    guard: int  # elements of guard before and after the base (0: the base fills its storage)
    cpu_store: torch.Tensor  # uint8, the whole storage
    npu_store: torch.Tensor
    cpu_base: torch.Tensor
    npu_base: torch.Tensor
    guards: list[tuple[torch.Tensor, np.ndarray]] = field(default_factory=list)  # (npu guard tensor, its bytes)
    painted: int = 0  # the storage address whose allocator-block tail holds the canary

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def base(self, dev: str) -> torch.Tensor:
        return self.cpu_base if dev == "cpu" else self.npu_base

    def resync(self) -> None:
        """Make the npu storage equal the CPU's again (after a recorded mismatch)."""
        self.npu_store.copy_(self.cpu_store)

    def paint(self) -> None:
        paint_tail(self.npu_store)
        self.painted = self.npu_store.untyped_storage().data_ptr()

    def tail_intact(self) -> bool:
        """The canary behind the storage is intact (or the storage moved: then repaint for the next step)."""
        if self.npu_store.untyped_storage().data_ptr() != self.painted:
            self.paint()
            return True
        return tail_intact(self.npu_store)


def random_values(gen: torch.Generator, shape, dtype: torch.dtype, lo: int = -8, hi: int = 9) -> torch.Tensor:
    """Small integers (exact in every dtype, so results compare byte for byte)."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    return torch.randint(lo, hi, shape, generator=gen).to(dtype)


def make_case(rng: random.Random, gen: torch.Generator) -> Case:
    dtype = rng.choice(DTYPES)
    if rng.random() < 0.04:  # big enough for the kernels' parallel loops (PARALLEL_THRESHOLD elements)
        shape = rng.choice(((300, 230), (2, 190, 180), (70000,)))
    else:
        nd = rng.randint(1, 4)
        shape = tuple(rng.randint(1, 5 if nd < 4 else 3) for _ in range(nd))
    guard = rng.choice((0, 0, 3, 16))
    isz = torch.empty(0, dtype=dtype).element_size()
    n = math.prod(shape)
    guard_before = torch.full((rng.randint(1, 700),), 0x5A, dtype=torch.uint8, device="npu")
    cpu_store = torch.full(((n + 2 * guard) * isz,), CANARY, dtype=torch.uint8)
    cpu_base = cpu_store[guard * isz:(guard + n) * isz].view(dtype).view(shape)
    cpu_base.copy_(random_values(gen, shape, dtype))
    npu_store = cpu_store.to("npu")
    npu_base = npu_store[guard * isz:(guard + n) * isz].view(dtype).view(shape)
    guard_after = torch.full((rng.randint(1, 700),), 0xC3, dtype=torch.uint8, device="npu")
    case = Case(dtype, shape, guard, cpu_store, npu_store, cpu_base, npu_base)
    case.paint()
    case.guards = [(g, storage_bytes(g)) for g in (guard_before, guard_after)]
    return case


# ---------------------------------------------------------------------------------------------
# random views: each step is (description, fn) applied identically on both devices

Step = tuple[str, Callable[[torch.Tensor], torch.Tensor]]


def _in_region_as_strided(rng: random.Random, case: Case) -> Step | None:
    """as_strided of the base's storage inside the base's own elements (zero/overlapping strides allowed)."""
    nd = rng.randint(1, 3)
    for _ in range(10):
        size = [rng.randint(1, 4) for _ in range(nd)]
        stride = [rng.choice((0, 1, 1, 2, 3, 5)) for _ in range(nd)]
        extent = sum((s - 1) * st for s, st in zip(size, stride))
        if extent < case.numel:
            off = case.guard + rng.randint(0, case.numel - 1 - extent)
            size_, stride_ = tuple(size), tuple(stride)
            return (f"as_strided({size_}, {stride_}, {off})",
                    lambda t, a=size_, b=stride_, c=off: t.as_strided(a, b, c))
    return None


def random_view_step(rng: random.Random, v: torch.Tensor, case: Case) -> Step | None:
    d = v.dim()
    kinds = ["slice", "slice", "narrow", "unsqueeze", "reshape"]
    if d >= 1:
        kinds += ["select", "unfold", "expand", "flatten"]
    if d >= 2:
        kinds += ["transpose", "permute", "diagonal", "t"]
    if v.dtype == case.dtype:
        kinds += ["as_strided", "as_strided"]
    kind = rng.choice(kinds)
    if kind == "slice" and d >= 1:
        k = rng.randrange(d)
        size = v.shape[k]
        start = rng.randint(-size, size) if rng.random() < 0.2 else rng.randint(0, max(size - 1, 0))
        stop = rng.choice((None, rng.randint(0, size))) if rng.random() < 0.9 else size + 3
        step = rng.choice((1, 1, 2, 3))
        idx = (slice(None),) * k + (slice(start, stop, step),)
        return f"[{':, ' * k}{start}:{stop}:{step}]", lambda t, i=idx: t[i]
    if kind == "narrow" and d >= 1:
        k = rng.randrange(d)
        start = rng.randint(0, v.shape[k])
        length = rng.randint(0, v.shape[k] - start + 1)  # may run past the end: both devices refuse
        return f"narrow({k}, {start}, {length})", lambda t: t.narrow(k, start, length)
    if kind == "unsqueeze" and d < 5:
        k = rng.randint(-d - 1, d)
        return f"unsqueeze({k})", lambda t: t.unsqueeze(k)
    if kind == "reshape":
        n = v.numel()
        options = [(-1,)] + [(a, n // a) for a in range(1, n + 1) if n % a == 0]
        shape = rng.choice(options)
        if rng.random() < 0.5:
            return f"view{shape}", lambda t: t.view(shape)  # may raise (non-viewable): same on both devices
        return f"reshape{shape}", lambda t: t.reshape(shape)
    if kind == "select":
        k = rng.randrange(d)
        i = rng.randint(-v.shape[k] - 1, v.shape[k])  # one past either end: both devices refuse
        return f"select({k}, {i})", lambda t: t.select(k, i)
    if kind == "unfold":
        k = rng.randrange(d)
        size = rng.randint(1, max(v.shape[k], 1))
        step = rng.randint(1, 3)
        return f"unfold({k}, {size}, {step})", lambda t: t.unfold(k, size, step)
    if kind == "expand":
        shape = [rng.choice((2, 3)) if s == 1 else s for s in v.shape]
        if rng.random() < 0.4:
            shape = [rng.choice((1, 2))] + shape
        return f"expand({shape})", lambda t: t.expand(shape)
    if kind == "flatten":
        return "flatten()", lambda t: t.flatten()
    if kind == "transpose":
        i, j = rng.sample(range(d), 2)
        return f"transpose({i}, {j})", lambda t: t.transpose(i, j)
    if kind == "permute":
        perm = list(range(d))
        rng.shuffle(perm)
        return f"permute({perm})", lambda t: t.permute(perm)
    if kind == "diagonal":
        i, j = rng.sample(range(d), 2)
        off = rng.randint(-v.shape[i], v.shape[j])
        return f"diagonal({off}, {i}, {j})", lambda t: t.diagonal(off, i, j)
    if kind == "t" and d == 2:
        return "t()", lambda t: t.t()
    if kind == "as_strided":
        return _in_region_as_strided(rng, case)
    return None


#: In-place ops whose result on a view with self-aliasing elements does not depend on the order of the
#: writes (every alias gets the same value); the CPU accepts them on expanded views.
ORDER_FREE = {"zero_", "fill_", "masked_fill_"}

#: Integer reinterpretations tried as the last step of a chain (source dtype -> view dtype).
DTYPE_VIEWS = {torch.float32: torch.int32, torch.float64: torch.int64, torch.int64: torch.int32,
               torch.bool: torch.uint8}


# ---------------------------------------------------------------------------------------------
# running one thing on both devices


@dataclass
class Outcome:
    value: object = None
    error: BaseException | None = None


def attempt(fn: Callable[[], object]) -> Outcome:
    try:
        return Outcome(fn())
    except Exception as e:  # noqa: BLE001 - the exception itself is what is compared
        return Outcome(error=e)


def to_dev(x: object, dev: str) -> object:
    if isinstance(x, torch.Tensor):
        return x.to(dev)
    if isinstance(x, (list, tuple)):
        return type(x)(to_dev(i, dev) for i in x)
    return x


def _show(t: torch.Tensor) -> str:
    text = str(t.tolist())
    return text if len(text) < 400 else text[:400] + "..."


def compare_values(got: object, want: object, what: str, tolerant: bool = False) -> str | None:
    """None when ``got`` (npu) equals ``want`` (CPU), else why not."""
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return f"{what}: expected a sequence of {len(want)}, got {type(got).__name__}"
        for i, (g, w) in enumerate(zip(got, want)):
            msg = compare_values(g, w, f"{what}[{i}]", tolerant)
            if msg:
                return msg
        return None
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{what}: expected a tensor, got {type(got).__name__}"
        if got.device.type != "npu":
            return f"{what}: result on {got.device}, expected npu"
        if got.dtype != want.dtype or got.shape != want.shape:
            return f"{what}: {got.dtype}{list(got.shape)} vs CPU {want.dtype}{list(want.shape)}"
        g = got.cpu()
        if tolerant and want.is_floating_point():
            tol = 1e-2 if want.dtype == torch.float16 else 1e-5
            if not torch.allclose(g, want, rtol=tol, atol=tol, equal_nan=True):
                return f"{what}: values differ:\n  npu {_show(g)}\n  cpu {_show(want)}"
        elif not torch.equal(g, want) and not (want.is_floating_point() and torch.equal(g.isnan(), want.isnan())
                                                and torch.equal(g.nan_to_num(), want.nan_to_num())):
            return f"{what}: values differ:\n  npu {_show(g)}\n  cpu {_show(want)}"
        return None
    if got != want:
        return f"{what}: {got!r} vs CPU {want!r}"
    return None


def is_refusal_mismatch(npu: Outcome, cpu: Outcome) -> bool:
    """One device raised and the other did not, or they raised different exception types."""
    return (cpu.error is None) != (npu.error is None) or (
        cpu.error is not None and type(npu.error) is not type(cpu.error))


def compare_outcomes(npu: Outcome, cpu: Outcome, what: str, tolerant: bool = False) -> str | None:
    if cpu.error is not None or npu.error is not None:
        if cpu.error is None:
            return f"{what}: npu raised {type(npu.error).__name__}: {str(npu.error)[:300]} (CPU did not)"
        if npu.error is None:
            return f"{what}: CPU raised {type(cpu.error).__name__}: {str(cpu.error)[:200]} but npu did not"
        if type(npu.error) is not type(cpu.error):
            return (f"{what}: npu raised {type(npu.error).__name__}: {str(npu.error)[:200]}, CPU "
                    f"{type(cpu.error).__name__}: {str(cpu.error)[:200]}")
        return None
    return compare_values(npu.value, cpu.value, what, tolerant)


# ---------------------------------------------------------------------------------------------
# operations: each draws its parameters once (from the CPU view) and returns fn(view, dev)

Op = tuple[str, Callable[[torch.Tensor, str], object]]


def _scalar(rng: random.Random, dtype: torch.dtype) -> object:
    if dtype == torch.bool:
        return rng.choice((True, False))
    if dtype.is_floating_point and rng.random() < 0.3:
        return rng.choice((0.5, -1.5, 2.0))
    return rng.randint(-3, 3)


def _broadcastable_shape(rng: random.Random, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to ``shape`` (trailing dims, some of them 1)."""
    keep = rng.randint(0, len(shape))
    tail = shape[len(shape) - keep:]
    return tuple(1 if rng.random() < 0.3 else s for s in tail)


@dataclass
class Operand:
    """A second operand of an op on the view ``w``, made on either device."""

    desc: str
    make: Callable[[str], torch.Tensor | None]  # None: the view itself
    alias: bool = False  # another view of the base's storage


def _operand(rng: random.Random, gen: torch.Generator, w: torch.Tensor, case: Case) -> Operand:
    """A fresh tensor (maybe another dtype, non-contiguous, a 0-d CPU tensor), the view itself, or an alias."""
    kind = rng.choice(("fresh", "fresh", "noncontig", "other_dtype", "alias", "alias", "self", "cpu0d"))
    if kind in ("alias", "self") and w.dtype != case.dtype:
        kind = "fresh"
    if kind == "self":
        return Operand("self", lambda dev: None)
    if kind == "alias":
        shape = tuple(w.shape)
        for _ in range(10):
            stride = tuple(rng.choice((0, 1, 2, 3)) for _ in shape)
            extent = sum((s - 1) * st for s, st in zip(shape, stride))
            if extent < case.numel:
                off = case.guard + rng.randint(0, case.numel - 1 - extent)
                return Operand(f"alias as_strided({shape}, {stride}, {off})",
                               lambda dev, st=stride, o=off: case.base(dev).as_strided(shape, st, o), alias=True)
        kind = "fresh"
    if kind == "cpu0d":
        value = random_values(gen, (), w.dtype, -3, 4)
        return Operand(f"cpu 0-d {value.item()}", lambda dev: value.clone())
    dtype = w.dtype
    if kind == "other_dtype":
        dtype = rng.choice(DTYPES)
    shape = _broadcastable_shape(rng, tuple(w.shape))
    value = random_values(gen, shape, dtype, -3, 4)
    if kind == "noncontig" and value.dim() >= 1:
        big = random_values(gen, (*shape[:-1], shape[-1] * 2), dtype, -3, 4)
        big[..., ::2] = value
        return Operand(f"noncontig {dtype}{list(shape)}", lambda dev: big.to(dev)[..., ::2])
    return Operand(f"{dtype}{list(shape)}", lambda dev: value.to(dev))


def _index_for(rng: random.Random, gen: torch.Generator, w: torch.Tensor, dim: int, unique: bool) -> torch.Tensor:
    """A scatter/gather index: shape <= w's in every dim, values < w.shape[dim] (unique along dim if asked)."""
    shape = [rng.randint(1, s) if s else 0 for s in w.shape]
    n = w.shape[dim]
    if unique:
        shape[dim] = rng.randint(1, n) if n else 0
        cols = math.prod(s for i, s in enumerate(shape) if i != dim)
        rows = [torch.randperm(n, generator=gen)[:shape[dim]] for _ in range(cols)]
        idx = torch.stack(rows, dim=-1) if rows else torch.empty((shape[dim], 0), dtype=torch.long)
        other = [s for i, s in enumerate(shape) if i != dim]
        return idx.reshape([shape[dim], *other]).movedim(0, dim).contiguous()
    return torch.randint(0, max(n, 1), shape, generator=gen)


def write_op(rng: random.Random, gen: torch.Generator, w: torch.Tensor, case: Case,
             restricted: bool) -> tuple[str, Callable[[torch.Tensor, str], object], Operand | None]:
    """An in-place op through ``w`` (``restricted``: only 0/1 values, for reinterpreted dtype views).

    Returns (description, fn(view, device), the second operand if the op has one).
    """
    op = _write_op(rng, gen, w, case, restricted)
    return op if len(op) == 3 else (*op, None)


def _write_op(rng: random.Random, gen: torch.Generator, w: torch.Tensor, case: Case, restricted: bool):
    dt = w.dtype
    if restricted:
        kinds = ["zero_", "fill_", "copy_fresh", "index_put_"]
    else:
        kinds = ["add_", "sub_", "mul_", "mul_tensor", "add_tensor", "copy_", "fill_", "fill_tensor", "zero_",
                 "clamp_", "masked_fill_", "index_put_", "index_put_acc", "setitem", "scatter_", "scatter_value",
                 "scatter_add_", "index_add_", "masked_scatter_", "neg_", "abs_", "out_add", "out_mul",
                 "logical_not_", "bitwise", "where_out", "relu_", "sign_"]
        if dt.is_floating_point:
            kinds += ["div_", "addcmul_", "addcdiv_", "lerp_", "floor_", "pow_"]
        if w.dim() >= 2:
            kinds += ["tril_"]
    kind = rng.choice(kinds)

    def with_operand(apply):
        operand = _operand(rng, gen, w, case)

        def fn(t, dev):
            other = operand.make(dev)
            return apply(t, t if other is None else other)
        return f"{kind}({operand.desc})", fn, operand

    if kind == "zero_":
        return "zero_()", lambda t, dev: t.zero_()
    if kind == "fill_":
        v = rng.choice((0, 1)) if restricted else _scalar(rng, dt)
        return f"fill_({v})", lambda t, dev: t.fill_(v)
    if kind == "fill_tensor":
        v = random_values(gen, (), dt, -3, 4)
        on_npu = rng.random() < 0.5

        def fill(t, dev):
            if on_npu:
                return t.fill_(v.to(dev))
            # a CPU value is a plain fill for an npu tensor; on the CPU that is fill_ with a number
            return t.fill_(v) if dev != "cpu" else t.fill_(v.item())
        return f"fill_(0-d tensor {v.item()}, {'npu' if on_npu else 'cpu'})", fill
    if kind == "copy_fresh":
        src = random_values(gen, _broadcastable_shape(rng, tuple(w.shape)), dt, 0, 2)
        return f"copy_({dt}{list(src.shape)} of 0/1)", lambda t, dev: t.copy_(src.to(dev))
    if kind in ("add_", "sub_", "mul_", "div_"):
        s = _scalar(rng, dt) if kind != "div_" else rng.choice((2, 4, 3, -2))
        alpha = rng.choice((None, 2)) if kind in ("add_", "sub_") and dt != torch.bool else None
        if alpha is None:
            return f"{kind}({s})", lambda t, dev: getattr(t, kind)(s)
        return f"{kind}({s}, alpha={alpha})", lambda t, dev: getattr(t, kind)(s, alpha=alpha)
    if kind == "mul_tensor":
        return with_operand(lambda t, o: t.mul_(o))
    if kind == "add_tensor":
        alpha = 1 if dt == torch.bool else rng.choice((1, -1, 2))
        return with_operand(lambda t, o: t.add_(o, alpha=alpha))
    if kind == "copy_":
        return with_operand(lambda t, o: t.copy_(o))
    if kind == "out_add":
        return with_operand(lambda t, o: torch.add(t, o, alpha=2, out=t))
    if kind == "out_mul":
        return with_operand(lambda t, o: torch.mul(o, t, out=t))
    if kind == "where_out":
        mask = torch.randint(0, 2, _broadcastable_shape(rng, tuple(w.shape)), generator=gen).bool()
        return with_operand(lambda t, o: torch.where(mask.to(o.device if o.dim() else t.device), o, t, out=t))
    if kind == "clamp_":
        lo, hi = sorted((rng.randint(-4, 4), rng.randint(-4, 4)))
        which = rng.choice(("both", "min", "max"))
        if which == "min":
            return f"clamp_(min={lo})", lambda t, dev: t.clamp_(min=lo)
        if which == "max":
            return f"clamp_(max={hi})", lambda t, dev: t.clamp_(max=hi)
        return f"clamp_({lo}, {hi})", lambda t, dev: t.clamp_(lo, hi)
    if kind == "masked_fill_":
        mask = torch.randint(0, 2, _broadcastable_shape(rng, tuple(w.shape)), generator=gen).bool()
        v = _scalar(rng, dt)
        return f"masked_fill_(mask{list(mask.shape)}, {v})", lambda t, dev: t.masked_fill_(mask.to(dev), v)
    if kind in ("index_put_", "index_put_acc", "setitem"):
        if w.dim() == 0:
            return "zero_()", lambda t, dev: t.zero_()
        accumulate = kind == "index_put_acc"
        style = rng.choice(("long", "long", "mask"))
        if style == "mask":
            k = rng.randint(1, w.dim())
            mask = torch.randint(0, 2, tuple(w.shape[:k]), generator=gen).bool()
            indices = (mask,)
            picked = int(mask.sum())
            vshape = (picked, *w.shape[k:])
        else:
            k = rng.randint(1, w.dim())
            m = rng.randint(0, 4)
            idx = []
            for d in range(k):
                n = w.shape[d]
                if n == 0:
                    idx.append(torch.zeros(0, dtype=torch.long))
                    m = 0
                elif accumulate:
                    idx.append(torch.randint(-n, n, (m,), generator=gen))
                else:  # no duplicate positions: the CPU's result would depend on the order of the writes
                    perm = torch.randperm(n, generator=gen)[:m]
                    m = min(m, len(perm))
                    idx.append(perm)
            idx = [i[:m] for i in idx]
            indices = tuple(idx)
            vshape = (m, *w.shape[k:])
        if rng.random() < 0.3 and len(vshape) >= 1:
            vshape = vshape[1:]  # broadcast
        values = random_values(gen, vshape, dt, 0 if restricted else -3, 2 if restricted else 4)
        if kind == "setitem":
            return (f"setitem[{[list(i.shape) for i in indices]}] = {list(values.shape)}",
                    lambda t, dev: t.__setitem__(to_dev(indices, dev), values.to(dev)))
        return (f"index_put_({[list(i.shape) for i in indices]}, {list(values.shape)}, accumulate={accumulate})",
                lambda t, dev: t.index_put_(to_dev(indices, dev), values.to(dev), accumulate=accumulate))
    if kind in ("scatter_", "scatter_value", "scatter_add_"):
        if w.dim() == 0 or w.numel() == 0:
            return "zero_()", lambda t, dev: t.zero_()
        dim = rng.randrange(w.dim())
        index = _index_for(rng, gen, w, dim, unique=kind != "scatter_add_")
        if kind == "scatter_value":
            v = _scalar(rng, dt)
            return (f"scatter_({dim}, index{list(index.shape)}, value={v})",
                    lambda t, dev: t.scatter_(dim, index.to(dev), v))
        src = random_values(gen, tuple(s + rng.randint(0, 1) for s in index.shape), dt, -3, 4)
        return (f"{kind}({dim}, index{list(index.shape)}, src{list(src.shape)})",
                lambda t, dev: getattr(t, kind)(dim, index.to(dev), src.to(dev)))
    if kind == "index_add_":
        if w.dim() == 0 or w.numel() == 0:
            return "zero_()", lambda t, dev: t.zero_()
        dim = rng.randrange(w.dim())
        m = rng.randint(0, 4)
        index = torch.randint(0, w.shape[dim], (m,), generator=gen)
        shape = list(w.shape)
        shape[dim] = m
        src = random_values(gen, tuple(shape), dt, -3, 4)
        alpha = 1 if dt == torch.bool else rng.choice((1, 2))
        return (f"index_add_({dim}, {index.tolist()}, src{shape}, alpha={alpha})",
                lambda t, dev: t.index_add_(dim, index.to(dev), src.to(dev), alpha=alpha))
    if kind == "masked_scatter_":
        mask = torch.randint(0, 2, _broadcastable_shape(rng, tuple(w.shape)), generator=gen).bool()
        source = random_values(gen, (w.numel() + 2,), dt, -3, 4)
        return (f"masked_scatter_(mask{list(mask.shape)}, source{list(source.shape)})",
                lambda t, dev: t.masked_scatter_(mask.to(dev), source.to(dev)))
    if kind in ("neg_", "abs_", "logical_not_", "floor_", "tril_", "relu_", "sign_"):
        if kind == "tril_":
            k = rng.randint(-2, 2)
            fn = rng.choice(("tril_", "triu_"))
            return f"{fn}({k})", lambda t, dev: getattr(t, fn)(k)
        return f"{kind}()", lambda t, dev: getattr(t, kind)()
    if kind == "bitwise":
        fn = rng.choice(("bitwise_and_", "bitwise_or_", "bitwise_xor_", "bitwise_not_"))
        if fn == "bitwise_not_":
            return f"{fn}()", lambda t, dev: t.bitwise_not_()
        v = _scalar(rng, dt) if dt in (torch.bool, torch.int64) else rng.randint(0, 3)
        return f"{fn}({v})", lambda t, dev: getattr(t, fn)(v)
    if kind in ("addcmul_", "addcdiv_"):
        t1 = random_values(gen, _broadcastable_shape(rng, tuple(w.shape)), dt, -2, 3)
        t2 = torch.tensor([1, 2, 4, -2], dtype=dt)[torch.randint(0, 4, _broadcastable_shape(rng, tuple(w.shape)),
                                                                    generator=gen)]
        value = rng.choice((1, 0.5, -2))
        return (f"{kind}(t1{list(t1.shape)}, t2{list(t2.shape)}, value={value})",
                lambda t, dev: getattr(t, kind)(t1.to(dev), t2.to(dev), value=value))
    if kind == "lerp_":
        end = random_values(gen, _broadcastable_shape(rng, tuple(w.shape)), dt, -3, 4)
        return f"lerp_(end{list(end.shape)}, 0.5)", lambda t, dev: t.lerp_(end.to(dev), 0.5)
    if kind == "pow_":
        return "pow_(2)", lambda t, dev: t.clamp_(-8, 8).pow_(2)
    raise AssertionError(kind)


def read_op(rng: random.Random, gen: torch.Generator, w: torch.Tensor, case: Case) -> tuple[str, Callable, bool]:
    """An out-of-place op on ``w`` (which may be expanded/overlapping): (description, fn, tolerant)."""
    dt = w.dtype
    kinds = ["clone", "contiguous", "mul2", "add_other", "eq", "where", "index_select", "gather", "masked_select",
             "flip", "cat", "to_float", "index", "sum", "neg", "clamp", "nonzero", "amax"]
    if w.dim() >= 2:
        kinds.append("tril")
    if dt in (torch.float32, torch.float64) and w.dim() == 2:
        kinds.append("mm")
    kind = rng.choice(kinds)
    if kind == "clone":
        return "clone()", lambda t, dev: t.clone(), False
    if kind == "contiguous":
        return "contiguous()", lambda t, dev: t.contiguous(), False
    if kind == "mul2":
        return "t * 2", lambda t, dev: t * 2, False
    if kind == "neg":
        return "neg()", lambda t, dev: -t, False
    if kind == "clamp":
        return "clamp(-1, 2)", lambda t, dev: t.clamp(-1, 2), False
    if kind == "add_other":
        operand = _operand(rng, gen, w, case)

        def add(t, dev):
            other = operand.make(dev)
            return t + (t if other is None else other)
        return f"t + ({operand.desc})", add, False
    if kind == "eq":
        s = _scalar(rng, dt)
        return f"t == {s}", lambda t, dev: t == s, False
    if kind == "where":
        mask = torch.randint(0, 2, _broadcastable_shape(rng, tuple(w.shape)), generator=gen).bool()
        return "where(mask, t, 0)", lambda t, dev: torch.where(mask.to(dev), t, torch.zeros((), dtype=dt)), False
    if kind in ("index_select", "gather") and w.dim() >= 1 and w.numel():
        dim = rng.randrange(w.dim())
        if kind == "gather":
            index = _index_for(rng, gen, w, dim, unique=False)
            return (f"gather({dim}, index{list(index.shape)})", lambda t, dev: t.gather(dim, index.to(dev)), False)
        index = torch.randint(-w.shape[dim], w.shape[dim], (rng.randint(0, 5),), generator=gen)
        return f"index_select({dim}, {index.tolist()})", lambda t, dev: t.index_select(dim, index.to(dev)), False
    if kind == "masked_select":
        mask = torch.randint(0, 2, _broadcastable_shape(rng, tuple(w.shape)), generator=gen).bool()
        return f"masked_select(mask{list(mask.shape)})", lambda t, dev: t.masked_select(mask.to(dev)), False
    if kind == "flip" and w.dim():
        dims = sorted(rng.sample(range(w.dim()), rng.randint(1, w.dim())))
        return f"flip({dims})", lambda t, dev: t.flip(dims), False
    if kind == "cat" and w.dim():
        dim = rng.randrange(w.dim())
        return f"cat([t, t], {dim})", lambda t, dev: torch.cat([t, t], dim), False
    if kind == "to_float":
        target = rng.choice((torch.float32, torch.int64, torch.float64))
        return f"to({target})", lambda t, dev: t.to(target), False
    if kind == "index" and w.dim() and w.shape[0]:
        index = torch.randint(-w.shape[0], w.shape[0], (rng.randint(0, 5),), generator=gen)
        return f"t[{index.tolist()}]", lambda t, dev: t[index.to(dev)], False
    if kind == "sum":
        if w.dim() and rng.random() < 0.5:
            dim = rng.randrange(w.dim())
            return f"sum({dim})", lambda t, dev: t.sum(dim), True
        return "sum()", lambda t, dev: t.sum(), True
    if kind == "nonzero":
        return "nonzero()", lambda t, dev: t.nonzero(), False
    if kind == "amax" and dt != torch.bool and w.numel():
        return "amax()", lambda t, dev: t.amax(), False
    if kind == "tril":
        k = rng.randint(-2, 2)
        return f"tril({k})", lambda t, dev: t.tril(k), False
    if kind == "mm" and w.numel():
        other = random_values(gen, (w.shape[1], rng.randint(1, 4)), dt)
        return f"mm(other{list(other.shape)})", lambda t, dev: t @ other.to(dev), True
    return "clone()", lambda t, dev: t.clone(), False


# ---------------------------------------------------------------------------------------------
# the fuzz


class Fuzz:
    def __init__(self, seed: int):
        self.seed = seed
        self.rng = random.Random(seed)
        self.gen = torch.Generator().manual_seed(seed)
        self.problems: list[str] = []  # memory and values: bytes, guards, results, geometry
        self.refusals_differ: list[str] = []  # the CPU refused and the npu did not, or the other way round
        self.steps = 0
        self.writes = 0
        self.refusals = 0

    def report(self, where: str, msg: str, case: Case, refusal: bool = False) -> None:
        """Record a mismatch, then put the npu storage back in the CPU's state and go on.

        Whatever went wrong (an op the npu should have refused, say), it must not have written outside
        the base: the guard bytes around it and the tail behind the storage are checked first.
        """
        (self.refusals_differ if refusal else self.problems).append(f"[seed {self.seed}] {where}: {msg}")
        if refusal:
            isz = case.cpu_base.element_size()
            lo, hi = case.guard * isz, (case.guard + case.numel) * isz
            got, want = storage_bytes(case.npu_store), storage_bytes(case.cpu_store)
            if len(got) != len(want) or not (np.array_equal(got[:lo], want[:lo])
                                             and np.array_equal(got[hi:], want[hi:])):
                self.problems.append(f"[seed {self.seed}] {where}: wrote OUTSIDE the base (into the guard)")
            elif not case.tail_intact():
                self.problems.append(f"[seed {self.seed}] {where}: wrote past the end of the storage")
        case.resync()
        case.paint()

    def compare(self, n: Outcome, c: Outcome, what: str, where: str, case: Case, tolerant: bool = False) -> bool:
        msg = compare_outcomes(n, c, what, tolerant)
        if msg:
            self.report(where, msg, case, refusal=is_refusal_mismatch(n, c))
        return msg is None

    def check_memory(self, case: Case, where: str) -> None:
        got, want = storage_bytes(case.npu_store), storage_bytes(case.cpu_store)
        if case.npu_store.untyped_storage().nbytes() != case.cpu_store.untyped_storage().nbytes():
            self.report(where, "storage size changed", case)
            return
        if not np.array_equal(got, want):
            isz = case.cpu_base.element_size()
            bad = np.nonzero(got != want)[0]
            lo, hi = case.guard * isz, (case.guard + case.numel) * isz
            outside = bad[(bad < lo) | (bad >= hi)]
            kind = f"{len(outside)} bytes OUTSIDE the base (in the guard)" if len(outside) else "bytes of the base"
            self.report(where, f"storage differs from CPU: {kind}; first differing byte offsets "
                               f"{bad[:8].tolist()} (base spans bytes [{lo}, {hi}))", case)
            return
        if not case.tail_intact():
            self.report(where, "bytes past the end of the storage (allocator block tail) were written", case)

    def build_view(self, case: Case, where: str) -> tuple[list[Step], torch.Tensor, torch.Tensor] | None:
        chain: list[Step] = []
        v_cpu, v_npu = case.cpu_base, case.npu_base
        for _ in range(self.rng.randint(0, 4)):
            step = random_view_step(self.rng, v_cpu, case)
            if step is None:
                continue
            desc, fn = step
            c = attempt(lambda fn=fn, v=v_cpu: fn(v))
            n = attempt(lambda fn=fn, v=v_npu: fn(v))
            if (c.error or n.error) and not self.compare(n, c, f"view {desc}",
                                                         f"{where} view chain {[d for d, _ in chain]}", case):
                return None
            if c.error is not None:
                continue  # both refuse this view: keep the previous one
            if c.value.numel() > MAX_VIEW_NUMEL:
                continue  # unfold/expand of a big base: fine, but too slow to compare
            chain.append(step)
            v_cpu, v_npu = c.value, n.value
            if (v_npu.shape != v_cpu.shape or v_npu.stride() != v_cpu.stride()
                    or v_npu.storage_offset() != v_cpu.storage_offset() or v_npu.dtype != v_cpu.dtype):
                self.report(f"{where} view chain {[d for d, _ in chain]}",
                            f"geometry npu {list(v_npu.shape)}/{v_npu.stride()}/{v_npu.storage_offset()} vs CPU "
                            f"{list(v_cpu.shape)}/{v_cpu.stride()}/{v_cpu.storage_offset()}", case)
                return None
            is_alias = v_npu.untyped_storage().data_ptr() == case.npu_store.untyped_storage().data_ptr()
            if is_alias != (v_cpu.untyped_storage().data_ptr() == case.cpu_store.untyped_storage().data_ptr()):
                self.report(f"{where} view chain {[d for d, _ in chain]}", "aliasing differs from CPU", case)
                return None
        target = DTYPE_VIEWS.get(v_cpu.dtype)
        if target is not None and case.dtype != torch.float16 and self.rng.random() < 0.12:
            c, n = attempt(lambda: v_cpu.view(target)), attempt(lambda: v_npu.view(target))
            if (c.error or n.error) and not self.compare(n, c, f"view({target})",
                                                         f"{where} view chain {[d for d, _ in chain]}", case):
                return None
            if c.error is None:
                chain.append((f"view({target})", lambda t: t.view(target)))
                v_cpu, v_npu = c.value, n.value
        msg = compare_values(v_npu, v_cpu, "view contents")
        if msg:
            self.report(f"{where} view chain {[d for d, _ in chain]}", msg, case)
            return None
        return chain, v_cpu, v_npu

    def step(self, case: Case, where: str) -> None:
        built = self.build_view(case, where)
        if built is None:
            return
        chain, w_cpu, w_npu = built
        where = f"{where} view {[d for d, _ in chain]} ({w_cpu.dtype}{list(w_cpu.shape)}/{w_cpu.stride()})"
        self.steps += 1
        if self.rng.random() < 0.35:
            desc, fn, tolerant = read_op(self.rng, self.gen, w_cpu, case)
            c, n = attempt(lambda: fn(w_cpu, "cpu")), attempt(lambda: fn(w_npu, "npu"))
            self.compare(n, c, desc, where, case, tolerant)
            self.check_memory(case, f"{where} after read {desc}")
            return
        restricted = w_cpu.dtype != case.dtype
        desc, fn, operand = write_op(self.rng, self.gen, w_cpu, case, restricted)
        overlap = has_internal_overlap(w_cpu)
        if overlap and torch._debug_has_internal_overlap(w_cpu) != 1:
            # overlapping in a way PyTorch does not detect ("too hard"): the result depends on the order
            # of the writes on either device, so there is nothing to compare. Reads only.
            return
        ambiguous = overlap and desc.split("(")[0] not in ORDER_FREE
        if operand is not None and operand.alias:
            other = operand.make("cpu")
            ambiguous = ambiguous or (shares_elements(w_cpu, other) and not same_geometry(w_cpu, other))
        c = attempt(lambda: fn(w_cpu, "cpu"))
        if ambiguous and c.error is None:
            # the CPU accepted a write into elements that alias each other, or whose input shares
            # elements with its output in a layout its overlap check cannot classify: the result depends
            # on the order of the writes on either device. Nothing to compare: resynchronise.
            case.resync()
            return
        n = attempt(lambda: fn(w_npu, "npu"))
        self.writes += 1
        if c.error is not None:
            self.refusals += 1
        if self.compare(n, c, desc, where, case) and c.error is None and isinstance(c.value, torch.Tensor):
            if not same_geometry(n.value, c.value):  # in-place ops return self: the same geometry
                self.report(where, f"{desc}: returned tensor geometry differs", case)
        self.check_memory(case, f"{where} after {desc}")

    def run(self) -> None:
        for i in range(CASES_PER_SEED):
            case = make_case(self.rng, self.gen)
            where = f"case {i} base {case.dtype}{list(case.shape)} guard={case.guard}"
            for s in range(STEPS_PER_CASE):
                self.step(case, f"{where} step {s}")
            for g, want in case.guards:
                if not np.array_equal(storage_bytes(g), want):
                    self.problems.append(f"[seed {self.seed}] {where}: a guard tensor allocated around the base "
                                         "changed")


_RUNS: dict[int, Fuzz] = {}


def fuzz_run(seed: int) -> Fuzz:
    """The fuzz for ``seed``, run once and shared by the tests that read its findings."""
    if seed not in _RUNS:
        fuzz = Fuzz(seed)
        fuzz.run()
        _RUNS[seed] = fuzz
    return _RUNS[seed]


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzz_views_and_inplace_ops_match_cpu_byte_for_byte(seed):
    """No byte outside a view changes, nothing past the storage, and every value/geometry equals the CPU's."""
    fuzz = fuzz_run(seed)
    assert fuzz.steps > CASES_PER_SEED * STEPS_PER_CASE // 2
    assert fuzz.writes > CASES_PER_SEED * STEPS_PER_CASE // 4
    assert not fuzz.problems, f"{len(fuzz.problems)} mismatches:\n" + "\n".join(fuzz.problems[:25])


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzz_npu_refuses_what_the_cpu_refuses(seed):
    """Writes the CPU refuses (overlapping outputs, overlapping inputs, bad dtypes or indices) raise the same
    exception type on npu, leaving memory untouched; what the CPU accepts, the npu accepts."""
    fuzz = fuzz_run(seed)
    assert fuzz.refusals > 0
    assert not fuzz.refusals_differ, (f"{len(fuzz.refusals_differ)} mismatches:\n"
                                      + "\n".join(fuzz.refusals_differ[:25]))


# ---------------------------------------------------------------------------------------------
# the fuzz's findings, one small reproducer each: outcome, result and every byte of the storage as on the CPU


def _f(*shape, dtype=torch.float32):
    """A base tensor of small distinct values (negative ones included)."""
    n = math.prod(shape)
    return torch.arange(-(n // 2), n - n // 2).to(dtype).reshape(shape)


DIRECTED: dict[str, Callable[[str], tuple[torch.Tensor, Callable[[torch.Tensor], object]]]] = {
    # writes the CPU refuses: outputs whose elements overlap, inputs that partially overlap the output
    "add_ into an expanded view": lambda d: (_f(3, 4).to(d), lambda b: b[:1].expand(3, 4).add_(1)),
    "mul_ into a zero-stride as_strided": lambda d: (_f(8).to(d), lambda b: b.as_strided((2, 3), (3, 0), 1).mul_(2)),
    "clamp_ into an expanded view": lambda d: (_f(4).to(d), lambda b: b[:2].unsqueeze(0).expand(2, 2).clamp_(0, 1)),
    "add_ of a shifted self": lambda d: (_f(8).to(d), lambda b: b[1:].add_(b[:-1])),
    "add_ of its own transpose": lambda d: (_f(3, 3).to(d), lambda b: b.add_(b.t())),
    "mul out= a shifted input": lambda d: (_f(8).to(d), lambda b: torch.mul(b[:-1], 2, out=b[1:])),
    "copy_ from a shifted self": lambda d: (_f(8).to(d), lambda b: b[1:].copy_(b[:-1])),
    "fill_ an expanded view with a 0-d tensor of its device": lambda d: (
        _f(4).to(d), lambda b: b[:1].expand(3).fill_(torch.tensor(5.0, device=b.device))),
    # writes the CPU accepts on an expanded view (every alias gets the same value)
    "zero_ an expanded float16 view": lambda d: (
        _f(4, dtype=torch.float16).to(d), lambda b: b[:2].expand(3, 2).zero_()),
    "fill_ an expanded float16 view": lambda d: (
        _f(4, dtype=torch.float16).to(d), lambda b: b[:2].expand(3, 2).fill_(2)),
    "masked_fill_ an expanded float16 view": lambda d: (
        _f(4, dtype=torch.float16).to(d),
        lambda b: b[:2].expand(3, 2).masked_fill_(torch.tensor([True, False], device=b.device), 7)),
    # scatter/gather/index_select geometry and bounds
    "scatter_ into 3-D with a smaller index": lambda d: (
        _f(3, 4, 5).to(d), lambda b: b.scatter_(0, torch.tensor([[[1, 0], [2, 1]], [[0, 2], [1, 1]]], device=b.device),
                                                7.0)),
    "scatter_add_ into 4-D with a smaller index": lambda d: (
        _f(2, 3, 2, 2).to(d), lambda b: b.scatter_add_(1, torch.zeros(1, 2, 1, 2, dtype=torch.long, device=b.device),
                                                        torch.ones(1, 2, 1, 2, device=b.device))),
    "index_select with a negative index": lambda d: (
        _f(5).to(d), lambda b: b.index_select(0, torch.tensor([-1], device=b.device))),
    "index_select along dim 1 out of range": lambda d: (
        _f(2, 3).to(d), lambda b: b.index_select(1, torch.tensor([3], device=b.device))),
    "gather with a negative index": lambda d: (_f(5).to(d), lambda b: b.gather(0, torch.tensor([-1], device=b.device))),
    "scatter_ with a negative index": lambda d: (
        _f(5).to(d), lambda b: b.scatter_(0, torch.tensor([-2], device=b.device), 1.0)),
    "index_add_ with a negative index": lambda d: (
        _f(5).to(d), lambda b: b.index_add_(0, torch.tensor([-1], device=b.device), torch.ones(1, device=b.device))),
    # values written through views: the exact bytes (signed zeros, infinities)
    "tril_ of negative values": lambda d: (_f(3, 3).to(d), lambda b: b.tril_()),
    "triu of infinities": lambda d: (torch.full((2, 2), -math.inf).to(d), lambda b: b.triu(1)),
    "relu_ of negative values and -inf": lambda d: (
        torch.tensor([-2.0, -0.0, -math.inf, 3.0]).to(d), lambda b: b[::1].relu_()),
    "sign of infinities and -0.0": lambda d: (torch.tensor([-math.inf, -0.0, math.inf]).to(d), lambda b: b.sign()),
    "floor_ of -0.5 and -0.0": lambda d: (torch.tensor([-0.5, -0.0, 1.5, -1.5]).to(d), lambda b: b[1:].floor_()),
    "floor of infinities and large values": lambda d: (
        torch.tensor([math.inf, -math.inf, 1e20, math.nan]).to(d), lambda b: b.floor()),
    "lerp_ with weight 0.75": lambda d: (
        torch.tensor([0.8487103581428528, 0.6920091509819031]).to(d),
        lambda b: b.lerp_(torch.tensor([-1.1372586488723755, -1.360122561454773], device=b.device), 0.75)),
    # dtype rules
    "float16 view plus a 0-d float32 npu tensor": lambda d: (
        _f(6, dtype=torch.float16).to(d), lambda b: b[::2] + torch.tensor(0.5, device=b.device)),
    "clamp of uint8 with a negative bound": lambda d: (
        torch.tensor([1, 5, 200], dtype=torch.uint8).to(d), lambda b: b.clamp(-1, 2)),
    "where out= of another dtype": lambda d: (
        _f(4).to(d), lambda b: torch.where(b > 0, b.double(), -b.double(), out=b)),
    "neg_ of bool": lambda d: (torch.tensor([True, False]).to(d), lambda b: b.neg_()),
    "sub_ of bool": lambda d: (torch.tensor([True, False]).to(d), lambda b: b.sub_(True)),
    "bitwise_and_ of float": lambda d: (_f(4).to(d), lambda b: b.bitwise_and_(1)),
}


@pytest.mark.parametrize("name", list(DIRECTED))
def test_directed_view_and_inplace_cases_match_cpu(name):
    outcomes, storages = {}, {}
    for dev in ("cpu", "npu"):
        base, fn = DIRECTED[name](dev)
        outcomes[dev] = attempt(lambda b=base, f=fn: f(b))
        storages[dev] = storage_bytes(base)
    msg = compare_outcomes(outcomes["npu"], outcomes["cpu"], name)
    assert msg is None, msg
    assert np.array_equal(storages["npu"], storages["cpu"]), (
        f"{name}: storage bytes differ at {np.nonzero(storages['npu'] != storages['cpu'])[0].tolist()}")


# ---------------------------------------------------------------------------------------------
# 2. the scatter family against the CPU, forward and backward


def _scatter_cases() -> list[tuple[str, tuple[int, ...], Callable, Callable]]:
    """(id, input shape, make src shape from the input, op(input, src))."""
    cases = []
    for shape in ((5,), (3, 4), (2, 3, 4)):
        for dim in range(len(shape)):
            for index in (0, -1, shape[dim] // 2):
                def src_shape(s, dim=dim):
                    return s[:dim] + s[dim + 1:]
                cases.append((f"select_scatter{shape}-dim{dim}-i{index}", shape, src_shape,
                              lambda x, src, dim=dim, index=index: torch.select_scatter(x, src, dim, index)))
            for start, end, step in ((0, None, 1), (1, None, 2), (0, shape[dim] - 1, 3), (-2, None, 1),
                                     (shape[dim], None, 1)):
                def src_shape(s, dim=dim, start=start, end=end, step=step):
                    n = len(range(*slice(start, end, step).indices(s[dim])))
                    return s[:dim] + (n,) + s[dim + 1:]
                cases.append((f"slice_scatter{shape}-dim{dim}-{start}:{end}:{step}", shape, src_shape,
                              lambda x, src, dim=dim, start=start, end=end, step=step:
                              torch.slice_scatter(x, src, dim, start, end, step)))
    for shape, (offset, d1, d2) in itertools.product(((3, 4), (4, 3), (2, 3, 4)),
                                                     ((0, 0, 1), (1, 0, 1), (-2, 0, 1), (2, 1, 0), (0, -1, -2))):
        def src_shape(s, offset=offset, d1=d1, d2=d2):
            return tuple(torch.empty(s, device="meta").diagonal(offset, d1, d2).shape)
        cases.append((f"diagonal_scatter{shape}-{offset}-{d1}-{d2}", shape, src_shape,
                      lambda x, src, offset=offset, d1=d1, d2=d2: torch.diagonal_scatter(x, src, offset, d1, d2)))
    for shape, (size, stride, offset) in itertools.product(
            ((12,), (3, 4)),
            (((2, 2), (1, 2), 0), ((3,), (4,), 1), ((2, 3), (3, 1), 5), ((4,), (2,), 3), ((1, 2), (5, 7), 4))):
        cases.append((f"as_strided_scatter{shape}-{size}-{stride}-{offset}", shape, lambda s, size=size: size,
                      lambda x, src, size=size, stride=stride, offset=offset:
                      torch.as_strided_scatter(x, src, size, stride, offset)))
    return cases


SCATTER_CASES = _scatter_cases()


@pytest.mark.parametrize("transposed_input", [False, True], ids=["contiguous", "transposed"])
@pytest.mark.parametrize("name,shape,src_shape,op", SCATTER_CASES, ids=[c[0] for c in SCATTER_CASES])
def test_scatter_family_matches_cpu_forward_and_backward(name, shape, src_shape, op, transposed_input):
    gen = torch.Generator().manual_seed(len(name))
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    if transposed_input and x.dim() >= 2 and not name.startswith("as_strided"):
        x = x.transpose(0, -1).contiguous().transpose(0, -1)  # same values, another memory layout
    src = torch.randn(src_shape(tuple(x.shape)), generator=gen, dtype=torch.float64)
    weight = None
    results = {}
    for dev in ("cpu", "npu"):
        xd = x.to(dev).detach().requires_grad_(True)
        assert xd.stride() == x.stride()
        sd = src.to(dev).detach().requires_grad_(True)
        before = storage_bytes(xd)
        out = op(xd, sd)
        assert out.untyped_storage().data_ptr() != xd.untyped_storage().data_ptr()  # a new tensor
        assert np.array_equal(storage_bytes(xd), before)  # the input is not written
        if weight is None:
            weight = torch.randn(out.shape, generator=gen, dtype=torch.float64)
        (out * weight.to(dev)).sum().backward()
        results[dev] = (out.detach().cpu(), xd.grad.cpu(), sd.grad.cpu())
    for what, got, want in zip(("output", "input grad", "src grad"), results["npu"], results["cpu"]):
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=lambda m, w=what: f"{name} {w}: {m}")


def test_scatter_family_under_compile_matches_cpu(fresh_dynamo):
    def f(x, a, b, c):
        y = torch.select_scatter(x, a, 0, 1)
        y = torch.slice_scatter(y, b, 1, 1, None, 2)
        y = torch.diagonal_scatter(y, c, 1)
        return torch.as_strided_scatter(y, a[:2] * 2, (2,), (5,), 1)

    gen = torch.Generator().manual_seed(3)
    args = [torch.randn(s, generator=gen) for s in ((4, 5), (5,), (4, 2), (4,))]
    want = f(*args)
    got = torch.compile(f, backend="npu")(*[a.npu() for a in args])
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# 3. out-of-bounds geometry raises as on the CPU and leaves the tensor unchanged


def _state(t: torch.Tensor) -> tuple:
    """Everything about ``t`` a failed op must leave as the CPU leaves it (its storage address aside)."""
    return (tuple(t.shape), t.stride(), t.storage_offset(), t.untyped_storage().nbytes(), storage_bytes(t).tobytes())


def _base(dev: str) -> torch.Tensor:
    return torch.arange(24, dtype=torch.float32).reshape(4, 6).to(dev)


BAD_GEOMETRY = {
    "as_strided past the end": lambda t: t.as_strided((3, 6), (6, 1), 7),
    "as_strided one element past": lambda t: t.as_strided((24,), (1,), 1),
    "as_strided big stride": lambda t: t.as_strided((2, 2), (20, 1), 3),
    "as_strided of a view past the end": lambda t: t[2:].as_strided((13,), (1,), 12),
    "as_strided negative stride": lambda t: t.as_strided((3,), (-1,), 5),
    "as_strided negative offset": lambda t: t.as_strided((3,), (1,), -1),
    "as_strided bad rank": lambda t: t.as_strided((3, 2), (1,), 0),
    "view incompatible numel": lambda t: t.view(5, 5),
    "view two -1": lambda t: t.view(-1, -1),
    "view across strides": lambda t: t.t().view(-1),
    "view of a column slice": lambda t: t[:, :3].view(12),
    "view dtype bad size": lambda t: t[:, :3].contiguous().view(torch.float64),
    "view dtype bad stride": lambda t: t.t().view(torch.float64),
    "unfold past the end": lambda t: t.unfold(1, 7, 1),
    "unfold zero step": lambda t: t.unfold(1, 2, 0),
    "narrow past the end": lambda t: t.narrow(1, 4, 3),
    "select past the end": lambda t: t.select(0, 4),
    "select before the start": lambda t: t.select(1, -7),
    "expand bad size": lambda t: t.expand(4, 7),
    "diagonal same dims": lambda t: t.diagonal(0, 1, 1),
    "view_as_complex strided": lambda t: torch.view_as_complex(t.t()),
    "set_ negative offset": lambda t: t.set_(t.untyped_storage(), -1, (2,), (1,)),
    "set_ typed storage of another dtype": lambda t: t.set_(
        torch.storage.TypedStorage(4, dtype=torch.float64, device=t.device, _internal=True)),
    "set_ size overflow": lambda t: t.set_(t.untyped_storage(), 0, (-1,), (1,)),
    "resize_ negative": lambda t: t.resize_(-2),
    "resize_ of a tensor that requires grad": lambda t: t.requires_grad_().resize_(30),
}


@pytest.mark.parametrize("name", list(BAD_GEOMETRY))
def test_out_of_bounds_geometry_raises_like_cpu(name):
    fn = BAD_GEOMETRY[name]
    errors, states = {}, {}
    for dev in ("cpu", "npu"):
        t = _base(dev)
        before, ptr = _state(t), t.untyped_storage().data_ptr()
        with pytest.raises(Exception) as info:  # noqa: B017 - the CPU's exception type is compared below
            fn(t)
        errors[dev] = info.value
        states[dev] = (before, _state(t), t.untyped_storage().data_ptr() == ptr)
    assert type(errors["npu"]) is type(errors["cpu"])
    assert re.sub(r"\bnpu(:0)?\b", "cpu", str(errors["npu"])) == str(errors["cpu"])
    # unchanged (where the CPU leaves it unchanged: a few ops set sizes before they check them)
    assert states["npu"][1:] == states["cpu"][1:]
    if states["cpu"][0] == states["cpu"][1]:
        assert states["npu"][0] == states["npu"][1], f"{name}: the npu tensor changed although the op raised"


def test_set_with_a_too_small_storage_grows_it_like_cpu():
    """set_ past the end of a resizable storage grows it (keeping its bytes) on both devices, as ATen does."""
    results = {}
    for dev in ("cpu", "npu"):
        st = torch.UntypedStorage(8, device=dev)
        torch.empty(0, dtype=torch.uint8, device=dev).set_(st).copy_(torch.arange(1, 9, dtype=torch.uint8))
        t = torch.empty(0, device=dev).set_(st, 1, (3,), (2,))  # needs 4 * (1 + 4 + 1) = 24 bytes
        assert t.untyped_storage().nbytes() == 24
        assert t.untyped_storage().data_ptr() == st.data_ptr()  # the storage itself was resized
        results[dev] = (t.shape, t.stride(), t.storage_offset(), storage_bytes(t)[:8].tobytes())
    assert results["npu"] == results["cpu"]


def test_geometry_that_fits_exactly_is_accepted():
    for dev in ("cpu", "npu"):
        t = _base(dev)
        v = t.as_strided((4, 6), (6, 1), 0)
        assert v.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
        last = t.as_strided((1,), (1,), 23)
        assert last.item() == 23.0
        w = t.as_strided((2, 3), (0, 11), 1)  # the largest element is 1 + 2 * 11 = 23: the last one
        assert torch.equal(w.cpu(), torch.tensor([[1.0, 12.0, 23.0]] * 2))


def test_untyped_storage_on_npu():
    st = torch.UntypedStorage(16, device="npu")
    assert st.device.type == "npu" and st.nbytes() == 16 and st.size() == 16
    paint_tail(torch.empty(0, dtype=torch.uint8, device="npu").set_(st))
    data = torch.arange(16, dtype=torch.uint8)
    as_tensor = torch.empty(0, dtype=torch.uint8, device="npu").set_(st)
    assert as_tensor.shape == (16,)
    as_tensor.copy_(data)
    cpu = st.cpu()
    assert cpu.device.type == "cpu" and cpu.nbytes() == 16
    assert bytes(cpu) == bytes(range(16))
    assert tail_intact(as_tensor)  # the copy wrote the 16 bytes and nothing after them
    st.resize_(40)
    assert st.nbytes() == 40
    assert bytes(st.cpu())[:16] == bytes(range(16))  # resize_ keeps the bytes
    st.resize_(5)
    assert st.nbytes() == 5 and bytes(st.cpu()) == bytes(range(5))
    copy = st.clone()
    assert copy.device.type == "npu" and copy.data_ptr() != st.data_ptr() and bytes(copy.cpu()) == bytes(range(5))
    st.resize_(0)
    assert st.nbytes() == 0 and bytes(st.cpu()) == b""


# ---------------------------------------------------------------------------------------------
# 4. compiled in-place updates through views


def _c_clone_mul_add(x):
    x = x.clone()
    x[1:].mul_(2)
    x.add_(1)
    return x.view(-1)[::3]


def _c_mutate_input_through_transpose(x):
    x.t()[1:].add_(1)
    x[:, ::2].mul_(3)
    return x


def _c_return_view_of_intermediate(x):
    y = x * 2
    y.diagonal().zero_()
    return y.t()[::2]


def _c_select_narrow(x):
    x = x.clone()
    x.select(1, 0).copy_(x.select(1, 2))
    x.narrow(0, 1, 2).clamp_(min=0)
    return x, x.sum()


def _c_masked_setitem_on_input(x):
    x[x > 0] = 0
    return x.flatten()[1::2]


def _c_as_strided_inplace(x):
    y = x.clone()
    y.as_strided((2, 2), (1, 2), 1).mul_(-1)
    return y


def _c_view_of_input_aliases(x):
    v = x[1]
    v.add_(1)
    return v, x.sum(0)


def _c_rows_from_rows(x):
    x = x.clone()
    x[::2].add_(x[1::2])
    return x.unsqueeze(0).expand(2, -1, -1) * 1


def _c_scatter_into_view(x):
    y = x.new_zeros(x.shape[0], 2 * x.shape[1])
    idx = torch.arange(x.shape[1]).to(x.device).flip(0).expand(x.shape[0], -1)
    y[:, ::2].scatter_(1, idx, x)
    return y


def _c_unfold_diagonal(x):
    y = x.clone()
    y.unfold(1, 2, 2).select(2, 1).neg_()
    y.view(-1)[::5].fill_(7)
    return y.transpose(0, 1)


def _c_fused_inplace_on_input(x):
    x.mul_(2).add_(3).relu_()  # negative values become +0.0 (not -0.0) as on the CPU
    x[::2].sub_(4)
    return x.sign()


COMPILED = [_c_fused_inplace_on_input, _c_clone_mul_add, _c_mutate_input_through_transpose,
            _c_return_view_of_intermediate, _c_select_narrow, _c_masked_setitem_on_input, _c_as_strided_inplace,
            _c_view_of_input_aliases, _c_rows_from_rows, _c_scatter_into_view, _c_unfold_diagonal]




#: How the compiled function's input lies in memory: (shape of its base, view of the base that is the input).
LAYOUTS = {
    "contiguous": ((4, 6), lambda b: b),
    "transposed": ((6, 4), lambda b: b.t()),
    "rows of a bigger tensor": ((9, 6), lambda b: b[1::2]),
    "columns of a bigger tensor": ((4, 8), lambda b: b[:, 1:7]),
}


#: (function, device of its input). With CPU inputs the npu backend runs the graph on npu copies of
#: them; tensors the graph itself creates stay where the graph says (CPU), so a graph that mixes them
#: with its inputs (the scatter one) is for npu inputs only.
COMPILED_RUNS = [(fn, "npu") for fn in COMPILED] + [(fn, "cpu") for fn in COMPILED if fn is not _c_scatter_into_view]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("fn,device", COMPILED_RUNS, ids=[f"{f.__name__[3:]}-{d}-inputs" for f, d in COMPILED_RUNS])
def test_compiled_inplace_through_views_matches_eager_cpu(fn, device, layout, fresh_dynamo):
    """Results, aliasing, and every byte of the input's storage (mutations included) as in eager CPU.

    With CPU inputs, what the graph mutates on the npu copies must still reach the caller's tensors.
    """
    from npu_lab import compiler

    shape, view = LAYOUTS[layout]
    base = torch.arange(-50, math.prod(shape) - 50, dtype=torch.float32).reshape(shape)
    base_cpu, base_dev = base.clone(), base.to(device)
    x_cpu, x_dev = view(base_cpu), view(base_dev)
    eager = attempt(lambda: fn(x_cpu))
    compiled = attempt(lambda: torch.compile(fn, backend="npu")(x_dev))
    if eager.error is not None:  # e.g. view(-1) of a transposed clone: the compiled npu code refuses it too
        # (Dynamo reports it while tracing, as a RuntimeError subclass: what it does for every device)
        assert isinstance(compiled.error, type(eager.error)), f"eager raised {eager.error!r}, npu {compiled.error!r}"
        return
    assert compiled.error is None, compiled.error
    assert compiler.history, "the npu backend compiled nothing"
    want = eager.value if isinstance(eager.value, tuple) else (eager.value,)
    got = compiled.value if isinstance(compiled.value, tuple) else (compiled.value,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.device.type == device and g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w, rtol=0, atol=0)
        if device == "npu":  # a returned view of the (mutated) input is a view of the input on npu too
            assert (g.untyped_storage().data_ptr() == x_dev.untyped_storage().data_ptr()) == (
                w.untyped_storage().data_ptr() == x_cpu.untyped_storage().data_ptr())
    # the input's mutations, and nothing else in its storage, exactly as on the CPU
    assert np.array_equal(storage_bytes(base_dev), storage_bytes(base_cpu))


@pytest.mark.parametrize("device", ["npu", "cpu"])
def test_compiled_batchnorm_updates_its_buffers_like_eager(device, fresh_dynamo):
    """A module's buffers are inputs the graph mutates (running statistics, the batch counter)."""
    torch.manual_seed(0)
    eager = torch.nn.BatchNorm1d(3)
    model = torch.nn.BatchNorm1d(3).to(device)
    compiled = torch.compile(model, backend="npu")
    for step in range(3):
        x = torch.randn(8, 3) * (step + 1)
        torch.testing.assert_close(compiled(x.to(device)).cpu(), eager(x), rtol=1e-5, atol=1e-5)
    for name, buf in eager.named_buffers():
        torch.testing.assert_close(dict(model.named_buffers())[name].cpu(), buf, rtol=1e-5, atol=1e-6,
                                   msg=lambda m, n=name: f"buffer {n}: {m}")
