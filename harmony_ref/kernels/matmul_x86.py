"""x86 int8 dot-product kernels for `matmul_w4` / `matmul_w8` (the portable loops they are held
to bit for bit are in matmul_portable.py; matmul.py chooses between them).

Tile vectors. Numba has no SIMD types, so this module adds one: `Vec`, an LLVM vector of
LANES = ROW_TILE = 64 lanes (one lane per output row of a weight tile; LLVM splits it into four
zmm or eight ymm registers), and a few intrinsics over it written in llvmlite IR. The kernels
below read like the scalar loops they replace, one tile of 64 rows at a time:

    acc = dot(isa, acc, weights, bcast_word(x, j))   # acc[r] += sum_c w[r, 4j + c] * x[4j + c]

`dot` is the only instruction-set-specific operation (`isa` is a compile-time literal, so each
path is its own compiled specialisation, keyed on it in numba's cache):
    ISA_AVX512_VNNI  vpdpbusd zmm (llvm.x86.avx512.vpdpbusd.512), 16 lanes per instruction
    ISA_AVX_VNNI     vpdpbusd ymm (llvm.x86.avx512.vpdpbusd.256, VEX-encodable), 8 lanes
    ISA_AVX2         vpmaddubsw + vpmaddwd against ones, 8 lanes
vpdpbusd multiplies unsigned bytes by signed bytes. Weights go on the unsigned side: W4 nibbles
are stored as u = q + 8 (0..15), W8 values as u = w + 128 (0..255), and the offsets come out
exactly once per block with the activation block sums: sum (u - o) x = sum u x - o * sum x.
vpmaddubsw saturates its int16 pair sums, which is harmless for nibbles (2 * 15 * 127) but not
for u = w + 128, so the AVX2 W8 dot multiplies |x| by w * sign(x) instead (llama.cpp's
`mul_sum_i8_pairs`), exact while w != -128 (matmul.py routes such a tensor to the portable
loop), and its bias is 0.

GEMV (M < 4 or the rows left over): per tile, per activation block, the int32 dot of the
block, then the block's integer correction and its float scaling in the portable loop's order.
GEMM (4 rows at a time): per tile and chunk of KCHUNK values along K, W4 nibbles are unpacked
once into an L1-resident byte buffer (the W8 layout, matmul_x86_layout.py, is already bytes),
then every block of 4 activation rows runs over it with 16 zmm int32 accumulators (4 rows x 64
lanes); float accumulators for all M rows stay in a per-tile buffer across chunks, so the order of the float
work per output is that of the GEMV, block by block, and results are bit-identical to it.

Numba caches each kernel per signature (the isa literal is part of it) and per target CPU
(name and feature string are in its cache key), so a cache written on another CPU is not
served here; `supported_isas` (matmul_x86_isa.py) asks numba's own codegen for the features
it compiles for, so NUMBA_CPU_NAME=generic yields only the portable path. numba does not notice
edits to the intrinsics in another file, which is why they live here beside the kernels (the
layout and the activation quantizer, matmul_x86_layout.py, call none of them; the peak-rate
kernel, matmul_x86_peak.py, does and so is not cached).
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

from harmony_ref.kernels.matmul_x86_isa import (
    ISA_AVX2,
    ISA_AVX512_VNNI,
    ISA_AVX_VNNI,
    ISA_FEATURES,
)

LANES = 64  # output rows per tile: matmul.ROW_TILE
STEP = 4 * LANES  # bytes of one 4-value step of a tile
KCHUNK = 256  # GEMM: K values per unpacked chunk (64 rows x 256 bytes = 16 KB, L1)
# GEMV: how far ahead of its loads each thread prefetches the weight stream (measured, cold
# 11008 x 4096 W4 g32: none 2.04 ms, 256 B 1.95, 1 KB 1.69, 2 KB 1.50, 4 KB 1.57, 8 KB 1.60;
# W8 and prefetcht1 instead of t0: within noise, 2.4-2.55 ms / 1.56-1.77 ms interleaved)
PREFETCH_BYTES = 2048
GEMM_ROWS = 4  # activation rows per GEMM micro-kernel call (16 zmm accumulators)
NIBBLE_OFFSET = 8
W8_OFFSET = 128


# ----------------------------------------------------------------------------------------------
# Tile vectors


class Vec(types.Type):
    """An LLVM vector of `count` lanes of `kind` ("i8", "i32", "f32")."""

    def __init__(self, kind: str, count: int):
        self.kind, self.count = kind, count
        super().__init__(name=f"Vec({kind} x {count})")


_IR_ELEM = {
    "i8": ir.IntType(8),
    "i16": ir.IntType(16),
    "i32": ir.IntType(32),
    "f32": ir.FloatType(),
}


@register_model(Vec)
class _VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, ir.VectorType(_IR_ELEM[fe_type.kind], fe_type.count))


BYTES = Vec("i8", STEP)  # 64 lanes x 4 bytes
INTS = Vec("i32", LANES)
FLOATS = Vec("f32", LANES)
_I32 = ir.IntType(32)


def _vty(kind, count):
    return ir.VectorType(_IR_ELEM[kind], count)


def _ptr(context, builder, arrty, arr, idx):
    """Address of arr.ravel()[idx] (C-contiguous arr)."""
    data = context.make_array(arrty)(context, builder, arr).data
    return builder.gep(data, [idx])


def _load(builder, ptr, vty):
    return builder.load(builder.bitcast(ptr, vty.as_pointer()), align=1)


def _splat(builder, val, count):
    vty = ir.VectorType(val.type, count)
    v = builder.insert_element(ir.Constant(vty, ir.Undefined), val, ir.Constant(_I32, 0))
    return builder.shuffle_vector(
        v, ir.Constant(vty, ir.Undefined), ir.Constant(_vty("i32", count), [0] * count)
    )


def _slice(builder, v, start, n):
    return builder.shuffle_vector(
        v,
        ir.Constant(v.type, ir.Undefined),
        ir.Constant(_vty("i32", n), list(range(start, start + n))),
    )


def _concat(builder, parts):
    while len(parts) > 1:
        joined = []
        for a, b in zip(parts[::2], parts[1::2]):
            n = 2 * a.type.count
            joined.append(builder.shuffle_vector(a, b, ir.Constant(_vty("i32", n), list(range(n)))))
        parts = joined
    return parts[0]


def _call(builder, name, ret, args):
    fnty = ir.FunctionType(ret, [a.type for a in args])
    fn = cgutils.get_or_insert_function(builder.module, fnty, name)
    return builder.call(fn, args)


def _scalar(context, builder, val, fromty, toty):
    return context.cast(builder, val, fromty, toty)


@intrinsic
def load_bytes(typingctx, arr, idx):
    """STEP bytes at arr.ravel()[idx:]: one 4-value step of a tile."""

    def codegen(context, builder, sig, args):
        return _load(builder, _ptr(context, builder, sig.args[0], *args), _vty("i8", STEP))

    return BYTES(arr, idx), codegen


@intrinsic
def store_bytes(typingctx, arr, idx, v):
    def codegen(context, builder, sig, args):
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
        builder.store(args[2], builder.bitcast(ptr, _vty("i8", STEP).as_pointer()), align=1)
        return context.get_dummy_value()

    return types.none(arr, idx, BYTES), codegen


@intrinsic
def prefetch(typingctx, arr, idx):
    """Hint the cache line of arr.ravel()[idx] into L1 (prefetcht0): the GEMV's weight stream
    runs ahead of the hardware prefetchers' reach otherwise."""

    def codegen(context, builder, sig, args):
        ptr = _ptr(context, builder, sig.args[0], *args)
        ptr = builder.bitcast(ptr, ir.IntType(8).as_pointer())
        _call(
            builder,
            "llvm.prefetch.p0",
            ir.VoidType(),
            [ptr, ir.Constant(_I32, 0), ir.Constant(_I32, 3), ir.Constant(_I32, 1)],
        )
        return context.get_dummy_value()

    return types.none(arr, idx), codegen


