"""Decode attention (one new query token) and causal prefill attention (T new query tokens)
against a KV cache, grouped-query heads.

    cache = KVCache(max_context, n_kv_heads, head_dim, dtype="fp16" | "int8")
    cache.append(k, v)                 k, v: (n_kv_heads, head_dim) or (T, n_kv_heads, head_dim)
    out = decode_attention(q, cache)   q: (n_heads, head_dim) -> (n_heads, head_dim) float32
    out = prefill_attention(q, cache)  q: (T, n_heads, head_dim), the cache's last T tokens
                                       -> (T, n_heads, head_dim); query t sees tokens <= L - T + t
    out = window_prefill_attention(q, k, v, window)   the same over explicit float32 k, v
                                       (L, n_kv_heads, head_dim), each query seeing only the
                                       last `window` keys up to itself (sliding-window layers)

A decoder's decode step over an fp16 cache runs `decode_step_attention`: its q|k|v row's head
norms, rope, q scale, the float16 store into the slot `cache.claim_slot()` gives, and the
attention, in one call (the same kernels as the calls one by one; five Python calls a layer
fewer). Its attention runs on the calling thread for a short context, where a parallel launch
costs more than it splits; from DECODE_PARALLEL_MIN_LENGTH cached tokens (measured) every
(kv head, span of slots) pair runs in parallel and the spans' softmax sums are merged by their
largest scores (flash-decoding's split), so one kv head splits between threads too.

A sliding-window layer's cache, KVCache(..., window=W), keeps only the last W tokens: a ring of
W slots, position p in slot p % W. Decode attention reads the valid slots in slot order (softmax
and the weighted sum do not depend on the order of the keys); `ordered_kv` gives them in position
order for a prefill that continues from the cache.

Query head h reads kv head h // (n_heads // n_kv_heads). softmax(q . k / sqrt(head_dim)) is made
stable by subtracting the row maximum before exp.

Storage (preallocated to max_context, token-major so append writes one contiguous slab):
    fp16:  k, v  (max_context, n_kv_heads, head_dim) float16
    int8:  k, v  (max_context, n_kv_heads, head_dim) int8, quantized on append with one symmetric
           scale per (token, kv head): s = max|row| / 127, q = rint(row / s)
           k_scale, v_scale  (max_context, n_kv_heads) float32
`nbytes` counts every preallocated array (what the cache costs in memory, used or not).

Numba has no float16 type, so the kernel reads fp16 rows as uint16 bits and widens them: with
the CPU's own conversion (F16C) LANES values a load where head_dim is a multiple of LANES, else
bit moves plus one exact subtraction for subnormals (`_fp16_row_to_f32`, `_widen_fp16_row`);
both exactly as NumPy's astype(float32) but for a signalling NaN, which the CPU returns quiet
(`_widen_block`). Softmax's exp is norm.py's vectorisable `exp32`, as in prefill. The kernels
read each cached row once for all the query heads that share it: where head_dim is a multiple of
LANES, SUMS rows at a time widened into a float32 block (INT8 levels times their row's scale)
that every head of the group reads, their q . k products summed SUMS at a time by one
transposing tree instead of a horizontal sum per dot (`_block_scores`); elsewhere a row at a
time, INT8 rows widened inside the dot / axpy loops and scaled once per row (with a horizontal
sum per dot that was 1.5x faster at 4096 tokens than widening into a buffer first). Measured,
Intel Xeon, 2 threads, INT8 cache, SmolLM2's 9 x 64 / 3 kv heads at 1024 cached tokens: the
blocks took the parallel kernel from 139-143 to 75-77 us and the serial from 130-132 to 103-107;
Gemma 3's 4 x 256 / 1 from 102-125 to 87-92 and 148 to 130-151 (two interleaved runs).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from harmony_ref.kernels._checks import float32_array
from harmony_ref.kernels.matmul_x86 import (
    FLOATS,
    LANES,
    _call,
    _ptr,
    _slice,
    _splat,
    _vty,
    load_floats,
    store_floats,
    times,
    widen_halves,
    zero_floats,
)
from harmony_ref.kernels.matmul_x86_isa import target_features
from harmony_ref.kernels.norm import (
    PARALLEL_MIN_ROWS,
    _bits_as_float32,
    _fixed_sum,
    exp32,
    rms_norm_heads_rows,
)
from harmony_ref.kernels.rope import rope_rows
from harmony_ref.quant.int8 import symmetric_int8_scale
from harmony_ref.quant.kv import KV_DTYPES, KV_INT8_MAX_LEVEL


class KVCache:
    """One layer's K and V cache, preallocated to `max_context` tokens (or to the last `window`
    tokens: a ring, see the module docstring). `length` is the number of valid slots, `pos` the
    number of tokens appended since the last reset (the next token's position)."""

    def __init__(
        self, max_context: int, n_kv_heads: int, head_dim: int, dtype: str = "fp16", window: int = 0
    ):
        for name, value in (
            ("max_context", max_context),
            ("n_kv_heads", n_kv_heads),
            ("head_dim", head_dim),
        ):
            if not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"KVCache {name} must be a positive integer, got {value!r}")
        if not isinstance(window, (int, np.integer)) or window < 0:
            raise ValueError(f"KVCache window must be an integer >= 0, got {window!r}")
        if dtype not in KV_DTYPES:
            raise ValueError(f"KVCache dtype must be one of {KV_DTYPES}, got {dtype!r}")
        self.window = int(window) if window and window < max_context else 0
        self.max_context = self.window or int(max_context)
        self.n_kv_heads = int(n_kv_heads)
        self.head_dim = int(head_dim)
        self.dtype = dtype
        shape = (self.max_context, self.n_kv_heads, self.head_dim)
        store = np.float16 if dtype == "fp16" else np.int8
        self.k = np.zeros(shape, dtype=store)
        self.v = np.zeros(shape, dtype=store)
        if dtype == "int8":
            self.k_scale = np.zeros(shape[:2], dtype=np.float32)
            self.v_scale = np.zeros(shape[:2], dtype=np.float32)
        else:
            self.k_scale = self.v_scale = None
        self.length = 0
        self.pos = 0

    def reset(self) -> None:
        self.length = self.pos = 0

    @property
    def nbytes(self) -> int:
        scales = 0 if self.k_scale is None else self.k_scale.nbytes + self.v_scale.nbytes
        return self.k.nbytes + self.v.nbytes + scales

    def bytes_read(self) -> int:
        """Bytes one decode step reads from the cache at the current length."""
        return self.nbytes * self.length // self.max_context

    def append(self, k, v) -> None:
        """Add one token (n_kv_heads, head_dim) or T tokens (T, n_kv_heads, head_dim)."""
        per_token = (self.n_kv_heads, self.head_dim)
        k = float32_array(k, "k", (2, 3))
        v = float32_array(v, "v", (2, 3))
        k = k[None] if k.ndim == 2 else k
        v = v[None] if v.ndim == 2 else v
        if k.shape[1:] != per_token or v.shape != k.shape:
            raise ValueError(
                f"append expects k and v of shape (T, {self.n_kv_heads}, {self.head_dim}) or "
                f"({self.n_kv_heads}, {self.head_dim}), got k {k.shape}, v {v.shape}"
            )
        if not self.window and self.length + k.shape[0] > self.max_context:
            raise ValueError(
                f"KVCache full: {self.length} + {k.shape[0]} tokens > max_context {self.max_context}"
            )
        if self.dtype == "fp16":
            if (
                np.abs(k).max() > np.finfo(np.float16).max
                or np.abs(v).max() > np.finfo(np.float16).max
            ):
                raise ValueError("k/v values overflow float16 (|x| > 65504); use dtype='int8'")
        self.store(k, v)

    def claim_slot(self) -> tuple[int, int]:
        """One token's slot, its bookkeeping advanced as `store` advances it for one token: (the
        slot its k and v go to, the valid length with it). A decode step that writes the row
        itself (decode_step_attention) claims it here."""
        if not self.window and self.length >= self.max_context:
            raise ValueError(
                f"KVCache full: {self.length} + 1 tokens > max_context {self.max_context}"
            )
        slot, _ = self._advance(1)
        return slot, self.length

    def _advance(self, t: int) -> tuple[int, int]:
        """pos and length moved on by t stored tokens; returns (the first slot they go to, how
        many of them are kept): a ring keeps the last min(t, window), in slots consecutive
        modulo the window, from that slot; a linear cache all t, from its old length."""
        if self.window:
            keep = min(t, self.max_context)
            first = (self.pos + t - keep) % self.max_context
            self.pos += t
            self.length = min(self.pos, self.max_context)
            return first, keep
        first = self.length
        self.length += t
        self.pos = self.length
        return first, t

    def store(self, k, v) -> None:
        """append() without its checks, for a runtime that validated shapes once at load:
        k, v (T, n_kv_heads, head_dim) float32, values finite (fp16 overflow is not checked)."""
        t = k.shape[0]
        first, keep = self._advance(t)
        if self.window:  # the ring keeps the last `window` of them
            k, v = k[t - keep :], v[t - keep :]
            slots = (first + np.arange(keep)) % self.max_context
        else:
            slots = slice(first, first + t)
        if self.dtype == "fp16" and k.shape[0] >= PARALLEL_MIN_ROWS:  # prefill: rows in parallel
            store_fp16_rows_par(
                _flat(k), self.k.view(np.uint16).reshape(self.max_context, -1), first
            )
            store_fp16_rows_par(
                _flat(v), self.v.view(np.uint16).reshape(self.max_context, -1), first
            )
        elif self.dtype == "fp16":
            self.k[slots] = k
            self.v[slots] = v
        else:
            self.k[slots], self.k_scale[slots] = quantize_kv_rows(k)
            self.v[slots], self.v_scale[slots] = quantize_kv_rows(v)

    def ordered_kv(self):
        """The valid tokens' K and V as float32 (length, n_kv_heads, head_dim), oldest first."""
        k, v = cached_kv(self)
        if self.window and self.pos > self.max_context:
            order = (self.pos + np.arange(self.max_context)) % self.max_context
            k, v = k[order], v[order]
        return k, v

    def roundtrip(self, k, v):
        """k, v (T, n_kv_heads, head_dim) float32 as this cache would give them back."""
        if self.dtype == "fp16" and k.shape[0] >= PARALLEL_MIN_ROWS:
            return fp16_roundtrip_rows_par(_flat(k)).reshape(k.shape), fp16_roundtrip_rows_par(
                _flat(v)
            ).reshape(v.shape)
        if self.dtype == "fp16":
            return k.astype(np.float16).astype(np.float32), v.astype(np.float16).astype(np.float32)
        (qk, sk), (qv, sv) = quantize_kv_rows(k), quantize_kv_rows(v)
        return qk.astype(np.float32) * sk[:, :, None], qv.astype(np.float32) * sv[:, :, None]


