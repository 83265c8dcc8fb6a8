"""The CI gate: compare a run record with a baseline record, metric by metric.

Rules (limits come from a tolerance TOML, see harmony_ref/data/gate_tolerances.toml):
- `exact` metrics (predicted or counted) fail when they get worse by more than a tight limit
  (default 0.1%);
- `numerical` metrics (float-kernel accuracy) are judged the same way with a limit derived from
  their measured spread across emulated machines (defaults.numerical_pct, see the tolerance
  file), on any machine: a baseline from one x86-64 CPU gates cleanly on another. An older record
  that called such a metric `exact` is read as `numerical` (the weaker class of the two);
- `measured` metrics (timed) fail only when they get worse by more than their limit (default
  10%) AND a one-sided Mann-Whitney U test on the raw samples says the shift is real (p < alpha)
  AND the metric, re-measured once, still fails both (confirm-on-rerun), so one noisy run cannot
  fail a build. When the gate has no way to re-measure, the verdict says so;
- direction-aware: an improvement never fails; `direction = "none"` metrics are informational;
- metrics flagged `implausible` on either side are called out in the verdict;
- a host measurement of a width-scaled copy of the model (`measured_model`, e.g. llama-3.2-3b/w4)
  is never gated against one of another size (bad input, exit 2);
- metrics flagged `inaccurate` (a run whose runtime failed its accuracy check,
  job/runtime_check_judge.py) are never a result: on either side each one is a regression, with the
  reason the run recorded in its `runtime_accurate` metric;
- timings are only comparable on the same kind of machine: when the two records differ in CPU
  model, core count or Numba threads, measured metrics are shown but not gated (and say why);
- a device-session measurement whose unthrottled repeats are fewer than its session asks for
  (lab/session.py: `valid_repeats` < `min_valid_repeats` in a part's `session` block) is
  never compared (bad input, exit 2), on either side: its later repeats measured the phone's heat.

Bad input (a config or metric set that does not match, a missing or corrupt file) is a
ValueError: the command turns it into exit code 2.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from harmony_ref._format import did_you_mean, fmt_number
from harmony_ref._toml import loads
from harmony_ref.metrics import Metric
from harmony_ref.track.record import Record

DEFAULT_EXACT_PCT = 0.1
DEFAULT_NUMERICAL_PCT = 0.5  # derived in data/gate_tolerances.toml from data/numerical_spread.json
DEFAULT_MEASURED_PCT = 10.0
DEFAULT_ALPHA = 0.05
# Below 3 samples a side the smallest one-sided U-test p is 0.1: the test could never say "real".
MIN_SAMPLES_FOR_U_TEST = 3

# Verdict statuses; only REGRESSION fails the gate.
PASS, IMPROVED, INFO, NOISE, REGRESSION = "pass", "improved", "info", "noise", "regression"
INACCURATE = "inaccurate"  # the flag job/runtime_check_judge.py puts on every metric of a wrong run


@dataclass(frozen=True)
class Tolerances:
    exact_pct: float = DEFAULT_EXACT_PCT
    numerical_pct: float = DEFAULT_NUMERICAL_PCT
    measured_pct: float = DEFAULT_MEASURED_PCT
    alpha: float = DEFAULT_ALPHA
    overrides: tuple[tuple[str, float], ...] = ()  # (name or glob, pct) in file order
    source: str = "<defaults>"
    # (name or glob, limit in the metric's unit): a change that small passes whatever its
    # relative size (a count's resolution: one of 352 sentences is 0.28 recall points)
    abs_floors: tuple[tuple[str, float], ...] = ()

    @staticmethod
    def _lookup(table, name: str):
        for pattern, value in table:
            if pattern == name:
                return value
        for pattern, value in table:
            if fnmatch.fnmatchcase(name, pattern):
                return value
        return None

    def limit_pct(self, metric: Metric) -> float:
        pct = self._lookup(self.overrides, metric.name)
        if pct is not None:
            return pct
        return {"exact": self.exact_pct, "numerical": self.numerical_pct}.get(
            metric.kind, self.measured_pct
        )

    def limit_abs(self, metric: Metric) -> float:
        """The absolute floor of an exact or numerical metric's limit (0: none)."""
        return self._lookup(self.abs_floors, metric.name) or 0.0

    def agrees(self, metric: Metric, baseline: float, current: float) -> bool:
        """True when the gate would call baseline -> current neither a regression nor an
        improvement of an exact or numerical `metric`: within its relative limit or its
        absolute floor, either way (what tests of documented numbers hold)."""
        change = change_pct(baseline, current)
        return abs(change) <= self.limit_pct(metric) or abs(current - baseline) <= self.limit_abs(
            metric
        )


