"""linalg_decomp operators for the npu (being written)."""
