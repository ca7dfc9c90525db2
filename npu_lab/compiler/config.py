"""Which NPU compiler passes run: one switch per pass.

Change the defaults for the whole process through ``npu_lab.compiler.config``,
or per call with ``torch.compile(model, backend="npu", options={...})`` using
the same names, e.g. ``options={"pointwise_fusion": False}``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass
class CompilerConfig:
    """Switches of the ``npu`` compile backend.

    Attributes:
        dead_code_elimination: drop nodes whose results nobody uses.
        constant_folding: evaluate nodes that depend only on constants at compile time.
        pattern_fusion: rewrite known patterns to fused NPU kernels (mm+add -> addmm,
            addmm+relu -> npu.linear_relu, attention -> npu.fused_attention).
        foreach_expansion: split an optimizer's ``torch._foreach_*`` calls into one call
            per tensor, so each parameter's update can fuse into one kernel.
        layout: run chains of convolutions channels-last (NHWC) where that saves more data
            movement than the layout conversions cost (inference graphs only).
        pointwise_fusion: merge chains of elementwise operators into one generated kernel.
        horizontal_fusion: run independent in-place kernels (one per parameter of an
            optimizer step) from one generated kernel, in one launch.
        memory_planning: plan which intermediates share buffers; report the peak saved.
        launch_plan: run each compiled graph as generated straight-line code that calls its
            kernels directly on device memory (:mod:`npu_lab.compiler.launch_plan`); False runs
            the graph node by node, each node an operator call through the dispatcher.
        autotune: time matmul tile sizes per shape and keep the fastest (on-disk cache).
        cache: reuse compiled graphs with the same structure and input signature.
    """

    dead_code_elimination: bool = True
    constant_folding: bool = True
    pattern_fusion: bool = True
    foreach_expansion: bool = True
    layout: bool = True
    pointwise_fusion: bool = True
    horizontal_fusion: bool = True
    memory_planning: bool = True
    launch_plan: bool = True
    autotune: bool = False
    cache: bool = True

    def replace(self, options: dict[str, Any] | None) -> CompilerConfig:
        """A copy with ``options`` applied; unknown names raise with the valid ones."""
        if not options:
            return dataclasses.replace(self)
        names = {f.name for f in dataclasses.fields(self)}
        unknown = set(options) - names
        if unknown:
            raise ValueError(
                f"unknown npu compiler option(s) {sorted(unknown)}; valid options: {sorted(names)}"
            )
        return dataclasses.replace(self, **options)

    def passes(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self) if f.name not in ("autotune", "cache", "launch_plan")
                and getattr(self, f.name)]


#: The passes that emit the lab's own kernels: generated numba code, the ``npu`` namespace's fused operators, the
#: per-parameter calls only the lab's horizontal fusion needs, and the launch plan that calls the lab's kernels
#: straight on device memory. On a bare device (the bring-up track) they are off: a compiled graph runs your
#: kernels, rewritten by your passes (:func:`npu_lab.compiler.register_pass`).
LAB_KERNEL_PASSES = ("pattern_fusion", "foreach_expansion", "layout", "pointwise_fusion", "horizontal_fusion",
                     "launch_plan", "autotune")


def for_bare_device(cfg: CompilerConfig, options: dict[str, Any] | None) -> CompilerConfig:
    """``cfg`` with :data:`LAB_KERNEL_PASSES` off; asking for one of them in ``options`` raises ``ValueError``."""
    asked = sorted(name for name in LAB_KERNEL_PASSES if (options or {}).get(name))
    if asked:
        raise ValueError(f"the npu backend on a bare device runs your kernels and your passes only: {asked} would "
                         "emit the lab's kernels (register a pass of yours with npu_lab.compiler.register_pass)")
    return dataclasses.replace(cfg, **{name: False for name in LAB_KERNEL_PASSES})


#: The process-wide defaults.
config = CompilerConfig()
