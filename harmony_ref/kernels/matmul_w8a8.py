"""W8A8 Linear: int8 activations with static (calibrated) scales x int8 weights, and its NumPy
twin.

    w = quantize_w8a8(w_fp32, act_scale)        # (N, K) float, act_scale (K,) -> W8A8Weight
    y = matmul_w8a8(x, w)                       # x (M, K) or (K,) float -> (M, N) float32
    y_ref = matmul_w8a8_ref(x, w)               # the same arithmetic in NumPy

The activation scale of input channel k, s_k (per-tensor scales are one s repeated), is folded
into the weight before it is quantized: W'[n, k] = W[n, k] s_k, stored as int8 per row with
scale s_w[n] (quant/int8.py). Then x[m, k] ~ xq[m, k] s_k with xq = quantize_static(x, s) and

    y[m, n] = sum_k x[m, k] W[n, k] ~ s_w[n] * sum_k xq[m, k] wq'[n, k]

one integer dot product per output and one float scale: no per-call max over the activations
(what distinguishes static from the dynamic per-block scales of matmul_w8). Per-channel scales
cost nothing at run time this way; they move the activations' outlier channels into the weight
rows, whose per-row int8 step grows with them (the trade SmoothQuant balances).

The integer dot products run on matmul_w8's kernels (AVX512-VNNI / AVX-VNNI vpdpbusd, AVX2, or
the portable loops, matmul.ISA) with every block's activation scale 1 and the block sums from
quantize_static; the kernel adds its per-block int32 sums in float32, the twin sums exactly in
int64, so they agree to float32 rounding (MAX_W8A8_VS_REF_REL, tests/kernels/test_w8a8.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harmony_ref.kernels._checks import float32_array
from harmony_ref.kernels.matmul import (
    ACT_BLOCK,
    ISA,
    PreparedW8,
    _as_activations,
    _finish,
    _matmul_w8_tiles,
    _rows_split,
    _w8_gemm,
    _w8_gemv,
    prepare_w8,
)
from harmony_ref.kernels.matmul_x86 import GEMM_ROWS
from harmony_ref.quant.activations import check_scale, quantize_static, quantize_static_ref
from harmony_ref.quant.int8 import Int8Tensor, quantize_int8

# |kernel - ref| / max|ref| on fresh random inputs: float32 accumulation of K / 32 block sums.
MAX_W8A8_VS_REF_REL = 2e-6


@dataclass(frozen=True, eq=False)
class W8A8Weight:
    """A weight with its input's static activation scale folded in (see the module doc)."""

    act_scale: np.ndarray  # (K,) float32, s_k
    w8: Int8Tensor  # int8 per row of W * s
    prepared: PreparedW8  # the kernel layout of w8

    @property
    def shape(self) -> tuple[int, int]:
        return self.w8.shape

    @property
    def nbytes(self) -> int:
        """Stored bytes: the int8 weight with its row scales, plus the K activation scales."""
        return self.w8.nbytes + self.act_scale.nbytes


def quantize_w8a8(w: np.ndarray, act_scale: np.ndarray) -> W8A8Weight:
    w = float32_array(w, "w", (2,))
    s = check_scale(act_scale, w.shape[1])
    t = quantize_int8(w * s[None, :])
    return W8A8Weight(s, t, prepare_w8(t))


def _block(k: int) -> int:
    return ACT_BLOCK if k % ACT_BLOCK == 0 else k


def matmul_w8a8(x, w: W8A8Weight) -> np.ndarray:
    """x (M, K) or (K,) float @ W.T through static int8 activations and int8 weights."""
    return _matmul_w8a8(x, w.act_scale, w.prepared, ISA)


def _matmul_w8a8(x, act_scale: np.ndarray, p: PreparedW8, isa: int) -> np.ndarray:
    """matmul_w8a8 on path `isa` with weights `p` prepared for it (tests run every path)."""
    n, k = p.shape
    x, vector = _as_activations(x, k)
    block = p.act_block
    xq, xsum = quantize_static(x, act_scale, block)
    ones = np.ones(xsum.shape, dtype=np.float32)  # every block's activation scale is folded
    m = x.shape[0]
    if p.layout != "x86":
        return _finish(
            [_matmul_w8_tiles(xq.astype(np.int32), ones, p.values, p.scale, block)], n, vector
        )
    xw = xq.view(np.int32)
    blocked = _rows_split(m, GEMM_ROWS, True)
    parts = []
    if blocked:
        parts.append(
            _w8_gemm(isa, xw[:blocked], ones[:blocked], xsum[:blocked], p.values, p.scale, block)
        )
    if blocked < m:
        parts.append(
            _w8_gemv(isa, xw[blocked:], ones[blocked:], xsum[blocked:], p.values, p.scale, block)
        )
    return _finish(parts, n, vector)


def matmul_w8a8_ref(x, w: W8A8Weight) -> np.ndarray:
    """NumPy twin: the same int8 activations and weights, exact int64 sums, then s_w[n]."""
    x, vector = _as_activations(x, w.shape[1])
    xq = quantize_static_ref(x, w.act_scale).astype(np.int64)
    isum = xq @ w.w8.values.astype(np.int64).T  # (M, N) exact
    y = (isum.astype(np.float64) * w.w8.scale.astype(np.float64)[None, :]).astype(np.float32)
    return y[0] if vector else y
