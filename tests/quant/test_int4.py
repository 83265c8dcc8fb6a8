"""INT4 group-wise format: round trip, packing order, fast == reference, bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from harmony_ref.quant.int4 import (
    Int4Tensor,
    dequantize_int4,
    quantize_int4,
    quantize_int4_ref,
    unpack_int4,
)

# Proven bound (see harmony_ref/quant/int4.py): |w - w'| <= s/2 for the stored step s, because the
# stored scale is rounded up and the zero point keeps the group inside [-8, 7]. Float32 arithmetic
# in w/s + zp (|.| <= ~136 steps) and in (q - zp) * s adds at most a few ulps, covered by:
ROUNDTRIP_REL_SLACK = 2.0**-16  # of the step, for the rounding decision made in float32
ROUNDTRIP_ABS_SLACK = 2.0**-22  # of max(|w|, s), for the float32 product


# Compile (or load from cache) the Numba kernels once, before hypothesis times examples
# against its default 200 ms deadline.
quantize_int4(np.ones((2, 4), np.float32), 2)
quantize_int4(np.ones((2, 4), np.float32), 2, "sym")

AWKWARD_N = [1, 3, 17, 33]


def _steps(t: Int4Tensor) -> np.ndarray:
    return np.repeat(t.scale.astype(np.float32), t.group_size, axis=1)


def assert_within_half_step(w, t):
    w = np.asarray(w, dtype=np.float32)
    w_hat = dequantize_int4(t)
    s = _steps(t).astype(np.float64)
    err = np.abs(w_hat.astype(np.float64) - w)
    bound = s / 2 * (1 + ROUNDTRIP_REL_SLACK) + ROUNDTRIP_ABS_SLACK * np.maximum(np.abs(w), s)
    constant = _constant_mask(w, t.group_size)
    # A constant group is exact up to storing |c| in the scale dtype (float16 rounding).
    c_err = np.abs(w.astype(t.scale.dtype).astype(np.float64) - w)
    bound = np.where(constant, c_err, bound)
    bad = err > bound
    if bad.any():
        i, k = np.argwhere(bad)[0]
        raise AssertionError(
            f"round trip at [{i}, {k}]: w={w[i, k]!r} got={w_hat[i, k]!r} "
            f"err={err[i, k]:.3g} > bound={bound[i, k]:.3g} (step {s[i, k]:.3g})"
        )
    assert np.isfinite(w_hat).all()


def _constant_mask(w, g):
    n, k = w.shape
    grp = w.reshape(n, k // g, g)
    const = grp.min(axis=2) == grp.max(axis=2)
    return np.repeat(const, g, axis=1)


def assert_same(a: Int4Tensor, b: Int4Tensor):
    assert a.shape == b.shape and a.group_size == b.group_size and a.scheme == b.scheme
    for name in ("packed", "scale", "zero_point"):
        x, y = getattr(a, name), getattr(b, name)
        if x is None:
            assert y is None
            continue
        assert x.dtype == y.dtype, name
        if not np.array_equal(x.view(np.uint8), y.view(np.uint8)):
            idx = np.argwhere(x.view(np.uint8) != y.view(np.uint8))[0]
            raise AssertionError(
                f"{name} differs at {tuple(idx)}: ref {x[tuple(idx)]} fast {y[tuple(idx)]}"
            )


# -- hand-worked bytes -------------------------------------------------------------------------


def test_packing_order_hand_worked():
    # One group of 16 values 0..15, asym: min 0, max 15 -> step 1 (exact in float16),
    # zp = round(-0 / 1) - 8 = -8, q = w - 8 = -8..7.
    w = np.arange(16, dtype=np.float32)[None, :]
    t = quantize_int4_ref(w, group_size=16)
    assert t.scale[0, 0] == 1.0 and t.zero_point[0, 0] == -8
    # q[0] = -8 -> nibble 0x8 (high), q[1] = -7 -> 0x9 (low): byte 0x89. q[14]=6 -> 0x6, q[15]=7 -> 0x7.
    assert t.packed[0, 0] == 0x89
    assert t.packed[0, 7] == 0x67
    assert list(t.packed[0]) == [0x89, 0xAB, 0xCD, 0xEF, 0x01, 0x23, 0x45, 0x67]
    np.testing.assert_array_equal(dequantize_int4(t), w)


def test_sym_hand_worked():
    # max|w| = 7 -> step 1, q = w; -3 -> 0xD, 5 -> 0x5.
    w = np.array([[-3.0, 5.0, 7.0, -7.0]], dtype=np.float32)
    t = quantize_int4_ref(w, group_size=4, scheme="sym")
    assert t.zero_point is None and t.scale[0, 0] == 1.0
    assert list(t.packed[0]) == [0xD5, 0x79]
    np.testing.assert_array_equal(dequantize_int4(t), w)


def test_unpack_sign_extension_all_nibbles():
    packed = np.arange(256, dtype=np.uint8)[None, :]
    q = unpack_int4(packed)
    assert q.min() == -8 and q.max() == 7
    assert q[0, 2 * 0x8F] == -8 and q[0, 2 * 0x8F + 1] == -1


# -- round trip ---------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["asym", "sym"])
@pytest.mark.parametrize("group", [32, 64, 128, 48, 2])
@pytest.mark.parametrize("n", AWKWARD_N)
@pytest.mark.parametrize("groups", [1, 3])  # K = group, and K = 3 groups
def test_roundtrip_random(scheme, group, n, groups):
    rng = np.random.default_rng(n * 1000 + group + groups)
    w = (rng.standard_normal((n, group * groups)) * rng.uniform(0.001, 5)).astype(np.float32)
    t = quantize_int4(w, group, scheme)
    assert_within_half_step(w, t)
    assert_same(quantize_int4_ref(w, group, scheme), t)


finite_f32 = st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False, width=32)


@st.composite
def weight_matrices(draw):
    group = draw(st.sampled_from([2, 4, 8, 32]))
    n = draw(st.integers(1, 4))
    groups = draw(st.integers(1, 3))
    kind = draw(st.sampled_from(["any", "positive", "negative", "constant", "tiny_span"]))
    w = draw(arrays(np.float32, (n, group * groups), elements=finite_f32))
    if kind == "positive":
        w = np.abs(w) + draw(st.floats(0.0, 1e3, width=32))
    elif kind == "negative":
        w = -np.abs(w) - draw(st.floats(0.0, 1e3, width=32))
    elif kind == "constant":
        w = np.full_like(w, draw(finite_f32))
    elif kind == "tiny_span":
        w = draw(finite_f32) + w * np.float32(1e-6)
    return w.astype(np.float32), group


@given(weight_matrices(), st.sampled_from(["asym", "sym"]))
def test_roundtrip_property(wg, scheme):
    w, group = wg
    t = quantize_int4(w, group, scheme)
    assert_within_half_step(w, t)
    assert_same(quantize_int4_ref(w, group, scheme), t)


@given(weight_matrices())
@settings(max_examples=50)
def test_roundtrip_property_float32_scale(wg):
    w, group = wg
    t = quantize_int4(w, group, "asym", scale_dtype=np.float32)
    assert_within_half_step(w, t)


@pytest.mark.parametrize("c", [0.0, 1.0, -0.375, 0.1, -3.0e-3, 1000.5])
@pytest.mark.parametrize("scheme", ["asym", "sym"])
def test_constant_group_exact(c, scheme):
    w = np.full((3, 64), c, dtype=np.float32)
    exact32 = dequantize_int4(quantize_int4(w, 32, scheme, scale_dtype=np.float32))
    np.testing.assert_array_equal(exact32, w)  # float32 scale: exact for any c
    w16 = np.float32(np.float16(c))  # float16 scale: exact whenever c is a float16 value
    got = dequantize_int4(quantize_int4(np.full((3, 64), w16), 32, scheme))
    np.testing.assert_array_equal(got, np.full((3, 64), w16))


def test_one_signed_groups_keep_zero_point_in_int8():
    rng = np.random.default_rng(7)
    pos = (100 + rng.random((5, 64)) * 0.1).astype(np.float32)
    neg = -pos
    for w in (pos, neg):
        t = quantize_int4(w, 32)
        assert t.zero_point.dtype == np.int8
        assert_within_half_step(w, t)
        # and the widened step is still far finer than a symmetric one would be
        assert (t.scale.astype(np.float32) < np.abs(w).max() / 7 / 10).all()


def test_float16_and_float64_inputs():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 64))
    a = quantize_int4(w.astype(np.float64))
    b = quantize_int4(w.astype(np.float32))
    assert_same(a, b)
    quantize_int4(w.astype(np.float16))


# -- storage ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "group,expected_bits", [(32, 4 + 24 / 32), (64, 4 + 24 / 64), (128, 4 + 24 / 128)]
)
def test_bits_per_weight_is_true_storage(group, expected_bits):
    w = np.random.default_rng(0).standard_normal((16, 1024)).astype(np.float32)
    t = quantize_int4(w, group)
    true_bytes = t.packed.nbytes + t.scale.nbytes + t.zero_point.nbytes
    assert t.nbytes == true_bytes
    assert t.bits_per_weight == pytest.approx(8 * true_bytes / w.size)
    assert t.bits_per_weight == pytest.approx(expected_bits)  # float16 scale + int8 zp per group
    sym = quantize_int4(w, group, "sym")
    assert sym.bits_per_weight == pytest.approx(4 + 16 / group)


def test_large_matrix_fast_equals_ref():
    w = (np.random.default_rng(11).standard_normal((257, 4096)) * 0.02).astype(np.float32)
    for scheme in ("asym", "sym"):
        assert_same(quantize_int4_ref(w, 128, scheme), quantize_int4(w, 128, scheme))


# -- bad input ----------------------------------------------------------------------------------


def test_k_not_multiple_of_group():
    with pytest.raises(ValueError, match=r"K = 48 .*group_size = 32"):
        quantize_int4(np.ones((2, 48), np.float32), 32)


def test_not_2d():
    with pytest.raises(ValueError, match=r"2-D .*\(64,\)"):
        quantize_int4(np.ones(64, np.float32))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e39, -1e300])
def test_nan_inf_names_first_index(bad):
    """NaN / Inf, and a finite float64 beyond float32 (it was cast to inf, then reported as a
    float16 scale overflow with the advice to use float32 scales)."""
    w = np.ones((3, 64), np.float64)
    w[2, 40] = bad
    w[2, 50] = bad
    with pytest.raises(ValueError, match=r"w\[2, 40\]"):
        quantize_int4(w)
    with pytest.raises(ValueError, match=r"w\[2, 40\]"):
        quantize_int4_ref(w)


@pytest.mark.parametrize("dtype", [np.int32, np.complex64, np.bool_, object])
def test_unsupported_dtype(dtype):
    with pytest.raises(ValueError, match="unsupported dtype"):
        quantize_int4(np.ones((2, 64), dtype=dtype))


def test_bad_scheme_group_and_overflow():
    with pytest.raises(ValueError, match="scheme"):
        quantize_int4(np.ones((2, 64), np.float32), 32, "nf4")
    with pytest.raises(ValueError, match="group_size"):
        quantize_int4(np.ones((2, 64), np.float32), 0)
    w = np.zeros((1, 32), np.float32)
    w[0, 0] = 3e6
    with pytest.raises(ValueError, match=r"group \(0, 0\).*overflows float16"):
        quantize_int4(w)
    assert_within_half_step(w, quantize_int4(w, scale_dtype=np.float32))


@pytest.mark.parametrize("scheme", ["asym", "sym"])
@pytest.mark.parametrize("scale_dtype", [np.float16, np.float32])
def test_subnormal_groups_keep_a_nonzero_step(scheme, scale_dtype):
    w = np.array([[1e-45, 3e-45, 0.0, -1e-45]], dtype=np.float32)
    t = quantize_int4(w, 4, scheme, scale_dtype=scale_dtype)
    assert (t.scale > 0).all()
    assert_within_half_step(w, t)
    assert_same(quantize_int4_ref(w, 4, scheme, scale_dtype=scale_dtype), t)


def test_quant_benchmarks_are_well_formed():
    import inspect

    import bench.bench_quant as bq

    classes = [c for _, c in inspect.getmembers(bq, inspect.isclass) if c.__module__ == bq.__name__]
    assert {"QuantizeInt4", "QuantizeInt8", "QuantizeLlama7BMlp"} <= {c.__name__ for c in classes}
    for cls in classes:
        params = getattr(cls, "params", ())
        assert len(params) == len(getattr(cls, "param_names", ())), cls.__name__
        assert any(n.startswith(("time_", "track_")) for n in dir(cls)), cls.__name__
    bench = bq.QuantizeInt4()
    bench.setup(128, "asym")
    assert bench.track_bits_per_weight(128, "asym") == pytest.approx(4 + 24 / 128)
    fast, ref = bq._quantizers("int4-g32-sym")
    w = np.random.default_rng(5).standard_normal((3, 64)).astype(np.float32)
    assert_same(fast(w), ref(w))
    assert fast(w).format_name == "int4-g32-sym"


def test_quantize_report_rows_come_from_real_arrays(capsys):
    from harmony_ref.cli import main
    from harmony_ref.eval.formats import format_report

    df = format_report(rows=4, cols=256, seed=1).set_index("format")
    assert (
        df.loc["fp16", "bits_per_weight"] == 16.0
        and df.loc["int8", "bits_per_weight"] == 8 + 32 / 256
    )
    for group in (32, 64, 128):
        assert df.loc[f"int4-g{group}-asym", "bits_per_weight"] == pytest.approx(4 + 24 / group)
        assert df.loc[f"int4-g{group}-sym", "bits_per_weight"] == pytest.approx(4 + 16 / group)
    assert (df["quantize_ms"] > 0).all(), "every quantize time is measured, fp16's cast included"
    assert np.allclose(df["weights_mb"] * 1e6 * 8 / (4 * 256), df["bits_per_weight"], rtol=1e-12)
    assert main(["quantize-report", "--cols", "100"]) == 2
    assert "--cols 100" in capsys.readouterr().err
