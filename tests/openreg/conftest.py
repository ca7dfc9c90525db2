"""Set-up shared by the tests ported from torch_openreg (``tests/openreg/``).

* torch_openreg runs every operator it has no kernel for on the CPU: its CPU fallback is always on.
  npu_lab's is opt-in (``npu_lab.set_cpu_fallback``), so it is turned on for each test here, as in
  openreg, and put back as it was afterwards (the rest of the repository's tests run without it).
* Several openreg tests switch the current device or stream and leave it switched. After each test the
  current device goes back to 0 and every device's current stream to its default stream, so that one
  test's leftovers are not another test's starting point.
"""

import pytest
import torch

import npu_lab
from npu_lab.device.bare import is_bare


@pytest.fixture(autouse=True)
def _openreg_environment():
    bare = is_bare()  # a bare device (npu_lab.bringup.conformance.openreg_tests): your kernels, no fallback
    prev = npu_lab.cpu_fallback_enabled()
    if not bare:
        npu_lab.set_cpu_fallback(True)
    yield
    if not bare:
        npu_lab.set_cpu_fallback(prev)
    for i in range(torch.npu.device_count()):
        torch.npu.set_stream(torch.npu.default_stream(i))
    torch.npu.set_device(0)
