"""Every weight format in kernels/formats.FORMATS, walked through one table (ggml's
test-quantize-fns): round trip against the input, fast against `_ref` (quantizer and matmul), the
quantized dot against the float dot, and the stored size and array layout against the real
arrays. Sizes are awkward on purpose; tolerances are named per format, and a format added to the
table without them fails here."""

import numpy as np
import pytest

from harmony_ref.kernels._testing import assert_within
from harmony_ref.kernels.formats import FORMATS, format_of, quantize, stored_format
from harmony_ref.quant.formats import FACTS
from harmony_ref.quant.kquants import KQUANT_TYPES
from harmony_ref.quant.policy import parse_format
from tests.quant.test_kquants import MAX_ROUND_TRIP_ERROR, _scale_measure

GROUP = 32  # the int4 formats' group size under test (K below are multiples of it)
AWKWARD_N = [1, 2, 3, 5, 7, 17, 33]
AWKWARD_K = [32, 64, 96, 160]
AWKWARD_M = [1, 2, 3, 5]

# Round trip |w - dequantize(quantize(w))|, elementwise, as a function of w and the stored form.
ROUNDTRIP_REL_SLACK = 2.0**-16  # of a step: the rounding decision is made in float32
ROUNDTRIP_ABS_SLACK = 2.0**-22  # of max(|w|, step): float32 arithmetic in (q - zp) * s


def _steps(name, stored, shape):
    if FORMATS[name].facts.grouped:  # a scale per group, else (int8) per row
        return np.repeat(stored.scale.astype(np.float64), stored.group_size, axis=1)
    return np.broadcast_to(stored.scale.astype(np.float64)[:, None], shape)  # int8: per row


def _half_step_bound(name, w, stored):
    s = _steps(name, stored, w.shape)
    return s / 2 * (1 + ROUNDTRIP_REL_SLACK) + ROUNDTRIP_ABS_SLACK * np.maximum(np.abs(w), s)


def _block_steps(stored):
    """(N, K) float64: each weight's stored float16 delta (GGUF blocks of 32)."""
    return np.repeat(np.abs(stored.d.astype(np.float64)), 32, axis=1)


# GGUF blocks: the quantizer divides by the float32 d, the file keeps float16 d (relative error
# <= 2^-11, x 8 / 15 / 127 levels); q4_0 may clamp its opposite extreme a whole step (ggml's
# max / -8); q4_1 also rounds its minimum to float16.
FP16_REL = 2.0**-11
GGML_ABS_SLACK = 2.0**-22  # of max(|w|, step)


def _ggml_bound(name, w, stored):
    s = _block_steps(stored)
    slack = GGML_ABS_SLACK * np.maximum(np.abs(w), s)
    if name == "q4_0":
        return s * (1 + 8 * FP16_REL * 1.01) + slack
    if name == "q4_1":
        m = np.repeat(np.abs(stored.m.astype(np.float64)), 32, axis=1)
        return s * (0.5 + 15 * FP16_REL * 1.01) + m * FP16_REL + slack
    return s * (0.5 + 127 * FP16_REL * 1.01) + slack  # q8_0


def _kquant_bound(name, w):
    """One step of the block's scale measure (tests/quant/test_kquants.py), per weight."""
    qk = FACTS[name].block
    measure = _scale_measure(w.reshape(w.shape[0], -1, qk), name)
    return np.repeat(MAX_ROUND_TRIP_ERROR[name] * measure, qk, axis=1)


def _k_for(name, k):
    """A row length the format stores: the K-quants' super-blocks are 8 x 32 long."""
    return k * FACTS[name].block // 32 if FACTS[name].block > 32 else k


