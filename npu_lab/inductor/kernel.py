"""An Inductor kernel that writes numba code: loops over Inductor's iteration space.

Inductor's scheduler hands a backend *scheduler nodes*: a pointwise or
reduction computation given as a loop body over symbolic indices, whose ops
(``load``, ``store``, ``add``, ``exp``, ``reduction``...) the backend turns into
code. :class:`NumbaKernel` implements those ops as Python expressions and wraps
them in loops::

    @numba.njit(parallel=True, cache=True)
    def kernel(in_ptr0, out_ptr0):
        for x0 in numba.prange(8):          # the node's iteration ranges
            acc0 = np.float32(0)            # reduction prefix
            for r0 in range(16):            # reduction ranges
                tmp0 = in_ptr0[16*x0 + r0]  # loads and compute
                acc0 = acc0 + tmp0
            out_ptr0[x0] = acc0             # reduction suffix

Index expressions (``16*x0 + r0``) are Inductor's own, printed as Python.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from torch._inductor.codegen.common import (
    CSEVariable,
    DeferredLine,
    IndentedBuffer,
    Kernel,
    OpOverrides,
    PythonPrinter,
)
from torch._inductor.virtualized import V

NP_NAMES = {
    torch.float32: "float32", torch.float64: "float64", torch.int64: "int64", torch.int32: "int32",
    torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool_",
}

#: Helpers every generated kernel can call (NaN-propagating max/min like torch.maximum/minimum).
PRELUDE = '''
import math

import numba
import numpy as np

from npu_lab.kernels.fast_math import fast_exp, fast_tanh


@numba.njit(inline="always")
def _maximum(a, b):
    return a if (a > b or a != a) else b


@numba.njit(inline="always")
def _minimum(a, b):
    return a if (a < b or a != a) else b
'''


class Unsupported(NotImplementedError):
    """An Inductor operation the numba backend does not generate."""


def _np(dtype: torch.dtype) -> str:
    if dtype not in NP_NAMES:
        raise Unsupported(f"npu Inductor backend: no numba type for {dtype}")
    return f"np.{NP_NAMES[dtype]}"


def _unary(fn: str) -> Callable[[Any], str]:
    return staticmethod(lambda x: f"{fn}({x})")


class NumbaOverrides(OpOverrides):
    """Inductor's pointwise ops as numba-compatible Python expressions."""

    @staticmethod
    def to_dtype(x: Any, dtype: torch.dtype, src_dtype: torch.dtype | None = None,
                 use_compute_types: bool = True) -> str:
        if dtype == torch.bool:
            return f"({x} != 0)"
        return f"{_np(dtype)}({x})"

    @staticmethod
    def to_dtype_bitcast(x: Any, dtype: torch.dtype, src_dtype: torch.dtype) -> str:
        raise Unsupported("npu Inductor backend: bitcasts are not generated")

    @staticmethod
    def constant(value: Any, dtype: torch.dtype) -> str:
        if dtype == torch.bool:
            return "True" if value else "False"
        if isinstance(value, float) and math.isinf(value):
            return f"{_np(dtype)}({'-' if value < 0 else ''}np.inf)"
        if isinstance(value, float) and math.isnan(value):
            return f"{_np(dtype)}(np.nan)"
        return f"{_np(dtype)}({value!r})"

    @staticmethod
    def index_expr(expr: sympy.Expr, dtype: torch.dtype) -> str:
        return f"{_np(dtype)}({V.kernel.index_to_str(expr)})"

    @staticmethod
    def where(cond: Any, a: Any, b: Any) -> str:
        return f"({a} if {cond} else {b})"

    @staticmethod
    def masked(mask: Any, body: Callable[[], Any], other: Any) -> str:
        return V.kernel.masked(mask, body, other)

    maximum = staticmethod(lambda a, b: f"_maximum({a}, {b})")
    minimum = staticmethod(lambda a, b: f"_minimum({a}, {b})")
    abs = _unary("abs")
    exp = _unary("fast_exp")
    log = _unary("math.log")
    sqrt = _unary("math.sqrt")
    sin = _unary("math.sin")
    cos = _unary("math.cos")
    tan = _unary("math.tan")
    tanh = _unary("fast_tanh")
    sinh = _unary("math.sinh")
    cosh = _unary("math.cosh")
    asin = _unary("math.asin")
    acos = _unary("math.acos")
    atan = _unary("math.atan")
    erf = _unary("math.erf")
    lgamma = _unary("math.lgamma")
    floor = _unary("math.floor")
    ceil = _unary("math.ceil")
    trunc = _unary("math.trunc")
    round = _unary("np.rint")
    sign = _unary("np.sign")
    expm1 = _unary("math.expm1")
    log1p = _unary("math.log1p")
    rsqrt = staticmethod(lambda x: f"(1.0 / math.sqrt({x}))")
    neg = staticmethod(lambda x: f"(-{x})")
    isnan = staticmethod(lambda x: f"({x} != {x})")
    isinf = staticmethod(lambda x: f"(abs({x}) == np.inf)")
    signbit = staticmethod(lambda x: f"(math.copysign(1.0, {x}) < 0)")
    atan2 = staticmethod(lambda a, b: f"math.atan2({a}, {b})")
    pow = staticmethod(lambda a, b: f"({a} ** {b})")
    fmod = staticmethod(lambda a, b: f"math.fmod({a}, {b})")
    remainder = staticmethod(lambda a, b: f"({a} % {b})")
    floordiv = staticmethod(lambda a, b: f"({a} // {b})")
    truncdiv = staticmethod(lambda a, b: f"int({a} / {b})")
    logical_and = staticmethod(lambda a, b: f"({a} and {b})")
    logical_or = staticmethod(lambda a, b: f"({a} or {b})")
    logical_xor = staticmethod(lambda a, b: f"(bool({a}) != bool({b}))")
    logical_not = staticmethod(lambda a: f"(not {a})")
    eq = staticmethod(lambda a, b: f"({a} == {b})")
    ne = staticmethod(lambda a, b: f"({a} != {b})")
    lt = staticmethod(lambda a, b: f"({a} < {b})")
    le = staticmethod(lambda a, b: f"({a} <= {b})")
    gt = staticmethod(lambda a, b: f"({a} > {b})")
    ge = staticmethod(lambda a, b: f"({a} >= {b})")


