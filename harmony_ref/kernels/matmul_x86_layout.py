"""The operands of the x86 int8 kernels (matmul_x86.py) in the form they read: weights laid out
once per tensor (NumPy) and activations quantized to int8 bytes with their exact block sums
(plain numba, no intrinsics of matmul_x86.py, so numba's cache, keyed on this file, sees every
edit of what it compiles).

Layout (built once per tensor by `layout_w4` / `layout_w8`): for each tile of 64 rows and each
step of 4 (W8) or 8 (W4) along K, 64 rows x 4 bytes are contiguous, so one 256-byte load feeds
64 lanes. W4 byte [t, j, r, c] holds u(k = 8j + c) in its low nibble and u(8j + 4 + c) in its
high one: `& 15` and `>> 4` give two ready 4-byte steps. Group scales stay float16 (uint16
bits, converted with vcvtph2ps) and zero points int8, so a W4 g32 weight costs 19 bytes per
32 values (llama.cpp Q4_1: 20, Q4_0: 18).
"""

from __future__ import annotations

import numba
import numpy as np

from harmony_ref.kernels.matmul_portable import quantize_activations_into
from harmony_ref.kernels.matmul_x86 import LANES


def _tiles_of(a: np.ndarray, fill=0) -> np.ndarray:
    """(N, ...) -> (T, LANES, ...) with rows past N set to `fill`."""
    tiles = -(-a.shape[0] // LANES)
    padded = np.full((tiles * LANES,) + a.shape[1:], fill, dtype=a.dtype)
    padded[: a.shape[0]] = a
    return padded.reshape((tiles, LANES) + a.shape[1:])


def _per_group(a: np.ndarray) -> np.ndarray:
    """(N, G) -> (T, G * LANES): group g of the tile's 64 rows contiguous."""
    t = _tiles_of(a)
    return np.ascontiguousarray(t.transpose(0, 2, 1)).reshape(t.shape[0], -1)


def layout_w4(packed: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None):
    """Int4Tensor arrays -> (bytes (T, K / 2 * LANES) uint8, scale (T, G * LANES) uint16 float16
    bits or float32, zero point (T, G * LANES) int8); see the module doc."""
    n, half = packed.shape
    u = packed ^ np.uint8(0x88)  # two's complement nibbles -> q + 8; high nibble = element 2j
    nib = np.empty((n, 2 * half), np.uint8)
    nib[:, 0::2] = u >> 4
    nib[:, 1::2] = u & 15
    t = _tiles_of(nib).reshape(-1, LANES, half // 4, 2, 4)  # [t, r, j, low/high, c]
    stepped = t[:, :, :, 0, :] | (t[:, :, :, 1, :] << 4)  # (T, r, j, c)
    data = np.ascontiguousarray(stepped.transpose(0, 2, 1, 3)).reshape(t.shape[0], -1)
    scale = scale.view(np.uint16) if scale.dtype == np.float16 else scale.astype(np.float32)
    zp = np.zeros(scale.shape, np.int8) if zero_point is None else zero_point.astype(np.int8)
    return data, _per_group(scale), _per_group(zp)


def layout_w8(values: np.ndarray, scale: np.ndarray):
    """Int8Tensor arrays -> (bytes (T, K * LANES) uint8 holding w + 128, scale (T, LANES))."""
    n, k = values.shape
    u = _tiles_of(values.view(np.uint8) ^ np.uint8(0x80), fill=0x80)  # (T, r, K), pad w = 0
    stepped = u.reshape(u.shape[0], LANES, k // 4, 4).transpose(0, 2, 1, 3)
    data = np.ascontiguousarray(stepped).reshape(u.shape[0], -1)
    return data, _tiles_of(scale.astype(np.float32)).reshape(-1, LANES).copy()


@numba.njit(cache=True)
def _quantize_activations_bytes(x, block):
    """matmul_portable._quantize_activations' arithmetic, xq as int8 (M, K) (viewed as int32
    words by the kernels) plus its exact block sums."""
    return quantize_activations_into(x, block, np.empty(x.shape, dtype=np.int8))
