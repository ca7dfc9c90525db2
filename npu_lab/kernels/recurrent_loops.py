"""The time loop of one LSTM or GRU layer as one compiled call, forward and backward.

A recurrent step is two small kernels (the hidden product ``h @ W_hh^T`` and the fused cell), and the next
step needs both. Run from Python, each of them pays the host's cost of a call into a kernel (argument
checks, outputs, a dispatch into numba): for a 16 x 128 step about a third of the step's time. These
loops run every step of a layer without returning to Python: per step the product with PyTorch's BLAS
(:func:`npu_lab.kernels.blas.gemm_addresses`, as ``mm`` runs it) and the cell with the very kernels of
:mod:`npu_lab.kernels.recurrent`, each step's results written straight into the layer's output and saved
buffers (no gathering afterwards). The caller accounts the same launches on the simulated clock.

Layouts (LSTM; a GRU has 3H gate columns and a (T, B, 5H) workspace, and no cell state): ``gates_x``
(T, B, 4H) the input projections of every step, ``w_hh`` (4H, H), ``out`` and ``cs`` (T, B, H) the hidden and
cell states, ``ws`` (T, B, 4H) the cells' workspaces; every array C-contiguous except ``d_out``.
"""

import numba

from . import blas
from .recurrent import gru_backward, gru_forward, lstm_backward, lstm_forward

_opts = dict(cache=True, nogil=True)
_T, _N = ord("T"), ord("N")


@numba.njit(**_opts)
def lstm_layer_forward(fn, set_threads, get_threads, gates_x, w_hh, bias_i, bias_h, h0, c0, out, cs, ws, hg, one,
                       zero, reverse):
    """Every step of one layer-direction: ``hg = h_prev @ w_hh^T``, then the cell into ``out[t], cs[t], ws[t]``
    (``hg`` (B, 4H) is scratch). ``reverse`` walks the steps last to first."""
    steps, rows, width = gates_x.shape
    hidden = width // 4
    size = out.itemsize
    h_prev, c_prev = h0, c0
    for s in range(steps):
        t = steps - 1 - s if reverse else s
        # row-major hg = h_prev W^T is column-major hg^T = W h_prev^T: W (row-major, so "T"), h_prev^T ("N")
        blas.gemm_addresses(fn, set_threads, get_threads, _T, _N, width, rows, hidden, w_hh.ctypes.data, hidden,
                            h_prev.ctypes.data, hidden, hg.ctypes.data, size, one, zero)
        lstm_forward(gates_x[t], hg, c_prev, bias_i, bias_h, one, out[t], cs[t], ws[t])
        h_prev, c_prev = out[t], cs[t]


@numba.njit(**_opts)
def _add(a, b, out):
    """``out = a + b`` for (B, H) matrices (``a`` of any strides)."""
    rows, cols = out.shape
    for i in range(rows):
        for j in range(cols):
            out[i, j] = a[i, j] + b[i, j]


@numba.njit(**_opts)
def lstm_layer_backward(fn, set_threads, get_threads, d_out, dh_last, dc_last, c0, cs, ws, w_hh, d_gates, d_hy, dh,
                        dc_even, dc_odd, one, zero, reverse):
    """Back through every step of one layer-direction, the forward's last step first: ``d_hy = d_out[t] + dh``,
    the cell's backward into ``d_gates[t]`` and a cell-state gradient, then ``dh = d_gates[t] @ w_hh``.

    ``dh_last``/``dc_last``: the gradients of the final states; ``d_hy`` scratch; ``dh`` ends as the initial hidden
    state's gradient; the cell-state gradients alternate between ``dc_even`` and ``dc_odd`` (step ``s`` writes
    ``dc_even`` when ``s`` is even), so the initial cell state's gradient ends in the one the last step wrote."""
    steps, rows, width = d_gates.shape
    hidden = width // 4
    size = d_gates.itemsize
    h_grad, c_grad = dh_last, dc_last
    for s in range(steps):
        t = s if reverse else steps - 1 - s
        p = t + 1 if reverse else t - 1  # the step whose cell state this one started from
        cx = cs[p] if 0 <= p < steps else c0
        _add(d_out[t], h_grad, d_hy)
        c_next = dc_even if s % 2 == 0 else dc_odd
        lstm_backward(d_hy, c_grad, cx, cs[t], ws[t], one, d_gates[t], c_next)
        # row-major dh = dG W is column-major dh^T = W^T dG^T: both row-major operands read as they are ("N")
        blas.gemm_addresses(fn, set_threads, get_threads, _N, _N, hidden, rows, width, w_hh.ctypes.data, hidden,
                            d_gates[t].ctypes.data, width, dh.ctypes.data, size, one, zero)
        h_grad, c_grad = dh, c_next


@numba.njit(**_opts)
def gru_layer_forward(fn, set_threads, get_threads, gates_x, w_hh, bias_i, bias_h, h0, out, ws, hg, one, zero,
                      reverse):
    """:func:`lstm_layer_forward` for a GRU: ``hg = h_prev @ w_hh^T``, then the cell into ``out[t], ws[t]``."""
    steps, rows, width = gates_x.shape
    hidden = width // 3
    size = out.itemsize
    h_prev = h0
    for s in range(steps):
        t = steps - 1 - s if reverse else s
        blas.gemm_addresses(fn, set_threads, get_threads, _T, _N, width, rows, hidden, w_hh.ctypes.data, hidden,
                            h_prev.ctypes.data, hidden, hg.ctypes.data, size, one, zero)
        gru_forward(gates_x[t], hg, h_prev, bias_i, bias_h, one, out[t], ws[t])
        h_prev = out[t]


@numba.njit(**_opts)
def gru_layer_backward(fn, set_threads, get_threads, d_out, dh_last, ws, w_hh, d_ig, d_hg, d_hy, d_hx, product, dh,
                       one, zero, reverse):
    """Back through every step of a GRU layer-direction, the forward's last step first: ``d_hy = d_out[t] + dh``,
    the cell's backward into ``d_ig[t], d_hg[t]`` and ``d_hx``, then ``dh = d_hx + d_hg[t] @ w_hh`` (the product
    into ``product``, then the add: the per-step loop's two launches). ``dh`` ends as the initial state's
    gradient."""
    steps, rows, width = d_ig.shape
    hidden = width // 3
    size = d_ig.itemsize
    h_grad = dh_last
    for s in range(steps):
        t = s if reverse else steps - 1 - s
        _add(d_out[t], h_grad, d_hy)
        gru_backward(d_hy, ws[t], one, d_ig[t], d_hg[t], d_hx)
        blas.gemm_addresses(fn, set_threads, get_threads, _N, _N, hidden, rows, width, w_hh.ctypes.data, hidden,
                            d_hg[t].ctypes.data, width, product.ctypes.data, size, one, zero)
        _add(d_hx, product, dh)
        h_grad = dh
