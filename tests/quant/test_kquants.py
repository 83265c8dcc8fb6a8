"""Q5_0 and the K-quants (quant/kquants.py): our quantizers' bytes == llama-quantize's (commit
0c1e570, tests/fixtures/kquants/make.py) on awkward rows, Q5_0's == the `gguf` package's, Q8_K's ==
ggml's quantize_row_q8_K_ref; every dequantizer == gguf's; and, by hypothesis on awkward rows,
byte sizes, the round trip within one quantization step, and Q5_0's requantization idempotent."""

from pathlib import Path

import gguf
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from harmony_ref.quant.kquants import (
    BLOCK_DTYPES,
    BLOCK_WEIGHTS,
    KQUANT_TYPES,
    Q8_K_DTYPE,
    KQuantTensor,
    dequantize_kquant,
    levels,
    quantize_kquant_ref,
    quantize_q8_k_ref,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kquants" / "kquants.npz"
GGUF_TYPES = {t: getattr(gguf.GGMLQuantizationType, t.upper()) for t in KQUANT_TYPES}
# Round trip: the largest |w - w'| of a block, as a fraction of the block's scale measure (q5_0:
# max |w|, one 16th: the clamped +15 side, plus float16's rounding of d; q4_k / q5_k: the
# super-block's range max(0, max) - min(0, min), one step of 15 / 31; q6_k: max |w|, one step of
# 32 per side). Fitted scales do not promise half a step; one step is what a wrong fit breaks.
MAX_ROUND_TRIP_ERROR = {"q5_0": 1 / 16 + 2**-10, "q4_k": 1 / 15, "q5_k": 1 / 31, "q6_k": 1 / 32}


@pytest.fixture(scope="module")
def fixture():
    return np.load(FIXTURE)


def test_fixture_names_its_llama_cpp_build(fixture):
    assert "0c1e570" in str(fixture["llama_cpp_build"])


@pytest.mark.parametrize("qtype", KQUANT_TYPES)
def test_bytes_equal_llama_quantize(fixture, qtype):
    got = quantize_kquant_ref(fixture["rows"], qtype).data
    want = fixture[qtype]
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, f"{qtype}: rows {bad.tolist()} differ from llama-quantize's"


def test_q8_k_equals_ggml(fixture):
    qs, d, bsums = quantize_q8_k_ref(fixture["rows"])
    m, k = qs.shape
    blocks = np.zeros((m, k // 256), dtype=Q8_K_DTYPE)
    blocks["d"], blocks["qs"], blocks["bsums"] = d, qs.reshape(m, -1, 256), bsums.reshape(m, -1, 16)
    np.testing.assert_array_equal(blocks.view(np.uint8).reshape(m, -1), fixture["q8_k"])


def _awkward(n: int, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float32)
    w[rng.random(w.shape) < 0.01] *= 50
    w[0, :32] = 0.0
    w[-1, 32:64] = -0.0
    w[n // 2, :16] = 0.3
    return w


@pytest.mark.parametrize("qtype", KQUANT_TYPES)
@pytest.mark.parametrize("n", [1, 3, 17])
def test_q5_0_quantize_and_every_dequantize_equal_gguf(qtype, n):
    w = _awkward(n, 512, seed=n)
    t = quantize_kquant_ref(w, qtype)
    if qtype == "q5_0":  # gguf's all-zero block has d = +0.0 where ggml's C (and ours) has -0.0
        theirs = gguf.quants.quantize(w, GGUF_TYPES[qtype]).view(BLOCK_DTYPES[qtype])
        ours = t.blocks.copy()
        for b in (ours, theirs):
            b["d"] = np.where(b["d"] == 0, np.float16(0), b["d"])
        np.testing.assert_array_equal(ours.view(np.uint8), theirs.view(np.uint8))
    want = gguf.quants.dequantize(t.data, GGUF_TYPES[qtype]).reshape(w.shape)
    np.testing.assert_array_equal(dequantize_kquant(t), want)


def _scale_measure(blocks: np.ndarray, qtype: str) -> np.ndarray:
    if qtype in ("q4_k", "q5_k"):
        return np.maximum(blocks.max(-1), 0) - np.minimum(blocks.min(-1), 0)
    return np.abs(blocks).max(-1)


ROW = st.lists(
    st.floats(-1e3, 1e3, width=32, allow_subnormal=False), min_size=256, max_size=256
).map(lambda v: np.asarray(v, np.float32))


@st.composite
def awkward_rows(draw):
    """One 512-weight row: a drawn super-block and an awkward one (zeros, one outlier, constant,
    tiny or huge magnitudes), in a drawn order."""
    base = draw(ROW)
    kind = draw(st.sampled_from(["zeros", "outlier", "constant", "scaled", "same"]))
    other = base.copy()
    if kind == "zeros":
        other[:] = 0
    elif kind == "outlier":
        other[:] = 0
        other[draw(st.integers(0, 255))] = draw(st.floats(-1e3, 1e3, width=32))
    elif kind == "constant":
        other[:] = draw(st.floats(-1e3, 1e3, width=32))
    elif kind == "scaled":
        other = other * np.float32(draw(st.sampled_from([1e-3, 1e-2, 10.0])))
    row = np.concatenate([other, base] if draw(st.booleans()) else [base, other])
    return row[None, :].astype(np.float32)


@pytest.mark.parametrize("qtype", KQUANT_TYPES)
@settings(max_examples=40, deadline=None)
@given(w=awkward_rows())
@example(w=np.zeros((1, 512), np.float32))
@example(w=np.r_[np.zeros(511), 100.0].astype(np.float32)[None, :])
def test_round_trip_within_one_step(qtype, w):
    t = quantize_kquant_ref(w, qtype)
    qk = BLOCK_WEIGHTS[qtype]
    assert t.data.shape == (1, 512 // qk * BLOCK_DTYPES[qtype].itemsize)
    back = dequantize_kquant(t)
    assert np.isfinite(back).all()
    blocks = w.reshape(-1, qk)
    err = np.abs(back.reshape(-1, qk) - blocks).max(-1)
    measure = _scale_measure(blocks, qtype)
    # float16 d: blocks whose step is below float16's normal range lose precision, not the rule
    normal = measure >= 1e-2
    bound = MAX_ROUND_TRIP_ERROR[qtype] * measure
    assert (err[normal] <= bound[normal]).all(), (err, bound)
    assert (back.reshape(-1, qk)[measure == 0] == 0).all()  # zero blocks decode to zero


@settings(max_examples=40, deadline=None)
@given(w=awkward_rows())
def test_q5_0_requantizing_its_own_weights_is_the_identity(w):
    t = quantize_kquant_ref(w, "q5_0")
    amax = np.abs(w.reshape(-1, 32)).max(-1)
    again = quantize_kquant_ref(dequantize_kquant(t), "q5_0")
    blocks, blocks_again = t.blocks[0], again.blocks[0]
    normal = amax >= 1e-2  # d a normal float16: (u - 16) d16 / d16 gives u back
    np.testing.assert_array_equal(blocks[normal], blocks_again[normal])


@pytest.mark.parametrize("qtype", KQUANT_TYPES)
def test_levels_in_range_and_rows_slice(qtype):
    w = _awkward(5, 512, seed=7)
    t = quantize_kquant_ref(w, qtype)
    top = {"q5_0": 31, "q4_k": 15, "q5_k": 31, "q6_k": 63}[qtype]
    assert levels(t).max() <= top
    part = t.rows(slice(1, 3))
    np.testing.assert_array_equal(dequantize_kquant(part), dequantize_kquant(t)[1:3])
    assert t.bits_per_weight == 8 * BLOCK_DTYPES[qtype].itemsize / BLOCK_WEIGHTS[qtype]


@pytest.mark.parametrize(
    "w, match",
    [
        (np.zeros((2, 300), np.float32), "not a multiple of 256"),
        (np.zeros(256, np.float32), "2-D"),
        (np.r_[np.nan, np.zeros(255)].astype(np.float32)[None, :], "not finite"),
        (np.r_[np.zeros(255), 1e39][None, :], r"w\[0, 255\] = 1e\+39 overflows float32"),
    ],
)
def test_bad_input_is_one_clear_line(w, match):
    with pytest.raises(ValueError, match=match):
        quantize_kquant_ref(w, "q4_k")


def test_tensor_checks_its_bytes():
    with pytest.raises(ValueError, match="q6_k data must be uint8 of shape"):
        KQuantTensor("q6_k", np.zeros((1, 200), np.uint8), (1, 256))


def test_a_policy_refuses_k_quant_rows_that_are_not_256_multiples():
    """SmolLM2's 576-wide rows cannot be Q4_K (llama.cpp falls back to another type there): the
    policy check names the layer and the block, and the planner never offers it."""
    from harmony_ref.eval.lm_sensitivity import fits
    from harmony_ref.quant.policy import parse_format, policy_from_dict, unmatched

    policy = policy_from_dict({"default": "q4_k"}, "<q4_k>")
    layers = [("model.layers.0.mlp.down_proj", 1536), ("model.layers.0.self_attn.q_proj", 576)]
    (problem,) = unmatched(policy, layers, 1, "smollm2")
    assert "q_proj" in problem and "K = 576" in problem and "block of 256" in problem
    assert unmatched(policy, layers[:1], 1, "smollm2") == []
    q4_k = parse_format("Q4_K")
    assert q4_k.facts.block == 256 and q4_k.bits_per_weight(1536) == 4.5
    assert not fits(q4_k, [(576, 576)]) and fits(q4_k, [(576, 1536)])
    assert parse_format("q6_k").nbytes(2, 512) == 2 * 2 * 210
