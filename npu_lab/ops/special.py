"""special operators for the npu (being written)."""
