"""Generated row kernels: several reductions over a row and the elementwise work around them, one kernel.

A row softmax needs two reductions (the row's maximum, then the sum of exponentials) and
elementwise work before, between and after them; layer norm and RMSNorm are the same kind of
program. Inductor compiles each to one *persistent reduction*: one program per row that walks the
row as often as it must and keeps the intermediate values in registers. A row kernel does the
same::

    for row in prange(n_rows):
        r0 = in0[b0:b0 + n]                 # the row's slice of each input
        acc0 = -math.inf                    # phase 1: amax
        for j in range(n):
            x0 = r0[j]
            acc0 = max(acc0, x0)
        t0 = np.float32(acc0)               # the row's maximum
        acc1 = 0.0                          # phase 2: sum of exp(x - max)
        for j in range(n):
            x0 = r0[j]
            t1 = x0 - t0; t2 = fast_exp(t1)  # recomputed here, never written
            acc1 += t2
        t3 = np.float32(acc1)
        for j in range(n):                  # last walk: the full-size outputs
            x0 = r0[j]
            t1 = x0 - t0; t2 = fast_exp(t1); t4 = t2 / t3
            w0[j] = t4

Each input is read from memory once per row walk, and on a real chip the row stays in on-chip
memory between walks; the device is charged for reading each input and writing each output once.

Every operand is described per row: ``off`` (the offset of the row's first element, one per row,
computed on the host) and its stride along the row, specialised as ``1`` (a slice), ``0`` (one
value per row: a broadcast, or a per-row statistic) or ``s`` (any other stride). Sums accumulate in
float64 and every reduced value is rounded to the tensor dtype, as eager would store it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from . import codegen
from .elementwise import PARALLEL_THRESHOLD, Operand
from .fused_reduction import _DECORATOR, _HEADER, REDUCTIONS, _indent


@dataclass(frozen=True)
class Phase:
    """One walk over the row: the reductions it accumulates and the row values computed after it.

    ``body`` (per element) computes each reduced expression in ``values``; each is accumulated
    with its ``kinds`` entry into the row value named in ``results``; ``after`` runs once per row.
    """

    body: tuple[str, ...]
    reads: tuple[int, ...]
    kinds: tuple[str, ...]
    values: tuple[str, ...]
    results: tuple[str, ...]
    after: tuple[str, ...]


@dataclass
class RowKernel:
    """One generated row kernel.

    Args:
        name: a readable name (``"fused_rows_0"``).
        n_inputs: tensor inputs (``x0``...), each an operand over the full iteration space.
        before: row statements that need no walk (per-row statistics computed from row inputs).
        phases: the walks that accumulate reductions, in order.
        final_body: per-element statements of the last walk (``final_reads``: inputs it reads).
        full_outputs: expressions written per element in the last walk (``w0``...).
        row_outputs: expressions written once per row (``q0``...).
        scalars: names of scalar arguments (``s0``...).
        dtype: the tensors' dtype (``"float32"`` or ``"float64"``).
        ops: the fused operator names, shown in the source header.
    """

    name: str
    n_inputs: int
    before: tuple[str, ...]
    phases: tuple[Phase, ...]
    final_body: tuple[str, ...]
    final_reads: tuple[int, ...]
    full_outputs: tuple[str, ...]
    row_outputs: tuple[str, ...]
    scalars: tuple[str, ...] = ()
    dtype: str = "float32"
    ops: tuple[str, ...] = ()
    _mods: dict = field(default_factory=dict, repr=False)

    def _operands(self) -> list[str]:
        return ([f"in{i}" for i in range(self.n_inputs)] + [f"w{k}" for k in range(len(self.full_outputs))]
                + [f"q{k}" for k in range(len(self.row_outputs))])

    def _walk(self, body: Sequence[str], reads: Sequence[int], pattern: str) -> list[str]:
        """Per-element reads of the inputs ``reads``, then ``body`` (inside ``for j in range(n)``)."""
        lines = []
        for i in reads:
            c = pattern[i]
            lines.append(f"x{i} = " + {"1": f"r_in{i}[j]", "0": f"v_in{i}", "s": f"in{i}[b_in{i} + j * st_in{i}]"}[c])
        return lines + list(body)

    def source(self, pattern: str) -> str:
        """The generated source for the row strides ``pattern`` (one of "1", "0", "s" per input and full output)."""
        operands = self._operands()
        params = []
        for name in operands:
            params += [name, f"off_{name}"]
        params += [f"st_{name}" for name, c in zip(operands, pattern) if c == "s"]
        params += ["n_rows", "n"] + list(self.scalars)
        what = "row kernel" + (f" of {' -> '.join(self.ops)}" if self.ops else "") + f", row strides {pattern}"
        body = []
        for k, name in enumerate(operands):
            body.append(f"b_{name} = off_{name}[row]")
            c = pattern[k] if k < len(pattern) else "q"
            if c == "1":
                body.append(f"r_{name} = {name}[b_{name}:b_{name} + n]")
            elif c == "0" and name.startswith("in"):
                body.append(f"v_{name} = {name}[b_{name}]")
        body += list(self.before)
        for phase in self.phases:
            for k, kind in enumerate(phase.kinds):
                init = REDUCTIONS[kind][0]
                body.append(f"acc{k} = {init}")
            loop = self._walk(phase.body, phase.reads, pattern)
            for k, (kind, value) in enumerate(zip(phase.kinds, phase.values)):
                loop += [f"v = {value}", REDUCTIONS[kind][1].format(v="v", acc=f"acc{k}")]
            body += ["for j in range(n):"] + _indent(loop, 1)
            for k, (kind, result) in enumerate(zip(phase.kinds, phase.results)):
                total = f"acc{k} / n" if kind == "mean" else f"acc{k}"
                body.append(f"{result} = np.{self.dtype}({total})")
            body += list(phase.after)
        if self.full_outputs:
            loop = self._walk(self.final_body, self.final_reads, pattern)
            for k, expr in enumerate(self.full_outputs):
                c = pattern[self.n_inputs + k]
                ref = f"r_w{k}[j]" if c == "1" else f"w{k}[b_w{k} + j * st_w{k}]"
                loop.append(f"{ref} = {expr}")
            body += ["for j in range(n):"] + _indent(loop, 1)
        body += [f"q{k}[b_q{k}] = {expr}" for k, expr in enumerate(self.row_outputs)]
        fns = []
        for fn, par in (("rows", False), ("rows_par", True)):
            lines = [_DECORATOR.format(par=par), f"def {fn}({', '.join(params)}):",
                     f"    for row in {'prange' if par else 'range'}(n_rows):"]
            fns.append("\n".join(lines + _indent(body, 2)) + "\n")
        return _HEADER.format(what=what).replace("fused_reduction", "row_kernel") + "\n\n".join(fns)

    def module(self, pattern: str):
        """The generated module for ``pattern`` (written to the kernel cache and imported once)."""
        mod = self._mods.get(pattern)
        if mod is None:
            mod = self._mods[pattern] = codegen.load_module(self.source(pattern), f"rows_{pattern}")
        return mod

    def run(self, shape: Sequence[int], ins: Sequence[Operand], fulls: Sequence[Operand],
            rows: Sequence[Operand], scalars: Sequence) -> str:
        """Run over ``shape`` (rows are its last dimension). Every operand has one stride per dimension
        of ``shape`` (per-row operands: 0 along the row). Returns the stride pattern that ran."""
        n = int(shape[-1])
        lead = tuple(int(d) for d in shape[:-1])
        n_rows = int(np.prod(lead)) if lead else 1
        pattern, args, strides = "", [], []
        for k, op in enumerate((*ins, *fulls, *rows)):
            st = tuple(op.strides)
            inner = st[-1]
            if k < len(ins) + len(fulls):
                c = "1" if inner == 1 or n == 1 else "0" if inner == 0 else "s"
                pattern += c
                if c == "s":
                    strides.append(int(inner))
            args += [op.flat, row_offsets(lead, st[:-1], op.offset)]
        mod = self.module(pattern)
        par = n_rows > 1 and n_rows * n >= PARALLEL_THRESHOLD
        fn = mod.rows_par if par else mod.rows
        fn(*args, *strides, n_rows, n, *scalars)
        return pattern


_OFFSETS: dict[tuple, np.ndarray] = {}


def row_offsets(lead: tuple[int, ...], strides: Sequence[int], offset: int) -> np.ndarray:
    """The offset of each row's first element, rows in row-major order of the leading dimensions."""
    key = (lead, tuple(int(s) for s in strides))
    rel = _OFFSETS.get(key)
    if rel is None:
        rel = np.zeros(1, dtype=np.int64)
        for size, st in zip(lead, key[1]):
            rel = (rel[:, None] + np.arange(size, dtype=np.int64)[None, :] * st).reshape(-1)
        if len(_OFFSETS) > 256:
            _OFFSETS.clear()
        _OFFSETS[key] = rel
    return rel + offset if offset else rel


__all__ = ["Phase", "RowKernel", "row_offsets"]