ROUNDTRIP_BOUND = {
    "fp32": lambda w, stored: np.zeros(w.shape),  # stored as is
    "fp16": lambda w, stored: np.abs(w) * 2.0**-11 + 2.0**-25,  # half a float16 ulp, subnormals too
    "int8": lambda w, stored: _half_step_bound("int8", w, stored),
    "int4": lambda w, stored: _half_step_bound("int4", w, stored),
    "int4-sym": lambda w, stored: _half_step_bound("int4-sym", w, stored),
    "q4_0": lambda w, stored: _ggml_bound("q4_0", w, stored),
    "q4_1": lambda w, stored: _ggml_bound("q4_1", w, stored),
    "q8_0": lambda w, stored: _ggml_bound("q8_0", w, stored),
    **{q: (lambda w, stored, q=q: _kquant_bound(q, w)) for q in KQUANT_TYPES},
}
# Kernel vs its `_ref`: the same integer (or float) arithmetic, differing only in float32 rounding
# of the sums: this fraction of sum_k |x_k| |w_hat_k| (x_hat is within 1/254 of x per block).
MAX_KERNEL_VS_REF_REL = {
    "fp32": 2.0**-16,
    "fp16": 2.0**-16,
    "int8": 2.0**-16,
    "int4": 2.0**-16,
    "int4-sym": 2.0**-16,
    "q4_0": 2.0**-16,
    "q4_1": 2.0**-16,
    "q8_0": 2.0**-16,
    **dict.fromkeys(KQUANT_TYPES, 0.0),  # bit-identical to matmul_kquant_ref by construction
}
# Quantized dot vs the float32 dot of the original weights (relative Frobenius error on Gaussian
# weights with 1% 8x outliers): weight quantization, plus int8 activations for the integer kernels.
# Measured on three seeds: fp32 1.4e-7, fp16 2.4e-4, int8 0.025, int4 0.10, int4-sym 0.154 (sym
# spends a level on symmetry and cannot follow a row's offset); q4_0 0.139, q4_1 0.114, q8_0
# 0.0102 (its scale per 32-block follows outliers that int8's per-row scale cannot); q5_0 0.080,
# q4_k 0.087, q5_k 0.047, q6_k 0.031 (Q8_K activations: one scale per 256 values).
MAX_DOT_PRODUCT_ERROR = {
    "fp32": 1e-6,
    "fp16": 1e-3,
    "int8": 0.035,
    "int4": 0.14,
    "int4-sym": 0.20,
    "q4_0": 0.19,
    "q4_1": 0.16,
    "q8_0": 0.015,
    "q5_0": 0.11,
    "q4_k": 0.12,
    "q5_k": 0.065,
    "q6_k": 0.045,
}


def _weights(n, k, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((n, k)) * 0.05 + rng.uniform(-0.02, 0.02, (n, 1))).astype(np.float32)
    w[rng.random(w.shape) < 0.01] *= 8.0  # a few outliers, as real projections have
    return w


def _x(m, k, seed):
    rng = np.random.default_rng(seed + 1)
    return (rng.standard_normal((m, k)) * rng.uniform(0.5, 3.0, (m, 1))).astype(np.float32)


def test_the_table_names_match_and_every_format_has_tolerances():
    assert set(FORMATS) == {
        "fp32",
        "fp16",
        "int8",
        "int4",
        "int4-sym",
        "q4_0",
        "q4_1",
        "q8_0",
    } | set(KQUANT_TYPES)
    for table in (ROUNDTRIP_BOUND, MAX_KERNEL_VS_REF_REL, MAX_DOT_PRODUCT_ERROR):
        assert set(table) == set(FORMATS)
    for f in FORMATS.values():
        for group in (GROUP, 128):
            fmt = parse_format(f.facts.format_name(group))
            assert format_of(fmt).kind == fmt.kind
            assert format_of(fmt) is f
    assert parse_format("Q4_K") == parse_format("q4_k")  # GGUF's spelling of a type
    assert parse_format("f16") == parse_format("fp16")  # GGUF's name for the same half


@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize("n", AWKWARD_N)
@pytest.mark.parametrize("k", AWKWARD_K)
def test_round_trip_fast_vs_ref_size_and_layout(name, n, k):
    f = FORMATS[name]
    k = _k_for(name, k)
    w = _weights(n, k, seed=n * 1000 + k)
    stored = f.quantize(w, GROUP)
    ref = f.quantize_ref(w, GROUP)
    for a, b in zip(f.arrays(stored).values(), f.arrays(ref).values()):  # fast == _ref, bit for bit
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert_within(
        f.dequantize(stored),
        w,
        ROUNDTRIP_BOUND[name](w.astype(np.float64), stored),
        f"{name} round trip ({n}x{k})",
    )
    arrays = f.arrays(stored)
    assert f.nbytes(n, k, GROUP) == stored.nbytes == sum(a.nbytes for a in arrays.values())
    back = f.from_arrays(f.arrays(stored), (n, k), GROUP)  # the layout artifacts store
    assert np.array_equal(f.dequantize(back), f.dequantize(stored))
    assert format_of(stored_format(stored)) is f