def _pct(value, source: str, where: str, upper: float | None = None) -> float:
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not 0 <= value < math.inf  # an infinite tolerance would never fail the metric
        or (upper is not None and value > upper)
    ):
        bound = f" and <= {upper}" if upper is not None else ""
        raise ValueError(
            f"{source}: field '{where}' = {value!r}: must be a finite number >= 0{bound}"
        )
    return float(value)


def load_tolerances(path: str | Path | None = None) -> Tolerances:
    """The shipped tolerances, or a TOML file of the same shape; errors name file and field."""
    if path is None:
        text = (resources.files("harmony_ref") / "data" / "gate_tolerances.toml").read_text()
        source = "data/gate_tolerances.toml"
    else:
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"tolerance file {p} does not exist")
        text, source = p.read_text(), str(p)
    data = loads(text, source)
    unknown = sorted(set(data) - {"defaults", "metrics"})
    if unknown:
        raise ValueError(f"{source}: unknown section '{unknown[0]}'; allowed: defaults, metrics")
    defaults = data.get("defaults", {})
    allowed = ("exact_pct", "numerical_pct", "measured_pct", "alpha")
    bad = sorted(set(defaults) - set(allowed))
    if bad:
        raise ValueError(
            f"{source}: unknown field 'defaults.{bad[0]}'"
            f"{did_you_mean(bad[0], allowed)}; allowed: " + ", ".join(allowed)
        )
    overrides, floors = [], []
    for name, table in data.get("metrics", {}).items():
        fields = ("tolerance_pct", "tolerance_abs", "reason")
        extra = sorted(set(table) - set(fields)) if isinstance(table, dict) else []
        if extra:
            raise ValueError(
                f"{source}: unknown field 'metrics.{name}.{extra[0]}'"
                f"{did_you_mean(extra[0], fields)}; allowed: {', '.join(fields)}"
            )
        if not isinstance(table, dict) or "tolerance_pct" not in table:
            raise ValueError(
                f"{source}: field 'metrics.{name}' must be a table with tolerance_pct "
                f"(and a reason), got {table!r}"
            )
        overrides.append(
            (name, _pct(table["tolerance_pct"], source, f"metrics.{name}.tolerance_pct"))
        )
        if "tolerance_abs" in table:
            floors.append(
                (name, _pct(table["tolerance_abs"], source, f"metrics.{name}.tolerance_abs"))
            )
    return Tolerances(
        exact_pct=_pct(defaults.get("exact_pct", DEFAULT_EXACT_PCT), source, "defaults.exact_pct"),
        numerical_pct=_pct(
            defaults.get("numerical_pct", DEFAULT_NUMERICAL_PCT), source, "defaults.numerical_pct"
        ),
        measured_pct=_pct(
            defaults.get("measured_pct", DEFAULT_MEASURED_PCT), source, "defaults.measured_pct"
        ),
        alpha=_pct(defaults.get("alpha", DEFAULT_ALPHA), source, "defaults.alpha", upper=1.0),
        overrides=tuple(overrides),
        source=source,
        abs_floors=tuple(floors),
    )


@dataclass
class Row:
    metric: str
    unit: str
    kind: str
    direction: str
    baseline: float
    current: float
    change_pct: float  # signed relative change, current vs baseline
    limit: str
    status: str
    verdict: str


@dataclass
class GateReport:
    baseline: Record
    current: Record
    rows: list[Row] = field(default_factory=list)
    tolerances: Tolerances = field(default_factory=Tolerances)

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.status == REGRESSION]

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0


def change_pct(baseline: float, current: float) -> float:
    if current == baseline:
        return 0.0
    if baseline == 0:
        return math.copysign(math.inf, current)
    return 100.0 * (current - baseline) / abs(baseline)


def worse_pct(metric: Metric, change: float) -> float:
    """How much worse (positive) or better (negative) a change is, in the metric's direction."""
    return change if metric.direction == "lower" else -change


def smallest_u_test_p(n: int, m: int) -> float:
    """The smallest p-value a one-sided exact Mann-Whitney U test of n against m samples can
    give, every sample of one side beyond every one of the other: 1 / C(n + m, n) (3 against 3:
    0.05, not below the default alpha)."""
    return 1.0 / math.comb(n + m, n)


