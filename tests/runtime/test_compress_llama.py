"""Pruned and W8A8 policies through the decoder runtime (runtime/llama.py, compress/observe.py)
on tiny random checkpoints: W8A8 follows the FP32 oracle about as well as dynamic int8,
calibration windows are seeded and come from the calibration split only, the scales cover what
calibration saw, fused and unfused W8A8 Linears agree, corpus calibration without a tokenizer is
a clear error, prefill == decode on a pruned W8A8 model. The real-text-beats-random test on
SmolLM2 is in test_compress_real.py."""

import numpy as np
import pytest

from harmony_ref.compress import compress
from harmony_ref.compress import observe as cal
from harmony_ref.kernels.matmul_w8a8 import W8A8Weight
from harmony_ref.quant.compress import ActivationSpec
from harmony_ref.quant.policy import policy_from_dict
from harmony_ref.runtime.llama import Llama, LlamaRef
from tests.fixtures.decoder.tiny import tiny_config, tiny_weights

TOKENS = [1, 40, 50, 260, 268, 35, 52, 53, 7, 2, 99, 100, 101]
# Relative RMS logit error vs the FP32 oracle on a random 2-layer model, scales calibrated on
# random ids (dynamic int8 measures ~0.017). Per-channel scales folded into the weights widen
# the weights' int8 steps (measured 0.115 here); smooth (alpha 0.5) measured 0.061.
W8A8_VS_REF_REL_RMS = {"per-tensor": 0.06, "per-channel": 0.2, "smooth": 0.1}
PREFILL_VS_DECODE_ABS_TOL = 2e-3


def _pol(act=None, prune=None, default="int8", **kw):
    d = {"name": "t", "default": default, **kw}
    if act is not None:
        d["activations"] = act
    if prune is not None:
        d["prune"] = prune
    return policy_from_dict(d, "<test>")


def _rel_rms(got, ref):
    return float(np.sqrt(((got - ref) ** 2).mean() / (ref**2).mean()))


@pytest.mark.parametrize("granularity", sorted(W8A8_VS_REF_REL_RMS))
def test_w8a8_follows_the_oracle(granularity):
    w = tiny_weights(tiny_config("llama", tied=True), seed=4)
    ref = LlamaRef(w).prefill(TOKENS, all_logits=True)
    act = {"granularity": granularity, "calibration": "random", "samples": 8, "sample_tokens": 32}
    m = Llama(compress(w, _pol(act)), _pol(act))
    assert isinstance(m.lm_head.stored, W8A8Weight)
    assert isinstance(m.blocks[0].qkv.single.stored, W8A8Weight)
    got = m.prefill(TOKENS, all_logits=True)
    err = _rel_rms(got, ref)
    assert err <= W8A8_VS_REF_REL_RMS[granularity]
    m.reset()
    steps = np.stack([m.decode(t) for t in TOKENS])
    assert np.abs(steps - got).max() <= PREFILL_VS_DECODE_ABS_TOL


def test_fused_and_unfused_w8a8_agree():
    w = tiny_weights(tiny_config("qwen2"), seed=2)
    act = {"calibration": "random", "samples": 4, "sample_tokens": 16}
    fused = Llama(compress(w, _pol(act)), _pol(act)).prefill(TOKENS, all_logits=True)
    # k_proj in fp32 splits q|k|v into three Linears; q and v keep int8 with the shared scale
    one_fp32 = _pol(act, layers={"*.k_proj": "fp32"})
    split = Llama(compress(w, one_fp32), one_fp32).prefill(TOKENS, all_logits=True)
    assert _rel_rms(split, fused) <= 0.05


def test_pruned_w8a8_runs_and_reports_narrow_blocks():
    w = tiny_weights(tiny_config("llama", n_heads=8, n_kv_heads=2, ffn_dim=128), seed=9)
    pol = _pol(
        {"calibration": "random", "samples": 2, "sample_tokens": 16}, {"ffn": 0.5, "heads": 0.5}
    )
    m = Llama(compress(w, pol), pol)
    assert [(b.n_heads, b.n_kv_heads, b.ffn_dim) for b in m.blocks] == [(4, 2, 64)] * 2
    full = m.prefill(TOKENS, all_logits=True)
    m.reset()
    steps = np.stack([m.decode(t) for t in TOKENS])
    assert np.abs(steps - full).max() <= PREFILL_VS_DECODE_ABS_TOL


def test_calibration_windows():
    w = tiny_weights(tiny_config("llama"), seed=0)
    spec = ActivationSpec(calibration="corpus", samples=5, sample_tokens=8, seed=1)
    text = list(range(100, 150))
    a = cal.calibration_windows(w, spec, text)
    assert a.shape == (5, 8) and (a == cal.calibration_windows(w, spec, text)).all()
    for row in a:  # each window is a contiguous run of the given tokens
        assert (np.diff(row) == 1).all() and row[0] >= 100 and row[-1] < 150
    r = cal.calibration_windows(
        w, ActivationSpec(calibration="random", samples=3, sample_tokens=8), None
    )
    assert r.shape == (3, 8) and r.max() < w.config.vocab_size
    with pytest.raises(ValueError, match="fewer than sample_tokens"):
        cal.calibration_windows(w, spec, [1, 2, 3])
    with pytest.raises(ValueError, match="needs the model's tokenizer"):
        compress(w, _pol({"calibration": "corpus", "samples": 1, "sample_tokens": 8}))


