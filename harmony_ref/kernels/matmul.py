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

Layout: `prepare_w4` / `prepare_w8` build, once per tensor (cached on the tensor object), a
"row-interleaved" copy of the weights: tiles of ROW_TILE output rows stored so that byte j of all
ROW_TILE rows is contiguous. The innermost loop then runs across the ROW_TILE outputs of a tile
(ROW_TILE int32 accumulators: four AVX-512 registers) while activation values are broadcast:
one pass over x feeds ROW_TILE outputs and no horizontal sum is needed per block. Four packed
bytes per step (eight weights) keep accumulator loads/stores low. Measured on this machine,
N=11008 K=4096 g32 GEMV: ROW_TILE 16 -> 1.6 ms, 32 -> 0.76 ms, 64 -> 0.54 ms; a float32 variant
of the same loop (nibble -> float, FMA with unquantized x) -> 1.0 ms; the first per-row version
with the r loop unvectorised (aliasing, 16 lanes fully unrolled) -> 9 ms. Scales become float32,
zero points int32 (zp + 8). No dequantized float matrix is ever built.

Prefill (M > 1): each thread takes a tile of ROW_TILE weight rows (K / 2 * ROW_TILE bytes, which
stays in L2) and runs every activation row over it, so weights leave DRAM once per call; rows go
M_BLOCK at a time so each nibble extracted (W4) or int8 weight widened (W8) feeds M_BLOCK
rows (the rest one by one). Measured at M=128, N=K=4096, 2 threads, vs NumPy FP32 x @ W.T in
the same run: W8 0.62x row by row -> 1.03x M-blocked -> 1.24-1.29x with the block sums as
exact float32 FMAs (integers below 2**24; W8 only: for W4 the 8 nibble -> float conversions per
4 bytes cost more than they save, and int16 nibble sums were not reliably faster).

Threads: `numba.prange` over weight tiles; `numba.set_num_threads` is honoured.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from harmony_ref.kernels._checks import float32_array
from harmony_ref.quant.int4 import Int4Tensor, unpack_int4
from harmony_ref.quant.int8 import Int8Tensor

ACT_BLOCK = 32  # int8 activation block along K (llama.cpp's QK8_0)
ACT_MAX_LEVEL = 127
NIBBLE_OFFSET = 8  # stored nibble u = q + 8 is unsigned 0..15
ROW_TILE = 64  # output rows interleaved per tile (see the module doc for the measured sweep)
M_BLOCK = 4  # activation rows sharing one nibble extraction in prefill (2: ~same, 8: no better)
# float32 holds every integer below 2**24 exactly, so integer block sums may be accumulated in
# float32 FMAs without rounding while |sum| <= block * max|w| * max|x| stays below this.
FLOAT_EXACT_INT = 2**24
INT8_MAX_ABS = 128


def act_block_for(group_size: int) -> int:
    """Activation block: 32 when it divides the weight group, else the group itself."""
    return ACT_BLOCK if group_size % ACT_BLOCK == 0 else group_size


# ----------------------------------------------------------------------------------------------
# Prepared (kernel-friendly) weights


@dataclass(frozen=True, eq=False)
class PreparedW4:
    """Row-interleaved INT4 weights. T = ceil(N / ROW_TILE) tiles; padded rows have scale 0."""

    packed: np.ndarray  # (T, K // 2, ROW_TILE) uint8: Int4Tensor.packed ^ 0x88, nibbles q + 8
    scale: np.ndarray  # (T, G, ROW_TILE) float32
    zp_offset: np.ndarray  # (T, G, ROW_TILE) int32: zp + 8 ("sym": 8)
    shape: tuple[int, int]
    group_size: int
    act_block: int


@dataclass(frozen=True, eq=False)
class PreparedW8:
    values: np.ndarray  # (T, K, ROW_TILE) int8
    scale: np.ndarray  # (T, ROW_TILE) float32
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
        raise ValueError(f"w must be an {tensor_type.__name__} or {prepared_type.__name__}, "
                         f"got {type(t).__name__}")
    return _prepared.get(t)


