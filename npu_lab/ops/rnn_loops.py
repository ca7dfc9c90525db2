"""One LSTM or GRU layer's time loop as one compiled call (:mod:`npu_lab.kernels.recurrent_loops`), for
:mod:`npu_lab.ops.rnn_sequence` when nothing records a profile.

Each step still launches its kernels (forward: the hidden product and the fused cell; backward: the
add of the two incoming gradients, the cell's backward and a product, and for a GRU the add of the
product to the cell's hidden-state gradient), accounted on the simulated clock with the figures the
per-step kernels give. What goes is the host's work between them, and the gathering
afterwards: each step's results are written straight into the layer's output and saved buffers, where the
per-step path stacks them (forward) and concatenates them (backward).
"""

from __future__ import annotations

import numpy as np
import torch

from ..device import native
from ..kernels import blas
from ..kernels import recurrent_loops as loops
from .common import as_array, launch
from .recurrent import zero_bias

__all__ = ["gru_backward", "gru_forward", "lstm_backward", "lstm_forward", "takes"]

_empty = native.load().empty
_NUMPY = {torch.float32: np.float32, torch.float64: np.float64}


def _routines(dtype: torch.dtype) -> tuple[int, int, int] | None:
    """PyTorch's ``?gemm`` (and thread-count routines) for ``dtype``, or None when products do not go to it."""
    np_dtype = _NUMPY.get(dtype)
    if np_dtype is None or not blas.ENABLED:
        return None
    return blas.torch_routines(np.dtype(np_dtype))


def takes(*tensors: torch.Tensor | None) -> bool:
    """Can the compiled loops run on these tensors: one float dtype whose products go to PyTorch's BLAS, each
    tensor contiguous (None, a missing bias, is allowed)?"""
    given = [t for t in tensors if t is not None]
    dtype = given[0].dtype
    return _routines(dtype) is not None and all(t.dtype is dtype and t.is_contiguous() for t in given)


def _scalars(dtype: torch.dtype) -> tuple[np.generic, np.generic]:
    np_dtype = _NUMPY[dtype]
    return np_dtype(1), np_dtype(0)


def _biases(b_ih: torch.Tensor | None, b_hh: torch.Tensor | None, width: int,
            dtype: torch.dtype) -> tuple[np.ndarray, np.ndarray]:
    if b_ih is None:
        zeros = zero_bias(width, np.dtype(_NUMPY[dtype]))
        return zeros, zeros
    return as_array(b_ih), as_array(b_hh)


def _launch_products(rows: int, width: int, hidden: int, size: int, dtype: torch.dtype,
                     forward: bool) -> None:
    """The launch of one step's hidden product: ``h @ W_hh^T`` forward, ``dG @ W_hh`` backward."""
    state, gates, weights = rows * hidden * size, rows * width * size, width * hidden * size
    if forward:
        launch("mm", 2.0 * rows * width * hidden, state + weights, gates, matrix=dtype)
    else:
        launch("mm", 2.0 * rows * hidden * width, gates + weights, state, matrix=dtype)


