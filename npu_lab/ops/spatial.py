"""Spatial operators: upsampling, reflection/replication padding, unfold/fold, grid sampling,
channel shuffle, pairwise distances and embedding bags (forward and backward).

Resampling and padding are *separable*: for each spatial dimension the operator
computes a table of source indices and weights for every output position (as
PyTorch's CPU kernels compute them, in their precision, so indices agree to the
last rounding), and one numba kernel applies the tables to the input viewed as
``(P, D, H, W)`` planes (see :mod:`npu_lab.kernels.spatial`). The backward
passes run the adjoint kernels with the same tables.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from ..device import fallback
from ..kernels import spatial as sk
from ..kernels.threads import sized
from .common import as_array, check_same_device, empty, launch, nbytes, resize_out
from .copy import device_copy
from .registry import register

_DTYPE_NAMES = {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
                torch.uint8: "Byte", torch.bool: "Bool", torch.float32: "Float", torch.float64: "Double",
                torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble", torch.uint16: "UInt16",
                torch.uint32: "UInt32", torch.uint64: "UInt64"}


def _not_implemented(kernel: str, dtype: torch.dtype) -> NotImplementedError:
    """PyTorch's error for a dtype a CPU kernel is not compiled for."""
    return NotImplementedError(f'"{kernel}" not implemented for \'{_DTYPE_NAMES.get(dtype, str(dtype))}\'')


def _with_out(fn, *outs: str):
    """An ``.out`` overload made from its functional kernel: results resized into and copied to ``out=``."""
    def out_variant(*args, **kwargs):
        targets = [kwargs.pop(name) for name in outs]
        results = fn(*args, **kwargs)
        results = results if isinstance(results, tuple) else (results,)
        for target, res in zip(targets, results):
            resize_out(target, res.shape)
            device_copy(target, res)
        return targets[0] if len(targets) == 1 else tuple(targets)

    out_variant.__name__ = f"{fn.__name__}_out"
    out_variant.__doc__ = f"``out=`` form of {fn.__name__}."
    return out_variant


def _planes(t: torch.Tensor, nd: int) -> np.ndarray:
    """The last ``nd`` dims of ``t`` as contiguous (P, D, H, W) planes (size-1 dims added in front)."""
    a = as_array(t.contiguous())
    lead = math.prod(t.shape[:-nd]) if t.dim() > nd else 1
    return a.reshape(lead, *(1,) * (3 - nd), *t.shape[t.dim() - nd:])


# --- upsampling: index/weight tables -------------------------------------------------------------------

def _opmath(dtype: torch.dtype) -> type:
    """The precision PyTorch computes interpolation indices and weights in (float32 unless float64)."""
    return np.float64 if dtype == torch.float64 else np.float32


def _scale_value(size: int, out: int, scale: float | None, ft: type):
    """compute_scales_value: 1/scale when a scale is given, else size/out (in ``ft``)."""
    if scale is not None and scale > 0:
        return ft(1.0 / scale)
    return ft(size) / ft(out)


def _area_scale(size: int, out: int, align_corners: bool, scale: float | None, ft: type):
    """area_pixel_compute_scale."""
    if align_corners:
        return ft(size - 1) / ft(out - 1) if out > 1 else ft(0)
    return _scale_value(size, out, scale, ft)


def _source(scale, n: int, align_corners: bool, cubic: bool, ft: type) -> np.ndarray:
    """area_pixel_compute_source_index for output indices 0..n-1 (``scale*(i+0.5)-0.5`` is computed in double)."""
    i = np.arange(n)
    if align_corners:
        return scale * i.astype(ft)
    src = (np.float64(scale) * (i + 0.5) - 0.5).astype(ft)
    return src if cubic else np.maximum(src, ft(0))


def _guard(real: np.ndarray, size: int, ft: type) -> tuple[np.ndarray, np.ndarray]:
    """guard_index_and_lambda: the floor index (at most size-1) and the fraction past it, clamped to [0, 1]."""
    idx = np.minimum(np.floor(real.astype(np.float32)).astype(np.int64), size - 1)
    lam = np.clip(real - idx.astype(ft), ft(0), ft(1)).astype(ft)
    return idx, lam


def _nearest_table(size: int, out: int, scale: float | None, exact: bool, dtype: torch.dtype) -> np.ndarray:
    """The forward source index of each output (HelperInterpNearest / HelperInterpNearestExact)."""
    ft = _opmath(dtype)
    s = _area_scale(size, out, False, scale, ft)
    if exact:
        real = _source(s, out, False, False, ft)
        idx = np.floor((real.astype(np.float64) + 0.5).astype(np.float32)).astype(np.int64)
    else:
        idx = np.floor((s * np.arange(out).astype(ft)).astype(np.float32)).astype(np.int64)
    return np.minimum(idx, size - 1)


def _nearest_table_backward(size: int, out: int, scale: float | None, exact: bool) -> np.ndarray:
    """The source index of each output as the CPU's backward computes it (nearest_idx / nearest_exact_idx)."""
    i = np.arange(out)
    s = _scale_value(size, out, scale, np.float32)
    if exact:
        idx = np.floor(((i + 0.5) * np.float64(s)).astype(np.float32)).astype(np.int64)
    elif out == size:
        return i.astype(np.int64)
    elif out == 2 * size:
        return i >> 1
    else:
        idx = np.floor(i.astype(np.float32) * s).astype(np.int64)
    return np.minimum(idx, size - 1)


def _linear_table(size: int, out: int, align_corners: bool, scale: float | None, dtype: torch.dtype):
    """Two taps (index, weight) per output: compute_source_index_and_lambda."""
    ft = _opmath(dtype)
    if out == size:
        i = np.arange(out, dtype=np.int64)
        return np.stack([i, i], 1), np.stack([np.ones(out, ft), np.zeros(out, ft)], 1)
    s = _area_scale(size, out, align_corners, scale, ft)
    i0, l1 = _guard(_source(s, out, align_corners, False, ft), size, ft)
    i1 = i0 + (i0 < size - 1)
    return np.stack([i0, i1], 1), np.stack([(ft(1) - l1).astype(ft), l1], 1)


