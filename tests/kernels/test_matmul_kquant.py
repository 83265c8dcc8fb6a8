"""Q4_1 / Q5_0 / K-quant / Q8_0 matmuls (kernels/matmul_kquant.py): every path this CPU runs (x86 tile vectors
and the portable loop) against `matmul_kquant_ref` on fresh random inputs, awkward shapes and
edge cases; the ref's quantized-activation dot against the float dot of the dequantized weights
within the bound Q8_K / Q8_0 rounding allows; the integer form against the dequantizer."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harmony_ref.kernels._testing import assert_within
from harmony_ref.kernels.matmul import ISA, ISA_NAMES, ISA_PORTABLE, SUPPORTED_ISAS
from harmony_ref.kernels.matmul_kquant import (
    DECODE_PREFETCH,
    GROUP,
    OFFSET,
    PREFETCH_ENV,
    SUPER,
    bind_kquant,
    decode_prefetch,
    integer_form,
    matmul_kquant,
    matmul_kquant_ref,
    prepare_kquant,
    quantize_activations_kquant,
    quantize_activations_kquant_ref,
)
from harmony_ref.quant.ggml import (
    GGMLTensor,
    dequantize_ggml,
    quantize_q4_1_ref,
    quantize_q8_0_ref,
)
from harmony_ref.quant.kquants import KQUANT_TYPES, dequantize_kquant, quantize_kquant_ref

# Kernel vs `_ref`: the same exact integer sums and the same float32 operations in the same
# order, so the paths are bit-identical by construction; the tolerance is that, named.
MAX_KERNEL_VS_REF = 0.0
# Quantized dot vs float dot (x @ dequantize(W).T): x's int8 rounding moves each x_k by at most
# half its block's step xd / 2, so |y - y_float| <= sum_k |w_k| xd_k / 2, times this slack for
# float32 sums.
ACT_ROUNDING_SLACK = 1 + 2.0**-10
TYPES = (*KQUANT_TYPES, "q4_1", "q8_0")
GGML_REF = {"q4_1": quantize_q4_1_ref, "q8_0": quantize_q8_0_ref}


def quantize(w, qtype):
    return GGML_REF[qtype](w) if qtype in GGML_REF else quantize_kquant_ref(w, qtype)


def dequantize(t):
    return dequantize_ggml(t) if isinstance(t, GGMLTensor) else dequantize_kquant(t)


def _k_for(qtype: str, supers: int) -> int:
    return SUPER[qtype] * supers


def _weights(n, k, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((n, k)) * 0.05 + rng.uniform(-0.02, 0.02, (n, 1))).astype(np.float32)
    w[rng.random(w.shape) < 0.01] *= 8.0
    return w


def _x(m, k, seed):
    rng = np.random.default_rng(seed + 1)
    return (rng.standard_normal((m, k)) * rng.uniform(0.5, 3.0, (m, 1))).astype(np.float32)


def _check_paths(x, t):
    ref = matmul_kquant_ref(x, t)
    for isa in SUPPORTED_ISAS:
        got = matmul_kquant(x, t, isa=isa)
        assert got.shape == ref.shape and got.dtype == np.float32
        assert_within(got, ref, MAX_KERNEL_VS_REF, f"{t.qtype} {ISA_NAMES[isa]} vs _ref")
        run = bind_kquant(prepare_kquant(t, isa), isa)  # the Linear's per-token call
        if run is not None:
            bound = run(np.ascontiguousarray(x, dtype=np.float32).reshape(-1, t.shape[1]))
            assert_within(bound, ref.reshape(bound.shape), MAX_KERNEL_VS_REF, "bound vs _ref")
    return ref


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("m", [1, 2, 4, 5, 9])
@pytest.mark.parametrize("n, supers", [(1, 1), (3, 3), (63, 1), (64, 2), (65, 1), (130, 2)])
def test_every_path_equals_ref(qtype, m, n, supers):
    k = _k_for(qtype, supers)
    t = quantize(_weights(n, k, seed=n + supers), qtype)
    _check_paths(_x(m, k, seed=m * n), t)


@pytest.mark.skipif(ISA == ISA_PORTABLE, reason="the portable loop has no prefetch")
@pytest.mark.parametrize("qtype", TYPES)
def test_decode_prefetch_changes_no_bit(qtype):
    """Decode rows with and without the level stream's prefetch (DECODE_PREFETCH picks one per
    CPU vendor): the same bits as the ref, on rows past the prefetch distance (K = 2048 levels:
    1-2 KB of a tile's nibbles) and a tail row after four prefill rows (m = 5)."""
    k = _k_for(qtype, 2048 // SUPER[qtype])
    t = quantize(_weights(130, k, seed=7), qtype)
    for m in (1, 5):
        x = _x(m, k, seed=m)
        ref = matmul_kquant_ref(x, t)
        for prefetch in (False, True):
            got = matmul_kquant(x, t, prefetch=prefetch)
            assert_within(got, ref, MAX_KERNEL_VS_REF, f"{qtype} m={m} prefetch={prefetch}")


def test_decode_prefetch_by_vendor_and_override(monkeypatch):
    monkeypatch.delenv(PREFETCH_ENV, raising=False)
    assert decode_prefetch("q4_1", "AuthenticAMD") and not decode_prefetch("q5_0", "AuthenticAMD")
    assert all(decode_prefetch(q, "GenuineIntel") for q in DECODE_PREFETCH["GenuineIntel"])
    assert not decode_prefetch("q4_1", "SomeOtherVendor")
    monkeypatch.setenv(PREFETCH_ENV, "q5_0, q6_k")
    assert decode_prefetch("q6_k", "AuthenticAMD") and not decode_prefetch("q4_1", "GenuineIntel")
    monkeypatch.setenv(PREFETCH_ENV, "")
    assert not any(decode_prefetch(q, "GenuineIntel") for q in TYPES)


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m", [16, 19])
def test_prefill_rows_split_between_threads_equal_ref(qtype, threads, m):
    """Three 64-row tiles (130 rows) do not divide between 2 threads: each tile's prefill rows
    are cut in two parts (tile_parts; m = 19 leaves 3 rows for the last part's tail), the same
    bits as the ref at 1 and 2 threads."""
    import numba

    k = _k_for(qtype, 2)
    t = quantize(_weights(130, k, seed=m), qtype)
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        _check_paths(_x(m, k, seed=np.random.default_rng().integers(2**31)), t)
    finally:
        numba.set_num_threads(before)


@pytest.mark.parametrize("qtype", TYPES)
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 6), n=st.integers(1, 70))
def test_fresh_random_inputs(qtype, seed, m, n):
    k = _k_for(qtype, 2)
    rng = np.random.default_rng(seed)
    scale = np.float32(10.0 ** rng.uniform(-3, 3))
    t = quantize(rng.standard_normal((n, k)).astype(np.float32) * scale, qtype)
    _check_paths((rng.standard_normal((m, k)) * 10.0 ** rng.uniform(-3, 3)).astype(np.float32), t)


