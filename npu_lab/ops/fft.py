"""fft operators for the npu (being written)."""
