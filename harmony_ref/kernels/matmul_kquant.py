"""Matmuls over Q5_0 and the K-quants (quant/kquants.py: q5_0, q4_k, q5_k, q6_k), and Q4_1 and
Q8_0 (quant/ggml.py), as llama.cpp runs them: the activation row quantized once per call to int8
blocks (Q8_K, one float scale per 256 values, for the K-quants; Q8_0-style blocks of 32 for
q4_1, q5_0 and q8_0), integer dot products of the stored levels with it, and the block scales applied once
per super-block.

    p = prepare_kquant(t)            # KQuantTensor -> the kernel's operand, once per tensor
    y = matmul_kquant(x, p)          # x (M, K) or (K,) float -> (M, N) or (N,) float32
    matmul_kquant_ref(x, t)          # the numerics `matmul_kquant` defines, plain NumPy

Every type is one integer form. A super-block s (K-quants: 256 weights; q5_0: its 32-block) has
float scales a_s, b_s; a group g (32 weights; q6_k: 16) has integer scale sc_g and min m_g; a
weight's level u is unsigned, with offset o:

    q4_1  a = d, b = m,    sc = 1,          m = -1,          o = 0     w = a u + b
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
llama.cpp's ggml_vec_dot_q4_K_q8_K sums in the same form (d * sumi - dmin * summs), and its
q4_1 vec_dot as d * sumi + m * s, though their float order differs.

Paths (kernels/matmul.py's ISA): the x86 one runs the tile vectors of matmul_x86.py, 64 output
rows per tile, levels unpacked to one byte each in its 4-byte-step layout, `vpdpbusd` (AVX512-VNNI
or AVX-VNNI) or AVX2 `vpmaddubsw` for the group dots (u <= 63, so vpmaddubsw's int16 pair sums
never saturate: 2 * 63 * 127 < 2^15; q8_0's u = q + 128 goes through matmul_x86's
dot_offset_bytes, which on AVX2 multiplies q itself, so its offset there is 0); the portable one
is a plain Numba loop over the same integers. One load of a tile's weight step feeds all 64
rows; for M >= 4 (prefill) each tile's levels are first decoded once into a byte buffer (one
byte a level, K * 64 bytes: L2), which every activation row then reads four rows at a time, so
the nibble / high-bit decoding is paid once per tile, not once per four rows. q4_k's levels are held as nibbles
(matmul_w4's layout: half a byte a weight); q5_k's and q6_k's as nibbles plus their 5th (q5_k:
one byte per lane and 4-value step column of a 32-group, bit s for step s, as q5_0's) or 5th and
6th bits (q6_k: one byte per lane and column of a 16-group, bits 2s and 2s + 1 for step s), put
back in registers (block_step): 5 / 6 bits a weight as the file (levels plus scales: 5.5 / 6.5 in
the file, here int8 group scales and float32 super-block ones, a little more).

The 32-block types (BLOCK32: q4_1, q5_0, q8_0; sc = 1, one float16 d per block) have their own
x86 layout and kernel, `_block32_x86`, at the file's own bits per weight: nibbles (q4_1), q5_0's
nibbles plus its 5th bits (one byte per lane and 4-value step column of a block, bit s for step
s: 1 bit a weight, put back in registers as 16), q8_0's bytes, and d (q4_1: m too) as the
file's float16 bits, widened in registers (exact); 5 / 5.5 / 8.5 bits a weight, as the file.
It decodes a tile's levels once into the prefill buffer and runs four activation rows per
loaded step (prefill). A single row (decode), in both kernels, prefetches its level stream
where DECODE_PREFETCH says (by CPU vendor, measured). q5_0's and q8_0's b = 0 term is left out
(add_super_a: the same bits).
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass

import numba
import numpy as np
from llvmlite import ir
from numba.extending import intrinsic

from harmony_ref._cpus import cpuinfo
from harmony_ref.kernels.matmul import ISA, ISA_AVX2, ISA_PORTABLE, _as_activations
from harmony_ref.kernels.matmul_portable import quantize_row_bytes
from harmony_ref.kernels.matmul_x86 import (
    BYTES,
    FLOATS,
    INTS,
    LANES,
    PREFETCH_BYTES,
    STEP,
    _dot_codegen,
    _isa_literal,
    _load,
    _ptr,
    _scalar,
    _splat,
    _vty,
    bcast_word,
    dot_nibbles,
    high_nibbles,
    load_bytes,
    load_floats,
    load_int8_offset,
    low_nibbles,
    minus_scalar_times,
    minus_times,
    prefetch,
    store_bytes,
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

GROUP = {"q4_1": 32, "q5_0": 32, "q4_k": 32, "q5_k": 32, "q6_k": 16, "q8_0": 32}  # per int scale
SUPER = {"q4_1": QK, "q5_0": QK, "q4_k": QK_K, "q5_k": QK_K, "q6_k": QK_K, "q8_0": QK}  # per float
OFFSET = {"q4_1": 0, "q5_0": 16, "q4_k": 0, "q5_k": 0, "q6_k": 32, "q8_0": 128}  # level of w = 0
Q8_0_LEVEL_OFFSET = 128  # q8_0's u = q + 128: unsigned for vpdpbusd
# How the x86 layout holds a type's levels (compile-time literals of the kernels): one byte per
# level, q8_0's q + 128 bytes, nibbles (two 4-value steps per byte, half the bytes), q5_0's and
# q5_k's nibbles plus one byte of 5th bits per 4-value lane of a 32-block (bit s: step s), or
# q6_k's nibbles plus one byte of 5th-6th bits per lane of a 16-group (bits 2s, 2s + 1: step s).
Q8_BYTES, NIBBLES, NIBBLES_HIGH, NIBBLES_HIGH2 = (Isa(i) for i in range(4))
LEVELS = {
    "q8_0": Q8_BYTES,
    "q4_k": NIBBLES,
    "q4_1": NIBBLES,
    "q5_0": NIBBLES_HIGH,
    "q5_k": NIBBLES_HIGH,
    "q6_k": NIBBLES_HIGH2,
}
HIGH_BITS = {NIBBLES_HIGH: 1, NIBBLES_HIGH2: 2}  # bits above the nibble, per level
# The 32-block types (one float16 scale per 32 weights, no integer scales): their x86 layout
# keeps the file's float16 d (and q4_1's m) and its bits per weight, and runs `_block32_x86`.
BLOCK32 = ("q4_1", "q5_0", "q8_0")
BLOCK_STEPS = QK // 4  # 4-value steps per 32-block
# The types whose decode rows (M < 4) prefetch their level stream PREFETCH_BYTES ahead, by CPU
# vendor (/proc/cpuinfo's vendor_id; any other vendor: none). Measured, one quiet run each, M = 1,
# copies cycled beyond the caches, no prefetch -> prefetch:
# - AMD EPYC Zen 4, 1 thread, 3072 x 576 / 49152 x 576, none / 1 KB / 2 KB / 4 KB ahead: q4_1
#   84 / 77 / 78 / 89 us, q5_0 76 / 93 / 89 / 91 us, q8_0 1195 / 1261 / 1325 / 1428 us; the
#   K-quants not measured there, so not prefetched (round 5's numbers in decoders.md stand).
# - Intel Xeon (AMX, KVM, LLVM "rocketlake"), 1 thread, 2 KB ahead: q5_0 3072 x 576 147.6 -> 128.4
#   us, 576 x 1536 84.2 -> 71.0, 576 x 576 41.8 -> 37.1; q4_k 576 x 1536 84.5 -> 67.4; q6_k
#   113.8 -> 101.8; q8_0 3072 x 576 201.8 -> 184.1. End to end (tools/decoder_vs_llamacpp.py,
#   tg64 as stored): SmolLM2 q4_k_m 2 threads 1.51x -> 1.83x llama.cpp, 1 thread 1.59x -> 1.83x.
# HARMONY_REF_DECODE_PREFETCH (comma-separated types; empty: none) overrides it, to measure
# another CPU.
DECODE_PREFETCH = {
    "AuthenticAMD": ("q4_1",),
    "GenuineIntel": ("q4_1", "q5_0", "q8_0", "q4_k", "q5_k", "q6_k"),
}
PREFETCH_ENV = "HARMONY_REF_DECODE_PREFETCH"
_VENDOR = cpuinfo("vendor_id") or ""


def decode_prefetch(qtype: str, vendor: str | None = None) -> bool:
    """Whether decode rows of `qtype` prefetch their level stream on this CPU (DECODE_PREFETCH,
    or the PREFETCH_ENV override)."""
    env = os.environ.get(PREFETCH_ENV)
    if env is not None:
        return qtype in {t.strip() for t in env.split(",")}
    return qtype in DECODE_PREFETCH.get(_VENDOR if vendor is None else vendor, ())


@dataclass(frozen=True, eq=False)
class PreparedKQuant:
    """The operand of one Q4_1 / Q5_0 / Q8_0 / K-quant matrix. x86 layout: `u` (T, K / 4 * STEP)
    uint8 in matmul_x86's tile steps (nibbles: K / 8 * STEP), `sc` / `m` (T, groups * LANES)
    int8 and `a` / `b` (T, supers * LANES) float32, each group's or super-block's 64 rows
    contiguous; `hb` (T, groups * STEP) q5_k's / q6_k's high bits (LEVELS). "x86-32" layout (BLOCK32 types): `u` as x86, `hb` (T, K / 32 * STEP) q5_0's
    5th bits (byte [r, c] of block g, bit s: weight 32 g + 4 s + c of row r), `a` / `b`
    (T, K / 32 * LANES) the file's float16 d / m bits (uint16; `b` empty but for q4_1), no
    `sc` / `m` (sc = 1; q4_1's m = -1). Portable layout: `u` (N, K), `sc` / `m` (N, groups),
    `a` / `b` (N, supers)."""

    qtype: str
    shape: tuple[int, int]
    layout: str  # x86 | x86-32 | rows
    u: np.ndarray
    sc: np.ndarray
    m: np.ndarray
    a: np.ndarray
    b: np.ndarray
    nbytes: int  # the file's bytes of the tensor
    hb: np.ndarray | None = None  # q5_0 / q5_k: the 5th bits; q6_k: the 5th and 6th


def integer_form(t):
    """KQuantTensor or q4_1 / q8_0 GGMLTensor -> (u (N, K) uint8, sc (N, K / group) int8,
    m (N, K / group) int8, a (N, K / super) float32, b (N, K / super) float32): the module
    docstring's form."""
    n, k = t.shape
    if isinstance(t, GGMLTensor):  # q4_1 or q8_0 (_check_operand)
        ones = np.ones((n, k // QK), np.int8)
        if t.qtype == "q4_1":  # w = d u + m: b = m against m_g = -1
            u = t.levels().astype(np.uint8)
            return u, ones, -ones, t.d.astype(np.float32), t.m.astype(np.float32)
        u = (t.levels().astype(np.int16) + Q8_0_LEVEL_OFFSET).astype(np.uint8)
        zeros = np.zeros((n, k // QK), np.int8)
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
    _check_operand(t, "KQuantTensor, q4_1 / q8_0 GGMLTensor or PreparedKQuant")
    if isa != ISA:
        return _prepare(t, isa)
    done = _prepared.get(t)
    if done is None:
        done = _prepared[t] = _prepare(t, isa)
    return done


def _check_operand(t, what: str) -> None:
    if not isinstance(t, KQuantTensor) and not (
        isinstance(t, GGMLTensor) and t.qtype in ("q4_1", "q8_0")
    ):
        raise ValueError(f"w must be a {what}, got {type(t).__name__} {getattr(t, 'qtype', '')}")


def _prepare(t, isa: int) -> PreparedKQuant:
    u, sc, m, a, b = integer_form(t)
    if isa == ISA_AVX2 and t.qtype == "q8_0" and (u == 0).any():
        isa = ISA_PORTABLE  # q = -128 (not llama.cpp's, a hand-made file): AVX2's psign trick is not exact
    if isa == ISA_PORTABLE:
        return PreparedKQuant(t.qtype, t.shape, "rows", u, sc, m, a, b, t.nbytes)
    n, k = t.shape
    tiles = _tiles_of(u)  # (T, LANES, K), padded rows level 0 with scale 0
    hb = None
    nbits = HIGH_BITS.get(LEVELS.get(t.qtype), 0)
    if nbits:  # byte [t, g, r, c] bits nb s.. = u(4 gs g + 4 s + c) >> 4, gs = 8 / nb steps
        gs = 8 // nbits  # 4-value steps whose high bits share a byte: a 32-block or 16-group
        high = (tiles >> 4).reshape(tiles.shape[0], LANES, k // (4 * gs), gs, 4)
        shifts = (nbits * np.arange(gs, dtype=np.uint8))[:, None]
        bits = (high << shifts).sum(axis=3, dtype=np.uint8)  # disjoint bit fields: an OR
        hb = np.ascontiguousarray(bits.transpose(0, 2, 1, 3)).reshape(tiles.shape[0], -1)
        tiles = tiles & np.uint8(15)
    if LEVELS.get(t.qtype) in (NIBBLES, NIBBLES_HIGH, NIBBLES_HIGH2):
        # byte [t, j, r, c] = u(8j + c) | u(8j + 4 + c) << 4
        pairs = tiles.reshape(tiles.shape[0], LANES, k // 8, 2, 4)
        tiles = pairs[:, :, :, 0] | (pairs[:, :, :, 1] << 4)  # (T, LANES, K / 8, 4)
    steps = tiles.reshape(tiles.shape[0], LANES, -1, 4).transpose(0, 2, 1, 3)
    u_x86 = np.ascontiguousarray(steps).reshape(tiles.shape[0], -1)
    if t.qtype in BLOCK32:  # the file's float16 fields, as they are
        d16 = t.d if isinstance(t, GGMLTensor) else t.blocks["d"]  # (N, K / 32) float16
        d = _per_lane(np.ascontiguousarray(d16).view(np.uint16))
        mins = (
            _per_lane(t.m.view(np.uint16))
            if t.qtype == "q4_1"
            else np.zeros((d.shape[0], 0), np.uint16)
        )
        none = np.zeros((d.shape[0], 0), np.int8)
        return PreparedKQuant(t.qtype, t.shape, "x86-32", u_x86, none, none, d, mins, t.nbytes, hb)
    return PreparedKQuant(
        t.qtype, t.shape, "x86", u_x86, _per_lane(sc), _per_lane(m), _per_lane(a), _per_lane(b),
        t.nbytes, hb,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# Activations


def quantize_activations_kquant_ref(x: np.ndarray, qtype: str):
    """x (M, K) float32 -> xq (M, K) int8, xd (M, K / super) float32, xsum (M, K / group)
    int32: Q8_K (ggml's quantize_row_q8_K_ref) for the K-quants, 32-blocks (matmul_w4's
    activation quantizer) for the BLOCK32 types."""
    if qtype in BLOCK32:
        return _quantize_activations_bytes(x, QK)
    xq, xd, bsums = quantize_q8_k_ref(x)
    per = GROUP[qtype] // 16  # Q8_K's bsums are per 16
    xsum = bsums.astype(np.int32).reshape(x.shape[0], -1, per).sum(axis=2, dtype=np.int32)
    return xq, xd, xsum


@numba.njit(cache=True)
def _quantize_row_q8_k(x, i, group, xq, xd, xsum):
    """Row i of quantize_q8_k_ref's arithmetic into xq / xd / xsum (nearest_int is rint below
    2^22, and |x / d| <= 127 here), with group sums of `group` values."""
    for b in range(x.shape[1] // QK_K):
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
    for g in range(x.shape[1] // group):
        total = np.int32(0)
        for j in range(g * group, (g + 1) * group):
            total += np.int32(xq[i, j])
        xsum[i, g] = total


@numba.njit(parallel=True, cache=True)
def _quantize_q8_k(x, group):
    """Q8_K activations of every row of x, rows in parallel."""
    m, k = x.shape
    xq = np.empty((m, k), dtype=np.int8)
    xd = np.empty((m, k // QK_K), dtype=np.float32)
    xsum = np.empty((m, k // group), dtype=np.int32)
    for i in numba.prange(m):
        _quantize_row_q8_k(x, i, group, xq, xd, xsum)
    return xq, xd, xsum


@numba.njit(cache=True)
def _activations(x, block32, group):
    """The x86 kernels' int8 activations of x (M, K) float32, inside the kernel's own call:
    32-blocks (block32) or Q8_K with `group` sums. Fewer than 4 rows (decode) are quantized on
    the calling thread (a parallel launch for K values costs more than the work: measured, AMD
    EPYC Zen 4, 576 values 3.3 us through the parallel quantizer); prefill's rows in parallel."""
    m, k = x.shape
    if m >= 4:
        if block32:
            return _quantize_activations_bytes(x, QK)
        return _quantize_q8_k(x, group)
    xq = np.empty((m, k), dtype=np.int8)
    xd = np.empty((m, k // (QK if block32 else QK_K)), dtype=np.float32)
    xsum = np.empty((m, k // group), dtype=np.int32)
    for i in range(m):
        if block32:
            quantize_row_bytes(x, i, QK, xq, xd, xsum)
        else:
            _quantize_row_q8_k(x, i, group, xq, xd, xsum)
    return xq, xd, xsum


def quantize_activations_kquant(x: np.ndarray, qtype: str):
    """quantize_activations_kquant_ref in Numba (the float32 (M, K) x the kernels check)."""
    if qtype in BLOCK32:
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
    _check_operand(t, "KQuantTensor or q4_1 / q8_0 GGMLTensor")
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


@intrinsic
def add_super_a(typingctx, facc, xd, a, i1):
    """facc + xd * (a * float(i1)): add_super where b = 0, bit for bit (b * float(I2) is +0.0
    there, and t + 0.0 == t but for t = -0.0, whose product with xd then adds +-0.0 to a facc
    that, starting at +0.0 and summing rounded-to-nearest, is never -0.0)."""

    def codegen(context, builder, sig, args):
        f32 = ir.VectorType(ir.FloatType(), LANES)
        xdv = _splat(builder, _scalar(context, builder, args[1], sig.args[1], numba.float32), LANES)
        return builder.fadd(
            args[0], builder.fmul(xdv, builder.fmul(args[2], builder.sitofp(args[3], f32)))
        )

    return FLOATS(FLOATS, xd, FLOATS, INTS), codegen


def _levels_literal(levels):
    if not isinstance(levels, numba.types.IntegerLiteral):
        return None
    return levels.literal_value


@intrinsic
def zero_bytes(typingctx):
    def codegen(context, builder, sig, args):
        return ir.Constant(_vty("i8", STEP), None)

    return BYTES(), codegen


@intrinsic
def block_step(typingctx, levels, u, hbits, g, s):
    """The levels of 4-value step s of block g of a tile (64 lanes x 4 bytes; a block is 8
    steps, NIBBLES_HIGH2's 4): bytes (Q8_BYTES), or the low (even s) or high (odd s) nibbles of
    byte step g * steps / 2 + s // 2, with NIBBLES_HIGH's 5th bit (bit s of `hbits`, the block's
    high-bit bytes) as 16, NIBBLES_HIGH2's 5th and 6th (bits 2s, 2s + 1) as 16 and 32."""
    lv = _levels_literal(levels)
    if lv is None:
        return None

    def codegen(context, builder, sig, args):
        _, arr, h, g, s = args
        i64 = ir.IntType(64)
        g = _scalar(context, builder, g, sig.args[3], numba.int64)
        s = _scalar(context, builder, s, sig.args[4], numba.int64)
        if lv == Q8_BYTES:
            step = builder.add(builder.mul(g, ir.Constant(i64, BLOCK_STEPS)), s)
        else:
            half = ir.Constant(i64, (4 if lv == NIBBLES_HIGH2 else BLOCK_STEPS) // 2)
            step = builder.add(builder.mul(g, half), builder.lshr(s, ir.Constant(i64, 1)))
        idx = builder.mul(step, ir.Constant(i64, STEP))
        v = _load(builder, _ptr(context, builder, sig.args[1], arr, idx), _vty("i8", STEP))
        if lv == Q8_BYTES:
            return v
        odd = builder.icmp_unsigned("!=", builder.and_(s, ir.Constant(i64, 1)), ir.Constant(i64, 0))
        low = builder.and_(v, ir.Constant(v.type, [15] * STEP))
        w = builder.select(odd, builder.lshr(v, ir.Constant(v.type, [4] * STEP)), low)
        if lv == NIBBLES_HIGH:
            bit = builder.trunc(builder.shl(ir.Constant(i64, 1), s), ir.IntType(8))
            on = builder.icmp_unsigned(
                "!=", builder.and_(h, _splat(builder, bit, STEP)), ir.Constant(v.type, None)
            )
            w = builder.or_(
                w, builder.select(on, ir.Constant(v.type, [16] * STEP), ir.Constant(v.type, None))
            )
        if lv == NIBBLES_HIGH2:
            two_s = builder.trunc(builder.shl(s, ir.Constant(i64, 1)), ir.IntType(8))
            high = builder.and_(
                builder.lshr(h, _splat(builder, two_s, STEP)), ir.Constant(v.type, [3] * STEP)
            )
            w = builder.or_(w, builder.shl(high, ir.Constant(v.type, [4] * STEP)))
        return w

    return BYTES(levels, u, hbits, g, s), codegen


@intrinsic
def dot_levels(typingctx, isa, levels, acc, w, x):
    """acc + the 4-byte dots of levels w with x: dot_offset_bytes for Q8_BYTES, else
    dot_nibbles (levels <= 31)."""
    if _isa_literal(isa) is None or _levels_literal(levels) is None:
        return None
    dot = _dot_codegen(_isa_literal(isa), signed_weights=_levels_literal(levels) == Q8_BYTES)

    def codegen(context, builder, sig, args):
        return dot(context, builder, sig, args[1:])

    return INTS(isa, levels, INTS, BYTES, BYTES), codegen


@numba.njit(inline="always")
def store_rows4(y, i, col, f0, f1, f2, f3):
    """y[i + r, col : col + LANES] = f_r for the four rows of a prefill pass."""
    store_floats(y[i], col, f0)
    store_floats(y[i + 1], col, f1)
    store_floats(y[i + 2], col, f2)
    store_floats(y[i + 3], col, f3)


@numba.njit(inline="always")
def unpack_block32(levels, ut, ht, wt, blocks):
    """A tile's levels, every 4-value step as one byte a level (bytes [j * STEP:] of `wt`: step
    j = g * BLOCK_STEPS + s of block g), decoded once (block_step) for all of prefill's rows."""
    for g in range(blocks):
        h = load_bytes(ht, g * STEP) if levels == NIBBLES_HIGH else zero_bytes()
        for s in range(BLOCK_STEPS):
            store_bytes(wt, (g * BLOCK_STEPS + s) * STEP, block_step(levels, ut, h, g, s))


@numba.njit(inline="always")
def tile_parts(tiles, full):
    """How many parts each 64-row weight tile's prefill rows are cut into, so that prange's
    static split of tiles x parts gives 2 threads the same work: 1 for an even tile count
    (Gemma 3 270M's 640 and 1536 rows: 10 and 24 tiles), 2 for an odd one with 16 full rows or
    more (SmolLM2-135M's 576 and 960 rows, 9 and 15 tiles: split 5 / 4 and 8 / 7, o, down and
    q|k|v took 5 / 4.5 and 8 / 7.5 of a balanced split's time). A part decodes its tile's
    levels itself (at 1 thread, twice: small next to its rows' dots); every output is computed
    by the same code, the same bits. Not numba.get_num_threads(): calling it makes the kernel
    uncacheable (a dynamic global)."""
    return 2 if tiles % 2 and full >= 16 else 1


@numba.njit(inline="always")
def part_rows(part, parts, full, m):
    """Rows of part `part` of `parts`: the 4-row groups lo .. hi (step 4) and, in the last part,
    the M % 4 rows left from `tail` (tail = m elsewhere: none)."""
    quads = full // 4
    lo = quads * part // parts * 4
    hi = quads * (part + 1) // parts * 4
    tail = full if part == parts - 1 else m
    return lo, hi, tail


@numba.njit(parallel=True, cache=True)
def _block32_x86(isa, levels, pf, x, u, hb, a, b, offset):
    """y (M, T * LANES) for a BLOCK32 type in the x86-32 layout, x (M, K) float32 quantized to
    32-blocks here (`_activations`): per 32-block g, I1 = dot(u, xq) - offset * xsum, then y += xd * (a * float(I1) + b *
    float(xsum)) (b: q4_1's m; without it, add_super_a), matmul_kquant_ref's order. Prefill
    (M >= 4): each tile's levels are decoded once into a byte buffer (`unpack_block32`; q8_0's
    bytes are read as stored), then its activation rows run over it four at a time (one loaded
    step feeds four dots); the M % 4 rows left, and decode's (M < 4), one at a time from the
    stored levels, the level stream prefetched where `pf` (a literal: decode_prefetch) says
    (decode's code as it was before the buffer)."""
    numba.literally(isa)
    numba.literally(levels)
    numba.literally(pf)
    xq, xd, xsum = _activations(x, True, QK)
    xw = xq.view(np.int32)
    m = xw.shape[0]
    tiles = u.shape[0]
    blocks = xd.shape[1]
    has_b = b.shape[1] > 0
    per_block = BLOCK_STEPS * STEP if levels == Q8_BYTES else BLOCK_STEPS // 2 * STEP
    last = u.shape[1] - 1
    full = m - m % 4
    y = np.empty((m, tiles * LANES), dtype=np.float32)
    parts = tile_parts(tiles, full)
    for job in numba.prange(tiles * parts):
        t = job // parts
        lo, hi, tail = part_rows(job % parts, parts, full, m)
        ut, ht, at, bt = u[t], hb[t], a[t], b[t]
        wt = ut
        if m >= 4 and levels != Q8_BYTES:
            wt = np.empty(blocks * BLOCK_STEPS * STEP, dtype=np.uint8)
            unpack_block32(levels, ut, ht, wt, blocks)
        for i in range(lo, hi, 4):
            x0, x1, x2, x3 = xw[i], xw[i + 1], xw[i + 2], xw[i + 3]
            f0, f1, f2, f3 = zero_floats(), zero_floats(), zero_floats(), zero_floats()
            for g in range(blocks):
                a0, a1, a2, a3 = zero_ints(), zero_ints(), zero_ints(), zero_ints()
                for j in range(g * BLOCK_STEPS, (g + 1) * BLOCK_STEPS):
                    w = load_bytes(wt, j * STEP)
                    a0 = dot_levels(isa, levels, a0, w, bcast_word(x0, j))
                    a1 = dot_levels(isa, levels, a1, w, bcast_word(x1, j))
                    a2 = dot_levels(isa, levels, a2, w, bcast_word(x2, j))
                    a3 = dot_levels(isa, levels, a3, w, bcast_word(x3, j))
                fa = load_floats(at, g * LANES)
                c0 = minus_scalar_times(a0, offset, xsum[i, g])
                c1 = minus_scalar_times(a1, offset, xsum[i + 1, g])
                c2 = minus_scalar_times(a2, offset, xsum[i + 2, g])
                c3 = minus_scalar_times(a3, offset, xsum[i + 3, g])
                if has_b:
                    fb, z = load_floats(bt, g * LANES), zero_ints()
                    f0 = add_super(f0, xd[i, g], fa, c0, fb, minus_scalar_times(z, -1, xsum[i, g]))
                    f1 = add_super(
                        f1, xd[i + 1, g], fa, c1, fb, minus_scalar_times(z, -1, xsum[i + 1, g])
                    )
                    f2 = add_super(
                        f2, xd[i + 2, g], fa, c2, fb, minus_scalar_times(z, -1, xsum[i + 2, g])
                    )
                    f3 = add_super(
                        f3, xd[i + 3, g], fa, c3, fb, minus_scalar_times(z, -1, xsum[i + 3, g])
                    )
                else:
                    f0 = add_super_a(f0, xd[i, g], fa, c0)
                    f1 = add_super_a(f1, xd[i + 1, g], fa, c1)
                    f2 = add_super_a(f2, xd[i + 2, g], fa, c2)
                    f3 = add_super_a(f3, xd[i + 3, g], fa, c3)
            store_rows4(y, i, t * LANES, f0, f1, f2, f3)
        for i in range(tail, m):
            xr = xw[i]
            facc = zero_floats()
            for g in range(blocks):
                if pf:  # DECODE_PREFETCH
                    for c in range(0, per_block, 64):
                        prefetch(ut, min(g * per_block + PREFETCH_BYTES + c, last))
                h = load_bytes(ht, g * STEP) if levels == NIBBLES_HIGH else zero_bytes()
                acc = zero_ints()
                for s in range(BLOCK_STEPS):
                    w = block_step(levels, ut, h, g, s)
                    acc = dot_levels(isa, levels, acc, w, bcast_word(xr, g * BLOCK_STEPS + s))
                c0 = minus_scalar_times(acc, offset, xsum[i, g])
                fa = load_floats(at, g * LANES)
                if has_b:
                    i2 = minus_scalar_times(zero_ints(), -1, xsum[i, g])
                    facc = add_super(facc, xd[i, g], fa, c0, load_floats(bt, g * LANES), i2)
                else:
                    facc = add_super_a(facc, xd[i, g], fa, c0)
            store_floats(y[i], t * LANES, facc)
    return y


@numba.njit(inline="always")
def unpack_kquant(levels, ut, ht, wt, groups, steps):
    """A tile's K-quant levels, every 4-value step as one byte a level (bytes [j * STEP:] of
    `wt`: step j = g * steps + e of group g), decoded once for all of prefill's rows: nibbles
    split (q4_k), with their high bits put back (q5_k, q6_k: block_step)."""
    if levels == NIBBLES:
        for j in range(groups * steps // 2):
            v = load_bytes(ut, j * STEP)
            store_bytes(wt, 2 * j * STEP, low_nibbles(v))
            store_bytes(wt, (2 * j + 1) * STEP, high_nibbles(v))
    else:
        for g in range(groups):
            h = load_bytes(ht, g * STEP)
            for e in range(steps):
                store_bytes(wt, (g * steps + e) * STEP, block_step(levels, ut, h, g, e))


@numba.njit(parallel=True, cache=True)
def _kquant_x86(isa, levels, pf, x, u, hb, sc, mins, a, b, group, per, offset):
    """y (M, T * LANES) for x (M, K) float32, quantized to Q8_K here (`_activations`); `levels`
    (a literal) says how `u` (and `hb`, the high bits) hold them: NIBBLES (q4_k), NIBBLES_HIGH
    (q5_k) or NIBBLES_HIGH2 (q6_k). Prefill (M >= 4): each tile's levels are decoded once into
    a byte buffer (`unpack_kquant`), then its activation rows run over it four at a time (one
    loaded step feeds four dots); the M % 4 rows left, and decode's (M < 4), one at a time from
    the stored levels. q4_k and q5_k have offset 0 and q6_k no mins (m = 0, b = 0),
    so the prefill rows leave those terms out (the same bits: a - 0 * xsum = a, and add_super_a
    for q6_k). Decode rows prefetch the level stream where `pf` (a literal: decode_prefetch)
    says."""
    numba.literally(isa)
    numba.literally(levels)
    numba.literally(pf)
    xq, xd, xsum = _activations(x, False, group)
    xw = xq.view(np.int32)
    m = xw.shape[0]
    tiles = u.shape[0]
    supers = xd.shape[1]
    steps = group // 4
    full = m - m % 4
    six = levels == NIBBLES_HIGH2  # q6_k: offset 32, no mins
    last = u.shape[1] - 1
    group_bytes = steps // 2 * STEP  # a group's nibbles
    y = np.empty((m, tiles * LANES), dtype=np.float32)
    parts = tile_parts(tiles, full)
    for job in numba.prange(tiles * parts):
        t = job // parts
        lo, hi, tail = part_rows(job % parts, parts, full, m)
        ut, ht, st, mt, at, bt = u[t], hb[t], sc[t], mins[t], a[t], b[t]
        wt = ut
        if m >= 4:
            wt = np.empty(supers * per * steps * STEP, dtype=np.uint8)
            unpack_kquant(levels, ut, ht, wt, supers * per, steps)
        for i in range(lo, hi, 4):
            x0, x1, x2, x3 = xw[i], xw[i + 1], xw[i + 2], xw[i + 3]
            f0, f1, f2, f3 = zero_floats(), zero_floats(), zero_floats(), zero_floats()
            for s in range(supers):
                p0, p1, p2, p3 = zero_ints(), zero_ints(), zero_ints(), zero_ints()
                q0, q1, q2, q3 = zero_ints(), zero_ints(), zero_ints(), zero_ints()
                for g in range(s * per, (s + 1) * per):
                    a0, a1, a2, a3 = zero_ints(), zero_ints(), zero_ints(), zero_ints()
                    for j in range(g * steps, (g + 1) * steps):
                        w = load_bytes(wt, j * STEP)
                        a0 = dot_nibbles(isa, a0, w, bcast_word(x0, j))
                        a1 = dot_nibbles(isa, a1, w, bcast_word(x1, j))
                        a2 = dot_nibbles(isa, a2, w, bcast_word(x2, j))
                        a3 = dot_nibbles(isa, a3, w, bcast_word(x3, j))
                    sg = load_int8_offset(st, g * LANES, 0)
                    if six:
                        p0 = mul_add_ints(p0, sg, minus_scalar_times(a0, offset, xsum[i, g]))
                        p1 = mul_add_ints(p1, sg, minus_scalar_times(a1, offset, xsum[i + 1, g]))
                        p2 = mul_add_ints(p2, sg, minus_scalar_times(a2, offset, xsum[i + 2, g]))
                        p3 = mul_add_ints(p3, sg, minus_scalar_times(a3, offset, xsum[i + 3, g]))
                    else:
                        p0, p1 = mul_add_ints(p0, sg, a0), mul_add_ints(p1, sg, a1)
                        p2, p3 = mul_add_ints(p2, sg, a2), mul_add_ints(p3, sg, a3)
                        mg = load_int8_offset(mt, g * LANES, 0)
                        q0 = minus_times(q0, mg, xsum[i, g])
                        q1 = minus_times(q1, mg, xsum[i + 1, g])
                        q2 = minus_times(q2, mg, xsum[i + 2, g])
                        q3 = minus_times(q3, mg, xsum[i + 3, g])
                fa = load_floats(at, s * LANES)
                if six:
                    f0 = add_super_a(f0, xd[i, s], fa, p0)
                    f1 = add_super_a(f1, xd[i + 1, s], fa, p1)
                    f2 = add_super_a(f2, xd[i + 2, s], fa, p2)
                    f3 = add_super_a(f3, xd[i + 3, s], fa, p3)
                else:
                    fb = load_floats(bt, s * LANES)
                    f0 = add_super(f0, xd[i, s], fa, p0, fb, q0)
                    f1 = add_super(f1, xd[i + 1, s], fa, p1, fb, q1)
                    f2 = add_super(f2, xd[i + 2, s], fa, p2, fb, q2)
                    f3 = add_super(f3, xd[i + 3, s], fa, p3, fb, q3)
            store_rows4(y, i, t * LANES, f0, f1, f2, f3)
        for i in range(tail, m):
            xr = xw[i]
            facc = zero_floats()
            for s in range(supers):
                i1 = zero_ints()
                i2 = zero_ints()
                for g in range(s * per, (s + 1) * per):
                    acc = zero_ints()
                    if pf:  # DECODE_PREFETCH
                        for c in range(0, group_bytes, 64):
                            prefetch(ut, min(g * group_bytes + PREFETCH_BYTES + c, last))
                    if levels == NIBBLES:  # one byte step: 4 values low, the next 4 high
                        for j in range(g * steps // 2, (g + 1) * steps // 2):
                            w = load_bytes(ut, j * STEP)
                            acc = dot_nibbles(isa, acc, low_nibbles(w), bcast_word(xr, 2 * j))
                            acc = dot_nibbles(isa, acc, high_nibbles(w), bcast_word(xr, 2 * j + 1))
                    else:
                        h = load_bytes(ht, g * STEP)
                        for e in range(steps):
                            w = block_step(levels, ut, h, g, e)
                            acc = dot_nibbles(isa, acc, w, bcast_word(xr, g * steps + e))
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


def _x86_call(p: PreparedKQuant, isa: int, prefetch: bool | None = None):
    """(kernel, its arguments before x, its arguments after x) for an x86 / x86-32 operand, or
    None for the portable layout; decode rows prefetch where `prefetch` says (None:
    decode_prefetch)."""
    group, per, offset = GROUP[p.qtype], SUPER[p.qtype] // GROUP[p.qtype], OFFSET[p.qtype]
    levels = LEVELS[p.qtype]
    if levels == Q8_BYTES and isa == ISA_AVX2:  # dot_offset_bytes multiplies q itself there
        offset = 0
    hb = p.hb if p.hb is not None else p.u[:, :0]
    pf = Isa(decode_prefetch(p.qtype) if prefetch is None else prefetch)
    if p.layout == "x86-32":
        return _block32_x86, (Isa(isa), levels, pf), (p.u, hb, p.a, p.b, offset)
    if p.layout == "x86":
        args = (p.u, hb, p.sc, p.m, p.a, p.b, group, per, offset)
        return _kquant_x86, (Isa(isa), levels, pf), args
    return None


def matmul_kquant(x, w, isa: int = ISA, prefetch: bool | None = None) -> np.ndarray:
    """x (M, K) or (K,) float @ W.T for a KQuantTensor, a q4_1 / q8_0 GGMLTensor (or their
    PreparedKQuant) W of shape (N, K). `prefetch` (None: decode_prefetch) changes speed only,
    never a bit of y."""
    p = prepare_kquant(w, isa)
    n, k = p.shape
    x2, vector = _as_activations(x, k)
    call = _x86_call(p, isa, prefetch)
    if call is None:
        xq, xd, xsum = quantize_activations_kquant(x2, p.qtype)
        group, per = GROUP[p.qtype], SUPER[p.qtype] // GROUP[p.qtype]
        y = _kquant_rows(xq, xd, xsum, p.u, p.sc, p.m, p.a, p.b, group, per, OFFSET[p.qtype])
    else:
        kernel, head, tail = call
        y = kernel(*head, np.ascontiguousarray(x2), *tail)[:, :n]
    y = np.ascontiguousarray(y)
    return y[0] if vector else y


def bind_kquant(operand, isa: int = ISA):
    """x -> matmul_kquant(x, operand, isa), bit for bit, with the kernel's compiled
    specialization for this operand looked up once (here, at Linear build time), or None when
    `operand` is not a PreparedKQuant in an x86 layout. A decode call then costs the kernel
    alone: no typing of its arguments (each `Isa` literal ~2.4 us), no operand or shape checks
    beyond what tells x (M, K) float32 C-contiguous from anything else (which takes
    matmul_kquant's checked path)."""
    if not isinstance(operand, PreparedKQuant):
        return None
    call = _x86_call(operand, isa)
    if call is None:
        return None
    kernel, head, tail = call
    n, k = operand.shape
    probe = (*head, np.zeros((1, k), np.float32), *tail)
    full = kernel(*probe).shape[1] == n  # compiles (or loads from numba's cache) the kernel
    entry = kernel.overloads[tuple(numba.typeof(v) for v in probe)].entry_point

    def run(x):
        if (
            type(x) is np.ndarray
            and x.dtype == np.float32
            and x.ndim == 2
            and x.shape[1] == k
            and x.flags.c_contiguous
            and x.flags.writeable
            and x.flags.aligned
        ):
            y = entry(*head, x, *tail)
            return y if full else np.ascontiguousarray(y[:, :n])
        return matmul_kquant(x, operand, isa)

    return run
