"""Recurrent cells: the fused LSTM and GRU cell operators ``nn.LSTM``/``nn.GRU`` use on accelerators.

ATen's LSTM and GRU layers compute the gate products with ``matmul`` and then call one fused
operator per time step for the gate arithmetic, on every device except the CPU (which composes it
from small operators): ``aten::_thnn_fused_lstm_cell`` and ``aten::_thnn_fused_gru_cell``, with
backward operators that reuse a *workspace* of the activated gates the forward saved. The CPU has
no kernel for them, so a PrivateUse1 device must provide them before ``nn.LSTM`` can run on it.
Each is one kernel here (:mod:`npu_lab.kernels.recurrent`), with CUDA's gate layouts, workspace and
argument checks; a bias gradient is one more (a column sum).
"""

from __future__ import annotations

import numpy as np
import torch

from ..device import native
from ..kernels import recurrent as rk
from ..kernels.threads import sized
from .common import as_array, check_same_device, empty, launch, nbytes
from .registry import register


def _describe(position: int, name: str) -> str:
    return f"argument #{position} '{name}'"


def _check_sizes(op: str, input_gates, hidden_gates, input_bias, hidden_bias, factor: int, prev) -> None:
    """CUDA's ``checkSizes`` for the fused cells: same-size 2-D gates, 1-D biases of the gates' width,
    a previous state of ``batch * width / factor`` elements, and one device for all."""
    where = f"(while checking arguments for {op})"
    for position, name, t, dim in ((1, "input_gates", input_gates, 2), (4, "input_bias", input_bias, 1),
                                   (3, "prev_hidden", prev, 2)):
        if t is not None and t.dim() != dim:
            raise RuntimeError(f"Expected {dim}-dimensional tensor, but got {t.dim()}-dimensional tensor for "
                               f"{_describe(position, name)} {where}")
        if name == "input_gates" and hidden_gates.shape != t.shape:
            raise RuntimeError(f"Expected tensor for {_describe(1, 'input_gates')} to have same size as tensor "
                               f"for {_describe(2, 'hidden_gates')}; but {list(t.shape)} does not equal "
                               f"{list(hidden_gates.shape)} {where}")
    width = input_gates.shape[1]
    if input_bias is not None:
        if input_bias.numel() != width:
            raise RuntimeError(f"Expected tensor for {_describe(4, 'input_bias')} to have {width} elements; but "
                               f"it actually has {input_bias.numel()} elements {where}")
        if hidden_bias is None or hidden_bias.shape != input_bias.shape:
            raise RuntimeError(f"Expected tensor for {_describe(4, 'input_bias')} to have same size as tensor "
                               f"for {_describe(5, 'hidden_bias')}; but {list(input_bias.shape)} does not equal "
                               f"{None if hidden_bias is None else list(hidden_bias.shape)} {where}")
    if hidden_bias is not None and (hidden_bias.dim() != 1 or hidden_bias.numel() != width):
        raise RuntimeError(f"Expected tensor for {_describe(5, 'hidden_bias')} to be 1-dimensional with {width} "
                           f"elements; but it has shape {list(hidden_bias.shape)} {where}")
    want = input_gates.shape[0] * width // factor
    if width % factor or prev.numel() != want:
        raise RuntimeError(f"Expected tensor for {_describe(3, 'prev_hidden')} to have {want} elements; but it "
                           f"actually has {prev.numel()} elements {where}")
    check_same_device(op, input_gates, hidden_gates, input_bias, hidden_bias, prev)
    dtypes = {t.dtype for t in (input_gates, hidden_gates, input_bias, hidden_bias, prev) if t is not None}
    if len(dtypes) > 1:
        raise RuntimeError(f"{op}: expected all tensors to have one dtype, got {sorted(map(str, dtypes))}")


