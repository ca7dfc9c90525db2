# Ported from torch_openreg's tests/test_testing.py
# (pytorch/pytorch: test/cpp_extensions/open_registration_extension/torch_openreg/tests/test_testing.py).
# Adapted:
#   - `import npu_lab` added (the original relies on torch_openreg being auto-loaded); the expected device type
#     "openreg" -> "npu"; only_for="openreg" -> only_for="npu".
#   - no run_tests() call: instantiate_device_type_tests puts the npu class in this module's globals, where pytest
#     collects it. test_vaildate_bypass_execution counts the two tests before it; pytest runs unittest methods in
#     the same (alphabetical) order as unittest, so the count is the original's.

import torch
from torch.testing._internal.common_device_type import (
    instantiate_device_type_tests,
    onlyCUDA,
    onlyOn,
)
from torch.testing._internal.common_utils import TestCase

import npu_lab  # noqa: F401


class TestBypassDeviceRestrictions(TestCase):
    """Verify that PrivateUse1 backends can run tests decorated with @onlyCUDA.

    PrivateUse1TestBase sets bypass_device_restrictions = False by default.
    Backends that are ready to run @onlyOn-gated tests must explicitly opt in
    by setting bypass_device_restrictions = True in their setUp or subclass.
    This allows out-of-tree backends to run accelerator tests that are
    currently gated behind @onlyCUDA while the long-term migration to
    device-generic tests is in progress.
    """

    executed_count = 0

    def setUp(self):
        # Explicitly opt-in: instance attribute shadows the False default on
        # PrivateUse1TestBase so @onlyOn-based decorators allow this test to run.
        self.bypass_device_restrictions = True
        super().setUp()

    @onlyCUDA
    def test_bypass_only_cuda(self, device):
        type(self).executed_count += 1
        self.assertEqual(torch.device(device).type, "npu")

    @onlyOn(["cuda"])
    def test_bypass_only_on(self, device):
        type(self).executed_count += 1
        self.assertEqual(torch.device(device).type, "npu")

    def test_vaildate_bypass_execution(self, device):
        expected_runs = 2
        actual_runs = type(self).executed_count
        self.assertEqual(
            actual_runs,
            expected_runs,
            f"Bypass logic failed! Expected {expected_runs} tests to run, but only {actual_runs} executed.",
        )


instantiate_device_type_tests(TestBypassDeviceRestrictions, globals(), only_for="npu")
