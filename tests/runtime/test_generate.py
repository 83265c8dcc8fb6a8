"""Sampling and generation: greedy is argmax, seeded sampling is reproducible and stays inside
top-k / top-p, generation stops at EOS, the metrics are finite and consistent."""

import numpy as np
import pytest

from harmony_ref.runtime.generate import Sampler, generate
from harmony_ref.runtime.llama import Llama
from tests.fixtures.decoder.tiny import tiny_weights


def test_greedy_is_argmax_first_on_ties():
    s = Sampler()
    assert s(np.array([0.1, 3.0, 3.0, -1.0])) == 1


def test_seeded_sampling_is_reproducible_and_respects_top_k_top_p():
    logits = np.log(np.array([0.5, 0.3, 0.1, 0.05, 0.05]))
    a = [Sampler(1.0, seed=7)(logits) for _ in range(1)]
    s1, s2 = Sampler(1.0, seed=7), Sampler(1.0, seed=7)
    assert [s1(logits) for _ in range(50)] == [s2(logits) for _ in range(50)]
    k2 = Sampler(1.0, top_k=2, seed=1)
    assert {k2(logits) for _ in range(300)} == {0, 1}
    p = Sampler(1.0, top_p=0.75, seed=2)  # 0.5 + 0.3 reaches 0.75: two tokens
    assert {p(logits) for _ in range(300)} == {0, 1}
    cold = Sampler(0.05, seed=3)
    assert {cold(logits) for _ in range(100)} == {0}
    hot = Sampler(1.0, seed=4)
    draws = np.array([hot(logits) for _ in range(4000)])
    assert abs((draws == 0).mean() - 0.5) < 0.04 and a  # frequencies follow the softmax


def test_bad_sampler_settings():
    for kw in ({"temperature": -1}, {"top_k": -1}, {"top_p": 0}, {"top_p": 1.5}):
        with pytest.raises(ValueError):
            Sampler(**kw)


class _Scripted:
    """A 'model' whose next-token logits follow a script, to test the loop itself."""

    max_context = 64

    def __init__(self, script, vocab=10):
        self.script, self.vocab, self.i = script, vocab, 0

    def reset(self):
        self.i = 0

    def _logits(self):
        out = np.zeros(self.vocab, np.float32)
        out[self.script[min(self.i, len(self.script) - 1)]] = 10
        self.i += 1
        return out

    def prefill(self, ids):
        return self._logits()

    def decode(self, token):
        return self._logits()


def test_stops_at_eos_and_counts_steps():
    g = generate(_Scripted([4, 5, 6, 2, 7]), [1, 3], max_new=10, stop_ids={2})
    assert g.tokens == [4, 5, 6] and g.stopped_at_eos and g.decode_steps == 3
    g = generate(_Scripted([4, 5, 6, 2]), [1], max_new=2, stop_ids={2})
    assert g.tokens == [4, 5] and not g.stopped_at_eos and g.decode_steps == 1
    m = g.metrics()
    assert m["new_tokens"] == 2 and m["ttft_ms"] > 0 and m["peak_rss_mb"] > 10


def test_generation_on_a_tiny_model_is_reproducible():
    w = tiny_weights(seed=2)
    m = Llama(w, "int4-g32", max_context=64)
    a = generate(m, [1, 40, 41], 12, Sampler(0.9, top_k=20, seed=11))
    b = generate(m, [1, 40, 41], 12, Sampler(0.9, top_k=20, seed=11))
    assert a.tokens == b.tokens and len(a.tokens) == 12
    assert np.isfinite(a.decode_tokens_per_s) and a.decode_tokens_per_s > 0
    with pytest.raises(ValueError, match="exceeds"):
        generate(m, [1] * 60, 10)
    with pytest.raises(ValueError, match="no tokens"):
        generate(m, [], 3)
