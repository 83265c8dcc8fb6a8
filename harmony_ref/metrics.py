"""Metrics: the one currency every backend (simulated, host, command), the run records and the
gate trade in.

A metric's name carries its unit (`ttft_ms`, `decode_tokens_per_s`, `peak_memory_mb`), and it
knows which way is better and how deterministic it is:
- `exact`: predicted by the model or counted (bit-identical for identical inputs on any machine),
  so a gate on it can be tight;
- `numerical`: computed with float kernels (accuracy: cosine, recall, accuracy drop, perplexity,
  KLD): deterministic on one machine, but another CPU, BLAS build, matmul path or thread count
  sums in another order, so the value moves in its last digits across machines. The gate allows
  a tolerance derived from the measured spread (tools/numerical_spread.py) on any machine, and
  never runs a rank test on it. A metric made with float kernels declares
  `kind=NUMERICAL` where it is added;
- `measured`: timed on a machine; keeps its raw samples so the gate can run a rank test.

Every metric is finite and inside its physical domain (`domain(name, unit)`: times, sizes,
rates and counts >= 0, fractions in [0, 1], percentages in [0, 100], cosines in [-1, 1],
percentage points in [-100, 100], temperatures above absolute zero): a NaN, an infinity or a
negative time is a ValueError in the constructor, so no record, baseline or gate verdict can
hold one.

How far a model is from measurements is one helper, used by calibration and by HostDevice alike:
`ape_pct(predicted, measured)` and `mape_pct(pairs)`, their mean. The MAPE of nothing is an error
(ValueError), not 0 and not NaN: a caller with possibly nothing to score says so itself (None).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

DIRECTIONS = ("lower", "higher", "none")  # "none": informational, never gated
EXACT, NUMERICAL, MEASURED = "exact", "numerical", "measured"
KINDS = (EXACT, NUMERICAL, MEASURED)  # from most to least reproducible

_NONNEGATIVE_UNITS = {
    "ms",
    "s",
    "us",
    "ns",
    "MB",
    "GB",
    "KB",
    "bytes",
    "B",
    "mJ",
    "J",
    "W",
    "tokens",
    "tokens/s",
    "GB/s",
    "GFLOP/s",
    "launches",
    "runs",
    "x",
    "ratio",
    "requests",
    "sentences",
    "count",
}
_BOUNDED_UNITS = {
    "fraction": (0.0, 1.0),
    "%": (0.0, 100.0),
    "cosine": (-1.0, 1.0),
    "pct_points": (-100.0, 100.0),
    "C": (-273.15, math.inf),
}
# A difference of two quantities (memory_headroom_mb, init_memory_delta_mb) may be negative.
_SIGNED_NAME_PARTS = ("headroom", "delta", "margin", "change", "gain", "diff")
_SLACK = 1e-6  # float32 rounding at a bound (a cosine of 1 + 1e-8) is not out of domain
# A name with one of these endings carries its unit: `ttft_ms` given in 'msec' (or any unit
# without a domain) would slip past the domain check, a negative latency into a baseline.
_NAME_UNITS = (
    ("_tokens_per_s", ("tokens/s",)),
    ("_ms", ("ms",)),
    ("_mb", ("MB",)),
    ("_gbps", ("GB/s",)),
    ("_mj", ("mJ",)),
    ("_pct", ("%", "pct_points")),
)


def name_unit(name: str) -> str:
    """The unit `name`'s ending carries (its first, for *_pct: '%'), '' when it carries none."""
    for suffix, units in _NAME_UNITS:
        if name.endswith(suffix):
            return units[0]
    return ""


def unit_error(name: str, unit: str) -> str:
    """'' when `unit` is the one `name`'s ending says (or the name says none), else the reason."""
    for suffix, units in _NAME_UNITS:
        if name.endswith(suffix):
            if unit in units:
                return ""
            return f"{unit!r}: a metric named *{suffix} is in {' or '.join(map(repr, units))}"
    return ""


def domain(name: str, unit: str) -> tuple[float, float]:
    """The closed interval a metric of this unit can physically take (finite in any case).
    A percentage error (`*mape_pct`, `*error_pct`, a tool's mean bias `*bias_pct`) has no
    upper bound; a difference
    (`memory_headroom_mb`, `*_delta_mb`) has no sign."""
    if any(part in name for part in _SIGNED_NAME_PARTS):
        return -math.inf, math.inf
    if unit == "%" and ("mape" in name or "error" in name or "bias" in name):
        return 0.0, math.inf
    if unit in _BOUNDED_UNITS:
        return _BOUNDED_UNITS[unit]
    if unit in _NONNEGATIVE_UNITS:
        return 0.0, math.inf
    return -math.inf, math.inf


