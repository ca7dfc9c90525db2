"""Convolution (via PyTorch's ``convolution_overrideable`` hook) and pooling.

ATen routes ``F.conv1d``/``F.conv2d`` on an out-of-tree device to
``aten::convolution_overrideable`` and its backward to
``aten::convolution_backward_overrideable``: the two slots a vendor fills.
The NPU computes every convolution as patches and products: ``unfold`` copies
the input values each kernel tap sees into one matrix for the whole batch (a
row per channel and tap, a column per sample and output position), and one
matrix product per group applies the weights. The backward reuses the picture:
the input's gradient is the weights' transpose times the output's gradient,
folded back (``fold``, the adjoint of unfold); the weight's is the output's
gradient times the patches' transpose.
See :mod:`npu_lab.kernels.conv`. The simulated clock charges what an im2col
convolution moves on the chip (:func:`conv_traffic`).

The whole batch's patch matrix is ``kd*kh*kw`` times larger than the input, and
on the host writing it and reading it back cost as much as the products. So for
float32/float64 with a BLAS library (PyTorch's), the host never builds it: each
thread unfolds a *block* of output rows small enough to stay in its cache,
multiplies it at once, and goes on with the next one ("blocked im2col",
:mod:`npu_lab.kernels.conv_blocked`); folds take the same blocks in reverse. The
products are the same, in the same layout, only cut into blocks, so the clock
charges exactly what it charged before. Other dtypes, and products with BLAS
switched off, take the whole-batch path (:func:`_unfold`, :func:`_fold`).
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from ..kernels import blas, workspace
from ..kernels import conv as ck
from ..kernels import conv_blocked as cb
from ..kernels import matmul as mk
from ..kernels.threads import sized
from .common import as_array, check_same_device, empty, launch, nbytes, resize_out
from .copy import device_copy
from .linalg import tiles
from .registry import register


def _pair(v, n: int = 2) -> tuple[int, ...]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return tuple(v * n) if len(v) == 1 else tuple(v)


def _as_4d(input: torch.Tensor, weight: torch.Tensor, stride, padding, dilation):
    """conv1d is conv2d on a height-1 image."""
    if input.dim() == 3:
        return (input.unsqueeze(2), weight.unsqueeze(2), (1, *_pair(stride, 1)), (0, *_pair(padding, 1)),
                (1, *_pair(dilation, 1)), True)
    if input.dim() != 4:
        raise NotImplementedError(
            f"npu convolution supports 1-D and 2-D convolutions; got a {input.dim()}-D input")
    return input, weight, _pair(stride), _pair(padding), _pair(dilation), False


def _geometry(x: torch.Tensor, w: torch.Tensor, stride, padding, dilation):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    if ho <= 0 or wo <= 0:
        raise RuntimeError(
            f"Calculated output size: ({o}x{max(ho, 0)}x{max(wo, 0)}). Output size is too small")
    return n, c, h, wd, o, cg, kh, kw, ho, wo


def _cols(x: np.ndarray, kh, kw, stride, padding, dilation, ho, wo) -> np.ndarray:
    n, c = x.shape[:2]
    cols = np.empty((n * ho * wo, c * kh * kw), dtype=x.dtype)
    ck.im2col(x, kh, kw, stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1], ho, wo, cols)
    return cols


def conv_traffic(n: int, ho: int, wo: int, c: int, kh: int, kw: int, o: int, itemsize: int, nhwc: bool,
                 pointwise: bool = False) -> int:
    """Bytes a convolution moves besides reading its operands and writing its result.

    Both layouts build the im2col matrix (written, then read by the matmul) unless
    an NHWC 1x1 convolution can use its input as that matrix. In NCHW the matmul's
    ``(N*Ho*Wo, Cout)`` result is written and read back once more to transpose it
    into ``(N, Cout, Ho, Wo)``; NHWC output needs no transpose. The cost model
    charges these bytes, which is what makes the layout choice visible in
    simulated time.
    """
    cols = 0 if pointwise else n * ho * wo * c * kh * kw * itemsize
    result = 0 if nhwc else n * ho * wo * o * itemsize
    return 2 * cols + 2 * result


# --- every convolution, 1-3-D, plain and transposed: unfold / fold on (N, C, D, H, W) --------------------

def _triple(v, nd: int, fill: int) -> tuple[int, int, int]:
    """A 1-, 2- or 3-D convolution parameter as its 3-D form (leading dimensions get ``fill``)."""
    v = _pair(v, nd)
    return (fill,) * (3 - nd) + tuple(int(e) for e in v)


def _as_5d(t: torch.Tensor) -> np.ndarray:
    """(N, C, *spatial) with 1-3 spatial dimensions as a contiguous (N, C, D, H, W) array."""
    a = as_array(t.contiguous())
    return a.reshape(*a.shape[:2], *(1,) * (5 - a.ndim), *a.shape[2:])


def _nd_geometry(input, weight, stride, padding, dilation, transposed, output_padding, groups):
    """The 3-D form of a convolution's parameters and its output's spatial size."""
    nd = input.dim() - 2
    if nd not in (1, 2, 3) or weight.dim() != input.dim():
        raise RuntimeError(f"Expected {weight.dim()}D (unbatched) or {weight.dim() + 1}D (batched) input to "
                           f"conv, but got input of size: {list(input.shape)}")
    s, p, d = _triple(stride, nd, 1), _triple(padding, nd, 0), _triple(dilation, nd, 1)
    op = _triple(output_padding, nd, 0) if transposed else (0, 0, 0)
    k = (1,) * (3 - nd) + tuple(int(e) for e in weight.shape[2:])
    size = (1,) * (3 - nd) + tuple(int(e) for e in input.shape[2:])
    if transposed:
        out = tuple((size[i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op[i] + 1 for i in range(3))
    else:
        out = tuple((size[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(3))
    if min(out) <= 0:
        raise RuntimeError(f"Calculated output size: ({'x'.join(str(max(e, 0)) for e in out[3 - nd:])}). "
                           "Output size is too small")
    return nd, k, s, p, d, out


def _product(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = a @ b`` (2-D operands of any strides, ``out`` C-contiguous): BLAS or the numba kernel."""
    mk.mm(a, b, out, tiles.get((a.shape[0], b.shape[1], a.shape[1]), tiles["default"]))


def _unfold(x: np.ndarray, k, s, p, d, out) -> np.ndarray:
    """(N, C, D, H, W) -> the patches a convolution with output size ``out`` reads, as a
    ``(C*kd*kh*kw, N*od*oh*ow)`` matrix (rows by channel, then kernel tap)."""
    n, c = x.shape[:2]
    positions = out[0] * out[1] * out[2]
    cols = workspace.buffer("conv.cols", (c * k[0] * k[1] * k[2], n, positions), x.dtype)
    sized(ck.unfold, cols.size)(x, *k, *s, *p, *d, *out, cols)
    return cols.reshape(cols.shape[0], n * positions)


