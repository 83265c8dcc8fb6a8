"""The NumPy MiniLM forward on a tiny random BERT checkpoint (no downloads): against a plain
per-sentence reference written here, batch/padding invariance, every policy, the GELU twin."""

import math

import numpy as np
import pytest

from harmony_ref.kernels._testing import assert_within
from harmony_ref.kernels.formats import quantize
from harmony_ref.kernels.matmul import matmul_w4_ref, matmul_w8_ref
from harmony_ref.quant.int4 import Int4Tensor, dequantize_int4
from harmony_ref.quant.int8 import Int8Tensor, dequantize_int8
from harmony_ref.quant.policy import Policy, load_policy, parse_format, shipped_policies
from harmony_ref.runtime.linear import QuantLinear
from harmony_ref.runtime.minilm import GELU_ERF_ABS_ERROR, gelu_erf, gelu_erf_ref
from tests.fixtures.minilm.tiny import HEADS

# Named tolerances.
GELU_ABS_TOL = 4 * GELU_ERF_ABS_ERROR  # |gelu - ref| <= this * max(1, |x|): erf error + rounding
FORWARD_COS_TOL = 1e-5  # batched forward vs the plain per-sentence reference, 1 - cosine
BATCH_INVARIANCE_ATOL = 2e-6  # one sentence alone vs in a padded batch, per component
SENTENCES = [
    "The train to Leeds leaves at five in the afternoon.",
    "I did not lock the front door before leaving.",
    "How do I undo the last commit in git?",
    "ok so basically the thing broke again lol",
    "numbers 42 and 7 and 2,000",
    "zzqx unknownword",  # all [UNK]
    "a",
]


@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (33, 128), (2, 5, 7)])
def test_gelu_erf_matches_reference(shape):
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    x.flat[0] = 0.0
    ref, got = gelu_erf_ref(x), gelu_erf(x)
    tol = GELU_ABS_TOL * np.maximum(1.0, np.abs(x))
    assert got.shape == x.shape and got.dtype == np.float32
    assert_within(got, ref, tol, "gelu_erf")


def test_gelu_erf_edge_values():
    x = np.array(
        [[0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0, 1e30, -1e30, np.inf, -np.inf, np.nan]],
        dtype=np.float32,
    )
    got = gelu_erf(x)
    assert got[0, 0] == 0 and got[0, 4] == 30.0 and got[0, 5] == 0 and got[0, 6] == np.float32(1e30)
    assert got[0, 7] == 0 and got[0, 8] == np.inf and np.isnan(got[0, 10])
    with np.errstate(invalid="ignore"):  # -inf * 0 and inf - inf: NaN on purpose
        ref = gelu_erf_ref(x)  # the twin agrees on every edge, NaN where it gives NaN
        tol = GELU_ABS_TOL * np.maximum(1.0, np.abs(x))
        ok = np.isnan(ref) | (got == ref) | (np.abs(got - ref) <= tol)
    assert np.array_equal(np.isnan(got), np.isnan(ref)), (got, ref)
    assert ok.all(), (
        f"first bad index {np.argwhere(~ok)[:1].tolist()}: ref {ref[~ok][:1]} got {got[~ok][:1]}"
    )
    # Exact GELU is not the tanh form: at x = 1 they differ by ~1.6e-4, far above our error.
    assert (
        abs(
            float(gelu_erf(np.ones((1, 1), np.float32))[0, 0])
            - 0.5 * (1 + math.erf(1 / math.sqrt(2)))
        )
        < 1e-6
    )


