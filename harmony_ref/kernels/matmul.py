"""Weight-only quantized matmul: `matmul_w4` (Int4Tensor) and `matmul_w8` (Int8Tensor), with their
NumPy twins `matmul_w4_ref` / `matmul_w8_ref`.

    y = matmul_w4(x, w)      x: (M, K) or (K,) float, w: Int4Tensor (N, K) -> (M, N) or (N,) float32

What the kernels compute (llama.cpp's Q4_0 x Q8_0 recipe, see ../shared/DESIGN.md):
1. x is quantized once per call to int8 in blocks of `act_block` values along K (32, or the
   weight group size when that is not a multiple of 32): xs = max|block| / 127,
   xq = clamp(rint(x / xs), -127, 127). Exact per-block sums of xq are kept too.
2. For every weight group, the inner loop is integer multiply-add of the unsigned nibble
   u = q + 8 (0..15) with xq: no sign extension, no per-weight float conversion. The zero point
   and the +8 offset fold into one integer correction per block:
       sum_k (q_k - zp) xq_k = sum_k u_k xq_k - (zp + 8) * sum_k xq_k
3. Each block's int32 sum is scaled once: y += s_w[g] * xs[b] * isum.
So the result is x_hat @ W_hat.T exactly up to float32 rounding of the block sums, where
x_hat = xq * xs and W_hat = dequantize_int4(w). The `_ref` twins compute that same arithmetic
in NumPy (tests hold fast vs ref to float32 rounding); a separate test bounds the error against
the float32 product of the original weights (activation + weight quantization error).

Paths (chosen once at import, `ISA`; HARMONY_REF_MATMUL_ISA=portable|avx2|avxvnni|avx512vnni
forces one the CPU runs; `SUPPORTED_ISAS` lists them, from the features numba compiles for):
- x86 int8 dot products (matmul_x86.py; its paths in matmul_x86_isa.py, its layout in
  matmul_x86_layout.py): vpdpbusd (AVX512-VNNI zmm, AVX-VNNI ymm) or AVX2
  vpmaddubsw + vpmaddwd, on tile vectors of ROW_TILE = 64 output rows, in a layout built for
  them ("x86": 4-byte steps of 64 rows, float16 group scales, int8 zero points). The GEMV
  prefetches its weight stream; the prefill GEMM unpacks W4 nibbles once per tile and K chunk
  into L1 and runs 4 activation rows at a time over them (16 zmm accumulators).
- portable (matmul_portable.py): plain Numba loops LLVM vectorises across the 64 rows of a tile
  ("rows" layout: byte j of 64 rows contiguous, float32 scales), for any CPU and for group sizes
  the x86 layout does not take (act_block % 8 != 0 for W4, % 4 for W8). It is the twin the x86
  paths are held to: the integer block sums are exact and every path does the per-block float
  scaling in the same order, so all paths agree bit for bit (tests/test_kernels_matmul_paths.py).
No dequantized float matrix is ever built.

Measured (tests/perf/test_perf_matmul.py, one `quiet` run; Intel Xeon family 6 model 207,
Emerald Rapids under KVM, 2 cores, 2 threads; medians of interleaved blocks; GEMV weights cycled
through copies beyond the 300 MiB L3; NumPy 2.4 OpenBLAS; llama.cpp built from source for this
CPU, driven through ggml's mul_mat by lab/ggml_peer.py; avx2 / portable rows are those paths
forced on this same CPU):

| GEMV 11008 x 4096, one token | ms | vs NumPy FP32 `W @ x` | GB/s |
|---|---|---|---|
| NumPy FP32 (OpenBLAS) | 9.50 | 1.00x | 19 GB/s |
| ours `matmul_w4`, int4 g32, AVX512-VNNI | 1.72 | 5.51x | 16 GB/s |
| ours `matmul_w8`, AVX512-VNNI | 2.66 | 3.57x | 17 GB/s |
| ours W4 g32, AVX-VNNI (forced) | 1.83 | 5.19x | 15 GB/s |
| ours W8, AVX-VNNI (forced) | 2.87 | 3.31x | 16 GB/s |
| ours W4 g32, AVX2 (forced) | 1.97 | 4.83x | 14 GB/s |
| ours W8, AVX2 (forced) | 3.07 | 3.09x | 15 GB/s |
| ours W4 g32, portable (forced; the old code) | 4.22 | 2.25x | 8 GB/s |
| ours W8, portable (forced; the old code) | 5.86 | 1.62x | 8 GB/s |
| llama.cpp Q4_0, plain layout | 3.42 | 2.78x | 7 GB/s |
| llama.cpp Q4_0, repacked (CPU_REPACK, q4_0_8x8) | 3.08 | 3.09x | 8 GB/s |
| llama.cpp Q4_0, AMX buffer | 1.81 | 5.25x | 14 GB/s |
| llama.cpp Q4_1, plain | 3.67 | 2.59x | 8 GB/s |
| llama.cpp Q4_1, AMX buffer | 1.71 | 5.56x | 16 GB/s |
| llama.cpp Q8_0, plain | 4.70 | 2.02x | 10 GB/s |
| llama.cpp Q8_0, AMX buffer | 2.65 | 3.59x | 18 GB/s |

Limit: 2-thread read bandwidth 18.6 GB/s (a separate quiet run,
numba sum over 472 MB).

| prefill M = 128, K = N = 4096 | ms | vs NumPy FP32 `x @ W.T` | GOP/s (% of int8 peak) |
|---|---|---|---|
| NumPy FP32 (OpenBLAS) | 34.10 | 1.00x | 126 GOP/s (11%) |
| ours `matmul_w4`, int4 g32, AVX512-VNNI | 17.20 | 1.98x | 250 GOP/s (22%) |
| ours `matmul_w8`, AVX512-VNNI | 12.90 | 2.63x | 332 GOP/s (29%) |
| ours W4 g32, AVX-VNNI (forced) | 24.30 | 1.40x | 177 GOP/s (15%) |
| ours W8, AVX-VNNI (forced) | 24.90 | 1.37x | 172 GOP/s (15%) |
| ours W4 g32, AVX2 (forced) | 20.50 | 1.66x | 210 GOP/s (18%) |
| ours W8, AVX2 (forced) | 40.00 | 0.85x | 107 GOP/s (9%) |
| ours W4 g32, portable (forced; the old code) | 142.00 | 0.24x | 30 GOP/s (3%) |
| ours W8, portable (forced; the old code) | 74.30 | 0.46x | 58 GOP/s (5%) |
| llama.cpp Q4_0, plain layout | 54.50 | 0.62x | 79 GOP/s (7%) |
| llama.cpp Q4_0, repacked (CPU_REPACK, q4_0_8x8) | 25.90 | 1.32x | 166 GOP/s (14%) |
| llama.cpp Q4_0, AMX buffer | - | - | crashed (signal 4) |
| llama.cpp Q4_1, plain | 93.10 | 0.37x | 46 GOP/s (4%) |
| llama.cpp Q4_1, AMX buffer | - | - | crashed (signal 4) |
| llama.cpp Q8_0, plain | 49.20 | 0.69x | 87 GOP/s (8%) |
| llama.cpp Q8_0, AMX buffer | - | - | crashed (signal 4) |

Limit: int8 peak 1153 GOP/s (avx512vnni)

Tried and measured on the way (11008 x 4096 GEMV unless said): ROW_TILE 16 / 32 / 64 rows in
the portable loop 1.6 / 0.76 / 0.54 ms (hot); weight prefetch distance none / 256 B / 1 KB /
2 KB / 4 KB / 8 KB: 2.04 / 1.95 / 1.69 / 1.50 / 1.57 / 1.60 ms cold (W4; W8 and L2 prefetches
(prefetcht1) within noise);
portable prefill: M-blocking 4 rows 0.62x -> 1.03x NumPy (W8), exact float32 FMA block sums
+~20% (W8 only).

Threads: `numba.prange` over weight tiles; `numba.set_num_threads` is honoured.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass

import numpy as np

import harmony_ref.kernels.matmul_x86 as x86
import harmony_ref.kernels.matmul_x86_layout as x86_layout
from harmony_ref.kernels._checks import float32_array
from harmony_ref.kernels.matmul_portable import (  # noqa: F401  (compiled kernels, for tests)
    M_BLOCK,
    ROW_TILE,
    _matmul_w4_tiles,
    _matmul_w4_tiles_mblock,
    _matmul_w8_tiles,
    _matmul_w8_tiles_mblock,
    _quantize_activations,
)
from harmony_ref.kernels.matmul_x86 import _w4_gemm, _w4_gemv, _w8_gemm, _w8_gemv  # noqa: F401
from harmony_ref.kernels.matmul_x86_isa import (  # noqa: F401
    ISA_AVX2,
    ISA_AVX512_VNNI,
    ISA_AVX_VNNI,
    ISA_NAMES,
    ISA_PORTABLE,
    supported_isas,
)
from harmony_ref.kernels.matmul_x86_layout import _quantize_activations_bytes
from harmony_ref.quant.int4 import Int4Tensor, unpack_int4
from harmony_ref.quant.int8 import Int8Tensor

ACT_BLOCK = 32  # int8 activation block along K (llama.cpp's QK8_0)
ACT_MAX_LEVEL = 127
NIBBLE_OFFSET = 8  # stored nibble u = q + 8 is unsigned 0..15
# float32 holds every integer below 2**24 exactly, so integer block sums may be accumulated in
# float32 FMAs without rounding while |sum| <= block * max|w| * max|x| stays below this.
FLOAT_EXACT_INT = 2**24
INT8_MAX_ABS = 128
ISA_ENV = "HARMONY_REF_MATMUL_ISA"  # force a path: portable, avx2, avxvnni or avx512vnni


def act_block_for(group_size: int) -> int:
    """Activation block: 32 when it divides the weight group, else the group itself."""
    return ACT_BLOCK if group_size % ACT_BLOCK == 0 else group_size


def _choose_isa(forced: str | None, supported: list[int]) -> int:
    """The best path numba's target CPU supports, or the one `forced` names (it must be one)."""
    if not forced:
        return supported[-1]
    by_name = {ISA_NAMES[i]: i for i in ISA_NAMES}
    isa = by_name.get(forced.strip().lower())
    if isa not in supported:
        raise RuntimeError(
            f"{ISA_ENV}={forced!r}: this CPU runs {', '.join(ISA_NAMES[i] for i in supported)}"
        )
    return isa


