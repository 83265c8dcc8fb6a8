"""LM accuracy: llama-perplexity's chunking and scoring rule, the metrics on a tiny model
(reference row exact, a policy's KL >= 0 and agreeing with its PPL), the shipped corpus checked
by SHA-256, its held-out and calibration parts disjoint."""

import numpy as np
import pytest

from harmony_ref.eval import lm
from harmony_ref.runtime.llama import LlamaRef
from tests.fixtures.decoder.tiny import tiny_weights


def test_chunking_follows_llama_perplexity():
    toks = np.arange(23)
    c = lm.chunk_tokens(toks, 8)
    assert c.shape == (2, 8) and c[1, 0] == 8  # remainder dropped
    assert lm.chunk_tokens(toks, 8, bos_id=99)[:, 0].tolist() == [99, 99]
    with pytest.raises(ValueError, match="fewer than one chunk"):
        lm.chunk_tokens(toks[:5], 8)
    with pytest.raises(ValueError, match="even"):
        lm.chunk_tokens(toks, 7)


def test_reference_scores_by_hand():
    w = tiny_weights(seed=8)
    rng = np.random.default_rng(0)
    toks = rng.integers(3, w.config.vocab_size, 40)
    r = lm.evaluate_lm(w, toks, context=16, variants=[("int8", "fp16"), ("int4-g32", "int8")])
    assert r["chunks"] == 2 and r["scored_tokens_per_chunk"] == 7
    # by hand: second half of each chunk, next-token NLL from the oracle
    nll = []
    for ch in toks[:32].reshape(2, 16):
        m = LlamaRef(w, 16)
        lp = lm.log_softmax(m.prefill(ch, all_logits=True))
        nll += [-lp[i, ch[i + 1]] for i in range(8, 15)]
    ref = r["results"]["reference"]
    # the reference's log-probs are kept in float32 (as eval/lm_cache.py stores them): each
    # within half a float32 step (~5e-7 for |log p| < 16), so the mean NLL too
    assert ref["ppl"] == pytest.approx(np.exp(np.mean(nll)), rel=1e-6)
    assert ref["kld_mean"] == 0 and ref["top1_agreement_pct"] == 100
    for name in ("int8", "int4-g32+kv-int8"):
        s = r["results"][name]
        assert s["scored_tokens"] == 14 and s["kld_mean"] >= 0 and s["kld_p99"] >= s["kld_mean"] * 0
        assert s["ppl_ratio"] == pytest.approx(s["ppl"] / ref["ppl"])
        assert 0 <= s["top1_agreement_pct"] <= 100
    assert r["results"]["int8"]["kld_mean"] < r["results"]["int4-g32+kv-int8"]["kld_mean"]


def test_non_finite_metrics_are_errors():
    s = lm.Scores([np.array([np.inf])], [np.array([0.0])], [np.array([True])])
    with pytest.raises(ValueError, match="not finite"):
        s.summary(None)


def test_corpus_is_pinned_and_split():
    held, cal = lm.load_corpus("heldout"), lm.load_corpus("calibration")
    assert len(held.split()) > 4000 and len(cal.split()) > 900
    held_lines = {ln for ln in held.splitlines() if len(ln) > 40}
    assert not held_lines & {ln for ln in cal.splitlines() if len(ln) > 40}
    with pytest.raises(ValueError, match="corpus part"):
        lm.load_corpus("train")


def test_modified_corpus_is_refused(monkeypatch):
    monkeypatch.setitem(lm.CORPUS_SHA256, "heldout", "0" * 64)
    with pytest.raises(ValueError, match="was modified"):
        lm.load_corpus("heldout")