def u_test_p(baseline: Metric, current: Metric) -> float | None:
    """One-sided Mann-Whitney U p-value for "current is worse than baseline"; None when there
    are too few raw samples for the test to mean anything."""
    if min(len(baseline.samples), len(current.samples)) < MIN_SAMPLES_FOR_U_TEST:
        return None
    from scipy.stats import mannwhitneyu

    alternative = "greater" if current.direction == "lower" else "less"
    return float(mannwhitneyu(current.samples, baseline.samples, alternative=alternative).pvalue)


def too_few_valid_repeats(record: Record) -> str:
    """Why a device-session record is not a result ('' when it is): fewer unthrottled repeats
    than its session asks for."""
    for name, part in record.parts.items():
        s = part.get("session") if isinstance(part, dict) else None
        if isinstance(s, dict) and s.get("valid_repeats", 0) < s.get("min_valid_repeats", 0):
            return (
                f"only {s['valid_repeats']} of {s.get('repeats')} repeats ran unthrottled "
                f"on {s.get('transport')} {s.get('serial')} (part {name}); the session asks "
                f"for {s['min_valid_repeats']}"
            )
    return ""


SESSION_FILE_OPTION = "session"  # a session file's path: not what it measured (session_id is)


def check_comparable(
    baseline: Record,
    current: Record,
    baseline_name: str,
    current_name: str,
    same_metrics: bool = True,
) -> None:
    """Raise ValueError (bad input) when the two records are not the same config and metric set
    (with same_metrics=False only the shared metrics must agree), or either is a session
    measurement with too few valid repeats. A device session is compared by its session_id
    (what it measured), never by the session file's name."""
    for record, name in ((baseline, baseline_name), (current, current_name)):
        why = too_few_valid_repeats(record)
        if why:
            raise ValueError(
                f"{name}: {why}: not compared (cool the phone down or lower "
                "benchmark.min_valid_repeats, and measure again)"
            )

    def value(record, k):
        v = record.config.get(k)
        if k == "backend_options" and isinstance(v, dict):  # a session by what it measured
            v = {o: x for o, x in v.items() if o != SESSION_FILE_OPTION} or None
        return v

    def differences(k, a, b):
        """'k: a vs b', or for two dicts one 'k.sub: a vs b' per sub-key that differs (a
        session's options differ in one entry, not in the whole dict)."""
        if isinstance(a, dict) and isinstance(b, dict):
            keys = [*a, *(o for o in b if o not in a)]
            return [f"{k}.{o}: {a.get(o)!r} vs {b.get(o)!r}" for o in keys if a.get(o) != b.get(o)]
        return [f"{k}: {a!r} vs {b!r}"] if a != b else []

    diffs = [
        d
        for k in (
            "model",
            "policy",
            "profile",
            "backend",
            "scenario",
            "backend_options",
            "fused",
            "kv_dtype",
            "model_spec",
            "accuracy_model",
        )
        for d in differences(k, value(baseline, k), value(current, k))
    ]
    if diffs:
        raise ValueError(
            f"{current_name} measures a different config ({'; '.join(diffs)}) than {baseline_name}"
        )
    measured = [
        r.parts.get("predicted", {}).get("measured_model") or r.config.get("model")
        for r in (baseline, current)
    ]
    if measured[0] != measured[1]:
        raise ValueError(
            f"{current_name} was measured on {measured[1]!r} but {baseline_name} on "
            f"{measured[0]!r}: a width-scaled host measurement is never gated "
            "against one of another size"
        )
    only_base = [n for n in baseline.metrics.names() if n not in current.metrics]
    only_cur = [n for n in current.metrics.names() if n not in baseline.metrics]
    if (only_base or only_cur) and same_metrics:
        parts = []
        if only_base:
            parts.append(f"missing from {current_name}: {', '.join(only_base)}")
        if only_cur:
            parts.append(f"missing from {baseline_name}: {', '.join(only_cur)}")
        raise ValueError(
            "metric sets differ (" + "; ".join(parts) + "); if the change is intended, "
            "promote a new record with `harmony-ref gate --update-baseline`"
        )
    for name in baseline.metrics.names():
        if name not in current.metrics:
            continue
        b, c = baseline.metrics[name], current.metrics[name]
        for attr in ("unit", "direction", "kind"):
            if attr == "kind" and {b.kind, c.kind} == {"exact", "numerical"}:
                continue  # an older record's accuracy metric: judged as numerical
            if getattr(b, attr) != getattr(c, attr):
                raise ValueError(
                    f"metric {name}: {attr} is {getattr(b, attr)!r} in {baseline_name} "
                    f"but {getattr(c, attr)!r} in {current_name}"
                )


