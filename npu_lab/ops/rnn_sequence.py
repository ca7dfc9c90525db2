"""A whole ``nn.LSTM`` or ``nn.GRU`` (every layer, direction and time step) as one autograd node on the npu.

``nn.LSTM`` calls ``aten::lstm.input`` (``nn.GRU``: ``aten::gru.input``), which ATen implements once for every
device from small operators (CompositeImplicitAutograd, ``aten/src/ATen/native/RNN.cpp``). Off the CPU that
composite runs, per layer and time step, two small products (the input and hidden projections) and the fused
cell (:mod:`npu_lab.ops.recurrent`); autograd records every one of them, and the backward pass runs per step
the cell's backward, four small products and the weights' gradient accumulations: about a thousand small
kernels for a 2-layer, 32-step LSTM, each paying the host's cost of reaching a Python kernel.

The kernels here compute the same arithmetic in fewer, larger launches (what cuDNN's RNN does on CUDA):

* forward, per layer and direction: one product for the input projections of *all* time steps, then per
  step one product ``h @ W_hh^T`` and the fused cell (which adds both biases);
* backward: per step (in reverse) the cell's backward into the gate gradients and one product
  ``dG_t @ W_hh`` for the previous hidden state; then, once, ``dW_ih = dG^T X``, ``dW_hh = dG^T H_prev``,
  ``dX = dG W_ih`` and the bias gradients (column sums of ``dG``).

Every launch is a kernel of the npu's own, accounted on the simulated clock. With nothing recording a profile,
a layer's per-step loop runs as one compiled call (:mod:`npu_lab.ops.rnn_loops`), with the same
per-step launches. Whatever these kernels do not
handle (LSTM projections, dropout between layers in training, half precision, mixed devices or dtypes,
anything malformed) goes to ATen's composite, which computes it, or raises PyTorch's own error. A second
derivative (``create_graph=True``) recomputes the composite from the saved inputs and differentiates it (the
fused cells' own double backward, as on CUDA).

Registered straight with ``torch.library`` (as :mod:`npu_lab.ops.foreach` is), on ``AutogradPrivateUse1``
(where there is a gradient to record) and ``PrivateUse1`` (under ``torch.inference_mode``, which skips the
autograd key); not on a bare device, whose learner meets ATen's own composite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from .. import _torch_private as private
from ..device import bare, native
from ..profiler import hooks
from . import linalg, pointwise, recurrent, reductions, rnn_loops, shape  # noqa: F401 - the kernels called here come first
from .registry import CLAIMED, FAST

__all__: list[str] = []

_aten = torch.ops.aten
_DTYPES = (torch.float32, torch.float64)
_current_device = native.load().current_device


class _Spec(NamedTuple):
    """What kind of stack: LSTM or GRU, layers, directions (1 or 2), and whether each cell has biases."""

    lstm: bool
    layers: int
    directions: int
    has_biases: bool

    @property
    def gates(self) -> int:
        """Gates per hidden unit: LSTM i, f, g, o; GRU r, z, n."""
        return 4 if self.lstm else 3

    @property
    def per_cell(self) -> int:
        """Tensors per layer and direction in ``params``: w_ih, w_hh (and b_ih, b_hh)."""
        return 4 if self.has_biases else 2

    def composite(self, *args: object) -> tuple[torch.Tensor, ...]:
        """ATen's own C++ composite (not the Python decomposition ``OpOverload.decompose`` would pick, nor these
        kernels again: calling the key's kernel directly does not go back through the dispatcher)."""
        return private.composite_implicit(_aten.lstm.input if self.lstm else _aten.gru.input, *args)