def quantize_kv_rows(x: np.ndarray):
    """(T, H, D) float32 -> int8 (T, H, D) and float32 scale (T, H), symmetric per row."""
    scale = symmetric_int8_scale(np.abs(x).max(axis=2))  # (T, H)
    safe = np.where(scale == 0, np.float32(1), scale)[:, :, None]
    q = np.clip(np.rint(x / safe), -KV_INT8_MAX_LEVEL, KV_INT8_MAX_LEVEL).astype(np.int8)
    return q, scale


def _check_query(q, cache: KVCache) -> np.ndarray:
    if not isinstance(cache, KVCache):
        raise ValueError(f"cache must be a KVCache, got {type(cache).__name__}")
    q = float32_array(q, "q", (2,))
    n_heads, head_dim = q.shape
    if head_dim != cache.head_dim:
        raise ValueError(f"q has shape {q.shape} but the cache has head_dim {cache.head_dim}")
    if n_heads % cache.n_kv_heads != 0:
        raise ValueError(
            f"q has {n_heads} heads, not a multiple of the cache's n_kv_heads {cache.n_kv_heads}"
        )
    if cache.length == 0:
        raise ValueError("decode_attention on an empty KVCache (append at least one token)")
    return q


# ----------------------------------------------------------------------------------------------
# CPU code reference


def cached_kv_ref(cache: KVCache):
    """The cache's first `length` tokens as float32 (L, n_kv_heads, head_dim) K and V."""
    n = cache.length
    if cache.dtype == "fp16":
        return cache.k[:n].astype(np.float32), cache.v[:n].astype(np.float32)
    k = cache.k[:n].astype(np.float32) * cache.k_scale[:n, :, None]
    v = cache.v[:n].astype(np.float32) * cache.v_scale[:n, :, None]
    return k, v


