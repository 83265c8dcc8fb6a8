"""The one backend interface: every backend has a `name` and `run(config) -> Metrics`.

`SimulatedDevice`, `HostDevice` and `CommandDevice` all satisfy it, so `harmony-ref run` and the
gate treat them alike; where their metrics overlap they use the same names (`ttft_ms`,
`decode_tokens_per_s`, `e2e_ms`, `peak_memory_mb`, ...).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from harmony_ref.metrics import Metrics


@runtime_checkable
class Backend(Protocol):
    name: str

    def run(self, config: Any) -> Metrics: ...


class BackendError(RuntimeError):
    """A measurement did not happen (timeout, crash, unparseable output): nothing is recorded."""