def _cubic_conv1(x, a):
    return ((a + 2) * x - (a + 3)) * x * x + 1


def _cubic_conv2(x, a):
    return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a


def _cubic_table(size: int, out: int, align_corners: bool, scale: float | None, dtype: torch.dtype):
    """Four taps per output: Keys' cubic convolution (A = -0.75) at clamped indices."""
    ft = _opmath(dtype)
    s = _area_scale(size, out, align_corners, scale, ft)
    i0, t = _guard(_source(s, out, align_corners, True, ft), size, ft)
    a = ft(-0.75)
    one = ft(1)
    w = np.stack([_cubic_conv2((t + one).astype(ft), a), _cubic_conv1(t, a), _cubic_conv1((one - t).astype(ft), a),
                  _cubic_conv2((ft(2) - t).astype(ft), a)], 1).astype(ft)
    idx = np.clip(i0[:, None] - 1 + np.arange(4)[None, :], 0, size - 1)
    return idx, w


def _aa_filter(x: np.ndarray, cubic: bool, ft: type) -> np.ndarray:
    x = np.abs(x)
    if not cubic:
        return np.where(x < 1, ft(1) - x, ft(0)).astype(ft)
    a = ft(-0.5)
    return np.where(x < 1, _cubic_conv1(x, a), np.where(x < 2, _cubic_conv2(x, a), ft(0))).astype(ft)


def _aa_table(size: int, out: int, align_corners: bool, scale: float | None, dtype: torch.dtype, cubic: bool):
    """Anti-aliased taps (_compute_indices_min_size_weights_aa): a filter stretched by the downscale factor."""
    ft = _opmath(dtype)
    s = _area_scale(size, out, align_corners, scale, ft)
    interp = 4 if cubic else 2
    support = ft((interp * 0.5) * np.float64(s)) if s >= 1.0 else ft(interp * 0.5)
    taps = int(math.ceil(support)) * 2 + 1
    invscale = ft(1.0 / np.float64(s)) if s >= 1.0 else ft(1)
    center = (np.float64(s) * (np.arange(out) + 0.5)).astype(ft)
    xmin = np.maximum(((center - support).astype(np.float64) + 0.5).astype(np.int64), 0)
    xsize = np.clip(np.minimum(((center + support).astype(np.float64) + 0.5).astype(np.int64), size) - xmin, 0, taps)
    j = np.arange(taps)
    arg = (((j[None, :] + xmin[:, None]) - center[:, None]).astype(ft).astype(np.float64) + 0.5) * np.float64(invscale)
    w = np.where(j[None, :] < xsize[:, None], _aa_filter(arg.astype(ft), cubic, ft), ft(0)).astype(ft)
    total = np.zeros(out, dtype=ft)
    for k in range(taps):  # accumulated in order, in ft, as the CPU does
        total = (total + w[:, k]).astype(ft)
    w = np.where(total[:, None] != 0, w / np.where(total == 0, ft(1), total)[:, None], w).astype(ft)
    idx = np.minimum(xmin[:, None] + j[None, :], size - 1)
    return idx, w


# --- upsampling: operators -----------------------------------------------------------------------------

def _upsample_check(name: str, osize, isize, nd: int, forward_input: torch.Tensor | None = None) -> None:
    """upsample_{1,2,3}d_common_check and the forward's non-empty input check (the CPU's messages)."""
    if len(osize) != nd:
        raise RuntimeError(f"It is expected output_size equals to {nd}, but got size {len(osize)}")
    if len(isize) != nd + 2:
        raise RuntimeError(f"It is expected input_size equals to {nd + 2}, but got size {len(isize)}")
    ins, outs = [int(e) for e in isize[2:]], [int(e) for e in osize]
    if min(ins) <= 0 or min(outs) <= 0:
        if nd == 1:
            raise RuntimeError("Input and output sizes should be greater than 0, but got input (W: "
                               f"{ins[0]}) and output (W: {outs[0]})")
        labels = ("H", "W") if nd == 2 else ("D", "H", "W")
        fmt = ", ".join(f"{lab}: {v}" for lab, v in zip(labels, ins))
        fmt_o = ", ".join(f"{lab}: {v}" for lab, v in zip(labels, outs))
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input ({fmt}) output ({fmt_o})")
    if forward_input is not None and forward_input.numel() == 0 and math.prod(forward_input.shape[1:]) == 0:
        raise RuntimeError(f"Non-empty {nd + 2}D data tensor expected but got a tensor with sizes "
                           f"{list(forward_input.shape)}")


def _grad_check(grad: torch.Tensor, full: Sequence[int]) -> None:
    """check_dim_size on an upsampling's grad_output."""
    if grad.dim() != len(full):
        raise RuntimeError(f"Expected grad_output to be a tensor of dimension {len(full)} but got: dimension "
                           f"{grad.dim()}")
    for i, size in enumerate(full):
        if grad.shape[i] != size:
            raise RuntimeError(f"Expected grad_output to have the same shape as output; output.size({i}) = {size} "
                               f"but got grad_output.size({i}) = {grad.shape[i]}")


def _pad_tables(tables: list, nd: int, weighted: bool) -> list:
    """Tables for the (D, H, W) kernel: the missing leading dims get one tap at index 0 of weight 1."""
    missing = 3 - nd
    if weighted:
        ft = tables[0][1].dtype
        return [(np.zeros((1, 1), np.int64), np.ones((1, 1), ft))] * missing + list(tables)
    return [np.zeros(1, np.int64)] * missing + list(tables)


def _interpolate(self: torch.Tensor, osize, nd: int, tables: list, name: str) -> torch.Tensor:
    """Apply per-dimension (index, weight) tables (weighted) or index tables (nearest) to ``self``."""
    osize = tuple(int(e) for e in osize)
    out = empty((*self.shape[:2], *osize), self.dtype)
    weighted = isinstance(tables[0], tuple)
    taps = 1
    if out.numel():
        x = _planes(self, nd)
        o = as_array(out).reshape(x.shape[0], *(1,) * (3 - nd), *osize)
        full = _pad_tables(tables, nd, weighted)
        if weighted:
            taps = math.prod([t[0].shape[1] for t in full])
            args = [np.ascontiguousarray(a) for pair in full for a in pair]
            sized(sk.interp, out.numel() * taps)(x, *args, o)
        else:
            sized(sk.gather3, out.numel())(x, *full, o)
    launch(name, 2.0 * out.numel() * taps, nbytes(self), nbytes(out))
    return out


