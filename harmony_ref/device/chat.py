"""Prompt prefix reuse and the conversation KV cache that `serve` keeps.

A conversation is a shared system prompt of `prefix_tokens`, then turns: each request
of the conversation sends `prompt_tokens` of new text and generates `new_tokens`, all of which join
the conversation's history. The runtime keeps KV states in an LRU cache under a token budget:
- the shared prefix is cached once and pinned (it counts against the budget);
- each cached conversation holds the KV of its own history (past prompts and outputs);
- after a request the conversation moves to the most-recent end; the least recently used conversations are
  evicted whole (never part of one) until the cache fits; a conversation bigger than the budget on its
  own is not kept.
A request on a cached conversation (a hit) prefills only its new prompt, attending over history +
prompt; a miss prefills its history again (the app re-sends the conversation) after the prefix,
which is reused when cached. Without reuse every request would prefill prefix + history + prompt.

The context limit is enforced: a request whose prefix + history + prompt + new tokens exceed
`context_limit` is, by `overflow`, `refuse`d (answered at once, the conversation unchanged) or
`truncate`d (the history is dropped, the system prompt kept, and the request runs on that; if even
that does not fit it is refused). Both are counted.

    cache = ConversationCache(budget_tokens=8192, context_limit=4096, prefix_tokens=256)
    adm = cache.admit(conversation=3, prompt_tokens=64, new_tokens=128)   # Admission(...)
    cache.stats()                                                     # hit rate, tokens held, ...
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from harmony_ref.units import MB, MS_PER_S

if TYPE_CHECKING:  # annotations only; imported where used
    from harmony_ref.metrics import Metrics

OVERFLOW = ("truncate", "refuse")


@dataclass(frozen=True)
class Admission:
    status: str  # "ok", "truncated" (history dropped to fit) or "refused"
    hit: bool  # the conversation's own KV state was in the cache
    reused_tokens: int  # KV positions not prefilled again (cached history, or just the prefix)
    prefill_tokens: int  # tokens prefill runs
    context_tokens: int  # positions the prompt's last token attends to (prefix + history + prompt)


class ConversationCache:
    """The LRU cache of KV states (the module docstring). Counts everything it decides."""

    def __init__(
        self,
        budget_tokens: int,
        context_limit: int,
        overflow: str = "truncate",
        prefix_tokens: int = 0,
    ):
        for name, v, lo in (
            ("budget_tokens", budget_tokens, 1),
            ("context_limit", context_limit, 2),
            ("prefix_tokens", prefix_tokens, 0),
        ):
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ValueError(f"{name} = {v!r}: must be an int >= {lo}")
        if overflow not in OVERFLOW:
            raise ValueError(f"overflow = {overflow!r}: must be one of {list(OVERFLOW)}")
        if prefix_tokens > budget_tokens:
            raise ValueError(
                f"prefix_tokens = {prefix_tokens} exceeds budget_tokens = "
                f"{budget_tokens}: the shared prefix could not be cached"
            )
        if prefix_tokens >= context_limit:
            raise ValueError(
                f"prefix_tokens = {prefix_tokens}: must be less than context_limit = "
                f"{context_limit}"
            )
        self.budget_tokens, self.context_limit = budget_tokens, context_limit
        self.overflow, self.prefix_tokens = overflow, prefix_tokens
        self._cached: OrderedDict[int, int] = OrderedDict()  # conversation -> its history's tokens
        self._history: dict[int, int] = {}  # conversation -> history tokens (cached or not)
        self.counts = {
            "requests": 0,
            "hits": 0,
            "misses": 0,
            "truncated": 0,
            "refused": 0,
            "evicted_sessions": 0,
            "reused_tokens": 0,
            "prefilled_tokens": 0,
            "prefill_without_reuse_tokens": 0,
        }
        self.max_held_tokens = self.held_tokens

    @property
    def held_tokens(self) -> int:
        return self.prefix_tokens + sum(self._cached.values())

    def admit(self, conversation: int, prompt_tokens: int, new_tokens: int) -> Admission:
        """Decide one request at its service start, and update the cache as if it completed."""
        c = self.counts
        c["requests"] += 1
        history = self._history.get(conversation, 0)
        status = "ok"
        if self.prefix_tokens + history + prompt_tokens + new_tokens > self.context_limit:
            fresh = self.prefix_tokens + prompt_tokens + new_tokens  # without the history
            if self.overflow == "refuse" or fresh > self.context_limit:
                c["refused"] += 1
                return Admission("refused", False, 0, 0, 0)
            status, history = "truncated", 0
            c["truncated"] += 1
            self._history[conversation] = 0
            self._cached.pop(conversation, None)
        hit = conversation in self._cached
        context = self.prefix_tokens + history + prompt_tokens
        reused = self.prefix_tokens + (history if hit else 0)
        c["hits" if hit else "misses"] += 1
        c["reused_tokens"] += reused
        c["prefilled_tokens"] += context - reused
        c["prefill_without_reuse_tokens"] += context
        self._history[conversation] = history + prompt_tokens + new_tokens
        self._cached[conversation] = self._history[conversation]
        self._cached.move_to_end(conversation)
        while self.held_tokens > self.budget_tokens and len(self._cached) > 1:
            self._cached.popitem(last=False)
            c["evicted_sessions"] += 1
        if self.held_tokens > self.budget_tokens:  # this conversation alone is too big to keep
            self._cached.pop(conversation)
        self.max_held_tokens = max(self.max_held_tokens, self.held_tokens)
        return Admission(status, hit, reused, context - reused, context)

    def stats(self, kv_bytes_per_token: float = 0.0) -> dict:
        c = self.counts
        admitted = c["hits"] + c["misses"]
        return {
            **c,
            "hit_rate": c["hits"] / admitted if admitted else 0.0,
            "cached_sessions": len(self._cached),
            "held_tokens": self.held_tokens,
            "max_held_tokens": self.max_held_tokens,
            "max_held_mb": self.max_held_tokens * kv_bytes_per_token / MB,
            "budget_mb": self.budget_tokens * kv_bytes_per_token / MB,
        }


def conversation_metrics(summary: dict) -> Metrics:
    """The conversation cache's summary (ConversationService.summary) as exact metrics."""
    from harmony_ref.metrics import Metrics

    m = Metrics()
    m.add(
        "serve_session_hit_rate",
        summary["hit_rate"],
        "fraction",
        "higher",
        description="requests whose conversation KV state was cached, of those admitted",
    )
    m.add(
        "serve_kv_held_max_mb",
        summary["max_held_mb"],
        "MB",
        "none",
        description="most KV cache the conversation cache held (prefix + cached histories)",
    )
    m.add("serve_truncated", summary["truncated"], "requests", "lower")
    m.add("serve_refused", summary["refused"], "requests", "lower")
    if summary["ttft_reuse_mean_ms"] is not None:
        m.add(
            "serve_ttft_reuse_mean_ms",
            summary["ttft_reuse_mean_ms"],
            "ms",
            "lower",
            description="service TTFT (no queueing) with the cached prefix and history reused",
        )
        m.add(
            "serve_ttft_no_reuse_mean_ms",
            summary["ttft_no_reuse_mean_ms"],
            "ms",
            "none",
            description="the same requests prefilling everything again",
        )
    return m