def prepare_w4(t: Int4Tensor) -> PreparedW4:
    """Kernel layout of `t`, built once per tensor object and cached (weakly) on it."""
    done = _already_prepared(t, Int4Tensor, PreparedW4)
    if done is not None:
        return done
    if t.group_size % 2 != 0:
        raise ValueError(
            f"matmul_w4 needs an even group_size (a group must not split a byte), got {t.group_size}"
        )
    zp = np.zeros(t.scale.shape, np.int32) if t.zero_point is None else t.zero_point.astype(np.int32)
    # A second copy of the packed bytes (same size); a loader may drop `t.packed` afterwards.
    prepared = PreparedW4(
        # Stored nibbles are two's complement (q & 0xF); flipping bit 3 gives u = q + 8 (0..15).
        packed=_interleave_rows(t.packed ^ np.uint8(0x88)),
        scale=_interleave_rows(t.scale.astype(np.float32)),
        zp_offset=_interleave_rows(zp + NIBBLE_OFFSET),
        shape=t.shape,
        group_size=t.group_size,
        act_block=act_block_for(t.group_size),
    )
    _prepared[t] = prepared
    return prepared


def prepare_w8(t: Int8Tensor) -> PreparedW8:
    """Kernel layout of `t`, built once per tensor object and cached (weakly) on it."""
    done = _already_prepared(t, Int8Tensor, PreparedW8)
    if done is not None:
        return done
    prepared = PreparedW8(
        values=_interleave_rows(t.values),
        scale=_interleave_rows(t.scale.astype(np.float32)),
        shape=t.shape,
        act_block=ACT_BLOCK if t.shape[1] % ACT_BLOCK == 0 else t.shape[1],
    )
    _prepared[t] = prepared
    return prepared


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
    y = np.einsum("mnb,mb,n->mn", isum.astype(np.float64), xs.astype(np.float64), w.scale.astype(np.float64))
    y = y.astype(np.float32)
    return y[0] if vector else y


# ----------------------------------------------------------------------------------------------
# Fast path