def _interpolate_backward(grad: torch.Tensor, isize, nd: int, tables: list, name: str) -> torch.Tensor:
    """The adjoint of :func:`_interpolate`: the gradient scattered back through the same tables."""
    isize = tuple(int(e) for e in isize)
    out = empty(isize, grad.dtype)
    weighted = isinstance(tables[0], tuple)
    if out.numel():
        g = _planes(grad, nd)
        o = as_array(out).reshape(g.shape[0], *(1,) * (3 - nd), *isize[2:])
        full = _pad_tables(tables, nd, weighted)
        if weighted:
            args = [np.ascontiguousarray(a) for pair in full for a in pair]
            sized(sk.interp_backward, grad.numel() * 8)(g, *args, o)
        else:
            sized(sk.scatter3, grad.numel())(g, *full, o)
    launch(name, 2.0 * grad.numel(), nbytes(grad), nbytes(out))
    return out


def _scales(nd: int, args: tuple) -> list:
    """The trailing ``scales_*`` arguments (None when absent)."""
    return [args[i] if i < len(args) else None for i in range(nd)]


def _float_only(self: torch.Tensor, kernel: str, allow_byte: bool = False) -> None:
    if not self.is_floating_point() and not (allow_byte and self.dtype == torch.uint8):
        raise _not_implemented(kernel, self.dtype)


def _nearest(nd: int, exact: bool):
    base = f"_upsample_nearest_exact{nd}d" if exact else f"upsample_nearest{nd}d"
    kernel = "compute_indices_weights_nearest" if nd != 2 else "upsample_nearest2d_channels_last"

    def forward(self, output_size, *scales):
        """Nearest-neighbour upsampling: each output copies the input element its position maps to."""
        check_same_device(f"aten::{base}", self)
        _upsample_check(base, output_size, self.shape, nd, self)
        _float_only(self, kernel, allow_byte=True)
        sc = _scales(nd, scales)
        size = self.shape[2:]
        tables = [_nearest_table(int(size[i]), int(output_size[i]), sc[i], exact, self.dtype) for i in range(nd)]
        return _interpolate(self, output_size, nd, tables, base)

    def backward(grad_output, output_size, input_size, *scales):
        """Gradient of nearest upsampling: each output's gradient added to the input element it copied."""
        check_same_device(f"aten::{base}_backward", grad_output)
        _upsample_check(base, output_size, input_size, nd)
        _grad_check(grad_output, (*input_size[:2], *output_size))
        _float_only(grad_output, f"{base}_backward")
        sc = _scales(nd, scales)
        tables = [_nearest_table_backward(int(input_size[2 + i]), int(output_size[i]), sc[i], exact)
                  for i in range(nd)]
        return _interpolate_backward(grad_output, input_size, nd, tables, f"{base}_backward")

    forward.__name__, backward.__name__ = base.lstrip("_"), f"{base.lstrip('_')}_backward"
    register(base)(forward)
    register(f"{base}_backward")(backward)
    register(f"{base}.out")(_with_out(forward, "out"))
    register(f"{base}_backward.grad_input")(_with_out(backward, "grad_input"))


for _nd in (1, 2, 3):
    _nearest(_nd, False)
    _nearest(_nd, True)


def _weighted(base: str, nd: int, table, kernel: str, doc: str):
    """Register a weighted upsampling (linear, bilinear, trilinear, bicubic, anti-aliased) and its backward."""

    def forward(self, output_size, align_corners, *scales):
        check_same_device(f"aten::{base}", self)
        _upsample_check(base, output_size, self.shape, nd, self)
        if self.dtype == torch.uint8 and kernel != "compute_indices_weights_linear":
            return fallback.unsupported(getattr(torch.ops.aten, base).default,
                                        (self, output_size, align_corners, *scales), {},
                                        "uint8 interpolation (fixed-point weights)")
        _float_only(self, kernel)
        sc = _scales(nd, scales)
        size = self.shape[2:]
        tables = [table(int(size[i]), int(output_size[i]), bool(align_corners), sc[i], self.dtype)
                  for i in range(nd)]
        return _interpolate(self, output_size, nd, tables, base)

    def backward(grad_output, output_size, input_size, align_corners, *scales):
        check_same_device(f"aten::{base}_backward", grad_output)
        _upsample_check(base, output_size, input_size, nd)
        _grad_check(grad_output, (*input_size[:2], *output_size))
        _float_only(grad_output, f"{base}_backward")
        sc = _scales(nd, scales)
        tables = [table(int(input_size[2 + i]), int(output_size[i]), bool(align_corners), sc[i], grad_output.dtype)
                  for i in range(nd)]
        return _interpolate_backward(grad_output, input_size, nd, tables, f"{base}_backward")

    forward.__name__, backward.__name__ = base.lstrip("_"), f"{base.lstrip('_')}_backward"
    forward.__doc__ = doc
    backward.__doc__ = f"Gradient of {base}: the output gradient spread back with the same weights."
    register(base)(forward)
    register(f"{base}_backward")(backward)
    register(f"{base}.out")(_with_out(forward, "out"))
    register(f"{base}_backward.grad_input")(_with_out(backward, "grad_input"))


_weighted("upsample_linear1d", 1, _linear_table, "compute_indices_weights_linear",
          "Linear 1-D upsampling: each output interpolates its two nearest inputs.")
_weighted("upsample_bilinear2d", 2, _linear_table, "upsample_bilinear2d_channels_last",
          "Bilinear upsampling: each output interpolates its 2x2 nearest inputs.")
_weighted("upsample_trilinear3d", 3, _linear_table, "compute_indices_weights_linear",
          "Trilinear upsampling: each output interpolates its 2x2x2 nearest inputs.")