def cached_kv(cache: KVCache):
    """`cached_kv_ref` (its twin: the same values exactly), an fp16 cache of PARALLEL_MIN_ROWS
    tokens or more widened by `widen_fp16_rows_par` (prefill)."""
    n = cache.length
    if cache.dtype != "fp16" or n < PARALLEL_MIN_ROWS:
        return cached_kv_ref(cache)
    width = cache.n_kv_heads * cache.head_dim
    shape = (n, cache.n_kv_heads, cache.head_dim)
    k = widen_fp16_rows_par(cache.k[:n].view(np.uint16).reshape(n, width))
    v = widen_fp16_rows_par(cache.v[:n].view(np.uint16).reshape(n, width))
    return k.reshape(shape), v.reshape(shape)


def decode_attention_ref(q, cache: KVCache) -> np.ndarray:
    q = _check_query(q, cache)
    n_heads, head_dim = q.shape
    k, v = cached_kv_ref(cache)  # (L, Hkv, D)
    group = n_heads // cache.n_kv_heads
    k = np.repeat(k, group, axis=1)  # (L, H, D): query head h reads kv head h // group
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("hd,lhd->hl", q, k) / np.float32(math.sqrt(head_dim))  # (H, L)
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return np.einsum("hl,lhd->hd", p, v).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# Fast path

_F16_EXP_MASK = 0x7C00
_F16_TO_F32_EXP_BIAS = (127 - 15) << 23
_F16_INF_NAN_BIAS = 2 * _F16_TO_F32_EXP_BIAS  # exponent 31 must land on 255
_F16_SUBNORMAL_BIAS = (127 - 14) << 23  # exponent 0: build 2^-14 * (1 + m / 1024) ...
_F16_SUBNORMAL_MAGIC = np.float32(2.0**-14)  # ... and subtract 2^-14, leaving m * 2^-24 exactly


@numba.njit(inline="always")
def _f16_to_f32(h):
    """The float32 of float16 bits h (uint32): bits moved and rebiased, then one exact
    subtraction for subnormals and the sign; branch-free (selects, and a bitcast LLVM keeps in
    vector registers) so that a loop over it vectorises; exact for every bit pattern."""
    e = h & np.uint32(_F16_EXP_MASK)
    bias = np.uint32(_F16_TO_F32_EXP_BIAS)
    bias = np.uint32(_F16_INF_NAN_BIAS) if e == np.uint32(_F16_EXP_MASK) else bias
    bias = np.uint32(_F16_SUBNORMAL_BIAS) if e == 0 else bias
    f = _bits_as_float32(np.int32(((h & np.uint32(0x7FFF)) << np.uint32(13)) + bias))
    f = f - _F16_SUBNORMAL_MAGIC if e == 0 else f
    return -f if h & np.uint32(0x8000) else f


@numba.njit(inline="always")
def _fp16_row_to_f32(src, out):
    """float16 bit patterns `src` (D,) uint16 -> `out` (D,) float32 (`_f16_to_f32`)."""
    for j in range(src.shape[0]):
        out[j] = _f16_to_f32(np.uint32(src[j]))
    return out


# float32 -> float16 bits, round to nearest even (F. Giesen's float_to_half_fast3_rtne, in
# selects so that a row's loop vectorises): NumPy's astype(float16) bit for bit on every
# non-NaN value (|x| >= 65520 -> inf), NaN -> the quiet NaN 0x7E00 (NumPy keeps payload bits).
_F32_INF = 255 << 23
_F32_F16_OVERFLOW = (127 + 16) << 23  # 65536.0: at and above it only inf / NaN are left
_F32_F16_NORMAL = 113 << 23  # 2^-14, the smallest normal float16
_F16_DENORM_MAGIC = ((127 - 15) + (23 - 10) + 1) << 23  # 0.5 as float32: aligns 10 bits
_F16_REBIAS = ((15 - 127) << 23) + 0xFFF  # exponent rebias and rounding bias part 1


@intrinsic
def _float32_bits(typingctx, v):
    """float32 -> its int32 bits (`norm._bits_as_float32`'s inverse)."""

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@numba.njit(inline="always")
def _fp16_bits(x):
    u = np.int64(_float32_bits(x)) & 0xFFFFFFFF
    sign = u & 0x80000000
    a = u ^ sign
    big = 0x7E00 if a > _F32_INF else 0x7C00
    sub = np.int64(_float32_bits(_bits_as_float32(np.int32(a)) + np.float32(0.5)))
    sub = sub - _F16_DENORM_MAGIC
    normal = (a + _F16_REBIAS + ((a >> 13) & 1)) >> 13
    o = big if a >= _F32_F16_OVERFLOW else (sub if a < _F32_F16_NORMAL else normal)
    return np.uint16(o | (sign >> 16))


@numba.njit(parallel=True, cache=True)
def store_fp16_rows_par(src, dst, first):
    """dst[(first + i) % S] = src[i] as float16 bits, src (R, W) float32, dst (S, W) uint16 (a
    KV cache's slots, a ring's wrapping): prefill's store, rows in parallel. Twin: NumPy's
    `cache.k[slots] = k` (astype float16), which decode keeps (one row)."""
    slots = dst.shape[0]
    for i in numba.prange(src.shape[0]):
        r = (first + i) % slots
        for j in range(src.shape[1]):
            dst[r, j] = _fp16_bits(src[i, j])


@numba.njit(parallel=True, cache=True)
def fp16_roundtrip_rows_par(src):
    """src (R, W) float32 rounded to float16 and widened back: x.astype(float16).astype(float32)
    exactly, rows in parallel (prefill's keys as the cache will give them back)."""
    rows, w = src.shape
    out = np.empty((rows, w), dtype=np.float32)
    for i in numba.prange(rows):
        half = np.empty(w, dtype=np.uint16)
        for j in range(w):
            half[j] = _fp16_bits(src[i, j])
        row = out[i]
        _fp16_row_to_f32(half, row)
    return out


@numba.njit(parallel=True, cache=True)
def widen_fp16_rows_par(src):
    """src (R, W) float16 bits (uint16) -> float32 (R, W), rows in parallel: astype(float32)."""
    rows, w = src.shape
    out = np.empty((rows, w), dtype=np.float32)
    for i in numba.prange(rows):
        row = out[i]
        _fp16_row_to_f32(src[i], row)
    return out


def _flat(x: np.ndarray) -> np.ndarray:
    """(T, Hkv, hd) -> (T, Hkv hd), a view when the last two axes are contiguous (q|k|v's k)."""
    return x.reshape(x.shape[0], -1)