@pytest.mark.parametrize("qtype", TYPES)
def test_edge_cases(qtype):
    k = _k_for(qtype, 2)
    w = _weights(66, k, seed=5)
    w[0] = 0.0  # a zero row
    w[1, : SUPER[qtype]] = 0.0  # a zero super-block
    w[2] = 0.5  # constant
    w[3, 7] = 40.0  # one outlier
    t = quantize(w, qtype)
    x = _x(5, k, seed=9)
    x[0] = 0.0  # a zero activation row: exactly 0 out
    x[1, : SUPER[qtype]] = 0.0
    x[2, 3] = 1e4  # one outlier activation
    x[3] *= np.float32(1e-20)  # tiny
    x[4] *= np.float32(1e15)  # huge (still finite through the sums)
    y = _check_paths(x, t)
    assert np.all(y[0] == 0)
    assert np.isfinite(y).all()
    vec = matmul_kquant(x[2], t)
    np.testing.assert_array_equal(vec, y[2])  # a vector in, a vector out, as the row


@pytest.mark.parametrize("qtype", TYPES)
def test_quantized_dot_vs_float_dot(qtype):
    k = _k_for(qtype, 3)
    t = quantize(_weights(65, k, seed=11), qtype)
    x = _x(4, k, seed=12)
    w_hat = dequantize(t).astype(np.float64)
    exact = x.astype(np.float64) @ w_hat.T
    _, xd, _ = quantize_activations_kquant(x, qtype)
    step = np.repeat(np.abs(xd.astype(np.float64)), SUPER[qtype], axis=1)  # Q8_K d may be < 0
    bound = (step / 2) @ np.abs(w_hat).T * ACT_ROUNDING_SLACK
    assert_within(matmul_kquant_ref(x, t), exact, bound, f"{qtype} quantized dot vs float dot")


