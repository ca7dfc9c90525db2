"""Convolution (via PyTorch's ``convolution_overrideable`` hook) and pooling.

ATen routes ``F.conv1d``/``F.conv2d`` on an out-of-tree device to
``aten::convolution_overrideable`` and its backward to
``aten::convolution_backward_overrideable``: the two slots a vendor fills.
The NPU's implementation is im2col + the tiled matmul (see
:mod:`npu_lab.kernels.conv`).
"""

from __future__ import annotations

import numpy as np
import torch

from ..device import fallback
from ..kernels import conv as ck
from ..kernels import matmul as mk
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


def _mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.empty((a.shape[0], b.shape[1]), dtype=a.dtype)
    m, k = a.shape
    mk.mm(a, b, out, tiles.get((m, b.shape[1], k), tiles["default"]))  # the kernel packs what it needs
    return out


@register("convolution_overrideable")
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    check_same_device("aten::convolution", input, weight, bias)
    if transposed or input.dim() > 4:
        return fallback.unsupported(
            torch.ops.aten.convolution.default,
            (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups), {},
            "transposed convolution" if transposed else f"{input.dim() - 2}-D convolution")
    x4, w4, stride, padding, dilation, squeeze = _as_4d(input, weight, stride, padding, dilation)
    n, c, h, wd, o, cg, kh, kw, ho, wo = _geometry(x4, w4, stride, padding, dilation)
    if c != cg * groups:
        raise RuntimeError(
            f"Given groups={groups}, weight of size {list(weight.shape)}, expected input{list(input.shape)} "
            f"to have {cg * groups} channels, but got {c} channels instead")
    x = as_array(x4.contiguous())
    wt = as_array(w4.contiguous()).reshape(o, cg * kh * kw)
    og = o // groups
    result = np.empty((n * ho * wo, o), dtype=x.dtype)
    for g in range(groups):
        cols = _cols(np.ascontiguousarray(x[:, g * cg:(g + 1) * cg]), kh, kw, stride, padding, dilation, ho, wo)
        result[:, g * og:(g + 1) * og] = _mm(cols, wt[g * og:(g + 1) * og].T)
    if bias is not None:
        result += as_array(bias).reshape(1, o)
    out = empty((n, o, ho, wo), input.dtype)
    as_array(out)[...] = result.reshape(n, ho, wo, o).transpose(0, 3, 1, 2)
    extra = conv_traffic(n, ho, wo, c, kh, kw, o, out.element_size(), nhwc=False) // 2
    launch("conv2d", 2.0 * n * ho * wo * o * cg * kh * kw, nbytes(input) + nbytes(weight) + extra,
           nbytes(out) + extra)
    return out.squeeze(2) if squeeze else out


@register("convolution_backward_overrideable")
def convolution_backward(grad_output, input, weight, stride, padding, dilation, transposed, output_padding,
                         groups, output_mask):
    check_same_device("aten::convolution_backward", grad_output, input, weight)
    if transposed or input.dim() > 4:
        return fallback.unsupported(
            torch.ops.aten.convolution_backward.default,
            (grad_output, input, weight, None, stride, padding, dilation, transposed, output_padding, groups,
             output_mask), {},
            "transposed convolution" if transposed else f"{input.dim() - 2}-D convolution")
    x4, w4, stride, padding, dilation, squeeze = _as_4d(input, weight, stride, padding, dilation)
    g4 = grad_output.unsqueeze(2) if squeeze else grad_output
    n, c, h, wd, o, cg, kh, kw, ho, wo = _geometry(x4, w4, stride, padding, dilation)
    og = o // groups
    x = as_array(x4.contiguous())
    wt = as_array(w4.contiguous()).reshape(o, cg * kh * kw)
    gy = np.ascontiguousarray(as_array(g4.contiguous()).transpose(0, 2, 3, 1).reshape(n * ho * wo, o))
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        gx = np.empty((n, c, h, wd), dtype=x.dtype)
        for g in range(groups):
            dcols = _mm(gy[:, g * og:(g + 1) * og], wt[g * og:(g + 1) * og])
            part = np.empty((n, cg, h, wd), dtype=x.dtype)
            ck.col2im(dcols, n, cg, h, wd, kh, kw, stride[0], stride[1], padding[0], padding[1],
                      dilation[0], dilation[1], ho, wo, part)
            gx[:, g * cg:(g + 1) * cg] = part
        grad_input = empty(input.shape, input.dtype)
        as_array(grad_input)[...] = gx.reshape(input.shape)
    if output_mask[1]:
        gw = np.empty((o, cg * kh * kw), dtype=x.dtype)
        for g in range(groups):
            cols = _cols(np.ascontiguousarray(x[:, g * cg:(g + 1) * cg]), kh, kw, stride, padding, dilation, ho, wo)
            gw[g * og:(g + 1) * og] = _mm(gy[:, g * og:(g + 1) * og].T, cols)
        grad_weight = empty(weight.shape, weight.dtype)
        as_array(grad_weight)[...] = gw.reshape(weight.shape)
    if output_mask[2]:
        grad_bias = empty((o,), grad_output.dtype)
        as_array(grad_bias)[...] = gy.sum(axis=0, dtype=np.float64)
    launch("conv2d_backward", 4.0 * n * ho * wo * o * cg * kh * kw,
           nbytes(input) + nbytes(weight) + nbytes(grad_output), nbytes(input) + nbytes(weight))
    return grad_input, grad_weight, grad_bias


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
