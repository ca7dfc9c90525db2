# Ported from torch_openreg's tests/test_autocast.py
# (pytorch/pytorch: test/cpp_extensions/open_registration_extension/torch_openreg/tests/test_autocast.py).
# Adapted:
#   - `import torch_openreg` -> `import npu_lab`; device "openreg" -> "npu".
#   - test_npu_autocast_error_message: the warning is PyTorch's (torch/amp/autocast_mode.py), and torch 2.13
#     words it "In npu autocast, but the target dtype is not supported. Disabling autocast. ..." (newer
#     torch names the dtype: "... the target dtype torch.float32 is not supported."). The regex matches
#     torch 2.13's wording.
#   - test names test_openreg_* -> test_npu_*.
#   - no run_tests() call (collected by pytest).

import torch
from torch.testing._internal.common_utils import TestCase

import npu_lab  # noqa: F401


class TestAutocast(TestCase):
    def test_npu_autocast_error_message(self):
        with self.assertWarnsRegex(
            UserWarning,
            "In npu autocast, but the target dtype is not supported. Disabling autocast.",
        ):
            with torch.autocast(device_type="npu", dtype=torch.float32):
                _ = torch.ones(10)

    def test_npu_autocast_float16_supported(self):
        with torch.amp.autocast(device_type="npu", dtype=torch.float16):
            x = torch.randn(2, 3, device="npu")
            y = torch.randn(3, 3, device="npu")
            result = torch.mm(x, y)
            self.assertEqual(result.dtype, torch.float16)

    def test_npu_autocast_float32_supported(self):
        with torch.amp.autocast(device_type="npu"):
            x = torch.randn(2, device="npu", dtype=torch.float16)
            y = torch.randn(2, device="npu", dtype=torch.float16)
            result = torch.dot(x, y)
            self.assertEqual(result.dtype, torch.float32)

    def test_autocast_fast_dtype(self):
        npu_fast_dtype = torch.get_autocast_dtype(device_type="npu")
        self.assertEqual(npu_fast_dtype, torch.half)
