# Ported from torch_openreg's tests/test_misc.py
# (pytorch/pytorch: test/cpp_extensions/open_registration_extension/torch_openreg/tests/test_misc.py).
# Adapted:
#   - `import npu_lab` added (the original relies on torch_openreg being auto-loaded); the backend name
#     "openreg" -> "npu" everywhere: device strings, torch.openreg -> torch.npu, the generated methods
#     .openreg()/.is_openreg -> .npu()/.is_npu, the ProfilerActivity/DeviceType aliases OPENREG -> NPU,
#     the legacy type strings torch.openreg.FloatTensor -> torch.npu.FloatTensor, and the
#     "Try to call torch.openreg" message -> "Try to call torch.npu".
#   - test_backend_module_methods and test_backend_storage_methods carry @unittest.skip in the original
#     ("Need to support Parameter in openreg" / "Need to support untyped_storage in openreg"): those reasons are
#     openreg's own missing features, not IPC or openreg-private ops, so the skips are removed and both tests run
#     on npu.
#   - no run_tests() call (collected by pytest).

import types

import torch
from torch.testing._internal.common_utils import TestCase, skipIfTorchDynamo

import npu_lab  # noqa: F401


class TestBackendModule(TestCase):
    def test_backend_module_name(self):
        """Test backend module name query and renaming"""
        self.assertEqual(torch._C._get_privateuse1_backend_name(), "npu")
        # backend can be renamed to the same name multiple times
        torch.utils.rename_privateuse1_backend("npu")
        with self.assertRaisesRegex(RuntimeError, "has already been set"):
            torch.utils.rename_privateuse1_backend("dev")

    def test_profiler_activity_alias(self):
        """Test ProfilerActivity exposes device-specific alias for PrivateUse1"""
        from torch._C._profiler import ProfilerActivity

        self.assertTrue(hasattr(ProfilerActivity, "NPU"))
        self.assertEqual(ProfilerActivity.NPU, ProfilerActivity.PrivateUse1)
        self.assertEqual(repr(ProfilerActivity.NPU), "<ProfilerActivity.NPU: 5>")
        self.assertEqual(str(ProfilerActivity.NPU), "ProfilerActivity.NPU")
        self.assertEqual(ProfilerActivity.NPU.name, "NPU")

    def test_device_type_alias(self):
        """Test DeviceType exposes device-specific alias for PrivateUse1"""
        from torch._C._autograd import DeviceType

        self.assertTrue(hasattr(DeviceType, "NPU"))
        self.assertEqual(DeviceType.NPU, DeviceType.PrivateUse1)
        self.assertEqual(repr(DeviceType.NPU), "<DeviceType.NPU: 20>")
        self.assertEqual(str(DeviceType.NPU), "DeviceType.NPU")
        self.assertEqual(DeviceType.NPU.name, "NPU")

    def test_backend_module_registration(self):
        """Test backend module registration error handling"""

        def generate_faked_module():
            return types.ModuleType("fake_module")

        with self.assertRaisesRegex(RuntimeError, "Expected one of cpu"):
            torch._register_device_module("dev", generate_faked_module())
        with self.assertRaisesRegex(RuntimeError, "The runtime module of"):
            torch._register_device_module("npu", generate_faked_module())

    def test_backend_module_function(self):
        """Test backend module function access"""
        with self.assertRaisesRegex(RuntimeError, "Try to call torch.npu"):
            torch.utils.backend_registration._get_custom_mod_func("func_name_")
        self.assertTrue(torch.utils.backend_registration._get_custom_mod_func("device_count")() == 2)

    def test_backend_module_function_error_handling(self):
        """Test error handling for backend module functions"""
        # Test non-existent function
        with self.assertRaisesRegex(RuntimeError, "Try to call torch.npu"):
            torch.utils.backend_registration._get_custom_mod_func("non_existent_func")

        # Test valid function
        device_count = torch.utils.backend_registration._get_custom_mod_func("device_count")
        self.assertIsNotNone(device_count)