def _handled(spec: _Spec, input: torch.Tensor, states: list[torch.Tensor], params: list[torch.Tensor],
             dropout: float, train: bool, batch_first: bool) -> bool:
    """Is this a call the sequence kernels compute exactly as the composite would? Anything else (including
    every malformed call, whose error message is the composite's to give) is left to the composite."""
    cells = spec.layers * spec.directions
    if input.dim() != 3 or spec.layers < 1 or len(params) != cells * spec.per_cell:
        return False
    if dropout != 0 and train and spec.layers > 1:  # dropout between layers: the composite draws it
        return False
    device, dtype = input.device, input.dtype
    if device.type != "npu" or dtype not in _DTYPES:
        return False
    if any(t.device != device or t.dtype != dtype for t in (*states, *params)):
        return False
    # Tensors with a dispatch of their own below autograd (fake tensors, __torch_dispatch__ subclasses) and
    # functorch's transforms must see the composite's operators: the loops may call kernels directly.
    if not private.below_autograd_plain((input, *states, *params)):
        return False
    steps, batch = (input.shape[1], input.shape[0]) if batch_first else input.shape[:2]
    hidden = params[1].shape[-1] if params[1].dim() == 2 else 0
    if not (steps and batch and hidden and input.shape[2]):
        return False
    if any(tuple(s.shape) != (cells, batch, hidden) for s in states):
        return False  # (an LSTM's h0 narrower than its c0: projections; or a mistake)
    width = spec.gates * hidden
    for cell in range(cells):
        w_ih, w_hh, *biases = params[cell * spec.per_cell:(cell + 1) * spec.per_cell]
        inputs = input.shape[2] if cell < spec.directions else hidden * spec.directions
        if tuple(w_ih.shape) != (width, inputs) or tuple(w_hh.shape) != (width, hidden):
            return False
        if any(tuple(b.shape) != (width,) for b in biases):
            return False
    return True


class _Steps(NamedTuple):
    """The operators the time loops call, each as its ``torch.ops.aten`` overload is called, and whether a layer's
    loop may run as one compiled call (:mod:`npu_lab.ops.rnn_loops`)."""

    mm: Callable
    add: Callable
    cell: Callable
    cell_backward: Callable
    compiled: bool = False


_CELLS = {True: ("aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_lstm_cell_backward_impl"),
          False: ("aten::_thnn_fused_gru_cell", "aten::_thnn_fused_gru_cell_backward")}
_DISPATCHED = {lstm: _Steps(_aten.mm.default, _aten.add.Tensor, *(getattr(_aten, n[6:]).default for n in names))
               for lstm, names in _CELLS.items()}


def _with_fast(qualified: str, dispatched: Callable) -> Callable:
    """``dispatched`` behind its kernel's fast path: the fast path's result, or the dispatcher's for a call the
    fast path does not take."""
    fast = FAST.get(qualified)
    if fast is None:
        return dispatched

    def call(*args: object) -> torch.Tensor:
        out = fast(*args)
        return dispatched(*args) if out is None else out

    return call


def _steps(spec: _Spec, device: torch.device) -> _Steps:
    """The loops' operators for tensors on ``device``.

    A step's operators are tiny (a 16 x 128 cell), so reaching their Python kernels through the dispatcher
    costs about as much as running them. When nothing records, and the tensors are on the current device (the
    device guard the dispatcher would set), the loops call the npu's kernels directly, with the same launches
    on the simulated clock; a layer's whole loop then runs as one compiled call where it can
    (:mod:`npu_lab.ops.rnn_loops`), which writes each step's results in place instead of stacking them. While
    a profile records, every operator goes through the dispatcher, so that the profile sees it; so does every
    call once one of these kernels is taken out of the dispatcher (``npu_lab.without_kernels``) and maybe
    replaced.
    """
    dispatched = _DISPATCHED[spec.lstm]
    cell, backward = _CELLS[spec.lstm]
    if hooks.recorder is not None or device.index != _current_device() or not all(
            name in CLAIMED for name in ("aten::mm", "aten::add.Tensor", cell, backward)):
        return dispatched
    return _Steps(_with_fast("aten::mm", dispatched.mm), _with_fast("aten::add.Tensor", dispatched.add),
                  _with_fast(cell, CLAIMED[cell]), _with_fast(backward, CLAIMED[backward]), True)


class _Saved(NamedTuple):
    """What one layer-direction's forward keeps for its backward: its input as a (T*B, in) matrix, and per
    time step the hidden state, the cell state (LSTM only) and the cell's workspace: lists of tensors, or, when
    the loop ran ``compiled``, one tensor each (T, B, ...) (the hidden states are then the layer's output)."""

    x: torch.Tensor
    hs: list[torch.Tensor] | torch.Tensor
    cs: list[torch.Tensor] | torch.Tensor
    workspaces: list[torch.Tensor] | torch.Tensor
    compiled: bool = False


def _weights(spec: _Spec, params: list[torch.Tensor], cell: int) -> tuple:
    """(w_ih, w_hh, b_ih, b_hh) of one layer-direction (biases None without)."""
    w_ih, w_hh, *biases = params[cell * spec.per_cell:(cell + 1) * spec.per_cell]
    b_ih, b_hh = biases if biases else (None, None)
    return w_ih, w_hh, b_ih, b_hh


