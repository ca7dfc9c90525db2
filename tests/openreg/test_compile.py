# Ported from torch_openreg's tests/test_compile.py
# (pytorch/pytorch: test/cpp_extensions/open_registration_extension/torch_openreg/tests/test_compile.py).
# Adapted:
#   - test_backend_metadata_propagation: skipped: torch 2.13's FakeTensor does not carry backend
#     metadata into traced graphs (PyTorch added that later; no backend registration can change it).
#   - `import npu_lab` added (the original relies on torch_openreg being auto-loaded); device "openreg" -> "npu".
#   - the Dynamo backend "openreg" -> "npu" (npu_lab registers torch.compile(backend="npu") through the
#     torch_dynamo_backends entry point), also in CompileCounterWithBackend("npu").
#   - no run_tests() call (collected by pytest).

import unittest

import torch
import torch._dynamo
from torch._dynamo.test_case import TestCase
from torch._dynamo.testing import CompileCounterWithBackend

import npu_lab  # noqa: F401


class TestBackendRegistration(TestCase):
    def test_backend_in_list(self):
        from torch._dynamo.backends.registry import list_backends

        backends = list_backends(exclude_tags=())
        self.assertIn("npu", backends)


class TestGraphCapture(TestCase):
    def test_simple_compile(self):
        @torch.compile(backend="npu")
        def fn(x):
            return x + 1

        x = torch.randn(4, device="npu")
        result = fn(x)
        self.assertEqual(result, x + 1)

    def test_compile_fullgraph_multiple_ops(self):
        @torch.compile(backend="npu", fullgraph=True)
        def fn(x):
            y = x + 1
            z = y * 2
            return torch.relu(z)

        x = torch.randn(4, device="npu")
        result = fn(x)
        self.assertEqual(result, torch.relu((x + 1) * 2))


class TestFakeTensor(TestCase):
    def test_device_metadata(self):
        captured_gm = None

        def capture_backend(gm, example_inputs):
            nonlocal captured_gm
            captured_gm = gm
            return gm.forward

        @torch.compile(backend=capture_backend)
        def fn(x):
            return x + 1

        x = torch.randn(4, device="npu")
        fn(x)

        self.assertIsNotNone(captured_gm)
        for node in captured_gm.graph.nodes:
            if node.op == "placeholder" and "val" in node.meta:
                fake = node.meta["val"]
                if isinstance(fake, torch.Tensor):
                    self.assertEqual(fake.device.type, "npu")

    @unittest.skip("torch 2.13's FakeTensor does not carry backend metadata (PyTorch added that later)")
    def test_backend_metadata_propagation(self):
        captured = []

        def capture_backend(gm, example_inputs):
            for node in gm.graph.nodes:
                if node.op == "placeholder":
                    fake = node.meta.get("example_value")
                    if isinstance(fake, torch.Tensor):
                        captured.append(torch._utils.get_tensor_metadata(fake))
            return gm.forward

        @torch.compile(backend=capture_backend, fullgraph=True)
        def fn(x):
            return x + 1

        x = torch.empty(3, 3, device="npu")
        metadata = {"version_number": True, "format_number": True}
        torch._utils.set_tensor_metadata(x, metadata)
        fn(x)

        self.assertEqual(captured, [metadata])

    def test_fake_tensor_mode(self):
        with torch._subclasses.fake_tensor.FakeTensorMode():
            x = torch.empty(3, 3, device="npu")
            self.assertEqual(x.device.type, "npu")
            y = x + 1
            self.assertEqual(y.device.type, "npu")