_weighted("upsample_bicubic2d", 2, _cubic_table, "compute_indices_weights_cubic",
          "Bicubic upsampling (A = -0.75): each output combines its 4x4 nearest inputs (indices clamped).")
_weighted("_upsample_bilinear2d_aa", 2, lambda *a: _aa_table(*a, cubic=False), "compute_index_ranges_weights",
          "Anti-aliased bilinear resampling: a triangle filter widened by the downscale factor.")
_weighted("_upsample_bicubic2d_aa", 2, lambda *a: _aa_table(*a, cubic=True), "compute_index_ranges_weights",
          "Anti-aliased bicubic resampling: a cubic filter (A = -0.5) widened by the downscale factor.")


# --- reflection and replication padding ----------------------------------------------------------------

def _pad_index(size: int, pad_l: int, pad_r: int, reflect: bool) -> np.ndarray:
    """The source index of each output position along one dimension (the CPU's formulas, negative pads too)."""
    out = size + pad_l + pad_r
    j = np.arange(out)
    i_start, o_start = max(0, -pad_l), max(0, pad_l)
    if reflect:
        ip = np.where(j < pad_l, pad_l * 2 - j, np.where(j < size + pad_l, j, (size + pad_l - 1) * 2 - j))
    else:
        ip = np.where(j < pad_l, pad_l, np.where(j < size + pad_l, j, size + pad_l - 1))
    ip = ip - o_start + i_start
    if out and (ip.min() < 0 or ip.max() >= size):  # cannot happen after the checks: never read outside
        raise RuntimeError(f"padding {pad_l, pad_r} of a dimension of size {size} reads outside the input")
    return ip.astype(np.int64)


def _pad_geometry(self: torch.Tensor, padding, nd: int, reflect: bool, name: str):
    """Checks (the CPU's messages, in its order) and the output shape of a reflection/replication pad."""
    pad = [int(p) for p in padding]
    if len(pad) != 2 * nd:
        raise RuntimeError(f"padding size is expected to be {2 * nd}" + (f", but got: {len(pad)}" if reflect else ""))
    dims_ok = self.dim() in (nd + 1, nd + 2) and all(s != 0 for s in self.shape[self.dim() - nd - 1:])
    if not dims_ok:
        raise RuntimeError(f"Expected {nd + 1}D or {nd + 2}D (batch mode) tensor with possibly 0 batch size and other "
                           f"non-zero dimensions for input, but got: {list(self.shape)}")
    size = [int(s) for s in self.shape[-nd:]]  # (D,) H, W
    pairs = [(pad[2 * (nd - 1 - i)], pad[2 * (nd - 1 - i) + 1]) for i in range(nd)]  # per dim, in size order
    if reflect:
        for k in range(nd):  # width first (argument #4), then height (#6), then depth (#8)
            i = nd - 1 - k
            lo, hi = pairs[i]
            if not (lo < size[i] and hi < size[i]):
                raise RuntimeError(f"Argument #{4 + 2 * k}: Padding size should be less than the corresponding input "
                                   f"dimension, but got: padding ({lo}, {hi}) at dimension {self.dim() - nd + i} of "
                                   f"input {list(self.shape)}")
    out = [size[i] + pairs[i][0] + pairs[i][1] for i in range(nd)]
    if max(out) < 1:
        if nd == 1:
            raise RuntimeError(f"input (W: {size[0]}) is too small. Calculated output W: {out[0]}")
        if nd == 2:
            sep = "" if reflect else " "
            raise RuntimeError(f"input (H: {size[0]}, W: {size[1]}{sep}) is too small. Calculated output H: {out[0]} "
                               f"W: {out[1]}")
        raise RuntimeError(f"input (D: {size[0]} H: {size[1]}, W: {size[2]}) is too small. Calculated output D: "
                           f"{out[0]} H: {out[1]} W: {out[2]}")
    shape = [*self.shape[:-nd], *out]
    if min(out) < 0:
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(out)}: {shape}")
    return size, pairs, shape


def _padder(nd: int, reflect: bool):
    base = f"{'reflection' if reflect else 'replication'}_pad{nd}d"

    def forward(self, padding):
        """Pad the last dims by reflecting the input at its edges (reflection) or repeating the edge (replication)."""
        check_same_device(f"aten::{base}", self)
        size, pairs, shape = _pad_geometry(self, padding, nd, reflect, base)
        if self.dtype == torch.bool:
            raise _not_implemented(base, self.dtype)
        tables = [_pad_index(size[i], *pairs[i], reflect) for i in range(nd)]
        out = empty(shape, self.dtype)
        if out.numel():
            x = _planes(self, nd)
            sized(sk.gather3, out.numel())(x, *_pad_tables(tables, nd, False),
                                           as_array(out).reshape(x.shape[0], *(1,) * (3 - nd), *shape[-nd:]))
        launch(base, 0, nbytes(self), nbytes(out))
        return out

    def backward(grad_output, self, padding):
        """Gradient of the pad: each output's gradient added to the input element it copied."""
        check_same_device(f"aten::{base}_backward", grad_output, self)
        size, pairs, shape = _pad_geometry(self, padding, nd, reflect, base)
        for i, label in reversed(list(zip(range(nd), ("width", "height", "depth")[:nd][::-1]))):  # width first
            got = grad_output.shape[grad_output.dim() - nd + i] if grad_output.dim() >= nd else -1
            if got != shape[len(shape) - nd + i]:
                raise RuntimeError(f"gradOutput {label} unexpected. Expected: {shape[len(shape) - nd + i]}, Got: {got}")
        if not (grad_output.is_floating_point() or grad_output.is_complex()):
            raise _not_implemented(f"{base}_backward", grad_output.dtype)
        tables = [_pad_index(size[i], *pairs[i], reflect) for i in range(nd)]
        out = empty(self.shape, grad_output.dtype)
        if out.numel() and grad_output.numel():
            g = _planes(grad_output, nd)
            sized(sk.scatter3, grad_output.numel())(g, *_pad_tables(tables, nd, False),
                                                    as_array(out).reshape(g.shape[0], *(1,) * (3 - nd), *size))
        elif out.numel():
            as_array(out)[...] = 0
        launch(f"{base}_backward", grad_output.numel(), nbytes(grad_output), nbytes(out))
        return out

    forward.__name__, backward.__name__ = base, f"{base}_backward"
    register(base)(forward)
    register(f"{base}_backward")(backward)
    register(f"{base}.out")(_with_out(forward, "out"))
    register(f"{base}_backward.grad_input")(_with_out(backward, "grad_input"))


