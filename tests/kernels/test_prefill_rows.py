"""The prefill (`_par`) row kernels between the GEMMs: each against its serial twin (the same
inlined row body, at 1 and 2 threads: the same bits, the norms' too, whose sums of squares run in
one fixed order: kernels/norm.py `_fixed_sum`) and against the op's NumPy `_ref`
within that op's own tolerance, on fresh random rows in the decoders' shapes (odd row counts
included, so that prange's split is uneven); and the KV cache's parallel fp16 store, round trip
and widening against NumPy's astype, exactly."""

import numba
import numpy as np
import pytest

from harmony_ref.kernels import activation as act
from harmony_ref.kernels import attention as attn
from harmony_ref.kernels import norm
from harmony_ref.kernels import rope as rp
from harmony_ref.kernels._testing import assert_within
from tests.kernels.test_activation import GELU_GATE_ABS_TOL, SILU_ABS_TOL, SILU_REL_TOL
from tests.kernels.test_rms_norm import RMS_ABS_TOL, RMS_REL_TOL
from tests.kernels.test_rope import ROPE_ABS_TOL

EPS = np.float32(1e-6)
# (rows, D, heads, kv heads, head_dim, F): Gemma 3 270M's and SmolLM2-135M's layers
SHAPES = [(4, 640, 4, 1, 256, 2048), (7, 576, 9, 3, 64, 1536), (129, 64, 2, 1, 32, 96)]
IDS = ["gemma-4rows", "smollm2-7rows", "small-129rows"]


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    before = numba.get_num_threads()
    numba.set_num_threads(min(request.param, numba.config.NUMBA_NUM_THREADS))
    yield
    numba.set_num_threads(before)


def _rows(rng, t, width, scale=3.0):
    return (rng.standard_normal((t, width)) * scale).astype(np.float32)


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_norms_par_equal_serial_and_match_ref(shape, threads):
    t, d, nh, nkv, hd, _ = shape
    rng = np.random.default_rng()
    x, delta = _rows(rng, t, d), _rows(rng, t, d)
    w = (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)
    got = norm.rms_norm_rows_par(x, w, EPS, np.empty_like(x))
    serial = norm.rms_norm_rows(x, w, EPS, np.empty_like(x))
    np.testing.assert_array_equal(got, serial)
    ref = norm.rms_norm_ref(x, w, float(EPS))
    assert_within(got, ref, RMS_ABS_TOL + RMS_REL_TOL * np.abs(ref), "rms_norm_rows_par")

    xs, xp = x.copy(), x.copy()
    want = norm.add_rms_norm_rows(xs, delta, w, EPS, np.empty_like(x))
    got = norm.add_rms_norm_rows_par(xp, delta, w, EPS, np.empty_like(x))
    np.testing.assert_array_equal(xp, xs)  # the residual stream, updated in place
    np.testing.assert_array_equal(got, want)
    s_ref, y_ref = norm.add_rms_norm_ref(x, delta, w, float(EPS))
    np.testing.assert_array_equal(xp, s_ref)
    assert_within(got, y_ref, RMS_ABS_TOL + RMS_REL_TOL * np.abs(y_ref), "add_rms_norm_rows_par")

    qkv = _rows(rng, t, (nh + 2 * nkv) * hd)
    hw = (1 + 0.1 * rng.standard_normal(hd)).astype(np.float32)
    serial, par = qkv.copy(), qkv.copy()
    norm.rms_norm_heads_rows(serial, nh, nkv, hd, hw, EPS)  # k's heads only
    norm.rms_norm_heads_rows_par(par, nh, nkv, hd, hw, EPS)
    np.testing.assert_array_equal(par, serial)
    k = slice(nh * hd, (nh + nkv) * hd)
    np.testing.assert_array_equal(par[:, : nh * hd], qkv[:, : nh * hd])  # q untouched
    np.testing.assert_array_equal(par[:, k.stop :], qkv[:, k.stop :])  # v untouched
    want = norm.rms_norm_heads_ref(qkv[:, k].reshape(t, nkv, hd), hw, float(EPS))
    assert_within(par[:, k].reshape(t, nkv, hd), want, RMS_ABS_TOL, "rms_norm_heads_rows_par")


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_rope_par_equals_serial_and_matches_ref(shape, threads):
    t, _, nh, nkv, hd, _ = shape
    rng = np.random.default_rng()
    p0 = int(rng.integers(0, 100))
    cos, sin = rp.rope_table(p0 + t, hd, 10000.0)
    qkv = _rows(rng, t, (nh + 2 * nkv) * hd, 1.0)
    serial, par = qkv.copy(), qkv.copy()
    rp.rope_rows(serial, nh + nkv, hd, cos[p0:], sin[p0:])
    rp.rope_rows_par(par, nh + nkv, hd, cos[p0:], sin[p0:])
    np.testing.assert_array_equal(par, serial)
    rot = (nh + nkv) * hd
    np.testing.assert_array_equal(par[:, rot:], qkv[:, rot:])  # v is not rotated
    want = rp.rope_ref(qkv[:, :rot].reshape(t, nh + nkv, hd), np.arange(p0, p0 + t), 10000.0)
    assert_within(par[:, :rot].reshape(t, nh + nkv, hd), want, ROPE_ABS_TOL, "rope_rows_par")


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_gated_activations_par_equal_serial_and_match_ref(shape, threads):
    t, _, _, _, _, f = shape
    rng = np.random.default_rng()
    gu = _rows(rng, t, 2 * f)
    got = act.silu_gate_rows_par(gu, np.empty((t, f), np.float32))
    np.testing.assert_array_equal(got, act.silu_gate_rows(gu, np.empty((t, f), np.float32)))
    ref = act.silu_gate_ref(gu[:, :f], gu[:, f:])
    assert_within(got, ref, SILU_ABS_TOL + SILU_REL_TOL * np.abs(ref), "silu_gate_rows_par")

    got = act.gelu_tanh_gate_rows_par(gu, np.empty((t, f), np.float32))
    want = act.gelu_tanh_gate_rows(gu, np.empty((t, f), np.float32))
    np.testing.assert_array_equal(got, want)
    ref = act.gelu_tanh_gate_ref(gu[:, :f], gu[:, f:])
    assert_within(got, ref, GELU_GATE_ABS_TOL * (1 + np.abs(gu[:, f:])), "gelu_tanh_gate_rows_par")