def _plain_forward(model, sentence: str) -> np.ndarray:
    """Straight BERT for one unpadded sentence, head by head, math.erf GELU, float64."""
    p = {k: v.astype(np.float64) for k, v in model.params.items()}
    enc = model.tokenizer.encode(sentence)
    ids = np.array([i for i, m in zip(enc.ids, enc.attention_mask) if m])
    t = len(ids)

    def ln(x, g, b):
        mu = x.mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-12) * g + b

    def lin(x, name):
        return x @ p[name + ".weight"].T + p[name + ".bias"]

    h = (
        p["embeddings.word_embeddings.weight"][ids]
        + p["embeddings.position_embeddings.weight"][:t]
        + p["embeddings.token_type_embeddings.weight"][0]
    )
    h = ln(h, p["embeddings.LayerNorm.weight"], p["embeddings.LayerNorm.bias"])
    d = model.hidden // HEADS
    for i in range(model.n_layers):
        pre = f"encoder.layer.{i}."
        q, k, v = (lin(h, pre + f"attention.self.{n}") for n in ("query", "key", "value"))
        ctx = np.zeros_like(h)
        for head in range(HEADS):
            sl = slice(head * d, (head + 1) * d)
            s = q[:, sl] @ k[:, sl].T / math.sqrt(d)
            s = np.exp(s - s.max(-1, keepdims=True))
            ctx[:, sl] = (s / s.sum(-1, keepdims=True)) @ v[:, sl]
        a = ln(
            lin(ctx, pre + "attention.output.dense") + h,
            p[pre + "attention.output.LayerNorm.weight"],
            p[pre + "attention.output.LayerNorm.bias"],
        )
        f = lin(a, pre + "intermediate.dense")
        f = 0.5 * f * (1 + np.vectorize(math.erf)(f / math.sqrt(2)))
        h = ln(
            lin(f, pre + "output.dense") + a,
            p[pre + "output.LayerNorm.weight"],
            p[pre + "output.LayerNorm.bias"],
        )
    mean = h.mean(0)
    return mean / np.linalg.norm(mean)


def test_fp32_forward_matches_plain_reference(tiny):
    got = tiny.encode(SENTENCES, "fp32")
    assert got.shape == (len(SENTENCES), tiny.hidden) and got.dtype == np.float32
    for i, s in enumerate(SENTENCES):
        cos = float(got[i] @ _plain_forward(tiny, s))
        assert 1 - cos <= FORWARD_COS_TOL, f"sentence {i} {s!r}: cosine {cos}"


def test_padding_and_batching_do_not_change_embeddings(tiny):
    together = tiny.encode(SENTENCES, "fp32", batch_size=len(SENTENCES))
    for i, s in enumerate(SENTENCES):
        alone = tiny.encode([s], "fp32")[0]
        np.testing.assert_allclose(alone, together[i], atol=BATCH_INVARIANCE_ATOL, err_msg=s)
    np.testing.assert_allclose(
        tiny.encode(SENTENCES, "fp32", batch_size=2), together, atol=BATCH_INVARIANCE_ATOL
    )


def test_truncation_at_max_seq_len(tiny):
    long = " ".join(["train"] * 500)
    assert len(tiny.tokenizer.encode(long).ids) == tiny.max_seq_len
    assert np.isfinite(tiny.encode([long])).all()


# Lower bounds of the mean cosine to FP32 on this random checkpoint (measured ~0.9999, 0.9997,
# 0.987, 0.970): a broken format falls far below, and more bits must not be worse.
MIN_COSINE = {"fp16": 0.9999, "int8": 0.999, "int4-g32": 0.95, "int4-g128": 0.9}


@pytest.mark.parametrize("policy", sorted(set(shipped_policies()) | {"minilm-mixed"}))
def test_every_shipped_policy_runs(tiny, policy):
    ref = tiny.encode(SENTENCES, "fp32")
    emb = tiny.encode(SENTENCES, policy)
    assert emb.shape == ref.shape and np.isfinite(emb).all()
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    cos = (emb * ref).sum(1)
    assert cos.mean() >= MIN_COSINE.get(policy, 0.9), f"{policy}: mean cosine {cos.mean()}"
    if policy == "fp32":
        np.testing.assert_array_equal(emb, ref)


def test_cosine_orders_by_precision(tiny):
    ref = tiny.encode(SENTENCES, "fp32")
    cos = {p: float((tiny.encode(SENTENCES, p) * ref).sum(1).mean()) for p in MIN_COSINE}
    assert cos["fp16"] > cos["int8"] > cos["int4-g32"] > cos["int4-g128"], cos


