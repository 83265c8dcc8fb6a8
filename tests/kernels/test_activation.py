"""SiLU-gate (SwiGLU's silu(gate) * up): kernel vs NumPy twin on random values, zeros, the
saturated tails (no overflow warning, -0 for large negative gates), the fused gate|up row form,
odd shapes and bad input."""

import numpy as np
import pytest

from harmony_ref.kernels import activation as act
from harmony_ref.kernels._testing import assert_within

# exp in float64 (kernel: math.exp) vs float32 (numpy): a few float32 ulps of |y|.
SILU_REL_TOL = 1e-6
SILU_ABS_TOL = 1e-7


@pytest.mark.parametrize("shape", [(1, 96), (7, 1536), (3, 5), (2, 2, 3), (1,)])
def test_silu_gate_matches_ref(shape):
    rng = np.random.default_rng(sum(shape))
    g = (rng.standard_normal(shape) * 4).astype(np.float32)
    u = rng.standard_normal(shape).astype(np.float32)
    ref = act.silu_gate_ref(g, u)
    got = act.silu_gate(g, u)
    assert got.shape == g.shape and got.dtype == np.float32
    assert_within(got, ref, SILU_ABS_TOL + SILU_REL_TOL * np.abs(ref), "silu_gate vs ref")
    exact = g.astype(np.float64) / (1 + np.exp(-g.astype(np.float64))) * u
    assert_within(ref, exact, 1e-6 * (1 + np.abs(exact)), "ref vs float64 definition")


def test_tails_and_zeros():
    g = np.array([[-1000.0, -90.0, 0.0, 90.0, 1000.0]], np.float32)
    u = np.ones_like(g)
    got = act.silu_gate(g, u)
    np.testing.assert_array_equal(got, [[-0.0, -0.0, 0.0, 90.0, 1000.0]])
    np.testing.assert_array_equal(act.silu_gate_ref(g, u), got)
    np.testing.assert_array_equal(act.silu_gate(np.zeros((2, 3)), np.ones((2, 3))), 0)


def test_fused_rows_read_gate_then_up():
    rng = np.random.default_rng(5)
    gu = rng.standard_normal((4, 2 * 48)).astype(np.float32)
    out = act.silu_gate_rows(gu, np.empty((4, 48), np.float32))
    ref = act.silu_gate_ref(gu[:, :48], gu[:, 48:])
    assert_within(out, ref, SILU_ABS_TOL + SILU_REL_TOL * np.abs(ref), "fused rows")


def test_bad_input():
    with pytest.raises(ValueError, match="same shape"):
        act.silu_gate(np.ones((2, 3)), np.ones((2, 4)))
    g = np.ones((2, 3), np.float32)
    g[0, 1] = np.inf
    with pytest.raises(ValueError, match=r"gate\[0, 1\]"):
        act.silu_gate(g, np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"up\[1, 2\]"):
        u = np.ones((2, 3))
        u[1, 2] = np.nan
        act.silu_gate_ref(np.ones((2, 3)), u)


# ----------------------------------------------------------------------------------------------
# GeGLU (Gemma): gelu_tanh(gate) * up; the kernel's tanh is norm.py's rational approximation


GELU_GATE_ABS_TOL = 2e-5  # the rational tanh's error (TANH_APPROX_ABS_TOL) times |v| / 2 * |up|


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 33), (2, 5, 17)])
def test_gelu_tanh_gate_matches_ref_and_torch_formula(shape):
    from harmony_ref.kernels.activation import gelu_tanh_gate, gelu_tanh_gate_ref

    rng = np.random.default_rng(len(shape))
    gate = (rng.standard_normal(shape) * 3).astype(np.float32)
    up = rng.standard_normal(shape).astype(np.float32)
    got = gelu_tanh_gate(gate, up)
    assert got.shape == gate.shape and got.dtype == np.float32
    ref = gelu_tanh_gate_ref(gate, up)
    assert_within(got, ref, GELU_GATE_ABS_TOL, "kernel vs twin")
    g = gate.astype(np.float64)  # PyTorch's gelu(approximate="tanh") in float64
    exact = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g**3))) * up
    assert_within(ref, exact, 1e-5, "twin vs the float64 formula")
    big = np.array([-30.0, -9.5, 0.0, 9.5, 30.0], np.float32)
    np.testing.assert_allclose(
        gelu_tanh_gate(big, np.ones(5, np.float32)), [0.0, 0.0, 0.0, 9.5, 30.0], atol=1e-6
    )