@pytest.mark.parametrize("qtype", ["q4_k", "q6_k"])
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 5))
def test_q8_k_activations_fast_equal_ref(qtype, seed, m):
    """The Numba Q8_K quantizer the kernels call == ggml's quantize_row_q8_K_ref (quant/kquants.py)
    bit for bit: random rows, a zero super-block, -0.0, an exact tie of |max|, huge and tiny."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m + 4, 512)) * 10.0 ** rng.uniform(-20, 20)).astype(np.float32)
    x[0, :256] = 0.0
    x[1, :256] = -0.0
    x[2, 3], x[2, 9] = -5.0, 5.0  # the first of equal |x| sets the sign of d
    x[3] = np.round(x[3] / np.abs(x[3]).max() * 254) / 2  # exact halves: round half to even
    for a, b in zip(
        quantize_activations_kquant(x, qtype), quantize_activations_kquant_ref(x, qtype)
    ):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("qtype", TYPES)
def test_integer_form_is_the_dequantizer(qtype):
    """a (sc (u - o)) - b m, per weight, equals dequantize_kquant (the kernels' weights are the
    file's weights)."""
    k = _k_for(qtype, 2)
    t = quantize(_weights(9, k, seed=2), qtype)
    u, sc, m, a, b = integer_form(t)
    g, s = GROUP[qtype], SUPER[qtype]
    sc_k = np.repeat(sc.astype(np.float64), g, axis=1)
    m_k = np.repeat(m.astype(np.float64), g, axis=1)
    a_k, b_k = (
        np.repeat(a.astype(np.float64), s, axis=1),
        np.repeat(b.astype(np.float64), s, axis=1),
    )
    w = a_k * sc_k * (u.astype(np.float64) - OFFSET[qtype]) - b_k * m_k
    np.testing.assert_allclose(w, dequantize(t), rtol=2.0**-22, atol=0)


def test_bad_input_is_one_clear_line():
    t = quantize(_weights(2, 256, seed=1), "q4_k")
    with pytest.raises(ValueError, match=r"weights have K = 256"):
        matmul_kquant(np.ones(512, np.float32), t)
    with pytest.raises(ValueError, match="KQuantTensor"):
        prepare_kquant(np.ones((2, 256), np.float32))
    with pytest.raises(ValueError, match="GGMLTensor q4_0"):
        matmul_kquant_ref(
            np.ones(256, np.float32), GGMLTensor("q4_0", np.zeros((1, 144), np.uint8), (1, 256))
        )
    with pytest.raises(ValueError, match="not finite"):
        matmul_kquant(np.r_[np.nan, np.ones(255)].astype(np.float32), t)
    for run in (matmul_kquant, matmul_kquant_ref):  # float64 past float32: ZeroDivisionError was
        with pytest.raises(ValueError, match=r"x\[3\] = 1e\+39 overflows float32"):
            run(np.r_[np.ones(3), 1e39, np.ones(252)], t)


@pytest.mark.parametrize("qtype", ("q4_1", "q4_k", "q6_k"))
def test_bound_kernel_checks_what_it_skips(qtype):
    """bind_kquant's call runs the compiled kernel only on x (M, K) float32 C-contiguous
    writable; anything else (a vector, float64, a strided or read-only view) takes
    matmul_kquant's checked path, with the same result; a bad K is one clear line."""
    k = _k_for(qtype, 2)
    t = quantize(_weights(70, k, 3), qtype)
    x = _x(3, 2 * k, 4)
    ref = matmul_kquant_ref(x[:, ::2], t)
    run = bind_kquant(prepare_kquant(t))
    if run is None:
        pytest.skip("no x86 path on this CPU")
    ro = np.ascontiguousarray(x[:, ::2])
    ro.flags.writeable = False
    for given_x in (x[:, ::2], x[:, ::2].astype(np.float64), ro):
        assert_within(run(given_x), ref, MAX_KERNEL_VS_REF, "fallback vs _ref")
    assert_within(run(x[0, ::2]), ref[0], MAX_KERNEL_VS_REF, "vector vs _ref")
    with pytest.raises(ValueError, match="K = "):
        run(x)
    assert bind_kquant(t) is None  # not an operand: nothing to bind


@pytest.mark.parametrize("qtype, bits", [("q4_k", 4), ("q5_k", 5), ("q6_k", 6), ("q5_0", 5)])
def test_x86_layout_keeps_the_files_bits_per_level(qtype, bits):
    """The x86 operand holds each level in the file's bits (nibbles plus packed high bits),
    not one byte a weight; and decodes to the same levels (the exactness tests above)."""
    t = quantize(_weights(64, _k_for(qtype, 2), 5), qtype)
    p = prepare_kquant(t)
    if p.layout == "rows":
        pytest.skip("no x86 path on this CPU")
    level_bytes = p.u.nbytes + (0 if p.hb is None else p.hb.nbytes)
    assert level_bytes * 8 == bits * t.shape[0] * t.shape[1]
