"""On the real SmolLM2-135M: W8A8 with per-channel scales calibrated on the corpus's calibration
split beats the same scales calibrated on random token ids, by KL divergence to FP32 on a
held-out chunk (measured on 2 chunks of 512: 0.42 vs 2.10 at N = 10); a pruned model runs
through the runtime with its narrower blocks. Skipped only when PyPI is unreachable."""

import numpy as np
import pytest

pytestmark = pytest.mark.network


def test_corpus_calibration_beats_random(smollm2):
    from harmony_ref.eval.compress import evaluate_policies
    from harmony_ref.eval.lm import load_corpus
    from harmony_ref.quant.policy import policy_from_dict

    w, tok = smollm2
    pols = [
        policy_from_dict(
            {
                "name": src,
                "default": "int8",
                "activations": {
                    "granularity": "per-channel",
                    "calibration": src,
                    "samples": 10,
                    "sample_tokens": 64,
                },
            },
            f"<{src}>",
        )
        for src in ("corpus", "random")
    ]
    out = evaluate_policies(w, tok.encode(load_corpus("heldout")), pols, context=256, max_chunks=1)[
        "results"
    ]
    assert out["corpus"]["kld_mean"] < 0.7 * out["random"]["kld_mean"], out


def test_pruned_real_model_runs(smollm2):
    from harmony_ref.compress import compress
    from harmony_ref.quant.policy import policy_from_dict
    from harmony_ref.runtime.llama import Llama

    w, tok = smollm2
    pol = policy_from_dict(
        {"name": "p", "default": "int8", "prune": {"ffn": 0.25, "heads": 0.34}}, "<p>"
    )
    m = Llama(compress(w, pol), pol, max_context=64)
    assert {(b.n_heads, b.n_kv_heads, b.ffn_dim) for b in m.blocks} == {(6, 3, 1152)}
    logits = m.prefill(tok.encode("The capital of France is"))
    assert logits.shape == (w.config.vocab_size,) and np.isfinite(logits).all()


def test_pruned_real_model_equals_zeroed_channels(smollm2):
    """Issue 15's FFN result (KLD ~9.5 at ffn 0.1) is the L1 criterion, not the mechanics: on
    the real GGUF layout (Q4_1 rows dequantized, fused gate|up in the kernel path) block 0 pruned
    at ffn 0.1 through the runtime gives the FP32 reference's logits with the same channels
    zeroed. Measured on 64 held-out tokens: that one block costs KLD 3.4 by L1 and 0.40 with
    random channels, the L1 channels carrying the block's largest activations."""
    import dataclasses

    from harmony_ref.compress import compress
    from harmony_ref.eval.lm import load_corpus, log_softmax
    from harmony_ref.model.prune import ffn_keep
    from harmony_ref.quant.policy import policy_from_dict
    from harmony_ref.runtime.llama import Llama, LlamaRef

    w, tok = smollm2
    toks = np.array(tok.encode(load_corpus("heldout"))[:32])
    pol = policy_from_dict(
        {"name": "p", "default": "fp32", "prune": {"blocks": {"0": {"ffn": 0.1}}}}, "<p>"
    )
    pruned = Llama(compress(w, pol), pol, max_context=64)
    assert [b.ffn_dim for b in pruned.blocks[:2]] == [1376, 1536]
    lw = w.layers[0]
    keep = ffn_keep(lw.w_gate, lw.w_up, lw.w_down, 0.1)
    mask = np.zeros(lw.w_up.shape[0], np.float32)
    mask[keep] = 1
    zeroed = dataclasses.replace(
        w, layers=[dataclasses.replace(lw, w_down=lw.w_down * mask)] + list(w.layers[1:])
    )
    ref = log_softmax(LlamaRef(zeroed, 64).prefill(toks, all_logits=True))
    got = log_softmax(pruned.prefill(toks, all_logits=True))
    kld = (np.exp(ref) * (ref - got)).sum(axis=1)
    assert kld.mean() < 1e-3 and (got.argmax(1) == ref.argmax(1)).mean() > 0.95, kld.mean()