@intrinsic
def bcast_word(typingctx, arr, idx):
    """int32 arr[idx] (4 activation bytes) in every lane."""

    def codegen(context, builder, sig, args):
        word = builder.load(_ptr(context, builder, sig.args[0], *args))
        return builder.bitcast(_splat(builder, word, LANES), _vty("i8", STEP))

    return BYTES(arr, idx), codegen


@intrinsic
def low_nibbles(typingctx, v):
    def codegen(context, builder, sig, args):
        return builder.and_(args[0], ir.Constant(args[0].type, [15] * STEP))

    return BYTES(BYTES), codegen


@intrinsic
def high_nibbles(typingctx, v):
    def codegen(context, builder, sig, args):
        return builder.lshr(args[0], ir.Constant(args[0].type, [4] * STEP))

    return BYTES(BYTES), codegen


def _dot_pieces(builder, acc, u, s, width, piece_dot):
    """acc (LANES x i32) += 4-byte dots, `width` lanes at a time through piece_dot."""
    u32 = builder.bitcast(u, _vty("i32", LANES))
    s32 = builder.bitcast(s, _vty("i32", LANES))
    parts = [
        piece_dot(
            _slice(builder, acc, p, width),
            _slice(builder, u32, p, width),
            _slice(builder, s32, p, width),
        )
        for p in range(0, LANES, width)
    ]
    return _concat(builder, parts)


