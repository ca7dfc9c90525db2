"""How Inductor's scheduler hands ``npu`` work to the numba kernel generator.

``NumbaScheduling`` is the per-device *scheduling* object Inductor asks to
generate code for each (possibly fused) group of scheduler nodes. Matmuls and
convolutions never get here: Inductor keeps them as *extern kernels*, calls to
the ``npu`` ATen operators in the wrapper code.
"""

from __future__ import annotations

import hashlib
from typing import Any

import sympy
import torch
from torch._inductor.codegen.common import BackendFeature
from torch._inductor.scheduler import BaseScheduling
from torch._inductor.utils import OrderedSet
from torch._inductor.virtualized import V

from .kernel import NP_NAMES, NumbaKernel, Unsupported

#: Every kernel generated in this process: name -> source (for learners to read).
GENERATED: dict[str, str] = {}


def _fusable(node1: Any, node2: Any) -> bool:
    if node1.is_template() or node2.is_template() or node1.is_extern() or node2.is_extern():
        return False
    return node1.group[1] == node2.group[1]


class NumbaScheduling(BaseScheduling):
    """Generates one numba kernel per (fused) group of scheduler nodes."""

    def get_backend_features(self, device: torch.device) -> OrderedSet[BackendFeature]:
        # One loop nest reduces a whole row: never split reductions into two kernels (GPU-style).
        return OrderedSet([BackendFeature.REDUCE_TO_SINGLE_ELEMENT])

    def group_fn(self, sizes: Any) -> tuple:
        return tuple(V.graph.sizevars.simplify(sympy.Mul(*s)) for s in sizes)

    def can_fuse_vertical(self, node1: Any, node2: Any) -> bool:
        """Fuse a producer and its consumer when they iterate over the same space."""
        return _fusable(node1, node2)

    def can_fuse_horizontal(self, node1: Any, node2: Any) -> bool:
        """Fuse independent nodes over the same space (one launch instead of two)."""
        return _fusable(node1, node2)

    def codegen_node(self, node: Any) -> None:
        for sub in node.get_nodes():
            for dep in sub.read_writes.reads | sub.read_writes.writes:
                dtype = V.graph.get_dtype(dep.name)
                if dtype not in NP_NAMES:
                    raise Unsupported(f"npu Inductor backend: no numba type for {dtype} (buffer {dep.name}); "
                                      "compile the model in float32")
        kernel = NumbaKernel()
        with kernel:
            for sub in node.get_nodes():
                sizes, reduction_sizes = sub.get_ranges()
                kernel.start_nest(sizes, reduction_sizes)
                sub.run(kernel.itervars, kernel.reduction_vars)
        with V.set_kernel_handler(kernel):
            source = kernel.codegen_kernel()
        V.graph.removed_buffers |= kernel.removed_buffers
        V.graph.inplaced_to_remove |= kernel.inplaced_to_remove
        wrapper = V.graph.wrapper_code
        arg_defs, call_args, _, arg_types = kernel.args.python_argdefs()
        name = wrapper.src_to_kernel.get(source)
        if name is None:
            # numbered per graph, as Inductor numbers its own kernels (wrapper.next_kernel_suffix):
            # the name must not depend on what else this process compiled or took from the cache
            name = f"npu_kernel_{len(wrapper.src_to_kernel)}"
            wrapper.src_to_kernel[source] = name
            GENERATED[f"{name}_{hashlib.sha1(source.encode()).hexdigest()[:8]}"] = source
            params = [getattr(a, "name", str(a)) for a in arg_defs]
            outputs = tuple(i for i, p in enumerate(params) if p.startswith(("out_ptr", "in_out_ptr")))
            wrapper.define_kernel(name, f"load_kernel({name!r}, {source!r}, {outputs!r})", gpu=False)
        wrapper.generate_kernel_call(name, call_args, triton=False, arg_types=arg_types,
                                     device=torch.device("npu"))
        self.free_buffers_in_scheduler()

    def codegen_template(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("npu Inductor backend: no templates (matmul/conv run as extern kernels)")

    def codegen_sync(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def ready_to_flush(self) -> bool:
        return False

    def benchmark_fused_nodes(self, nodes: Any) -> tuple[float, str]:
        return 0.0, ""
