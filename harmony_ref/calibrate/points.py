"""A measured point the device model is judged on: one metric of one configuration on one SoC
under one runtime, measured (a host run, a llama-bench test, a published figure, a phone
record), with the split it belongs to (`fit`: calibration may use it; `score`: never fitted on).

    p = Point("xiao24-d9300-prefill", "phones", "dimensity-9300", "llama.cpp-cpu", 6, config,
              "prefill_tokens_per_s", 10.63, "fit", source="Xiao et al., ...")
    p.predicted()                         # SimulatedDevice on the SoC + runtime, the same metric
    p.predicted(runtime=fitted_profile)   # with another runtime profile (a fit trying numbers)

The prediction is the simulated backend's metric of the same name (backends/simulated.py), so
every point is priced by device/cost.py's one per-op cost function.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

SPLITS = ("fit", "score")


@functools.cache
def checkpoint_spec(model: str):
    """runtime/loader.py's checkpoint_spec, read once per process (it parses the checkpoint's
    metadata, tokenizer arrays and all; the sets ask for it per point)."""
    from harmony_ref.runtime.loader import checkpoint_spec as read

    return read(model)


POINT_METRICS = (
    "prefill_ms",
    "decode_step_ms",
    "ttft_ms",
    "e2e_ms",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "peak_memory_mb",
)
# A phone's measured energy per decoded token (lab/energy.py: above its idle power): run
# records only (track/fidelity.py record_points), not a figures file's metric.
ENERGY_METRIC = "energy_per_token_mj"


@dataclass(frozen=True)
class Point:
    id: str
    set: str  # host | llama.cpp | phones | records
    profile: str  # the SoC profile (name or path)
    runtime: str  # the runtime profile (name or path)
    threads: int  # 0: the runtime's default
    config: object  # RunConfig
    metric: str
    measured: float
    split: str
    source: str = ""
    samples: tuple[float, ...] = ()  # the metric per repeat, when the measurement kept them
    note: str = ""
    kernels_only: bool = False  # a profiled forward: the runtime's per-forward loop not in it
    idle_power_w: float = 0.0  # an energy point: the phone's idle power its measurement took off

    def __post_init__(self):
        if self.metric not in POINT_METRICS and self.metric != ENERGY_METRIC:
            raise ValueError(f"point {self.id}: metric {self.metric!r} not in {POINT_METRICS}")
        if self.split not in SPLITS:
            raise ValueError(f"point {self.id}: split {self.split!r} not in {SPLITS}")
        if not (math.isfinite(self.measured) and self.measured > 0):
            raise ValueError(
                f"point {self.id}: measured {self.metric} = {self.measured!r}: "
                "must be a finite number > 0"
            )

    def device_profile(self, runtime=None):
        import dataclasses

        from harmony_ref.device.runtime import load_profile

        p = load_profile(self.profile, runtime or self.runtime, self.threads or None)
        if self.kernels_only:
            p = dataclasses.replace(
                p, runtime=dataclasses.replace(p.runtime, forward_overhead_us=0.0)
            )
        return p

    def predicted(self, runtime=None) -> float:
        if self.metric == ENERGY_METRIC:
            return decode_energy_mj(self.device_profile(runtime), self.config, self.idle_power_w)
        return predict_metric(self.device_profile(runtime), self.config, self.metric)


def same_measurement_key(point: Point) -> str:
    """What a point measures, without its id, value or split: its SoC and runtime profiles,
    threads, configuration and metric. Two points with one key are the same measurement (a
    prediction gives both the same number), whatever their ids say."""
    import json

    return json.dumps(
        [
            point.profile,
            point.runtime,
            point.threads,
            point.kernels_only,
            point.config.to_dict(),
            point.metric,
        ],
        sort_keys=True,
        default=str,
    )


def fitted_twins(fitted, scored) -> dict[str, str]:
    """{scored point id: the id of a fitted point that is the same measurement
    (same_measurement_key)} for the scored points that repeat a fitted one under another id."""
    seen = {same_measurement_key(p): p.id for p in fitted}
    out = {}
    for p in scored:
        twin = seen.get(same_measurement_key(p))
        if twin is not None and twin != p.id:
            out[p.id] = twin
    return out


def check_disjoint(fitted, scored, where: str) -> None:
    """Held out means held out: ValueError (one line, naming both ids) when a scored point is
    the same measurement as a fitted one under another id (fitted_twins): scoring it would
    score the fit on its own data."""
    for held, twin in fitted_twins(fitted, scored).items():
        raise ValueError(
            f"{where}: held-out point {held!r} is the same measurement as fit point "
            f"{twin!r} (held out means held out)"
        )


def decode_energy_mj(profile, config, idle_power_w: float) -> float:
    """The model's answer to what a session measures as device_energy_per_token_mj: (decode
    power at the coolest operating point - the phone's measured idle power) / decode tokens per
    second, in mJ (device/thermal.py decode_operating_points; lab/energy.py). The cost
    model has no idle power of its own: the phone's is an input, not what is scored."""
    from harmony_ref.device.thermal import MJ_PER_J, decode_operating_points

    pts = decode_operating_points(profile, config)
    return (float(pts.power_w[0]) - idle_power_w) / float(pts.tokens_per_s[0]) * MJ_PER_J


def predict_metric(profile, config, metric: str) -> float:
    """One metric as SimulatedDevice(profile).predict(config) reports it, from the same
    functions (device/cost.py scenario_timing, device/memory.py), without the rest of the
    prediction (a fit asks for thousands; tests/calibrate hold the two equal)."""
    from harmony_ref.device.cost import scenario_timing
    from harmony_ref.units import MB, MS_PER_S

    if metric == "peak_memory_mb":
        from harmony_ref.device.memory import memory_estimate

        return memory_estimate(profile, config).peak_bytes / MB
    t = scenario_timing(profile, config)
    return {
        "prefill_ms": lambda: t.prefill.time_s * MS_PER_S,
        "prefill_tokens_per_s": lambda: t.prefill.tokens / t.prefill.time_s,
        "ttft_ms": lambda: t.ttft_s * MS_PER_S,
        "e2e_ms": lambda: t.e2e_s * MS_PER_S,
        "decode_step_ms": lambda: t.decode.time_s * MS_PER_S,
        "decode_tokens_per_s": lambda: t.decode_tokens_per_s,
    }[metric]()


@dataclass
class Scored:
    """A point with its prediction and error (signed: (predicted - measured) / measured)."""

    point: Point
    predicted: float
    fitted: bool = field(default=False)  # the runtime profile's calibration fitted on it

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted - self.point.measured) / self.point.measured

    @property
    def ape_pct(self) -> float:
        return abs(self.error_pct)
