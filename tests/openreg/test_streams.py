# Ported from torch_openreg's tests/test_streams.py
# (pytorch/pytorch: test/cpp_extensions/open_registration_extension/torch_openreg/tests/test_streams.py).
# Adapted:
#   - `import torch_openreg` -> `import npu_lab`; device "openreg" -> "npu", torch.openreg -> torch.npu
#     (also in the expected repr "torch.Stream device_type=npu, device_index=1").
#   - no run_tests() call (collected by pytest).

import torch
from torch.testing._internal.common_utils import TestCase, skipIfTorchDynamo

import npu_lab  # noqa: F401


class TestStream(TestCase):
    def test_stream_create(self):
        stream = torch.Stream(device="npu")
        self.assertEqual(stream.device_index, torch.npu.current_device())

        stream = torch.Stream(device="npu:1")
        self.assertEqual(stream.device.type, "npu")
        self.assertEqual(stream.device_index, 1)

        stream = torch.Stream(1)
        self.assertEqual(stream.device.type, "npu")
        self.assertEqual(stream.device_index, 1)

        stream1 = torch.Stream(
            stream_id=stream.stream_id,
            device_type=stream.device_type,
            device_index=stream.device_index,
        )
        self.assertEqual(stream, stream1)

    def test_stream_context(self):
        with torch.Stream(device="npu:1") as stream:
            self.assertEqual(torch.accelerator.current_stream(), stream)

    @skipIfTorchDynamo()
    def test_stream_switch(self):
        stream1 = torch.Stream(device="npu:0")
        torch.accelerator.set_stream(stream1)
        current_stream = torch.accelerator.current_stream()
        self.assertEqual(current_stream, stream1)

        stream2 = torch.Stream(device="npu:1")
        torch.accelerator.set_stream(stream2)
        current_stream = torch.accelerator.current_stream()
        self.assertEqual(current_stream, stream2)

    def test_stream_synchronize(self):
        stream = torch.Stream(device="npu:1")
        self.assertEqual(True, stream.query())

        event = torch.Event()
        event.record(stream)
        stream.synchronize()
        self.assertEqual(True, stream.query())

    def test_stream_repr(self):
        stream = torch.Stream(device="npu:1")
        self.assertTrue("torch.Stream device_type=npu, device_index=1" in repr(stream))

    def test_stream_wait_stream(self):
        stream_1 = torch.Stream(device="npu:0")
        stream_2 = torch.Stream(device="npu:1")
        stream_2.wait_stream(stream_1)

    @skipIfTorchDynamo()
    def test_stream_wait_event(self):
        s1 = torch.Stream(device="npu")
        s2 = torch.Stream(device="npu")
        e = s1.record_event()
        s2.wait_event(e)