class TestGuards(TestCase):
    def test_backend_recompilation(self):
        counter = CompileCounterWithBackend("npu")

        @torch.compile(backend=counter)
        def fn(x):
            return x + 1

        x = torch.randn(4, device="npu")
        fn(x)
        self.assertEqual(counter.frame_count, 1)

        fn(x)
        self.assertEqual(counter.frame_count, 1)

    def test_recompilation_on_shape_change(self):
        counter = CompileCounterWithBackend("npu")

        @torch.compile(backend=counter)
        def fn(x):
            return x + 1

        x1 = torch.randn(4, device="npu")
        fn(x1)
        self.assertEqual(counter.frame_count, 1)

        x2 = torch.randn(8, device="npu")
        fn(x2)
        self.assertEqual(counter.frame_count, 2)


class TestExecution(TestCase):
    def test_autograd(self):
        @torch.compile(backend="npu")
        def fn(x):
            return (x * 2).sum()

        x = torch.randn(4, device="npu", requires_grad=True)
        loss = fn(x)
        loss.backward()

        self.assertIsNotNone(x.grad)
        self.assertEqual(x.grad, torch.full_like(x, 2.0))

    def test_nn_module(self):
        class SimpleModule(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(4, 4)

            def forward(self, x):
                return self.linear(x)

        m = SimpleModule().to("npu")
        compiled_m = torch.compile(m, backend="npu")

        x = torch.randn(2, 4, device="npu")
        result = compiled_m(x)
        self.assertEqual(result.device.type, "npu")
        self.assertEqual(result.shape, torch.Size([2, 4]))

        eager_result = m(x)
        self.assertEqual(result, eager_result)


class TestDynamicShapes(TestCase):
    def test_dynamic_shapes(self):
        @torch.compile(backend="npu", dynamic=True)
        def fn(x):
            return x + 1

        x4 = torch.randn(4, device="npu")
        x8 = torch.randn(8, device="npu")

        self.assertEqual(fn(x4), x4 + 1)
        self.assertEqual(fn(x8), x8 + 1)


class TestGraphBreaks(TestCase):
    def test_device_transfer_traces_fully(self):
        @torch.compile(backend="npu", fullgraph=True)
        def fn(x):
            y = x + 1
            z = y.cpu()
            return z * 2

        x = torch.randn(4, device="npu")
        result = fn(x)
        expected = (x + 1).cpu() * 2
        self.assertEqual(result, expected)
        self.assertEqual(result.device.type, "cpu")

    def test_graph_break_resilience(self):
        counter = CompileCounterWithBackend("npu")

        @torch.compile(backend=counter)
        def fn(x):
            y = x + 1
            torch._dynamo.graph_break()
            return y * 2

        x = torch.randn(4, device="npu")
        result = fn(x)
        self.assertEqual(result, (x + 1) * 2)
        self.assertGreater(counter.frame_count, 1)


class TestAutocast(TestCase):
    def test_compile_with_autocast(self):
        @torch.compile(backend="npu")
        def fn(x, y):
            with torch.autocast(device_type="npu", dtype=torch.float16):
                return torch.mm(x, y)

        x = torch.randn(2, 3, device="npu")
        y = torch.randn(3, 3, device="npu")
        result = fn(x, y)
        self.assertEqual(result.dtype, torch.float16)


class TestDefaultDevice(TestCase):
    def test_compile_with_default_device(self):
        with torch.device("npu"):

            @torch.compile(backend="npu")
            def fn(x):
                y = torch.empty(4)
                return x + y

            x = torch.randn(4, device="npu")
            result = fn(x)
            self.assertEqual(result.device.type, "npu")


class TestDeviceInterface(TestCase):
    def test_interface_registered(self):
        from torch._dynamo.device_interface import get_interface_for_device

        iface = get_interface_for_device("npu")
        self.assertIsNotNone(iface)

    def test_current_device(self):
        from torch._dynamo.device_interface import get_interface_for_device

        iface = get_interface_for_device("npu")
        device_idx = iface.current_device()
        self.assertIsInstance(device_idx, int)

    def test_device_count(self):
        from torch._dynamo.device_interface import get_interface_for_device

        iface = get_interface_for_device("npu")
        self.assertGreater(iface.device_count(), 0)
