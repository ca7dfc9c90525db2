"""spatial operators for the npu (being written)."""