def _check_saved(op: str, workspace: torch.Tensor, factor: int, **tensors: torch.Tensor | None) -> tuple[int, int]:
    """(batch, hidden) of a backward's saved workspace, after checking every tensor against it."""
    check_same_device(op, workspace, *tensors.values())
    if workspace.dim() != 2 or workspace.device.type != "npu" or workspace.shape[1] % factor:
        raise RuntimeError(f"{op}: expected the workspace to be a 2-D npu tensor of {factor} x hidden columns, "
                           f"got shape {list(workspace.shape)} on {workspace.device}")
    rows, hidden = workspace.shape[0], workspace.shape[1] // factor
    for name, t in tensors.items():
        if t is not None and (t.numel() != rows * hidden or t.device.type != "npu" or t.dtype != workspace.dtype):
            raise RuntimeError(f"{op}: expected {name} to be an npu tensor of {workspace.dtype} with {rows * hidden} "
                               f"elements (the workspace's batch {rows} x hidden {hidden}), got {t.dtype} with "
                               f"{t.numel()} elements on {t.device}")
    return rows, hidden


def _matrix(t: torch.Tensor, rows: int, cols: int) -> np.ndarray:
    """A (rows, cols) NumPy view of a contiguous copy of ``t`` (no copy when it is contiguous)."""
    return as_array(t.contiguous()).reshape(rows, cols)


