"""Static INT8 activation quantization (the A8 of W8A8): scales fixed ahead of time from
calibration data, instead of the per-32-block scales matmul_w4 / matmul_w8 compute on every call.

    obs = AbsMaxObserver(k)              # one per Linear input, K channels
    obs.update(x)                        # x (M, K) float32 activations seen in calibration
    scale = obs.scales("per-tensor")     # (K,) float32: one value repeated, or one per channel
    xq, xsum = quantize_static(x, scale, block)    # int8 (M, K), exact int32 sums per block
    quantize_static_ref(x, scale)                  # the same int8 values, plain NumPy

Rule: xq = clamp(rint(x / scale), -127, 127) with scale = max|x| / 127 over the calibration
samples (per tensor: over every channel; per channel: channel k alone). "smooth" is
SmoothQuant's: per-channel factors f_k = max|x_k|^alpha / max|w_k|^(1 - alpha) (w_k: column k
of the weights reading this input) and one per-tensor scale t over x_k / f_k, so
scale_k = f_k t; W8A8 folds scale_k into the weight (kernels/matmul_w8a8.py). A value inside the
calibrated range comes back within half a step (|xq * scale - x| <= scale / 2); beyond it, it
saturates at +-127 * scale (the clipping error static scales accept). A channel that was always
zero in calibration (or so small that max|x| / 127 underflows float32 to 0) gets scale
ZERO_CHANNEL_SCALE / 127 rather than 0, so it never divides by 0
(the per-tensor scale of an all-zero tensor likewise). The fast path and the twin divide in
float32 and round half to even, so they agree bit for bit; hypothesis tests hold both
properties (tests/quant/test_activations.py).
"""

from __future__ import annotations

import numba
import numpy as np

ACT_LEVELS = 127
ZERO_CHANNEL_SCALE = 1.0  # max|x| assumed for a channel never seen non-zero


class AbsMaxObserver:
    """Running per-channel max|x| of one Linear's input over calibration batches."""

    def __init__(self, k: int):
        self.amax = np.zeros(k, dtype=np.float32)  # (K,)
        self.rows = 0

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, dtype=np.float32).reshape(-1, self.amax.shape[0])
        if not np.isfinite(x).all():
            raise ValueError("calibration activations contain NaN/Inf")
        np.maximum(self.amax, np.abs(x).max(axis=0), out=self.amax)
        self.rows += x.shape[0]

    def scales(self, granularity: str, w_amax=None, alpha: float = 0.5) -> np.ndarray:
        """(K,) float32 scales: per-tensor (one value, repeated), per-channel, or smooth (needs
        `w_amax`, the weights' per-column max|w|)."""
        if self.rows == 0:
            raise ValueError("observer saw no calibration activations")
        if granularity == "smooth":
            return smooth_scales(self.amax, w_amax, alpha)
        return scales_from_amax(self.amax, granularity)


def smooth_scales(x_amax: np.ndarray, w_amax: np.ndarray, alpha: float) -> np.ndarray:
    """SmoothQuant scales f_k t (see the module doc); channels with max|x| or max|w| zero get
    f_k = 1."""
    xa = np.asarray(x_amax, dtype=np.float64)
    wa = np.asarray(w_amax, dtype=np.float64)
    ok = (xa > 0) & (wa > 0)
    f = np.ones_like(xa)
    f[ok] = xa[ok] ** alpha / wa[ok] ** (1.0 - alpha)
    t = (xa / f).max()
    t = t / ACT_LEVELS if t > 0 else ZERO_CHANNEL_SCALE / ACT_LEVELS
    return (f * t).astype(np.float32)


def scales_from_amax(amax: np.ndarray, granularity: str) -> np.ndarray:
    amax = np.asarray(amax, dtype=np.float32)
    if granularity == "per-tensor":
        amax = np.full_like(amax, amax.max())
    elif granularity != "per-channel":
        raise ValueError(f"granularity must be per-tensor or per-channel, got {granularity!r}")
    scale = (amax / np.float32(ACT_LEVELS)).astype(np.float32)
    # zero, or so small (subnormal) that max|x| / 127 underflows to 0: a zero channel's scale
    return np.where(scale > 0, scale, np.float32(ZERO_CHANNEL_SCALE / ACT_LEVELS)).astype(
        np.float32
    )


def check_scale(scale, k: int) -> np.ndarray:
    s = np.asarray(scale, dtype=np.float32)
    if s.shape != (k,):
        raise ValueError(f"activation scale has shape {s.shape}, expected ({k},)")
    if not (np.isfinite(s).all() and (s > 0).all()):
        raise ValueError("activation scales must be finite and > 0")
    return np.ascontiguousarray(s)


def quantize_static_ref(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """x (M, K) float32, scale (K,) float32 -> xq (M, K) int8 (see the module doc)."""
    x = np.asarray(x, dtype=np.float32)
    q = np.rint(x / scale[None, :])
    return np.clip(q, -ACT_LEVELS, ACT_LEVELS).astype(np.int8)


@numba.njit(parallel=True, cache=True)
def _quantize_static(x, scale, block):
    m, k = x.shape
    nb = k // block
    xq = np.empty((m, k), dtype=np.int8)
    xsum = np.empty((m, nb), dtype=np.int32)
    levels = np.float32(ACT_LEVELS)
    for i in numba.prange(m):
        for b in range(nb):
            total = 0
            for j in range(b * block, (b + 1) * block):
                v = np.int32(min(max(np.rint(x[i, j] / scale[j]), -levels), levels))
                xq[i, j] = v
                total += v
            xsum[i, b] = total
    return xq, xsum


def quantize_static(x: np.ndarray, scale: np.ndarray, block: int):
    """Numba: xq (M, K) int8 (== quantize_static_ref) and its exact int32 sums per `block`
    values along K (M, K // block), what the int8 dot-product kernels' offset correction reads.
    x must be C-contiguous float32 (M, K) with K a multiple of `block`."""
    if x.shape[1] % block:
        raise ValueError(f"K = {x.shape[1]} is not a multiple of the block {block}")
    return _quantize_static(x, scale, block)
