"""`harmony-ref history`'s answer: one metric's series over the commits of the system under test,
its change points, and the nightly verdict.

Order is git's, not the clock's: the SUT checkout's `git rev-list --topo-order --reverse HEAD`
(so a record made today of an old commit lands at that commit). Each commit that has records is
one point whose samples are the raw samples of all its records (a record without samples counts
its value once); records of commits outside that list are kept apart and reported, never
placed. Change points come from track/changepoints.py. Each is reported by the first commit
after it, the commit range the first commit after it lies in, its size with a 95% interval, its
p-value, and whether it is worse in the metric's direction. `check` is the nightly job's
question: is the newest change point a regression beyond the gate's tolerance for the metric
(track/gate.py's tolerances, data/gate_tolerances.toml)?
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from harmony_ref.metrics import Metric
from harmony_ref.track.changepoints import ChangePoint, detect_newest
from harmony_ref.track.history import SeriesRow, git_out


@dataclass
class Point:
    commit: str
    describe: str | None
    records: int
    samples: list[float]
    dirty: bool = False

    @property
    def median(self) -> float:
        return float(statistics.median(self.samples))


@dataclass
class Change:
    point: ChangePoint
    first: str  # the first commit after the change (the detector's best guess)
    lo: str  # the first commit after the change is in the git range lo..hi: after lo (the newest
    hi: str  # commit known to be before it), up to hi
    worse: bool
    tolerance_pct: float

    @property
    def regression(self) -> bool:
        return self.worse and abs(self.point.change_pct) > self.tolerance_pct


@dataclass
class HistoryReport:
    metric: str
    unit: str
    direction: str
    kind: str
    config: str
    machine: str
    points: list[Point]
    changes: list[Change]
    apart: dict[str, int] = field(default_factory=dict)  # commit -> records outside the SUT
    # the newest commit alone differs from the ones before it: not a change point until a
    # commit after it agrees (changepoints.detect_newest); --check does not fail on it
    unconfirmed: Change | None = None

    @property
    def newest(self) -> Change | None:
        return self.changes[-1] if self.changes else None

    @property
    def check_exit_code(self) -> int:
        return 1 if self.newest is not None and self.newest.regression else 0


def commit_order(sut_dir: str | Path, flag: str = "--sut") -> list[str]:
    """The SUT checkout's commits, oldest first, in topological order."""
    from harmony_ref.track.history import sut_info

    sut_info(sut_dir, flag)  # a directory that is no git checkout: ValueError naming it
    out = git_out(["rev-list", "--topo-order", "--reverse", "HEAD"], Path(sut_dir))
    if not out:
        raise ValueError(f"{flag} {sut_dir}: `git rev-list HEAD` gave no commits")
    return out.split()


def _one(values: set, flag: str, what: str, metric: str) -> str:
    if len(values) > 1:
        shown = ", ".join(sorted(str(v) for v in values)[:4])
        raise ValueError(
            f"--metric {metric}: recorded for {len(values)} {what}s; give {flag} (one of: {shown})"
        )
    return str(next(iter(values)))


def build_report(rows: list[SeriesRow], metric: str, order: list[str], tolerances) -> HistoryReport:
    """Group `rows` (one metric, one config, one machine) by commit in `order` and find the
    change points. `tolerances`: track/gate.py's Tolerances."""
    config = _one({r.config_label for r in rows}, "--config", "config", metric)
    machine = _one({r.machine for r in rows}, "--device", "machine", metric)
    last = rows[-1]
    position = {c: i for i, c in enumerate(order)}
    by_commit: dict[int, Point] = {}
    apart: dict[str, int] = {}
    for r in rows:
        i = position.get(r.sut_commit or "")
        if i is None:
            apart[str(r.sut_commit)] = apart.get(str(r.sut_commit), 0) + 1
            continue
        p = by_commit.setdefault(i, Point(order[i], r.sut_describe, 0, []))
        p.records += 1
        p.samples += list(r.samples) or [r.value]
        p.dirty = p.dirty or bool(r.sut_dirty)
    points = [by_commit[i] for i in sorted(by_commit)]
    if any(v <= 0 for p in points for v in p.samples):
        raise ValueError(
            f"--metric {metric}: has values <= 0 (a count or a difference); change points are "
            "found on positive values (their logs)"
        )
    m = Metric(metric, last.value, last.unit, last.direction, last.kind)
    limit = tolerances.limit_pct(m)

    def change(cp: ChangePoint) -> Change:
        up = cp.change_pct > 0
        worse = (up and m.direction == "lower") or (not up and m.direction == "higher")
        return Change(
            cp,
            points[cp.index].commit,
            points[cp.lo - 1].commit,
            points[cp.hi].commit,
            worse and m.direction != "none",
            limit,
        )

    cps, newest = detect_newest([p.samples for p in points])
    changes = [change(cp) for cp in cps]
    return HistoryReport(
        metric,
        m.unit,
        m.direction,
        m.kind,
        config,
        machine,
        points,
        changes,
        apart,
        change(newest) if newest is not None else None,
    )