def _biases(input_bias, hidden_bias, like: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """The two biases as vectors (zeros where there are none), and whether there are any."""
    def vector(bias: torch.Tensor | None) -> np.ndarray:
        if bias is None:
            return np.zeros(like.shape[1], like.dtype)
        return as_array(bias.contiguous()).reshape(-1)

    return vector(input_bias), vector(hidden_bias), input_bias is not None or hidden_bias is not None


def _column_sums(grad: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    out = empty((cols,), grad.dtype)
    sized(rk.column_sums, rows * cols)(as_array(grad).reshape(rows, cols), as_array(out))
    launch("column_sum", rows * cols, nbytes(grad), nbytes(out))
    return out


_current_device = native.load().current_device
_empty = native.load().empty
_FAST_DTYPES = (torch.float32, torch.float64)
#: read-only zero biases per (width, dtype), for cells without biases
_ZEROS: dict[tuple[int, np.dtype], np.ndarray] = {}


def zero_bias(width: int, dtype: np.dtype) -> np.ndarray:
    """A read-only vector of ``width`` zeros: the bias of a cell without biases (made once per width and dtype)."""
    z = _ZEROS.get((width, dtype))
    if z is None:
        z = _ZEROS[(width, dtype)] = np.zeros(width, dtype)
        z.flags.writeable = False
    return z


def _plain(dtype: torch.dtype, dev: int, *tensors: torch.Tensor | None) -> bool:
    """Every tensor given is a contiguous ``dtype`` tensor on npu ``dev`` (None is allowed)."""
    for t in tensors:
        if t is not None and not (isinstance(t, torch.Tensor) and t.dtype is dtype and t.get_device() == dev
                                  and t.is_contiguous()):
            return False
    return True


def _fast_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """The cell of an ``nn.LSTM`` step (contiguous float tensors of one dtype on the current device, the shapes
    CUDA's checks accept, both biases or neither): the kernel's work with less Python; None for anything else."""
    if not isinstance(input_gates, torch.Tensor) or input_gates.dtype not in _FAST_DTYPES:
        return None
    dtype, dev = input_gates.dtype, input_gates.get_device()
    if dev != _current_device() or not _plain(dtype, dev, hidden_gates, cx, input_bias, hidden_bias, input_gates):
        return None
    if input_gates.dim() != 2 or hidden_gates.shape != input_gates.shape or cx.dim() != 2:
        return None
    rows, width = input_gates.shape
    hidden = width // 4
    if width % 4 or tuple(cx.shape) != (rows, hidden) or (input_bias is None) != (hidden_bias is None):
        return None
    if input_bias is not None and (tuple(input_bias.shape) != (width,) or tuple(hidden_bias.shape) != (width,)):
        return None
    ig = as_array(input_gates)
    if input_bias is None:
        bias_i = bias_h = zero_bias(width, ig.dtype)
    else:
        bias_i, bias_h = as_array(input_bias), as_array(hidden_bias)
    hy, cy, workspace = _empty([rows, hidden], dtype, dev), _empty([rows, hidden], dtype, dev), \
        _empty([rows, width], dtype, dev)
    sized(rk.lstm_forward, rows * width)(ig, as_array(hidden_gates), as_array(cx), bias_i, bias_h,
                                         ig.dtype.type(1), as_array(hy), as_array(cy), as_array(workspace))
    size = ig.itemsize
    read = (2 * rows * width + rows * hidden + (0 if input_bias is None else 2 * width)) * size
    launch("fused_lstm_cell", 30 * rows * hidden, read, (2 * rows * hidden + rows * width) * size)
    return hy, cy, workspace


def _fast_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """The cell's backward inside ``nn.LSTM``'s backward (both gradients given, no bias gradient, contiguous
    float tensors of one dtype on the current device); None for anything else."""
    if has_bias or grad_hy is None or grad_cy is None or not isinstance(workspace, torch.Tensor) \
            or workspace.dtype not in _FAST_DTYPES or workspace.dim() != 2:
        return None
    dtype, dev = workspace.dtype, workspace.get_device()
    rows, width = workspace.shape
    hidden = width // 4
    if width % 4 or dev != _current_device() or not _plain(dtype, dev, grad_hy, grad_cy, cx, cy, workspace):
        return None
    if any(tuple(t.shape) != (rows, hidden) for t in (grad_hy, grad_cy, cx, cy)):
        return None
    grad_gates, grad_cx = _empty([rows, width], dtype, dev), _empty([rows, hidden], dtype, dev)
    ws = as_array(workspace)
    sized(rk.lstm_backward, rows * width)(as_array(grad_hy), as_array(grad_cy), as_array(cx), as_array(cy), ws,
                                          ws.dtype.type(1), as_array(grad_gates), as_array(grad_cx))
    size = ws.itemsize
    launch("fused_lstm_cell_backward", 20 * rows * hidden, (4 * rows * hidden + rows * width) * size,
           (rows * width + rows * hidden) * size)
    return grad_gates, grad_cx, None


@register("_thnn_fused_lstm_cell", fast=_fast_lstm_cell)
def fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """Gates i, f, g, o (in that order along dim 1); ``cy = f*cx + i*g``, ``hy = o*tanh(cy)``."""
    op = "_thnn_fused_lstm_cell"
    _check_sizes(op, input_gates, hidden_gates, input_bias, hidden_bias, 4, cx)
    rows, width = input_gates.shape
    hidden = width // 4
    hy, cy, workspace = empty(cx.shape, cx.dtype), empty(cx.shape, cx.dtype), empty((rows, width), cx.dtype)
    ig = _matrix(input_gates, rows, width)
    bias_i, bias_h, has_bias = _biases(input_bias, hidden_bias, ig)
    sized(rk.lstm_forward, rows * width)(
        ig, _matrix(hidden_gates, rows, width), _matrix(cx, rows, hidden), bias_i, bias_h, ig.dtype.type(1),
        as_array(hy).reshape(rows, hidden), as_array(cy).reshape(rows, hidden), as_array(workspace))
    read = nbytes(input_gates) + nbytes(hidden_gates) + nbytes(cx)
    read += sum(nbytes(t) for t in (input_bias, hidden_bias) if t is not None)
    launch("fused_lstm_cell", 30 * rows * hidden, read, 2 * nbytes(cy) + nbytes(workspace))
    return hy, cy, workspace


@register("_thnn_fused_lstm_cell_backward_impl", fast=_fast_lstm_cell_backward)
def fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """(grad of the gate pre-activations, grad of cx, grad of the bias) from the saved gates."""
    op = "_thnn_fused_lstm_cell_backward_impl"
    if grad_hy is None and grad_cy is None:
        return None, None, None
    rows, hidden = _check_saved(op, workspace, 4, grad_hy=grad_hy, grad_cy=grad_cy, cx=cx, cy=cy)
    width = 4 * hidden
    dtype = workspace.dtype
    grad_gates, grad_cx = empty((rows, width), dtype), empty(cx.shape, dtype)
    ws = as_array(workspace.contiguous())
    zeros = np.zeros((rows, hidden), ws.dtype) if grad_hy is None or grad_cy is None else None
    sized(rk.lstm_backward, rows * width)(
        zeros if grad_hy is None else _matrix(grad_hy, rows, hidden),
        zeros if grad_cy is None else _matrix(grad_cy, rows, hidden),
        _matrix(cx, rows, hidden), _matrix(cy, rows, hidden), ws, ws.dtype.type(1), as_array(grad_gates),
        as_array(grad_cx).reshape(rows, hidden))
    read = nbytes(cx) + nbytes(cy) + nbytes(workspace) + sum(nbytes(t) for t in (grad_hy, grad_cy) if t is not None)
    launch("fused_lstm_cell_backward", 20 * rows * hidden, read, nbytes(grad_gates) + nbytes(grad_cx))
    grad_bias = _column_sums(grad_gates, rows, width) if has_bias else None
    return grad_gates, grad_cx, grad_bias


@register("_thnn_fused_gru_cell")
def fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """Gates r, z, n: ``n = tanh(in + r*hn)``, ``hy = n + z*(hx - n)``."""
    op = "_thnn_fused_gru_cell"
    _check_sizes(op, input_gates, hidden_gates, input_bias, hidden_bias, 3, hx)
    rows, width = input_gates.shape
    hidden = width // 3
    hy, workspace = empty(hx.shape, hx.dtype), empty((rows, 5 * hidden), hx.dtype)
    ig = _matrix(input_gates, rows, width)
    bias_i, bias_h, has_bias = _biases(input_bias, hidden_bias, ig)
    sized(rk.gru_forward, rows * width)(
        ig, _matrix(hidden_gates, rows, width), _matrix(hx, rows, hidden), bias_i, bias_h, ig.dtype.type(1),
        as_array(hy).reshape(rows, hidden), as_array(workspace))
    read = nbytes(input_gates) + nbytes(hidden_gates) + nbytes(hx)
    read += sum(nbytes(t) for t in (input_bias, hidden_bias) if t is not None)
    launch("fused_gru_cell", 25 * rows * hidden, read, nbytes(hy) + nbytes(workspace))
    return hy, workspace


@register("_thnn_fused_gru_cell_backward")
def fused_gru_cell_backward(grad_hy, workspace, has_bias):
    """Gradients of the input gates, hidden gates, hx and the two biases, from the saved workspace."""
    op = "_thnn_fused_gru_cell_backward"
    rows, hidden = _check_saved(op, workspace, 5, grad_hy=grad_hy)
    dtype = workspace.dtype
    grad_ig, grad_hg = empty((rows, 3 * hidden), dtype), empty((rows, 3 * hidden), dtype)
    grad_hx = empty(grad_hy.shape, dtype)
    ws = as_array(workspace.contiguous())
    sized(rk.gru_backward, rows * 3 * hidden)(
        _matrix(grad_hy, rows, hidden), ws, ws.dtype.type(1), as_array(grad_ig), as_array(grad_hg),
        as_array(grad_hx).reshape(rows, hidden))
    launch("fused_gru_cell_backward", 15 * rows * hidden, nbytes(grad_hy) + nbytes(workspace),
           nbytes(grad_ig) + nbytes(grad_hg) + nbytes(grad_hx))
    if has_bias:
        return (grad_ig, grad_hg, grad_hx, _column_sums(grad_ig, rows, 3 * hidden),
                _column_sums(grad_hg, rows, 3 * hidden))
    return grad_ig, grad_hg, grad_hx, None, None
