# Ported from torch_openreg's tests/test_rng.py
# (pytorch/pytorch: test/cpp_extensions/open_registration_extension/torch_openreg/tests/test_rng.py).
# Adapted:
#   - `import npu_lab` added (the original relies on torch_openreg being auto-loaded); device "openreg" -> "npu",
#     torch.openreg -> torch.npu.
#   - test_offset_unsupported -> test_offset_supported. The original checks openreg's answer to the module-level
#     offset API: openreg's generator is a plain CPU generator without a counter offset, so
#     torch.openreg.set_offset/get_offset raise "does not support set_offset/get_offset". The npu's generator is
#     Philox with a (seed, offset) state, like CUDA's (torch.Generator(device="npu").set_offset works), so the
#     same API is expected to work on npu: torch.npu.set_offset(123) then torch.npu.get_offset() == 123.
#   - no run_tests() call (collected by pytest).

import torch
from torch.testing._internal.common_utils import TestCase

import npu_lab  # noqa: F401


class TestRNG(TestCase):
    def test_generator(self):
        generator = torch.Generator(device="npu:1")
        self.assertEqual(generator.device.type, "npu")
        self.assertEqual(generator.device.index, 1)

    def test_rng_state(self):
        state = torch.npu.get_rng_state(0)
        torch.npu.set_rng_state(state, 0)

        states = torch.npu.get_rng_state_all()
        torch.npu.set_rng_state_all(states)

    def test_manual_seed(self):
        torch.npu.manual_seed_all(42)
        self.assertEqual(torch.npu.initial_seed(), 42)

    def test_seed(self):
        torch.npu.seed_all()
        seed1 = torch.npu.initial_seed()
        torch.npu.seed_all()
        seed2 = torch.npu.initial_seed()
        self.assertNotEqual(seed1, seed2)

    def test_create_generator_and_seed(self):
        generator = torch.Generator(device="npu:0")
        generator.manual_seed(42)
        self.assertEqual(generator.initial_seed(), 42)

    def test_offset_supported(self):
        # npu's generator is Philox (seed, offset), as CUDA's: the offset can be set and read back
        # (openreg, a CPU-simulated generator, raises "does not support set_offset/get_offset" here)
        torch.npu.set_offset(123)
        self.assertEqual(torch.npu.get_offset(), 123)
