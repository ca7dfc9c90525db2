"""activations operators for the npu (being written)."""
