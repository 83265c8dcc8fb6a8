"""RoPE (rotate-half): kernel vs NumPy twin, the rotation's properties (norm preserved, position
0 is the identity, relative-position invariance of q.k), the fused in-place row form, bad input."""

import numpy as np
import pytest

from harmony_ref.kernels import rope as rp
from harmony_ref.kernels._testing import assert_within

# Same two products and one add per element as the reference: equal up to FMA contraction.
ROPE_ABS_TOL = 1e-6
# Invariants, computed in float32 from float32 tables.
ROPE_INVARIANT_REL_TOL = 1e-5


@pytest.mark.parametrize("shape", [(1, 1, 2), (5, 3, 16), (7, 9, 64), (2, 1, 6)])
def test_rope_matches_ref(shape):
    rng = np.random.default_rng(shape[0] * 100 + shape[2])
    x = rng.standard_normal(shape).astype(np.float32)
    pos = rng.integers(0, 5000, shape[0])
    got = rp.rope(x, pos, 10000.0)
    assert_within(got, rp.rope_ref(x, pos, 10000.0), ROPE_ABS_TOL, "rope vs ref")


def test_rotation_invariants():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 2, 32)).astype(np.float32)
    pos = np.arange(6)
    y = rp.rope(x, pos, 100000.0)
    # a rotation keeps each head's norm, and position 0 is the identity
    assert_within(
        np.linalg.norm(y, axis=-1),
        np.linalg.norm(x, axis=-1),
        ROPE_INVARIANT_REL_TOL * 10,
        "norm preserved",
    )
    np.testing.assert_array_equal(y[0], x[0])
    # q.k depends on the positions only through their difference
    q, k = x[:1, :1], x[1:2, :1]
    d1 = (rp.rope(q, [10], 1e4) * rp.rope(k, [3], 1e4)).sum()
    d2 = (rp.rope(q, [107], 1e4) * rp.rope(k, [100], 1e4)).sum()
    assert abs(d1 - d2) <= ROPE_INVARIANT_REL_TOL * 10 * (1 + abs(d1))


def test_rope_pairs_channel_j_with_j_plus_half():
    x = np.zeros((1, 1, 8), np.float32)
    x[0, 0, 0] = 1.0  # only channel 0 set: it rotates into channel 4 (rotate-half), not 1
    y = rp.rope(x, [1], 10000.0)[0, 0]
    assert y[4] == pytest.approx(np.sin(1.0), abs=1e-6)
    assert y[0] == pytest.approx(np.cos(1.0), abs=1e-6)
    assert np.count_nonzero(y) == 2


def test_fused_rows_rotate_only_the_first_heads():
    rng = np.random.default_rng(3)
    t, hd, n_q, n_k, n_v = 3, 16, 4, 2, 2
    qkv = rng.standard_normal((t, (n_q + n_k + n_v) * hd)).astype(np.float32)
    cos, sin = rp.rope_table(16, hd, 10000.0)
    pos = np.array([2, 5, 9])
    expected = qkv.copy()
    rot = rp.rope_ref(qkv[:, : (n_q + n_k) * hd].reshape(t, n_q + n_k, hd), pos, 10000.0)
    expected[:, : (n_q + n_k) * hd] = rot.reshape(t, -1)
    rp.rope_rows(qkv, n_q + n_k, hd, cos[pos], sin[pos])
    assert_within(qkv, expected, ROPE_ABS_TOL, "fused rows")
    np.testing.assert_array_equal(qkv[:, (n_q + n_k) * hd :], expected[:, (n_q + n_k) * hd :])


@pytest.mark.parametrize("far", [2**31 - 1, 2**40])
def test_far_positions_cost_only_their_rows(far):
    """rope built its cos/sin table up to the largest position: position 2**31 - 1 asked for
    64 GiB (MemoryError). The rows now come from the positions given, the same bits as the
    table's rows, and the rotation is the float64 one within ROPE_ABS_TOL."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 2, 8)).astype(np.float32)
    pos = np.array([7, far, 3])
    got = rp.rope(x, pos, 1e4)
    assert_within(got, rp.rope_ref(x, pos, 1e4), ROPE_ABS_TOL, "rope vs ref")
    cos, sin = rp.rope_table(8, 8, 1e4)
    near = rp.rope(x[[0, 2]], pos[[0, 2]], 1e4)
    x0, x1 = x[[0, 2], :, :4], x[[0, 2], :, 4:]
    c, s = cos[[7, 3]][:, None], sin[[7, 3]][:, None]
    np.testing.assert_array_equal(near, np.concatenate([x0 * c - x1 * s, x1 * c + x0 * s], -1))
    angle = far * 1e4 ** (-np.arange(0, 8, 2) / 8)  # float64, rounded to float32 like the table
    c64, s64 = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
    a, b = x[1, :, :4].astype(np.float64), x[1, :, 4:].astype(np.float64)
    want = np.concatenate([a * c64 - b * s64, b * c64 + a * s64], -1)
    assert_within(got[1], want, ROPE_ABS_TOL, "far position vs float64")


def test_zeros_stay_zero():
    np.testing.assert_array_equal(rp.rope(np.zeros((2, 2, 4), np.float32), [0, 7], 1e4), 0)


def test_bad_input():
    x = np.ones((2, 1, 4), np.float32)
    with pytest.raises(ValueError, match="positions"):
        rp.rope(x, [1], 1e4)
    with pytest.raises(ValueError, match=">= 0"):
        rp.rope(x, [1, -1], 1e4)
    with pytest.raises(ValueError, match="even"):
        rp.rope(np.ones((1, 1, 5), np.float32), [0], 1e4)
    x[1, 0, 2] = np.nan
    with pytest.raises(ValueError, match=r"x\[1, 0, 2\]"):
        rp.rope(x, [0, 1], 1e4)
    with pytest.raises(ValueError, match="theta"):
        rp.rope_table(4, 4, 0.0)
