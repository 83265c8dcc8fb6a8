"""W8A8 (kernels/matmul_w8a8.py): the int8 x int8 kernel against its NumPy twin on every path this
CPU runs, on fresh random inputs and edge cases (zeros, saturated activations, constant rows,
odd K and N, one row and GEMM-sized batches), within MAX_W8A8_VS_REF_REL; the product against
the float32 one; bad input refused."""

import numpy as np
import pytest

from harmony_ref.kernels import matmul as mm
from harmony_ref.kernels.matmul_w8a8 import (
    MAX_W8A8_VS_REF_REL,
    _matmul_w8a8,
    matmul_w8a8,
    matmul_w8a8_ref,
    quantize_w8a8,
)
from harmony_ref.quant.activations import AbsMaxObserver, scales_from_amax

PATHS = pytest.mark.parametrize("isa", mm.SUPPORTED_ISAS, ids=lambda i: mm.ISA_NAMES[i])
# Gaussian data, scales calibrated on the same x: relative Frobenius error of the product
# (measured ~0.012 per-tensor, ~0.013 per-channel at K = 576).
W8A8_REL_FROB_ERR = 0.03


def _on(isa, x, w):
    return _matmul_w8a8(x, w.act_scale, mm._prepare_w8(w.w8, isa), isa)


def _rel(got, ref):
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def _case(m, k, n, seed, granularity):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float32)
    x = (rng.standard_normal((m, k)) * rng.uniform(0.5, 3.0, (1, k))).astype(np.float32)
    obs = AbsMaxObserver(k)
    obs.update(x)
    return x, w, quantize_w8a8(w, obs.scales(granularity))


@PATHS
@pytest.mark.parametrize("granularity", ["per-tensor", "per-channel"])
@pytest.mark.parametrize(
    "m,k,n", [(1, 576, 1536), (4, 96, 65), (7, 1536, 130), (3, 40, 7), (9, 64, 1)]
)
def test_kernel_matches_ref_on_fresh_inputs(isa, granularity, m, k, n):
    x, w, q = _case(m, k, n, seed=m * 1000 + k + n, granularity=granularity)
    ref = matmul_w8a8_ref(x, q)
    assert _rel(_on(isa, x, q), ref) <= MAX_W8A8_VS_REF_REL
    if m >= 4 and n > 1:
        exact = x @ w.T
        err = np.linalg.norm(ref - exact) / np.linalg.norm(exact)
        assert err <= W8A8_REL_FROB_ERR, f"{granularity}: {err:.3g}"


@PATHS
def test_edge_cases(isa):
    rng = np.random.default_rng(7)
    k, n = 64, 33
    w = rng.standard_normal((n, k)).astype(np.float32)
    w[3] = 0.0  # a zero row
    w[4] = 0.5  # a constant row
    scale = scales_from_amax(np.full(k, 2.0, np.float32), "per-tensor")
    q = quantize_w8a8(w, scale)
    x = np.zeros((5, k), np.float32)
    assert (_on(isa, x, q) == 0).all() and (matmul_w8a8_ref(x, q) == 0).all()
    x = rng.standard_normal((5, k)).astype(np.float32) * 100  # far beyond the range: saturates
    ref = matmul_w8a8_ref(x, q)
    assert _rel(_on(isa, x, q), ref) <= MAX_W8A8_VS_REF_REL
    clipped = np.clip(x, -2.0, 2.0)
    np.testing.assert_allclose(ref, matmul_w8a8_ref(clipped, q), rtol=0, atol=1e-4)
    assert (ref[:, 3] == 0).all()
    v = rng.standard_normal(k).astype(np.float32)  # a vector in, a vector out
    assert _on(isa, v, q).shape == (n,) and matmul_w8a8(v, q).shape == (n,)


def test_bad_input():
    q = quantize_w8a8(np.ones((8, 32), np.float32), np.full(32, 0.1, np.float32))
    with pytest.raises(ValueError, match="K = 32"):
        matmul_w8a8(np.ones((2, 31), np.float32), q)
    x = np.ones((2, 32), np.float32)
    x[1, 5] = np.nan
    with pytest.raises(ValueError, match="not finite"):
        matmul_w8a8(x, q)
    with pytest.raises(ValueError, match="shape"):
        quantize_w8a8(np.ones((8, 32), np.float32), np.full(16, 0.1, np.float32))
    with pytest.raises(ValueError, match="> 0"):
        quantize_w8a8(np.ones((8, 32), np.float32), np.zeros(32, np.float32))
