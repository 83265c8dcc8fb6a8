"""Measure `harmony-ref bisect`'s search (harmony_ref/track/bisect.py) by simulation: seeded
trials of a 64-commit range with an 8% step at a random commit under 3% lognormal noise, each
run giving `--samples` raw samples (llama-bench's -r repetitions). Git, builds and processes
are replaced by the simulated runs; the search, the verdicts and the budget are the real ones.
The figures go into docs/how-to/find-the-commit.md.

    python tools/bisect_sim.py [--trials 20] [--samples 5 1] [--json]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harmony_ref.track.bisect import Bisection, CommitRuns  # noqa: E402

COMMITS = 64
STEP = 0.08
NOISE = 0.03
MAX_RUNS = 150


class SimBisection(Bisection):
    """A Bisection whose commits are indices and whose runs are drawn, not executed."""

    def __init__(self, rng, step_at: int, samples: int):  # no repository: nothing to check
        self.commits = [f"{i:040d}" for i in range(COMMITS + 1)]  # good, then 64 commits
        self.good, self.bad = self.commits[0], self.commits[-1]
        self.runs = {c: CommitRuns(c) for c in self.commits}
        self.total, self.max_runs, self.history = 0, MAX_RUNS, None
        self.placed = []
        self.metric, self.unit, self.direction = "decode_step_ms", "ms", "lower"
        self.note = lambda s: None
        self.rng, self.step_at, self.samples = rng, step_at, samples

    def built(self, c: CommitRuns) -> bool:
        c.build = "ok"
        return True

    def measure(self, c: CommitRuns) -> None:
        from harmony_ref.track.bisect import _Budget

        if self.total >= self.max_runs:
            raise _Budget()
        i = self.commits.index(c.commit)
        level = 20.0 * (1 + STEP if i >= self.step_at else 1.0)
        c.samples += list(level * self.rng.lognormal(0.0, NOISE, self.samples))
        c.runs += 1
        self.total += 1


def simulate(trials: int, seed: int, samples: int) -> dict:
    rng = np.random.default_rng(seed)
    exact, runs = 0, []
    for _ in range(trials):
        step_at = int(rng.integers(1, COMMITS + 1))  # the first bad commit (index in commits)
        b = SimBisection(rng, step_at, samples)
        try:
            r = b.run()
        except ValueError:  # the ends did not differ within ENDS_CAP runs: a miss
            runs.append(b.total)
            continue
        exact += r.first_bad == b.commits[step_at]
        runs.append(r.total_runs)
    return {
        "commits": COMMITS,
        "step_pct": 100 * STEP,
        "noise_pct": 100 * NOISE,
        "samples_per_run": samples,
        "trials": trials,
        "exact": exact,
        "runs_median": float(np.median(runs)),
        "runs_max": int(max(runs)),
    }


def _line(r: dict) -> str:
    return (
        f"{r['samples_per_run']} samples a run: culprit named exactly in {r['exact']} of "
        f"{r['trials']}, runs median {r['runs_median']:g}, max {r['runs_max']}"
    )


if __name__ == "__main__":
    from tools.changepoint_sim import run_cli

    raise SystemExit(run_cli(__doc__, simulate, _line, 20))