def _fold(cols: np.ndarray, k, s, p, d, out, vol: np.ndarray) -> None:
    """The adjoint of :func:`_unfold`, into ``vol`` (N, C, D, H, W)."""
    sized(ck.fold, cols.size)(cols.reshape(cols.shape[0], vol.shape[0], -1), *k, *s, *p, *d, *out, vol)


def _channels_first(a: np.ndarray) -> np.ndarray:
    """(N, C, ...) -> a contiguous (C, N*...) matrix: a batch's channels as the rows of one operand."""
    n, c = a.shape[:2]
    m = workspace.buffer("conv.channels", (c, n, a[0, 0].size if n and c else 0), a.dtype)
    m[...] = a.reshape(n, c, -1).transpose(1, 0, 2)
    return m.reshape(c, -1)


def _to_samples(m: np.ndarray, vol: np.ndarray) -> None:
    """Write a (C, N*...) matrix into ``vol`` (N, C, ...): the inverse of :func:`_channels_first`."""
    n, c = vol.shape[:2]
    vol.reshape(n, c, -1)[...] = m.reshape(c, n, -1).transpose(1, 0, 2)


def _blocked_routines(dtype: np.dtype, *arrays: np.ndarray) -> tuple[int, int] | None:
    """(gemm, thread-count setter) addresses when the blocked kernels (:mod:`npu_lab.kernels.conv_blocked`)
    can take a convolution: float32/float64 with PyTorch's BLAS switched on, nothing empty. None sends the
    convolution to the whole-batch unfold/fold path (the numba matrix kernels then do the products)."""
    if not blas.ENABLED or np.dtype(dtype) not in blas.DTYPES or any(a.size == 0 for a in arrays):
        return None
    routines = blas.torch_routines(np.dtype(dtype))
    return None if routines is None else routines[:2]


def _workers(work: int) -> int:
    """Threads a blocked kernel uses: all of numba's for ``work`` multiply-adds or more, else one."""
    return numba.get_num_threads() if work >= blas.PARALLEL_MIN_MACS else 1


