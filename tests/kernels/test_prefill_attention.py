"""Causal prefill attention over the KV cache: kernel vs NumPy twin (fp16 and int8 caches,
grouped-query heads, prefill from empty and after earlier tokens), each row equal to decode
attention at its position, against float32 attention, stability and bad input."""

import math

import numpy as np
import pytest

from harmony_ref.kernels import attention as at
from harmony_ref.kernels._testing import assert_within

FAST_VS_REF_ABS_TOL = 2e-5  # same widened cache; float32 summation order and exp differ
FP16_VS_FLOAT_ABS_TOL = 5e-3  # fp16 storage, values ~N(0, 1) (as in the decode tests)
INT8_VS_FLOAT_ABS_TOL = 6e-2


def _cache(dtype, past, new, n_kv=2, d=16, seed=0):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((past + new, n_kv, d)).astype(np.float32)
    v = rng.standard_normal((past + new, n_kv, d)).astype(np.float32)
    cache = at.KVCache(past + new + 3, n_kv, d, dtype)
    if past:
        cache.append(k[:past], v[:past])
    cache.append(k[past:], v[past:])
    return cache, k, v


def _float_causal(q, k, v):
    t, h, d = q.shape
    length = k.shape[0]
    group = h // k.shape[1]
    k, v = np.repeat(k, group, axis=1).astype(np.float64), np.repeat(v, group, axis=1)
    out = np.empty((t, h, d))
    for i in range(t):
        n = length - t + i + 1
        s = np.einsum("hd,lhd->hl", q[i], k[:n]) / math.sqrt(d)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[i] = np.einsum("hl,lhd->hd", p / p.sum(axis=1, keepdims=True), v[:n])
    return out


@pytest.mark.parametrize("dtype", ["fp16", "int8"])
@pytest.mark.parametrize("past,new", [(0, 1), (0, 7), (5, 4), (30, 33)])
@pytest.mark.parametrize("n_heads", [2, 6])
def test_prefill_matches_ref_and_float(dtype, past, new, n_heads):
    cache, k, v = _cache(dtype, past, new, seed=past + new)
    q = np.random.default_rng(n_heads).standard_normal((new, n_heads, 16)).astype(np.float32)
    got = at.prefill_attention(q, cache)
    assert got.shape == q.shape and got.dtype == np.float32
    assert_within(got, at.prefill_attention_ref(q, cache), FAST_VS_REF_ABS_TOL, "fast vs ref")
    tol = FP16_VS_FLOAT_ABS_TOL if dtype == "fp16" else INT8_VS_FLOAT_ABS_TOL
    assert_within(got, _float_causal(q, k, v), tol, f"{dtype} cache vs float32 attention")


@pytest.mark.parametrize("dtype", ["fp16", "int8"])
def test_each_row_equals_decode_attention_at_its_position(dtype):
    cache, k, v = _cache(dtype, 3, 6, seed=9)
    q = np.random.default_rng(1).standard_normal((6, 4, 16)).astype(np.float32)
    full = at.prefill_attention(q, cache)
    for i in range(6):
        step = at.KVCache(cache.max_context, 2, 16, dtype)
        step.append(k[: 3 + i + 1], v[: 3 + i + 1])
        assert_within(
            full[i], at.decode_attention(q[i], step), FAST_VS_REF_ABS_TOL, f"row {i} vs decode"
        )


def test_first_token_attends_only_to_itself_and_large_scores_are_stable():
    cache, k, v = _cache("fp16", 0, 3, seed=4)
    q = np.full((3, 2, 16), 1e3, np.float32)  # scores ~1e4: exp would overflow without the max
    got = at.prefill_attention(q, cache)
    assert np.isfinite(got).all()
    expected0 = np.repeat(v[0].astype(np.float16).astype(np.float32), 1, axis=0)
    assert_within(got[0], expected0, 1e-6, "token 0 sees only itself")


def test_bad_input():
    cache, _, _ = _cache("fp16", 0, 2)
    with pytest.raises(ValueError, match="only 2"):
        at.prefill_attention(np.ones((3, 2, 16), np.float32), cache)
    with pytest.raises(ValueError, match="kv heads"):
        at.prefill_attention(np.ones((2, 3, 16), np.float32), cache)
    q = np.ones((2, 2, 16), np.float32)
    q[1, 0, 5] = np.nan
    with pytest.raises(ValueError, match=r"q\[1, 0, 5\]"):
        at.prefill_attention(q, cache)
    with pytest.raises(ValueError, match="KVCache"):
        at.prefill_attention_ref(np.ones((1, 2, 16)), object())


@pytest.mark.parametrize(
    "head_dim, n_heads, window", [(64, 6, 0), (128, 8, 0), (64, 4, 70), (80, 8, 0)]
)
def test_prefill_tiles_match_ref(head_dim, n_heads, window):
    """The register tiles (HEADS heads x LANES keys / dimensions; a group of 3 repeating a head),
    over more than LANES keys, windowed or not, and a head_dim off the tile (80)."""
    rng = np.random.default_rng(head_dim + n_heads + window)
    k = rng.standard_normal((75, 2, head_dim)).astype(np.float32)
    v = rng.standard_normal((75, 2, head_dim)).astype(np.float32)
    q = rng.standard_normal((70, n_heads, head_dim)).astype(np.float32)
    got = at.window_prefill_attention(q, k, v, window)
    want = at.window_prefill_attention_ref(q, k, v, window)
    assert_within(got, want, FAST_VS_REF_ABS_TOL, "tiles vs ref")


# ----------------------------------------------------------------------------------------------
# Sliding-window attention (Gemma 3's local layers) and the ring cache that keeps only the window


