"""Matmuls over Q5_0 and the K-quants (quant/kquants.py: q5_0, q4_k, q5_k, q6_k), and Q8_0
(quant/ggml.py), as llama.cpp runs them: the activation row quantized once per call to int8
blocks (Q8_K, one float scale per 256 values, for the K-quants; Q8_0-style blocks of 32 for q5_0
and q8_0), integer dot products of the stored levels with it, and the block scales applied once
per super-block.

    p = prepare_kquant(t)            # KQuantTensor -> the kernel's operand, once per tensor
    y = matmul_kquant(x, p)          # x (M, K) or (K,) float -> (M, N) or (N,) float32
    matmul_kquant_ref(x, t)          # the numerics `matmul_kquant` defines, plain NumPy

Every type is one integer form. A super-block s (K-quants: 256 weights; q5_0: its 32-block) has
float scales a_s, b_s; a group g (32 weights; q6_k: 16) has integer scale sc_g and min m_g; a
weight's level u is unsigned, with offset o:

    q5_0  a = d, b = 0,    sc = 1,          m = 0,           o = 16    w = a (u - 16)
    q4_k  a = d, b = dmin, sc = 6-bit scale, m = 6-bit min,   o = 0     w = a sc u - b m
    q5_k  as q4_k, u 0..31
    q6_k  a = d, b = 0,    sc = int8 scale, m = 0,           o = 32    w = a sc (u - 32)
    q8_0  a = d, b = 0,    sc = 1,          m = 0,           o = 128   w = a (u - 128), u = q + 128

With x's int8 levels xq, its super-block scale xd (Q8_K's d; q5_0: max|block| / 127, the scale
matmul_w4/w8 use) and exact group sums xsum_g:

    I1_s = sum_g sc_g (sum_{k in g} u_k xq_k - o xsum_g)       int32, exact
    I2_s = -sum_g m_g xsum_g                                    int32, exact
    y   += xd_s * (a_s * float(I1_s) + b_s * float(I2_s))      float32, super-block by super-block

This is the quantized-activation numerics, not the float path's: `matmul_kquant_ref` defines it
(the same float32 operations in the same order) and the kernels are held to it bit for bit; the
difference from x @ dequantize(W).T is Q8_K's / Q8_0's rounding of x, bounded in the tests.
llama.cpp's ggml_vec_dot_q4_K_q8_K sums in the same form (d * sumi - dmin * summs), though its
float order differs.

Paths (kernels/matmul.py's ISA): the x86 one runs the tile vectors of matmul_x86.py, 64 output
rows per tile, levels unpacked to one byte each in its 4-byte-step layout, `vpdpbusd` (AVX512-VNNI
or AVX-VNNI) or AVX2 `vpmaddubsw` for the group dots (u <= 63, so vpmaddubsw's int16 pair sums
never saturate: 2 * 63 * 127 < 2^15; q8_0's u = q + 128 goes through matmul_x86's
dot_offset_bytes, which on AVX2 multiplies q itself, so its offset there is 0); the portable one
is a plain Numba loop over the same integers. One pass over a tile's bytes feeds all 64 rows
and, for M > 1, every activation row (the tile stays in L2). q4_k's levels are held as nibbles
(matmul_w4's layout: half a byte a weight); q5_0, q5_k, q6_k and q8_0's as one byte each (their
5th / 6th bits unpacked), more than the file's 5.5-8.5 bits.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numba
import numpy as np
from llvmlite import ir
from numba.extending import intrinsic

from harmony_ref.kernels.matmul import ISA, ISA_AVX2, ISA_PORTABLE, _as_activations
from harmony_ref.kernels.matmul_x86 import (
    FLOATS,
    INTS,
    LANES,
    STEP,
    _scalar,
    _splat,
    bcast_word,
    dot_nibbles,
    dot_offset_bytes,
    high_nibbles,
    load_bytes,
    load_floats,
    load_int8_offset,
    low_nibbles,
    minus_scalar_times,
    minus_times,
    store_floats,
    zero_floats,
    zero_ints,
)
from harmony_ref.kernels.matmul_x86_isa import Isa
from harmony_ref.kernels.matmul_x86_layout import _quantize_activations_bytes, _tiles_of
from harmony_ref.quant.ggml import QK, GGMLTensor
from harmony_ref.quant.kquants import (
    QK_K,
    KQuantTensor,
    levels,
    quantize_q8_k_ref,
    unpack_scales_k4,
)

GROUP = {"q5_0": 32, "q4_k": 32, "q5_k": 32, "q6_k": 16, "q8_0": 32}  # weights per integer scale
SUPER = {"q5_0": QK, "q4_k": QK_K, "q5_k": QK_K, "q6_k": QK_K, "q8_0": QK}  # per float scale
OFFSET = {"q5_0": 16, "q4_k": 0, "q5_k": 0, "q6_k": 32, "q8_0": 128}  # the level of weight 0
Q8_0_LEVEL_OFFSET = 128  # q8_0's u = q + 128: unsigned for vpdpbusd
# How the x86 layout holds a type's levels (compile-time literals of _kquant_x86): one byte per
# level, q8_0's q + 128 bytes, or q4_k's nibbles (two 4-value steps per byte, half the bytes).
LEVEL_BYTES, Q8_BYTES, NIBBLES = (Isa(i) for i in range(3))
LEVELS = {"q8_0": Q8_BYTES, "q4_k": NIBBLES}


@dataclass(frozen=True, eq=False)
class PreparedKQuant:
    """The operand of one Q5_0 / K-quant matrix. x86 layout: `u` (T, K / 4 * STEP) uint8 in
    matmul_x86's tile steps, `sc` / `m` (T, groups * LANES) int8 and `a` / `b` (T, supers *
    LANES) float32, each group's or super-block's 64 rows contiguous. Portable layout: `u`
    (N, K), `sc` / `m` (N, groups), `a` / `b` (N, supers)."""

    qtype: str
    shape: tuple[int, int]
    layout: str  # x86 | rows
    u: np.ndarray
    sc: np.ndarray
    m: np.ndarray
    a: np.ndarray
    b: np.ndarray
    nbytes: int  # the file's bytes of the tensor


def integer_form(t):
    """KQuantTensor or q8_0 GGMLTensor -> (u (N, K) uint8, sc (N, K / group) int8,
    m (N, K / group) int8, a (N, K / super) float32, b (N, K / super) float32): the module
    docstring's form."""
    n, k = t.shape
    if isinstance(t, GGMLTensor):  # q8_0 (_check_operand)
        u = (t.levels().astype(np.int16) + Q8_0_LEVEL_OFFSET).astype(np.uint8)
        ones, zeros = np.ones((n, k // QK), np.int8), np.zeros((n, k // QK), np.int8)
        return u, ones, zeros, t.d.astype(np.float32), np.zeros((n, k // QK), np.float32)
    blk = t.blocks
    u = levels(t)
    groups, supers = k // GROUP[t.qtype], k // SUPER[t.qtype]
    a = blk["d"].astype(np.float32)
    b = np.zeros((n, supers), dtype=np.float32)
    sc = np.ones((n, groups), dtype=np.int8)
    m = np.zeros((n, groups), dtype=np.int8)
    if t.qtype == "q6_k":
        sc = blk["scales"].reshape(n, groups)
    elif t.qtype in ("q4_k", "q5_k"):
        s6, m6 = unpack_scales_k4(blk["scales"])  # (N, supers, 8), 0..63
        sc, m = s6.reshape(n, groups).astype(np.int8), m6.reshape(n, groups).astype(np.int8)
        b = blk["dmin"].astype(np.float32)
    return u, np.ascontiguousarray(sc), np.ascontiguousarray(m), a, np.ascontiguousarray(b)


_prepared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _per_lane(a: np.ndarray) -> np.ndarray:
    """(N, G) -> (T, G * LANES): column g of the tile's 64 rows contiguous."""
    t = _tiles_of(a)
    return np.ascontiguousarray(t.transpose(0, 2, 1)).reshape(t.shape[0], -1)


def prepare_kquant(t, isa: int = ISA) -> PreparedKQuant:
    """Kernel operand of `t`, built once per tensor object (for the import-time path) and cached
    (weakly) on it."""
    if isinstance(t, PreparedKQuant):
        return t
    _check_operand(t, "KQuantTensor, q8_0 GGMLTensor or PreparedKQuant")
    if isa != ISA:
        return _prepare(t, isa)
    done = _prepared.get(t)
    if done is None:
        done = _prepared[t] = _prepare(t, isa)
    return done


def _check_operand(t, what: str) -> None:
    if not isinstance(t, KQuantTensor) and not (isinstance(t, GGMLTensor) and t.qtype == "q8_0"):
        raise ValueError(f"w must be a {what}, got {type(t).__name__} {getattr(t, 'qtype', '')}")


def _prepare(t, isa: int) -> PreparedKQuant:
    u, sc, m, a, b = integer_form(t)
    if isa == ISA_AVX2 and t.qtype == "q8_0" and (u == 0).any():
        isa = ISA_PORTABLE  # q = -128 (not llama.cpp's, a hand-made file): AVX2's psign trick is not exact
    if isa == ISA_PORTABLE:
        return PreparedKQuant(t.qtype, t.shape, "rows", u, sc, m, a, b, t.nbytes)
    n, k = t.shape
    tiles = _tiles_of(u)  # (T, LANES, K), padded rows level 0 with scale 0
    if LEVELS.get(t.qtype) == NIBBLES:  # byte [t, j, r, c] = u(8j + c) | u(8j + 4 + c) << 4
        pairs = tiles.reshape(tiles.shape[0], LANES, k // 8, 2, 4)
        tiles = pairs[:, :, :, 0] | (pairs[:, :, :, 1] << 4)  # (T, LANES, K / 8, 4)
    steps = tiles.reshape(tiles.shape[0], LANES, -1, 4).transpose(0, 2, 1, 3)
    u_x86 = np.ascontiguousarray(steps).reshape(tiles.shape[0], -1)
    return PreparedKQuant(
        t.qtype, t.shape, "x86", u_x86, _per_lane(sc), _per_lane(m), _per_lane(a), _per_lane(b),
        t.nbytes,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# Activations


def quantize_activations_kquant_ref(x: np.ndarray, qtype: str):
    """x (M, K) float32 -> xq (M, K) int8, xd (M, K / super) float32, xsum (M, K / group)
    int32: Q8_K (ggml's quantize_row_q8_K_ref) for the K-quants, 32-blocks (matmul_w4's
    activation quantizer) for q5_0 and q8_0."""
    if qtype in ("q5_0", "q8_0"):
        return _quantize_activations_bytes(x, QK)
    xq, xd, bsums = quantize_q8_k_ref(x)
    per = GROUP[qtype] // 16  # Q8_K's bsums are per 16
    xsum = bsums.astype(np.int32).reshape(x.shape[0], -1, per).sum(axis=2, dtype=np.int32)
    return xq, xd, xsum


@numba.njit(parallel=True, cache=True)
def _quantize_q8_k(x, group):
    """quantize_q8_k_ref's arithmetic (nearest_int is rint below 2^22, and |x / d| <= 127 here)
    with group sums of `group` values."""
    m, k = x.shape
    nb = k // QK_K
    xq = np.empty((m, k), dtype=np.int8)
    xd = np.empty((m, nb), dtype=np.float32)
    xsum = np.empty((m, k // group), dtype=np.int32)
    for i in numba.prange(m):
        for b in range(nb):
            amax = np.float32(0.0)
            mx = np.float32(0.0)
            for j in range(b * QK_K, (b + 1) * QK_K):
                if abs(x[i, j]) > amax:
                    amax = abs(x[i, j])
                    mx = x[i, j]
            iscale = np.float32(0.0) if amax == 0 else np.float32(-127.0) / mx
            xd[i, b] = np.float32(0.0) if amax == 0 else np.float32(1.0) / iscale
            for j in range(b * QK_K, (b + 1) * QK_K):
                xq[i, j] = np.int8(min(np.float32(127.0), np.rint(iscale * x[i, j])))
        for g in range(k // group):
            total = np.int32(0)
            for j in range(g * group, (g + 1) * group):
                total += np.int32(xq[i, j])
            xsum[i, g] = total
    return xq, xd, xsum


def quantize_activations_kquant(x: np.ndarray, qtype: str):
    """quantize_activations_kquant_ref in Numba (the float32 (M, K) x the kernels check)."""
    if qtype in ("q5_0", "q8_0"):
        return _quantize_activations_bytes(x, QK)
    if x.shape[1] % QK_K:
        raise ValueError(f"x has K = {x.shape[1]}, not a multiple of Q8_K's {QK_K}")
    return _quantize_q8_k(x, GROUP[qtype])


# ----------------------------------------------------------------------------------------------
# CPU code reference


def matmul_kquant_ref(x, t: KQuantTensor) -> np.ndarray:
    """NumPy twin of `matmul_kquant`, and the definition of its numerics (the module
    docstring's I1, I2 and float32 order): exact integer sums, then per super-block
    y += xd * (a * float(I1) + b * float(I2)) in float32."""
    _check_operand(t, "KQuantTensor or q8_0 GGMLTensor")
    n, k = t.shape
    x, vector = _as_activations(x, k)
    xq, xd, xsum = quantize_activations_kquant_ref(x, t.qtype)
    u, sc, m, a, b = integer_form(t)
    mrows, g = x.shape[0], GROUP[t.qtype]
    groups = k // g
    dots = np.einsum(
        "mgj,ngj->mng", xq.reshape(mrows, groups, g).astype(np.int64),
        u.reshape(n, groups, g).astype(np.int64),
    )  # fmt: skip
    xs64 = xsum.astype(np.int64)[:, None, :]
    i1 = sc.astype(np.int64)[None] * (dots - OFFSET[t.qtype] * xs64)
    i2 = -(m.astype(np.int64)[None] * xs64)
    per = SUPER[t.qtype] // g
    i1 = i1.reshape(mrows, n, -1, per).sum(axis=3).astype(np.float32)  # (M, N, S), exact
    i2 = i2.reshape(mrows, n, -1, per).sum(axis=3).astype(np.float32)
    y = np.zeros((mrows, n), dtype=np.float32)
    for s in range(k // SUPER[t.qtype]):
        term = a[None, :, s] * i1[:, :, s] + b[None, :, s] * i2[:, :, s]
        y = y + xd[:, s, None] * term
    return y[0] if vector else y


# ----------------------------------------------------------------------------------------------
# Fast paths


@intrinsic
def mul_add_ints(typingctx, acc, a, b):
    """acc + a * b, lane by lane (int32)."""

    def codegen(context, builder, sig, args):
        return builder.add(args[0], builder.mul(args[1], args[2]))

    return INTS(INTS, INTS, INTS), codegen


@intrinsic
def add_super(typingctx, facc, xd, a, i1, b, i2):
    """facc + xd * (a * float(i1) + b * float(i2)): matmul_kquant_ref's order."""

    def codegen(context, builder, sig, args):
        f32 = ir.VectorType(ir.FloatType(), LANES)
        xdv = _splat(builder, _scalar(context, builder, args[1], sig.args[1], numba.float32), LANES)
        t1 = builder.fmul(args[2], builder.sitofp(args[3], f32))
        t2 = builder.fmul(args[4], builder.sitofp(args[5], f32))
        return builder.fadd(args[0], builder.fmul(xdv, builder.fadd(t1, t2)))

    return FLOATS(FLOATS, xd, FLOATS, INTS, FLOATS, INTS), codegen


@numba.njit(parallel=True, cache=True)
def _kquant_x86(isa, levels, xw, xd, xsum, u, sc, mins, a, b, group, per, offset):
    """y (M, T * LANES) for x words xw (M, K / 4) int32; `levels` (a literal) says how `u`
    holds them: LEVEL_BYTES, Q8_BYTES (u = q + 128, dot_offset_bytes) or NIBBLES."""
    numba.literally(isa)
    numba.literally(levels)
    m = xw.shape[0]
    tiles = u.shape[0]
    supers = xd.shape[1]
    steps = group // 4
    y = np.empty((m, tiles * LANES), dtype=np.float32)
    for t in numba.prange(tiles):
        ut, st, mt, at, bt = u[t], sc[t], mins[t], a[t], b[t]
        for i in range(m):
            xr = xw[i]
            facc = zero_floats()
            for s in range(supers):
                i1 = zero_ints()
                i2 = zero_ints()
                for g in range(s * per, (s + 1) * per):
                    acc = zero_ints()
                    if levels == NIBBLES:  # one byte step: 4 values low, the next 4 high
                        for j in range(g * steps // 2, (g + 1) * steps // 2):
                            w = load_bytes(ut, j * STEP)
                            acc = dot_nibbles(isa, acc, low_nibbles(w), bcast_word(xr, 2 * j))
                            acc = dot_nibbles(isa, acc, high_nibbles(w), bcast_word(xr, 2 * j + 1))
                    else:
                        for j in range(g * steps, (g + 1) * steps):
                            w, xj = load_bytes(ut, j * STEP), bcast_word(xr, j)
                            if levels == Q8_BYTES:
                                acc = dot_offset_bytes(isa, acc, w, xj)
                            else:
                                acc = dot_nibbles(isa, acc, w, xj)
                    acc = minus_scalar_times(acc, offset, xsum[i, g])
                    i1 = mul_add_ints(i1, load_int8_offset(st, g * LANES, 0), acc)
                    i2 = minus_times(i2, load_int8_offset(mt, g * LANES, 0), xsum[i, g])
                fa, fb = load_floats(at, s * LANES), load_floats(bt, s * LANES)
                facc = add_super(facc, xd[i, s], fa, i1, fb, i2)
            store_floats(y[i], t * LANES, facc)
    return y


@numba.njit(parallel=True, cache=True)
def _kquant_rows(xq, xd, xsum, u, sc, mins, a, b, group, per, offset):
    """y (M, N): the portable loop over the same integers and float order."""
    m, k = xq.shape
    n = u.shape[0]
    supers = xd.shape[1]
    yt = np.empty((n, m), dtype=np.float32)
    for r in numba.prange(n):
        for i in range(m):
            facc = np.float32(0.0)
            for s in range(supers):
                i1 = np.int32(0)
                i2 = np.int32(0)
                for g in range(s * per, (s + 1) * per):
                    acc = np.int32(0)
                    for j in range(g * group, (g + 1) * group):
                        acc += np.int32(u[r, j]) * np.int32(xq[i, j])
                    acc -= np.int32(offset) * xsum[i, g]
                    i1 += np.int32(sc[r, g]) * acc
                    i2 -= np.int32(mins[r, g]) * xsum[i, g]
                term = a[r, s] * np.float32(i1) + b[r, s] * np.float32(i2)
                facc += xd[i, s] * term
            yt[r, i] = facc
    return yt.T


def matmul_kquant(x, w, isa: int = ISA) -> np.ndarray:
    """x (M, K) or (K,) float @ W.T for a KQuantTensor, a q8_0 GGMLTensor (or their
    PreparedKQuant) W of shape (N, K)."""
    p = prepare_kquant(w, isa)
    n, k = p.shape
    x2, vector = _as_activations(x, k)
    xq, xd, xsum = quantize_activations_kquant(x2, p.qtype)
    group, per, offset = GROUP[p.qtype], SUPER[p.qtype] // GROUP[p.qtype], OFFSET[p.qtype]
    weights = (p.u, p.sc, p.m, p.a, p.b, group, per, offset)
    if p.layout == "x86":
        levels = LEVELS.get(p.qtype, LEVEL_BYTES)
        if levels == Q8_BYTES and isa == ISA_AVX2:  # dot_offset_bytes multiplies q itself there
            weights = weights[:-1] + (0,)
        y = _kquant_x86(Isa(isa), levels, xq.view(np.int32), xd, xsum, *weights)[:, :n]
    else:
        y = _kquant_rows(xq, xd, xsum, *weights)
    y = np.ascontiguousarray(y)
    return y[0] if vector else y