def _blocked_unfold(routines, x: np.ndarray, k, s, p, d, out, groups: int, a: np.ndarray | None = None,
                    a_out: np.ndarray | None = None, left: np.ndarray | None = None,
                    grad: np.ndarray | None = None) -> None:
    """Unfold ``x`` (N, Cs, D, H, W) for an output of size ``out`` a block at a time and multiply each block at
    once (:func:`npu_lab.kernels.conv_blocked.unfold_products`): ``a_out`` (N, MA, P) = ``a`` (MA, Kg) times the
    patches per group, and/or ``grad`` (MB, Kg) = ``left`` (N, MB, P) times the patches' transpose."""
    n, cs = x.shape[:2]
    kk = k[0] * k[1] * k[2]
    rows, ow = out[0] * out[1], out[2]
    do_a, do_w = a_out is not None, grad is not None
    macs = n * rows * ow * cs * kk * ((a_out.shape[1] if do_a else 0) + (left.shape[1] if do_w else 0)) // groups
    workers = _workers(macs)
    # the wide layout (long contiguous copies) where consecutive output rows read consecutive input rows
    wide = s[1] == 1 and s[2] == 1 and p[2] == 0 and x.shape[4] > ow
    width = x.shape[4] if wide else ow
    rpb = cb.rows_per_block(rows, width, cs * kk, x.itemsize, n, workers)
    buf = workspace.buffer("conv.block", (workers, cs * kk, rpb * width), x.dtype)
    one, zero = x.dtype.type(1), x.dtype.type(0)
    dummy2, dummy3 = np.zeros((1, 1), x.dtype), np.zeros((1, 1, 1), x.dtype)
    partial = workspace.buffer("conv.partial", (workers, *grad.shape), x.dtype) if do_w else dummy3
    aux_rows = (left.shape[1] if do_w else 0) + (a_out.shape[1] // groups if do_a else 0)
    aux = workspace.buffer("conv.aux", (workers, aux_rows, rpb * width), x.dtype) if wide else dummy3
    kernel = cb.unfold_products if workers > 1 else sized(cb.unfold_products, 0)
    kernel(*routines, workers, x, *k, *s, *p, *d, *out, groups, rpb, a if do_a else dummy2,
           a_out if do_a else dummy3, do_a, left if do_w else dummy3, partial, do_w, wide, buf, aux, one, zero)
    if do_w:
        np.sum(partial, axis=0, out=grad)


def _blocked_fold(routines, src: np.ndarray, a: np.ndarray, k, s, p, d, out, groups: int, vol: np.ndarray) -> None:
    """``vol`` (N, Co, D, H, W) = the fold, for an unfold of output size ``out``, of ``a`` (M, Kg) transposed
    times ``src`` (N, M, P) per group, a block at a time (:func:`npu_lab.kernels.conv_blocked.fold_products`)."""
    n, co = vol.shape[:2]
    kk = k[0] * k[1] * k[2]
    rows, ow = out[0] * out[1], out[2]
    workers = _workers(n * rows * ow * co * kk * src.shape[1] // groups)
    per_group = co // groups
    # units of (sample, group, channel chunk): whole groups when they give every worker an equal share,
    # else each group's channels cut into up to ``workers`` chunks
    if workers == 1 or (n * groups) % workers == 0 or n * groups >= 4 * workers:
        chunk = per_group
    else:
        chunk = -(-per_group // min(per_group, workers))
    wide = s[1] == 1 and s[2] == 1 and p[2] == 0 and vol.shape[4] > ow  # as in _blocked_unfold
    width = vol.shape[4] if wide else ow
    rpb = cb.rows_per_block(rows, width, chunk * kk, vol.itemsize, 1, 1)
    buf = workspace.buffer("conv.block", (workers, chunk * kk, rpb * width), vol.dtype)
    aux = workspace.buffer("conv.aux", (workers, src.shape[1] // groups, rpb * width), vol.dtype) if wide else \
        np.zeros((1, 1, 1), vol.dtype)
    kernel = cb.fold_products if workers > 1 else sized(cb.fold_products, 0)
    kernel(*routines, workers, src, a, groups, chunk, *k, *s, *p, *d, *out, rpb, vol, wide, buf, aux,
           vol.dtype.type(1), vol.dtype.type(0))


def _convolution_nd(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """Every convolution, 1-3-D, plain or transposed, one product per group for the whole batch: plain,
    ``Y = W @ unfold(X)``; transposed (the adjoint), ``Y = fold(W^T @ X)``, with ``X``/``Y`` the batch's
    channels as rows. On the blocked path the same products run a block of columns at a time."""
    nd, k, s, p, d, osz = _nd_geometry(input, weight, stride, padding, dilation, transposed, output_padding, groups)
    x, w = _as_5d(input), _as_5d(weight)
    n, c = x.shape[:2]
    size = x.shape[2:]
    kk = k[0] * k[1] * k[2]
    if transposed:  # weight (C_in, C_out/groups, k...)
        cg, og = c // groups, w.shape[1]
        o = og * groups
    else:  # weight (C_out, C_in/groups, k...)
        o, cg = w.shape[:2]
        og = o // groups
    out = empty((n, o, *osz[3 - nd:]), input.dtype)
    y = as_array(out).reshape(n, o, *osz)
    routines = _blocked_routines(x.dtype, x, w, y)
    if transposed:
        if routines is not None:  # fold(W^T @ X), a block of patches at a time
            _blocked_fold(routines, x.reshape(n, c, -1), w.reshape(c, og * kk), k, s, p, d, size, groups, y)
        else:
            xm = _channels_first(x)
            cols = workspace.buffer("conv.product", (o * kk, xm.shape[1]), x.dtype)
            for g in range(groups):
                _product(w[g * cg:(g + 1) * cg].reshape(cg, og * kk).T, xm[g * cg:(g + 1) * cg],
                         cols[g * og * kk:(g + 1) * og * kk])
            _fold(cols, k, s, p, d, size, y)
        flops = 2.0 * n * size[0] * size[1] * size[2] * c * og * kk
    else:
        if routines is not None:  # W @ unfold(X), a block of patches at a time, straight into (N, O, positions)
            _blocked_unfold(routines, x, k, s, p, d, osz, groups, a=w.reshape(o, cg * kk), a_out=y.reshape(n, o, -1))
        else:
            cols = _unfold(x, k, s, p, d, osz)
            result = workspace.buffer("conv.product", (o, cols.shape[1]), x.dtype)
            for g in range(groups):
                _product(w[g * og:(g + 1) * og].reshape(og, cg * kk), cols[g * cg * kk:(g + 1) * cg * kk],
                         result[g * og:(g + 1) * og])
            _to_samples(result, y)
        flops = 2.0 * n * osz[0] * osz[1] * osz[2] * o * cg * kk
    if bias is not None:
        y += as_array(bias).reshape(1, o, 1, 1, 1)
    if not transposed and nd < 3:  # 1-D and 2-D convolutions are costed as 2-D ones (im2col, then transposed)
        ho, wo = osz[1], osz[2]
        extra = conv_traffic(n, ho, wo, c, k[1], k[2], o, out.element_size(), nhwc=False) // 2
        launch("conv2d", 2.0 * n * ho * wo * o * cg * k[1] * k[2], nbytes(input) + nbytes(weight) + extra,
               nbytes(out) + extra, matrix=input.dtype)
        return out
    positions = n * (size[0] * size[1] * size[2] if transposed else osz[0] * osz[1] * osz[2])
    extra = 2 * positions * (o if transposed else c) * kk * out.element_size()
    launch(f"conv_transpose{nd}d" if transposed else f"conv{nd}d", flops, nbytes(input) + nbytes(weight) + extra,
           nbytes(out) + extra, matrix=input.dtype)
    return out


def _convolution_nd_backward(grad_output, input, weight, stride, padding, dilation, transposed, output_padding,
                             groups, output_mask):
    """Gradients of :func:`_convolution_nd`, each one product per group for the whole batch: the input's is
    the other direction's convolution, the weight's the product of the output's gradient and the patches.
    On the blocked path the same products run a block of columns at a time (a transposed convolution's two
    gradients from one unfold of the output's gradient)."""
    nd, k, s, p, d, osz = _nd_geometry(input, weight, stride, padding, dilation, transposed, output_padding, groups)
    x, w, gy = _as_5d(input), _as_5d(weight), _as_5d(grad_output)
    n, c = x.shape[:2]
    size = x.shape[2:]
    kk = k[0] * k[1] * k[2]
    grad_input = empty(input.shape, input.dtype) if output_mask[0] else None
    grad_weight = empty(weight.shape, weight.dtype) if output_mask[1] else None
    gx = as_array(grad_input).reshape(x.shape) if output_mask[0] else None
    routines = _blocked_routines(x.dtype, x, w, gy)
    if transposed and routines is not None:  # one blocked unfold of the output's gradient feeds both products
        cg, og = c // groups, w.shape[1]
        o = og * groups
        _blocked_unfold(routines, gy, k, s, p, d, size, groups,
                        a=w.reshape(c, og * kk), a_out=gx.reshape(n, c, -1) if output_mask[0] else None,
                        left=x.reshape(n, c, -1), grad=as_array(grad_weight).reshape(c, og * kk)
                        if output_mask[1] else None)
    elif transposed:  # x (N, C_in, size) -> y (N, C_out, osz); weight (C_in, og, k...)
        cg, og = c // groups, w.shape[1]
        o = og * groups
        cols = _unfold(gy, k, s, p, d, size)  # (C_out*kk, N*positions of x)
        gw = as_array(grad_weight).reshape(c, og * kk) if output_mask[1] else None
        gxm = workspace.buffer("conv.product", (c, cols.shape[1]), x.dtype) if output_mask[0] else None
        xm = _channels_first(x) if output_mask[1] else None
        for g in range(groups):
            rows = cols[g * og * kk:(g + 1) * og * kk]
            if output_mask[0]:
                _product(w[g * cg:(g + 1) * cg].reshape(cg, og * kk), rows, gxm[g * cg:(g + 1) * cg])
            if output_mask[1]:
                _product(xm[g * cg:(g + 1) * cg], rows.T, gw[g * cg:(g + 1) * cg])
        if output_mask[0]:
            _to_samples(gxm, gx)
    elif routines is not None:  # weight (C_out, cg, k...): the input's gradient folded, the weight's unfolded
        o, cg = w.shape[:2]
        gys = gy.reshape(n, o, -1)
        if output_mask[0]:
            _blocked_fold(routines, gys, w.reshape(o, cg * kk), k, s, p, d, osz, groups, gx)
        if output_mask[1]:
            _blocked_unfold(routines, x, k, s, p, d, osz, groups, left=gys,
                            grad=as_array(grad_weight).reshape(o, cg * kk))
    else:  # weight (C_out, cg, k...)
        o, cg = w.shape[:2]
        og = o // groups
        gym = _channels_first(gy)
        if output_mask[0]:
            dcols = workspace.buffer("conv.product", (c * kk, gym.shape[1]), x.dtype)
            for g in range(groups):
                _product(w[g * og:(g + 1) * og].reshape(og, cg * kk).T, gym[g * og:(g + 1) * og],
                         dcols[g * cg * kk:(g + 1) * cg * kk])
            _fold(dcols, k, s, p, d, osz, gx)
        if output_mask[1]:
            cols = _unfold(x, k, s, p, d, osz)
            gw = as_array(grad_weight).reshape(o, cg * kk)
            for g in range(groups):
                _product(gym[g * og:(g + 1) * og], cols[g * cg * kk:(g + 1) * cg * kk].T, gw[g * og:(g + 1) * og])
    grad_bias = None
    if output_mask[2]:
        grad_bias = empty((o,), grad_output.dtype)
        as_array(grad_bias)[...] = gy.reshape(n, o, -1).sum(axis=(0, 2), dtype=np.float64)
    if not transposed and nd < 3:
        launch("conv2d_backward", 4.0 * n * osz[1] * osz[2] * o * cg * k[1] * k[2],
               nbytes(input) + nbytes(weight) + nbytes(grad_output), nbytes(input) + nbytes(weight),
               matrix=input.dtype)
        return grad_input, grad_weight, grad_bias
    positions = n * osz[0] * osz[1] * osz[2]
    launch(f"conv_transpose{nd}d_backward" if transposed else f"conv{nd}d_backward",
           4.0 * positions * o * (c // groups) * kk,
           nbytes(input) + nbytes(weight) + nbytes(grad_output), nbytes(input) + nbytes(weight), matrix=input.dtype)
    return grad_input, grad_weight, grad_bias


def _check_2d(input, weight, stride, padding, dilation, groups) -> None:
    """The 1-D/2-D convolution's own checks and messages (dimensions, output size, channels per group)."""
    x4, w4, stride, padding, dilation, _ = _as_4d(input, weight, stride, padding, dilation)
    n, c, h, wd, o, cg, kh, kw, ho, wo = _geometry(x4, w4, stride, padding, dilation)
    if c != cg * groups:
        raise RuntimeError(
            f"Given groups={groups}, weight of size {list(weight.shape)}, expected input{list(input.shape)} "
            f"to have {cg * groups} channels, but got {c} channels instead")


@register("convolution_overrideable")
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """ATen's convolution for npu, 1-3-D, plain or transposed: patches (unfold) and batched products."""
    check_same_device("aten::convolution", input, weight, bias)
    if not transposed and input.dim() <= 4:
        _check_2d(input, weight, stride, padding, dilation, groups)
    return _convolution_nd(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


@register("convolution_backward_overrideable")
def convolution_backward(grad_output, input, weight, stride, padding, dilation, transposed, output_padding,
                         groups, output_mask):
    """Gradients of :func:`convolution` for the inputs, weights and bias that ``output_mask`` asks for."""
    check_same_device("aten::convolution_backward", grad_output, input, weight)
    if not transposed and input.dim() <= 4:
        _check_2d(input, weight, stride, padding, dilation, groups)
    return _convolution_nd_backward(grad_output, input, weight, stride, padding, dilation, transposed,
                                    output_padding, groups, output_mask)


# --- pooling --------------------------------------------------------------------------

def _planes(t: torch.Tensor) -> tuple[np.ndarray, tuple[int, ...]]:
    """(N, C, H, W) or (C, H, W) as contiguous (P, H, W) planes, plus the leading shape."""
    if t.dim() not in (3, 4):
        raise RuntimeError(f"non-empty 3D or 4D (batch mode) tensor expected for input, got {t.dim()}D")
    lead = tuple(t.shape[:-2])
    return as_array(t.contiguous()).reshape(-1, t.shape[-2], t.shape[-1]), lead


def _pool_args(kernel_size, stride, padding, dilation=(1, 1)):
    k = _pair(kernel_size)
    s = _pair(stride) if stride else k
    return k, s, _pair(padding), _pair(dilation)


@register("max_pool2d_with_indices")
def max_pool2d_with_indices(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    check_same_device("aten::max_pool2d_with_indices", self)
    k, s, p, d = _pool_args(kernel_size, stride, padding, dilation)
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise RuntimeError("pad should be at most half of effective kernel size")
    x, lead = _planes(self)
    ho = ck.pool_output_size(x.shape[1], k[0], s[0], p[0], d[0], ceil_mode)
    wo = ck.pool_output_size(x.shape[2], k[1], s[1], p[1], d[1], ceil_mode)
    out, idx = empty((*lead, ho, wo), self.dtype), empty((*lead, ho, wo), torch.int64)
    ck.max_pool(x, k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1],
                as_array(out).reshape(-1, ho, wo), as_array(idx).reshape(-1, ho, wo))
    launch("max_pool2d", x.shape[0] * ho * wo * k[0] * k[1], nbytes(self), nbytes(out) + nbytes(idx))
    return out, idx


@register("max_pool2d_with_indices_backward")
def max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
                                     indices):
    check_same_device("aten::max_pool2d_with_indices_backward", grad_output, self, indices)
    h, w = self.shape[-2:]
    g = as_array(grad_output.contiguous()).reshape(-1, grad_output.shape[-2] * grad_output.shape[-1])
    i = as_array(indices.contiguous()).reshape(g.shape)
    out = empty(self.shape, self.dtype)
    ck.max_pool_backward(g, i, as_array(out).reshape(-1, h * w))
    launch("max_pool2d_backward", g.size, nbytes(grad_output) + nbytes(indices), nbytes(out))
    return out


@register("max_pool2d_with_indices_backward.grad_input")
def max_pool2d_with_indices_backward_out(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
                                         indices, *, grad_input):
    res = max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation,
                                           ceil_mode, indices)
    resize_out(grad_input, res.shape)
    device_copy(grad_input, res)
    return grad_input


@register("avg_pool2d")
def avg_pool2d(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    check_same_device("aten::avg_pool2d", self)
    k, s, p, _ = _pool_args(kernel_size, stride, padding)
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise RuntimeError("pad should be at most half of effective kernel size")
    x, lead = _planes(self)
    ho = ck.pool_output_size(x.shape[1], k[0], s[0], p[0], 1, ceil_mode)
    wo = ck.pool_output_size(x.shape[2], k[1], s[1], p[1], 1, ceil_mode)
    out = empty((*lead, ho, wo), self.dtype)
    ck.avg_pool(x, k[0], k[1], s[0], s[1], p[0], p[1], bool(count_include_pad), int(divisor_override or 0),
                as_array(out).reshape(-1, ho, wo))
    launch("avg_pool2d", x.shape[0] * ho * wo * k[0] * k[1], nbytes(self), nbytes(out))
    return out


@register("avg_pool2d_backward")
def avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    check_same_device("aten::avg_pool2d_backward", grad_output, self)
    k, s, p, _ = _pool_args(kernel_size, stride, padding)
    h, w = self.shape[-2:]
    g = as_array(grad_output.contiguous()).reshape(-1, grad_output.shape[-2], grad_output.shape[-1])
    out = empty(self.shape, self.dtype)
    ck.avg_pool_backward(g, h, w, k[0], k[1], s[0], s[1], p[0], p[1], bool(count_include_pad),
                         int(divisor_override or 0), as_array(out).reshape(-1, h, w))
    launch("avg_pool2d_backward", g.size * k[0] * k[1], nbytes(grad_output), nbytes(out))
    return out


@register("_adaptive_avg_pool2d")
def adaptive_avg_pool2d(self, output_size):
    check_same_device("aten::_adaptive_avg_pool2d", self)
    x, lead = _planes(self)
    ho, wo = _pair(output_size)
    out = empty((*lead, ho, wo), self.dtype)
    ck.adaptive_avg_pool(x, as_array(out).reshape(-1, ho, wo))
    launch("adaptive_avg_pool2d", x.size, nbytes(self), nbytes(out))
    return out


@register("_adaptive_avg_pool2d_backward")
def adaptive_avg_pool2d_backward(grad_output, self):
    check_same_device("aten::_adaptive_avg_pool2d_backward", grad_output, self)
    h, w = self.shape[-2:]
    g = as_array(grad_output.contiguous()).reshape(-1, grad_output.shape[-2], grad_output.shape[-1])
    out = empty(self.shape, self.dtype)
    ck.adaptive_avg_pool_backward(g, h, w, as_array(out).reshape(-1, h, w))
    launch("adaptive_avg_pool2d_backward", self.numel(), nbytes(grad_output), nbytes(out))
    return out


# --- 3-D pooling, adaptive max pooling, unpooling, fractional max pooling ---------------------------------

def _three(v, name: str, what: str, allow_empty: bool = False) -> tuple[int, int, int]:
    """A 3-D pooling argument: one int or three ("" when empty and allowed)."""
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    if (allow_empty and not v) or len(v) in (1, 3):
        return tuple(int(e) for e in (v * 3 if len(v) == 1 else v))
    raise RuntimeError(f"{name}: {what}")


def _pool_out(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """pooling_output_shape: the output length, with ATen's checks of stride and padding."""
    if s == 0:
        raise RuntimeError("stride should not be zero")
    if p < 0:
        raise RuntimeError(f"pad must be non-negative, but got pad: {p}")
    if p > ((k - 1) * d + 1) // 2:
        raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={p}, kernel_size={k} "
                           f"and dilation={d}")
    return ck.pool_output_size(size, k, s, p, d, ceil_mode)


def _vol(t: torch.Tensor, fn_name: str) -> tuple[np.ndarray, tuple[int, ...]]:
    """A 4-D or 5-D input as contiguous (P, D, H, W) planes, plus the leading shape; ATen's dimension checks."""
    if t.dim() not in (4, 5):
        raise RuntimeError(f"{fn_name}: Expected 4D or 5D tensor for input, but got: {list(t.shape)}")
    for i in range(t.dim()):
        if not (t.dim() == 5 and i == 0) and t.shape[i] <= 0:
            raise RuntimeError(f"{fn_name}: Expected input's non-batch dimensions to have positive length, but "
                               f"input has a shape of {list(t.shape)} and non-batch dimension {t.shape[i]} has "
                               "length zero!")
    return as_array(t.contiguous()).reshape(-1, *t.shape[-3:]), tuple(t.shape[:-3])


def _pool3d_geometry(t, fn_name, k, s, p, d, ceil_mode, check_input_size=False):
    """pool3d_shape_check: the output (OD, OH, OW) of a 3-D pooling, with the CPU's checks in the CPU's order."""
    if t.dim() not in (4, 5):
        raise RuntimeError("non-empty 4D or 5D (batch mode) tensor expected for input")
    size = tuple(int(e) for e in t.shape[-3:])
    out = tuple(_pool_out(size[i], k[i], s[i], p[i], d[i], ceil_mode) for i in range(3))
    if min(k) <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kT: {k[0]} kH: {k[1]} kW: {k[2]}")
    if min(s) <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got dT: {s[0]} dH: {s[1]} dW: {s[2]}")
    if min(d) <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilationT: {d[0]} dilationH: {d[1]} "
                           f"dilationW: {d[2]}")
    x, lead = _vol(t, fn_name)
    if check_input_size and (size[0] < k[0] or size[1] < k[1] or size[2] < k[2]):
        raise RuntimeError(f"input image (T: {size[0]} H: {size[1]} W: {size[2]}) smaller than kernel size "
                           f"(kT: {k[0]} kH: {k[1]} kW: {k[2]})")
    if k[0] // 2 < p[0] or k[2] // 2 < p[2] or k[1] // 2 < p[1]:
        raise RuntimeError(f"pad should be smaller than or equal to half of kernel size, but got kT: {k[0]} kW: "
                           f"{k[2]} kH: {k[1]} padT: {p[0]} padW: {p[2]} padH: {p[1]}")
    if min(out) < 1:
        c = t.shape[-4]
        raise RuntimeError(f"Given input size: ({c}x{size[0]}x{size[1]}x{size[2]}). Calculated output size: "
                           f"({c}x{out[0]}x{out[1]}x{out[2]}). Output size is too small")
    return x, lead, out


def _grad_planes(grad: torch.Tensor, shape) -> np.ndarray:
    """A gradient as contiguous (P, *shape) planes."""
    return as_array(grad.contiguous()).reshape(-1, *shape)


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


@register("max_pool3d_with_indices")
def max_pool3d_with_indices(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """3-D max pooling: the max of each (dilated) window and its flat position in the input's plane."""
    check_same_device("aten::max_pool3d_with_indices", self)
    k = _three(kernel_size, "max_pool3d", "kernel_size must either be a single int, or a tuple of three ints")
    s = _three(stride, "max_pool3d", "stride must either be omitted, a single int, or a tuple of three ints",
               allow_empty=True) or k
    p = _three(padding, "max_pool3d", "padding must either be a single int, or a tuple of three ints")
    d = _three(dilation, "max_pool3d", "dilation must be either a single int, or a tuple of three ints")
    x, lead, o = _pool3d_geometry(self, "max_pool3d_with_indices_out_cpu_template()", k, s, p, d, ceil_mode)
    out, idx = empty((*lead, *o), self.dtype), empty((*lead, *o), torch.int64)
    sized(ck.max_pool3d, out.numel() * k[0] * k[1] * k[2])(
        x, *k, *s, *p, *d, as_array(out).reshape(-1, *o), as_array(idx).reshape(-1, *o))
    launch("max_pool3d", out.numel() * k[0] * k[1] * k[2], nbytes(self), nbytes(out) + nbytes(idx))
    return out, idx


def _max_grad(grad_output: torch.Tensor, self: torch.Tensor, indices: torch.Tensor, nd: int, name: str):
    """Gradient of a max pooling over the last ``nd`` dims: each output's gradient added at its argmax."""
    check_same_device(f"aten::{name}", grad_output, self, indices)
    plane = math.prod(self.shape[-nd:])
    out = empty(self.shape, self.dtype)
    if out.numel():
        g = as_array(grad_output.contiguous()).reshape(-1, math.prod(grad_output.shape[-nd:]))
        i = as_array(indices.contiguous()).reshape(g.shape)
        sized(ck.max_pool_backward, g.size + out.numel())(g, i, as_array(out).reshape(-1, plane))
    launch(name, grad_output.numel(), nbytes(grad_output) + nbytes(indices), nbytes(out))
    return out


@register("max_pool3d_with_indices_backward")
def max_pool3d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices):
    """Gradient of :func:`max_pool3d_with_indices`."""
    return _max_grad(grad_output, self, indices, 3, "max_pool3d_with_indices_backward")


@register("adaptive_max_pool2d_backward")
def adaptive_max_pool2d_backward(grad_output, self, indices):
    """Gradient of :func:`adaptive_max_pool2d`."""
    return _max_grad(grad_output, self, indices, 2, "adaptive_max_pool2d_backward")


@register("adaptive_max_pool3d_backward")
def adaptive_max_pool3d_backward(grad_output, self, indices):
    """Gradient of :func:`adaptive_max_pool3d`."""
    return _max_grad(grad_output, self, indices, 3, "adaptive_max_pool3d_backward")


register("max_pool3d_with_indices.out")(_with_out(max_pool3d_with_indices, "out", "indices"))
register("max_pool3d_with_indices_backward.grad_input")(
    _with_out(max_pool3d_with_indices_backward, "grad_input"))
register("adaptive_max_pool2d_backward.grad_input")(_with_out(adaptive_max_pool2d_backward, "grad_input"))
register("adaptive_max_pool3d_backward.grad_input")(_with_out(adaptive_max_pool3d_backward, "grad_input"))


def _bins(size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """Adaptive pooling's windows: [floor(i*size/out), ceil((i+1)*size/out)) for each output index i."""
    i = np.arange(out, dtype=np.int64)
    return (i * size) // out, -((-(i + 1) * size) // out)


def _adaptive_size(output_size, nd: int, name: str) -> tuple[int, ...]:
    o = tuple(int(e) for e in output_size)
    if len(o) != nd:
        raise RuntimeError(f"{name}: internal error: output_size.size() must be {nd}")
    return o


def _adaptive_input(self: torch.Tensor, nd: int, name: str) -> None:
    """ATen's checks of an adaptive pooling's input ((nd+1)-D or (nd+2)-D, non-batch dims non-empty)."""
    if self.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"{name}(): Expected {nd + 1}D or {nd + 2}D tensor, but got: {list(self.shape)}")
    for i in range(1, self.dim()):
        if self.shape[i] <= 0:
            raise RuntimeError(f"{name}(): Expected input to have non-zero size for non-batch dimensions, but input "
                               f"has sizes {list(self.shape)} with dimension {i} being empty")


def _adaptive_max(self: torch.Tensor, output_size, nd: int) -> tuple[torch.Tensor, torch.Tensor]:
    name = f"adaptive_max_pool{nd}d"
    check_same_device(f"aten::{name}", self)
    _adaptive_input(self, nd, name)
    o = _adaptive_size(output_size, nd, name)
    if not self.is_floating_point():
        raise NotImplementedError(f'"{name}" not implemented for \'{_dtype_name(self.dtype)}\'')
    lead = tuple(self.shape[:-nd])
    size = (1,) * (3 - nd) + tuple(int(e) for e in self.shape[-nd:])
    o3 = (1,) * (3 - nd) + o
    out, idx = empty((*lead, *o), self.dtype), empty((*lead, *o), torch.int64)
    if out.numel():
        x = as_array(self.contiguous()).reshape(-1, *size)
        bounds = [b for i in range(3) for b in _bins(size[i], o3[i])]
        sized(ck.box_max, x.size)(x, *bounds, as_array(out).reshape(-1, *o3), as_array(idx).reshape(-1, *o3))
    launch(name, self.numel(), nbytes(self), nbytes(out) + nbytes(idx))
    return out, idx


def _dtype_name(dtype: torch.dtype) -> str:
    """PyTorch's name of a dtype in "not implemented for" errors ('Int', 'Long', ...)."""
    return {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
            torch.bool: "Bool", torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
            torch.bfloat16: "BFloat16"}.get(dtype, str(dtype).removeprefix("torch."))


@register("adaptive_max_pool2d")
def adaptive_max_pool2d(self, output_size):
    """Adaptive 2-D max pooling (adaptive_max_pool1d too): the max of each adaptive window and where it is."""
    return _adaptive_max(self, output_size, 2)


@register("adaptive_max_pool3d")
def adaptive_max_pool3d(self, output_size):
    """Adaptive 3-D max pooling: the max of each adaptive window and where it is."""
    return _adaptive_max(self, output_size, 3)


register("adaptive_max_pool2d.out")(_with_out(adaptive_max_pool2d, "out", "indices"))
register("adaptive_max_pool3d.out")(_with_out(adaptive_max_pool3d, "out", "indices"))


@register("_adaptive_avg_pool3d")
def adaptive_avg_pool3d(self, output_size):
    """Adaptive 3-D average pooling: the mean of each adaptive window."""
    check_same_device("aten::_adaptive_avg_pool3d", self)
    _adaptive_input(self, 3, "adaptive_avg_pool3d")
    o = _adaptive_size(output_size, 3, "adaptive_avg_pool3d")
    if not self.is_floating_point():
        raise NotImplementedError(f'"adaptive_avg_pool3d_cpu" not implemented for \'{_dtype_name(self.dtype)}\'')
    out = empty((*self.shape[:-3], *o), self.dtype)
    if out.numel():
        x = as_array(self.contiguous()).reshape(-1, *self.shape[-3:])
        bounds = [b for i in range(3) for b in _bins(int(self.shape[-3 + i]), o[i])]
        sized(ck.box_mean, x.size)(x, *bounds, as_array(out).reshape(-1, *o))
    launch("adaptive_avg_pool3d", self.numel(), nbytes(self), nbytes(out))
    return out


@register("_adaptive_avg_pool3d_backward")
def adaptive_avg_pool3d_backward(grad_output, self):
    """Gradient of :func:`adaptive_avg_pool3d`: each output's gradient spread evenly over its window."""
    check_same_device("aten::_adaptive_avg_pool3d_backward", grad_output, self)
    o = tuple(int(e) for e in grad_output.shape[-3:])
    size = tuple(int(e) for e in self.shape[-3:])
    out = empty(self.shape, self.dtype)
    if out.numel():
        bounds = [b for i in range(3) for b in _bins(size[i], o[i])]
        sized(ck.box_mean_backward, out.numel())(_grad_planes(grad_output, o), *bounds,
                                                 as_array(out).reshape(-1, *size))
    launch("adaptive_avg_pool3d_backward", self.numel(), nbytes(grad_output), nbytes(out))
    return out


register("adaptive_avg_pool3d.out")(_with_out(adaptive_avg_pool3d, "out"))
register("adaptive_avg_pool3d_backward.grad_input")(_with_out(adaptive_avg_pool3d_backward, "grad_input"))


def _avg3d_args(kernel_size, stride, padding, divisor_override):
    k = _three(kernel_size, "avg_pool3d", "kernel_size must be a single int, or a tuple of three ints")
    s = _three(stride, "avg_pool3d", "stride must be omitted, a single number, or a tuple of three ints",
               allow_empty=True) or k
    p = _three(padding, "avg_pool3d", "padding must be a single int, or a tuple of three ints")
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    return k, s, p


@register("avg_pool3d")
def avg_pool3d(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """3-D average pooling (padding, ceil_mode, count_include_pad and divisor_override as in PyTorch)."""
    check_same_device("aten::avg_pool3d", self)
    k, s, p = _avg3d_args(kernel_size, stride, padding, divisor_override)
    x, lead, o = _pool3d_geometry(self, "avg_pool3d()", k, s, p, (1, 1, 1), ceil_mode, check_input_size=True)
    out = empty((*lead, *o), self.dtype)
    sized(ck.avg_pool3d, out.numel() * k[0] * k[1] * k[2])(
        x, *k, *s, *p, bool(count_include_pad), int(divisor_override or 0), as_array(out).reshape(-1, *o))
    launch("avg_pool3d", out.numel() * k[0] * k[1] * k[2], nbytes(self), nbytes(out))
    return out


@register("avg_pool3d_backward")
def avg_pool3d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    """Gradient of :func:`avg_pool3d`."""
    check_same_device("aten::avg_pool3d_backward", grad_output, self)
    k, s, p = _avg3d_args(kernel_size, stride, padding, divisor_override)
    size = tuple(int(e) for e in self.shape[-3:])
    o = tuple(int(e) for e in grad_output.shape[-3:])
    out = empty(self.shape, self.dtype)
    if out.numel():
        sized(ck.avg_pool3d_backward, grad_output.numel() * k[0] * k[1] * k[2])(
            _grad_planes(grad_output, o), *k, *s, *p, bool(count_include_pad), int(divisor_override or 0),
            as_array(out).reshape(-1, *size))
    launch("avg_pool3d_backward", grad_output.numel() * k[0] * k[1] * k[2], nbytes(grad_output), nbytes(out))
    return out


register("avg_pool3d.out")(_with_out(avg_pool3d, "out"))
register("avg_pool3d_backward.grad_input")(_with_out(avg_pool3d_backward, "grad_input"))


def _intervals(samples: np.ndarray, size: int, out: int, pool: int) -> np.ndarray:
    """Fractional max pooling's window starts for each plane's sample (generate_intervals, in its precision)."""
    ft = samples.dtype.type
    seq = np.empty((samples.shape[0], out), dtype=np.int64)
    if out > 1:
        alpha = ft(size - pool) / ft(out - 1)
        i = np.arange(out - 1, dtype=samples.dtype)
        u = samples[:, None]
        seq[:, :-1] = ((i[None, :] + u) * alpha).astype(np.int64) - (u * alpha).astype(np.int64)
    if out > 0:
        seq[:, -1] = size - pool
    return seq


def _fractional(self, kernel_size, output_size, random_samples, nd: int):
    name = f"fractional_max_pool{nd}d"
    check_same_device(f"aten::{name}", self, random_samples)
    which = "Ints" if nd == 2 else "three Ints"
    if len(kernel_size) != nd:
        raise RuntimeError(f"{name}: kernel_size must either be a single Int or tuple of {which}")
    if len(output_size) != nd:
        raise RuntimeError(f"{name}: output_size must either be a single Int or tuple of {which}")
    fn = f"{name}()" if nd == 2 else f"{name}_out()"
    if self.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"{fn}: Expected {nd + 1}D or {nd + 2}D tensor, but got: {list(self.shape)}")
    for i in range(self.dim() - nd - 1, self.dim()):
        if self.shape[i] <= 0:
            raise RuntimeError(f"{fn}: Expected input to have non-zero size for non-batch dimensions, but got"
                               f"{list(self.shape)} with dimension {i} being empty.")
    if random_samples.dtype != self.dtype:
        raise RuntimeError("Expect _random_samples to have the same dtype as input")
    n = self.shape[0] if self.dim() == nd + 2 else 1
    c = self.shape[-nd - 1]
    if random_samples.dim() != 3 or random_samples.shape[0] < n:
        raise RuntimeError("Expect _random_samples.size(0) no less then input batch size.")
    if random_samples.shape[1] != c:
        raise RuntimeError("Expect _random_samples.size(1) equals to input channel size.")
    if random_samples.shape[2] != nd:
        raise RuntimeError(f"Expect _random_samples.size(2) equals to {nd}.")
    k, o = tuple(int(e) for e in kernel_size), tuple(int(e) for e in output_size)
    size = tuple(int(e) for e in self.shape[-nd:])
    names = ("height", "width") if nd == 2 else ("time", "height", "width")
    for dim in ((1, 0) if nd == 2 else (0, 2, 1)):
        if o[dim] + k[dim] - 1 > size[dim] - (nd == 3):  # 2-D allows the windows to reach the end, 3-D not
            raise RuntimeError(f"{fn}: pool {names[dim]} {k[dim]} too large relative to input {names[dim]} "
                               f"{size[dim]}")
    if not self.is_floating_point():
        raise RuntimeError("Expect _random_samples to have the same dtype as input")
    out = empty((*self.shape[:-nd], *o), self.dtype)
    idx = empty((*self.shape[:-nd], *o), torch.int64)
    if out.numel():
        planes = n * c
        u = as_array(random_samples.contiguous())[:n].reshape(planes, nd)
        # the samples are (w, h) in 2-D and (t, h, w) in 3-D
        order = (None, 1, 0) if nd == 2 else (0, 1, 2)
        size3, k3, o3 = (1,) * (3 - nd) + size, (1,) * (3 - nd) + k, (1,) * (3 - nd) + o
        starts = []
        for dim in range(3):
            if order[dim] is None:
                starts.append(np.zeros((planes, 1), dtype=np.int64))
            else:
                starts.append(_intervals(u[:, order[dim]], size3[dim], o3[dim], k3[dim]))
        x = as_array(self.contiguous()).reshape(planes, *size3)
        sized(ck.fractional_max, out.numel() * math.prod(k))(
            x, *starts, *k3, as_array(out).reshape(planes, *o3), as_array(idx).reshape(planes, *o3))
    launch(name, out.numel() * math.prod(k), nbytes(self), nbytes(out) + nbytes(idx))
    return out, idx


@register("fractional_max_pool2d")
def fractional_max_pool2d(self, kernel_size, output_size, random_samples):
    """Fractional 2-D max pooling: windows at pseudo-random positions given by ``random_samples`` (N, C, 2)."""
    return _fractional(self, kernel_size, output_size, random_samples, 2)


@register("fractional_max_pool3d")
def fractional_max_pool3d(self, kernel_size, output_size, random_samples):
    """Fractional 3-D max pooling: windows at pseudo-random positions given by ``random_samples`` (N, C, 3)."""
    return _fractional(self, kernel_size, output_size, random_samples, 3)


@register("fractional_max_pool2d_backward")
def fractional_max_pool2d_backward(grad_output, self, kernel_size, output_size, indices):
    """Gradient of :func:`fractional_max_pool2d` (added at the recorded argmax positions)."""
    return _max_grad(grad_output, self, indices, 2, "fractional_max_pool2d_backward")


@register("fractional_max_pool3d_backward")
def fractional_max_pool3d_backward(grad_output, self, kernel_size, output_size, indices):
    """Gradient of :func:`fractional_max_pool3d` (added at the recorded argmax positions)."""
    return _max_grad(grad_output, self, indices, 3, "fractional_max_pool3d_backward")


register("fractional_max_pool2d.output")(_with_out(fractional_max_pool2d, "output", "indices"))
register("fractional_max_pool3d.output")(_with_out(fractional_max_pool3d, "output", "indices"))
register("fractional_max_pool2d_backward.grad_input")(_with_out(fractional_max_pool2d_backward, "grad_input"))
register("fractional_max_pool3d_backward.grad_input")(_with_out(fractional_max_pool3d_backward, "grad_input"))


def _unpool(self, indices, output_size, nd: int):
    """max_unpool: zeros of ``output_size`` with each input value written at its index (per plane)."""
    name = f"max_unpool{nd}d"
    check_same_device(f"aten::{name}", self, indices)
    o = tuple(int(e) for e in output_size)
    out = empty((*self.shape[:-nd], *o), self.dtype)
    if self.numel():
        planes = math.prod(self.shape[:-nd])
        src = as_array(self.contiguous()).reshape(planes, -1)
        idx = as_array(indices.contiguous()).reshape(planes, -1)
        size = math.prod(o)
        bad, found = sized(ck.scatter_planes, self.numel() + out.numel())(
            src, idx, as_array(out).reshape(planes, size), size)
        if found:
            raise RuntimeError(f"Found an invalid max index: {bad} (output volumes are of size {'x'.join(map(str, o))}")
    elif out.numel():
        as_array(out)[...] = 0
    launch(name, self.numel(), nbytes(self) + nbytes(indices), nbytes(out))
    return out


def _unpool_checks(self, indices, nd: int) -> None:
    if indices.dtype != torch.int64:
        raise RuntimeError("elements in indices should be type int64" + (f" but got: {_dtype_name(indices.dtype)}"
                                                                           if nd == 2 else ""))
    if self.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"Input to max_unpooling{nd}d should be a {nd + 1}d or {nd + 2}d Tensor, but got a tensor "
                           f"with {self.dim()} dimensions.")
    if self.shape != indices.shape:
        raise RuntimeError(f"Expected shape of indices to be same as that of the input tensor ({list(self.shape)}) "
                           f"but got indices tensor with shape: {list(indices.shape)}")
    for i in range(1, self.dim()):
        if self.shape[i] <= 0:
            raise RuntimeError(f"max_unpooling{nd}d_forward_out_cpu(): Expected input to have non-zero size for "
                               f"non-batch dimensions, but got {list(self.shape)} with dimension {i} being empty.")
    if not self.is_floating_point():
        raise NotImplementedError(f'"max_unpool{nd}d" not implemented for \'{_dtype_name(self.dtype)}\'')


@register("max_unpool2d")
def max_unpool2d(self, indices, output_size):
    """Inverse of 2-D max pooling: each value written at its flat index in an (H, W) plane of zeros."""
    if indices.dtype != torch.int64:
        _unpool_checks(self, indices, 2)
    if len(output_size) != 2:
        raise RuntimeError("There should be exactly two elements (height, width) in output_size, but got "
                           f"{len(output_size)} elements.")
    _unpool_checks(self, indices, 2)
    return _unpool(self, indices, output_size, 2)


@register("max_unpool3d")
def max_unpool3d(self, indices, output_size, stride, padding):
    """Inverse of 3-D max pooling: each value written at its flat index in a (D, H, W) volume of zeros."""
    if indices.dtype != torch.int64:
        _unpool_checks(self, indices, 3)
    if len(output_size) != 3:
        raise RuntimeError("There should be exactly three elements (depth, height, width) in output_size, but got "
                           f"{len(output_size)} elements.")
    if len(stride) != 3:
        raise RuntimeError("There should be exactly three elements (depth, height, width) in stride, but got: "
                           f"{len(stride)} elements.")
    if len(padding) != 3:
        raise RuntimeError("There should be exactly three elements (depth, height, width) in padding, but got: "
                           f"{len(padding)} elements.")
    if min(stride) <= 0:
        raise RuntimeError(f"strides should be greater than zero, but got stride: {list(stride)}")
    _unpool_checks(self, indices, 3)
    return _unpool(self, indices, output_size, 3)


register("max_unpool2d.out")(_with_out(max_unpool2d, "out"))
register("max_unpool3d.out")(_with_out(max_unpool3d, "out"))