def _maddubs_pairs(builder, u8, s8):
    """8 x i32 lanes of (u8 . s8) over each 4 bytes, via vpmaddubsw + vpmaddwd (int16 pairs)."""
    pairs = _call(builder, "llvm.x86.avx2.pmadd.ub.sw", _vty("i16", 16), [u8, s8])
    ones = ir.Constant(_vty("i16", 16), [1] * 16)
    return _call(builder, "llvm.x86.avx2.pmadd.wd", _vty("i32", 8), [pairs, ones])


def _dot_codegen(isa: int, signed_weights: bool):
    def codegen(context, builder, sig, args):
        acc, u, s = args[1:]
        if isa == ISA_AVX512_VNNI:

            def piece(a, b, c):
                return _call(builder, "llvm.x86.avx512.vpdpbusd.512", _vty("i32", 16), [a, b, c])

            return _dot_pieces(builder, acc, u, s, 16, piece)
        if isa == ISA_AVX_VNNI:

            def piece(a, b, c):
                return _call(builder, "llvm.x86.avx512.vpdpbusd.256", _vty("i32", 8), [a, b, c])

            return _dot_pieces(builder, acc, u, s, 8, piece)

        def piece(a, b, c):
            b8 = builder.bitcast(b, _vty("i8", 32))
            c8 = builder.bitcast(c, _vty("i8", 32))
            if signed_weights:  # b = w + 128: multiply |x| by w * sign(x)
                w8 = builder.xor(b8, ir.Constant(b8.type, [0x80] * 32))
                b8 = _call(builder, "llvm.abs.v32i8", b8.type, [c8, ir.Constant(ir.IntType(1), 0)])
                c8 = _call(builder, "llvm.x86.avx2.psign.b", w8.type, [w8, c8])
            return builder.add(a, _maddubs_pairs(builder, b8, c8))

        return _dot_pieces(builder, acc, u, s, 8, piece)

    return codegen


def _isa_literal(isa):
    """The path an intrinsic is typed for, or None while numba tries non-literal types."""
    if not isinstance(isa, types.IntegerLiteral):
        return None
    if isa.literal_value not in ISA_FEATURES:
        raise numba.core.errors.TypingError(f"isa must be an x86 path, got {isa}")
    return isa.literal_value


@intrinsic
def dot_nibbles(typingctx, isa, acc, u, s):
    """acc[r] += sum_c u[r, c] * s[r, c]: u unsigned 0..15, s signed int8 (|s| <= 127)."""
    if _isa_literal(isa) is None:
        return None
    return INTS(isa, INTS, BYTES, BYTES), _dot_codegen(_isa_literal(isa), signed_weights=False)


@intrinsic
def dot_offset_bytes(typingctx, isa, acc, u, s):
    """acc[r] += sum_c (u[r, c] - bias) * s[r, c] + bias * sum_c s[r, c] where bias is
    `w8_bias(isa)`: u = w + 128 (0..255), s signed int8 (|s| <= 127)."""
    if _isa_literal(isa) is None:
        return None
    return INTS(isa, INTS, BYTES, BYTES), _dot_codegen(_isa_literal(isa), signed_weights=True)


@intrinsic
def w8_bias(typingctx, isa):
    """What `dot_offset_bytes` leaves in per weight: 128 (vpdpbusd on w + 128) or 0 (AVX2)."""
    if _isa_literal(isa) is None:
        return None
    bias = 0 if _isa_literal(isa) == ISA_AVX2 else W8_OFFSET

    def codegen(context, builder, sig, args):
        return ir.Constant(_I32, bias)

    return types.int32(isa), codegen


@intrinsic
def zero_ints(typingctx):
    def codegen(context, builder, sig, args):
        return ir.Constant(_vty("i32", LANES), None)

    return INTS(), codegen


