"""sorting operators for the npu (being written)."""
