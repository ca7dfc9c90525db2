"""``NPU_LAB_CCL_DEBUG=INFO``: one line per collective on stderr, as ``NCCL_DEBUG=INFO`` prints.

Read at each call, so a notebook can switch it on and off with ``os.environ``. A line reads::

    host:1234:0 [npu:0] NPUCCL INFO allreduce #3: 4096 bytes float32 op=SUM algo=ring peers=2 sim=13.50us
"""

from __future__ import annotations

import os
import socket
import sys

LEVELS = ("WARN", "INFO")


def enabled() -> bool:
    """Whether ``NPU_LAB_CCL_DEBUG`` asks for a line per collective."""
    return os.environ.get("NPU_LAB_CCL_DEBUG", "").strip().upper() == "INFO"


def log(rank: int, device: str, message: str) -> None:
    """Write one debug line (only when :func:`enabled`)."""
    if enabled():
        sys.stderr.write(f"{socket.gethostname()}:{os.getpid()}:{rank} [{device}] NPUCCL INFO {message}\n")
        sys.stderr.flush()
