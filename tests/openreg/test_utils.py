# Ported from torch_openreg's tests/test_utils.py
# (pytorch/pytorch: test/cpp_extensions/open_registration_extension/torch_openreg/tests/test_utils.py).
# Adapted:
#   - `import torch_openreg` -> `import npu_lab`; device "openreg" -> "npu".
#   - no run_tests() call (collected by pytest).

import torch
from torch.testing._internal.common_utils import TestCase

import npu_lab  # noqa: F401


class TestDLPack(TestCase):
    def test_open_device_dlpack(self):
        x_in = torch.randn(2, 3).to("npu")
        capsule = torch.utils.dlpack.to_dlpack(x_in)
        x_out = torch.from_dlpack(capsule)
        self.assertTrue(x_out.device == x_in.device)

        x_in = x_in.to("cpu")
        x_out = x_out.to("cpu")
        self.assertEqual(x_in, x_out)