# ----------------------------------------------------------------------------------------------
# The KV cache's fp16 conversions on prefill rows: NumPy's astype(float16) / astype(float32)
# exactly (the twins), every kind of float32 value


def _awkward_floats(rng, n):
    """Fresh random float32 values over float16's whole range and past it, with the cases a
    rounding can get wrong: exact ties between float16 neighbours (normal and subnormal), the
    overflow edge (65504, 65519.99, 65520), +-0, +-inf, float32 subnormals."""
    mags = np.float32(2.0) ** rng.uniform(-30, 18, n).astype(np.float32)
    x = (mags * rng.choice([-1, 1], n)).astype(np.float32)
    h = rng.integers(0, 0x7BFF, n // 4).astype(np.uint16).view(np.float16).astype(np.float32)
    up = np.nextafter(h.astype(np.float16), np.float16(np.inf)).astype(np.float32)
    ties = ((h.astype(np.float64) + up) / 2).astype(np.float32)  # exact in float32
    edges = np.array(
        [0.0, -0.0, np.inf, -np.inf, 65504, 65519.99, 65520, -65520, 1e-45, 2.0**-24, 2.0**-25,
         3 * 2.0**-26, 6.1e-5, 5.96e-8],
        np.float32,
    )  # fmt: skip
    return np.concatenate([x, ties, -ties, edges]).astype(np.float32)


def test_fp16_conversions_equal_numpy(threads):
    rng = np.random.default_rng()
    x = _awkward_floats(rng, 4000)
    x = np.pad(x, (0, -x.size % 48)).reshape(-1, 48)
    with np.errstate(over="ignore"):  # |x| >= 65520 -> inf, as the kernels give it
        want = x.astype(np.float16)
    np.testing.assert_array_equal(attn.fp16_roundtrip_rows_par(x), want.astype(np.float32))
    dst = np.zeros((x.shape[0] + 3, 48), np.uint16)
    attn.store_fp16_rows_par(x, dst, 5)  # rows 5 .. and wrapped round to 0 .. 1
    np.testing.assert_array_equal(np.roll(dst, -5, axis=0)[: x.shape[0]], want.view(np.uint16))
    np.testing.assert_array_equal(attn.widen_fp16_rows_par(want.view(np.uint16)), want)
    nan = np.full((4, 3), np.nan, np.float32)
    assert np.isnan(attn.fp16_roundtrip_rows_par(nan)).all()


@pytest.mark.parametrize("window", [0, 6])
def test_prefill_store_equals_decode_stores(window, threads):
    """A prefill of 9 rows (parallel conversion; the ring of 6 wraps) leaves the cache as 9
    single-row stores (decode's NumPy path) do, and gives the same K, V back."""
    rng = np.random.default_rng()
    k, v = (rng.standard_normal((2, 9, 3, 16)) * 4).astype(np.float32)
    bulk, rows = attn.KVCache(16, 3, 16, window=window), attn.KVCache(16, 3, 16, window=window)
    rows.store(k[:2], v[:2])  # both start part-filled: the ring's wrap lands mid-call
    bulk.store(k[:2], v[:2])
    for i in range(9):
        rows.store(k[i : i + 1], v[i : i + 1])
    bulk.store(k, v)
    np.testing.assert_array_equal(bulk.k, rows.k)
    np.testing.assert_array_equal(bulk.v, rows.v)
    for got, want in zip(bulk.ordered_kv(), rows.ordered_kv(), strict=True):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(attn.cached_kv(bulk), attn.cached_kv_ref(bulk), strict=True):
        np.testing.assert_array_equal(got, want)
    rk, rv = bulk.roundtrip(k, v)
    np.testing.assert_array_equal(rk, k.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(rv, v.astype(np.float16).astype(np.float32))