SUPPORTED_ISAS = supported_isas()  # what numba compiles for on this CPU
ISA = _choose_isa(os.environ.get(ISA_ENV), SUPPORTED_ISAS)  # the path matmul_w4/w8 take


# ----------------------------------------------------------------------------------------------
# Prepared (kernel-friendly) weights


@dataclass(frozen=True, eq=False)
class PreparedW4:
    """INT4 weights in a kernel layout, T = ceil(N / ROW_TILE) tiles, padded rows scale 0.

    layout "x86" (matmul_x86_layout.layout_w4): packed (T, K // 2 * ROW_TILE) uint8 in 4-byte
    steps, scale (T, G * ROW_TILE) float16 bits (uint16) or float32, zero (T, G * ROW_TILE)
    int8 zp.
    layout "rows" (portable loops): packed (T, K // 2, ROW_TILE) uint8 nibbles q + 8,
    scale (T, G, ROW_TILE) float32, zero (T, G, ROW_TILE) int32 zp + 8.
    """

    layout: str
    packed: np.ndarray
    scale: np.ndarray
    zero: np.ndarray
    shape: tuple[int, int]
    group_size: int
    act_block: int


@dataclass(frozen=True, eq=False)
class PreparedW8:
    """INT8 weights in a kernel layout. "x86": values (T, K * ROW_TILE) uint8 w + 128 in 4-byte
    steps; "rows": values (T, K, ROW_TILE) int8. scale (T, ROW_TILE) float32 either way."""

    layout: str
    values: np.ndarray
    scale: np.ndarray
    shape: tuple[int, int]
    act_block: int


