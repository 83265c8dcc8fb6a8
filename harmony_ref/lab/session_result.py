"""What a device session returns: `SessionResult` (its repeats, each a `Repeat` with the
benchmark's metrics, telemetry samples and verdict), the session's own metrics
(`SESSION_METRICS`: temperatures, throttled repeats, power, peak memory) and the record block
(`to_record`), and `session_id`, what a session measured as a short SHA-256. lab/session.py's
`DeviceSession.run` makes the result; this module only reads it.

    result.metrics()        # the benchmark's metrics over the valid repeats + the session's own
    result.to_record()      # identity, pushes, per-repeat telemetry, notes: the record's block
"""

from __future__ import annotations

import hashlib
import statistics
from dataclasses import dataclass, field

from harmony_ref.lab.session_spec import SessionSpec
from harmony_ref.lab.telemetry import Sample, Telemetry, Verdict, kb_to_mb, sample_table
from harmony_ref.metrics import MEASURED, Metric, MetricDef, Metrics

SESSION_METRICS = {
    d.name: d
    for d in (
        MetricDef(
            "device_temp_start_c",
            "C",
            "none",
            MEASURED,
            "watched thermal zone at the start of the first measured repeat (after cooldown)",
        ),
        MetricDef(
            "device_temp_peak_c",
            "C",
            "lower",
            MEASURED,
            "hottest reading of the watched zone during or right after a measured repeat "
            "(samples: each repeat's peak)",
        ),
        MetricDef(
            "throttled_repeats",
            "runs",
            "none",
            MEASURED,
            "measured repeats marked throttled (kept in the record, left out of the metrics)",
        ),
        MetricDef(
            "cooldown_s",
            "s",
            "none",
            MEASURED,
            "time waited for the watched zone to cool, over all measured repeats",
        ),
        MetricDef(
            "device_avg_power_w",
            "W",
            "lower",
            MEASURED,
            "battery power while the benchmark ran (current_now x voltage_now, averaged over "
            "the run; median of the valid repeats)",
        ),
        MetricDef(
            "device_energy_per_token_mj",
            "mJ",
            "lower",
            MEASURED,
            "(battery power while it ran - idle power before the run) / decode tokens per "
            "second (median of the valid repeats; lab/energy.py)",
        ),
        MetricDef(
            "device_peak_memory_mb",
            "MB",
            "lower",
            MEASURED,
            "the benchmark process's peak memory over the valid repeats (samples: each "
            "repeat's peak)",
        ),
    )
}


@dataclass
class Repeat:
    index: int  # 1-based among its kind
    kind: str  # warmup | measured
    metrics: Metrics
    samples: list[Sample]
    verdict: Verdict
    cooldown_s: float
    wall_s: float
    peak_mem_kb: float | None
    mem_source: str
    power: dict = field(default_factory=dict)  # avg_power_w, energy_per_token_mj or why not

    @property
    def measured(self) -> bool:
        """Scored (a warm-up run never is)."""
        return self.kind != "warmup"

    def row(self, telemetry: Telemetry) -> dict:
        temps = [t for s in self.samples if (t := telemetry.watched_c(s)) is not None]
        hot = [telemetry.watched_c(s) for s in self.samples if s.phase in ("during", "after")]
        hot = [t for t in hot if t is not None]
        before = next((s for s in self.samples if s.phase == "before"), None)
        return {
            "repeat": self.index,
            "kind": self.kind,
            "throttled": self.verdict.throttled,
            "reasons": list(self.verdict.reasons),
            "cooldown_s": round(self.cooldown_s, 3),
            "wall_s": round(self.wall_s, 3),
            "temp_before_c": None if before is None else telemetry.watched_c(before),
            "temp_peak_c": max(hot) if hot else (max(temps) if temps else None),
            "battery_pct": None if before is None else before.battery_pct,
            "battery_status": None if before is None else before.battery_status,
            "peak_memory_mb": None
            if self.peak_mem_kb is None
            else round(kb_to_mb(self.peak_mem_kb), 3),
            "memory_source": self.mem_source,
            **self.power,
            "metrics": {m.name: m.value for m in self.metrics},
            "samples": sample_table(self.samples),
        }