def different_machine(baseline: Record, current: Record) -> str:
    """Why timings of the two records are not comparable ('' when they are): measured metrics
    are gated only against a baseline measured on the same kind of machine."""
    keys = ("cpu_model", "cpu_cores", "numba_threads")
    diffs = [
        f"{k} {baseline.provenance.get(k)!r} vs {current.provenance.get(k)!r}"
        for k in keys
        if baseline.provenance.get(k) != current.provenance.get(k)
    ]
    return ("baseline measured on a different machine (" + "; ".join(diffs) + ")") if diffs else ""


def _fmt_pct(x: float) -> str:
    return f"{x:+.2f}%" if math.isfinite(x) else ("+inf%" if x > 0 else "-inf%")


def _judge_measured(b: Metric, c: Metric, limit: float, alpha: float) -> tuple[str, str]:
    worse = worse_pct(c, change_pct(b.value, c.value))
    if worse <= limit:
        return (IMPROVED, "improved") if worse < -limit else (PASS, "ok")
    p = u_test_p(b, c)
    if p is None:
        return REGRESSION, f"worse by {worse:.1f}% (too few samples for a U test)"
    n, m = len(b.samples), len(c.samples)
    floor = smallest_u_test_p(n, m)
    if floor >= alpha and p <= floor * (1 + 1e-9):  # 3 against 3: p cannot go below 0.05
        return REGRESSION, (
            f"worse by {worse:.1f}%, U test p={p:.3g}: every sample worse, the least "
            f"{n} against {m} samples can give"
        )
    if p >= alpha:
        return NOISE, f"worse by {worse:.1f}% but U test p={p:.3f} >= {alpha}: noise"
    return REGRESSION, f"worse by {worse:.1f}%, U test p={p:.3g}"


def compare(
    baseline: Record,
    current: Record,
    tolerances: Tolerances | None = None,
    remeasure: Callable[[str], Metric] | None = None,
    no_remeasure_reason: str = "",
    baseline_name: str = "baseline",
    current_name: str = "current",
) -> GateReport:
    """Judge every metric of `current` against `baseline`. `remeasure(name)` re-measures one
    measured metric on this machine (confirm-on-rerun); without it the verdict of a failing
    measured metric says it could not be confirmed, and why (`no_remeasure_reason`)."""
    tol = tolerances or Tolerances()
    # An inaccurate run may lack metrics (a runtime that failed its own check prints no timings):
    # it still fails, on the metrics both have.
    inaccurate_run = any(INACCURATE in m.flags for m in current.metrics)
    check_comparable(baseline, current, baseline_name, current_name, not inaccurate_run)
    report = GateReport(baseline, current, tolerances=tol)
    machine_note = different_machine(baseline, current)
    for name in [n for n in baseline.metrics.names() if n in current.metrics]:
        b, c = baseline.metrics[name], current.metrics[name]
        change = change_pct(b.value, c.value)
        if "numerical" in (b.kind, c.kind):
            c = replace(c, kind="numerical")
        limit = tol.limit_pct(c)
        wrong = [side for side, m in (("baseline", b), ("current", c)) if INACCURATE in m.flags]
        if wrong:
            status, limit_text = REGRESSION, "-"
            verdict = (
                f"REGRESSION: from a run flagged {INACCURATE} ({', '.join(wrong)}): not a result"
            )
            if name == "runtime_accurate":
                verdict += "; " + "; ".join(
                    _inaccurate_reason(r)
                    for side, r in (("baseline", baseline), ("current", current))
                    if side in wrong
                )
        elif c.direction == "none":
            status, verdict, limit_text = INFO, "info (not gated)", "-"
        elif c.measured and machine_note:
            status, verdict, limit_text = INFO, f"not gated: {machine_note}", "-"
        elif c.kind in ("exact", "numerical"):
            floor = tol.limit_abs(c)
            limit_text = f"{limit:g}%" + (f" or {floor:g} {c.unit}" if floor else "")
            worse = worse_pct(c, change)
            moved = abs(c.value - b.value)
            if worse > limit and moved > floor:
                status, verdict = REGRESSION, f"REGRESSION: worse by {_fmt_pct(worse).lstrip('+')}"
            elif worse < -limit and moved > floor:
                status, verdict = IMPROVED, "improved (update the baseline)"
            else:
                status, verdict = PASS, "ok"
        else:
            limit_text = f"{limit:g}% & p<{tol.alpha:g}"
            status, verdict = _judge_measured(b, c, limit, tol.alpha)
            if status == REGRESSION:
                if remeasure is None:
                    verdict = (
                        f"REGRESSION: {verdict}; not confirmed on rerun: "
                        f"{no_remeasure_reason or 'the gate has no way to re-measure it'}"
                    )
                else:
                    again = remeasure(name)
                    status2, verdict2 = _judge_measured(b, again, limit, tol.alpha)
                    if status2 == REGRESSION:
                        verdict = f"REGRESSION: {verdict}; confirmed on rerun ({verdict2})"
                        c = again
                        change = change_pct(b.value, again.value)
                    else:
                        status = NOISE
                        verdict = f"first run {verdict}; rerun {verdict2}: not confirmed"
        flagged = [
            f"{side} {flag}" for side, m in (("baseline", b), ("current", c)) for flag in m.flags
        ]
        if flagged:
            verdict += " [" + ", ".join(flagged) + "]"
        report.rows.append(
            Row(
                name,
                c.unit,
                c.kind,
                c.direction,
                b.value,
                c.value,
                change,
                limit_text,
                status,
                verdict,
            )
        )
    return report