def test_policy_formats_reach_the_real_layer_names(tiny, tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(
        'name = "t"\ndefault = "int4-g128"\nkeep_int8_layers = ["attention.self"]\n'
        '[layers]\n"encoder.layer.1.output.dense" = "fp16"\n"*intermediate*" = "int4-g32"\n'
    )
    lin = tiny.linears(str(path))
    for name, q in lin.items():
        fmt = load_policy(str(path)).format_for(name)
        assert q.fmt == fmt
        assert q.nbytes == fmt.nbytes(*q.shape), name  # the real arrays are what the format says
        if name == "encoder.layer.1.output.dense":
            assert q.stored.dtype == np.float16
        elif "attention.self" in name:
            assert isinstance(q.stored, Int8Tensor)
        elif "intermediate" in name:
            assert isinstance(q.stored, Int4Tensor) and q.stored.group_size == 32
        else:
            assert isinstance(q.stored, Int4Tensor) and q.stored.group_size == 128
    assert tiny.linears(str(path)) is lin  # quantized once, then cached


DEQUANT_MATMUL_TOL = 1e-4  # "dequant" backend vs x @ W_hat.T: same float32 product, other order
KERNEL_VS_REF_TOL = 1e-4  # "kernels" backend vs harmony_ref.kernels' NumPy twins
# Kernels also quantize x to int8 per 32-block: |error| <= sum_k |W_hat| * xs / 2 per output,
# about 0.5 % of |y| here; 3 % relative to the largest output catches a broken dispatch.
KERNEL_VS_FLOAT_REL = 0.03


@pytest.mark.parametrize("fmt", ["fp16", "int8", "int4-g32", "int4-g128", "int4-g64-sym"])
def test_linear_dispatch(fmt):
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((33, 256)) * 0.05).astype(np.float32)
    b = rng.standard_normal(33).astype(np.float32)
    x = rng.standard_normal((17, 256)).astype(np.float32)
    f = parse_format(fmt)
    stored = quantize(w, f)
    if isinstance(stored, Int4Tensor):
        dense = dequantize_int4(stored)
    elif isinstance(stored, Int8Tensor):
        dense = dequantize_int8(stored)
    else:
        dense = stored.astype(np.float32)
    want = x @ dense.T + b
    got = QuantLinear("l", f, stored, b, backend="dequant")(x)
    np.testing.assert_allclose(got, want, rtol=DEQUANT_MATMUL_TOL, atol=DEQUANT_MATMUL_TOL)
    got = QuantLinear("l", f, stored, b, backend="kernels")(x)
    if isinstance(stored, Int4Tensor):
        np.testing.assert_allclose(
            got, matmul_w4_ref(x, stored) + b, rtol=KERNEL_VS_REF_TOL, atol=KERNEL_VS_REF_TOL
        )
    elif isinstance(stored, Int8Tensor):
        np.testing.assert_allclose(
            got, matmul_w8_ref(x, stored) + b, rtol=KERNEL_VS_REF_TOL, atol=KERNEL_VS_REF_TOL
        )
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err <= KERNEL_VS_FLOAT_REL, f"{fmt}: kernels differ from the float product by {err:.3%}"


def test_backends_differ_only_by_activation_quantization(tiny):
    from harmony_ref.runtime.minilm import MiniLM

    deq = MiniLM(tiny.params, tiny.tokenizer, n_heads=HEADS, linear_backend="dequant")
    ker = MiniLM(tiny.params, tiny.tokenizer, n_heads=HEADS, linear_backend="kernels")
    assert deq.resolved_backend() == "dequant" and ker.resolved_backend() == "kernels"
    np.testing.assert_array_equal(deq.encode(SENTENCES, "fp16"), ker.encode(SENTENCES, "fp16"))
    a, b = deq.encode(SENTENCES, "int8"), ker.encode(SENTENCES, "int8")
    assert not np.array_equal(a, b) and (a * b).sum(1).min() > 0.999


def test_bad_input(tiny):
    with pytest.raises(ValueError, match="list of strings"):
        tiny.encode("one string", "fp32")
    with pytest.raises(ValueError, match="unknown policy"):
        tiny.encode(["x"], "no-such-policy")
    with pytest.raises(ValueError, match="unknown weight format"):
        tiny.linears(Policy("bad", parse_format("fp32"), layers=())) and parse_format("int3")