@intrinsic
def zero_floats(typingctx):
    def codegen(context, builder, sig, args):
        return ir.Constant(_vty("f32", LANES), None)

    return FLOATS(), codegen


def widen_halves(builder, ptr):
    """LANES float16 values (uint16 bits) at `ptr` widened to float32: LLVM's fpext, one F16C
    vcvtph2ps per 16 on x86 (a CPU without F16C would need a runtime helper numba lacks)."""
    bits = _load(builder, ptr, _vty("i16", LANES))
    return builder.fpext(
        builder.bitcast(bits, ir.VectorType(ir.HalfType(), LANES)), _vty("f32", LANES)
    )


@intrinsic
def load_floats(typingctx, arr, idx):
    """LANES float32 values at arr.ravel()[idx:], from float32 or float16 (as uint16) storage."""
    half = arr.dtype == types.uint16
    if not half and arr.dtype != types.float32:
        raise numba.core.errors.TypingError(f"load_floats: float32 or uint16 array, got {arr}")

    def codegen(context, builder, sig, args):
        ptr = _ptr(context, builder, sig.args[0], *args)
        if not half:
            return _load(builder, ptr, _vty("f32", LANES))
        return widen_halves(builder, ptr)

    return FLOATS(arr, idx), codegen


@intrinsic
def store_floats(typingctx, arr, idx, v):
    def codegen(context, builder, sig, args):
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
        builder.store(args[2], builder.bitcast(ptr, _vty("f32", LANES).as_pointer()), align=1)
        return context.get_dummy_value()

    return types.none(arr, idx, FLOATS), codegen


@intrinsic
def load_int8_offset(typingctx, arr, idx, offset):
    """LANES int8 values at arr.ravel()[idx:], widened to int32, plus `offset`."""

    def codegen(context, builder, sig, args):
        v = _load(builder, _ptr(context, builder, sig.args[0], args[0], args[1]), _vty("i8", LANES))
        off = _scalar(context, builder, args[2], sig.args[2], types.int32)
        return builder.add(builder.sext(v, _vty("i32", LANES)), _splat(builder, off, LANES))

    return INTS(arr, idx, offset), codegen


@intrinsic
def minus_times(typingctx, d, zo, xsum):
    """d - zo * xsum, xsum an int32 scalar: a block's zero-point / offset correction."""

    def codegen(context, builder, sig, args):
        xs = _scalar(context, builder, args[2], sig.args[2], types.int32)
        return builder.sub(args[0], builder.mul(args[1], _splat(builder, xs, LANES)))

    return INTS(INTS, INTS, xsum), codegen


@intrinsic
def minus_scalar_times(typingctx, d, bias, xsum):
    """d - bias * xsum, both int32 scalars."""

    def codegen(context, builder, sig, args):
        b = _scalar(context, builder, args[1], sig.args[1], types.int32)
        xs = _scalar(context, builder, args[2], sig.args[2], types.int32)
        return builder.sub(args[0], _splat(builder, builder.mul(b, xs), LANES))

    return INTS(INTS, bias, xsum), codegen


@intrinsic
def add_scaled_w4(typingctx, facc, sc, xs, c):
    """facc + (sc * xs) * float(c): the portable W4 loop's operations in its order."""

    def codegen(context, builder, sig, args):
        xsv = _splat(builder, _scalar(context, builder, args[2], sig.args[2], types.float32), LANES)
        t = builder.fmul(builder.fmul(args[1], xsv), builder.sitofp(args[3], _vty("f32", LANES)))
        return builder.fadd(args[0], t)

    return FLOATS(FLOATS, FLOATS, xs, INTS), codegen


@intrinsic
def add_scaled_w8(typingctx, facc, xs, c):
    """facc + xs * float(c): the portable W8 loop's operations in its order."""

    def codegen(context, builder, sig, args):
        xsv = _splat(builder, _scalar(context, builder, args[1], sig.args[1], types.float32), LANES)
        return builder.fadd(args[0], builder.fmul(xsv, builder.sitofp(args[2], _vty("f32", LANES))))

    return FLOATS(FLOATS, xs, INTS), codegen


@intrinsic
def add_squares(typingctx, acc, v):
    """acc + v * v, lane by lane, without fast-math flags: LLVM keeps each lane's order."""

    def codegen(context, builder, sig, args):
        return builder.fadd(args[0], builder.fmul(args[1], args[1]))

    return FLOATS(FLOATS, FLOATS), codegen