def _inaccurate_reason(record: Record) -> str:
    m = record.metrics.items.get("runtime_accurate")
    return m.description if m is not None and m.description else "no reason recorded"


def _num(v: float) -> str:
    return fmt_number(float(v))


def to_markdown(
    report: GateReport, baseline_name: str = "baseline", current_name: str = "current"
) -> str:
    """A Markdown summary suitable for a CI job summary."""
    cfg = report.current.config
    sc = cfg["scenario"]
    n_reg = len(report.regressions)
    head = "FAIL" if n_reg else "PASS"
    lines = [
        f"## harmony-ref gate: {head}",
        "",
        f"Config: model `{cfg['model']}`, policy `{cfg['policy']}`, profile `{cfg['profile']}`, "
        f"backend `{cfg['backend']}`, scenario {sc['prompt_tokens']} prompt / {sc['new_tokens']} new / "
        f"{sc['context_tokens']} context tokens, batch {sc['batch']}.",
        f"Baseline: `{baseline_name}` (commit {_short(report.baseline.provenance)}); "
        f"current: `{current_name}` (commit {_short(report.current.provenance)}). "
        f"Tolerances: {report.tolerances.source}.",
        "",
        "| metric | baseline | current | change | limit | verdict |",
        "|---|---:|---:|---:|---|---|",
    ]
    for r in report.rows:
        verdict = f"**{r.verdict}**" if r.status == REGRESSION else r.verdict
        lines.append(
            f"| `{r.metric}` ({r.kind}) | {_num(r.baseline)} {r.unit} | {_num(r.current)} {r.unit} | "
            f"{_fmt_pct(r.change_pct)} | {r.limit} | {verdict} |"
        )
    lines.append("")
    counts = status_counts(report)
    lines.append(
        ", ".join(f"{v} {k}" for k, v in counts.items()) + f" of {len(report.rows)} metrics."
    )
    return "\n".join(lines) + "\n"


def status_counts(report: GateReport) -> dict[str, int]:
    return {
        s: sum(r.status == s for r in report.rows)
        for s in (PASS, IMPROVED, NOISE, INFO, REGRESSION)
    }


def to_json(
    report: GateReport, baseline_name: str = "baseline", current_name: str = "current"
) -> dict:
    """The report for machines: verdict, exit code, counts and one entry per metric (a change
    that is infinite, from a zero baseline, is null)."""

    def finite(x: float):
        return float(x) if math.isfinite(x) else None

    return {
        "verdict": "FAIL" if report.regressions else "PASS",
        "exit_code": report.exit_code,
        "baseline": {"path": baseline_name, "commit": report.baseline.provenance.get("git_commit")},
        "current": {"path": current_name, "commit": report.current.provenance.get("git_commit")},
        "tolerances": report.tolerances.source,
        "counts": status_counts(report),
        "metrics": [
            {
                "metric": r.metric,
                "unit": r.unit,
                "kind": r.kind,
                "direction": r.direction,
                "baseline": finite(r.baseline),
                "current": finite(r.current),
                "change_pct": finite(r.change_pct),
                "limit": r.limit,
                "status": r.status,
                "verdict": r.verdict,
            }
            for r in report.rows
        ],
    }


def _short(prov: dict) -> str:
    commit = prov.get("git_commit")
    if not commit:
        return "unknown"
    return commit[:10] + ("+dirty" if prov.get("git_dirty") else "")
