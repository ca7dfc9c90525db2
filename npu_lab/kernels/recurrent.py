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
    ``one`` 1 in the compute dtype; writes hy, cy (B, H) and the activated gates ``ws`` (B, 4H).

    Each row is a few short loops over contiguous row slices rather than one loop over everything: a
    loop that touches nine arrays is one LLVM will not vectorise (it gives up checking that they do not
    overlap), and these loops are mostly ``exp``/``tanh``, which vectorise well."""
    rows, h = cx.shape
    for b in prange(rows):
        igr, hgr, wsr = ig[b], hg[b], ws[b]
        for j in range(2 * h):  # the input and forget gates
            wsr[j] = fast_sigmoid(igr[j] + hgr[j] + (bias_i[j] + bias_h[j]))
        for j in range(2 * h, 3 * h):  # the cell gate
            wsr[j] = fast_tanh(igr[j] + hgr[j] + (bias_i[j] + bias_h[j]))
        for j in range(3 * h, 4 * h):  # the output gate
            wsr[j] = fast_sigmoid(igr[j] + hgr[j] + (bias_i[j] + bias_h[j]))
        cxr, cyr, hyr = cx[b], cy[b], hy[b]
        for j in range(h):
            c = wsr[h + j] * cxr[j] + wsr[j] * wsr[2 * h + j]
            cyr[j] = c
            hyr[j] = wsr[3 * h + j] * fast_tanh(c)


@numba.njit(parallel=True, **_opts)
def lstm_backward(ghy, gcy, cx, cy, ws, one, grad_gates, grad_cx):
    """Gradients of the gate pre-activations (B, 4H) and of cx (B, H) from the saved gates; a missing
    ``ghy``/``gcy`` is passed as zeros. (Short loops over row slices, as :func:`lstm_forward`.)"""
    rows, h = cx.shape
    for b in prange(rows):
        wsr, gg, gcx = ws[b], grad_gates[b], grad_cx[b]
        ghr, gcr, cyr = ghy[b], gcy[b], cy[b]
        for j in range(h):  # the cell state's gradient (kept in grad_cx for now) and the output gate's
            o = wsr[3 * h + j]
            t = fast_tanh(cyr[j])
            gh = ghr[j]
            gcx[j] = gcr[j] + gh * o * (one - t * t)
            gg[3 * h + j] = gh * t * o * (one - o)
        cxr = cx[b]
        for j in range(h):
            i, f, g = wsr[j], wsr[h + j], wsr[2 * h + j]
            gc = gcx[j]
            gg[j] = gc * g * i * (one - i)
            gg[h + j] = gc * cxr[j] * f * (one - f)
            gg[2 * h + j] = gc * i * (one - g * g)
        for j in range(h):
            gcx[j] = gcx[j] * wsr[h + j]


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
    workspace (B, 5H): r, z, n, hx, hn. (Short loops over row slices, as :func:`lstm_forward`.)"""
    rows, h = hx.shape
    for b in prange(rows):
        igr, hgr, wsr = ig[b], hg[b], ws[b]
        for j in range(2 * h):  # the reset and update gates
            wsr[j] = fast_sigmoid(igr[j] + bias_i[j] + (hgr[j] + bias_h[j]))
        for j in range(h):
            wsr[4 * h + j] = hgr[2 * h + j] + bias_h[2 * h + j]
        for j in range(h):  # the new gate
            wsr[2 * h + j] = fast_tanh(igr[2 * h + j] + bias_i[2 * h + j] + wsr[j] * wsr[4 * h + j])
        hxr, hyr = hx[b], hy[b]
        for j in range(h):
            x = hxr[j]
            n = wsr[2 * h + j]
            wsr[3 * h + j] = x
            hyr[j] = n + wsr[h + j] * (x - n)


@numba.njit(parallel=True, **_opts)
def gru_backward(ghy, ws, one, grad_ig, grad_hg, grad_hx):
    """Gradients of the input gates, hidden gates (B, 3H) and hx (B, H) from the workspace. (Short loops
    over row slices, as :func:`lstm_forward`.)"""
    rows, h = ghy.shape
    for b in prange(rows):
        wsr, ghr, gi, ghg, ghx = ws[b], ghy[b], grad_ig[b], grad_hg[b], grad_hx[b]
        for j in range(h):
            z, n, hx = wsr[h + j], wsr[2 * h + j], wsr[3 * h + j]
            gh = ghr[j]
            gi[h + j] = gh * (hx - n) * z * (one - z)
            gi[2 * h + j] = gh * (one - z) * (one - n * n)
            ghx[j] = gh * z
        for j in range(h):
            r, hn = wsr[j], wsr[4 * h + j]
            gin = gi[2 * h + j]
            gi[j] = gin * hn * r * (one - r)
            ghg[2 * h + j] = gin * r
        for j in range(h):
            ghg[j] = gi[j]
            ghg[h + j] = gi[h + j]
