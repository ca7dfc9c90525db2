"""The NPU profiler: kernels, copies, memory and fallbacks on the simulated clock."""

from .coverage import CoverageReport, coverage
from .profile import Profile, Row, profile
from .recorder import KernelEvent, MemoryEvent, OpEvent

__all__ = ["CoverageReport", "KernelEvent", "MemoryEvent", "OpEvent", "Profile", "Row", "coverage", "profile"]
