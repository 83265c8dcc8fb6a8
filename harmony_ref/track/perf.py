"""`python -m harmony_ref.track.perf [pytest args]`: the pytest-benchmark gate behind `tox -e perf`.

Runs tests/perf with timing on (CPU time, one thread) and saves every run with its raw samples
(--benchmark-autosave --benchmark-save-data, under .benchmarks/<machine id>/). From the second
run on a machine it compares with the previous saved run by the gate's rule for measured metrics
(track/gate.py, limits from gate_tolerances.toml) on each benchmark's time relative to a
reference measured in the same seconds (its NumPy baseline, or a fixed probe:
tests/perf/conftest.py says why): a benchmark regresses only when that ratio's median is worse
by more than the limit (10%), a one-sided Mann-Whitney U test on the raw samples says p < alpha
(0.05), and the same holds when that benchmark is measured again (the flagged benchmarks are re-
run once, together). A run that fails is moved to `failed/` beside the saved runs, so the next
run is compared with the last run that passed, not with the slow one. The last line says it all:

    perf: PASS 31 benchmarks vs 0007_...: no regression (...)          exit 0
    perf: FAIL 1 of 31 ...: test_perf_matmul_w8_gemv[4096] (worse by 30.4%, ...)  exit 1
    perf: ERROR pytest exited 1 (...)                                   pytest's exit code
    perf: RECORDED 31 benchmarks as the first run of this machine      exit 0
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


def previous_runs(storage: Path = STORAGE) -> list[Path]:
    """Saved runs of this machine id, oldest first (the glob pytest-benchmark's loader uses)."""
    from pytest_benchmark.utils import get_machine_id

    return sorted((storage / get_machine_id()).glob("[0-9][0-9][0-9][0-9]_*.json"))


def pytest_args(extra: list[str], storage: Path = STORAGE, json_out: Path | None = None,
                save: bool = True) -> list[str]:
    args = ["--benchmark-enable", "--benchmark-save-data", "--benchmark-sort=name",
            f"--benchmark-timer={TIMER}",
            "--benchmark-columns=min,median,mean,stddev,rounds", "-p", "no:cacheprovider"]
    if save:
        args += ["--benchmark-autosave", f"--benchmark-storage=file://{storage}"]
    if json_out is not None:
        args.append(f"--benchmark-json={json_out}")
    return args + list(extra)


def _pytest(args: list[str]) -> int:
    return subprocess.call([sys.executable, "-m", "pytest", *args])


def load_metrics(path: Path) -> dict:
    """pytest-benchmark JSON -> {benchmark fullname: Metric}. What is gated: the benchmark's time
    relative to a reference measured in the same seconds, when the test stored one
    (extra_info gate_value/gate_samples/gate_unit, tests/perf/conftest.gate_relative), else
    its median time in ms with the raw samples."""
    from harmony_ref.metrics import Metric

    try:
        data = json.loads(Path(path).read_text())
        out = {}
        for b in data["benchmarks"]:
            extra, stats, name = b.get("extra_info") or {}, b["stats"], b["fullname"]
            if "gate_samples" in extra:
                out[name] = Metric(name, float(extra["gate_value"]), str(extra["gate_unit"]),
                                   "lower", "measured", tuple(map(float, extra["gate_samples"])))
            else:
                samples = tuple(1e3 * s for s in stats.get("data") or ())
                out[name] = Metric(name, 1e3 * stats["median"], "ms", "lower", "measured", samples)
        return out
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a pytest-benchmark result ({type(e).__name__}: {e})") from e


def _record(metrics: dict, names: list[str]):
    from harmony_ref.metrics import Metrics
    from harmony_ref.track.record import Record

    return Record(config={"benchmarks": TESTS}, metrics=Metrics({n: metrics[n] for n in names}),
                  provenance={})


def judge(previous: dict, current: dict, rerun=None, tolerances=None):
    """The gate's verdict on every benchmark both runs have. `rerun(names) -> {name: Metric}`
    re-measures the flagged ones (all at once); None: flagged ones stay unconfirmed."""
    from harmony_ref.track import gate

    names = [n for n in current if n in previous]
    tol = tolerances or gate.load_tolerances()
    first = gate.compare(_record(previous, names), _record(current, names), tol,
                         no_remeasure_reason="no re-run asked for")
    flagged = [r.metric for r in first.rows if r.status == gate.REGRESSION]
    if not flagged or rerun is None:
        return first
    again = rerun(flagged)
    missing = [n for n in flagged if n not in again]
    if missing:
        raise RuntimeError(f"the re-run did not measure {', '.join(missing)}")
    return gate.compare(_record(previous, names), _record(current, names), tol,
                        remeasure=lambda name: again[name] if name in again else current[name])


def summary_line(report, previous_name: str, new: list[str], gone: list[str]) -> tuple[str, int]:
    from harmony_ref.track import gate

    rows = report.rows
    bad = [r for r in rows if r.status == gate.REGRESSION]
    noise = [r for r in rows if r.status == gate.NOISE and "not confirmed" in r.verdict]
    better = [r for r in rows if r.status == gate.IMPROVED]
    rule = f"limit +{report.tolerances.measured_pct:g}%, U test p<{report.tolerances.alpha:g}"
    extra = []
    if noise:
        extra.append(f"{len(noise)} not confirmed on re-run: "
                     + ", ".join(_short(r.metric) for r in noise))
    if better:
        extra.append(f"{len(better)} faster")
    if new:
        extra.append(f"{len(new)} new")
    if gone:
        extra.append(f"{len(gone)} gone: " + ", ".join(_short(n) for n in gone))
    tail = ("; " + "; ".join(extra)) if extra else ""
    if bad:
        named = "; ".join(f"{_short(r.metric)} ({r.verdict.split(': ', 1)[-1]})" for r in bad)
        return (f"perf: FAIL {len(bad)} of {len(rows)} benchmarks slower than {previous_name} "
                f"({rule}): {named}{tail}"), 1
    return (f"perf: PASS {len(rows)} benchmarks vs {previous_name}: no regression ({rule}, "
            f"confirmed on re-run){tail}"), 0


def _short(fullname: str) -> str:
    return fullname.rsplit("::", 1)[-1]


def main(argv: list[str] | None = None) -> int:
    extra = sys.argv[1:] if argv is None else list(argv)
    before = previous_runs()
    previous = before[-1] if before else None
    print("perf: " + (f"will compare with {previous.name} by the gate's rule" if previous else
                      "no previous run for this machine: recording only (the next run compares)"),
          flush=True)
    with tempfile.TemporaryDirectory(prefix="harmony-perf-") as tmp:
        current_json = Path(tmp) / "current.json"
        rc = _pytest([TESTS, *pytest_args(extra, json_out=current_json)])
        if rc != 0 or not current_json.is_file():
            print(f"perf: ERROR pytest exited {rc} (its report is above); nothing compared")
            return rc or 1
        try:
            current = load_metrics(current_json)
            if previous is None:
                saved = previous_runs()
                print(f"perf: RECORDED {len(current)} benchmarks as the first run of this machine "
                      f"({saved[-1].name if saved else 'not saved'}); the next run compares")
                return 0
            prior = load_metrics(previous)
        except ValueError as e:
            print(f"perf: ERROR {e}")
            return 2

        def rerun(names: list[str]) -> dict:
            print(f"perf: re-measuring {len(names)} flagged: {', '.join(map(_short, names))}",
                  flush=True)
            again_json = Path(tmp) / "rerun.json"
            code = _pytest([*names, *pytest_args(extra, json_out=again_json, save=False)])
            if code != 0 or not again_json.is_file():
                raise RuntimeError(f"the re-run's pytest exited {code}")
            return load_metrics(again_json)

        try:
            report = judge(prior, current, rerun)
        except ValueError as e:  # e.g. a saved run measured in other units (an older suite)
            print(f"perf: ERROR cannot compare with {previous.name}: {e}")
            return 2
        except RuntimeError as e:
            print(f"perf: ERROR {e}")
            return 1
    new = [n for n in current if n not in prior]
    gone = [n for n in prior if n not in current]
    line, code = summary_line(report, previous.stem, new, gone)
    if code != 0:
        line += "; " + set_aside([p for p in previous_runs() if p not in before])
    print(line)
    return code


def set_aside(saved: list[Path]) -> str:
    """Move a failed run's saved files into failed/, out of what the next run compares with."""
    for path in saved:
        (path.parent / "failed").mkdir(exist_ok=True)
        path.replace(path.parent / "failed" / path.name)
    if not saved:
        return "nothing saved"
    return (f"this run is kept in .../{saved[0].parent.name}/failed/; the next run compares "
            "with the last run that passed")


if __name__ == "__main__":
    sys.exit(main())