class NumbaKernel(Kernel):
    """One generated kernel: a loop nest per group of scheduler nodes with the same ranges.

    Nodes fused by Inductor's scheduler share a kernel (one launch). Nodes with
    identical ranges share one loop nest, so a value stored by one node is
    handed to the next in a register (Inductor's store cache); nodes with other
    ranges get their own nest in the same kernel, run one after another.
    """

    overrides = NumbaOverrides  # type: ignore[assignment]
    newvar_prefix = ""
    suffix = ""

    def __init__(self) -> None:
        super().__init__()
        self.nests: list[tuple[list, list, list, list, str]] = []  # finished nests
        self.sizes: list[sympy.Expr] = []
        self.reduction_sizes: list[sympy.Expr] = []
        self.itervars: list[sympy.Symbol] = []
        self.reduction_vars: list[sympy.Symbol] = []
        self.reduction_prefix = IndentedBuffer()
        self.reduction_suffix = IndentedBuffer()
        self._accs = itertools.count()
        self._printer = PythonPrinter()
        self._open = False

    def start_nest(self, sizes: Sequence[sympy.Expr], reduction_sizes: Sequence[sympy.Expr]) -> bool:
        """Begin the loops for a node with these ranges; False if the current nest already has them."""
        if self._open and list(sizes) == self.sizes and list(reduction_sizes) == self.reduction_sizes \
                and not reduction_sizes:
            return False
        self.finish_nest()
        self.sizes, self.reduction_sizes = list(sizes), list(reduction_sizes)
        self.itervars = [sympy.Symbol(f"x{i}", integer=True, nonnegative=True) for i in range(len(sizes))]
        self.reduction_vars = [sympy.Symbol(f"r{i}", integer=True, nonnegative=True)
                               for i in range(len(reduction_sizes))]
        self._open = True
        return True

    def finish_nest(self) -> None:
        if not self._open:
            return
        # Kept as buffers, not text: stores of buffers that fusion makes unnecessary are
        # DeferredLines that disappear when the kernel is rendered.
        self.nests.append((self.sizes, self.reduction_sizes, self.itervars, self.reduction_vars,
                           self.reduction_prefix, [self.loads, self.compute, self.stores], self.reduction_suffix))
        self.loads, self.compute, self.stores = IndentedBuffer(), IndentedBuffer(), IndentedBuffer()
        self.reduction_prefix, self.reduction_suffix = IndentedBuffer(), IndentedBuffer()
        # Values of one nest are not visible in the next: keep only the naming counter.
        self.cse = type(self.cse)(self.newvar_prefix, self.suffix, iter_buffers=self.cse.iter_buffer_ids)
        self._open = False

    # -- indexing -----------------------------------------------------------------------------
    def index_to_str(self, index: sympy.Expr) -> str:
        return self._printer.doprint(self.rename_indexing(index))

    def _linear_reduction_index(self) -> str:
        parts = []
        for i, var in enumerate(self.reduction_vars):
            stride = sympy_product(self.reduction_sizes[i + 1:])
            parts.append(f"{var} * {self.index_to_str(stride)}")
        return " + ".join(parts) or "0"

    def check_bounds(self, expr: sympy.Expr, size: sympy.Expr, lower: bool, upper: bool) -> None:
        """Indirect indices (gather, embedding) are checked like PyTorch's kernels check them."""
        if not (lower or upper):
            return
        idx, n = self.index_to_str(expr), self.index_to_str(size)
        cond = " or ".join(c for c, on in ((f"{idx} < 0", lower), (f"{idx} >= {n}", upper)) if on)
        self.compute.writeline(f"if {cond}:")
        with self.compute.indent():
            self.compute.writeline('raise IndexError("index out of range in an npu Inductor kernel")')

    # -- memory -------------------------------------------------------------------------------
    def load(self, name: str, index: sympy.Expr) -> CSEVariable:
        # Read from memory (not handed over in a register): the buffer must really be written.
        self.must_keep_buffers.add(name)
        var = self.args.input(name)
        return self.cse.generate(self.loads, f"{var}[{self.index_to_str(index)}]", dtype=V.graph.get_dtype(name))

    def store(self, name: str, index: sympy.Expr, value: CSEVariable, mode: Any = None) -> None:
        var = self.args.output(name)
        target = f"{var}[{self.index_to_str(index)}]"
        if mode is None:
            self.stores.writeline(DeferredLine(name, f"{target} = {value}"))
        elif mode == "atomic_add":
            self.stores.writeline(DeferredLine(name, f"{target} += {value}"))
        else:
            raise Unsupported(f"npu Inductor backend: store mode {mode!r}")

    def masked(self, mask: Any, body: Callable[[], Any], other: Any) -> CSEVariable:
        """``body()`` where ``mask`` holds, else ``other`` (loads under a false mask never run)."""
        inner = IndentedBuffer()
        with self.swap_buffers(inner):
            value = body()
        result = self.cse.newvar(dtype=getattr(value, "dtype", None))
        self.compute.writeline(f"if {mask}:")
        with self.compute.indent():
            self.compute.splice(inner)
            self.compute.writeline(f"{result} = {value}")
        self.compute.writeline("else:")
        with self.compute.indent():
            self.compute.writeline(f"{result} = {other!r}" if isinstance(other, (int, float)) else
                                   f"{result} = {other}")
        return result

    # -- reductions ---------------------------------------------------------------------------
    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: str,
                  value: Any) -> Any:
        acc = f"acc{next(self._accs)}"
        typ = _np(dtype) if dtype in NP_NAMES else "np.float64"
        lowest = "-np.inf" if dtype.is_floating_point else str(torch.iinfo(dtype).min if dtype != torch.bool else 0)
        highest = "np.inf" if dtype.is_floating_point else str(torch.iinfo(dtype).max if dtype != torch.bool else 1)
        pre, upd = self.reduction_prefix, self.compute
        if reduction_type == "sum":
            pre.writeline(f"{acc} = {typ}(0)")
            upd.writeline(f"{acc} = {acc} + {value}")
        elif reduction_type == "prod":
            pre.writeline(f"{acc} = {typ}(1)")
            upd.writeline(f"{acc} = {acc} * {value}")
        elif reduction_type == "max":
            pre.writeline(f"{acc} = {typ}({lowest})")
            upd.writeline(f"{acc} = _maximum({acc}, {value})")
        elif reduction_type == "min":
            pre.writeline(f"{acc} = {typ}({highest})")
            upd.writeline(f"{acc} = _minimum({acc}, {value})")
        elif reduction_type == "any":
            pre.writeline(f"{acc} = False")
            upd.writeline(f"{acc} = {acc} or bool({value})")
        elif reduction_type in ("argmax", "argmin"):
            better = ">" if reduction_type == "argmax" else "<"
            start = "-np.inf" if reduction_type == "argmax" else "np.inf"
            pre.writeline(f"{acc}_v = np.float64({start})")
            pre.writeline(f"{acc} = np.int64(0)")
            pre.writeline(f"{acc}_first = True")
            upd.writeline(f"if {acc}_first or ({value} {better} {acc}_v and {acc}_v == {acc}_v) "
                          f"or ({value} != {value} and {acc}_v == {acc}_v):")
            with upd.indent():
                upd.writeline(f"{acc}_v = np.float64({value})")
                upd.writeline(f"{acc} = np.int64({self._linear_reduction_index()})")
                upd.writeline(f"{acc}_first = False")
        elif reduction_type == "welford_reduce":
            pre.writeline(f"{acc}_mean = np.float64(0)")
            pre.writeline(f"{acc}_m2 = np.float64(0)")
            pre.writeline(f"{acc}_w = np.float64(0)")
            upd.writeline(f"{acc}_w += 1.0")
            upd.writeline(f"{acc}_d = {value} - {acc}_mean")
            upd.writeline(f"{acc}_mean += {acc}_d / {acc}_w")
            upd.writeline(f"{acc}_m2 += {acc}_d * ({value} - {acc}_mean)")
            return tuple(self.cse.namedvar(f"{acc}_{s}", dtype=dtype) for s in ("mean", "m2", "w"))
        else:
            raise Unsupported(f"npu Inductor backend: reduction {reduction_type!r} is not generated")
        return self.cse.namedvar(acc, dtype=dtype)

    def store_reduction(self, name: str, index: sympy.Expr, value: CSEVariable) -> None:
        var = self.args.output(name)
        self.reduction_suffix.writeline(DeferredLine(name, f"{var}[{self.index_to_str(index)}] = {value}"))

    # -- the kernel ---------------------------------------------------------------------------
    def codegen_kernel(self) -> str:
        """The kernel's source (call with this kernel as ``V.kernel``, after the nodes ran)."""
        self.finish_nest()
        arg_defs, _, _, _ = self.args.python_argdefs()
        params = [a.name if hasattr(a, "name") else str(a) for a in arg_defs]
        code = IndentedBuffer()
        code.splice(PRELUDE)
        code.writeline("")
        code.writeline("")
        parallel = any(self._parallel(n[0], n[1]) for n in self.nests)
        code.writeline(f"@numba.njit(cache=True, parallel={parallel})")
        code.writeline(f"def kernel({', '.join(params)}):")
        with code.indent():
            for sizes, rsizes, itervars, rvars, prefix, body, suffix in self.nests:
                depth = 0
                par = self._parallel(sizes, rsizes)
                for i, (var, size) in enumerate(zip(itervars, sizes)):
                    loop = "numba.prange" if (i == 0 and par) else "range"
                    code.writeline(f"for {var} in {loop}({self.index_to_str(size)}):")
                    code.do_indent()
                    depth += 1
                if rsizes:
                    code.splice(prefix.getvalue())
                    for var, size in zip(rvars, rsizes):
                        code.writeline(f"for {var} in range({self.index_to_str(size)}):")
                        code.do_indent()
                text = "".join(part.getvalue() for part in body)
                code.splice(text if text.strip() else "pass")
                if rsizes:
                    for _ in rsizes:
                        code.do_unindent()
                    code.splice(suffix.getvalue())
                for _ in range(depth):
                    code.do_unindent()
        return code.getvalue()

    def _parallel(self, sizes: Sequence[Any], rsizes: Sequence[Any]) -> bool:
        """Split the outer loop over the host's cores when there is enough work."""
        if not sizes:
            return False
        static = _static_numel(sizes) * max(1, _static_numel(rsizes))
        dynamic = any(not isinstance(x, (int, sympy.Integer)) for x in sizes)
        return dynamic or static >= 32768


def sympy_product(items: Sequence[Any]) -> sympy.Expr:
    out: sympy.Expr = sympy.Integer(1)
    for it in items:
        out = out * it
    return out


def _static_numel(sizes: Sequence[Any]) -> int:
    n = 1
    for s in sizes:
        if not isinstance(s, (int, sympy.Integer)):
            return 1
        n *= int(s)
    return n