def _layer_forward(spec: _Spec, ops: _Steps, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor | None,
                   weights: tuple, reverse: bool) -> tuple[torch.Tensor, torch.Tensor | None, _Saved]:
    """One layer in one direction over ``x`` (T, B, in): (output (T, B, H), final cell state, saved)."""
    w_ih, w_hh, b_ih, b_hh = weights
    steps, batch = x.shape[:2]
    x2d = x.reshape(steps * batch, x.shape[2])  # (a copy only for a batch_first input)
    # One product for every step's input projection: the per-step product the composite runs T times.
    gates_x = ops.mm(x2d, w_ih.t()).view(steps, batch, -1)
    if ops.compiled and rnn_loops.takes(gates_x, w_hh, b_ih, b_hh, h0, c0):
        if spec.lstm:
            out, cs_all, ws_all = rnn_loops.lstm_forward(gates_x, w_hh, b_ih, b_hh, h0, c0, reverse)
            return out, cs_all[0 if reverse else steps - 1], _Saved(x2d, out, cs_all, ws_all, True)
        out, ws_all = rnn_loops.gru_forward(gates_x, w_hh, b_ih, b_hh, h0, reverse)
        return out, None, _Saved(x2d, out, [], ws_all, True)
    w_hh_t = w_hh.t()
    hs: list[torch.Tensor] = [h0] * steps
    cs: list[torch.Tensor] = [h0] * steps if spec.lstm else []
    workspaces: list[torch.Tensor] = [h0] * steps
    h, c = h0, c0
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        if spec.lstm:
            h, c, workspaces[t] = ops.cell(gates_x[t], ops.mm(h, w_hh_t), c, b_ih, b_hh)
            cs[t] = c
        else:
            h, workspaces[t] = ops.cell(gates_x[t], ops.mm(h, w_hh_t), h, b_ih, b_hh)
        hs[t] = h
    return _aten.stack(hs), c, _Saved(x2d, hs, cs, workspaces)


def _forward(spec: _Spec, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor | None, params: list[torch.Tensor],
             saved: list[_Saved] | None) -> tuple[torch.Tensor, ...]:
    """The stack's (output, h_n[, c_n]) for a time-major ``x``; appends each cell's saved state to ``saved``."""
    ops = _steps(spec, x.device)
    layer_input = x
    h_n: list[torch.Tensor] = []
    c_n: list[torch.Tensor] = []
    for layer in range(spec.layers):
        outputs = []
        for direction in range(spec.directions):
            cell = layer * spec.directions + direction
            out, c, kept = _layer_forward(spec, ops, layer_input, h0[cell], None if c0 is None else c0[cell],
                                          _weights(spec, params, cell), reverse=direction == 1)
            outputs.append(out)
            h_n.append(kept.hs[0] if direction == 1 else kept.hs[-1])
            if c is not None:
                c_n.append(c)
            if saved is not None:
                saved.append(kept)
        layer_input = outputs[0] if spec.directions == 1 else _aten.cat(outputs, 2)
    if saved and layer_input is saved[-1].hs:
        # The compiled loop's hidden states, kept for the backward: the caller gets a copy to do with as it likes
        # (the per-step loop's stack is such a copy), as ATen's composite gives one.
        layer_input = _aten.clone(layer_input)
    if spec.lstm:
        return layer_input, _aten.stack(h_n), _aten.stack(c_n)
    return layer_input, _aten.stack(h_n)


