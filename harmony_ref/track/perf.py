"""`python -m harmony_ref.track.perf [pytest args]`: the pytest-benchmark gate behind `tox -e perf`.

Runs tests/perf with timing on (CPU time, one thread) and saves every run with its raw samples
(--benchmark-autosave --benchmark-save-data, under .benchmarks/<machine id>/). From the second
run on a machine it judges each benchmark's time *relative to a reference measured in the same
seconds* (its NumPy baseline, or a fixed probe: tests/perf/conftest.py says why; a benchmark
with no such ratio, e.g. the two-thread matmul table, is timed and saved but not gated) by the
gate's rule for measured metrics (track/gate.py): a benchmark regresses only when

  1. its median ratio is worse than the baseline's by more than LIMIT_PCT (below: how it was
     derived), and
  2. a one-sided Mann-Whitney U test of its per-round samples against the baseline's says
     p < ALPHA, and
  3. both hold again when the flagged benchmarks are measured once more (one re-run, together).

The baseline is the last BASELINE_RUNS passing runs of this machine: per benchmark the median of
their medians (one run taken in an unlucky minute does not set the bar) and their samples pooled
for the U test. A run that fails is moved to `failed/` beside the saved runs, so the next run is
compared with runs that passed, not with the slow one. The last line says it all, and a failure
names the benchmarks first:

    perf: PASS 24 gated benchmarks vs 3 runs to 0007_...: no regression (...)        exit 0
    perf: FAIL test_perf_matmul_w8_gemv[4096] +30.4% (re-run +29.9%); ... | ...       exit 1
    perf: ERROR pytest exited 1 (...)                                                pytest's code
    perf: RECORDED 24 gated benchmarks as the first run of this machine               exit 0
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

STORAGE = Path(".benchmarks")
TESTS = "tests/perf"
# CPU time of the (one-threaded, tests/perf/conftest.py) process: on a shared machine a call
# that waits for a core does not count the wait, so the neighbours' load is not read as a
# slower kernel. Wall time would be, on this 2-core machine (an unchanged tree "failed" +42%).
TIMER = "time.process_time"

# The limit, derived on the 2-core KVM guest this project is developed on (Intel Xeon family 6
# model 207), each run under /work/bin/quiet: two runs of an unchanged tree moved the 20 gated
# ratios by at most 9.4% (decode_attention 2048 int8 against NumPy; before the ABBA rounds and
# the compiled probe: 17.4%, and 50% for the thermal stepper against the pure-Python probe).
# The limit is about twice that, and below the 30% the test-only HARMONY_REF_PERF_SLOW switch
# adds (tests/perf/_slow.py), which must fail. The U test and the re-run keep the rest of the
# noise out; the pooled baseline keeps one unlucky run from setting the bar.
LIMIT_PCT = 20.0
ALPHA = 0.05
BASELINE_RUNS = 3


def previous_runs(storage: Path = STORAGE) -> list[Path]:
    """Saved runs of this machine id, oldest first (the glob pytest-benchmark's loader uses)."""
    from pytest_benchmark.utils import get_machine_id

    return sorted((storage / get_machine_id()).glob("[0-9][0-9][0-9][0-9]_*.json"))


def pytest_args(
    extra: list[str], storage: Path = STORAGE, json_out: Path | None = None, save: bool = True
) -> list[str]:
    args = [
        "--benchmark-enable",
        "--benchmark-save-data",
        "--benchmark-sort=name",
        f"--benchmark-timer={TIMER}",
        "--benchmark-columns=min,median,mean,stddev,rounds",
        "-p",
        "no:cacheprovider",
    ]
    if save:
        args += ["--benchmark-autosave", f"--benchmark-storage=file://{storage}"]
    if json_out is not None:
        args.append(f"--benchmark-json={json_out}")
    return args + list(extra)


def _pytest(args: list[str]) -> int:
    return subprocess.call([sys.executable, "-m", "pytest", *args])


def load_metrics(path: Path) -> dict:
    """pytest-benchmark JSON -> {benchmark fullname: Metric} of the gated benchmarks: those that
    stored a time relative to a reference measured in the same seconds (extra_info gate_value,
    gate_samples, gate_unit: tests/perf/conftest.gate_relative). An absolute time is not gated:
    this machine's speed drifts by up to 1.7x over minutes."""
    from harmony_ref.metrics import Metric

    try:
        data = json.loads(Path(path).read_text())
        out = {}
        for b in data["benchmarks"]:
            extra, name = b.get("extra_info") or {}, b["fullname"]
            b["stats"]["median"]  # a pytest-benchmark result has stats, gated or not
            if "gate_samples" in extra:
                out[name] = Metric(
                    name,
                    float(extra["gate_value"]),
                    str(extra["gate_unit"]),
                    "lower",
                    "measured",
                    tuple(map(float, extra["gate_samples"])),
                )
        return out
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a pytest-benchmark result ({type(e).__name__}: {e})") from e


def pooled(runs: list[dict]) -> dict:
    """One baseline from several runs ({name: Metric} each, oldest first): per benchmark the
    median of the runs' medians and all their samples; a benchmark counts from the runs that
    have it in the newest run's unit (an older run of a changed benchmark is left out)."""
    import statistics

    from harmony_ref.metrics import Metric

    out = {}
    for name, last in runs[-1].items():
        same = [r[name] for r in runs if name in r and r[name].unit == last.unit]
        out[name] = Metric(
            name,
            float(statistics.median(m.value for m in same)),
            last.unit,
            last.direction,
            last.kind,
            tuple(s for m in same for s in m.samples),
        )
    return out


def perf_tolerances():
    from harmony_ref.track import gate

    return gate.Tolerances(measured_pct=LIMIT_PCT, alpha=ALPHA, source="harmony_ref/track/perf.py")


def _record(metrics: dict, names: list[str]):
    from harmony_ref.metrics import Metrics
    from harmony_ref.track.record import Record

    return Record(
        config={"benchmarks": TESTS}, metrics=Metrics({n: metrics[n] for n in names}), provenance={}
    )


def judge(previous: dict, current: dict, rerun=None, tolerances=None):
    """The gate's verdict on every benchmark both runs have. `rerun(names) -> {name: Metric}`
    re-measures the flagged ones (all at once); None: flagged ones stay unconfirmed."""
    from harmony_ref.track import gate

    names = [n for n in current if n in previous]
    tol = tolerances or perf_tolerances()
    first = gate.compare(
        _record(previous, names),
        _record(current, names),
        tol,
        no_remeasure_reason="no re-run asked for",
    )
    flagged = [r.metric for r in first.rows if r.status == gate.REGRESSION]
    if not flagged or rerun is None:
        return first
    again = rerun(flagged)
    missing = [n for n in flagged if n not in again]
    if missing:
        raise RuntimeError(f"the re-run did not measure {', '.join(missing)}")
    return gate.compare(
        _record(previous, names),
        _record(current, names),
        tol,
        remeasure=lambda name: again[name] if name in again else current[name],
    )


def summary_line(report, previous_name: str, new: list[str], gone: list[str]) -> tuple[str, int]:
    """The one line `tox -e perf` ends with, and its exit code. A failure starts with the
    benchmarks that failed, each with its change in both measurements."""
    from harmony_ref.track import gate

    rows = report.rows
    bad = [r for r in rows if r.status == gate.REGRESSION]
    noise = [r for r in rows if r.status == gate.NOISE and "not confirmed" in r.verdict]
    better = [r for r in rows if r.status == gate.IMPROVED]
    rule = (
        f"rule: median worse by > {report.tolerances.measured_pct:g}%, U test "
        f"p < {report.tolerances.alpha:g}, both again on a re-run"
    )
    extra = []
    if noise:
        extra.append(
            f"{len(noise)} not confirmed on re-run: " + ", ".join(_short(r.metric) for r in noise)
        )
    if better:
        extra.append(f"{len(better)} faster")
    if new:
        extra.append(f"{len(new)} new")
    if gone:
        extra.append(f"{len(gone)} gone: " + ", ".join(_short(n) for n in gone))
    tail = ("; " + "; ".join(extra)) if extra else ""
    if bad:
        named = "; ".join(f"{_short(r.metric)} {_changes(r.verdict)}" for r in bad)
        return (
            f"perf: FAIL {named} | {len(bad)} of {len(rows)} gated benchmarks slower than "
            f"{previous_name} ({rule}){tail}"
        ), 1
    return (
        f"perf: PASS {len(rows)} gated benchmarks vs {previous_name}: no regression ({rule}){tail}"
    ), 0


def _changes(verdict: str) -> str:
    """'+29.8% (re-run +30.9%)' from a gate verdict that was confirmed on its re-run."""
    import re

    found = re.findall(r"worse by ([0-9.]+)%", verdict)
    if len(found) >= 2:
        return f"+{found[0]}% (re-run +{found[1]}%)"
    return f"+{found[0]}%" if found else verdict


def _short(fullname: str) -> str:
    return fullname.rsplit("::", 1)[-1]


def main(argv: list[str] | None = None) -> int:
    extra = sys.argv[1:] if argv is None else list(argv)
    before = previous_runs()
    baseline_runs = before[-BASELINE_RUNS:]
    print(
        "perf: "
        + (
            f"will compare with {_runs_name(baseline_runs)} by the gate's rule"
            if baseline_runs
            else "no previous run for this machine: recording only (the next run compares)"
        ),
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="harmony-perf-") as tmp:
        current_json = Path(tmp) / "current.json"
        rc = _pytest([TESTS, *pytest_args(extra, json_out=current_json)])
        if rc != 0 or not current_json.is_file():
            print(f"perf: ERROR pytest exited {rc} (its report is above); nothing compared")
            return rc or 1
        try:
            current = load_metrics(current_json)
            if not baseline_runs:
                saved = previous_runs()
                name = saved[-1].name if saved else "not saved"
                print(
                    f"perf: RECORDED {len(current)} gated benchmarks as the first run of this "
                    f"machine ({name}); the next run compares"
                )
                return 0
            prior = pooled([load_metrics(p) for p in baseline_runs])
        except ValueError as e:
            print(f"perf: ERROR {e}")
            return 2

        def rerun(names: list[str]) -> dict:
            print(
                f"perf: re-measuring {len(names)} flagged: {', '.join(map(_short, names))}",
                flush=True,
            )
            again_json = Path(tmp) / "rerun.json"
            code = _pytest([*names, *pytest_args(extra, json_out=again_json, save=False)])
            if code != 0 or not again_json.is_file():
                raise RuntimeError(f"the re-run's pytest exited {code}")
            return load_metrics(again_json)

        try:
            report = judge(prior, current, rerun)
        except ValueError as e:  # e.g. a saved run measured in other units (an older suite)
            print(f"perf: ERROR cannot compare with {_runs_name(baseline_runs)}: {e}")
            return 2
        except RuntimeError as e:
            print(f"perf: ERROR {e}")
            return 1
    new = [n for n in current if n not in prior]
    gone = [n for n in prior if n not in current]
    line, code = summary_line(report, _runs_name(baseline_runs), new, gone)
    if code != 0:
        line += "; " + set_aside([p for p in previous_runs() if p not in before])
    print(line)
    return code


def _runs_name(runs: list[Path]) -> str:
    if len(runs) == 1:
        return runs[0].stem
    return f"{len(runs)} runs to {runs[-1].stem}"


def set_aside(saved: list[Path]) -> str:
    """Move a failed run's saved files into failed/, out of what the next run compares with."""
    for path in saved:
        (path.parent / "failed").mkdir(exist_ok=True)
        path.replace(path.parent / "failed" / path.name)
    if not saved:
        return "nothing saved"
    return (
        f"this run is kept in .../{saved[0].parent.name}/failed/; the next run compares "
        "with the last run that passed"
    )


if __name__ == "__main__":
    sys.exit(main())
