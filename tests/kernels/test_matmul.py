"""W4/W8 matmul: fast == NumPy twin (same integer arithmetic), error against the float32 product
of the original weights, awkward shapes, prepared-weight caching, threads, bad input; each on
every path this CPU runs (mm.SUPPORTED_ISAS), and each x86 path bit for bit against the
portable loops (tests/test_kernels_matmul_paths.py)."""

import numba
import numpy as np
import pytest

from harmony_ref.kernels import matmul as mm
from harmony_ref.kernels._testing import assert_within
from harmony_ref.kernels.matmul import (
    matmul_w4,
    matmul_w4_ref,
    matmul_w8,
    matmul_w8_ref,
    prepare_w4,
)
from harmony_ref.quant.int4 import dequantize_int4, quantize_int4
from harmony_ref.quant.int8 import dequantize_int8, quantize_int8

# Fast and ref share every integer; they differ only in float32 rounding of the per-block
# scaled sums (ref sums in float64). Bound: this fraction of sum_k |x_hat_k * w_hat_k|.
FAST_VS_REF_REL = 2.0**-16
# Against x @ W.T with the original float weights: each operand is off by at most half its
# quantization step, so |err| <= |x| @ (step_w / 2) + |W_hat| @ (step_x / 2); plus float slack.
QUANT_BOUND_SLACK_REL = 1e-4
# A looser whole-output statement for Gaussian data at group 32 (measured ~0.06 for W4, ~0.01 W8).
W4_G32_REL_FROB_ERR = 0.12
W8_REL_FROB_ERR = 0.03

AWKWARD_MN = [1, 3, 17, 33, 127]
PATHS = pytest.mark.parametrize("isa", mm.SUPPORTED_ISAS, ids=lambda i: mm.ISA_NAMES[i])


def w4_on(isa):
    """matmul_w4 on path `isa` (weights prepared for it, uncached)."""
    return lambda x, t: mm._matmul_w4(x, mm._prepare_w4(t, isa), isa)


def w8_on(isa):
    return lambda x, t: mm._matmul_w8(x, mm._prepare_w8(t, isa), isa)


def _data(m, n, k, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((n, k)) * 0.05 + rng.uniform(-0.02, 0.02, (n, 1))).astype(np.float32)
    x = (rng.standard_normal((m, k)) * rng.uniform(0.5, 3.0, (m, 1))).astype(np.float32)
    return x, w


def _x_hat(x, block):
    xq, xs = mm.quantize_activations_ref(x, block)
    return xq.astype(np.float32) * np.repeat(xs, block, axis=1), np.repeat(xs, block, axis=1)


def _abs_sum(x_hat, w_hat):
    return np.abs(x_hat).astype(np.float64) @ np.abs(w_hat).T.astype(np.float64)


@pytest.mark.parametrize("scheme", ["asym", "sym"])
@pytest.mark.parametrize(
    "m, n, k, group",
    [
        (1, 127, 256, 32),
        (3, 17, 128, 128),
        (17, 33, 64, 64),
        (33, 3, 96, 32),
        (127, 1, 32, 32),
        (2, 65, 40, 8),
        (5, 130, 48, 48),
    ],
)
@PATHS
def test_matmul_w4_matches_ref(m, n, k, group, scheme, isa):
    x, w = _data(m, n, k, seed=m * 1000 + n)
    t = quantize_int4(w, group, scheme)
    got, ref = w4_on(isa)(x, t), matmul_w4_ref(x, t)
    x_hat, _ = _x_hat(x, mm.act_block_for(group))
    assert_within(
        got, ref, FAST_VS_REF_REL * _abs_sum(x_hat, dequantize_int4(t)), "matmul_w4 vs ref"
    )