@intrinsic
def _fma_f32(typingctx, a, b, c):
    """a * b + c with one rounding (llvm.fma; vectorises to vfmadd). Numba exposes no fma, and
    fastmath "contract" would also fuse the float scaling steps and change their rounding."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return sig, codegen


@numba.njit(parallel=True, cache=True)
def _quantize_activations(x, block):
    """Same arithmetic as `quantize_activations_ref`; also returns exact block sums of xq and
    xq split into even / odd positions (the high / low nibble partners) as int32."""
    m, k = x.shape
    nb = k // block
    xs = np.empty((m, nb), dtype=np.float32)
    xsum = np.empty((m, nb), dtype=np.int32)
    xq = np.empty((m, k), dtype=np.int32)
    levels = np.float32(ACT_MAX_LEVEL)
    for i in numba.prange(m):
        for b in range(nb):
            amax = np.float32(0.0)
            for j in range(b * block, (b + 1) * block):
                amax = max(amax, abs(x[i, j]))
            s = amax / levels
            xs[i, b] = s
            safe = np.float32(1.0) if s == 0 else s
            total = 0
            for j in range(b * block, (b + 1) * block):
                v = np.int32(min(max(np.rint(x[i, j] / safe), -levels), levels))
                xq[i, j] = v
                total += v
            xsum[i, b] = total
    return xq, xs, xsum


@numba.njit(parallel=True, cache=True)
def _matmul_w4_tiles(xq, xs, xsum, packed, scale, zp_offset, group_size, block):
    """y (M, T * ROW_TILE). The r loop (ROW_TILE lanes) is the SIMD dimension; four packed
    bytes (eight weights) per r step keep the int32 accumulator traffic low. For M > 1 the
    tile's bytes (K / 2 * ROW_TILE, L2-resident) are reused for every activation row."""
    m, k = xq.shape
    tiles = packed.shape[0]
    n_groups = k // group_size
    blocks_per_group = group_size // block
    half = block // 2
    unrolled = half - half % 4
    y = np.empty((m, tiles * ROW_TILE), dtype=np.float32)
    for t in numba.prange(tiles):
        facc = np.empty(ROW_TILE, dtype=np.float32)
        iacc = np.empty(ROW_TILE, dtype=np.int32)
        for i in range(m):
            facc[:] = 0
            for g in range(n_groups):
                sc = scale[t, g]
                zo = zp_offset[t, g]
                for bb in range(blocks_per_group):
                    b = g * blocks_per_group + bb
                    j0 = b * half
                    iacc[:] = 0
                    for j in range(j0, j0 + unrolled, 4):
                        x0 = xq[i, 2 * j]
                        x1 = xq[i, 2 * j + 1]
                        x2 = xq[i, 2 * j + 2]
                        x3 = xq[i, 2 * j + 3]
                        x4 = xq[i, 2 * j + 4]
                        x5 = xq[i, 2 * j + 5]
                        x6 = xq[i, 2 * j + 6]
                        x7 = xq[i, 2 * j + 7]
                        p0 = packed[t, j]
                        p1 = packed[t, j + 1]
                        p2 = packed[t, j + 2]
                        p3 = packed[t, j + 3]
                        for r in range(ROW_TILE):
                            u0 = np.int32(p0[r])
                            u1 = np.int32(p1[r])
                            u2 = np.int32(p2[r])
                            u3 = np.int32(p3[r])
                            iacc[r] += (
                                (u0 >> 4) * x0 + (u0 & 15) * x1 + (u1 >> 4) * x2 + (u1 & 15) * x3
                                + (u2 >> 4) * x4 + (u2 & 15) * x5 + (u3 >> 4) * x6 + (u3 & 15) * x7
                            )
                    for j in range(j0 + unrolled, j0 + half):
                        xe = xq[i, 2 * j]
                        xo = xq[i, 2 * j + 1]
                        p0 = packed[t, j]
                        for r in range(ROW_TILE):
                            u0 = np.int32(p0[r])
                            iacc[r] += (u0 >> 4) * xe + (u0 & 15) * xo
                    xsb = xs[i, b]
                    xsm = xsum[i, b]
                    for r in range(ROW_TILE):
                        facc[r] += (sc[r] * xsb) * np.float32(iacc[r] - zo[r] * xsm)
            for r in range(ROW_TILE):
                y[i, t * ROW_TILE + r] = facc[r]
    return y


@numba.njit(parallel=True, cache=True)
def _matmul_w4_tiles_mblock(xq, xs, xsum, packed, scale, zp_offset, group_size, block):
    """Prefill variant of `_matmul_w4_tiles` for M a multiple of M_BLOCK: the nibbles of each
    weight vector are extracted once and feed M_BLOCK activation rows (measured at M=128,
    N=K=4096: ~25% faster than running rows one by one). Needs block % 8 == 0."""
    m, k = xq.shape
    tiles = packed.shape[0]
    n_groups = k // group_size
    blocks_per_group = group_size // block
    half = block // 2
    y = np.empty((m, tiles * ROW_TILE), dtype=np.float32)
    for t in numba.prange(tiles):
        facc = np.empty((M_BLOCK, ROW_TILE), dtype=np.float32)
        iacc = np.empty((M_BLOCK, ROW_TILE), dtype=np.int32)
        xv = np.empty((M_BLOCK, 8), dtype=np.int32)
        for i0 in range(0, m, M_BLOCK):
            facc[:] = 0
            for g in range(n_groups):
                sc = scale[t, g]
                zo = zp_offset[t, g]
                for bb in range(blocks_per_group):
                    b = g * blocks_per_group + bb
                    j0 = b * half
                    iacc[:] = 0
                    for j in range(j0, j0 + half, 4):
                        for i in range(M_BLOCK):
                            for c in range(8):
                                xv[i, c] = xq[i0 + i, 2 * j + c]
                        p0 = packed[t, j]
                        p1 = packed[t, j + 1]
                        p2 = packed[t, j + 2]
                        p3 = packed[t, j + 3]
                        for r in range(ROW_TILE):
                            u0 = np.int32(p0[r])
                            u1 = np.int32(p1[r])
                            u2 = np.int32(p2[r])
                            u3 = np.int32(p3[r])
                            h0, l0, h1, l1 = u0 >> 4, u0 & 15, u1 >> 4, u1 & 15
                            h2, l2, h3, l3 = u2 >> 4, u2 & 15, u3 >> 4, u3 & 15
                            for i in range(M_BLOCK):
                                iacc[i, r] += (
                                    h0 * xv[i, 0] + l0 * xv[i, 1] + h1 * xv[i, 2] + l1 * xv[i, 3]
                                    + h2 * xv[i, 4] + l2 * xv[i, 5] + h3 * xv[i, 6] + l3 * xv[i, 7]
                                )
                    for i in range(M_BLOCK):
                        xsb = xs[i0 + i, b]
                        xsm = xsum[i0 + i, b]
                        for r in range(ROW_TILE):
                            facc[i, r] += (sc[r] * xsb) * np.float32(iacc[i, r] - zo[r] * xsm)
            for i in range(M_BLOCK):
                for r in range(ROW_TILE):
                    y[i0 + i, t * ROW_TILE + r] = facc[i, r]
    return y


