"""Per-output-channel symmetric INT8 weights.

Format, for a float matrix W of shape (N, K):

    values  (N, K)  int8     q = clamp(round(w / s), -127, 127)  (-128 unused: symmetric)
    scale   (N,)    float32  s = max|row| / 127; an all-zero row stores s = 0 and q = 0

Round trip: |w - q * s| <= s / 2 (plus float32 arithmetic). `quantize_int8_ref` is the NumPy
reference; `quantize_int8` the Numba version, held bit-identical by tests/quant/test_int8.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from harmony_ref.quant._checks import as_float32_matrix

INT8_MAX_LEVEL = 127
# Below the smallest normal float32, max|row| / 127 rounds to a multiple of the smallest
# subnormal (to 0 for the tiniest rows) with a large relative error: a step rounded down would
# clip the row's largest value at 127 steps. There the step is rounded up instead (one subnormal
# more, exact: subnormals are evenly spaced), so 127 * step >= max|row| always holds.
MIN_STEP = np.float32(np.finfo(np.float32).smallest_subnormal)
MIN_NORMAL = np.float32(np.finfo(np.float32).tiny)


@dataclass(frozen=True, eq=False)
class Int8Tensor:
    values: np.ndarray  # (N, K) int8
    scale: np.ndarray  # (N,) float32
    shape: tuple[int, int]

    def __post_init__(self):
        n, k = self.shape
        if self.values.dtype != np.int8 or self.values.shape != (n, k):
            raise ValueError(
                f"values must be int8 of shape {(n, k)}, got {self.values.dtype} {self.values.shape}"
            )
        if self.scale.dtype != np.float32 or self.scale.shape != (n,):
            raise ValueError(
                f"scale must be float32 of shape {(n,)}, got {self.scale.dtype} {self.scale.shape}"
            )

    @property
    def nbytes(self) -> int:
        return self.values.nbytes + self.scale.nbytes

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.nbytes / (self.shape[0] * self.shape[1])

    @property
    def format_name(self) -> str:
        return "int8"


def symmetric_int8_scale(amax: np.ndarray) -> np.ndarray:
    """float32 steps s = max|x| / 127 of any shape, rounded up where subnormal (see MIN_STEP):
    127 * s >= max|x|, and s = 0 only where max|x| = 0. The KV cache's int8 rows use it too."""
    amax = np.asarray(amax, dtype=np.float32)
    scale = (amax / np.float32(INT8_MAX_LEVEL)).astype(np.float32)
    low = (scale < MIN_NORMAL) & (
        scale.astype(np.float64) * INT8_MAX_LEVEL < amax.astype(np.float64)
    )
    return np.where(low, scale + MIN_STEP, scale).astype(np.float32)


# CPU code reference


def quantize_int8_ref(w) -> Int8Tensor:
    """Plain NumPy reference. w: (N, K) float -> Int8Tensor."""
    w = as_float32_matrix(w)
    amax = np.abs(w).max(axis=1)  # (N,)
    scale = symmetric_int8_scale(amax)
    safe = np.where(scale == 0, np.float32(1), scale)[:, None]  # (N, 1)
    q = np.clip(np.rint(w / safe), -INT8_MAX_LEVEL, INT8_MAX_LEVEL).astype(np.int8)  # (N, K)
    return Int8Tensor(q, scale, w.shape)


def dequantize_int8(t: Int8Tensor) -> np.ndarray:
    """Int8Tensor -> float32 (N, K)."""
    return t.values.astype(np.float32) * t.scale[:, None]


# Fast path


@numba.njit(parallel=True, cache=True)
def _quantize_int8_rows(w):
    n, k = w.shape
    q = np.empty((n, k), dtype=np.int8)
    scale = np.empty(n, dtype=np.float32)
    levels = np.float32(INT8_MAX_LEVEL)
    for i in numba.prange(n):
        amax = np.float32(0.0)
        for j in range(k):
            amax = max(amax, abs(w[i, j]))
        s = amax / levels
        if s < MIN_NORMAL and np.float64(s) * INT8_MAX_LEVEL < np.float64(amax):
            s = np.float32(s + MIN_STEP)
        scale[i] = s
        safe = np.float32(1.0) if s == 0 else s
        for j in range(k):
            q[i, j] = np.int8(min(max(np.rint(w[i, j] / safe), -levels), levels))
    return q, scale


def quantize_int8(w) -> Int8Tensor:
    """Fast (Numba, all cores) per-channel INT8 quantizer; bit-identical to the reference."""
    w = as_float32_matrix(w)
    q, scale = _quantize_int8_rows(w)
    return Int8Tensor(q, scale, w.shape)
