# Ported from torch_openreg's tests/test_autograd.py
# (pytorch/pytorch: test/cpp_extensions/open_registration_extension/torch_openreg/tests/test_autograd.py).
# Adapted:
#   - `import torch_openreg` -> `import npu_lab`; device "openreg" -> "npu".
#   - no run_tests() call (collected by pytest).
# The test is otherwise unchanged: after a backward on the device, autograd must have started one worker
# thread per device, named pt_autograd_<i>.

import os

import psutil
import torch
from torch.testing._internal.common_utils import (
    TestCase,
    skipIfMPS,
    skipIfTorchDynamo,
    skipIfWindows,
)

import npu_lab  # noqa: F401


class TestAutograd(TestCase):
    # Support MPS and Windows platform later and fix torchdynamo issue
    @skipIfMPS
    @skipIfWindows()
    @skipIfTorchDynamo()
    def test_autograd_init(self):
        # Make sure autograd is initialized
        torch.ones(2, requires_grad=True, device="npu").sum().backward()

        pid = os.getpid()
        task_path = f"/proc/{pid}/task"
        all_threads = psutil.Process(pid).threads()

        all_thread_names = set()

        for t in all_threads:
            with open(f"{task_path}/{t.id}/comm") as file:
                thread_name = file.read().strip()
            all_thread_names.add(thread_name)

        for i in range(torch.accelerator.device_count()):
            self.assertIn(f"pt_autograd_{i}", all_thread_names)