@numba.njit(parallel=True, cache=True)
def _matmul_w8_tiles(xq, xs, values, scale, block):
    """Same structure as `_matmul_w4_tiles` over int8 weights (no nibbles, no zero point)."""
    m, k = xq.shape
    tiles = values.shape[0]
    n_blocks = k // block
    unrolled = block - block % 4
    y = np.empty((m, tiles * ROW_TILE), dtype=np.float32)
    for t in numba.prange(tiles):
        facc = np.empty(ROW_TILE, dtype=np.float32)
        iacc = np.empty(ROW_TILE, dtype=np.int32)
        sc = scale[t]
        for i in range(m):
            facc[:] = 0
            for b in range(n_blocks):
                j0 = b * block
                iacc[:] = 0
                for j in range(j0, j0 + unrolled, 4):
                    x0 = xq[i, j]
                    x1 = xq[i, j + 1]
                    x2 = xq[i, j + 2]
                    x3 = xq[i, j + 3]
                    w0 = values[t, j]
                    w1 = values[t, j + 1]
                    w2 = values[t, j + 2]
                    w3 = values[t, j + 3]
                    for r in range(ROW_TILE):
                        iacc[r] += (
                            np.int32(w0[r]) * x0 + np.int32(w1[r]) * x1
                            + np.int32(w2[r]) * x2 + np.int32(w3[r]) * x3
                        )
                for j in range(j0 + unrolled, j0 + block):
                    x0 = xq[i, j]
                    w0 = values[t, j]
                    for r in range(ROW_TILE):
                        iacc[r] += np.int32(w0[r]) * x0
                xsb = xs[i, b]
                for r in range(ROW_TILE):
                    facc[r] += xsb * np.float32(iacc[r])
            for r in range(ROW_TILE):
                y[i, t * ROW_TILE + r] = facc[r] * sc[r]
    return y


