"""Dead-code elimination: drop operators whose results nobody uses."""

from __future__ import annotations

import torch.fx


def dead_code_elimination(gm: torch.fx.GraphModule) -> list[str]:
    """Remove side-effect-free nodes with no users (FX knows which ops are impure)."""
    before = {n.name for n in gm.graph.nodes}
    gm.graph.eliminate_dead_code()
    gm.recompile()
    removed = sorted(before - {n.name for n in gm.graph.nodes})
    return [f"removed {name}" for name in removed]