@pytest.mark.parametrize("window", [1, 3, 4, 17])
@pytest.mark.parametrize("past,new", [(0, 1), (0, 9), (5, 4), (30, 33)])
def test_window_prefill_matches_ref_and_a_masked_float(window, past, new):
    rng = np.random.default_rng(window * 100 + past + new)
    k = rng.standard_normal((past + new, 2, 16)).astype(np.float32)
    v = rng.standard_normal((past + new, 2, 16)).astype(np.float32)
    q = rng.standard_normal((new, 6, 16)).astype(np.float32)
    got = at.window_prefill_attention(q, k, v, window)
    assert_within(
        got, at.window_prefill_attention_ref(q, k, v, window), FAST_VS_REF_ABS_TOL, "fast vs ref"
    )
    for i in range(new):  # row i: the float attention over its last `window` keys only
        pos = past + i
        lo = max(0, pos - window + 1)
        want = _float_causal(q[i : i + 1], k[lo : pos + 1], v[lo : pos + 1])
        assert_within(got[i : i + 1], want, FAST_VS_REF_ABS_TOL * 10, f"row {i} window {window}")
    assert_within(
        at.window_prefill_attention(q, k, v, 0),
        _float_causal(q, k, v),
        FAST_VS_REF_ABS_TOL * 10,
        "window 0 is plain causal attention",
    )


@pytest.mark.parametrize("dtype", ["fp16", "int8"])
def test_ring_cache_keeps_the_last_window_in_order(dtype):
    rng = np.random.default_rng(7)
    k = rng.standard_normal((23, 2, 8)).astype(np.float32)
    v = rng.standard_normal((23, 2, 8)).astype(np.float32)
    ring = at.KVCache(64, 2, 8, dtype, window=5)
    full = at.KVCache(64, 2, 8, dtype)
    assert ring.max_context == 5 and ring.nbytes * 64 == full.nbytes * 5
    for lo, hi in ((0, 3), (3, 4), (4, 15), (15, 16), (16, 23)):  # appends of 3, 1, 11, 1, 7
        ring.append(k[lo:hi], v[lo:hi])
        full.append(k[lo:hi], v[lo:hi])
        n = min(hi, 5)
        assert ring.pos == hi and ring.length == n
        rk, rv = ring.ordered_kv()
        fk, fv = at.cached_kv_ref(full)
        np.testing.assert_array_equal(rk, fk[hi - n : hi])
        np.testing.assert_array_equal(rv, fv[hi - n : hi])
        q = rng.standard_normal((4, 8)).astype(np.float32)  # decode reads the slots in any order
        window_ref = at.window_prefill_attention_ref(q[None], fk[:hi], fv[:hi], 5)[0]
        assert_within(at.decode_attention(q, ring), window_ref, FAST_VS_REF_ABS_TOL, "decode")
    rk, _ = ring.roundtrip(k[:2], v[:2])
    ring.reset()
    ring.append(k[:2], v[:2])
    np.testing.assert_array_equal(ring.ordered_kv()[0], rk)  # roundtrip: what the cache returns
    assert at.KVCache(4, 2, 8, dtype, window=9).window == 0  # a window past the context: no ring


@pytest.mark.parametrize("dtype", ["fp16", "int8"])
def test_prefill_over_a_ring_cache_is_right_or_refused(dtype):
    """A ring's slots are in position order until it wraps: prefill over it is windowed causal
    attention then. After it has dropped tokens, one query token still sees every kept key, but
    T > 1 queries are refused (they were slot-order attention over a rotated ring: wrong by ~2)."""
    rng = np.random.default_rng(11)
    window, n_kv, d = 6, 1, 16
    k = rng.standard_normal((10, n_kv, d)).astype(np.float32)
    v = rng.standard_normal((10, n_kv, d)).astype(np.float32)
    ring = at.KVCache(64, n_kv, d, dtype, window=window)
    tol = FP16_VS_FLOAT_ABS_TOL if dtype == "fp16" else INT8_VS_FLOAT_ABS_TOL
    ring.append(k[:6], v[:6])  # exactly full, nothing dropped: T = 4 is fine
    q = rng.standard_normal((4, 2, d)).astype(np.float32)
    got = at.prefill_attention(q, ring)
    assert_within(got, at.prefill_attention_ref(q, ring), FAST_VS_REF_ABS_TOL, "fast vs ref")
    want = at.window_prefill_attention_ref(q, k[:6], v[:6], window)
    assert_within(got, want, tol, "ring before it wraps")
    ring.append(k[6:9], v[6:9])  # positions 0..2 dropped, slots rotated
    one = q[:1]
    want = at.window_prefill_attention_ref(one, k[:9], v[:9], window)
    assert_within(at.prefill_attention(one, ring), want, tol, "one token after the wrap")
    for run in (at.prefill_attention, at.prefill_attention_ref):
        with pytest.raises(ValueError, match=r"has dropped 3 of its 9"):
            run(q, ring)


def test_the_cached_kernel_computes_what_a_fresh_compile_does():
    """`_prefill_attention` as this process got it (from Numba's cache after the first run)
    against the same Python compiled afresh here: the same bits. With a fastmath softmax sum,
    LLVM chose the order per compile and the cached kernel differed in whole rows (found by
    hashing outputs; `_fixed_sum` now fixes the order)."""
    import numba

    rng = np.random.default_rng(3)
    q = rng.standard_normal((40, 9, 64)).astype(np.float32)
    k = rng.standard_normal((120, 3, 64)).astype(np.float32)
    v = rng.standard_normal((120, 3, 64)).astype(np.float32)
    fresh = numba.njit(parallel=True, fastmath=True)(at._prefill_attention.py_func)
    np.testing.assert_array_equal(at._prefill_attention(q, k, v, 0), fresh(q, k, v, 0))