def test_scales_cover_observed_inputs():
    w = tiny_weights(tiny_config("llama"), seed=3)
    base = Llama(w, "fp32", max_context=32)
    windows = np.array([TOKENS[:8], TOKENS[4:12]])
    scales = cal.observe_scales(base, windows, "per-channel")
    names = set(base.formats())
    assert names <= set(scales) and "lm_head" in scales
    # q, k and v read one input: one scale
    assert (
        scales["model.layers.0.self_attn.q_proj"] == scales["model.layers.0.self_attn.v_proj"]
    ).all()
    assert base.blocks[0].qkv.__class__.__name__ == "Fused"  # restored after observing
    h = base.embed[windows[0]]
    assert scales["model.layers.0.self_attn.q_proj"].shape == (w.config.dim,)
    assert np.isfinite(h).all()


def test_calibration_split_pin_matches_the_corpus_loader():
    from harmony_ref.eval.lm import CORPUS_SHA256, load_corpus

    assert cal.CALIBRATION_SHA256 == CORPUS_SHA256["calibration"]
    assert cal.calibration_text() == load_corpus("calibration")
    assert cal.calibration_text() != load_corpus("heldout")


def _in_nucleus(logits, token, top_p):
    """Whether `token` is among the most likely tokens whose probability first reaches top_p."""
    z = np.asarray(logits, np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    keep = int(np.searchsorted(np.cumsum(p[order]), top_p) + 1)
    return token in set(order[:keep].tolist())


def test_generated_windows_are_the_models_own_text():
    w = tiny_weights(tiny_config("llama"), seed=0)
    text = np.arange(100, 150)
    spec = ActivationSpec(calibration="generated", samples=3, sample_tokens=10, seed=1)
    built = []

    def sampler(weights, max_context):
        built.append(max_context)
        return Llama(weights, cal.GENERATED_POLICY, max_context=max_context)

    with pytest.raises(ValueError, match="needs a model to sample"):
        cal.calibration_windows(w, spec, text)
    cal._GENERATED.clear()
    a = cal.calibration_windows(w, spec, text, sampler)
    assert built == [10]
    assert a.shape == (3, 10) and a.dtype == np.int64 and a.max() < w.config.vocab_size
    k = cal.GENERATED_PROMPT_TOKENS
    for row in a:  # a prompt from the given (calibration) tokens, then the model's own tokens
        assert (np.diff(row[:k]) == 1).all() and 100 <= row[0] and row[k - 1] < 150
        m = Llama(w, cal.GENERATED_POLICY, max_context=10)
        for t in range(k, 10):
            m.reset()
            logits = m.prefill(row[:t])
            assert _in_nucleus(logits, int(row[t]), cal.GENERATED_TOP_P)
    cached = cal.calibration_windows(w, spec, text, sampler)
    cal._GENERATED.clear()
    assert (cached == a).all() and (cal.calibration_windows(w, spec, text, sampler) == a).all()
    fewer = ActivationSpec(calibration="generated", samples=2, sample_tokens=10, seed=1)
    cal._GENERATED.clear()
    assert (
        cal.calibration_windows(w, fewer, text, sampler) == a[:2]
    ).all()  # a prefix of the larger run
    other = ActivationSpec(calibration="generated", samples=3, sample_tokens=10, seed=2)
    assert (cal.calibration_windows(w, other, text, sampler) != a).any()
    too_short = ActivationSpec(calibration="generated", samples=1, sample_tokens=k)
    with pytest.raises(ValueError, match="must exceed the"):
        cal.calibration_windows(w, too_short, text, sampler)


def test_generated_calibration_reaches_pruning_repair(monkeypatch):
    w = tiny_weights(tiny_config("llama"), seed=2)
    seen = []
    real = cal.generated_windows

    def spy(weights, spec, tokens, sampling_model):
        out = real(weights, spec, tokens, sampling_model)
        seen.append((spec.samples, spec.sample_tokens, out.shape))
        return out

    monkeypatch.setattr(cal, "generated_windows", spy)
    prune = {
        "ffn": 0.5,
        "score": "activation",
        "repair": True,
        "calibration": "generated",
        "samples": 2,
        "sample_tokens": 8,
    }
    pol = _pol(prune=prune, default="fp32")
    assert pol.prune.calibration == "generated" and "gen" in pol.prune.label
    m = Llama(compress(w, pol, list(range(100, 150))), pol)
    assert seen == [(2, 8, (2, 8))]
    assert np.isfinite(m.prefill(TOKENS[:6])).all()
    assert 'calibration = "generated"' in "\n".join(pol.prune.to_toml())
    with pytest.raises(ValueError, match="calibration' = 'text': must be one of"):
        _pol(prune={**prune, "calibration": "text"})
    with pytest.raises(
        ValueError, match='applies to score = "activation", repair = true or distill_epochs'
    ):
        _pol(prune={"ffn": 0.5, "calibration": "generated"})
