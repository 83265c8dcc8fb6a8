"""Numba reference kernels with their NumPy `_ref` twins: weight-only INT4/INT8 matmul, fused
LayerNorm + bias + GELU (and the same chain unfused), decode attention over an FP16/INT8 KV cache."""

from harmony_ref.kernels.attention import KVCache, decode_attention, decode_attention_ref
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
from harmony_ref.kernels.norm import (
    bias_add,
    bias_add_ref,
    gelu,
    gelu_ref,
    layer_norm,
    layer_norm_ref,
    norm_bias_gelu,
    norm_bias_gelu_ref,
)

__all__ = [
    "KVCache",
    "decode_attention",
    "decode_attention_ref",
    "bias_add",
    "bias_add_ref",
    "gelu",
    "gelu_ref",
    "layer_norm",
    "layer_norm_ref",
    "norm_bias_gelu",
    "norm_bias_gelu_ref",
    "PreparedW4",
    "PreparedW8",
    "matmul_w4",
    "matmul_w4_ref",
    "matmul_w8",
    "matmul_w8_ref",
    "prepare_w4",
    "prepare_w8",
]
