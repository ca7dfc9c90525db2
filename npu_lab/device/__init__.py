"""The simulated NPU device: registration, memory, streams, RNG and fallback."""
