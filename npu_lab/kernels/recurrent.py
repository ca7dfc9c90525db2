"""numba kernels for the fused recurrent cells (LSTM and GRU), one launch per time step and direction.

ATen's ``nn.LSTM``/``nn.GRU`` on an accelerator compute each step's gate products with two matrix
products and hand the rest to one fused operator. These kernels are that operator: every gate's
activation, the new cell and hidden state, and the *workspace* the backward reuses, in one pass over
the batch. The layouts are CUDA's: LSTM gates ``i, f, g, o`` and GRU gates ``r, z, n`` side by side
along dimension 1 (``(batch, 4 * hidden)`` and ``(batch, 3 * hidden)``).

Arithmetic runs in the tensors' dtype (float32 as CUDA's kernels do), with the vectorisable
``exp``/``tanh`` of :mod:`npu_lab.kernels.fast_math`.
"""

import numba
from numba import prange

from .fast_math import fast_sigmoid, fast_tanh

_opts = dict(cache=True, nogil=True, error_model="numpy")


@numba.njit(parallel=True, **_opts)
def lstm_forward(ig, hg, cx, bias_i, bias_h, one, hy, cy, ws):
    """``ig, hg``: (B, 4H) gate products, ``bias_i, bias_h`` (4H,) their biases (zeros for none),
    ``one`` 1 in the compute dtype; writes hy, cy (B, H) and the activated gates ``ws`` (B, 4H)."""
    rows, h = cx.shape
    for b in prange(rows):
        for j in range(h):
            i = fast_sigmoid(ig[b, j] + hg[b, j] + (bias_i[j] + bias_h[j]))
            f = fast_sigmoid(ig[b, h + j] + hg[b, h + j] + (bias_i[h + j] + bias_h[h + j]))
            g = fast_tanh(ig[b, 2 * h + j] + hg[b, 2 * h + j] + (bias_i[2 * h + j] + bias_h[2 * h + j]))
            o = fast_sigmoid(ig[b, 3 * h + j] + hg[b, 3 * h + j] + (bias_i[3 * h + j] + bias_h[3 * h + j]))
            ws[b, j] = i
            ws[b, h + j] = f
            ws[b, 2 * h + j] = g
            ws[b, 3 * h + j] = o
            c = f * cx[b, j] + i * g
            cy[b, j] = c
            hy[b, j] = o * fast_tanh(c)


@numba.njit(parallel=True, **_opts)
def lstm_backward(ghy, gcy, cx, cy, ws, one, grad_gates, grad_cx):
    """Gradients of the gate pre-activations (B, 4H) and of cx (B, H) from the saved gates; a missing
    ``ghy``/``gcy`` is passed as zeros."""
    rows, h = cx.shape
    for b in prange(rows):
        for j in range(h):
            i, f, g, o = ws[b, j], ws[b, h + j], ws[b, 2 * h + j], ws[b, 3 * h + j]
            t = fast_tanh(cy[b, j])
            gh = ghy[b, j]
            gc = gcy[b, j] + gh * o * (one - t * t)
            grad_gates[b, j] = gc * g * i * (one - i)
            grad_gates[b, h + j] = gc * cx[b, j] * f * (one - f)
            grad_gates[b, 2 * h + j] = gc * i * (one - g * g)
            grad_gates[b, 3 * h + j] = gh * t * o * (one - o)
            grad_cx[b, j] = gc * f


@numba.njit(parallel=True, **_opts)
def column_sums(x, out):
    """``out[j] = sum over rows of x[:, j]`` (a bias gradient), accumulated in float64."""
    rows, cols = x.shape
    for j in prange(cols):
        acc = 0.0
        for b in range(rows):
            acc += x[b, j]
        out[j] = acc


@numba.njit(parallel=True, **_opts)
def gru_forward(ig, hg, hx, bias_i, bias_h, one, hy, ws):
    """``ig, hg``: (B, 3H) gate products, biases (3H,) (zeros for none); writes hy (B, H) and the
    workspace (B, 5H): r, z, n, hx, hn."""
    rows, h = hx.shape
    for b in prange(rows):
        for j in range(h):
            r = fast_sigmoid(ig[b, j] + bias_i[j] + (hg[b, j] + bias_h[j]))
            z = fast_sigmoid(ig[b, h + j] + bias_i[h + j] + (hg[b, h + j] + bias_h[h + j]))
            hn = hg[b, 2 * h + j] + bias_h[2 * h + j]
            n = fast_tanh(ig[b, 2 * h + j] + bias_i[2 * h + j] + r * hn)
            x = hx[b, j]
            ws[b, j] = r
            ws[b, h + j] = z
            ws[b, 2 * h + j] = n
            ws[b, 3 * h + j] = x
            ws[b, 4 * h + j] = hn
            hy[b, j] = n + z * (x - n)


@numba.njit(parallel=True, **_opts)
def gru_backward(ghy, ws, one, grad_ig, grad_hg, grad_hx):
    """Gradients of the input gates, hidden gates (B, 3H) and hx (B, H) from the workspace."""
    rows, h = ghy.shape
    for b in prange(rows):
        for j in range(h):
            r, z, n = ws[b, j], ws[b, h + j], ws[b, 2 * h + j]
            hx, hn = ws[b, 3 * h + j], ws[b, 4 * h + j]
            gh = ghy[b, j]
            gn = gh * (one - z)
            gz = gh * (hx - n) * z * (one - z)
            gin = gn * (one - n * n)
            gr = gin * hn * r * (one - r)
            grad_ig[b, j] = gr
            grad_ig[b, h + j] = gz
            grad_ig[b, 2 * h + j] = gin
            grad_hg[b, j] = gr
            grad_hg[b, h + j] = gz
            grad_hg[b, 2 * h + j] = gin * r
            grad_hx[b, j] = gh * z
