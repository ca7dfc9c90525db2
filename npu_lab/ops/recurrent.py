"""Recurrent cells: the fused LSTM and GRU cell operators ``nn.LSTM``/``nn.GRU`` use on accelerators.

ATen's LSTM and GRU layers compute the gate products with ``matmul`` and then call one fused
operator per time step for the gate arithmetic, on every device except the CPU (which composes it
from small operators): ``aten::_thnn_fused_lstm_cell`` and ``aten::_thnn_fused_gru_cell``, with
backward operators that reuse a *workspace* of the activated gates the forward saved. The CPU has
no kernel for them, so a PrivateUse1 device must provide them before ``nn.LSTM`` can run on it.
These kernels compose the NPU's elementwise kernels, with CUDA's gate layouts and workspace.
"""

from __future__ import annotations

import torch

from .registry import register


def _gates(input_gates: torch.Tensor, hidden_gates: torch.Tensor, input_bias, hidden_bias) -> torch.Tensor:
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias
    if hidden_bias is not None:
        gates = gates + hidden_bias
    return gates


@register("_thnn_fused_lstm_cell")
def fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """Gates i, f, g, o (in that order along dim 1); ``cy = f*cx + i*g``, ``hy = o*tanh(cy)``."""
    i, f, g, o = _gates(input_gates, hidden_gates, input_bias, hidden_bias).chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    workspace = torch.cat([i, f, g, o], 1)  # the activated gates, for the backward
    return hy, cy, workspace


@register("_thnn_fused_lstm_cell_backward_impl")
def fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """(grad of the gate pre-activations, grad of cx, grad of the bias) from the saved gates."""
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_c = grad_cy if grad_cy is not None else torch.zeros_like(cy)
    if grad_hy is not None:
        grad_c = grad_c + grad_hy * o * (1 - tanh_cy * tanh_cy)
        grad_o = grad_hy * tanh_cy * o * (1 - o)
    else:
        grad_o = torch.zeros_like(o)
    grad_i = grad_c * g * i * (1 - i)
    grad_f = grad_c * cx * f * (1 - f)
    grad_g = grad_c * i * (1 - g * g)
    grad_gates = torch.cat([grad_i, grad_f, grad_g, grad_o], 1)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_c * f, grad_bias


@register("_thnn_fused_gru_cell")
def fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """Gates r, z, n: ``n = tanh(in + r*hn)``, ``hy = n + z*(hx - n)``."""
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_gates is not None and hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    ir, ii, in_ = input_gates.chunk(3, 1)
    hr, hi, hn = hidden_gates.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    workspace = torch.cat([r, z, n, hx, hn], 1)
    return hy, workspace


@register("_thnn_fused_gru_cell_backward")
def fused_gru_cell_backward(grad_hy, workspace, has_bias):
    """Gradients of the input gates, hidden gates, hx and the two biases, from the saved workspace."""
    r, z, n, hx, hn = workspace.chunk(5, 1)
    grad_n = grad_hy * (1 - z)
    grad_z = grad_hy * (hx - n) * z * (1 - z)
    grad_in = grad_n * (1 - n * n)
    grad_r = grad_in * hn * r * (1 - r)
    grad_input_gates = torch.cat([grad_r, grad_z, grad_in], 1)
    grad_hidden_gates = torch.cat([grad_r, grad_z, grad_in * r], 1)
    grad_hx = grad_hy * z
    if has_bias:
        return grad_input_gates, grad_hidden_gates, grad_hx, grad_input_gates.sum(0), grad_hidden_gates.sum(0)
    return grad_input_gates, grad_hidden_gates, grad_hx, None, None
