# Ported from torch_openreg's tests/test_rnn.py
# (pytorch/pytorch: test/cpp_extensions/open_registration_extension/torch_openreg/tests/test_rnn.py).
# Adapted:
#   - `import npu_lab` added (the original relies on torch_openreg being auto-loaded); device "openreg" -> "npu",
#     local names *_openreg -> *_npu.
#   - no run_tests() call (collected by pytest).

import torch
import torch.nn as nn
from torch.testing._internal.common_utils import TestCase

import npu_lab  # noqa: F401


class TestLSTM(TestCase):
    def test_lstm_basic(self):
        input_size, hidden_size, num_layers = 10, 20, 1
        seq_len, batch_size = 5, 2

        lstm = nn.LSTM(input_size=input_size, hidden_size=hidden_size, num_layers=num_layers)
        lstm_npu = lstm.to("npu")
        x = torch.randn(seq_len, batch_size, input_size, device="npu")

        output, (h_n, c_n) = lstm_npu(x)

        self.assertEqual(output.device.type, "npu")
        self.assertEqual(h_n.device.type, "npu")
        self.assertEqual(c_n.device.type, "npu")
        self.assertEqual(output.shape, torch.Size([seq_len, batch_size, hidden_size]))
        self.assertEqual(h_n.shape, torch.Size([num_layers, batch_size, hidden_size]))
        self.assertEqual(c_n.shape, torch.Size([num_layers, batch_size, hidden_size]))

    def test_lstm_multi_layer(self):
        input_size, hidden_size, num_layers = 10, 20, 3
        seq_len, batch_size = 5, 2

        lstm = nn.LSTM(
            input_size=input_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
        ).to("npu")
        x = torch.randn(seq_len, batch_size, input_size, device="npu")

        output, (h_n, c_n) = lstm(x)

        self.assertEqual(output.device.type, "npu")
        self.assertEqual(output.shape, torch.Size([seq_len, batch_size, hidden_size]))
        self.assertEqual(h_n.shape, torch.Size([num_layers, batch_size, hidden_size]))
        self.assertEqual(c_n.shape, torch.Size([num_layers, batch_size, hidden_size]))

    def test_lstm_bidirectional(self):
        input_size, hidden_size, num_layers = 10, 20, 2
        seq_len, batch_size = 5, 2
        num_directions = 2

        lstm = nn.LSTM(
            input_size=input_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            bidirectional=True,
        ).to("npu")
        x = torch.randn(seq_len, batch_size, input_size, device="npu")

        output, (h_n, c_n) = lstm(x)

        self.assertEqual(output.device.type, "npu")
        self.assertEqual(
            output.shape,
            torch.Size([seq_len, batch_size, hidden_size * num_directions]),
        )
        self.assertEqual(
            h_n.shape,
            torch.Size([num_layers * num_directions, batch_size, hidden_size]),
        )
        self.assertEqual(
            c_n.shape,
            torch.Size([num_layers * num_directions, batch_size, hidden_size]),
        )

    def test_lstm_batch_first(self):
        input_size, hidden_size = 10, 20
        seq_len, batch_size = 5, 2

        lstm = nn.LSTM(
            input_size=input_size,
            hidden_size=hidden_size,
            batch_first=True,
        ).to("npu")
        x = torch.randn(batch_size, seq_len, input_size, device="npu")

        output, (h_n, c_n) = lstm(x)

        self.assertEqual(output.device.type, "npu")
        self.assertEqual(output.shape, torch.Size([batch_size, seq_len, hidden_size]))

    def test_lstm_with_initial_hidden(self):
        input_size, hidden_size, num_layers = 10, 20, 1
        seq_len, batch_size = 5, 2

        lstm = nn.LSTM(
            input_size=input_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
        ).to("npu")
        x = torch.randn(seq_len, batch_size, input_size, device="npu")
        h0 = torch.randn(num_layers, batch_size, hidden_size, device="npu")
        c0 = torch.randn(num_layers, batch_size, hidden_size, device="npu")

        output, (h_n, c_n) = lstm(x, (h0, c0))

        self.assertEqual(output.device.type, "npu")
        self.assertEqual(h_n.device.type, "npu")
        self.assertEqual(c_n.device.type, "npu")

    def test_lstm_packed_sequence(self):
        input_size, hidden_size = 10, 20

        lstm = nn.LSTM(input_size=input_size, hidden_size=hidden_size).to("npu")

        sequences = [
            torch.randn(5, input_size),
            torch.randn(3, input_size),
            torch.randn(1, input_size),
        ]
        packed = nn.utils.rnn.pack_sequence(sequences, enforce_sorted=True)
        packed_npu = packed.to("npu")

        output_packed, (h_n, c_n) = lstm(packed_npu)

        self.assertEqual(output_packed.data.device.type, "npu")
        self.assertEqual(h_n.device.type, "npu")
        self.assertEqual(c_n.device.type, "npu")

    def test_lstm_cpu_parity(self):
        input_size, hidden_size, num_layers = 8, 16, 2
        seq_len, batch_size = 4, 3

        lstm = nn.LSTM(
            input_size=input_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            bidirectional=True,
        )

        x_cpu = torch.randn(seq_len, batch_size, input_size)
        output_cpu, (h_cpu, c_cpu) = lstm(x_cpu)

        lstm_npu = lstm.to("npu")
        x_npu = x_cpu.to("npu")
        output_npu, (h_npu, c_npu) = lstm_npu(x_npu)

        self.assertEqual(output_cpu, output_npu.cpu())
        self.assertEqual(h_cpu, h_npu.cpu())
        self.assertEqual(c_cpu, c_npu.cpu())
