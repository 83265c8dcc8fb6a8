"""The one backend interface: every backend has a `name` and `run(config) -> Measurement`.

    m = backend.run(config)        # config: a RunConfig
    m.metrics, m.provenance, m.findings, m.physics, m.config, m.ops

`SimulatedDevice`, `HostDevice` and `CommandDevice` all satisfy it, so `harmony-ref run` and the
gate treat them alike; where their metrics overlap they use the same names (`ttft_ms`,
`decode_tokens_per_s`, `e2e_ms`, `peak_memory_mb`, ...; the phase times are E2E_METRICS).

A measured backend checks its metrics against a roofline (device/physics.py) when it knows the
hardware's profile: metrics faster than physics allows come back flagged `implausible`, one line
per flag in `findings`, and `physics` says what was checked against what. A measurement that did
not happen (timeout, crash, unparseable output) raises BackendError (lab/errors.py): nothing is
returned, so nothing can be recorded.
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
    session: dict | None = None  # a device session's record block (lab/session.py)


@runtime_checkable
class Backend(Protocol):
    name: str

    def run(self, config: Any) -> Measurement: ...


def _any_phone_checked(metrics: Metrics, profile, config):
    """Without a profile or a model: flag what no shipped phone profile could do even for the
    smallest shipped decoder in INT4 (the loosest roofline there is), on per-token rates only
    (a time of the whole request depends on a scenario not known here); a profile without a
    model is checked the same way on that profile."""
    from harmony_ref.config import RunConfig
    from harmony_ref.device.physics import check
    from harmony_ref.device.runtime import load_profile
    from harmony_ref.device.soc import shipped_profiles
    from harmony_ref.model.spec import get_spec, list_specs

    per_token = config is None  # without the scenario only per-token rates can be bounded
    if config is None:
        decoders = [get_spec(n) for n in list_specs() if get_spec(n).is_decoder]
        smallest = min(decoders, key=lambda s: s.param_count())
        config = RunConfig.from_names(smallest.name, "int4-g32")
    profiles = (
        [load_profile(profile)]
        if profile is not None
        else [load_profile(p) for p in sorted(shipped_profiles())]
    )
    checked = [check(metrics, p, config) for p in profiles]
    flagged = set.intersection(
        *({m.name for m in got if "implausible" in m.flags} for got, _ in checked)
    )
    if per_token:
        flagged &= {"decode_tokens_per_s", "prefill_tokens_per_s", "decode_step_ms"}
    if not flagged:
        return (
            metrics,
            (),
            (
                f"checked against every shipped profile for {config.spec.name} "
                "(no --profile/--model): 0 implausible"
            ),
        )
    got, findings = checked[0]
    out = Metrics({n: (got[n] if n in flagged else m) for n, m in metrics.items.items()})
    kept = tuple(f for f in findings if f.split(" ", 1)[0] in flagged)
    return (
        out,
        kept,
        (
            f"checked against every shipped profile for {config.spec.name} (no "
            f"--profile/--model): {len(kept)} implausible on all of them"
        ),
    )


def physics_checked(
    metrics: Metrics, profile, config, any_phone: bool = False
) -> tuple[Metrics, tuple[str, ...], str]:
    """(metrics with implausible ones flagged, findings, what was checked) against `profile`'s
    roofline (a DeviceProfile, shipped name or path). With no profile or config: unchecked, or
    with `any_phone` (a phone's benchmark output) against the loosest shipped-phone bound."""
    from harmony_ref.device.physics import check
    from harmony_ref.device.runtime import load_profile

    if profile is None or config is None:
        if any_phone:
            return _any_phone_checked(metrics, profile, config)
        return metrics, (), "not checked: no profile for this backend's hardware"

    profile = load_profile(profile)
    metrics, findings = check(metrics, profile, config)
    return metrics, tuple(findings), f"checked against {profile.name}: {len(findings)} implausible"
