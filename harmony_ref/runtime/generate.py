"""Token generation over a decoder (runtime/llama.py): greedy or seeded sampling, stop at EOS,
with the timings a phone-LLM team reads (TTFT, prefill and decode tokens/s, peak RSS).

    sampler = Sampler(temperature=0.8, top_k=40, top_p=0.95, seed=0)   # temperature 0: greedy
    result = generate(model, prompt_ids, max_new=64, sampler=sampler, stop_ids={2})

Sampling order (llama.cpp's default chain, less its penalties): top-k, then softmax at the
temperature, then top-p (the smallest set of most likely tokens whose probability reaches p),
then one draw from a numpy Generator seeded by `seed`. Greedy is argmax (first index on ties).

Timing: TTFT = prefill of the prompt + choosing the first token; prefill tokens/s = prompt tokens
/ prefill seconds; decode tokens/s = tokens produced by decode steps / their seconds (the first
generated token comes from the prefill logits, so n_new - 1 decode steps when no stop token).
"""

from __future__ import annotations

import resource
import sys
import time
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Sampler:
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: all tokens
    top_p: float = 1.0
    seed: int | None = None
    rng: np.random.Generator = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if not (self.temperature >= 0 and np.isfinite(self.temperature)):
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        object.__setattr__(self, "rng", np.random.default_rng(self.seed))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def __call__(self, logits: np.ndarray) -> int:
        if self.greedy:
            return int(np.argmax(logits))
        logits = np.asarray(logits, dtype=np.float64)
        idx = np.arange(logits.shape[0])
        if 0 < self.top_k < logits.shape[0]:
            idx = np.argpartition(-logits, self.top_k - 1)[: self.top_k]
        z = logits[idx] / self.temperature
        order = np.argsort(-z, kind="stable")
        idx, z = idx[order], z[order]
        p = np.exp(z - z[0])
        p /= p.sum()
        if self.top_p < 1:
            keep = int(np.searchsorted(np.cumsum(p), self.top_p) + 1)
            idx, p = idx[:keep], p[:keep] / p[:keep].sum()
        return int(idx[self.rng.choice(len(idx), p=p)])


@dataclass
class Generation:
    prompt_tokens: int
    tokens: list[int]  # generated ids (the stop token, if any, not included)
    stopped_at_eos: bool
    ttft_s: float
    prefill_s: float
    decode_s: float
    decode_steps: int

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else float("nan")

    @property
    def decode_tokens_per_s(self) -> float:
        return self.decode_steps / self.decode_s if self.decode_s > 0 else float("nan")

    def metrics(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": len(self.tokens),
            "stopped_at_eos": self.stopped_at_eos,
            "ttft_ms": 1e3 * self.ttft_s,
            "prefill_tokens_per_s": self.prefill_tokens_per_s,
            "decode_tokens_per_s": self.decode_tokens_per_s,
            "decode_steps": self.decode_steps,
            "peak_rss_mb": peak_rss_mb(),
        }


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (getrusage; KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


def generate(
    model, prompt_ids, max_new: int, sampler: Sampler | None = None, stop_ids=(), on_token=None
) -> Generation:
    """Prefill `prompt_ids` (model reset first), then sample up to `max_new` tokens."""
    if len(prompt_ids) == 0:
        raise ValueError("the prompt has no tokens")
    if max_new < 1:
        raise ValueError(f"max_new must be >= 1, got {max_new}")
    if len(prompt_ids) + max_new > model.max_context:
        raise ValueError(
            f"prompt ({len(prompt_ids)} tokens) + max_new ({max_new}) exceeds the "
            f"model's max context {model.max_context}"
        )
    sampler = sampler or Sampler()
    stop = frozenset(int(i) for i in stop_ids)
    model.reset()
    t0 = time.perf_counter()
    logits = model.prefill(np.asarray(prompt_ids, dtype=np.int64))
    t_prefill = time.perf_counter()
    token = sampler(logits)
    ttft = time.perf_counter() - t0
    out, stopped, steps = [], False, 0
    t_decode = time.perf_counter()
    while True:
        if token in stop:
            stopped = True
            break
        out.append(token)
        if on_token is not None:
            on_token(token)
        if len(out) >= max_new:
            break
        token = sampler(model.decode(token))
        steps += 1
    decode_s = time.perf_counter() - t_decode
    return Generation(len(prompt_ids), out, stopped, ttft, t_prefill - t0, decode_s, steps)
