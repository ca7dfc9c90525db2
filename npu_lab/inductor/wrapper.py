"""The Python wrapper Inductor writes for ``npu`` graphs: allocations, kernel calls, extern calls."""

from __future__ import annotations

from typing import Any

from torch._inductor.codegen.common import DeviceOpOverrides
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen


class NpuWrapperCodegen(PythonWrapperCodegen):
    """Inductor's Python wrapper, plus the import that loads generated numba kernels."""

    @staticmethod
    def create(is_subgraph: bool, subgraph_name: str | None, parent_wrapper: Any,
               partition_signatures: Any = None) -> PythonWrapperCodegen:
        if is_subgraph:
            return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return NpuWrapperCodegen()

    def _generate_kernel_call_helper(self, kernel_name: str, call_args: Any, *, device: Any = None,
                                     triton: bool = True, **kwargs: Any) -> None:
        # Inductor writes plain calls for CPU kernels and raises for unknown devices;
        # an npu kernel is a plain Python call too (checked on torch 2.13).
        if device is not None and device.type == "npu" and not triton:
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kwargs)

    def write_header(self) -> None:
        super().write_header()
        self.imports.writeline("from npu_lab.inductor.runtime import load_kernel")


class NpuDeviceOpOverrides(DeviceOpOverrides):
    """The lines of Python the wrapper writes for device management on ``npu``."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return f"def {name}(index): return 0"

    def set_device(self, device_idx: int) -> str:
        return f"torch.npu.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.npu.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.npu.device({device_idx})"
