"""Compare a model on ``npu`` with the same model on the CPU: outputs and gradients."""

from __future__ import annotations

import copy
import html
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class TensorError:
    """Error statistics of one tensor (npu result against the CPU reference)."""

    name: str
    shape: tuple[int, ...]
    max_abs: float
    mean_abs: float
    max_rel: float
    ok: bool

    def row(self) -> str:
        """One line; a tensor within tolerance shows no error digits (they are rounding noise, see
        :meth:`Verification.errors`), a failing one shows what it measured."""
        if self.ok:
            return f"{self.name:<32} {str(self.shape):<16} ok"
        return (f"{self.name:<32} {str(self.shape):<16} FAIL  max|d| {self.max_abs:9.2e}  "
                f"mean|d| {self.mean_abs:9.2e}  max rel {self.max_rel:9.2e}")

    def measured(self) -> str:
        """The error figures, whatever they are (they differ between CPUs in their last digits)."""
        return (f"{self.name:<32} {str(self.shape):<16} max|d| {self.max_abs:9.2e}  mean|d| {self.mean_abs:9.2e}  "
                f"max rel {self.max_rel:9.2e}  {'ok' if self.ok else 'FAIL'}")


@dataclass
class Verification:
    """What :func:`verify` measured; ``ok`` when every tensor is within tolerance.

    Printed, it says which tensors are within the tolerance and shows the figures only of those that
    are not: the errors of a correct kernel are float32 rounding noise, whose digits depend on the CPU
    (vector width, fused multiply-add, threads), so they mean nothing beyond "within tolerance".
    :meth:`errors` lists every figure.
    """

    rtol: float
    atol: float
    tensors: list[TensorError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.tensors)

    @property
    def worst(self) -> TensorError:
        return max(self.tensors, key=lambda t: t.max_abs)

    @property
    def failed(self) -> list[TensorError]:
        return [t for t in self.tensors if not t.ok]

    def tolerance(self) -> str:
        return f"|npu - cpu| <= {self.atol:g} + {self.rtol:g} * |cpu|"

    def headline(self) -> str:
        if self.ok:
            return f"PASS: {len(self.tensors)} tensors match the CPU ({self.tolerance()} for every element)"
        names = ", ".join(t.name for t in self.failed[:3]) + (", ..." if len(self.failed) > 3 else "")
        return (f"FAIL: {len(self.failed)} of {len(self.tensors)} tensors differ from the CPU beyond "
                f"{self.tolerance()}: {names}; worst: {self.worst.name} max|d| {self.worst.max_abs:.2e}")

    def errors(self) -> str:
        """Every tensor's measured error (digits that vary from one CPU to another)."""
        rows = ["  " + t.measured() for t in self.tensors]
        return "\n".join([f"errors against the CPU ({self.tolerance()}):", *rows])

    def __str__(self) -> str:
        return "\n".join([self.headline()] + ["  " + t.row() for t in self.tensors])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        def cells(t: TensorError) -> str:
            if t.ok:
                return "<td colspan='3'>within tolerance</td><td>ok</td>"
            return f"<td>{t.max_abs:.2e}</td><td>{t.mean_abs:.2e}</td><td>{t.max_rel:.2e}</td><td>FAIL</td>"

        rows = "".join(
            f"<tr style='background:{'#ffffff' if t.ok else '#ffd6d6'}'><td>{html.escape(t.name)}</td>"
            f"<td>{t.shape}</td>{cells(t)}</tr>" for t in self.tensors)
        return (f"<p><b>{'PASS' if self.ok else 'FAIL'}</b>: {len(self.tensors)} tensors, "
                f"{html.escape(self.tolerance())}</p><table><tr><th>tensor</th><th>shape</th><th>max abs err</th>"
                f"<th>mean abs err</th><th>max rel err</th><th></th></tr>{rows}</table>")


def _error(name: str, got: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float) -> TensorError:
    g, r = got.detach().cpu().double(), ref.detach().cpu().double()
    if g.shape != r.shape:
        return TensorError(name, tuple(g.shape), float("inf"), float("inf"), float("inf"), False)
    if g.numel() == 0:
        return TensorError(name, tuple(g.shape), 0.0, 0.0, 0.0, True)
    d = (g - r).abs()
    rel = d / r.abs().clamp_min(1e-12)
    ok = bool(torch.allclose(g, r, rtol=rtol, atol=atol, equal_nan=True))
    return TensorError(name, tuple(g.shape), d.max().item(), d.mean().item(), rel.max().item(), ok)


def _outputs(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _outputs(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _outputs(o)]
    return []


def verify(model: torch.nn.Module, *inputs: Any, loss_fn: Any = None, backward: bool = True,
           rtol: float = 1e-4, atol: float = 1e-5, run: Any = None) -> Verification:
    """Run ``model`` on CPU copies and on ``npu`` copies of ``inputs``; compare outputs and gradients.

    ``model`` may live on either device; it is copied, never changed. The loss
    for the backward pass is ``loss_fn(output)`` (default: the sum of the
    outputs). ``run(model, *inputs)`` replaces calling the model (e.g. to
    wrap it in ``torch.compile``).
    """
    run = run or (lambda m, *a: m(*a))
    cpu_model = copy.deepcopy(model).to("cpu")
    npu_model = copy.deepcopy(model).to("npu")
    cpu_in = [x.detach().to("cpu") if isinstance(x, torch.Tensor) else x for x in inputs]
    npu_in = [x.detach().to("npu") if isinstance(x, torch.Tensor) else x for x in inputs]
    result = Verification(rtol, atol)
    outs = []
    for m, args in ((cpu_model, cpu_in), (npu_model, npu_in)):
        out = run(m, *args)
        if backward:
            loss = loss_fn(out) if loss_fn else sum(o.float().sum() for o in _outputs(out) if o.is_floating_point())
            loss.backward()
        outs.append(out)
    for i, (r, g) in enumerate(zip(_outputs(outs[0]), _outputs(outs[1]))):
        result.tensors.append(_error(f"output[{i}]", g, r, rtol, atol))
    if backward:
        for (name, p_cpu), (_, p_npu) in zip(cpu_model.named_parameters(), npu_model.named_parameters()):
            if p_cpu.grad is not None:
                if p_npu.grad is None:
                    result.tensors.append(TensorError(f"grad {name}", tuple(p_cpu.shape), float("inf"),
                                                      float("inf"), float("inf"), False))
                else:
                    result.tensors.append(_error(f"grad {name}", p_npu.grad, p_cpu.grad, rtol, atol))
    return result
