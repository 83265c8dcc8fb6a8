"""Portable Numba loops for `matmul_w4` / `matmul_w8`: the fallback on CPUs without an x86 int8
dot-product path (matmul_x86.py) and the twin those paths are held to bit for bit. Plain scalar
code that LLVM auto-vectorises across the ROW_TILE rows of a tile, on the "rows" layout that
matmul.prepare_w4 / prepare_w8 build for it (byte j of ROW_TILE rows contiguous; float32
scales, int32 zero points + 8).

What they compute, the layout and the measured variants are in matmul.py's module doc.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

ACT_MAX_LEVEL = 127
ROW_TILE = 64  # output rows interleaved per tile
M_BLOCK = 4  # activation rows sharing one nibble extraction in prefill (2: ~same, 8: no better)


@intrinsic
def _fma_f32(typingctx, a, b, c):
    """a * b + c with one rounding (llvm.fma; vectorises to vfmadd). Numba exposes no fma, and
    fastmath "contract" would also fuse the float scaling steps and change their rounding."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return sig, codegen


@numba.njit(cache=True)
def quantize_row_bytes(x, i, block, xq, xs, xsum):
    """Row i of `quantize_activations_ref`'s arithmetic into xq (int8 or int32) / xs and its
    exact block sums into xsum (the x86 kernels of decode rows call it on their own thread: no
    parallel launch for a few values)."""
    levels = np.float32(ACT_MAX_LEVEL)
    for b in range(x.shape[1] // block):
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


@numba.njit(parallel=True, cache=True)
def quantize_activations_into(x, block, xq):
    """`quantize_activations_ref`'s arithmetic, rows in parallel, into xq (M, K) (int32 here,
    int8 for the x86 kernels); returns xq, xs and xq's exact block sums."""
    m, k = x.shape
    xs = np.empty((m, k // block), dtype=np.float32)
    xsum = np.empty((m, k // block), dtype=np.int32)
    for i in numba.prange(m):
        quantize_row_bytes(x, i, block, xq, xs, xsum)
    return xq, xs, xsum


@numba.njit(cache=True)
def _quantize_activations(x, block):
    """quantize_activations_into with xq int32."""
    return quantize_activations_into(x, block, np.empty(x.shape, dtype=np.int32))


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
                                (u0 >> 4) * x0
                                + (u0 & 15) * x1
                                + (u1 >> 4) * x2
                                + (u1 & 15) * x3
                                + (u2 >> 4) * x4
                                + (u2 & 15) * x5
                                + (u3 >> 4) * x6
                                + (u3 & 15) * x7
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
                                    h0 * xv[i, 0]
                                    + l0 * xv[i, 1]
                                    + h1 * xv[i, 2]
                                    + l1 * xv[i, 3]
                                    + h2 * xv[i, 4]
                                    + l2 * xv[i, 5]
                                    + h3 * xv[i, 6]
                                    + l3 * xv[i, 7]
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
                            np.int32(w0[r]) * x0
                            + np.int32(w1[r]) * x1
                            + np.int32(w2[r]) * x2
                            + np.int32(w3[r]) * x3
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
