"""`python -m harmony_ref.track.perf [pytest args]`: the pytest-benchmark gate behind `tox -e perf`.

Runs tests/perf with timing on and saves every run (--benchmark-autosave, under .benchmarks/).
Once a previous saved run exists for this machine id, it also compares against the latest one
and fails when a benchmark's median got more than 15% slower
(--benchmark-compare --benchmark-compare-fail=median:15%). pytest-benchmark refuses
--benchmark-compare-fail without something to compare with, hence this wrapper: the first run on a
machine records, every later run gates.
"""

from __future__ import annotations

import sys
from pathlib import Path

COMPARE_FAIL = "median:15%"
STORAGE = Path(".benchmarks")


def previous_runs(storage: Path = STORAGE) -> list[Path]:
    """Saved runs of this machine id, oldest first (the glob pytest-benchmark's loader uses)."""
    from pytest_benchmark.utils import get_machine_id

    return sorted((storage / get_machine_id()).glob("[0-9][0-9][0-9][0-9]_*.json"))


def pytest_args(extra: list[str], storage: Path = STORAGE) -> list[str]:
    args = ["tests/perf", "--benchmark-enable", "--benchmark-autosave",
            f"--benchmark-storage=file://{storage}",
            "--benchmark-columns=min,median,mean,stddev,rounds", "--benchmark-sort=name"]
    if previous_runs(storage):
        args += ["--benchmark-compare", f"--benchmark-compare-fail={COMPARE_FAIL}"]
    return args + list(extra)


def main(argv: list[str] | None = None) -> int:
    import pytest

    args = pytest_args(sys.argv[1:] if argv is None else argv)
    gating = "--benchmark-compare" in args
    print("perf: " + ("comparing with the previous saved run, failing on median +15%" if gating
                      else "no previous run for this machine: recording only (the next run gates)"),
          flush=True)
    return int(pytest.main(args))


if __name__ == "__main__":
    sys.exit(main())
