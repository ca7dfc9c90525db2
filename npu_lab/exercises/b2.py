"""Bring-up milestone 2: a CNN trains on the bare device (convolution, batch norm, max pooling).

Three checks, on the kernels registered for ``npu`` now, with milestone 1's kernels loaded beside them:

* ``b2.conv`` - ``convolution_overrideable`` and ``convolution_backward``: padding, stride, dilation, groups,
  no bias, a 1x1 kernel, a non-contiguous input, PyTorch's shape errors;
* ``b2.norm_pool`` - ``native_batch_norm`` and its backward (training and evaluation, the running statistics,
  a channel with zero variance, no affine parameters, 2-D inputs) and ``max_pool2d_with_indices`` and its
  backward (padding, stride, ``ceil_mode``, overlapping windows, NaN);
* ``b2.train`` - ``models.SmallCNN`` trains three SGD steps to the CPU's losses, weights and running statistics.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from ..grading.device import OpCase
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester
from .bringup_checks import TIMEOUT, Training, gen, grade_cases, randn, train_check

chapter("b2", "Bring-up 2: a CNN on the bare device", [
    "A backend gives convolution through convolution_overrideable, and its gradient through convolution_backward",
    "PyTorch checks a convolution's shapes before the backend's kernel runs",
    "Batch norm in training normalizes with the batch's statistics and updates the running ones in place",
    "A structured pooling operator arrives with its output and indices already sized",
    "Max pooling's backward scatters each gradient to the index the forward chose",
])

CONV_OPS = ["aten::convolution_overrideable", "aten::convolution_backward"]


def conv_cases() -> list[OpCase]:
    c = OpCase
    tol = {"rtol": 1e-4, "atol": 1e-4}
    return [
        c("conv2d 3x3, padding 1, with bias (SmallCNN's), forward and backward", "convolution",
          lambda: [randn(2, 3, 8, 8), randn(4, 3, 3, 3, seed=1), randn(4, seed=2)],
          lambda x, w, b: F.conv2d(x, w, b, padding=1), grad=True, **tol,
          hint="out[n, co, oh, ow] = bias[co] + the sum over ci, kh, kw of x[n, ci, oh*s - p + kh*d, ...] * "
               "w[co, ci, kh, kw]; positions in the padding read 0"),
        c("conv2d, stride 2, no padding", "convolution",
          lambda: [randn(2, 3, 9, 9), randn(5, 3, 3, 3, seed=1), randn(5, seed=2)],
          lambda x, w, b: F.conv2d(x, w, b, stride=2), grad=True, **tol,
          hint="the output has (H - K) // stride + 1 rows"),
        c("conv2d, dilation 2", "convolution", lambda: [randn(1, 2, 9, 9), randn(3, 2, 3, 3, seed=1)],
          lambda x, w: F.conv2d(x, w, dilation=2, padding=1), grad=True, hidden=True, **tol,
          hint="dilation spaces the kernel's taps: input row oh*stride - padding + kh*dilation"),
        c("conv2d with groups=2", "convolution", lambda: [randn(2, 4, 6, 6), randn(6, 2, 3, 3, seed=1)],
          lambda x, w: F.conv2d(x, w, groups=2), grad=True, hidden=True, **tol,
          hint="groups: output channel co reads only the input channels of its group, co // (C_out // groups)"),
        c("conv2d 1x1 without bias", "convolution", lambda: [randn(3, 4, 5, 5), randn(2, 4, 1, 1, seed=1)],
          F.conv2d, grad=True, hidden=True, **tol,
          hint="bias is None here: add nothing (the backward's grad_bias is not asked for)"),
        c("conv2d of a non-contiguous input (a transposed image)", "convolution",
          lambda: [randn(2, 3, 7, 6), randn(4, 3, 3, 3, seed=1)], lambda x, w: F.conv2d(x, w, padding=1),
          layout=lambda x, w: [x.transpose(2, 3), w], grad=True, hidden=True, **tol,
          hint="the input is a view with swapped strides: read it through its strides, or make it contiguous"),
        c("conv2d, a 5x5 kernel on a 4x4 image with padding 2", "convolution",
          lambda: [randn(1, 1, 4, 4), randn(2, 1, 5, 5, seed=1), randn(2, seed=2)],
          lambda x, w, b: F.conv2d(x, w, b, padding=2), grad=True, hidden=True, **tol,
          hint="most taps fall in the padding: check both bounds of every input index"),
        c("input channels that do not match the weight raise RuntimeError", "convolution",
          lambda: [randn(1, 3, 5, 5), randn(2, 4, 3, 3, seed=1)], F.conv2d,
          hint="PyTorch checks the shapes before your kernel runs; your kernel must not swallow the error"),
        c("a kernel larger than the padded input raises RuntimeError", "convolution",
          lambda: [randn(1, 1, 2, 2), randn(1, 1, 3, 3, seed=1)], F.conv2d, hidden=True,
          hint="the output would have size 0 or less: raise RuntimeError, as the CPU does"),
    ]


@exercise("b2.conv", "Convolution: forward and backward", names=[], timeout=TIMEOUT)
def _conv(t: Tester) -> None:
    grade_cases(t, conv_cases(), CONV_OPS)


NORM_POOL_OPS = ["aten::native_batch_norm", "aten::native_batch_norm_backward", "aten::max_pool2d_with_indices",
                 "aten::max_pool2d_with_indices_backward"]


def _bn(training: bool, momentum: float = 0.1, affine: bool = True):
    """batch_norm with fresh running statistics (on the input's device), returning them after the call too."""
    def fn(x, *wb):
        c = x.shape[1]
        rm = torch.linspace(-0.5, 0.5, c).to(x.device)
        rv = torch.linspace(0.5, 2.0, c).to(x.device)
        w, b = wb if affine else (None, None)
        out = F.batch_norm(x, rm, rv, w, b, training=training, momentum=momentum, eps=1e-5)
        return out, rm, rv
    return fn


def _constant_channel() -> list[torch.Tensor]:
    x = randn(4, 3, 5, 5)
    x[:, 1] = 0.25  # a channel whose batch variance is 0: eps alone keeps invstd finite
    return [x, randn(3, seed=1), randn(3, seed=2)]


def norm_pool_cases() -> list[OpCase]:
    c = OpCase
    tol = {"rtol": 1e-4, "atol": 1e-4}
    return [
        c("batch norm in training, forward, backward and the running statistics", "native_batch_norm",
          lambda: [randn(4, 3, 5, 5), randn(3, seed=1), randn(3, seed=2)], _bn(True), grad=True, **tol,
          hint="training: normalize with the batch's mean and biased variance over (N, H, W); then running_mean = "
               "(1 - momentum) * running_mean + momentum * mean, and running_var the same with the unbiased variance"),
        c("batch norm in evaluation uses the running statistics", "native_batch_norm",
          lambda: [randn(4, 3, 5, 5), randn(3, seed=1), randn(3, seed=2)], _bn(False), grad=True, **tol,
          hint="evaluation: (x - running_mean) / sqrt(running_var + eps) * weight + bias, and the running "
               "statistics do not change; the gradient is then grad * weight / sqrt(running_var + eps)"),
        c("batch norm of a channel with zero variance", "native_batch_norm", _constant_channel, _bn(True), grad=True,
          hidden=True, **tol, hint="eps keeps 1 / sqrt(var + eps) finite: the constant channel becomes bias"),
        c("batch norm without affine parameters", "native_batch_norm", lambda: [randn(3, 2, 4, 4)],
          _bn(True, affine=False), grad=True, hidden=True, **tol,
          hint="weight and bias may be None: treat them as 1 and 0"),
        c("batch norm of a 2-D (N, C) input, as BatchNorm1d", "native_batch_norm",
          lambda: [randn(6, 4), randn(4, seed=1), randn(4, seed=2)], _bn(True), grad=True, hidden=True, **tol,
          hint="the statistics are over every dimension but the channel one (dimension 1), whatever the rank"),
        c("max pool 2x2 (SmallCNN's), forward and backward", "max_pool2d_with_indices", lambda: [randn(2, 3, 8, 8)],
          lambda x: F.max_pool2d(x, 2), grad=True,
          hint="each output is the maximum of its window; the backward puts the gradient at the input it came from"),
        c("max pool 3x3, stride 2, padding 1", "max_pool2d_with_indices", lambda: [randn(1, 2, 7, 7)],
          lambda x: F.max_pool2d(x, 3, 2, 1), grad=True, hidden=True,
          hint="padding is -inf for max pooling: a window never picks a padded position"),
        c("max pool with ceil_mode (a last, partial window)", "max_pool2d_with_indices", lambda: [randn(1, 1, 5, 5)],
          lambda x: F.max_pool2d(x, 2, ceil_mode=True), grad=True, hidden=True,
          hint="the output size is already right (the meta function sized it): clip each window at the edge"),
        c("max pool with overlapping windows (stride 1) sums gradients", "max_pool2d_with_indices_backward",
          lambda: [randn(1, 1, 5, 5)], lambda x: F.max_pool2d(x, 2, 1), grad=True, hidden=True,
          hint="one input can be the maximum of several windows: add their gradients, do not overwrite"),
        c("max pool returns the indices of the maxima", "max_pool2d_with_indices", lambda: [randn(2, 2, 6, 6)],
          lambda x: F.max_pool2d(x, 3, 3, return_indices=True), hidden=True,
          hint="the index is the flat position ih * W + iw within the (H, W) plane"),
        c("max pool of a plane with NaN propagates it", "max_pool2d_with_indices",
          lambda: [torch.tensor([[[[1.0, float("nan")], [3.0, 2.0]]]])],
          lambda x: F.max_pool2d(x, 2, return_indices=True), hidden=True,
          hint="the CPU's max pooling picks a NaN over any number (and reports its index)"),
        c("max pool of a non-contiguous input", "max_pool2d_with_indices", lambda: [randn(2, 3, 6, 8)],
          lambda x: F.max_pool2d(x, 2), layout=lambda x: [x.transpose(2, 3)], grad=True, hidden=True,
          hint="the input is a transposed view: read it through its strides or make it contiguous first"),
        c("a pooling window larger than the padded input raises RuntimeError", "max_pool2d_with_indices",
          lambda: [randn(1, 1, 2, 2)], lambda x: F.max_pool2d(x, 3), hidden=True,
          hint="the output would have size 0 or less: raise RuntimeError, as the CPU does"),
    ]


@exercise("b2.norm_pool", "Batch norm and max pooling: forward and backward", names=[], timeout=TIMEOUT)
def _norm_pool(t: Tester) -> None:
    grade_cases(t, norm_pool_cases(), NORM_POOL_OPS)


def _cnn(device_name: str):
    from .. import models

    model = models.SmallCNN(channels=(8, 16), size=16).to(device_name)
    g = gen(7)
    x = torch.randn(4, 3, 16, 16, generator=g).to(device_name)
    y = torch.randint(0, 10, (4,), generator=g).to(device_name)
    return model, x, y, F.cross_entropy


TRAINING = Training(
    "SmallCNN (SGD, momentum 0.9)", _cnn, lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9), 3,
    "batch norm updates running_mean and running_var in place in every training step: check the momentum and "
    "the unbiased variance")


@exercise("b2.train", "Train SmallCNN on the bare device: the CPU's losses, weights and running statistics",
          names=[], timeout=TIMEOUT)
def _train_check(t: Tester) -> None:
    train_check(t, TRAINING, CONV_OPS + NORM_POOL_OPS)
