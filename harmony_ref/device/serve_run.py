"""One serving scenario run the way `harmony-ref serve` reports it: arrivals (a trace, or Poisson
at a rate with the config's prompt and new tokens), the device model's service times
(device/serve.py), and when asked the session KV cache (device/chat.py) deciding what each
request reuses; the simulation's result, the metrics and the typical request's service time.
Apart from device/serve.py because the session cache builds on it.

    run = run_serving(load_profile("harmony-flagship"), config, rate=0.5, minutes=10)
    run.metrics, run.result.summary(), run.typical.ttft_s
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harmony_ref.device.serve import (
    DEFAULT_QUEUE_LIMIT,
    DEFAULT_TIMEOUT_S,
    ServeResult,
    ServiceTime,
    device_service_model,
    load_trace,
    poisson_arrivals,
    simulate_serving,
)
from harmony_ref.metrics import Metrics


@dataclass(frozen=True)
class ServingRun:
    """One serving scenario on the device model, as `harmony-ref serve` reports it."""

    result: ServeResult
    source: str  # where the arrivals came from: "trace FILE" or the Poisson process
    typical: ServiceTime  # one request of the scenario's size on the device model, no queueing
    metrics: Metrics  # the serving metrics, and the session cache's when sessions are simulated
    sessions: dict | None  # the session KV cache's summary (device/chat.py), or None


def run_serving(
    profile,
    config,
    *,
    trace: str | Path | None = None,
    rate: float = 0.2,
    minutes: float | None = None,
    seed: int = 0,
    queue_limit: int = DEFAULT_QUEUE_LIMIT,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    sessions: int = 0,
    prefix_tokens: int = 0,
    kv_budget_tokens: int = 8192,
    context_limit: int = 4096,
    overflow: str = "truncate",
    keep_outcomes: bool = False,
) -> ServingRun:
    """Requests arriving at one session of `profile` running `config`: from `trace` (CSV), else
    Poisson at `rate` per second with the config's prompt and new tokens, over `minutes` (default
    10; a trace's own span: a default window around a 2-second trace would report an idle
    phone). With `sessions` or `prefix_tokens`, a session KV cache (device/chat.py) decides
    what each request reuses: `sessions` conversations (0: every request its own)."""
    import dataclasses

    if minutes is None:
        minutes = 0.0 if trace else 10.0
    duration_s = minutes * 60.0
    sc = config.scenario
    if trace:
        requests = load_trace(trace)
        source = f"trace {trace}"
    else:
        requests = poisson_arrivals(rate, duration_s, seed, sc.prompt_tokens, sc.new_tokens)
        source = f"Poisson {rate:g}/s, seed {seed}, {sc.prompt_tokens}+{sc.new_tokens} tokens"
    service = device_service_model(profile, config)
    admit = None
    if sessions or prefix_tokens:
        from harmony_ref.device.chat import (
            ConversationCache,
            ConversationService,
            assign_conversations,
        )
        from harmony_ref.model.graph import kv_bytes_per_token_per_layer

        ids = (
            assign_conversations(len(requests), sessions, seed)
            if sessions
            else list(range(len(requests)))
        )  # prefix only: every request its own conversation
        requests = [dataclasses.replace(r, conversation=i) for r, i in zip(requests, ids)]
        cache = ConversationCache(kv_budget_tokens, context_limit, overflow, prefix_tokens)
        admit = ConversationService(cache, profile, config)
    result = simulate_serving(
        requests,
        service,
        queue_limit,
        timeout_s,
        duration_s,
        keep_outcomes=keep_outcomes,
        admit=admit,
    )
    metrics = result.metrics()
    session_summary = None
    if admit is not None:
        from harmony_ref.device.chat import conversation_metrics

        kv_per_token = config.spec.n_layers * kv_bytes_per_token_per_layer(
            config.spec, config.kv_dtype
        )
        session_summary = admit.summary(kv_per_token)
        metrics.update(conversation_metrics(session_summary))
    return ServingRun(
        result, source, service(sc.prompt_tokens, sc.new_tokens), metrics, session_summary
    )
