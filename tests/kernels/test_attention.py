"""Decode attention over an FP16 / INT8 KV cache: fast vs NumPy twin, error of the cache formats
against float32 attention, grouped-query heads, stability, the cache's bookkeeping, bad input."""

import math

import numba
import numpy as np
import pytest

from harmony_ref.kernels import attention as at
from harmony_ref.kernels._testing import assert_within

# Fast and ref read the same cached values; they differ in float32 summation order and exp.
FAST_VS_REF_ABS_TOL = 2e-5
# Against float32 attention on the unquantized k, v (values ~N(0, 1)): fp16 storage is off by
# <= 2^-11 relative per value, INT8 by half a step of max|row| / 127 (~1.3% of max|row|).
FP16_VS_FLOAT_ABS_TOL = 5e-3
INT8_VS_FLOAT_ABS_TOL = 6e-2


def _filled(dtype, length, n_kv=2, d=16, max_context=640, seed=0):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((length, n_kv, d)).astype(np.float32)
    v = rng.standard_normal((length, n_kv, d)).astype(np.float32)
    cache = at.KVCache(max_context, n_kv, d, dtype)
    half = max(length // 2, 1)
    cache.append(k[:half], v[:half])  # several tokens at once ...
    for t in range(half, length):  # ... then one at a time, as decode does
        cache.append(k[t], v[t])
    return cache, k, v


def _float_attention(q, k, v):
    group = q.shape[0] // k.shape[1]
    k, v = np.repeat(k, group, axis=1).astype(np.float64), np.repeat(v, group, axis=1)
    s = np.einsum("hd,lhd->hl", q, k) / math.sqrt(q.shape[1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return np.einsum("hl,lhd->hd", p / p.sum(axis=1, keepdims=True), v)


@pytest.mark.parametrize("dtype", ["fp16", "int8"])
@pytest.mark.parametrize("length", [1, 3, 17, 130, 600])  # 600: the parallel kernel, 4 spans
@pytest.mark.parametrize("n_heads", [2, 6, 8, 14])  # 2 kv heads: groups of 1, 3, 4 and 7
# fp16 rows widened bit by bit (16), or in hardware in blocks (multiples of LANES: q in registers
# at 64, products summed over 2 and 4 vectors at 128 and 256)
@pytest.mark.parametrize("d", [16, 64, 128, 256])
def test_decode_attention_matches_ref_and_float(dtype, length, n_heads, d):
    cache, k, v = _filled(dtype, length, d=d, seed=length)
    q = np.random.default_rng(length + n_heads).standard_normal((n_heads, d)).astype(np.float32)
    got = at.decode_attention(q, cache)
    assert got.shape == (n_heads, d) and got.dtype == np.float32
    assert_within(got, at.decode_attention_ref(q, cache), FAST_VS_REF_ABS_TOL, "fast vs ref")
    tol = FP16_VS_FLOAT_ABS_TOL if dtype == "fp16" else INT8_VS_FLOAT_ABS_TOL
    assert_within(got, _float_attention(q, k, v), tol, f"{dtype} cache vs float32 attention")


@numba.njit
def _tree_sums(buf, scale):
    out = np.zeros(at.SUMS + 3, np.float32)
    at.store_sums(buf, 0, scale, out, 3)
    folded = np.zeros(at.SUMS, np.float32)
    at.store_folded(folded, 0, at.load_floats(buf, 0))
    return out, folded


def test_the_transposing_sum_tree_sums_each_row_in_order():
    """store_sums: SUMS rows of SUMS values -> their SUMS sums, in row order, times the scale;
    store_folded: LANES lanes -> SUMS. Small integers, so every order gives the exact sum."""
    rng = np.random.default_rng(11)
    buf = rng.integers(-50, 50, at.SUMS * at.SUMS).astype(np.float32)
    out, folded = _tree_sums(buf, np.float32(0.5))
    np.testing.assert_array_equal(out[3:], buf.reshape(at.SUMS, at.SUMS).sum(axis=1) * 0.5)
    assert (out[:3] == 0).all()  # nothing written before oidx
    want = buf[: at.LANES].reshape(at.LANES // at.SUMS, at.SUMS).sum(axis=0)
    np.testing.assert_array_equal(folded, want)


def test_single_token_returns_its_value():
    cache, k, v = _filled("fp16", 1, seed=3)
    q = np.ones((4, 16), np.float32)
    expected = np.repeat(v[0].astype(np.float16).astype(np.float32), 2, axis=0)
    np.testing.assert_array_equal(at.decode_attention(q, cache), expected)


@pytest.mark.parametrize("length", [40, 600])  # serial; parallel, spans merged by their maxima
@pytest.mark.parametrize("d", [16, 64])  # a row at a time; blocks
@pytest.mark.parametrize("dtype", ["int8", "fp16"])
def test_softmax_is_stable_for_large_scores(length, d, dtype):
    cache, _, _ = _filled(dtype, length, d=d, seed=4)
    q = np.random.default_rng(5).standard_normal((2, d)).astype(np.float32) * 1e4
    got = at.decode_attention(q, cache)
    assert np.isfinite(got).all()
    assert_within(got, at.decode_attention_ref(q, cache), 1e-4, "large-score attention")


def test_fp16_widening_is_exact_for_every_bit_pattern():
    bits = np.arange(2**16, dtype=np.uint16)
    out = at._fp16_row_to_f32(bits, np.empty(bits.size, np.float32))
    np.testing.assert_array_equal(out, bits.view(np.float16).astype(np.float32))  # NaN == NaN here


@numba.njit
def _widen_rows(cache, d):
    out = np.empty((cache.shape[0], cache.shape[1], d), np.float32)
    for t in range(cache.shape[0]):
        for kh in range(cache.shape[1]):
            at._widen_fp16_row(cache, t, kh, out[t, kh])
    return out


@numba.njit
def _widen_blocks(cache, d):
    out = np.empty(cache.size, np.float32)
    n_kv = cache.shape[1]
    for t0 in range(0, cache.shape[0], at.SUMS):
        for kh in range(n_kv):
            buf = np.empty(at.SUMS * d, np.float32)
            n = min(at.SUMS, cache.shape[0] - t0)
            at._widen_block(cache, np.empty((1, 1), np.float32), t0, n, kh, False, buf)
            for i in range(n):
                out[((t0 + i) * n_kv + kh) * d : ((t0 + i) * n_kv + kh + 1) * d] = buf[
                    i * d : (i + 1) * d
                ]
    return out


@pytest.mark.parametrize(
    "path, d",
    [("bits", 16), ("bits", 64), ("block", 64)],  # the row-at-a-time path; the blocked one
)
def test_decode_rows_widen_every_bit_pattern(path, d):
    """Decode attention's fp16 widening: astype(float32) bit for bit on every float16 pattern;
    the blocked path's (the CPU's own conversion) returns the signalling NaNs (exponent 31, top
    mantissa bit clear) quiet (still NaN; no cache row holds one)."""
    if path == "block" and not at.FP16_WIDEN_IN_HARDWARE:
        pytest.skip("this CPU has no F16C: decode attention widens fp16 by bit moves only")
    bits = np.arange(2**16, dtype=np.uint16)
    cache = bits.reshape(-1, 2, d)
    got = (_widen_rows(cache, d) if path == "bits" else _widen_blocks(cache, d)).reshape(-1)
    want = bits.view(np.float16).astype(np.float32)
    if path == "bits":
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        return
    nan = np.isnan(want)
    assert np.isnan(got[nan]).all()
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    quiet = nan & (bits & 0x0200 != 0)
    np.testing.assert_array_equal(got[quiet].view(np.uint32), want[quiet].view(np.uint32))


def test_cache_bookkeeping_and_nbytes():
    fp16 = at.KVCache(2048, 8, 128, "fp16")
    assert fp16.nbytes == 2 * 8 * 128 * 2048 * 2  # K and V, 2 bytes each
    int8 = at.KVCache(2048, 8, 128, "int8")
    assert int8.nbytes == 2 * 8 * 128 * 2048 + 2 * 2048 * 8 * 4  # + one float32 scale per row
    cache, _, _ = _filled("int8", 17, max_context=20)
    assert cache.length == 17
    assert cache.bytes_read() == cache.nbytes * 17 // 20


def test_bad_inputs_raise_value_errors():
    cache, _, _ = _filled("fp16", 5, max_context=6)
    with pytest.raises(ValueError, match=r"5 \+ 2 tokens > max_context 6"):
        cache.append(np.ones((2, 2, 16)), np.ones((2, 2, 16)))
    with pytest.raises(ValueError, match=r"got k \(1, 3, 16\)"):
        cache.append(np.ones((3, 16)), np.ones((3, 16)))
    with pytest.raises(ValueError, match="overflow float16"):
        cache.append(np.full((2, 16), 1e5), np.ones((2, 16)))
    with pytest.raises(ValueError, match="not a multiple of the cache's n_kv_heads 2"):
        at.decode_attention(np.ones((3, 16), np.float32), cache)
    with pytest.raises(ValueError, match="head_dim 16"):
        at.decode_attention(np.ones((2, 8), np.float32), cache)
    with pytest.raises(ValueError, match=r"q\[0, 1\] = nan"):
        at.decode_attention(np.array([[1.0, np.nan] * 8] * 2), cache)
    with pytest.raises(ValueError, match="empty KVCache"):
        at.decode_attention(np.ones((2, 16), np.float32), at.KVCache(4, 2, 16))
    with pytest.raises(ValueError, match="dtype must be one of"):
        at.KVCache(4, 2, 16, "bf16")
    with pytest.raises(ValueError, match="max_context must be a positive integer"):
        at.KVCache(0, 2, 16)


@pytest.mark.parametrize(
    "n_heads,n_kv,norms,q_factor,window,steps,d",
    [
        # crosses DECODE_PARALLEL_MIN_LENGTH (serial, then parallel), rows widened in hardware
        (4, 2, False, 1.0, 0, 270, 64),
        (4, 1, True, 0.75, 0, 20, 16),  # one kv head (always serial), q / k head norms, q scaled
        (6, 3, False, 1.0, 24, 40, 16),  # a sliding-window ring that wraps
    ],
)
def test_decode_step_attention_equals_the_unfused_calls(
    n_heads, n_kv, norms, q_factor, window, steps, d
):
    """decode_step_attention (norms, rope, q scale, fp16 store, attention in one call, slot
    from claim_slot) against the calls the decoder made one by one: the same cache bits, the
    same numbers within the compile difference of the kernels it calls (DECODE_STEP_ABS_TOL)."""
    from harmony_ref.kernels.norm import rms_norm_heads_rows
    from harmony_ref.kernels.rope import rope_rows, rope_table

    eps = np.float32(1e-6)
    rng = np.random.default_rng(7)
    cos, sin = rope_table(288, d, 10000.0)
    q_norm = rng.uniform(0.5, 1.5, d).astype(np.float32) if norms else np.zeros(0, np.float32)
    k_norm = rng.uniform(0.5, 1.5, d).astype(np.float32) if norms else np.zeros(0, np.float32)
    fused, plain = at.KVCache(288, n_kv, d, window=window), at.KVCache(288, n_kv, d, window=window)
    qd, kvd = n_heads * d, n_kv * d
    for p in range(steps):
        row = rng.standard_normal((1, qd + 2 * kvd)).astype(np.float32)
        mine = row.copy()
        slot, length = fused.claim_slot()
        got = at.decode_step_attention(
            mine, n_heads, n_kv, d, q_norm, k_norm, eps, cos[p : p + 1], sin[p : p + 1],
            np.float32(q_factor), fused.k.view(np.uint16), fused.v.view(np.uint16), slot, length,
        )  # fmt: skip
        if norms:
            rms_norm_heads_rows(row, 0, n_heads, d, q_norm, eps)
            rms_norm_heads_rows(row, n_heads, n_kv, d, k_norm, eps)
        rope_rows(row, n_heads + n_kv, d, cos[p : p + 1], sin[p : p + 1])
        row[:, :qd] *= np.float32(q_factor)
        plain.store(
            row[:, qd : qd + kvd].reshape(1, n_kv, d), row[:, qd + kvd :].reshape(1, n_kv, d)
        )
        want = at.decode_attention_unchecked(row[0, :qd].reshape(n_heads, d), plain)
        assert (fused.length, fused.pos) == (plain.length, plain.pos) == (length, p + 1)
        if norms:  # the head norm compiled inside the fused kernel: its last bits may differ
            assert_within(mine, row, DECODE_STEP_ABS_TOL, f"rotated q|k|v, step {p}")
            for a, b in ((fused.k, plain.k), (fused.v, plain.v)):  # one float16 ulp at most
                assert_within(a.astype(np.float32), b.astype(np.float32), 2e-3, "fp16 cache")
        else:  # rope, the q scale and the float16 store: the same bits
            np.testing.assert_array_equal(mine, row)
            np.testing.assert_array_equal(fused.k.view(np.uint16), plain.k.view(np.uint16))
            np.testing.assert_array_equal(fused.v.view(np.uint16), plain.v.view(np.uint16))
        assert_within(got, want, DECODE_STEP_ABS_TOL, f"decode step {p}")


# The serial and parallel decode attention kernels run one float order but compile apart, and
# the fused step's head norm compiles inside it (measured on AMD EPYC Zen 4: within 1.2e-7 on
# ~N(0, 1) values); fastmath may contract or vectorise either differently on another CPU.
DECODE_STEP_ABS_TOL = 1e-6


def test_claim_slot_refuses_a_full_cache():
    cache = at.KVCache(2, 1, 4)
    cache.claim_slot()
    cache.claim_slot()
    with pytest.raises(ValueError, match="KVCache full"):
        cache.claim_slot()