@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize("m", AWKWARD_M)
@pytest.mark.parametrize("n, k", [(1, 32), (3, 96), (17, 160), (33, 64)])
def test_kernel_matches_its_ref(name, m, n, k):
    f = FORMATS[name]
    k = _k_for(name, k)
    w, x = _weights(n, k, seed=7 * n + k), _x(m, k, seed=m)
    stored = f.quantize(w, GROUP)
    got, ref = f.matmul(x, f.prepare(stored)), f.matmul_ref(x, stored)
    assert got.shape == ref.shape == (m, n) and got.dtype == np.float32
    abs_sum = np.abs(x).astype(np.float64) @ np.abs(f.dequantize(stored)).T.astype(np.float64)
    assert_within(got, ref, MAX_KERNEL_VS_REF_REL[name] * 1.01 * abs_sum, f"{name} kernel vs _ref")
    vec = f.matmul(x[0], f.prepare(stored))  # a vector in, a vector out (BLAS: a GEMV, not a GEMM)
    assert vec.shape == (n,)
    bound = MAX_KERNEL_VS_REF_REL[name] * 2.02 * abs_sum[0]
    assert_within(vec, got[0], bound, f"{name} vector vs row")


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_activations_of_every_float_dtype_and_layout_give_float32(name):
    """float64, float16, transposed and vector x: float32 out of the shape a float32 C-contiguous
    x gives, with the values of its float32 rounding. The float formats' matmul returned float64
    for float64 x (x @ W.T in NumPy's promotion), fp16's matmul_stored a (K, N) block of
    repeated rows for a vector."""
    f = FORMATS[name]
    k = _k_for(name, 64)
    stored = f.quantize(_weights(5, k, seed=21), GROUP)
    op = f.prepare(stored)
    x = _x(3, k, seed=22)
    want = f.matmul(x, op)
    abs_w = np.abs(f.dequantize(stored)).T.astype(np.float64)
    runs = [f.matmul] + ([lambda x, _: f.matmul_stored(x, stored)] if f.matmul_stored else [])
    for run in runs:
        for given, rows in (
            (x.astype(np.float64), want),
            (np.asfortranarray(x), want),
            (x.astype(np.float16), f.matmul(x.astype(np.float16).astype(np.float32), op)),
            (x[1], want[1]),
        ):
            got = run(given, op)
            assert got.dtype == np.float32 and got.shape == rows.shape, (name, given.dtype)
            bound = MAX_KERNEL_VS_REF_REL[name] * 2.02 * (np.abs(given).astype(np.float64) @ abs_w)
            assert_within(got, rows, bound, f"{name} x {given.dtype} {given.shape}")


@pytest.mark.parametrize("name", ["fp32", "fp16"])
def test_float_formats_refuse_a_finite_weight_they_would_store_as_inf(name):
    w = _weights(3, 64, seed=23).astype(np.float64)
    w[1, 9] = 1e39 if name == "fp32" else 70000.0
    with pytest.raises(ValueError, match=rf"w\[1, 9\] = .* overflows float{name[2:]}"):
        FORMATS[name].quantize(w, GROUP)
    w[1, 9] = np.nan  # NaN and inf are stored as they are (the float matmul propagates them)
    assert np.isnan(FORMATS[name].quantize(w, GROUP)[1, 9])


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_quantized_dot_vs_float_dot(name):
    f = FORMATS[name]
    w, x = _weights(65, 512, seed=11), _x(3, 512, seed=12)
    exact = x.astype(np.float64) @ w.T.astype(np.float64)
    got = f.matmul(x, f.prepare(f.quantize(w, GROUP)))
    rel = np.linalg.norm(got - exact) / np.linalg.norm(exact)
    assert rel < MAX_DOT_PRODUCT_ERROR[name], f"{name}: relative error {rel:.3g}"


def test_quantize_goes_through_the_table():
    w = _weights(5, 256, seed=3)  # a K-quant super-block long
    for f in FORMATS.values():
        for group in (GROUP, 64):
            fmt = parse_format(f.facts.format_name(group))
            stored = quantize(w, fmt)
            assert stored_format(stored) == fmt
    with pytest.raises(ValueError, match="not a stored weight matrix"):
        stored_format(np.zeros((2, 2), np.int32))


@pytest.mark.parametrize("name", sorted(n for n, f in FORMATS.items() if f.matmul_stored))
def test_matmul_stored_is_the_kernel_without_an_operand(name):
    from harmony_ref.kernels.formats import F16_CHUNK_ROWS

    f = FORMATS[name]
    n = F16_CHUNK_ROWS + 3  # a chunk and a ragged tail
    w, x = _weights(n, 64, seed=5), _x(3, 64, seed=6)
    stored = f.quantize(w, GROUP)
    got, want = f.matmul_stored(x, stored), f.matmul(x, f.prepare(stored))
    assert got.shape == want.shape == (3, n) and got.dtype == np.float32
    abs_sum = np.abs(x).astype(np.float64) @ np.abs(f.dequantize(stored)).T.astype(np.float64)
    assert_within(got, want, MAX_KERNEL_VS_REF_REL[name] * 1.01 * abs_sum, f"{name} stored")