for _nd in (1, 2, 3):
    _padder(_nd, True)
    _padder(_nd, False)


# --- im2col / col2im (F.unfold / F.fold) ---------------------------------------------------------------

def _four(kernel_size, dilation, padding, stride, what: str = "kernel_size"):
    for name, v in (("kernel_size", kernel_size), ("dilation", dilation), ("padding", padding), ("stride", stride)):
        if len(v) != 2:
            raise RuntimeError(f"It is expected {name} equals to 2, but got size {len(v)}")
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = (tuple(int(e) for e in v)
                                              for v in (kernel_size, dilation, padding, stride))
    if kh <= 0 or kw <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kernel_height: {kh} kernel_width: {kw}")
    return kh, kw, dh, dw, ph, pw, sh, sw


@register("im2col")
def im2col(self, kernel_size, dilation, padding, stride):
    """F.unfold: the (C*kh*kw, L) matrix of every sliding block of each image (zeros outside the image)."""
    check_same_device("aten::im2col", self)
    kh, kw, dh, dw, ph, pw, sh, sw = _four(kernel_size, dilation, padding, stride)
    if dh <= 0 or dw <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilation_height: {dh} dilation_width: {dw}")
    if ph < 0 or pw < 0:
        raise RuntimeError(f"padding should be non-negative, but got pad_height: {ph} pad_width: {pw}")
    if sh <= 0 or sw <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got stride_height: {sh} stride_width: {sw}")
    nd = self.dim()
    for i in (1, 2):
        if i >= nd:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {i})")
    valid = self.shape[1] != 0 and self.shape[2] != 0 and (nd != 3 or self.shape[0] != 0) and (
        nd != 4 or self.shape[3] != 0)
    if nd not in (3, 4) or not valid:
        raise RuntimeError("Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero "
                           f"dimensions for input, but got: {list(self.shape)}")
    h, w = int(self.shape[-2]), int(self.shape[-1])
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    if oh < 1 or ow < 1:
        raise RuntimeError(f"Given input with spatial size ({h}, {w}), kernel_size=({kh}, {kw}), "
                           f"dilation=({dh}, {dw}), padding=({ph}, {pw}), calculated shape of the array of sliding "
                           f"blocks as ({oh}, {ow}), but its components must be at least one.")
    if not (self.is_floating_point() or self.dtype == torch.bool or self.is_complex()):
        raise _not_implemented("im2col_out_cpu", self.dtype)
    c = int(self.shape[-3])
    out = empty((*self.shape[:-3], c * kh * kw, oh * ow), self.dtype)
    if out.numel():
        x = as_array(self.contiguous()).reshape(-1, c, h, w)
        sized(sk.unfold, out.numel())(x, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow,
                                      as_array(out).reshape(x.shape[0], c * kh * kw, oh * ow))
    launch("im2col", 0, nbytes(self), nbytes(out))
    return out


@register("col2im")
def col2im(self, output_size, kernel_size, dilation, padding, stride):
    """F.fold: the sum of the (C*kh*kw, L) blocks put back at their positions in (C, H, W) images."""
    check_same_device("aten::col2im", self)
    if len(output_size) != 2:
        raise RuntimeError(f"It is expected output_size equals to 2, but got size {len(output_size)}")
    kh, kw, dh, dw, ph, pw, sh, sw = _four(kernel_size, dilation, padding, stride)
    if sh <= 0 or sw <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got stride_height: {sh} stride_width: {sw}")
    if dh <= 0 or dw <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilation_height: {dh} dilation_width: {dw}")
    if ph < 0 or pw < 0:
        raise RuntimeError(f"padding should be non-negative, but got pad_height: {ph} pad_width: {pw}")
    nd = self.dim()
    if not ((nd == 2 and self.shape[0] != 0 and self.shape[1] != 0)
            or (nd == 3 and self.shape[1] != 0 and self.shape[2] != 0)):
        raise RuntimeError("Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero "
                           f"dimensions for input, but got: {list(self.shape)}")
    planes, length = int(self.shape[-2]), int(self.shape[-1])
    if planes % (kh * kw):
        raise RuntimeError("Expected size of input's dimension 1 to be divisible by the product of kernel_size, but "
                           f"got input.size(1)={planes} and kernel_size=({kh}, {kw}).")
    oh_img, ow_img = int(output_size[0]), int(output_size[1])
    bh = (oh_img + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    bw = (ow_img + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    geometry = (f"Given output_size=({oh_img}, {ow_img}), kernel_size=({kh}, {kw}), dilation=({dh}, {dw}), "
                f"padding=({ph}, {pw}), stride=({sh}, {sw}), ")
    if length != bh * bw:
        raise RuntimeError(f"{geometry}expected size of input's dimension 2 to match the calculated number of sliding "
                           f"blocks {bh} * {bw} = {bh * bw}, but got input.size(2)={length}.")
    if bh < 1 or bw < 1:
        raise RuntimeError(f"{geometry}calculated shape of the array of sliding blocks as ({bh}, {bw}), which is too "
                           "small (non-positive)")
    if oh_img < 1 or ow_img < 1:
        raise RuntimeError(f"Expected output spatial size to be positive, but got: output_size=({oh_img}, {ow_img}).")
    if not (self.is_floating_point() or self.is_complex()):
        raise _not_implemented("col2im_out_cpu", self.dtype)
    c = planes // (kh * kw)
    out = empty((*self.shape[:-2], c, oh_img, ow_img), self.dtype)
    if out.numel():
        cols = as_array(self.contiguous()).reshape(-1, planes, length)
        sized(sk.fold, self.numel())(cols, kh, kw, sh, sw, ph, pw, dh, dw, bh, bw,
                                     as_array(out).reshape(cols.shape[0], c, oh_img, ow_img))
    launch("col2im", self.numel(), nbytes(self), nbytes(out))
    return out


register("im2col.out")(_with_out(im2col, "out"))
register("col2im.out")(_with_out(col2im, "out"))


# --- grid sampling -----------------------------------------------------------------------------------

def _grid_check(input: torch.Tensor, grid: torch.Tensor, nd: int, mode: int) -> None:
    """check_grid_sampler_common / _2d / _3d (the CPU's messages)."""
    if input.layout != torch.strided or grid.layout != torch.strided:
        raise RuntimeError("grid_sampler(): expected input and grid to have torch.strided layout")
    if input.dtype != grid.dtype:
        raise RuntimeError(f"grid_sampler(): expected input and grid to have same dtype, but input has "
                           f"{input.dtype} and grid has {grid.dtype}")
    if input.shape[0] != grid.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, but got input with "
                           f"sizes {list(input.shape)} and grid with sizes {list(grid.shape)}")
    if grid.shape[-1] != input.dim() - 2:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {input.dim() - 2} in last dimension, but got "
                           f"grid with sizes {list(grid.shape)}")
    for i in range(2, input.dim()):
        if input.shape[i] <= 0:
            raise RuntimeError(f"grid_sampler(): expected input to have non-empty spatial dimensions, but input has "
                               f"sizes {list(input.shape)} with dimension {i} being empty")
    if input.dim() != nd + 2 or grid.dim() != nd + 2:
        raise RuntimeError(f"grid_sampler(): expected {nd + 2}D input and grid with same number of dimensions, but "
                           f"got input with sizes {list(input.shape)} and grid with sizes {list(grid.shape)}")
    if nd == 3 and mode == 2:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    if not input.is_floating_point():
        raise _not_implemented(f"grid_sampler_{nd}d_cpu", input.dtype)