def lstm_forward(gates_x: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor | None, b_hh: torch.Tensor | None,
                 h0: torch.Tensor, c0: torch.Tensor, reverse: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every step of one LSTM layer-direction from its input projections ``gates_x`` (T, B, 4H): the hidden states
    (T, B, H), the cell states (T, B, H) and the cells' workspaces (T, B, 4H), in time order."""
    steps, rows, width = gates_x.shape
    hidden = width // 4
    dtype, dev = gates_x.dtype, gates_x.get_device()
    out, cs = _empty([steps, rows, hidden], dtype, dev), _empty([steps, rows, hidden], dtype, dev)
    ws, hg = _empty([steps, rows, width], dtype, dev), _empty([rows, width], dtype, dev)
    one, zero = _scalars(dtype)
    bias_i, bias_h = _biases(b_ih, b_hh, width, dtype)
    loops.lstm_layer_forward(*_routines(dtype), as_array(gates_x), as_array(w_hh), bias_i, bias_h, as_array(h0),
                             as_array(c0), as_array(out), as_array(cs), as_array(ws), as_array(hg), one, zero, reverse)
    size = gates_x.element_size()
    state, gates = rows * hidden * size, rows * width * size
    cell_read = 2 * gates + state + (0 if b_ih is None else 2 * width * size)
    for _ in range(steps):
        _launch_products(rows, width, hidden, size, dtype, True)
        launch("fused_lstm_cell", 30 * rows * hidden, cell_read, 2 * state + gates)
    return out, cs, ws


def lstm_backward(d_out: torch.Tensor, dh_last: torch.Tensor, dc_last: torch.Tensor, c0: torch.Tensor, cs: torch.Tensor,
             ws: torch.Tensor, w_hh: torch.Tensor, reverse: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Back through every step of one LSTM layer-direction whose :func:`lstm_forward` saved ``cs`` and ``ws``: the
    gradients
    of the gate pre-activations (T * B, 4H, in time order), of the initial hidden state and of the initial cell
    state. ``d_out`` (T, B, H, any strides) is the gradient of the layer's output; ``dh_last``/``dc_last`` those of
    its final states (contiguous)."""
    steps, rows, width = ws.shape
    hidden = width // 4
    dtype, dev = ws.dtype, ws.get_device()
    d_gates = _empty([steps, rows, width], dtype, dev)
    d_hy, dh = _empty([rows, hidden], dtype, dev), _empty([rows, hidden], dtype, dev)
    dc_even, dc_odd = _empty([rows, hidden], dtype, dev), _empty([rows, hidden], dtype, dev)
    one, zero = _scalars(dtype)
    loops.lstm_layer_backward(*_routines(dtype), as_array(d_out), as_array(dh_last), as_array(dc_last),
                              as_array(c0), as_array(cs), as_array(ws), as_array(w_hh), as_array(d_gates),
                              as_array(d_hy), as_array(dh), as_array(dc_even), as_array(dc_odd), one, zero, reverse)
    size = ws.element_size()
    state, gates = rows * hidden * size, rows * width * size
    for _ in range(steps):
        launch("add", rows * hidden, 2 * state, state)
        launch("fused_lstm_cell_backward", 20 * rows * hidden, 4 * state + gates, gates + state)
        _launch_products(rows, width, hidden, size, dtype, False)
    return d_gates.view(steps * rows, width), dh, dc_even if (steps - 1) % 2 == 0 else dc_odd


def gru_forward(gates_x: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor | None, b_hh: torch.Tensor | None,
                h0: torch.Tensor, reverse: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Every step of one GRU layer-direction from its input projections ``gates_x`` (T, B, 3H): the hidden states
    (T, B, H) and the cells' workspaces (T, B, 5H), in time order."""
    steps, rows, width = gates_x.shape
    hidden = width // 3
    dtype, dev = gates_x.dtype, gates_x.get_device()
    out, ws = _empty([steps, rows, hidden], dtype, dev), _empty([steps, rows, 5 * hidden], dtype, dev)
    hg = _empty([rows, width], dtype, dev)
    one, zero = _scalars(dtype)
    bias_i, bias_h = _biases(b_ih, b_hh, width, dtype)
    loops.gru_layer_forward(*_routines(dtype), as_array(gates_x), as_array(w_hh), bias_i, bias_h, as_array(h0),
                            as_array(out), as_array(ws), as_array(hg), one, zero, reverse)
    size = gates_x.element_size()
    state, gates = rows * hidden * size, rows * width * size
    cell_read = 2 * gates + state + (0 if b_ih is None else 2 * width * size)
    for _ in range(steps):
        _launch_products(rows, width, hidden, size, dtype, True)
        launch("fused_gru_cell", 25 * rows * hidden, cell_read, state + 5 * state)
    return out, ws


def gru_backward(d_out: torch.Tensor, dh_last: torch.Tensor, ws: torch.Tensor, w_hh: torch.Tensor,
                 reverse: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Back through every step of one GRU layer-direction whose :func:`gru_forward` saved ``ws``: the gradients of
    the input gates and of the hidden gates (each T * B, 3H, in time order) and of the initial hidden state."""
    steps, rows, width5 = ws.shape
    hidden = width5 // 5
    width = 3 * hidden
    dtype, dev = ws.dtype, ws.get_device()
    d_ig, d_hg = _empty([steps, rows, width], dtype, dev), _empty([steps, rows, width], dtype, dev)
    d_hy, d_hx, product, dh = (_empty([rows, hidden], dtype, dev) for _ in range(4))
    one, zero = _scalars(dtype)
    loops.gru_layer_backward(*_routines(dtype), as_array(d_out), as_array(dh_last), as_array(ws), as_array(w_hh),
                             as_array(d_ig), as_array(d_hg), as_array(d_hy), as_array(d_hx), as_array(product),
                             as_array(dh), one, zero, reverse)
    size = ws.element_size()
    state, gates = rows * hidden * size, rows * width * size
    for _ in range(steps):
        launch("add", rows * hidden, 2 * state, state)
        launch("fused_gru_cell_backward", 15 * rows * hidden, state + 5 * state, 2 * gates + state)
        _launch_products(rows, width, hidden, size, dtype, False)
        launch("add", rows * hidden, 2 * state, state)
    return d_ig.view(steps * rows, width), d_hg.view(steps * rows, width), dh
