"""INT8 per-channel format: round trip, fast == reference, bad input."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from harmony_ref.quant.int8 import dequantize_int8, quantize_int8, quantize_int8_ref

ROUNDTRIP_REL_SLACK = 2.0**-16
ROUNDTRIP_ABS_SLACK = 2.0**-22


# Compile (or load from cache) the Numba kernels once, before hypothesis times examples
# against its default 200 ms deadline.
quantize_int8(np.ones((2, 2), np.float32))


def assert_within_half_step(w, t):
    w_hat = dequantize_int8(t).astype(np.float64)
    s = t.scale.astype(np.float64)[:, None]
    err = np.abs(w_hat - w)
    bound = s / 2 * (1 + ROUNDTRIP_REL_SLACK) + ROUNDTRIP_ABS_SLACK * np.abs(w)
    assert (err <= bound).all(), f"max err/step {(err / np.maximum(s, 1e-30)).max()}"
    assert np.isfinite(w_hat).all()


def assert_same(a, b):
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.scale.view(np.uint32), b.scale.view(np.uint32))


@given(
    arrays(
        np.float32,
        st.tuples(st.integers(1, 5), st.integers(1, 70)),
        elements=st.floats(-1e6, 1e6, allow_nan=False, width=32),
    )
)
@example(np.array([[1.156e-42]], np.float32))  # a subnormal row: its step rounded down clipped
@example(np.array([[1e-45, -3e-45, 0.0]], np.float32))  # max|row| / 127 underflows to 0
def test_roundtrip_property(w):
    t = quantize_int8(w)
    assert_within_half_step(w, t)
    assert_same(quantize_int8_ref(w), t)


@pytest.mark.parametrize("n,k", [(1, 1), (3, 7), (17, 33), (33, 4096)])
def test_fast_equals_ref(n, k):
    w = np.random.default_rng(n + k).standard_normal((n, k)).astype(np.float32)
    w[0] = 0.0  # an all-zero row: scale 0, no division by zero
    t = quantize_int8(w)
    assert t.scale[0] == 0 and not t.values[0].any()
    assert_same(quantize_int8_ref(w), t)
    assert_within_half_step(w, t)


def test_storage_and_hand_worked():
    w = np.array([[127.0, -63.5, 0.0, 1.0]], dtype=np.float32)
    t = quantize_int8(w)
    assert t.scale[0] == 1.0
    assert list(t.values[0]) == [127, -64, 0, 1]  # -63.5 rounds half to even
    assert t.nbytes == 4 + 4 and t.bits_per_weight == 16.0


@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e39])  # 1e39: float64 past float32 (was NaN)
def test_bad_input(bad):
    w = np.ones((2, 8), np.float64)
    w[1, 3] = bad
    with pytest.raises(ValueError, match=r"w\[1, 3\]"):
        quantize_int8(w)
    with pytest.raises(ValueError, match="2-D"):
        quantize_int8(np.ones((2, 2, 2), np.float32))
    with pytest.raises(ValueError, match="unsupported dtype"):
        quantize_int8(np.ones((2, 2), np.int8))


def test_subnormal_row_keeps_a_nonzero_step():
    # found by hypothesis: 1e-45 / 127 underflows to a zero scale
    w = np.array([[1e-45, -1e-45, 0.0]], dtype=np.float32)
    t = quantize_int8(w)
    assert t.scale[0] > 0
    assert_within_half_step(w, t)
    assert_same(quantize_int8_ref(w), t)


@pytest.mark.parametrize(
    "row",
    [
        np.full(33, 0.1),
        np.full(33, -7.5),
        np.full(33, 0.0),
        100 + np.linspace(0, 0.1, 33),
        -100 - np.linspace(0, 0.1, 33),
    ],
)
def test_constant_and_one_signed_rows(row):
    w = np.stack([row, -row, row * 3]).astype(np.float32)
    t = quantize_int8(w)
    assert_within_half_step(w, t)
    assert_same(quantize_int8_ref(w), t)