@dataclass
class SessionResult:
    spec: SessionSpec
    transport: str
    serial: str
    identity: dict
    pushes: list[dict]
    repeats: list[Repeat]
    telemetry: Telemetry
    command: str
    notes: list[str] = field(default_factory=list)
    power: dict = field(default_factory=dict)  # idle power, the current's sign, or why none

    @property
    def measured(self) -> list[Repeat]:
        return [r for r in self.repeats if r.measured]

    @property
    def valid(self) -> list[Repeat]:
        keep = self.spec.throttle.keep_throttled
        return [r for r in self.measured if keep or not r.verdict.throttled]

    @property
    def enough_valid(self) -> bool:
        return len(self.valid) >= self.spec.benchmark.required_valid

    def metrics(self) -> Metrics:
        """The benchmark's metrics over the valid repeats, then the session's own."""
        out = Metrics()
        valid = self.valid
        if valid:
            names = [n for n in valid[0].metrics.names() if all(n in r.metrics for r in valid)]
            for name in names:
                ms = [r.metrics[name] for r in valid]
                pooled = [s for m in ms for s in (m.samples or (m.value,))]
                first = ms[0]
                what = f"median of {len(ms)} valid repeat{'s' if len(ms) > 1 else ''}"
                out.put(
                    Metric(
                        name,
                        statistics.median(m.value for m in ms),
                        first.unit,
                        first.direction,
                        first.kind,
                        tuple(pooled),
                        first.flags,
                        f"{first.description}; {what}" if first.description else what,
                    )
                )
        for metric in self.session_metrics().values():
            out.put(metric)
        return out

    def session_metrics(self) -> dict[str, Metric]:
        d, tel, out = SESSION_METRICS, self.telemetry, {}
        measured = self.measured
        out["throttled_repeats"] = d["throttled_repeats"].make(
            sum(r.verdict.throttled for r in measured)
        )
        if self.spec.cooldown.enabled and tel.can_watch:
            out["cooldown_s"] = d["cooldown_s"].make(sum(r.cooldown_s for r in measured))
        rows = [r.row(tel) for r in measured]
        if rows and rows[0]["temp_before_c"] is not None:
            out["device_temp_start_c"] = d["device_temp_start_c"].make(rows[0]["temp_before_c"])
        peaks = [row["temp_peak_c"] for row in rows if row["temp_peak_c"] is not None]
        if peaks:
            out["device_temp_peak_c"] = d["device_temp_peak_c"].make(max(peaks), peaks)
        for name, key in (
            ("device_avg_power_w", "avg_power_w"),
            ("device_energy_per_token_mj", "energy_per_token_mj"),
        ):
            values = [r.power[key] for r in self.valid if r.power.get(key) is not None]
            if values and len(values) == len(self.valid):  # a charging repeat: none at all
                out[name] = d[name].make(statistics.median(values), values)
        mems = [kb_to_mb(r.peak_mem_kb) for r in self.valid if r.peak_mem_kb is not None]
        if mems:
            src = sorted({r.mem_source for r in self.valid if r.peak_mem_kb is not None})
            out["device_peak_memory_mb"] = d["device_peak_memory_mb"].make(
                max(mems), mems, f"{d['device_peak_memory_mb'].description}; from " + ", ".join(src)
            )
        return out

    def to_record(self) -> dict:
        """The block a run record keeps (under its part's `session`)."""
        b = self.spec.benchmark
        return {
            "file": self.spec.path,
            "transport": self.transport,
            "serial": self.serial,
            "identity": dict(self.identity),
            "work_dir": self.spec.device.work_dir,
            "profile": self.spec.device.profile,
            "command": self.command,
            "pushes": list(self.pushes),
            "warmup_runs": b.warmup_runs,
            "repeats": b.repeats,
            "valid_repeats": len(self.valid),
            "min_valid_repeats": b.required_valid,
            "throttled_repeats": sum(r.verdict.throttled for r in self.measured),
            "keep_throttled": self.spec.throttle.keep_throttled,
            "cooldown": {
                "enabled": self.spec.cooldown.enabled,
                "zone": self.spec.telemetry.watch_zone,
                "threshold_c": self.spec.cooldown.threshold_c,
                "max_wait_s": self.spec.cooldown.max_wait_s,
            },
            "throttle": {
                "temp_c": self.spec.throttle.temp_c,
                "min_big_freq_fraction": self.spec.throttle.min_big_freq_fraction,
                "sustain_s": self.spec.throttle.sustain_s,
                "loaded_share": self.spec.throttle.loaded_share,
                "max_thermal_status": self.spec.throttle.max_thermal_status,
                "big_cpus": list(self.spec.telemetry.big_cpus),
            },
            "telemetry_script": self.telemetry.script(True),
            "clock": self.telemetry.clock,
            "unreadable": list(self.telemetry.unreadable),
            "max_freq_mhz": {str(c): k / 1e3 for c, k in self.telemetry.max_khz.items()},
            "notes": list(self.notes),
            "power": dict(self.power),
            "telemetry": [r.row(self.telemetry) for r in self.repeats],
        }


def session_id(block: dict, model: str, policy: str, scenario: dict) -> str:
    """What a session measured, as a short SHA-256: the device (transport, serial, identity), the
    command that ran, the pushed files' SHA-256 and the model, policy and scenario. Not the
    session file's name: the same phone measured through a renamed copy is the same config."""
    import json

    key = {
        "transport": block["transport"],
        "serial": block["serial"],
        "identity": block["identity"],
        "command": block["command"],
        "pushes": sorted((p["remote"], p["sha256"]) for p in block["pushes"]),
        "model": model,
        "policy": policy,
        "scenario": scenario,
    }
    text = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