# The CPU widens float16 itself (F16C: every x86-64 CPU since 2012, and every one harmony-ref's
# x86 matmul paths run on); without it (baseline x86-64) LLVM would call a runtime helper numba
# does not link, so decode attention keeps the bit moves there.
FP16_WIDEN_IN_HARDWARE = "f16c" in target_features()


@intrinsic
def _load_cache_floats(typingctx, cache, idx):
    """LANES float32 values of an fp16 cache (uint16 bits, C-contiguous) from flat offset idx,
    as load_floats widens them; zeros for an int8 cache (`_attend_span` types its rows on
    the fp16 branch too, but never runs them there)."""
    fp16 = cache.dtype == types.uint16
    if fp16 and cache.layout != "C":
        raise numba.core.errors.TypingError(f"an fp16 cache must be C-contiguous, got {cache}")

    def codegen(context, builder, sig, args):
        if not fp16 or not FP16_WIDEN_IN_HARDWARE:  # never run: `_attend_span` branches
            return ir.Constant(_vty("f32", LANES), None)
        return widen_halves(builder, _ptr(context, builder, sig.args[0], *args))

    return FLOATS(cache, idx), codegen


@numba.njit(inline="always")
def _widen_fp16_row(cache, t, kh, out):
    """Row (t, kh) of an fp16 cache (S, Hkv, D) as uint16 bits -> `out` (D,) float32 by
    `_f16_to_f32`'s bit moves, indexed in place: the row-at-a-time path's widening, where D is
    not a multiple of LANES or the CPU has no F16C (the blocked path widens by the CPU's own
    conversion, `_widen_block`). Measured (Intel Xeon, 1 thread, SmolLM2's 3 kv heads x 64
    cached tokens): the step took 23 us with each row sliced per token and widened through two
    views of one buffer (uint32 written, float32 read back), 8 us by the CPU's conversion."""
    for j in range(out.shape[0]):
        out[j] = _f16_to_f32(np.uint32(cache[t, kh, j]))
    return out


@numba.njit(inline="always", fastmath=True)
def _span_scores(q, k, k_scale, t0, t1, is_int8, kh, row, scores):
    """scores[g, t - t0] = q . k / sqrt(D) of each query head g reading kv head `kh`, for slots
    t0 .. t1 - 1 (`row`: a (D,) float32 buffer for an fp16 key)."""
    n_heads, d = q.shape
    group = n_heads // k.shape[1]
    inv_sqrt_d = np.float32(1.0 / math.sqrt(d))
    for t in range(t0, t1):
        if is_int8:
            s = k_scale[t, kh] * inv_sqrt_d
            for g in range(group):
                acc = np.float32(0.0)
                for j in range(d):
                    acc += q[kh * group + g, j] * np.float32(k[t, kh, j])
                scores[g, t - t0] = acc * s
        else:
            _widen_fp16_row(k, t, kh, row)
            for g in range(group):
                acc = np.float32(0.0)
                for j in range(d):
                    acc += q[kh * group + g, j] * row[j]
                scores[g, t - t0] = acc * inv_sqrt_d


@numba.njit(inline="always", fastmath=True)
def _exp_scores(scores, g, n):
    """scores[g, :n] -> exp(score - their largest), in place: (that largest, the exps' sum,
    summed in norm.py's `_fixed_sum` order: a fastmath sum here let LLVM choose the order per
    compile, and `_prefill_attention` loaded from Numba's cache gave other last bits than the
    same code compiled in the process, 1,832 of 23,040 outputs, whole rows, up to 1.5e-7)."""
    top = scores[g, 0]
    for t in range(1, n):
        top = max(top, scores[g, t])
    for t in range(n):
        scores[g, t] = exp32(scores[g, t] - top)
    return top, _fixed_sum(scores, g, 0, n, False)


@numba.njit(inline="always", fastmath=True)
def _add_weighted_values(v, v_scale, t0, t1, is_int8, kh, scores, row, out, h0):
    """out[h0 + g] += sum over slots t0 .. t1 - 1 of scores[g, t - t0] * v[t, kh]."""
    group, d = scores.shape[0], row.shape[0]
    for t in range(t0, t1):
        if is_int8:
            s = v_scale[t, kh]
            for g in range(group):
                p = scores[g, t - t0] * s
                for j in range(d):
                    out[h0 + g, j] += p * np.float32(v[t, kh, j])
        else:
            _widen_fp16_row(v, t, kh, row)
            for g in range(group):
                p = scores[g, t - t0]
                for j in range(d):
                    out[h0 + g, j] += p * row[j]


# The blocked path (head_dim a multiple of LANES; fp16 where the CPU widens float16 itself, and
# INT8): a block of SUMS cached rows is widened into a float32 buffer once for every query head
# of its kv head; each head's q . k products are folded to SUMS lanes and stored, and SUMS of those are
# summed by one transposing tree (`store_sums`): no horizontal sum per dot. Measured (Intel
# Xeon, AVX-512, 1 thread, serial kernel, fp16, cached tokens 256 / 1024): SmolLM2's 9 x 64 / 3 kv
# heads 38.1 / 141.6 -> 22.5 / 80.7 us, Gemma 3's 4 x 256 / 1 41.6 / 159.2 -> 36.8 / 105.4,
# Qwen3's 16 x 128 / 8 113.3 / 693.6 -> 70.6 / 536.7; compiled for Zen 3 (AVX2) on the same
# CPU 31.6 / 129.6 -> 20.6 / 78.7, 35.9 / 146.4 -> 32.7 / 127.8, 106.9 / 722.1 -> 82.9 /
# 516.5. (Tiles of 4 heads sharing each widened row in registers ran SmolLM2 and Gemma 3
# faster on AVX-512, 61.4 and 77.3 us at 1024, but spilled on AVX2: Qwen3 829 us there.)
SUMS = 16


def _fold(builder, v):
    """LANES lanes -> SUMS: lane i of the result is (v[i] + v[i + 32]) + (v[i + 16] + v[i + 48])."""
    half = LANES // 2
    a = builder.fadd(_slice(builder, v, 0, half), _slice(builder, v, half, half))
    return builder.fadd(_slice(builder, a, 0, SUMS), _slice(builder, a, SUMS, half - SUMS))


@intrinsic
def store_folded(typingctx, buf, idx, v):
    """buf.ravel()[idx: idx + SUMS] = the LANES-lane vector v folded to SUMS lanes (`_fold`)."""

    def codegen(context, builder, sig, args):
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
        vty = _vty("f32", SUMS).as_pointer()
        builder.store(_fold(builder, args[2]), builder.bitcast(ptr, vty), align=4)
        return context.get_dummy_value()

    return types.none(buf, idx, FLOATS), codegen


