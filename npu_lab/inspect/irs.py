"""One module, three intermediate representations, side by side.

* **TorchScript IR** (``torch.jit.trace``): PyTorch's older graph format, typed
  SSA values, ``aten::`` calls and ``prim::`` constants;
* **FX IR** (``torch.fx.symbolic_trace``): Python-level calls on modules and
  functions, as the module's ``forward`` spelled them;
* **ATen graph** (``make_fx``): what actually reaches the dispatcher after
  every Python-level call has been decomposed, the level compilers work on.
"""

from __future__ import annotations

import html
import warnings
from dataclasses import dataclass

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx


@dataclass
class IRComparison:
    torchscript: str
    fx: str
    aten: str

    def counts(self) -> dict[str, int]:
        """Operator calls in each IR (a rough measure of its level)."""
        return {
            "torchscript": self.torchscript.count("aten::"),
            "fx": sum(line.strip().startswith(tuple("abcdefghijklmnopqrstuvwxyz_")) and "=" in line
                      for line in self.fx.splitlines()),
            "aten": self.aten.count("torch.ops.aten."),
        }

    def _repr_html_(self) -> str:
        cols = "".join(
            f"<div style='flex:1;min-width:0'><b>{title}</b><pre style='font-size:10px;white-space:pre-wrap'>"
            f"{html.escape(text)}</pre></div>"
            for title, text in (("TorchScript IR", self.torchscript), ("FX IR", self.fx), ("ATen graph", self.aten))
        )
        return f"<div style='display:flex;gap:10px'>{cols}</div>"


def compare_irs(module: torch.nn.Module, *example_inputs: torch.Tensor) -> IRComparison:
    """Trace ``module`` three ways and return the three IRs as text."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchScript is deprecated; the IR is still worth seeing
        scripted = torch.jit.trace(module, example_inputs)
    fx_gm = torch.fx.symbolic_trace(module)
    aten_gm = make_fx(module)(*example_inputs)
    return IRComparison(str(scripted.inlined_graph), fx_gm.code.strip(), aten_gm.code.strip())
