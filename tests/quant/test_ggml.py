"""GGUF's block formats (quant/ggml.py): our quantizers == the `gguf` package's
`gguf.quants.quantize` (llama.cpp's reference quantizers in Python) bit for bit, fast == `_ref`,
our dequantizer == gguf's, on awkward shapes, awkward values and hypothesis' inputs. The round
trip bound and the kernels are walked with every other format in tests/kernels/test_formats.py."""

import gguf
import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from harmony_ref.quant.ggml import (
    BLOCK_BYTES,
    QUANTIZERS,
    QUANTIZERS_REF,
    GGMLTensor,
    concat_rows,
    dequantize_ggml,
)

GGUF_TYPES = {
    "q4_0": gguf.GGMLQuantizationType.Q4_0,
    "q4_1": gguf.GGMLQuantizationType.Q4_1,
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
}
AWKWARD_N = [1, 2, 3, 5, 7, 17, 33]
AWKWARD_K = [32, 64, 96, 160, 576]

# Compile (or load from cache) the Numba quantizers once, before hypothesis times examples.
for _q in QUANTIZERS.values():
    _q(np.ones((1, 32), np.float32))


def _awkward_values(n, k, seed):
    """Gaussian rows plus the blocks ggml's loops treat specially."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float32)
    w[rng.random(w.shape) < 0.02] *= 40.0
    specials = [
        np.zeros(32),  # d = 0: id = 0, every level the zero level
        np.full(32, 0.125),  # constant block: max == min
        np.full(32, -3.0),
        np.r_[-0.5, 0.5, np.zeros(30)],  # |max| tie: the first one wins (its sign sets d)
        np.r_[0.5, -0.5, np.zeros(30)],
        np.linspace(-1, 1, 32),  # exact half-steps: roundf / trunc(x + 0.5) ties
        np.arange(32) - 16.0,
        np.r_[6e4, -6e4, np.ones(30)],  # near float16's max
        np.r_[-0.0, np.zeros(31)],
    ]
    for i, block in enumerate(specials):
        r, b = i % n, (i // n) % (k // 32)
        w[r, b * 32 : (b + 1) * 32] = np.asarray(block, np.float32)
    return w


def _zero_sign_cleared(data: np.ndarray, qtype: str) -> np.ndarray:
    """Block bytes with every float16 field that is -0.0 made +0.0: the sign of a zero d or m is
    the reduction order's (quant/ggml.py's docstring), and it decodes to the same weights."""
    b = data.reshape(data.shape[0], -1, BLOCK_BYTES[qtype]).copy()
    for off in (0, 2) if qtype == "q4_1" else (0,):
        field = b[:, :, off : off + 2].copy().view(np.uint16)
        field[field == 0x8000] = 0
        b[:, :, off : off + 2] = field.view(np.uint8)
    return b.reshape(data.shape)


def _same_bytes(ours: GGMLTensor, theirs: np.ndarray, what: str):
    theirs = _zero_sign_cleared(np.asarray(theirs).reshape(ours.data.shape), ours.qtype)
    ours = GGMLTensor(ours.qtype, _zero_sign_cleared(ours.data, ours.qtype), ours.shape)
    bad = np.argwhere(ours.data != theirs)
    assert bad.size == 0, (
        f"{what}: first differing byte at {tuple(bad[0])}: ours "
        f"{ours.data[tuple(bad[0])]}, gguf {theirs[tuple(bad[0])]}"
    )


@pytest.mark.parametrize("qtype", sorted(GGUF_TYPES))
@pytest.mark.parametrize("n", AWKWARD_N)
@pytest.mark.parametrize("k", AWKWARD_K)
def test_bit_exact_with_gguf_on_awkward_shapes(qtype, n, k):
    w = _awkward_values(n, k, seed=n * 1000 + k)
    theirs = gguf.quants.quantize(w, GGUF_TYPES[qtype])
    ref, fast = QUANTIZERS_REF[qtype](w), QUANTIZERS[qtype](w)
    _same_bytes(ref, theirs, f"{qtype} _ref vs gguf ({n}x{k})")
    _same_bytes(fast, theirs, f"{qtype} fast vs gguf ({n}x{k})")
    assert ref.nbytes == n * k // 32 * BLOCK_BYTES[qtype]
    np.testing.assert_array_equal(  # equal values (+0.0 == -0.0)
        dequantize_ggml(ref), gguf.quants.dequantize(theirs, GGUF_TYPES[qtype]).reshape(n, k)
    )
    np.testing.assert_array_equal(ref.data, fast.data)  # fast == _ref, signs of zeros too


@settings(deadline=None, max_examples=150)
@given(
    qtype=st.sampled_from(sorted(GGUF_TYPES)),
    w=arrays(
        np.float32,
        st.tuples(st.integers(1, 4), st.sampled_from([32, 64, 96])),
        elements=st.floats(-6e4, 6e4, allow_nan=False, width=32),
    ),
)
@example(qtype="q8_0", w=np.full((1, 32), 0.49999997 * 127 / 127, np.float32))
@example(qtype="q4_0", w=np.r_[np.float32(-1e-45), np.zeros(31, np.float32)][None, :])
def test_bit_exact_property(qtype, w):
    amax = np.abs(w.reshape(w.shape[0], -1, 32)).max(axis=2)
    assume(((amax == 0) | (amax > 1e-30)).all())  # not TINY_BLOCK_NOTE's undefined case
    theirs = gguf.quants.quantize(w, GGUF_TYPES[qtype])
    _same_bytes(QUANTIZERS_REF[qtype](w), theirs, f"{qtype} _ref vs gguf")
    _same_bytes(QUANTIZERS[qtype](w), theirs, f"{qtype} fast vs gguf")


@pytest.mark.parametrize("qtype", sorted(GGUF_TYPES))
def test_tiny_block_stores_level_zero_and_decodes_as_llama_cpp(qtype):
    # 1 / d overflows: ggml casts inf to an integer (undefined); both decode to zero weights
    w = np.full((2, 32), 1e-40, np.float32)
    w[1] = -3e-41
    ours = QUANTIZERS[qtype](w)
    np.testing.assert_array_equal(ours.data, QUANTIZERS_REF[qtype](w).data)
    np.testing.assert_array_equal(dequantize_ggml(ours), 0)


def test_f16_is_gguf_f16():
    w = _awkward_values(5, 96, seed=3)
    theirs = gguf.quants.quantize(w, gguf.GGMLQuantizationType.F16)
    from harmony_ref.kernels.formats import FORMATS

    ours = FORMATS["fp16"].quantize(w)
    np.testing.assert_array_equal(ours.view(np.uint16), theirs.view(np.uint16))


def test_levels_rows_and_concat():
    w = _awkward_values(6, 64, seed=5)
    t = QUANTIZERS["q4_1"](w)
    order = np.array([5, 0, 3, 1, 2, 4])
    np.testing.assert_array_equal(dequantize_ggml(t.rows(order)), dequantize_ggml(t)[order])
    both = concat_rows([t.rows(slice(0, 2)), t.rows(slice(2, 6))])
    np.testing.assert_array_equal(both.data, t.data)
    with pytest.raises(ValueError, match="one qtype"):
        concat_rows([t, QUANTIZERS["q4_0"](w)])


@pytest.mark.parametrize("qtype", sorted(GGUF_TYPES))
def test_bad_input(qtype):
    with pytest.raises(ValueError, match="not a multiple of 32"):
        QUANTIZERS[qtype](np.ones((2, 48), np.float32))
    w = np.ones((2, 32), np.float32)
    w[1, 3] = np.nan
    with pytest.raises(ValueError, match=r"w\[1, 3\]"):
        QUANTIZERS_REF[qtype](w)
    with pytest.raises(ValueError, match="uint8 of shape"):
        GGMLTensor(qtype, np.zeros((2, 3), np.uint8), (2, 32))