@intrinsic
def add_floats(typingctx, a, b):
    """a + b, lane by lane, without fast-math flags."""

    def codegen(context, builder, sig, args):
        return builder.fadd(*args)

    return FLOATS(FLOATS, FLOATS), codegen


@intrinsic
def lane_sum(typingctx, v):
    """The LANES lanes' sum as float32 in one fixed pairwise order (halves added until one
    lane is left), the same bits on every target that lowers the vector."""

    def codegen(context, builder, sig, args):
        v, n = args[0], LANES
        while n > 1:
            n //= 2
            v = builder.fadd(_slice(builder, v, 0, n), _slice(builder, v, n, n))
        return builder.extract_element(v, ir.Constant(_I32, 0))

    return types.float32(FLOATS), codegen


@intrinsic
def times(typingctx, a, b):
    def codegen(context, builder, sig, args):
        return builder.fmul(*args)

    return FLOATS(FLOATS, FLOATS), codegen


@numba.njit(parallel=True, cache=True)
def _w4_gemv(isa, xw, xs, xsum, data, scale, zp, group_size, block):
    """y (M, T * LANES) for x words xw (M, K / 4) int32; one activation row at a time."""
    numba.literally(isa)
    m = xw.shape[0]
    tiles = data.shape[0]
    n_groups = xw.shape[1] * 4 // group_size
    per_group = group_size // block
    steps = block // 8
    y = np.empty((m, tiles * LANES), dtype=np.float32)
    last = data.shape[1] - 1
    for t in numba.prange(tiles):
        dt = data[t]
        for i in range(m):
            xr = xw[i]
            facc = zero_floats()
            for g in range(n_groups):
                sc = load_floats(scale[t], g * LANES)
                zo = load_int8_offset(zp[t], g * LANES, NIBBLE_OFFSET)
                for b in range(g * per_group, (g + 1) * per_group):
                    acc = zero_ints()
                    for j in range(b * steps, (b + 1) * steps):
                        for c in range(0, STEP, 64):
                            prefetch(dt, min(j * STEP + PREFETCH_BYTES + c, last))
                        w = load_bytes(dt, j * STEP)
                        acc = dot_nibbles(isa, acc, low_nibbles(w), bcast_word(xr, 2 * j))
                        acc = dot_nibbles(isa, acc, high_nibbles(w), bcast_word(xr, 2 * j + 1))
                    facc = add_scaled_w4(facc, sc, xs[i, b], minus_times(acc, zo, xsum[i, b]))
            store_floats(y[i], t * LANES, facc)
    return y