@numba.njit(parallel=True, cache=True)
def _matmul_w8_tiles_mblock(xq, xs, values, scale, block):
    """Prefill variant of `_matmul_w8_tiles` for M a multiple of M_BLOCK: each weight vector is
    loaded and converted once and feeds M_BLOCK activation rows. The integer block sums run as
    float32 FMAs (exact: see FLOAT_EXACT_INT; ~10% faster than int32 multiply-add here), then
    each row's float scaling runs in the same order as in `_matmul_w8_tiles`, so results are
    bit-identical. Needs block % 4 == 0 and block * INT8_MAX_ABS * ACT_MAX_LEVEL < 2**24."""
    m, k = xq.shape
    tiles = values.shape[0]
    n_blocks = k // block
    y = np.empty((m, tiles * ROW_TILE), dtype=np.float32)
    for t in numba.prange(tiles):
        facc = np.empty((M_BLOCK, ROW_TILE), dtype=np.float32)
        bsum = np.empty((M_BLOCK, ROW_TILE), dtype=np.float32)  # exact integer block sums
        xv = np.empty((M_BLOCK, 4), dtype=np.float32)
        sc = scale[t]
        for i0 in range(0, m, M_BLOCK):
            facc[:] = 0
            for b in range(n_blocks):
                j0 = b * block
                bsum[:] = 0
                for j in range(j0, j0 + block, 4):
                    for i in range(M_BLOCK):
                        for c in range(4):
                            xv[i, c] = xq[i0 + i, j + c]
                    w0 = values[t, j]
                    w1 = values[t, j + 1]
                    w2 = values[t, j + 2]
                    w3 = values[t, j + 3]
                    for r in range(ROW_TILE):
                        a0 = np.float32(w0[r])
                        a1 = np.float32(w1[r])
                        a2 = np.float32(w2[r])
                        a3 = np.float32(w3[r])
                        for i in range(M_BLOCK):
                            acc = _fma_f32(a0, xv[i, 0], bsum[i, r])
                            acc = _fma_f32(a1, xv[i, 1], acc)
                            acc = _fma_f32(a2, xv[i, 2], acc)
                            bsum[i, r] = _fma_f32(a3, xv[i, 3], acc)
                for i in range(M_BLOCK):
                    xsb = xs[i0 + i, b]
                    for r in range(ROW_TILE):
                        facc[i, r] += xsb * bsum[i, r]
            for i in range(M_BLOCK):
                for r in range(ROW_TILE):
                    y[i0 + i, t * ROW_TILE + r] = facc[i, r] * sc[r]
    return y

def matmul_w4(x, w) -> np.ndarray:
    """x (M, K) or (K,) float @ W.T for an Int4Tensor (or PreparedW4) W of shape (N, K)."""
    p = prepare_w4(w)
    n, k = p.shape
    x, vector = _as_activations(x, k)
    xq, xs, xsum = _quantize_activations(x, p.act_block)
    weights = (p.packed, p.scale, p.zp_offset, p.group_size, p.act_block)
    blocked = xq.shape[0] - xq.shape[0] % M_BLOCK if p.act_block % 8 == 0 else 0
    parts = []
    if blocked:
        parts.append(_matmul_w4_tiles_mblock(xq[:blocked], xs[:blocked], xsum[:blocked], *weights))
    if blocked < xq.shape[0]:
        parts.append(_matmul_w4_tiles(xq[blocked:], xs[blocked:], xsum[blocked:], *weights))
    y = parts[0][:, :n] if len(parts) == 1 else np.concatenate(parts)[:, :n]
    y = np.ascontiguousarray(y)
    return y[0] if vector else y


def matmul_w8(x, w) -> np.ndarray:
    """x (M, K) or (K,) float @ W.T for an Int8Tensor (or PreparedW8) W of shape (N, K)."""
    p = prepare_w8(w)
    n, k = p.shape
    x, vector = _as_activations(x, k)
    xq, xs, _ = _quantize_activations(x, p.act_block)
    weights = (p.values, p.scale, p.act_block)
    exact = p.act_block * INT8_MAX_ABS * ACT_MAX_LEVEL < FLOAT_EXACT_INT
    blocked = xq.shape[0] - xq.shape[0] % M_BLOCK if p.act_block % 4 == 0 and exact else 0
    parts = []
    if blocked:
        parts.append(_matmul_w8_tiles_mblock(xq[:blocked], xs[:blocked], *weights))
    if blocked < xq.shape[0]:
        parts.append(_matmul_w8_tiles(xq[blocked:], xs[blocked:], *weights))
    y = parts[0][:, :n] if len(parts) == 1 else np.concatenate(parts)[:, :n]
    y = np.ascontiguousarray(y)
    return y[0] if vector else y
