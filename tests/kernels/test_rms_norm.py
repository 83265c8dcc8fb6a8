"""RMSNorm and the fused residual-add + RMSNorm: kernel vs NumPy twin on random rows, zeros,
odd shapes, large values, and bad input (NaN/Inf named, shape mismatch)."""

import numpy as np
import pytest

from harmony_ref.kernels import norm
from harmony_ref.kernels._testing import assert_within

# float32 sum of squares in a different order (kernel: sequential; numpy: pairwise), |y| ~ 1-4.
RMS_ABS_TOL = 2e-5
RMS_REL_TOL = 2e-6


@pytest.mark.parametrize("shape", [(1, 64), (5, 576), (3, 7), (2, 3, 33), (1,)])
def test_rms_norm_matches_ref(shape):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32) * 3
    w = rng.standard_normal(shape[-1]).astype(np.float32)
    ref = norm.rms_norm_ref(x, w, 1e-5)
    got = norm.rms_norm(x, w, 1e-5)
    assert got.shape == x.shape and got.dtype == np.float32
    assert_within(got, ref, RMS_ABS_TOL + RMS_REL_TOL * np.abs(ref), "rms_norm vs ref")
    # the definition, in float64
    x64 = x.astype(np.float64)
    exact = x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-5) * w
    assert_within(ref, exact, 1e-5 * (1 + np.abs(exact)), "ref vs float64 definition")


def test_add_rms_norm_matches_ref_and_leaves_inputs():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 96)).astype(np.float32)
    d = rng.standard_normal((4, 96)).astype(np.float32)
    w = rng.standard_normal(96).astype(np.float32)
    x0, d0 = x.copy(), d.copy()
    s, y = norm.add_rms_norm(x, d, w, 1e-6)
    s_ref, y_ref = norm.add_rms_norm_ref(x, d, w, 1e-6)
    np.testing.assert_array_equal(s, s_ref)  # one float32 add each: bit-identical
    assert_within(y, y_ref, RMS_ABS_TOL + RMS_REL_TOL * np.abs(y_ref), "add_rms_norm vs ref")
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(d, d0)


def test_in_place_row_kernel_updates_the_residual():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 32)).astype(np.float32)
    d = rng.standard_normal((2, 32)).astype(np.float32)
    w = np.ones(32, np.float32)
    expected = x + d
    out = np.empty_like(x)
    norm.add_rms_norm_rows(x, d, w, np.float32(1e-5), out)
    np.testing.assert_array_equal(x, expected)
    assert_within(out, norm.rms_norm_ref(expected, w), RMS_ABS_TOL, "rows kernel")


def test_zero_rows_give_zero_not_nan():
    x = np.zeros((3, 16), np.float32)
    y = norm.rms_norm(x, np.ones(16, np.float32), 1e-5)
    np.testing.assert_array_equal(y, 0)
    np.testing.assert_array_equal(norm.rms_norm_ref(x, np.ones(16, np.float32)), 0)


def test_large_values_do_not_overflow_at_float32_range_edge():
    x = np.full((1, 8), 1e18, np.float32)  # x^2 = 1e36 < float32 max 3.4e38
    y = norm.rms_norm(x, np.ones(8, np.float32), 1e-5)
    assert_within(y, np.ones((1, 8)), 1e-5, "constant row normalises to 1")


def test_rows_whose_float32_statistics_overflow_are_refused():
    """A row of 8 x 1e19 (sum of squares 8e38 > float32 max): the kernel returned NaN, the twin
    0, float64 1. Now both refuse it naming the row; 1e18 (above) is still normalised."""
    x = np.ones((3, 8), np.float32)
    x[1] = 1e19
    w = np.ones(8, np.float32)
    for run in (
        lambda: norm.rms_norm(x, w),
        lambda: norm.rms_norm_ref(x, w),
        lambda: norm.add_rms_norm(x / 2, x / 2, w),
        lambda: norm.add_rms_norm_ref(x / 2, x / 2, w),
        lambda: norm.rms_norm_heads(x.reshape(3, 1, 8), w),
        lambda: norm.rms_norm_heads_ref(x.reshape(3, 1, 8), w),
    ):
        with pytest.raises(ValueError, match=r"x row 1 .*statistics .* overflow"):
            run()


@pytest.mark.parametrize("eps", [0.0, -1e-5, float("nan"), 1e-50])
def test_eps_must_be_positive(eps):
    """eps 0 (or 1e-50, 0 in float32) on a zero row: ZeroDivisionError from the kernel, NaN
    from the twin; a negative or NaN eps: NaN. Now a ValueError naming eps."""
    x, w = np.zeros((2, 8), np.float32), np.ones(8, np.float32)
    for run in (norm.rms_norm, norm.rms_norm_ref, norm.rms_norm_heads, norm.rms_norm_heads_ref):
        with pytest.raises(ValueError, match="eps must be a finite number > 0"):
            run(x.reshape(2, 1, 8) if "heads" in run.__name__ else x, w, eps)
    for run in (norm.layer_norm, norm.layer_norm_ref):
        with pytest.raises(ValueError, match="eps must be a finite number > 0"):
            run(x, w, w, eps)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_is_named(bad):
    x = np.ones((2, 8), np.float32)
    x[1, 3] = bad
    with pytest.raises(ValueError, match=r"x\[1, 3\]"):
        norm.rms_norm(x, np.ones(8, np.float32))
    with pytest.raises(ValueError, match=r"x\[1, 3\]"):
        norm.rms_norm_ref(x, np.ones(8, np.float32))


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="len\\(weight\\)"):
        norm.rms_norm(np.ones((2, 8), np.float32), np.ones(7, np.float32))
    with pytest.raises(ValueError, match="delta"):
        norm.add_rms_norm(np.ones((2, 8)), np.ones((2, 9)), np.ones(8))


# ----------------------------------------------------------------------------------------------
# Per-head RMSNorm (Qwen3's and Gemma 3's q_norm / k_norm) on the fused q|k|v rows, in place


@pytest.mark.parametrize("t,heads,hd", [(1, 1, 2), (3, 4, 16), (5, 3, 33), (2, 8, 256)])
def test_head_norm_matches_ref_and_touches_only_its_heads(t, heads, hd):
    rng = np.random.default_rng(t * heads + hd)
    x = rng.standard_normal((t, heads, hd)).astype(np.float32) * 5
    w = (1 + 0.1 * rng.standard_normal(hd)).astype(np.float32)
    assert_within(
        norm.rms_norm_heads(x, w, 1e-6), norm.rms_norm_heads_ref(x, w, 1e-6), RMS_ABS_TOL, "heads"
    )
    row = rng.standard_normal((t, (heads + 2) * hd)).astype(np.float32)  # q heads, then 2 more
    before = row.copy()
    norm.rms_norm_heads_rows(row, 1, heads, hd, w, np.float32(1e-6))  # heads 1 .. heads
    np.testing.assert_array_equal(row[:, :hd], before[:, :hd])
    np.testing.assert_array_equal(row[:, (heads + 1) * hd :], before[:, (heads + 1) * hd :])
    want = norm.rms_norm_heads_ref(before[:, hd : (heads + 1) * hd].reshape(t, heads, hd), w, 1e-6)
    assert_within(row[:, hd : (heads + 1) * hd].reshape(t, heads, hd), want, RMS_ABS_TOL, "rows")