@numba.njit(parallel=True, cache=True)
def _w4_gemm(isa, xw, xs, xsum, data, scale, zp, group_size, block):
    """y (M, T * LANES) for M a multiple of GEMM_ROWS; bit-identical to `_w4_gemv` row by row."""
    numba.literally(isa)
    m = xw.shape[0]
    k = xw.shape[1] * 4
    tiles = data.shape[0]
    per_group = group_size // block
    chunk = max(block, KCHUNK // block * block)
    y = np.empty((m, tiles * LANES), dtype=np.float32)
    for t in numba.prange(tiles):
        dt, st, zt = data[t], scale[t], zp[t]
        unpacked = np.empty(chunk * LANES, dtype=np.uint8)  # the chunk's nibbles as bytes
        facc = np.zeros((m, LANES), dtype=np.float32)
        for k0 in range(0, k, chunk):
            k1 = min(k, k0 + chunk)
            for j in range(k0 // 8, k1 // 8):
                w = load_bytes(dt, j * STEP)
                q = 2 * (j - k0 // 8)
                store_bytes(unpacked, q * STEP, low_nibbles(w))
                store_bytes(unpacked, (q + 1) * STEP, high_nibbles(w))
            for i in range(0, m, GEMM_ROWS):
                x0, x1, x2, x3 = xw[i], xw[i + 1], xw[i + 2], xw[i + 3]
                for b in range(k0 // block, k1 // block):
                    a0, a1, a2, a3 = zero_ints(), zero_ints(), zero_ints(), zero_ints()
                    for j in range(b * block // 4, (b + 1) * block // 4):
                        w = load_bytes(unpacked, (j - k0 // 4) * STEP)
                        a0 = dot_nibbles(isa, a0, w, bcast_word(x0, j))
                        a1 = dot_nibbles(isa, a1, w, bcast_word(x1, j))
                        a2 = dot_nibbles(isa, a2, w, bcast_word(x2, j))
                        a3 = dot_nibbles(isa, a3, w, bcast_word(x3, j))
                    g = b // per_group
                    sc = load_floats(st, g * LANES)
                    zo = load_int8_offset(zt, g * LANES, NIBBLE_OFFSET)
                    for r, a in ((0, a0), (1, a1), (2, a2), (3, a3)):
                        f = facc[i + r]
                        c = minus_times(a, zo, xsum[i + r, b])
                        store_floats(f, 0, add_scaled_w4(load_floats(f, 0), sc, xs[i + r, b], c))
        for i in range(m):
            store_floats(y[i], t * LANES, load_floats(facc[i], 0))
    return y


@numba.njit(parallel=True, cache=True)
def _w8_gemv(isa, xw, xs, xsum, data, scale, block):
    """y (M, T * LANES) for x words xw (M, K / 4) int32; one activation row at a time."""
    numba.literally(isa)
    m = xw.shape[0]
    tiles = data.shape[0]
    n_blocks = xw.shape[1] * 4 // block
    steps = block // 4
    bias = w8_bias(isa)
    last = data.shape[1] - 1
    y = np.empty((m, tiles * LANES), dtype=np.float32)
    for t in numba.prange(tiles):
        dt = data[t]
        for i in range(m):
            xr = xw[i]
            facc = zero_floats()
            for b in range(n_blocks):
                acc = zero_ints()
                for j in range(b * steps, (b + 1) * steps):
                    for c in range(0, STEP, 64):
                        prefetch(dt, min(j * STEP + PREFETCH_BYTES + c, last))
                    acc = dot_offset_bytes(isa, acc, load_bytes(dt, j * STEP), bcast_word(xr, j))
                facc = add_scaled_w8(facc, xs[i, b], minus_scalar_times(acc, bias, xsum[i, b]))
            store_floats(y[i], t * LANES, times(facc, load_floats(scale[t], 0)))
    return y


@numba.njit(parallel=True, cache=True)
def _w8_gemm(isa, xw, xs, xsum, data, scale, block):
    """y (M, T * LANES) for M a multiple of GEMM_ROWS; bit-identical to `_w8_gemv` row by row."""
    numba.literally(isa)
    m = xw.shape[0]
    k = xw.shape[1] * 4
    tiles = data.shape[0]
    chunk = max(block, KCHUNK // block * block)
    bias = w8_bias(isa)
    y = np.empty((m, tiles * LANES), dtype=np.float32)
    for t in numba.prange(tiles):
        dt = data[t]
        facc = np.zeros((m, LANES), dtype=np.float32)
        for k0 in range(0, k, chunk):
            k1 = min(k, k0 + chunk)
            for i in range(0, m, GEMM_ROWS):
                x0, x1, x2, x3 = xw[i], xw[i + 1], xw[i + 2], xw[i + 3]
                for b in range(k0 // block, k1 // block):
                    a0, a1, a2, a3 = zero_ints(), zero_ints(), zero_ints(), zero_ints()
                    for j in range(b * block // 4, (b + 1) * block // 4):
                        w = load_bytes(dt, j * STEP)
                        a0 = dot_offset_bytes(isa, a0, w, bcast_word(x0, j))
                        a1 = dot_offset_bytes(isa, a1, w, bcast_word(x1, j))
                        a2 = dot_offset_bytes(isa, a2, w, bcast_word(x2, j))
                        a3 = dot_offset_bytes(isa, a3, w, bcast_word(x3, j))
                    for r, a in ((0, a0), (1, a1), (2, a2), (3, a3)):
                        f = facc[i + r]
                        c = minus_scalar_times(a, bias, xsum[i + r, b])
                        store_floats(f, 0, add_scaled_w8(load_floats(f, 0), xs[i + r, b], c))
        sc = load_floats(scale[t], 0)
        for i in range(m):
            store_floats(y[i], t * LANES, times(load_floats(facc[i], 0), sc))
    return y


@intrinsic
def store_ints(typingctx, arr, idx, v):
    def codegen(context, builder, sig, args):
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
        builder.store(args[2], builder.bitcast(ptr, _vty("i32", LANES).as_pointer()), align=1)
        return context.get_dummy_value()

    return types.none(arr, idx, INTS), codegen
