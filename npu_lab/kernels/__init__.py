"""numba kernels of the simulated NPU (pure functions on NumPy arrays)."""