def _layer_backward(spec: _Spec, ops: _Steps, d_out: torch.Tensor, dh: torch.Tensor, dc: torch.Tensor | None,
                    c0: torch.Tensor | None, w_hh: torch.Tensor, kept: _Saved, reverse: bool) -> tuple:
    """Back through one layer-direction's steps: (gradients of the input gates and of the hidden gates, each
    (T*B, gates*H) in time order (one tensor for both in an LSTM), dh0, dc0)."""
    if kept.compiled and spec.lstm:
        dc = _aten.zeros_like(dh) if dc is None else dc
        d_gates, dh, dc = rnn_loops.lstm_backward(d_out, dh.contiguous(), dc.contiguous(), c0, kept.cs,
                                                  kept.workspaces, w_hh, reverse)
        return d_gates, d_gates, dh, dc
    if kept.compiled:
        d_ig, d_hg, dh = rnn_loops.gru_backward(d_out, dh.contiguous(), kept.workspaces, w_hh, reverse)
        return d_ig, d_hg, dh, None
    steps = len(kept.hs)
    d_input_gates: list[torch.Tensor] = [dh] * steps
    d_hidden_gates = d_input_gates if spec.lstm else list(d_input_gates)
    for t in range(steps) if reverse else range(steps - 1, -1, -1):  # the forward's steps, last first
        d_hy = ops.add(d_out[t], dh)
        if spec.lstm:
            previous = t + 1 if reverse else t - 1  # the step whose cell state this one started from
            cx = kept.cs[previous] if 0 <= previous < steps else c0
            dg, dc, _ = ops.cell_backward(d_hy, dc, cx, kept.cs[t], kept.workspaces[t], False)
            d_input_gates[t] = dg
            dh = ops.mm(dg, w_hh)
        else:
            d_input_gates[t], d_hidden_gates[t], d_hx, _, _ = ops.cell_backward(d_hy, kept.workspaces[t], False)
            dh = ops.add(d_hx, ops.mm(d_hidden_gates[t], w_hh))
    d_ig = _aten.cat(d_input_gates)
    return d_ig, d_ig if spec.lstm else _aten.cat(d_hidden_gates), dh, dc


def _backward(ctx: torch.autograd.function.FunctionCtx, d_out: torch.Tensor, d_hy: torch.Tensor,
              d_cy: torch.Tensor | None) -> list[torch.Tensor | None]:
    """First-order gradients of the node's inputs (x, h0[, c0], *params) from the saved cells: per step the cell's
    backward and one product, then a few large products per layer and direction."""
    spec: _Spec = ctx.spec
    x, h0, c0, *params = ctx.saved_tensors if spec.lstm else (*ctx.saved_tensors[:2], None, *ctx.saved_tensors[2:])
    needs = ctx.needs_input_grad[1:]  # (x, h0, c0, *params), a GRU's c0 (which it has not) never needed
    needs = needs if spec.lstm else (*needs[:2], False, *needs[2:])
    grads: list[torch.Tensor | None] = [None] * (3 + len(params))
    d_h0: list[torch.Tensor] = [d_hy[0]] * (spec.layers * spec.directions)
    d_c0 = list(d_h0)
    hidden = h0.shape[2]
    steps, batch = x.shape[:2]
    ops = _steps(spec, x.device)
    for layer in range(spec.layers - 1, -1, -1):
        d_x = None
        for direction in range(spec.directions):
            cell = layer * spec.directions + direction
            w_ih, w_hh, b_ih, _ = _weights(spec, params, cell)
            kept: _Saved = ctx.cells[cell]
            reverse = direction == 1
            d_dir = d_out if spec.directions == 1 else d_out[:, :, direction * hidden:(direction + 1) * hidden]
            d_ig, d_hg, d_h0[cell], d_c0[cell] = _layer_backward(
                spec, ops, d_dir, d_hy[cell], None if d_cy is None else d_cy[cell],
                None if c0 is None else c0[cell], w_hh, kept, reverse)
            first = 3 + cell * spec.per_cell
            if needs[first]:
                grads[first] = _aten.mm(d_ig.t(), kept.x)
            if needs[first + 1]:
                # Every step's hidden product at once: H_prev holds the state each step started from.
                if not kept.compiled:
                    h_prev = kept.hs[1:] + [h0[cell]] if reverse else [h0[cell]] + kept.hs[:-1]
                else:  # (the compiled loop's hidden states: one tensor)
                    hs = kept.hs.view(steps * batch, hidden)
                    h_prev = [hs[batch:], h0[cell]] if reverse else [h0[cell], hs[:-batch]]
                grads[first + 1] = _aten.mm(d_hg.t(), _aten.cat(h_prev))
            if b_ih is not None and needs[first + 2]:
                grads[first + 2] = _aten.sum.dim_IntList(d_ig, [0])
            if b_ih is not None and needs[first + 3]:
                # (an LSTM's two biases have one gradient, as CUDA's fused cell gives them)
                grads[first + 3] = grads[first + 2] if spec.lstm and needs[first + 2] else _aten.sum.dim_IntList(
                    d_hg, [0])
            if layer or needs[0]:
                d_in = _aten.mm(d_ig, w_ih)
                d_x = d_in if d_x is None else _aten.add(d_x, d_in)
        if d_x is not None:
            d_out = d_x.view(steps, batch, -1)
    grads[0] = d_out if needs[0] else None
    grads[1] = _aten.stack(d_h0) if needs[1] else None
    grads[2] = _aten.stack(d_c0) if spec.lstm and needs[2] else None
    return grads if spec.lstm else grads[:2] + grads[3:]