def _halve_pair(builder, a, b, seg):
    """Two SUMS-lane vectors, each SUMS / seg segments of `seg` lanes -> one of 2 SUMS / seg
    segments of seg / 2 lanes: each segment's low half plus its high half, a's then b's."""
    h = seg // 2
    lo = [g * seg + i for g in range(SUMS // seg) for i in range(h)]
    hi = [g * seg + h + i for g in range(SUMS // seg) for i in range(h)]
    mask = _vty("i32", SUMS)
    x = builder.shuffle_vector(a, b, ir.Constant(mask, lo + [SUMS + i for i in lo]))
    y = builder.shuffle_vector(a, b, ir.Constant(mask, hi + [SUMS + i for i in hi]))
    return builder.fadd(x, y)


@intrinsic
def store_sums(typingctx, buf, idx, scale, out, oidx):
    """out.ravel()[oidx + i] = scale * the sum of buf.ravel()[idx + SUMS i: idx + SUMS (i + 1)],
    i < SUMS: SUMS sums in one transposing tree of shuffles and adds (four levels), not SUMS
    horizontal sums."""

    def codegen(context, builder, sig, args):
        base = _ptr(context, builder, sig.args[0], args[0], args[1])
        vty = _vty("f32", SUMS)
        vs = [
            builder.load(
                builder.bitcast(builder.gep(base, [ir.Constant(ir.IntType(64), SUMS * i)]),
                                vty.as_pointer()),
                align=4,
            )
            for i in range(SUMS)
        ]  # fmt: skip
        seg = SUMS
        while len(vs) > 1:
            vs = [_halve_pair(builder, a, b, seg) for a, b in zip(vs[::2], vs[1::2])]
            seg //= 2
        sc = _splat(builder, context.cast(builder, args[2], sig.args[2], types.float32), SUMS)
        optr = _ptr(context, builder, sig.args[3], args[3], args[4])
        builder.store(builder.fmul(vs[0], sc), builder.bitcast(optr, vty.as_pointer()), align=4)
        return context.get_dummy_value()

    return types.none(buf, idx, scale, out, oidx), codegen


@intrinsic
def add_times(typingctx, acc, x, v):
    """acc + x * v (llvm.fmuladd: one FMA where the CPU has it), acc and v LANES-lane float32
    vectors (matmul_x86's FLOATS), x a float32 scalar (splatted) or such a vector."""
    vector = x == FLOATS

    def codegen(context, builder, sig, args):
        xs = args[1]
        if not vector:
            xs = _splat(builder, context.cast(builder, xs, sig.args[1], types.float32), LANES)
        return _call(builder, "llvm.fmuladd.v64f32", args[0].type, [xs, args[2], args[0]])

    return FLOATS(FLOATS, x, FLOATS), codegen


@numba.njit(inline="always")
def _widen_block(cache, scale, t0, n, kh, is_int8, buf):
    """Rows (t0 .. t0 + n - 1, kh) of the cache -> buf[i * D:], float32: fp16 bits by the CPU's
    own widening (F16C's vcvtph2ps on x86), LANES values a load at the row's flat offset, the
    same float32 as NumPy's astype for every bit pattern but a signalling NaN, which comes back
    quiet (no cache row holds one: the stores round NaN to 0x7E00); INT8 levels times their
    row's scale."""
    n_kv, d = cache.shape[1], cache.shape[2]
    for i in range(n):
        if is_int8:
            s = scale[t0 + i, kh]
            for j in range(d):
                buf[i * d + j] = np.float32(cache[t0 + i, kh, j]) * s
        else:
            base = ((t0 + i) * n_kv + kh) * d
            for c in range(0, d, LANES):
                store_floats(buf, i * d + c, _load_cache_floats(cache, base + c))


@numba.njit(inline="always", fastmath=True)
def _block_scores(q, k, k_scale, t0, t1, is_int8, kh, scores, buf, part):
    """`_span_scores` on the blocked path: scores[g, t - t0] for slots t0 .. t1 - 1 (scores has
    SUMS spare columns), SUMS rows widened into `buf` at a time, `part` (SUMS * SUMS,) float32
    holding one block's folded products of one head."""
    n_heads, d = q.shape
    group = n_heads // k.shape[1]
    inv_sqrt_d = np.float32(1.0 / math.sqrt(d))
    width = scores.shape[1]
    for b0 in range(0, t1 - t0, SUMS):
        n = min(SUMS, t1 - t0 - b0)
        _widen_block(k, k_scale, t0 + b0, n, kh, is_int8, buf)
        for g in range(group):
            h = (kh * group + g) * d
            if d == LANES:  # the head's q in registers for the whole block
                qv = load_floats(q, h)
                for i in range(n):
                    store_folded(part, i * SUMS, times(qv, load_floats(buf, i * d)))
            else:
                for i in range(n):
                    acc = zero_floats()
                    for c in range(0, d, LANES):
                        acc = add_times(acc, load_floats(q, h + c), load_floats(buf, i * d + c))
                    store_folded(part, i * SUMS, acc)
            store_sums(part, 0, inv_sqrt_d, scores, g * width + b0)  # past n: unused columns


@numba.njit(inline="always", fastmath=True)
def _block_values(v, v_scale, t0, t1, is_int8, kh, scores, buf, out):
    """`_add_weighted_values` on the blocked path: out[g] += sum over slots t0 .. t1 - 1 of
    scores[g, t - t0] * v[t, kh], SUMS rows widened into `buf` at a time."""
    group, d = scores.shape[0], out.shape[1]
    for b0 in range(0, t1 - t0, SUMS):
        n = min(SUMS, t1 - t0 - b0)
        _widen_block(v, v_scale, t0 + b0, n, kh, is_int8, buf)
        for g in range(group):
            for c in range(0, d, LANES):
                acc = load_floats(out, g * d + c)
                for i in range(n):
                    acc = add_times(acc, scores[g, b0 + i], load_floats(buf, i * d + c))
                store_floats(out, g * d + c, acc)


@numba.njit(fastmath=True, cache=True)
def _attend_span(q, k, v, k_scale, v_scale, t0, t1, is_int8, kh, top, total, out):
    """Softmax(q . k / sqrt(D)) times v of the query heads that read kv head `kh`, over slots
    t0 .. t1 - 1 only, left unnormalised: per query head g of the group, top[g] the span's
    largest score, total[g] the sum of exp(score - top[g]) and out[g] (D,) (zeros on entry,
    C-contiguous) the sum of exp(score - top[g]) * v. Rows with D a multiple of LANES (INT8, or
    fp16 where the CPU widens it) take the blocked path (`_block_scores`), others a row at a
    time."""
    n_heads, d = q.shape
    group = n_heads // k.shape[1]
    n = t1 - t0
    blocked = d % LANES == 0 and (is_int8 or FP16_WIDEN_IN_HARDWARE)
    scores = np.empty((group, n + SUMS), dtype=np.float32)  # spare: a last block's sums
    buf = np.empty(SUMS * d, dtype=np.float32)  # SUMS widened rows, or one (`row`)
    row = buf[:d]
    if blocked:
        part = np.empty(SUMS * SUMS, dtype=np.float32)
        _block_scores(q, k, k_scale, t0, t1, is_int8, kh, scores, buf, part)
    else:
        _span_scores(q, k, k_scale, t0, t1, is_int8, kh, row, scores)
    for g in range(group):
        top[g], total[g] = _exp_scores(scores, g, n)
    if blocked:
        _block_values(v, v_scale, t0, t1, is_int8, kh, scores, buf, out)
    else:
        _add_weighted_values(v, v_scale, t0, t1, is_int8, kh, scores, row, out, 0)


# Tokens a job of the parallel decode attention covers, about: the cache's slots are cut into
# an even number of spans (at least 2), so that every kv head count, one included, splits
# evenly between 2 threads.
DECODE_SPAN_TOKENS = 256


@numba.njit(parallel=True, fastmath=True, cache=True)
def _decode_attention(q, k, v, k_scale, v_scale, length, is_int8):
    """q (H, D); k, v (max_context, Hkv, D) as uint16 fp16 bits or int8; scales (max_context, Hkv).
    Flash-decoding's split: every (kv head, span of slots) pair in parallel (`_attend_span`),
    then each query head's spans merged by their largest scores: softmax over all the slots,
    summed in another order than the serial kernel's (tests: within FAST_VS_REF_ABS_TOL of the
    ref, like it)."""
    n_heads, d = q.shape
    n_kv = k.shape[1]
    group = n_heads // n_kv
    spans = 2 * max(1, (length + 2 * DECODE_SPAN_TOKENS - 1) // (2 * DECODE_SPAN_TOKENS))
    spans = min(spans, max(1, length))
    jobs = n_kv * spans
    tops = np.empty((jobs, group), dtype=np.float32)
    totals = np.empty((jobs, group), dtype=np.float32)
    parts = np.zeros((jobs, group, d), dtype=np.float32)
    for job in numba.prange(jobs):
        kh, c = job // spans, job % spans
        t0, t1 = c * length // spans, (c + 1) * length // spans
        _attend_span(
            q, k, v, k_scale, v_scale, t0, t1, is_int8, kh, tops[job], totals[job], parts[job]
        )
    out = np.zeros(q.shape, dtype=np.float32)
    scale = np.empty(spans, dtype=np.float32)  # each span's exp(its top - the head's top)
    for kh in range(n_kv):
        for g in range(group):
            m = tops[kh * spans, g]
            for c in range(1, spans):
                m = max(m, tops[kh * spans + c, g])
            denom = np.float32(0.0)
            for c in range(spans):
                scale[c] = exp32(tops[kh * spans + c, g] - m)
                denom += scale[c] * totals[kh * spans + c, g]
            h = kh * group + g
            for c in range(spans):
                w = scale[c] / denom
                for j in range(d):
                    out[h, j] += w * parts[kh * spans + c, g, j]
    return out


@numba.njit(fastmath=True, cache=True)
def _decode_attention_serial(q, k, v, k_scale, v_scale, length, is_int8):
    """`_decode_attention` on the calling thread: one span of every slot per kv head, its
    weighted sum divided by its softmax total (a short context: a parallel launch costs more
    than it splits)."""
    n_heads, d = q.shape
    n_kv = k.shape[1]
    group = n_heads // n_kv
    out = np.zeros((n_kv, group, d), dtype=np.float32)  # out[kh]: the parallel kernel's types
    top = np.empty((n_kv, group), dtype=np.float32)
    total = np.empty((n_kv, group), dtype=np.float32)
    for kh in range(n_kv):
        _attend_span(
            q, k, v, k_scale, v_scale, np.int64(0), length, is_int8, kh, top[kh], total[kh], out[kh]
        )  # int64(0), not a literal 0: the one compiled _attend_span the parallel kernel calls
        for g in range(group):
            inv = np.float32(1.0) / total[kh, g]
            for j in range(d):
                out[kh, g, j] *= inv
    return out.reshape((n_heads, d))


# Decode attention runs in parallel (`_decode_attention`: kv heads x spans of slots) from this
# many cached tokens, on the calling thread below it. Measured (Intel Xeon, 2 threads, quiet,
# the blocked fp16 kernels, ranges over two to four runs), parallel vs serial: SmolLM2's 9 x 64 / 3 kv
# heads at 16 tokens 14.9 vs 3.0 us, 128 22.5-23.2 vs 15.1-15.8, 256 24.5-30.9 vs 22.5-27.4,
# 512 36.5-43.2 vs 43.6-53.2, 1024 63.5-69.3 vs 84.2-89.3, 2048 106-137 vs 175-202; Gemma 3's
# 4 x 256 / 1 kv head at 256 27.0-33.2 vs 25.3-35.6, 512 41.9-61.7 vs 48.4-74.9, 1024 72.6-83.6
# vs 107-139: even near 256-320 on both. (Before the spans, one kv head ran serial at every
# length and 3 split 2 / 1 between the threads.)
DECODE_PARALLEL_MIN_LENGTH = 256


@numba.njit(inline="always")
def _runs_parallel(length):
    """The one rule both decode entry points pick their kernel by (the fused step and
    `decode_attention_unchecked`): parallel from DECODE_PARALLEL_MIN_LENGTH cached tokens."""
    return length >= DECODE_PARALLEL_MIN_LENGTH


@numba.njit(cache=True)
def decode_step_attention(
    qkv,
    n_heads,
    n_kv,
    head_dim,
    q_norm,
    k_norm,
    eps,
    cos,
    sin,
    q_factor,
    k_bits,
    v_bits,
    slot,
    length,
):
    """One decode step from its fused q|k|v row qkv (1, (H + 2 Hkv) D) float32, in one call: q's
    and k's heads normalised (q_norm, k_norm (D,); empty: none), rotated (cos, sin (1, D / 2):
    the position's rows), q scaled by q_factor (float32), k and v stored as float16 bits in
    `slot` of an fp16 cache (k_bits, v_bits (S, Hkv, D) uint16; slot and the valid `length`
    after it from KVCache.claim_slot), then attention of q over those slots -> (H, D) float32.
    The same kernels the unfused path calls one by one (rms_norm_heads_rows, rope_rows, the
    float16 store NumPy's astype rounds to, `_decode_attention`), so the same numbers; what it
    saves is five Python-level calls a layer."""
    if q_norm.shape[0] > 0:
        rms_norm_heads_rows(qkv, 0, n_heads, head_dim, q_norm, eps)
    if k_norm.shape[0] > 0:
        rms_norm_heads_rows(qkv, n_heads, n_kv, head_dim, k_norm, eps)
    rope_rows(qkv, n_heads + n_kv, head_dim, cos, sin)
    qd = n_heads * head_dim
    kvd = n_kv * head_dim
    if q_factor != np.float32(1.0):
        for j in range(qd):
            qkv[0, j] *= q_factor
    for kh in range(n_kv):
        for j in range(head_dim):
            k_bits[slot, kh, j] = _fp16_bits(qkv[0, qd + kh * head_dim + j])
            v_bits[slot, kh, j] = _fp16_bits(qkv[0, qd + kvd + kh * head_dim + j])
    q = qkv[0, :qd].copy().reshape((n_heads, head_dim))
    if _runs_parallel(length):
        return _decode_attention(q, k_bits, v_bits, _NO_SCALE, _NO_SCALE, length, False)
    return _decode_attention_serial(q, k_bits, v_bits, _NO_SCALE, _NO_SCALE, length, False)


def decode_attention(q, cache: KVCache) -> np.ndarray:
    """Attention of one query token q (n_heads, head_dim) over the cache -> (n_heads, head_dim)."""
    return decode_attention_unchecked(_check_query(q, cache), cache)


# ----------------------------------------------------------------------------------------------
# Causal prefill attention: the last T tokens of the cache attend to everything up to themselves.
# The cache is widened to float32 once per call ((L, Hkv, D): small next to the T x L scores),
# then each (kv head, query token) pair runs in parallel over contiguous float32 rows.


def _check_prefill(q, cache: KVCache) -> np.ndarray:
    if not isinstance(cache, KVCache):
        raise ValueError(f"cache must be a KVCache, got {type(cache).__name__}")
    q = float32_array(q, "q", (3,))
    t, n_heads, head_dim = q.shape
    if head_dim != cache.head_dim or n_heads % cache.n_kv_heads:
        raise ValueError(
            f"q has shape {q.shape}; the cache has {cache.n_kv_heads} kv heads of "
            f"head_dim {cache.head_dim}"
        )
    if t > cache.length:
        raise ValueError(
            f"q has {t} tokens but the cache holds only {cache.length}: append the "
            "new tokens' k and v first"
        )
    if t > 1 and cache.window and cache.pos > cache.max_context:
        # The ring's slots are no longer in position order, and all but the last query's
        # windows reach tokens it dropped: slot-order causal attention would be silently wrong.
        raise ValueError(
            f"q has {t} tokens but the sliding-window cache (window {cache.window}) has dropped "
            f"{cache.pos - cache.max_context} of its {cache.pos}: prefill over a ring only before "
            "it wraps (one query token after; window_prefill_attention over the chunk's k, v)"
        )
    return q


def prefill_attention_ref(q, cache: KVCache) -> np.ndarray:
    """NumPy twin of `prefill_attention`: masked softmax over the widened cache."""
    q = _check_prefill(q, cache)
    t, n_heads, head_dim = q.shape
    k, v = cached_kv_ref(cache)  # (L, Hkv, D)
    length = k.shape[0]
    group = n_heads // cache.n_kv_heads
    k = np.repeat(k, group, axis=1)  # (L, H, D)
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("thd,lhd->htl", q, k) / np.float32(math.sqrt(head_dim))  # (H, T, L)
    pos = np.arange(length - t, length)[:, None]  # absolute position of each query
    scores = np.where(np.arange(length)[None, :] <= pos, scores, -np.inf)
    p = np.exp(scores - scores.max(axis=2, keepdims=True))
    p /= p.sum(axis=2, keepdims=True)
    return np.einsum("htl,lhd->thd", p, v).astype(np.float32)


KEYS = 4  # prefill: keys per pass of the weighted-sum loop where head_dim % LANES != 0
HEADS = 4  # prefill: query heads (of one kv head) per score / weighted-sum tile


@numba.njit(cache=True)
def _keys_by_dim(k):
    """k (L, Hkv, D) -> (Hkv, D, L + LANES) float32, zero past L: each kv head's keys one
    row per dimension, so LANES consecutive keys' values of dimension j are one vector load."""
    length, n_kv, d = k.shape
    kt = np.zeros((n_kv, d, length + LANES), dtype=np.float32)
    for s in range(length):
        for h in range(n_kv):
            for j in range(d):
                kt[h, j, s] = k[s, h, j]
    return kt


@numba.njit(parallel=True, fastmath=True, cache=True)
def _prefill_attention(q, k, v, window):
    """q (T, H, D); k, v (L, Hkv, D) float32; query t sits at position L - T + t and sees keys
    from position L - T + t - window + 1 on (window 0: from 0). Register tiles: the scores of
    HEADS query heads x LANES keys from the keys laid out by dimension (`_keys_by_dim`, once per
    call), one key vector load feeding HEADS FMAs per dimension and no horizontal sums (with
    head_dim 64 those cost as much as the dot itself); the weighted sum HEADS heads x LANES
    dimensions over every key, one value vector load feeding HEADS FMAs (head_dim not a
    multiple of LANES: KEYS value rows per pass over an output row). A group of fewer than
    HEADS heads repeats its last one in the tile (the same values, stored twice)."""
    t_rows, n_heads, d = q.shape
    length, n_kv, _ = k.shape
    group = n_heads // n_kv
    start = length - t_rows
    inv_sqrt_d = np.float32(1.0 / math.sqrt(d))
    out = np.zeros((t_rows, n_heads, d), dtype=np.float32)
    kt = _keys_by_dim(k)
    for idx in numba.prange(n_kv * t_rows):
        kh = idx // t_rows
        r = idx % t_rows  # queries 0, T-1, 1, T-2, ...: each thread's share of prange's
        t = r // 2 if r % 2 == 0 else t_rows - 1 - r // 2  # static split gets short and long rows
        last = start + t  # keys first .. last
        first = max(0, last - window + 1) if window > 0 else 0
        n = last - first + 1
        scores = np.empty((group, n + LANES), dtype=np.float32)
        kth = kt[kh]
        for g0 in range(0, group, HEADS):  # HEADS heads x LANES keys a tile
            g1, g2, g3 = min(g0 + 1, group - 1), min(g0 + 2, group - 1), min(g0 + 3, group - 1)
            q0, q1 = q[t, kh * group + g0], q[t, kh * group + g1]
            q2, q3 = q[t, kh * group + g2], q[t, kh * group + g3]
            for s0 in range(0, n, LANES):
                a0, a1, a2, a3 = zero_floats(), zero_floats(), zero_floats(), zero_floats()
                for j in range(d):
                    kv = load_floats(kth[j], first + s0)
                    a0, a1 = add_times(a0, q0[j], kv), add_times(a1, q1[j], kv)
                    a2, a3 = add_times(a2, q2[j], kv), add_times(a3, q3[j], kv)
                store_floats(scores[g0], s0, a0)  # past the group: its last head again
                store_floats(scores[g1], s0, a1)
                store_floats(scores[g2], s0, a2)
                store_floats(scores[g3], s0, a3)
        for g in range(group):
            for s in range(n):
                scores[g, s] *= inv_sqrt_d
        for g in range(group):
            _, total = _exp_scores(scores, g, n)
            inv = np.float32(1.0) / total
            for s in range(n):
                scores[g, s] *= inv
        if d % LANES == 0:  # HEADS heads x LANES dimensions a tile, over every key
            for g0 in range(0, group, HEADS):
                g1, g2 = min(g0 + 1, group - 1), min(g0 + 2, group - 1)
                g3 = min(g0 + 3, group - 1)
                p0, p1, p2, p3 = scores[g0], scores[g1], scores[g2], scores[g3]
                for c in range(0, d, LANES):
                    a0, a1, a2, a3 = zero_floats(), zero_floats(), zero_floats(), zero_floats()
                    for s in range(n):
                        vv = load_floats(v[first + s, kh], c)
                        a0, a1 = add_times(a0, p0[s], vv), add_times(a1, p1[s], vv)
                        a2, a3 = add_times(a2, p2[s], vv), add_times(a3, p3[s], vv)
                    store_floats(out[t, kh * group + g0], c, a0)
                    store_floats(out[t, kh * group + g1], c, a1)
                    store_floats(out[t, kh * group + g2], c, a2)
                    store_floats(out[t, kh * group + g3], c, a3)
        else:  # KEYS value rows per pass over an output row
            full = n - n % KEYS
            for s in range(0, full, KEYS):  # each value row read once for the group's heads
                v0, v1 = v[first + s, kh], v[first + s + 1, kh]
                v2, v3 = v[first + s + 2, kh], v[first + s + 3, kh]
                for g in range(group):
                    o = out[t, kh * group + g]
                    p0, p1, p2, p3 = (
                        scores[g, s],
                        scores[g, s + 1],
                        scores[g, s + 2],
                        scores[g, s + 3],
                    )
                    for j in range(d):
                        o[j] += p0 * v0[j] + p1 * v1[j] + p2 * v2[j] + p3 * v3[j]
            for s in range(full, n):
                vr = v[first + s, kh]
                for g in range(group):
                    o = out[t, kh * group + g]
                    p = scores[g, s]
                    for j in range(d):
                        o[j] += p * vr[j]
    return out


def prefill_attention_unchecked(q, cache: KVCache) -> np.ndarray:
    """`prefill_attention` without input checks (the runtime validates once at load)."""
    k, v = cached_kv(cache)
    return _prefill_attention(q, k, v, 0)


def window_prefill_attention_ref(q, k, v, window: int) -> np.ndarray:
    """NumPy twin of `window_prefill_attention`: q (T, H, D) at the last T of the L positions of
    k, v (L, Hkv, D); query at position p sees keys p - window + 1 .. p (window 0: 0 .. p)."""
    q = float32_array(q, "q", (3,))
    k, v = float32_array(k, "k", (3,)), float32_array(v, "v", (3,))
    t, n_heads, head_dim = q.shape
    length = k.shape[0]
    if k.shape != v.shape or k.shape[2] != head_dim or n_heads % k.shape[1] or t > length:
        raise ValueError(
            f"q {q.shape}, k {k.shape}, v {v.shape}: need k == v shape (L >= T, Hkv "
            "dividing H, the same head_dim)"
        )
    group = n_heads // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # (L, H, D)
    scores = np.einsum("thd,lhd->htl", q, k) / np.float32(math.sqrt(head_dim))  # (H, T, L)
    pos = np.arange(length - t, length)[:, None]  # each query's position
    keys = np.arange(length)[None, :]
    seen = (keys <= pos) & ((keys > pos - window) if window > 0 else True)
    scores = np.where(seen, scores, -np.inf)
    p = np.exp(scores - scores.max(axis=2, keepdims=True))
    p /= p.sum(axis=2, keepdims=True)
    return np.einsum("htl,lhd->thd", p, v).astype(np.float32)


def window_prefill_attention(q, k, v, window: int) -> np.ndarray:
    """Causal attention of the last T positions' queries over explicit float32 k, v, each query
    seeing the last `window` keys up to itself (0: all). No checks (the runtime's path)."""
    return _prefill_attention(q, k, v, int(window))


def prefill_attention(q, cache: KVCache) -> np.ndarray:
    """Causal attention of the cache's last T tokens' queries q (T, H, D) -> (T, H, D)."""
    q = _check_prefill(q, cache)
    return prefill_attention_unchecked(q, cache)


def decode_attention_unchecked(q, cache: KVCache) -> np.ndarray:
    """`decode_attention` without input checks: q (H, D) float32 C-contiguous, cache non-empty;
    the parallel kernel from DECODE_PARALLEL_MIN_LENGTH cached tokens, as a fused step picks."""
    kernel = _decode_attention if _runs_parallel(cache.length) else _decode_attention_serial
    if cache.dtype == "int8":
        return kernel(q, cache.k, cache.v, cache.k_scale, cache.v_scale, cache.length, True)
    return kernel(
        q,
        cache.k.view(np.uint16),
        cache.v.view(np.uint16),
        _NO_SCALE,
        _NO_SCALE,
        cache.length,
        False,
    )


_NO_SCALE = np.zeros((1, 1), dtype=np.float32)
