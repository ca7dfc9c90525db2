"""scans operators for the npu (being written)."""