_prepared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _interleave_rows(a: np.ndarray, fill=0) -> np.ndarray:
    """(N, ...) -> (T, ..., ROW_TILE): row t * ROW_TILE + r goes to [t, ..., r]."""
    n = a.shape[0]
    tiles = -(-n // ROW_TILE)
    padded = np.full((tiles * ROW_TILE,) + a.shape[1:], fill, dtype=a.dtype)
    padded[:n] = a
    padded = padded.reshape((tiles, ROW_TILE) + a.shape[1:])
    return np.ascontiguousarray(np.moveaxis(padded, 1, -1))


def _already_prepared(t, tensor_type, prepared_type):
    """`t` if it is already a `prepared_type`, its cached preparation, or None (build it)."""
    if isinstance(t, prepared_type):
        return t
    if not isinstance(t, tensor_type):
        raise ValueError(
            f"w must be an {tensor_type.__name__} or {prepared_type.__name__}, "
            f"got {type(t).__name__}"
        )
    return _prepared.get(t)


def prepare_w4(t: Int4Tensor) -> PreparedW4:
    """Kernel layout of `t` for this CPU's path, built once per tensor object and cached
    (weakly) on it."""
    done = _already_prepared(t, Int4Tensor, PreparedW4)
    if done is None:
        done = _prepared[t] = _prepare_w4(t, ISA)
    return done


def _prepare_w4(t: Int4Tensor, isa: int) -> PreparedW4:
    if t.group_size % 2 != 0:
        raise ValueError(
            f"matmul_w4 needs an even group_size (a group must not split a byte), got {t.group_size}"
        )
    ab = act_block_for(t.group_size)
    # A second copy of the packed bytes (same size); a loader may drop `t.packed` afterwards.
    if isa != ISA_PORTABLE and ab % 8 == 0:
        packed, scale, zero = x86_layout.layout_w4(t.packed, t.scale, t.zero_point)
        return PreparedW4("x86", packed, scale, zero, t.shape, t.group_size, ab)
    zp = (
        np.zeros(t.scale.shape, np.int32) if t.zero_point is None else t.zero_point.astype(np.int32)
    )
    return PreparedW4(
        "rows",
        # Stored nibbles are two's complement (q & 0xF); flipping bit 3 gives u = q + 8 (0..15).
        packed=_interleave_rows(t.packed ^ np.uint8(0x88)),
        scale=_interleave_rows(t.scale.astype(np.float32)),
        zero=_interleave_rows(zp + NIBBLE_OFFSET),
        shape=t.shape,
        group_size=t.group_size,
        act_block=ab,
    )


def prepare_w8(t: Int8Tensor) -> PreparedW8:
    """Kernel layout of `t` for this CPU's path, built once per tensor object and cached
    (weakly) on it."""
    done = _already_prepared(t, Int8Tensor, PreparedW8)
    if done is None:
        done = _prepared[t] = _prepare_w8(t, ISA)
    return done


def _prepare_w8(t: Int8Tensor, isa: int) -> PreparedW8:
    ab = ACT_BLOCK if t.shape[1] % ACT_BLOCK == 0 else t.shape[1]
    # AVX2's sign trick is exact only for w != -128 (a value the quantizer never writes).
    avx2_ok = isa != ISA_AVX2 or t.values.min(initial=0) > -INT8_MAX_ABS
    if isa != ISA_PORTABLE and ab % 4 == 0 and avx2_ok:
        values, scale = x86_layout.layout_w8(t.values, t.scale)
        return PreparedW8("x86", values, scale, t.shape, ab)
    scale = _interleave_rows(t.scale.astype(np.float32))
    return PreparedW8("rows", _interleave_rows(t.values), scale, t.shape, ab)


def _as_activations(x, k: int) -> tuple[np.ndarray, bool]:
    """x (M, K) or (K,) -> float32 (M, K) and whether it was a vector."""
    x = float32_array(x, "x", (1, 2))
    if x.shape[-1] != k:
        raise ValueError(f"x has shape {x.shape} but the weights have K = {k} (shape (N, {k}))")
    return (x[None, :], True) if x.ndim == 1 else (x, False)


# ----------------------------------------------------------------------------------------------
# CPU code reference


def quantize_activations_ref(x: np.ndarray, block: int):
    """x (M, K) float32 -> xq (M, K) int8, xs (M, K // block) float32 with x ~ xq * xs."""
    m, k = x.shape
    blocks = x.reshape(m, k // block, block)  # (M, B, block)
    xs = (np.abs(blocks).max(axis=2) / np.float32(ACT_MAX_LEVEL)).astype(np.float32)  # (M, B)
    safe = np.where(xs == 0, np.float32(1), xs)[:, :, None]
    xq = np.clip(np.rint(blocks / safe), -ACT_MAX_LEVEL, ACT_MAX_LEVEL).astype(np.int8)
    return xq.reshape(m, k), xs


def matmul_w4_ref(x, w: Int4Tensor) -> np.ndarray:
    """NumPy twin of `matmul_w4`: int8 activations, integer block sums, then scales."""
    if not isinstance(w, Int4Tensor):
        raise ValueError(f"w must be an Int4Tensor, got {type(w).__name__}")
    x, vector = _as_activations(x, w.shape[1])
    n, k = w.shape
    ab = act_block_for(w.group_size)
    xq, xs = quantize_activations_ref(x, ab)  # (M, K) int8, (M, B) float32
    m, b = xs.shape
    q = dequantize_int4_levels(w)  # (N, K) int64: q - zp (q for "sym")
    # isum[m, n, b] = sum over block b of xq * (q - zp): exact integers
    isum = np.einsum("mbj,nbj->mnb", xq.reshape(m, b, ab).astype(np.int64), q.reshape(n, b, ab))
    s_w = np.repeat(w.scale.astype(np.float64), w.group_size // ab, axis=1)  # (N, B)
    y = np.einsum("mnb,mb,nb->mn", isum.astype(np.float64), xs.astype(np.float64), s_w)
    y = y.astype(np.float32)
    return y[0] if vector else y


def dequantize_int4_levels(w: Int4Tensor) -> np.ndarray:
    """(N, K) int64 integer levels q - zp (or q for "sym"): W_hat = levels * scale."""
    n, k = w.shape
    q = unpack_int4(w.packed).astype(np.int64).reshape(n, w.n_groups, w.group_size)
    if w.zero_point is not None:
        q = q - w.zero_point.astype(np.int64)[:, :, None]
    return q.reshape(n, k)


def matmul_w8_ref(x, w: Int8Tensor) -> np.ndarray:
    """NumPy twin of `matmul_w8`: int8 activations per block, int8 weights per row."""
    if not isinstance(w, Int8Tensor):
        raise ValueError(f"w must be an Int8Tensor, got {type(w).__name__}")
    n, k = w.shape
    x, vector = _as_activations(x, k)
    ab = ACT_BLOCK if k % ACT_BLOCK == 0 else k
    xq, xs = quantize_activations_ref(x, ab)
    m, b = xs.shape
    isum = np.einsum(
        "mbj,nbj->mnb",
        xq.reshape(m, b, ab).astype(np.int64),
        w.values.reshape(n, b, ab).astype(np.int64),
    )
    y = np.einsum(
        "mnb,mb,n->mn", isum.astype(np.float64), xs.astype(np.float64), w.scale.astype(np.float64)
    )
    y = y.astype(np.float32)
    return y[0] if vector else y


# ----------------------------------------------------------------------------------------------
# Fast path


def matmul_w4(x, w) -> np.ndarray:
    """x (M, K) or (K,) float @ W.T for an Int4Tensor (or PreparedW4) W of shape (N, K)."""
    return _matmul_w4(x, prepare_w4(w), ISA)


def matmul_w8(x, w) -> np.ndarray:
    """x (M, K) or (K,) float @ W.T for an Int8Tensor (or PreparedW8) W of shape (N, K)."""
    return _matmul_w8(x, prepare_w8(w), ISA)


def _rows_split(m: int, rows: int, ok: bool) -> int:
    """How many leading rows go to the row-blocked (prefill) kernel."""
    return m - m % rows if ok else 0


def _finish(parts, n: int, vector: bool) -> np.ndarray:
    y = parts[0][:, :n] if len(parts) == 1 else np.concatenate(parts)[:, :n]
    y = np.ascontiguousarray(y)
    return y[0] if vector else y


def _matmul_w4(x, p: PreparedW4, isa: int) -> np.ndarray:
    n, k = p.shape
    x, vector = _as_activations(x, k)
    m = x.shape[0]
    parts = []
    if p.layout == "x86":
        xq, xs, xsum = _quantize_activations_bytes(x, p.act_block)
        xw = xq.view(np.int32)
        weights = (p.packed, p.scale, p.zero, p.group_size, p.act_block)
        blocked = _rows_split(m, x86.GEMM_ROWS, True)
        if blocked:
            parts.append(_w4_gemm(isa, xw[:blocked], xs[:blocked], xsum[:blocked], *weights))
        if blocked < m:
            parts.append(_w4_gemv(isa, xw[blocked:], xs[blocked:], xsum[blocked:], *weights))
        return _finish(parts, n, vector)
    xq, xs, xsum = _quantize_activations(x, p.act_block)
    weights = (p.packed, p.scale, p.zero, p.group_size, p.act_block)
    blocked = _rows_split(m, M_BLOCK, p.act_block % 8 == 0)
    if blocked:
        parts.append(_matmul_w4_tiles_mblock(xq[:blocked], xs[:blocked], xsum[:blocked], *weights))
    if blocked < m:
        parts.append(_matmul_w4_tiles(xq[blocked:], xs[blocked:], xsum[blocked:], *weights))
    return _finish(parts, n, vector)


def _matmul_w8(x, p: PreparedW8, isa: int) -> np.ndarray:
    n, k = p.shape
    x, vector = _as_activations(x, k)
    m = x.shape[0]
    parts = []
    if p.layout == "x86":
        xq, xs, xsum = _quantize_activations_bytes(x, p.act_block)
        xw = xq.view(np.int32)
        weights = (p.values, p.scale, p.act_block)
        blocked = _rows_split(m, x86.GEMM_ROWS, True)
        if blocked:
            parts.append(_w8_gemm(isa, xw[:blocked], xs[:blocked], xsum[:blocked], *weights))
        if blocked < m:
            parts.append(_w8_gemv(isa, xw[blocked:], xs[blocked:], xsum[blocked:], *weights))
        return _finish(parts, n, vector)
    xq, xs, _ = _quantize_activations(x, p.act_block)
    weights = (p.values, p.scale, p.act_block)
    exact = p.act_block * INT8_MAX_ABS * ACT_MAX_LEVEL < FLOAT_EXACT_INT
    blocked = _rows_split(m, M_BLOCK, p.act_block % 4 == 0 and exact)
    if blocked:
        parts.append(_matmul_w8_tiles_mblock(xq[:blocked], xs[:blocked], *weights))
    if blocked < m:
        parts.append(_matmul_w8_tiles(xq[blocked:], xs[blocked:], *weights))
    return _finish(parts, n, vector)
