"""LayerNorm + bias + GELU: fused and separate kernels vs NumPy twins, the tanh approximation,
awkward widths, constant rows, bad input."""

import numpy as np
import pytest

from harmony_ref.kernels import norm as nm
from harmony_ref.kernels._testing import assert_within

# The kernels' rational tanh vs np.tanh in float64 (measured max ~2.6e-7 on a dense grid).
TANH_APPROX_ABS_TOL = 1e-6
# The kernels' exp32 (Cephes expf) vs float64 exp, relative, on float32's normal range (measured
# max 0.67 ulp = 8.0e-8 on a dense grid of [-100, 100]): one float32 ulp.
EXP32_REL_TOL = 2.0**-23
# Fast (fastmath float32 reductions, rational tanh) vs the NumPy twin (float32, np.tanh), on
# outputs of order |gamma| * few: absolute plus relative.
NORM_ABS_TOL = 2e-5
NORM_REL_TOL = 2e-5

WIDTHS = [1, 3, 17, 33, 127, 4096]


def _params(d, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((5, d)) * 3 + rng.uniform(-2, 2, (5, 1))).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, d).astype(np.float32)
    beta = rng.standard_normal(d).astype(np.float32) * 0.3
    bias = rng.standard_normal(d).astype(np.float32) * 0.3
    return x, gamma, beta, bias


def _close(got, ref, what):
    assert_within(got, ref, NORM_ABS_TOL + NORM_REL_TOL * np.abs(ref), what)


def test_tanh_approximation_bound():
    v = np.concatenate([np.linspace(-12, 12, 400_001), [0.0, 1e-30, -1e-30, 7.9, -7.9, 50, -50]])
    v = v.astype(np.float32)
    assert_within(nm.tanh_approx(v), np.tanh(v.astype(np.float64)), TANH_APPROX_ABS_TOL, "tanh")


def test_exp32_bound_and_edges():
    v = np.concatenate(
        [np.linspace(nm.EXP_LO, nm.EXP_HI, 400_001), np.random.default_rng(3).uniform(-5, 5, 999)]
    ).astype(np.float32)
    ref = np.exp(v.astype(np.float64))
    assert_within(nm.exp_approx(v), ref, EXP32_REL_TOL * ref, "exp32")
    edges = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 89.0, -88.0, 1000.0, -1000.0])
    got = nm.exp_approx(edges)
    np.testing.assert_array_equal(got[:4], [1.0, 1.0, np.inf, 0.0])
    assert np.isnan(got[4])
    np.testing.assert_array_equal(got[5:], [np.inf, 0.0, np.inf, 0.0])  # past float32's normals


@pytest.mark.parametrize("d", WIDTHS)
def test_fused_and_separate_match_ref(d):
    x, gamma, beta, bias = _params(d, seed=d)
    ref = nm.norm_bias_gelu_ref(x, gamma, beta, bias)
    _close(nm.norm_bias_gelu(x, gamma, beta, bias), ref, f"fused d={d}")
    ln = nm.layer_norm(x, gamma, beta)
    _close(ln, nm.layer_norm_ref(x, gamma, beta), f"layer_norm d={d}")
    biased = nm.bias_add(ln, bias)
    np.testing.assert_array_equal(biased, nm.bias_add_ref(ln, bias))
    _close(nm.gelu(biased), nm.gelu_ref(biased), f"gelu d={d}")
    _close(nm.gelu(biased), ref, f"separate chain d={d}")


def test_shapes_1d_3d_and_eps():
    x, gamma, beta, bias = _params(64, seed=1)
    x3 = np.stack([x, x[::-1]])  # (2, 5, 64)
    got = nm.norm_bias_gelu(x3, gamma, beta, bias, eps=1e-3)
    assert got.shape == x3.shape and got.dtype == np.float32
    _close(got, nm.norm_bias_gelu_ref(x3, gamma, beta, bias, eps=1e-3), "3-D input")
    _close(
        nm.norm_bias_gelu(x[0], gamma, beta, bias),
        nm.norm_bias_gelu_ref(x[0], gamma, beta, bias),
        "1-D",
    )


def test_constant_row_gives_gelu_of_shift():
    _, gamma, beta, bias = _params(32, seed=2)
    x = np.full((2, 32), 3.25, dtype=np.float32)  # variance 0: normalised row is exactly 0
    got = nm.norm_bias_gelu(x, gamma, beta, bias)
    _close(got, np.broadcast_to(nm.gelu_ref(beta + bias), (2, 32)), "constant row")


def test_large_inputs_stay_finite():
    x, gamma, beta, bias = _params(256, seed=3)
    got = nm.gelu(x * 1e4)
    assert np.isfinite(got).all()
    _close(got, nm.gelu_ref(x * 1e4), "gelu of large values")


def test_rows_whose_float32_statistics_overflow_are_refused():
    """A row of +-1e19 (squares about the mean sum to 1.6e40) and one of 3e37 (its float32 sum
    overflows): the kernels returned NaN, the twins beta (gelu(beta + bias)), float64 O(1)
    values. Now every LayerNorm entry refuses them naming the row."""
    x, gamma, beta, bias = _params(16, seed=5)
    for row, big in ((1, 1e19 * np.where(np.arange(16) % 2, 1, -1)), (2, np.full(16, 3e37))):
        bad = x.copy()
        bad[row] = big
        for run, args in (
            (nm.layer_norm, (gamma, beta)),
            (nm.layer_norm_ref, (gamma, beta)),
            (nm.norm_bias_gelu, (gamma, beta, bias)),
            (nm.norm_bias_gelu_ref, (gamma, beta, bias)),
        ):
            with pytest.raises(ValueError, match=rf"x row {row} .*statistics .* overflow"):
                run(bad, *args)


def test_bad_inputs_raise_value_errors():
    x, gamma, beta, bias = _params(16, seed=4)
    bad = x.copy()
    bad[2, 3] = np.inf
    with pytest.raises(ValueError, match=r"x\[2, 3\] = inf is not finite"):
        nm.norm_bias_gelu(bad, gamma, beta, bias)
    with pytest.raises(ValueError, match=r"x\[2, 3\] = 1e\+39 overflows float32"):
        nm.layer_norm(np.where(np.isinf(bad), 1e39, bad.astype(np.float64)), gamma, beta)
    with pytest.raises(ValueError, match=r"last dim 16 does not match len\(gamma\) = 15"):
        nm.norm_bias_gelu(x, gamma[:15], beta, bias)
    with pytest.raises(ValueError, match=r"len\(bias\) = 17"):
        nm.bias_add(x, np.ones(17, np.float32))
    with pytest.raises(ValueError, match="dtype int32"):
        nm.gelu(np.ones((2, 2), np.int32))
    with pytest.raises(ValueError, match=r"beta must have 1 dims"):
        nm.layer_norm(x, gamma, beta[None])
