"""prepare_q4_rows: Q4_0 and Q4_1 matrices of one row length as one operand (a mixed GGUF plan's
q|k|v or gate|up in one matmul): Q4_0 rows exactly the separate Q4_0 call's outputs (Q4_1 alone
runs matmul_kquant, in another float order), every row what the NumPy twin computes within the
kernel tolerance."""

import numpy as np
import pytest

from harmony_ref.kernels.matmul_ggml import matmul_ggml, matmul_ggml_ref, prepare_q4_rows
from harmony_ref.quant.ggml import QUANTIZERS

# float32 sums in another order than the float64 twin (the test_formats tolerance of the kind)
REL_TOL_VS_REF = 1e-5


@pytest.mark.parametrize("m", [1, 7, 64])
@pytest.mark.parametrize(
    "types", [("q4_1", "q4_0", "q4_1"), ("q4_0", "q4_1"), ("q4_1", "q4_1"), ("q4_0",)]
)
def test_mixed_rows_equal_separate_calls(m, types):
    rng = np.random.default_rng(len(types) * 100 + m)
    k = 96
    ws = [
        rng.standard_normal((n, k)).astype(np.float32) * s
        for n, s in zip((33, 5, 17), (1.0, 0.02, 30.0))
    ][: len(types)]
    ts = [QUANTIZERS[q](w) for q, w in zip(types, ws)]
    x = rng.standard_normal((m, k)).astype(np.float32)
    got = matmul_ggml(x, prepare_q4_rows(ts))
    edges = np.cumsum([0] + [t.shape[0] for t in ts])
    for t, lo, hi in zip(ts, edges[:-1], edges[1:]):
        if t.qtype == "q4_0":
            np.testing.assert_array_equal(got[:, lo:hi], matmul_ggml(x, t))
    ref = np.concatenate([matmul_ggml_ref(x, t) for t in ts], axis=1)
    scale = np.abs(ref).max()
    assert np.abs(got - ref).max() <= REL_TOL_VS_REF * scale * k**0.5
    assert got.shape == (m, sum(w.shape[0] for w in ws))


def test_mixed_rows_vector_input_and_bytes():
    rng = np.random.default_rng(3)
    ts = [
        QUANTIZERS["q4_0"](rng.standard_normal((4, 64)).astype(np.float32)),
        QUANTIZERS["q4_1"](rng.standard_normal((6, 64)).astype(np.float32)),
    ]
    p = prepare_q4_rows(ts)
    assert p.shape == (10, 64) and p.nbytes == sum(t.nbytes for t in ts)
    x = rng.standard_normal(64).astype(np.float32)
    np.testing.assert_array_equal(matmul_ggml(x, p), matmul_ggml(x[None], p)[0])


def test_mixed_rows_refuse_other_types_and_lengths():
    rng = np.random.default_rng(4)
    a = QUANTIZERS["q4_0"](rng.standard_normal((4, 64)).astype(np.float32))
    with pytest.raises(ValueError, match="q4_0 / q4_1"):
        prepare_q4_rows([a, QUANTIZERS["q8_0"](rng.standard_normal((4, 64)).astype(np.float32))])
    with pytest.raises(ValueError, match="row lengths differ"):
        prepare_q4_rows([a, QUANTIZERS["q4_1"](rng.standard_normal((4, 32)).astype(np.float32))])
    with pytest.raises(ValueError):
        prepare_q4_rows([])