@pytest.mark.parametrize(
    "m, n, k", [(1, 127, 256), (3, 17, 96), (17, 33, 64), (33, 1, 32), (127, 3, 32), (4, 5, 30)]
)
@PATHS
def test_matmul_w8_matches_ref(m, n, k, isa):
    x, w = _data(m, n, k, seed=7 + m + n)
    t = quantize_int8(w)
    got, ref = w8_on(isa)(x, t), matmul_w8_ref(x, t)
    block = mm.ACT_BLOCK if k % mm.ACT_BLOCK == 0 else k
    x_hat, _ = _x_hat(x, block)
    assert_within(
        got, ref, FAST_VS_REF_REL * _abs_sum(x_hat, dequantize_int8(t)), "matmul_w8 vs ref"
    )


@pytest.mark.parametrize("group, scheme", [(32, "asym"), (128, "asym"), (32, "sym")])
def test_matmul_w4_error_vs_float_weights_is_bounded(group, scheme):
    x, w = _data(9, 48, 512, seed=3)
    t = quantize_int4(w, group, scheme)
    got = matmul_w4(x, t)
    exact = x.astype(np.float64) @ w.T.astype(np.float64)
    w_hat = dequantize_int4(t)
    step_w = np.repeat(t.scale.astype(np.float64), group, axis=1)  # (N, K)
    _, step_x = _x_hat(x, mm.act_block_for(group))
    bound = np.abs(x) @ (step_w / 2).T + (step_x / 2) @ np.abs(w_hat).T
    bound = bound * (1 + QUANT_BOUND_SLACK_REL) + QUANT_BOUND_SLACK_REL * _abs_sum(x, w)
    assert_within(got, exact, bound, "matmul_w4 vs float32 x @ W.T")
    if group == 32:
        rel = np.linalg.norm(got - exact) / np.linalg.norm(exact)
        assert rel < W4_G32_REL_FROB_ERR, rel


def test_matmul_w8_error_vs_float_weights_is_bounded():
    x, w = _data(9, 48, 512, seed=4)
    t = quantize_int8(w)
    got = matmul_w8(x, t)
    exact = x.astype(np.float64) @ w.T.astype(np.float64)
    _, step_x = _x_hat(x, mm.ACT_BLOCK)
    bound = (
        np.abs(x) @ np.repeat(t.scale[:, None] / 2, 512, axis=1).T
        + (step_x / 2) @ np.abs(dequantize_int8(t)).T
    )
    bound = bound * (1 + QUANT_BOUND_SLACK_REL) + QUANT_BOUND_SLACK_REL * _abs_sum(x, w)
    assert_within(got, exact, bound, "matmul_w8 vs float32 x @ W.T")
    assert np.linalg.norm(got - exact) / np.linalg.norm(exact) < W8_REL_FROB_ERR


@PATHS
@pytest.mark.parametrize("m", [2, 3, 4, 5, 17, 128])
def test_prefill_rows_equal_decode_rows_bit_for_bit(m, isa):
    # The M-blocked prefill kernels must do each row's arithmetic in the M = 1 order exactly.
    x, w = _data(m, 70, 96, seed=11 + m)
    for fast, t in ((w4_on(isa), quantize_int4(w, 32)), (w8_on(isa), quantize_int8(w))):
        got = fast(x, t)
        for i in range(m):
            np.testing.assert_array_equal(
                got[i], fast(x[i], t), err_msg=f"{mm.ISA_NAMES[isa]} row {i}"
            )


@pytest.mark.parametrize("k", [32, 1028])
def test_w8_prefill_block_sums_stay_exact_at_full_scale(k):
    # The W8 prefill kernel sums integer products in float32, exact only below 2**24; one block
    # of 1028 full-scale products (1028 * 127 * 127) is just under it and must still take that path.
    assert k * mm.INT8_MAX_ABS * mm.ACT_MAX_LEVEL < mm.FLOAT_EXACT_INT
    w = np.ones((5, k), np.float32)
    w[1] = -1.0
    w[2, ::3] = -1.0
    x = np.full((4, k), 3.0, np.float32)
    x[3, ::2] = -3.0
    p = mm._prepare_w8(quantize_int8(w), mm.ISA_PORTABLE)
    xq, xs, _ = mm._quantize_activations(x, p.act_block)
    assert p.act_block == (mm.ACT_BLOCK if k == 32 else k) and np.abs(xq).max() == mm.ACT_MAX_LEVEL
    blocked = mm._matmul_w8_tiles_mblock(xq, xs, p.values, p.scale, p.act_block)
    np.testing.assert_array_equal(
        blocked, mm._matmul_w8_tiles(xq, xs, p.values, p.scale, p.act_block)
    )


