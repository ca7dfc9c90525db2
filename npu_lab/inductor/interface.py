"""The ``npu`` device as Inductor and Dynamo see it (their ``DeviceInterface``)."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface


class NpuInterface(DeviceInterface):
    """Forwards Inductor's device questions to ``torch.npu``."""

    class device:  # noqa: N801 - the interface's own spelling
        def __new__(cls, device: Any) -> Any:
            return torch.npu.device(device)

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            torch.npu.set_device(device)

        @staticmethod
        def current_device() -> int:
            return torch.npu.current_device()

        @staticmethod
        def get_device_properties(device: Any = None) -> Any:
            return _properties()

    @staticmethod
    def current_device() -> int:
        return torch.npu.current_device()

    @staticmethod
    def set_device(device: Any) -> None:
        torch.npu.set_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return 0

    @staticmethod
    def exchange_device(device: int) -> int:
        return 0

    @staticmethod
    def device_count() -> int:
        return torch.npu.device_count()

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def synchronize(device: Any = None) -> None:
        torch.npu.synchronize(device)

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return 0

    @staticmethod
    def current_stream() -> Any:
        return torch.npu.current_stream()

    @classmethod
    def get_device_properties(cls, device: Any = None) -> Any:
        return _properties()

    @staticmethod
    def get_compute_capability(device: Any = None) -> Any:
        return "npu-sim"

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return False


def _properties() -> SimpleNamespace:
    """The device's properties with the attribute names Inductor reads (CUDA's spelling)."""
    props = torch.npu.get_device_properties()
    return SimpleNamespace(
        name=props.name, total_memory=props.total_memory,
        multi_processor_count=os.cpu_count() or 1,  # the simulated chip runs on the host's cores
        max_threads_per_multi_processor=1, max_threads_per_block=1, warp_size=1, major=None,
        regs_per_multiprocessor=None,
    )
