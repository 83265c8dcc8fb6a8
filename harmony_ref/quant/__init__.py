"""Packed weight formats (INT4 group-wise, INT8 per-channel: storage, quantizers with their NumPy
`_ref` twins, dequantizers) and mixed-precision policies (which layer gets which format). How each
format multiplies is kernels/formats.py."""
