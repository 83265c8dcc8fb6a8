"""The static activation quantizer (quant/activations.py), by hypothesis: the Numba path equals
the NumPy twin bit for bit (and its block sums are exact), a value inside the calibrated range
comes back within half a step, a value beyond it saturates at +-127 steps, zero stays zero; the
observer's scales cover what it saw; bad scales are refused."""

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from harmony_ref.quant.activations import (
    ACT_LEVELS,
    ZERO_CHANNEL_SCALE,
    AbsMaxObserver,
    quantize_static,
    quantize_static_ref,
    scales_from_amax,
)

# Compile (or load from cache) the Numba quantizer before hypothesis times examples.
quantize_static(np.zeros((1, 32), np.float32), np.ones(32, np.float32), 32)

finite = st.floats(-1e4, 1e4, allow_nan=False, width=32)
GRANULARITY = st.sampled_from(["per-tensor", "per-channel"])


@st.composite
def activations(draw):
    m = draw(st.integers(1, 6))
    block = draw(st.sampled_from([4, 8, 32]))
    k = block * draw(st.integers(1, 4))
    x = draw(arrays(np.float32, (m, k), elements=finite))
    return x, block


@settings(max_examples=150, deadline=None)
@given(activations(), GRANULARITY, st.floats(0.05, 2.0))
def test_fast_equals_ref_and_half_step(case, granularity, coverage):
    x, block = case
    obs = AbsMaxObserver(x.shape[1])
    obs.update(x * np.float32(coverage))  # coverage < 1: part of x lies beyond the range
    scale = obs.scales(granularity)
    xq, xsum = quantize_static(x, scale, block)
    ref = quantize_static_ref(x, scale)
    assert xq.dtype == np.int8 and (xq == ref).all()
    sums = ref.astype(np.int64).reshape(x.shape[0], -1, block).sum(axis=2)
    assert (xsum == sums).all()
    assert np.abs(ref.astype(np.int32)).max(initial=0) <= ACT_LEVELS
    step = scale[None, :].astype(np.float64)
    limit = ACT_LEVELS * step
    x64 = x.astype(np.float64)
    back = ref.astype(np.float64) * step
    inside = np.abs(x64) <= limit * (1 - 1e-6)
    # half a step, plus float32 rounding of x / scale
    err = np.abs(back - x64) - step * (0.5 + 1e-5)
    assert (err[inside] <= 0).all()
    beyond = np.abs(x64) > limit * (1 + 1e-6)
    assert (np.abs(ref[beyond].astype(np.int32)) == ACT_LEVELS).all()
    assert (np.sign(ref[beyond]) == np.sign(x[beyond])).all()
    assert (ref[x == 0] == 0).all()


@given(arrays(np.float32, (5, 8), elements=finite), GRANULARITY)
@example(np.full((5, 8), 1e-45, np.float32), "per-tensor")  # found by hypothesis: 1e-45 / 127 == 0
def test_observer_scales_cover_what_it_saw(x, granularity):
    obs = AbsMaxObserver(8)
    obs.update(x[:2])
    obs.update(x[2:])
    s = obs.scales(granularity)
    assert s.shape == (8,) and (s > 0).all()
    amax = np.abs(x).max(axis=0) if granularity == "per-channel" else np.abs(x).max()
    want = (np.float32(amax) / np.float32(127)).astype(np.float32)
    # zero, or subnormal enough that max|x| / 127 underflows: a zero channel's scale
    want = np.where(want > 0, want, np.float32(ZERO_CHANNEL_SCALE / 127))
    np.testing.assert_array_equal(s, np.broadcast_to(want, (8,)))
    q = quantize_static_ref(x, s)
    assert np.abs(q.astype(np.int32)).max() <= ACT_LEVELS  # nothing it saw saturates badly
    if granularity == "per-tensor":
        assert (s == s[0]).all()


def test_zero_channel_and_errors():
    import pytest

    s = scales_from_amax(np.array([0.0, 2.54], np.float32), "per-channel")
    assert s[0] == np.float32(ZERO_CHANNEL_SCALE / 127) and s[1] == np.float32(0.02)
    obs = AbsMaxObserver(4)
    with pytest.raises(ValueError, match="no calibration"):
        obs.scales("per-tensor")
    with pytest.raises(ValueError, match="NaN"):
        obs.update(np.array([[1.0, np.nan, 0.0, 0.0]], np.float32))
    with pytest.raises(ValueError, match="granularity"):
        scales_from_amax(np.ones(4, np.float32), "per-row")