def _grid_sampler(nd: int):
    base = f"grid_sampler_{nd}d"
    fwd_kernel = sk.grid_sample_2d if nd == 2 else sk.grid_sample_3d
    bwd_kernel = sk.grid_sample_2d_backward if nd == 2 else sk.grid_sample_3d_backward

    def forward(input, grid, interpolation_mode, padding_mode, align_corners):
        """Sample ``input`` at the normalised positions of ``grid`` (bilinear/nearest/bicubic, padding modes)."""
        check_same_device(f"aten::{base}", input, grid)
        _grid_check(input, grid, nd, interpolation_mode)
        out = empty((*input.shape[:2], *grid.shape[1:-1]), input.dtype)
        if out.numel():
            x = as_array(input.contiguous())
            sized(fwd_kernel, out.numel() * 4)(x, as_array(grid.contiguous()), int(interpolation_mode),
                                              int(padding_mode), bool(align_corners), x.dtype.type(0), as_array(out))
        launch(base, 8.0 * out.numel(), nbytes(input) + nbytes(grid), nbytes(out))
        return out

    def backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask):
        """Gradients of the grid sampler for the input (scattered) and the grid (the interpolant's slope)."""
        check_same_device(f"aten::{base}_backward", grad_output, input, grid)
        _grid_check(input, grid, nd, interpolation_mode)
        want_input = bool(output_mask[0])
        gx = empty(input.shape if want_input else (0,) * input.dim(), input.dtype)
        gg = empty(grid.shape, grid.dtype)
        if grid.numel() or gx.numel():
            gxa = as_array(gx)
            if want_input and grid.numel() == 0:
                gxa[...] = 0
            else:
                x = as_array(input.contiguous())
                sized(bwd_kernel, grad_output.numel() * 8)(
                    as_array(grad_output.contiguous()), x, as_array(grid.contiguous()), int(interpolation_mode),
                    int(padding_mode), bool(align_corners), x.dtype.type(0), want_input, gxa, as_array(gg))
        launch(f"{base}_backward", 16.0 * grad_output.numel(), nbytes(grad_output) + nbytes(input) + nbytes(grid),
               nbytes(gx) + nbytes(gg))
        return (gx if want_input else None), (gg if output_mask[1] else None)

    forward.__name__, backward.__name__ = base, f"{base}_backward"
    register(base)(forward)
    register(f"{base}_backward")(backward)


_grid_sampler(2)
_grid_sampler(3)


# --- channel shuffle -----------------------------------------------------------------------------------