def assign_conversations(n_requests: int, conversations: int, seed: int = 0) -> list[int]:
    """A conversation id (0..conversations-1, uniform, seeded) for each of `n_requests` requests."""
    if not isinstance(conversations, int) or isinstance(conversations, bool) or conversations < 1:
        raise ValueError(f"conversations = {conversations!r}: must be an int >= 1")
    rng = np.random.default_rng([seed, 14])  # its own stream: the arrivals' RNG is untouched
    return [int(x) for x in rng.integers(0, conversations, n_requests)]


def prefix_service(profile, config):
    """(prefill_tokens, context_tokens, new_tokens) -> (ttft_s, total_s) on the device cost
    model: a scenario whose first context - prefill prompt tokens are already cached."""
    import dataclasses

    from harmony_ref.config import Scenario
    from harmony_ref.device.cost import scenario_timing

    base = config.scenario

    @cache
    def service(prefill_tokens: int, context_tokens: int, new_tokens: int) -> tuple[float, float]:
        sc = Scenario(
            context_tokens,
            new_tokens,
            max(base.context_tokens, context_tokens + new_tokens),
            base.batch,
            context_tokens - prefill_tokens,
        )
        t = scenario_timing(profile, dataclasses.replace(config, scenario=sc))
        return t.ttft_s, t.e2e_s

    return service


class ConversationService:
    """What `simulate_serving(..., admit=...)` calls at each service start: the cache decides the
    request, the device model times it. Keeps the service-level TTFT with and without reuse."""

    def __init__(self, cache: ConversationCache, profile, config):
        self.cache, self.time = cache, prefix_service(profile, config)
        self.ttft_reuse_ms: list[float] = []
        self.ttft_no_reuse_ms: list[float] = []

    def __call__(self, request):
        from harmony_ref.device.serve import ServiceTime

        adm = self.cache.admit(request.conversation, request.prompt_tokens, request.new_tokens)
        if adm.status == "refused":
            return None
        ttft, total = self.time(adm.prefill_tokens, adm.context_tokens, request.new_tokens)
        whole, _ = self.time(adm.context_tokens, adm.context_tokens, request.new_tokens)
        self.ttft_reuse_ms.append(ttft * MS_PER_S)
        self.ttft_no_reuse_ms.append(whole * MS_PER_S)
        return ServiceTime(ttft, total)

    def summary(self, kv_bytes_per_token: float) -> dict:
        out = self.cache.stats(kv_bytes_per_token)
        for key, vals in (
            ("ttft_reuse_mean_ms", self.ttft_reuse_ms),
            ("ttft_no_reuse_mean_ms", self.ttft_no_reuse_ms),
        ):
            out[key] = float(np.mean(vals)) if vals else None
        return out