class TestBackendProperty(TestCase):
    def test_backend_generate_methods(self):
        """Test backend method generation"""
        with self.assertRaisesRegex(RuntimeError, "The custom device module of"):
            torch.utils.generate_methods_for_privateuse1_backend()

        self.assertTrue(hasattr(torch.Tensor, "is_npu"))
        self.assertTrue(hasattr(torch.Tensor, "npu"))
        self.assertTrue(hasattr(torch.TypedStorage, "is_npu"))
        self.assertTrue(hasattr(torch.TypedStorage, "npu"))
        self.assertTrue(hasattr(torch.UntypedStorage, "is_npu"))
        self.assertTrue(hasattr(torch.UntypedStorage, "npu"))
        self.assertTrue(hasattr(torch.nn.Module, "npu"))
        self.assertTrue(hasattr(torch.nn.utils.rnn.PackedSequence, "is_npu"))
        self.assertTrue(hasattr(torch.nn.utils.rnn.PackedSequence, "npu"))

    def test_backend_tensor_methods(self):
        """Test backend tensor methods"""
        x = torch.empty(4, 4)
        self.assertFalse(x.is_npu)

        y = x.npu(torch.device("npu"))
        self.assertTrue(y.is_npu)
        z = x.npu(torch.device("npu:0"))
        self.assertTrue(z.is_npu)
        n = x.npu(0)
        self.assertTrue(n.is_npu)

    def test_backend_module_methods(self):
        """Test backend module methods (skipped on openreg: "Need to support Parameter in openreg")"""

        class FakeModule(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.x = torch.nn.Parameter(torch.randn(3, 3))

            def forward(self):
                pass

        module = FakeModule()
        self.assertEqual(module.x.device.type, "cpu")
        module.npu()  # type: ignore[misc]
        self.assertEqual(module.x.device.type, "npu")

    def test_backend_storage_methods(self):
        """Test backend storage methods (skipped on openreg: "Need to support untyped_storage in openreg")"""
        x = torch.empty(4, 4)

        x_cpu = x.storage()
        self.assertFalse(x_cpu.is_npu)
        x_npu = x_cpu.npu()
        self.assertTrue(x_npu.is_npu)

        y = torch.empty(4, 4)

        y_cpu = y.untyped_storage()
        self.assertFalse(y_cpu.is_npu)
        y_npu = y_cpu.npu()
        self.assertTrue(y_npu.is_npu)

    def test_backend_packed_sequence_methods(self):
        """Test backend PackedSequence methods"""
        x = torch.rand(5, 3)
        y = torch.tensor([1, 1, 1, 1, 1])

        z_cpu = torch.nn.utils.rnn.PackedSequence(x, y)
        self.assertFalse(z_cpu.is_npu)

        z_npu = z_cpu.npu()
        self.assertTrue(z_npu.is_npu)

    def test_backend_packed_sequence_properties(self):
        """Test PackedSequence backend properties"""
        x = torch.rand(5, 3)
        y = torch.tensor([1, 1, 1, 1, 1])

        z_cpu = torch.nn.utils.rnn.PackedSequence(x, y)
        self.assertFalse(z_cpu.is_npu)

        z_npu = z_cpu.npu()
        self.assertTrue(z_npu.is_npu)

        # Test that data is on correct device
        self.assertTrue(z_npu.data.is_npu)

    def test_backend_tensor_methods_different_devices(self):
        """Test tensor methods with different device indices"""
        x = torch.empty(4, 4)

        y0 = x.npu(0)
        self.assertTrue(y0.is_npu)
        self.assertEqual(y0.device.index, 0)

        y1 = x.npu(1)
        self.assertTrue(y1.is_npu)
        self.assertEqual(y1.device.index, 1)

        y_none = x.npu(torch.device("npu"))
        self.assertTrue(y_none.is_npu)


class TestTensorType(TestCase):
    def test_backend_tensor_type(self):
        """Test tensor type string representation for different dtypes"""
        dtypes_map = {
            torch.bool: "torch.npu.BoolTensor",
            torch.double: "torch.npu.DoubleTensor",
            torch.float32: "torch.npu.FloatTensor",
            torch.half: "torch.npu.HalfTensor",
            torch.int32: "torch.npu.IntTensor",
            torch.int64: "torch.npu.LongTensor",
            torch.int8: "torch.npu.CharTensor",
            torch.short: "torch.npu.ShortTensor",
            torch.uint8: "torch.npu.ByteTensor",
        }

        for dtype, str in dtypes_map.items():
            x = torch.empty(4, 4, dtype=dtype, device="npu")
            self.assertTrue(x.type() == str)

    # Note that all dtype-d Tensor objects here are only for legacy reasons
    # and should NOT be used.
    @skipIfTorchDynamo()
    def test_backend_type_methods(self):
        """Test backend type methods for tensor and storage"""
        # Tensor
        tensor_cpu = torch.randn([8]).float()
        self.assertEqual(tensor_cpu.type(), "torch.FloatTensor")

        tensor_npu = tensor_cpu.npu()
        self.assertEqual(tensor_npu.type(), "torch.npu.FloatTensor")

        # Storage
        storage_cpu = tensor_cpu.storage()
        self.assertEqual(storage_cpu.type(), "torch.FloatStorage")

        tensor_npu = tensor_cpu.npu()
        storage_npu = tensor_npu.storage()
        self.assertEqual(storage_npu.type(), "torch.storage.TypedStorage")

        class CustomFloatStorage:
            @property
            def __module__(self):
                return "torch." + torch._C._get_privateuse1_backend_name()

            @property
            def __name__(self):
                return "FloatStorage"

        try:
            torch.npu.FloatStorage = CustomFloatStorage()
            self.assertEqual(storage_npu.type(), "torch.npu.FloatStorage")

            # test custom int storage after defining FloatStorage
            tensor_npu = tensor_cpu.int().npu()
            storage_npu = tensor_npu.storage()
            self.assertEqual(storage_npu.type(), "torch.storage.TypedStorage")
        finally:
            torch.npu.FloatStorage = None

    def test_backend_storage_type_consistency(self):
        """Test storage type consistency"""
        tensor = torch.randn(4, 4, device="npu")
        storage = tensor.storage()

        # Storage should be on same device
        self.assertTrue(storage.is_npu)

        # Test storage size
        self.assertEqual(storage.size(), tensor.numel())
