"""Checkpoint readers: GGUF and Hugging Face safetensors decoders into one in-memory model."""