def _differentiable_backward(ctx: torch.autograd.function.FunctionCtx,
                             *d_outputs: torch.Tensor) -> list[torch.Tensor | None]:
    """``create_graph=True``: the gradients as a graph of their own, by differentiating the composite recomputed
    from the saved inputs (which are still connected to the graph that made them)."""
    spec: _Spec = ctx.spec
    inputs = ctx.saved_tensors
    x, *states = inputs[:3 if spec.lstm else 2]
    params = list(inputs[len(states) + 1:])
    outputs = spec.composite(x, states if spec.lstm else states[0], params, spec.has_biases, spec.layers, 0.0,
                             False, spec.directions == 2, False)
    needs = ctx.needs_input_grad[1:]
    wanted = [t for t, need in zip(inputs, needs) if need]
    found = iter(torch.autograd.grad(outputs, wanted, d_outputs, create_graph=True, allow_unused=True))
    return [next(found) if need else None for need in needs]


class _RecurrentStack(torch.autograd.Function):
    """The stack on a time-major input as one node: forward(spec, x, h0[, c0], *params) -> (out, h_n[, c_n])."""

    @staticmethod
    def forward(ctx, spec: _Spec, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        x, h0, c0 = inputs[0], inputs[1], inputs[2] if spec.lstm else None
        cells: list[_Saved] = []
        outputs = _forward(spec, x, h0, c0, list(inputs[3 if spec.lstm else 2:]), cells)
        ctx.spec, ctx.cells = spec, cells  # intermediates only (never an output: that would make a cycle)
        ctx.save_for_backward(*inputs)
        return outputs

    @staticmethod
    def backward(ctx, *d_outputs: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        if torch.is_grad_enabled():
            return (None, *_differentiable_backward(ctx, *d_outputs))
        d_cy = d_outputs[2] if ctx.spec.lstm else None
        return (None, *_backward(ctx, d_outputs[0], d_outputs[1], d_cy))


def _run(spec: _Spec, input: torch.Tensor, states: list[torch.Tensor], params: list[torch.Tensor], dropout: float,
         train: bool, batch_first: bool) -> tuple[torch.Tensor, ...]:
    """Either kind of stack, as the composite computes it."""
    if not _handled(spec, input, states, params, dropout, train, batch_first):
        hx = states if spec.lstm else states[0]
        return spec.composite(input, hx, params, spec.has_biases, spec.layers, dropout, train, spec.directions == 2,
                              batch_first)
    x = input.transpose(0, 1) if batch_first else input
    if torch.is_grad_enabled() and any(t.requires_grad for t in (input, *states, *params)):
        out, *finals = _RecurrentStack.apply(spec, x, *states, *params)
    else:  # nothing to differentiate: nothing to save
        out, *finals = _forward(spec, x, states[0], states[1] if spec.lstm else None, params, None)
    return (out.transpose(0, 1) if batch_first else out), *finals


def lstm_input(input: torch.Tensor, hx: list[torch.Tensor], params: list[torch.Tensor], has_biases: bool,
               num_layers: int, dropout: float, train: bool, bidirectional: bool,
               batch_first: bool) -> tuple[torch.Tensor, ...]:
    """``aten::lstm.input`` on npu tensors: (output, h_n, c_n), as ATen's composite gives them."""
    spec = _Spec(True, num_layers, 2 if bidirectional else 1, has_biases)
    if len(hx) != 2:
        return spec.composite(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    return _run(spec, input, list(hx), list(params), dropout, train, batch_first)


def gru_input(input: torch.Tensor, hx: torch.Tensor, params: list[torch.Tensor], has_biases: bool,
              num_layers: int, dropout: float, train: bool, bidirectional: bool,
              batch_first: bool) -> tuple[torch.Tensor, ...]:
    """``aten::gru.input`` on npu tensors: (output, h_n), as ATen's composite gives them."""
    spec = _Spec(False, num_layers, 2 if bidirectional else 1, has_biases)
    return _run(spec, input, [hx], list(params), dropout, train, batch_first)


_lib: torch.library.Library | None = None
if not bare.BARE:
    _lib = torch.library.Library("aten", "IMPL")
    for _name, _kernel in (("lstm.input", lstm_input), ("gru.input", gru_input)):
        _lib.impl(_name, _kernel, "AutogradPrivateUse1")
        _lib.impl(_name, _kernel, "PrivateUse1")
