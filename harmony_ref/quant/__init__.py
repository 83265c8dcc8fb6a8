"""Quantized weight formats (INT4 group-wise, INT8 per-channel) and mixed-precision policies."""