def domain_error(name: str, unit: str, value) -> str:
    """'' when `value` is a finite number inside the domain of (name, unit), else the reason."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return f"{value!r}: must be a number"
    if not math.isfinite(value):
        return f"{value!r}: must be finite"
    lo, hi = domain(name, unit)
    if value < lo - _SLACK * max(1.0, abs(lo)) or value > hi + _SLACK * max(1.0, abs(hi)):
        bounds = f">= {lo:g}" if hi == math.inf else f"in [{lo:g}, {hi:g}]"
        return f"{value!r} {unit}: must be {bounds}"
    return ""


@dataclass(frozen=True)
class Metric:
    name: str
    value: float
    unit: str
    direction: str = "lower"
    kind: str = "exact"
    samples: tuple[float, ...] = ()
    flags: tuple[str, ...] = ()  # e.g. ("implausible",) when a measurement breaks physics
    description: str = ""

    @property
    def measured(self) -> bool:
        """Timed on a machine (raw samples, a rank test), not reproducible as exact / numerical."""
        return self.kind not in (EXACT, NUMERICAL)

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(
                f"metric {self.name}: direction must be one of {DIRECTIONS}, got {self.direction!r}"
            )
        if self.kind not in KINDS:
            raise ValueError(f"metric {self.name}: kind must be one of {KINDS}, got {self.kind!r}")
        problem = unit_error(self.name, self.unit)
        if problem:
            raise ValueError(f"metric {self.name}: unit = {problem}")
        problem = domain_error(self.name, self.unit, self.value)
        if problem:
            raise ValueError(f"metric {self.name}: value = {problem}")
        for s in self.samples:
            problem = domain_error(self.name, self.unit, s)
            if problem:
                raise ValueError(f"metric {self.name}: a sample = {problem}")

    def flagged(self, flag: str) -> Metric:
        return self if flag in self.flags else replace(self, flags=self.flags + (flag,))

    def to_dict(self) -> dict:
        d = {
            "value": float(self.value),
            "unit": self.unit,
            "direction": self.direction,
            "kind": self.kind,
        }
        if self.samples:
            d["samples"] = [float(s) for s in self.samples]
        if self.flags:
            d["flags"] = list(self.flags)
        if self.description:
            d["description"] = self.description
        return d

    @classmethod
    def from_dict(cls, name: str, d: dict) -> Metric:
        return cls(
            name=name,
            value=float(d["value"]),
            unit=str(d["unit"]),
            direction=str(d.get("direction", "lower")),
            kind=str(d.get("kind", "exact")),
            samples=tuple(float(s) for s in d.get("samples", ())),
            flags=tuple(d.get("flags", ())),
            description=str(d.get("description", "")),
        )


@dataclass
class Metrics:
    """An ordered collection of metrics, keyed by name."""

    items: dict[str, Metric] = field(default_factory=dict)

    def add(
        self,
        name: str,
        value: float,
        unit: str,
        direction: str = "lower",
        kind: str = "exact",
        samples: Iterable[float] = (),
        description: str = "",
    ) -> Metric:
        value = float(value)
        m = Metric(
            name,
            value,
            unit,
            direction,
            kind,
            tuple(float(s) for s in samples),
            description=description,
        )
        self.items[name] = m
        return m

    def put(self, metric: Metric) -> None:
        self.items[metric.name] = metric

    def update(self, other: Metrics) -> None:
        self.items.update(other.items)

    def __getitem__(self, name: str) -> Metric:
        return self.items[name]

    def __contains__(self, name: str) -> bool:
        return name in self.items

    def __iter__(self) -> Iterator[Metric]:
        return iter(self.items.values())

    def __len__(self) -> int:
        return len(self.items)

    def names(self) -> list[str]:
        return list(self.items)

    def value(self, name: str) -> float:
        return self.items[name].value

    def to_dict(self) -> dict:
        return {name: m.to_dict() for name, m in self.items.items()}

    @classmethod
    def from_dict(cls, d: dict) -> Metrics:
        return cls({name: Metric.from_dict(name, md) for name, md in d.items()})

    def to_frame(self):
        import pandas as pd

        rows = [
            {
                "metric": m.name,
                "value": m.value,
                "unit": m.unit,
                "better": m.direction,
                "kind": m.kind,
                "flags": ",".join(m.flags),
            }
            for m in self
        ]
        return pd.DataFrame(rows, columns=["metric", "value", "unit", "better", "kind", "flags"])


@dataclass(frozen=True)
class MetricDef:
    """A metric declared once (unit, direction, kind, what it is) and made where it is
    measured: `DEF.make(value, samples)` (e.g. the device-session metrics,
    lab/session_result.py SESSION_METRICS)."""

    name: str
    unit: str
    direction: str
    kind: str
    description: str

    def make(self, value: float, samples: Iterable[float] = (), description: str = "") -> Metric:
        return Metric(
            self.name,
            float(value),
            self.unit,
            self.direction,
            self.kind,
            tuple(float(s) for s in samples),
            description=description or self.description,
        )


def ape_pct(predicted: float, measured: float) -> float:
    """Absolute percentage error of `predicted` against `measured` (which must be finite, > 0)."""
    if not (math.isfinite(measured) and measured > 0):
        raise ValueError(f"APE against a measurement of {measured!r}: must be finite and > 0")
    return abs(predicted - measured) / measured * 100.0


def mape_pct(pairs: Iterable[tuple[float, float]]) -> float:
    """Mean of ape_pct over (predicted, measured) pairs; ValueError when there are none."""
    import numpy as np

    apes = [ape_pct(p, m) for p, m in pairs]
    if not apes:
        raise ValueError("MAPE of an empty set: nothing was scored")
    return float(np.mean(apes))
