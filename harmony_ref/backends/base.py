"""The one backend interface: every backend has a `name` and `run(config) -> Measurement`.

    m = backend.run(config)        # config: a RunConfig
    m.metrics, m.provenance, m.findings, m.physics, m.config, m.ops

`SimulatedDevice`, `HostDevice` and `CommandDevice` all satisfy it, so `harmony-ref run` and the
gate treat them alike; where their metrics overlap they use the same names (`ttft_ms`,
`decode_tokens_per_s`, `e2e_ms`, `peak_memory_mb`, ...; the phase times are E2E_METRICS).

A measured backend checks its metrics against a roofline (device/physics.py) when it knows the
hardware's profile: metrics faster than physics allows come back flagged `implausible`, one line
per flag in `findings`, and `physics` says what was checked against what. A measurement that did
not happen (timeout, crash, unparseable output) raises BackendError: nothing is returned, so
nothing can be recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from harmony_ref.metrics import Metrics

E2E_METRICS = ("prefill_ms", "decode_step_ms", "e2e_ms")  # the phases every backend reports


@dataclass(frozen=True)
class Measurement:
    metrics: Metrics
    provenance: dict[str, str]  # where and how it was measured, as the backend knows it
    findings: tuple[str, ...] = ()  # physics: one line per metric flagged implausible
    physics: str = ""  # what the metrics were checked against ("" for a prediction)
    config: Any = None  # the RunConfig measured (the host may measure a width-scaled copy)
    ops: tuple = ()  # per-op times where the backend has them (HostDevice: OpTime per graph op)


@runtime_checkable
class Backend(Protocol):
    name: str

    def run(self, config: Any) -> Measurement: ...


class BackendError(RuntimeError):
    """A measurement did not happen (timeout, crash, unparseable output): nothing is recorded."""


def physics_checked(metrics: Metrics, profile, config) -> tuple[Metrics, tuple[str, ...], str]:
    """(metrics with implausible ones flagged, findings, what was checked) against `profile`'s
    roofline (a DeviceProfile, shipped name or path); with no profile or config, unchecked."""
    if profile is None or config is None:
        return metrics, (), "not checked: no profile for this backend's hardware"
    from harmony_ref.device.physics import check
    from harmony_ref.device.profile import load_profile

    profile = load_profile(profile)
    metrics, findings = check(metrics, profile, config)
    return metrics, tuple(findings), f"checked against {profile.name}: {len(findings)} implausible"