def short(commit: str) -> str:
    return commit[:10]


def _finite(x: float):
    return x if math.isfinite(x) else None


def _step_json(c: Change) -> dict:
    """A change's medians, size with its 95% interval and p, and whether it is worse (`_step`'s
    numbers, for --json)."""
    return {
        "before_median": c.point.before_median,
        "after_median": c.point.after_median,
        "change_pct": c.point.change_pct,
        "ci_pct": [_finite(x) for x in c.point.ci_pct],
        "p_value": c.point.p_value,
        "worse": c.worse,
    }


def to_json(report: HistoryReport) -> dict:
    return {
        "metric": report.metric,
        "unit": report.unit,
        "direction": report.direction,
        "kind": report.kind,
        "config": report.config,
        "machine": report.machine,
        "points": [
            {
                "commit": p.commit,
                "describe": p.describe,
                "dirty": p.dirty,
                "records": p.records,
                "samples": len(p.samples),
                "median": p.median,
            }
            for p in report.points
        ],
        "change_points": [
            {
                "first_commit": c.first,
                "range": f"{c.lo}..{c.hi}",
                **_step_json(c),
                "tolerance_pct": c.tolerance_pct,
                "regression": c.regression,
            }
            for c in report.changes
        ],
        "unconfirmed_newest": None
        if report.unconfirmed is None
        else {
            "commit": report.unconfirmed.first,
            **_step_json(report.unconfirmed),
            "beyond_tolerance": report.unconfirmed.regression,
        },
        "not_in_sut": report.apart,
        "check_exit_code": report.check_exit_code,
    }


def _num(x: float) -> str:
    return f"{x:,.4g}"


def _p(p: float) -> str:
    return "< 1e-16" if p < 1e-16 else f"= {p:.2g}"


def _step(c, unit: str, beyond: str) -> str:
    """A change's medians, size with its 95% interval and p, and its verdict against the
    tolerance (`beyond`: the word for one past it, REGRESSION for a change point)."""
    lo, hi = c.point.ci_pct
    verdict = (
        f"{beyond} beyond the {c.tolerance_pct:g}% tolerance"
        if c.regression
        else ("worse, within the tolerance" if c.worse else "not worse")
    )
    return (
        f"{_num(c.point.before_median)} -> {_num(c.point.after_median)} {unit}, "
        f"{c.point.change_pct:+.1f}% (95% CI {lo:+.1f}% to {hi:+.1f}%), "
        f"p {_p(c.point.p_value)}; {verdict}"
    )


def to_text(report: HistoryReport) -> str:
    better = {"lower": "lower is better", "higher": "higher is better", "none": "not gated"}
    lines = [
        f"{report.metric} ({report.unit}, {better[report.direction]}) of {report.config} "
        f"on {report.machine}: {len(report.points)} commits, "
        f"{sum(p.records for p in report.points)} records",
        "",
        f"{'commit':<10}  {'describe':<16}  {'records':>7}  {'samples':>7}  {'median':>10}",
    ]
    starts = {c.point.index: c for c in report.changes}
    for i, p in enumerate(report.points):
        u = report.unconfirmed
        if u is not None and i == u.point.index:
            lines.append(
                f"---- the newest commit alone: {u.point.change_pct:+.1f}%"
                f"{' (worse)' if u.worse else ''}, unconfirmed ----"
            )
        if i in starts:
            c = starts[i]
            lines.append(
                f"---- change point: {c.point.change_pct:+.1f}%{' (worse)' if c.worse else ''} ----"
            )
        describe = (p.describe or "") + ("-dirty" if p.dirty else "")
        lines.append(
            f"{short(p.commit):<10}  {describe[:16]:<16}  {p.records:>7}  {len(p.samples):>7}  "
            f"{_num(p.median):>10}"
        )
    lines.append("")
    if not report.changes:
        lines.append("no change points")
    for c in report.changes:
        lines.append(f"change point at {short(c.first)}: {_step(c, report.unit, 'REGRESSION')}")
        lines.append(
            f"  the first commit after it is in the git range {short(c.lo)}..{short(c.hi)}"
        )
    u = report.unconfirmed
    if u is not None:
        lines.append(f"the newest commit {short(u.first)} alone: {_step(u, report.unit, 'worse')}")
        lines.append(
            "  unconfirmed: one commit after it, not a change point yet (--check does not "
            "fail on it); measure the next commit, or this one again"
        )
    if report.apart:
        shown = ", ".join(short(c) for c in sorted(report.apart)[:5])
        lines.append(
            f"not in the SUT's history: {sum(report.apart.values())} records "
            f"of {len(report.apart)} commits ({shown})"
        )
    return "\n".join(lines) + "\n"
