"""Numba reference kernels with their NumPy `_ref` twins: weight-only INT4/INT8 matmul, fused
LayerNorm + bias + GELU (and the same chain unfused), decode attention over an FP16/INT8 KV cache."""

from harmony_ref.kernels.matmul import (
    PreparedW4,
    PreparedW8,
    matmul_w4,
    matmul_w4_ref,
    matmul_w8,
    matmul_w8_ref,
    prepare_w4,
    prepare_w8,
)

__all__ = [
    "PreparedW4",
    "PreparedW8",
    "matmul_w4",
    "matmul_w4_ref",
    "matmul_w8",
    "matmul_w8_ref",
    "prepare_w4",
    "prepare_w8",
]