@register("channel_shuffle")
def channel_shuffle(self, groups):
    """Channels (g, c/g) transposed to (c/g, g): ShuffleNet's channel shuffle (a device copy)."""
    check_same_device("aten::channel_shuffle", self)
    groups = int(groups)
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of groups:{groups}")
    if self.dim() <= 2:
        raise RuntimeError(f"channel_shuffle expects input to have at least 3 dimensions, but got input with sizes "
                           f"{list(self.shape)}")
    c = int(self.shape[1])
    if c % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups.")
    n = int(self.shape[0])
    rest = tuple(int(e) for e in self.shape[2:])
    out = empty(self.shape, self.dtype)
    if out.numel():
        view = self.reshape(n, groups, c // groups, *rest).transpose(1, 2)
        device_copy(out.view(n, c // groups, groups, *rest), view)
    return out


# --- pairwise distances --------------------------------------------------------------------------------

def _p_value(p: float) -> float:
    return math.inf if p == float("inf") else float(p)


@register("_pdist_forward")
def pdist_forward(self, p=2.0):
    """The p-norm distance of every pair of rows i < j of an (N, M) matrix, in row-major order."""
    check_same_device("aten::_pdist_forward", self)
    if not self.is_contiguous():
        raise RuntimeError("_pdist_forward requires contiguous input")
    if self.dim() != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {self.dim()}D")
    if not self.is_floating_point():
        raise RuntimeError("pdist only supports floating-point dtypes")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    n = int(self.shape[0])
    out = empty((n * (n - 1) // 2 if n > 1 else 0,), self.dtype)
    if out.numel():
        if self.shape[1] == 0:
            as_array(out)[...] = 0
        else:
            sized(sk.pdist, out.numel() * self.shape[1])(as_array(self), _p_value(p), as_array(out))
    launch("pdist", 3.0 * out.numel() * self.shape[1], nbytes(self), nbytes(out))
    return out


@register("_pdist_backward")
def pdist_backward(grad, self, p, pdist):
    """Gradient of :func:`pdist_forward` for the rows."""
    check_same_device("aten::_pdist_backward", grad, self, pdist)
    if not self.is_contiguous():
        raise RuntimeError("_pdist_backward requires self to be contiguous")
    if not pdist.is_contiguous():
        raise RuntimeError("_pdist_backward requires pdist to be contiguous")
    out = empty(self.shape, self.dtype)
    if out.numel():
        if self.shape[0] <= 1 or p == 0:
            as_array(out)[...] = 0
        else:
            sized(sk.pdist_backward, grad.numel() * self.shape[1])(
                as_array(grad.contiguous()), as_array(self), _p_value(p), as_array(pdist), as_array(out))
    launch("pdist_backward", 4.0 * grad.numel() * self.shape[1], nbytes(grad) + nbytes(self), nbytes(out))
    return out


def _cdist_batches(x1: torch.Tensor, x2: torch.Tensor):
    """x1 and x2 with their batch dims broadcast, as contiguous (B, R, M) arrays, plus the batch shape."""
    batch = torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    e1 = x1.expand(*batch, *x1.shape[-2:])
    e2 = x2.expand(*batch, *x2.shape[-2:])
    b = math.prod(batch) if batch else 1
    a1 = as_array(e1.contiguous()).reshape(b, *x1.shape[-2:])
    a2 = as_array(e2.contiguous()).reshape(b, *x2.shape[-2:])
    return a1, a2, tuple(batch)


@register("_cdist_forward")
def cdist_forward(x1, x2, p, compute_mode):
    """The p-norm distance of every row of x1 to every row of x2 (batch dims broadcast)."""
    check_same_device("aten::_cdist_forward", x1, x2)
    if x1.dim() < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.dim()}D")
    if x2.dim() < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X2 got: {x2.dim()}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}")
    for name, t in (("X1", x1), ("X2", x2)):
        if not t.is_floating_point():
            raise RuntimeError(f"cdist only supports floating-point dtypes, {name} got: "
                               f"{_DTYPE_NAMES.get(t.dtype, str(t.dtype))}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    a1, a2, batch = _cdist_batches(x1, x2)
    r1, r2 = int(x1.shape[-2]), int(x2.shape[-2])
    out = empty((*batch, r1, r2), x1.dtype)
    if out.numel():
        if x1.shape[-1] == 0:
            as_array(out)[...] = 0
        else:
            sized(sk.cdist, out.numel() * x1.shape[-1])(a1, a2, _p_value(p),
                                                        as_array(out).reshape(a1.shape[0], r1, r2))
    launch("cdist", 3.0 * out.numel() * x1.shape[-1], nbytes(x1) + nbytes(x2), nbytes(out))
    return out


@register("_cdist_backward")
def cdist_backward(grad, x1, x2, p, cdist):
    """Gradient of :func:`cdist_forward` for x1 (at the broadcast batch shape; autograd reduces it)."""
    check_same_device("aten::_cdist_backward", grad, x1, x2, cdist)
    a1, a2, batch = _cdist_batches(x1, x2)
    r1, r2, m = int(x1.shape[-2]), int(x2.shape[-2]), int(x1.shape[-1])
    out = empty((*batch, r1, m), x1.dtype)
    if out.numel():
        if r2 == 0 or p == 0:
            as_array(out)[...] = 0
        else:
            g = as_array(grad.contiguous()).reshape(a1.shape[0], r1, r2)
            d = as_array(cdist.contiguous()).reshape(a1.shape[0], r1, r2)
            sized(sk.cdist_backward, g.size * m)(g, a1, a2, _p_value(p), d,
                                                 as_array(out).reshape(a1.shape[0], r1, m))
    launch("cdist_backward", 4.0 * grad.numel() * m, nbytes(grad) + nbytes(x1) + nbytes(x2), nbytes(out))
    return out


# --- embedding bags ------------------------------------------------------------------------------------

def _bag_bounds(offsets: np.ndarray, n_indices: int, include_last_offset: bool) -> tuple[np.ndarray, np.ndarray]:
    """[start, end) of each bag in the index list."""
    if include_last_offset:
        starts = offsets[:-1]
        ends = offsets[1:]
    else:
        starts = offsets
        ends = np.append(offsets[1:], n_indices)
    return np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(np.maximum(ends, starts), np.int64)


def _offset2bag(starts: np.ndarray, ends: np.ndarray, n_indices: int) -> np.ndarray:
    """The bag each index belongs to."""
    bag = np.zeros(n_indices, dtype=np.int64)
    for b in range(starts.shape[0]):
        bag[starts[b]:ends[b]] = b
    return bag


def _embedding_bag_impl(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                        include_last_offset, padding_idx):
    check_same_device("aten::_embedding_bag", weight, indices, offsets, per_sample_weights)
    if indices.dim() != 1:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {indices.dim()}")
    if indices.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {indices.dtype} instead (while checking arguments for embedding_bag)")
    if offsets.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(f"Expected tensor for argument #1 'offsets' to have one of the following scalar types: "
                           f"Long, Int; but got {offsets.dtype} instead (while checking arguments for embedding_bag)")
    if per_sample_weights is not None and mode != 0:
        raise NotImplementedError("embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                  f"supported for mode='sum' (got mode='{('sum', 'mean', 'max')[mode]}'). "
                                  "Please open a feature request on GitHub.")
    if not weight.is_floating_point():
        raise _not_implemented("embedding_bag_cpu_impl", weight.dtype)
    idx = as_array(indices.contiguous()).astype(np.int64)
    off = as_array(offsets.contiguous()).astype(np.int64)
    n = idx.shape[0]
    num_weights = int(weight.shape[0])
    bad = np.nonzero((idx < 0) | (idx >= num_weights))[0]
    if bad.size:
        raise IndexError(f"index {idx[bad[0]]} is out of bounds for dimension 0 with size {num_weights}")
    if off.size and off[0] != 0:
        raise RuntimeError("offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
                           f"position 0. However, got {off[0]}")
    if off.size and off[-1] > n:
        raise RuntimeError(f"offsets[-1] can not be greater than input's length {n}, but got {off[-1]}")
    if include_last_offset and off.size == 0:
        raise RuntimeError("include_last_offset: number of offset should be at least 1")
    starts, ends = _bag_bounds(off, n, include_last_offset)
    bags = starts.shape[0]
    dim = int(weight.shape[1])
    out = empty((bags, dim), weight.dtype)
    bag_size_np = np.zeros(bags, dtype=np.int64)
    max_np = np.zeros((bags, dim), dtype=np.int64)
    has_psw = per_sample_weights is not None
    psw = as_array(per_sample_weights.contiguous()) if has_psw else np.zeros(1, dtype=as_array(out).dtype)
    if bags:
        sized(sk.embedding_bag, n * dim)(as_array(weight.contiguous()), idx, starts, ends, int(mode), psw, has_psw,
                                         int(padding_idx), as_array(out), bag_size_np, max_np)
    # the auxiliary outputs as the CPU returns them (the backward only needs them to be consistent)
    summed = mode == 0
    offset2bag_np = (np.zeros(0, np.int64) if summed and padding_idx < 0
                     else _offset2bag(starts, ends, n))
    sizes = np.zeros(bags, np.int64) if summed else bag_size_np
    maxes = max_np if mode == 2 else sizes.copy()
    results = [out]
    for arr in (offset2bag_np, sizes, maxes):
        t = empty(arr.shape, torch.int64)
        as_array(t)[...] = arr
        results.append(t)
    launch("embedding_bag", n * dim, nbytes(indices) + n * dim * weight.element_size(), nbytes(out))
    return tuple(results)


@register("_embedding_bag")
def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """Sum, mean or max of each bag of embedding rows (bags start at ``offsets``); plus the CPU's bookkeeping."""
    return _embedding_bag_impl(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                               include_last_offset, padding_idx)


@register("_embedding_bag_forward_only")
def embedding_bag_forward_only(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                               per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """:func:`embedding_bag` when no gradient is needed."""
    return _embedding_bag_impl(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                               include_last_offset, padding_idx)


def _full_offset2bag(indices: torch.Tensor, offsets: torch.Tensor, offset2bag: torch.Tensor) -> np.ndarray:
    """offset2bag, rebuilt from the offsets when the forward returned it empty (sum mode)."""
    n = int(indices.numel())
    if offset2bag.numel() == n:
        return as_array(offset2bag.contiguous()).astype(np.int64)
    off = as_array(offsets.contiguous()).astype(np.int64)
    include_last = False
    starts, ends = _bag_bounds(off, n, include_last)
    return _offset2bag(starts, ends, n)


@register("_embedding_bag_dense_backward")
def embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                                 scale_grad_by_freq, mode, per_sample_weights, padding_idx=-1):
    """Dense gradient of :func:`embedding_bag` for the weight."""
    check_same_device("aten::_embedding_bag_dense_backward", grad, indices, offset2bag, bag_size)
    idx = as_array(indices.contiguous()).astype(np.int64)
    bag_of = as_array(offset2bag.contiguous()).astype(np.int64)
    out = empty((int(num_weights), int(grad.shape[1])), grad.dtype)
    o = as_array(out)
    o[...] = 0
    counts = np.bincount(idx, minlength=int(num_weights)).astype(np.float64) if idx.size else np.zeros(
        int(num_weights))
    has_psw = per_sample_weights is not None
    psw = as_array(per_sample_weights.contiguous()) if has_psw else np.zeros(1, dtype=o.dtype)
    maxes = as_array(maximum_indices.contiguous()).astype(np.int64)
    if maxes.ndim != 2:  # (bags,) outside max mode: the kernel takes one 2-D type
        maxes = maxes.reshape(-1, 1)
    sk.embedding_bag_backward(as_array(grad.contiguous()), idx, bag_of, as_array(bag_size.contiguous()).astype(
        np.int64), maxes, int(mode), psw, has_psw, int(padding_idx), bool(scale_grad_by_freq), counts, o)
    launch("embedding_bag_backward", grad.numel(), nbytes(grad) + nbytes(indices), nbytes(out))
    return out


@register("_embedding_bag_backward")
def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                           scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx=-1):
    """Gradient of :func:`embedding_bag` for the weight (dense; sparse gradients defer)."""
    if sparse:
        return fallback.unsupported(torch.ops.aten._embedding_bag_backward.default,
                                    (grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                                     scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx), {},
                                    "sparse embedding_bag gradients")
    bag_of = _full_offset2bag(indices, offsets, offset2bag)
    t = empty(bag_of.shape, torch.int64)
    as_array(t)[...] = bag_of
    return embedding_bag_dense_backward(grad, indices, t, bag_size, maximum_indices, num_weights, scale_grad_by_freq,
                                        mode, per_sample_weights, padding_idx)


@register("_embedding_bag_per_sample_weights_backward")
def embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1):
    """Gradient of :func:`embedding_bag` (sum mode) for the per-sample weights."""
    check_same_device("aten::_embedding_bag_per_sample_weights_backward", grad, weight, indices, offsets)
    if mode != 0:
        raise RuntimeError("embedding_bag_backward: per_sample_weights only supported for mode='sum'")
    bag_of = _full_offset2bag(indices, offsets, offset2bag)
    out = empty((int(indices.numel()),), grad.dtype)
    if out.numel():
        sized(sk.embedding_bag_psw_backward, out.numel() * grad.shape[1])(
            as_array(grad.contiguous()), as_array(weight.contiguous()), as_array(indices.contiguous()).astype(
                np.int64), bag_of, int(padding_idx), as_array(out))
    launch("embedding_bag_per_sample_weights_backward", out.numel() * grad.shape[1], nbytes(grad), nbytes(out))
    return out