def test_vector_input_and_zero_blocks():
    x, w = _data(1, 33, 128, seed=5)
    x[0, 32:64] = 0.0  # one all-zero activation block: scale 0, must not divide by zero
    x[0, 100] = 40.0  # and an outlier dominating its block
    t4, t8 = quantize_int4(w, 32), quantize_int8(w)
    for fast, ref, t in ((matmul_w4, matmul_w4_ref, t4), (matmul_w8, matmul_w8_ref, t8)):
        got_vec = fast(x[0], t)
        assert got_vec.shape == (33,)
        np.testing.assert_array_equal(got_vec, fast(x, t)[0])
        np.testing.assert_allclose(got_vec, ref(x[0], t), rtol=1e-5, atol=1e-5)


def test_prepared_weights_are_cached_and_accepted():
    x, w = _data(2, 40, 64, seed=6)
    t = quantize_int4(w, 32)
    p = prepare_w4(t)
    assert prepare_w4(t) is p
    assert p.layout == ("rows" if mm.ISA == mm.ISA_PORTABLE else "x86")
    assert p.packed.size == mm.ROW_TILE * 32
    np.testing.assert_array_equal(matmul_w4(x, p), matmul_w4(x, t))


@PATHS
@pytest.mark.parametrize("m", [3, 8])  # row by row and the row-blocked prefill kernels
def test_thread_count_does_not_change_results(isa, m):
    x, w = _data(m, 200, 256, seed=8)
    t4, t8 = quantize_int4(w, 32), quantize_int8(w)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = w4_on(isa)(x, t4), w8_on(isa)(x, t8)
    finally:
        numba.set_num_threads(before)
    # each output is owned by one thread
    np.testing.assert_array_equal(one[0], w4_on(isa)(x, t4))
    np.testing.assert_array_equal(one[1], w8_on(isa)(x, t8))


def test_bad_inputs_raise_value_errors():
    x, w = _data(2, 8, 64, seed=9)
    t4, t8 = quantize_int4(w, 32), quantize_int8(w)
    bad = x.copy()
    bad[1, 5] = np.nan
    with pytest.raises(ValueError, match=r"x\[1, 5\] = nan is not finite"):
        matmul_w4(bad, t4)
    big = x.astype(np.float64)
    big[1, 7] = -1e39  # finite in float64, inf in float32: was a silent NaN output
    for run in (matmul_w4, matmul_w4_ref):
        with pytest.raises(ValueError, match=r"x\[1, 7\] = -1e\+39 overflows float32"):
            run(big, t4)
    with pytest.raises(ValueError, match=r"x has shape \(2, 63\) but the weights have K = 64"):
        matmul_w4(x[:, :63], t4)
    with pytest.raises(ValueError, match=r"K = 64"):
        matmul_w8(x[:, :32], t8)
    with pytest.raises(ValueError, match="dtype int64"):
        matmul_w8(np.ones((2, 64), dtype=np.int64), t8)
    with pytest.raises(ValueError, match="Int4Tensor"):
        matmul_w4(x, t8)
    with pytest.raises(ValueError, match="dims"):
        matmul_w4(x[None], t4)
    with pytest.raises(ValueError, match="even group_size"):
        matmul_w4(np.ones((1, 6), np.float32), quantize_int4(np.ones((2, 6)) + np.arange(6), 3))
