"""Measure the change-point detector (harmony_ref/track/changepoints.py) by simulation: its
false-alarm rate on noise-only series and its power on steps. The figures go into
docs/how-to/find-the-commit.md.

    python tools/changepoint_sim.py [--trials 1000] [--seed 0] [--json]

- false alarms: 60-point series, every point `--samples` raw samples of lognormal noise with a
  3% sigma (log scale) and no change; a trial is a false alarm when any change point is reported.
- power: the same series with an 8% step up (slower) at a random commit in 10..50; a trial is a
  hit when a change point's first commit after it is within +-1 of the step's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harmony_ref.track.changepoints import detect  # noqa: E402

POINTS = 60
NOISE = 0.03
STEP = 0.08


def series(rng, samples: int, step_at: int | None) -> list[np.ndarray]:
    out = []
    for i in range(POINTS):
        level = 100.0 * (1 + STEP if step_at is not None and i >= step_at else 1.0)
        out.append(level * rng.lognormal(0.0, NOISE, samples))
    return out


def simulate(trials: int, seed: int, samples: int) -> dict:
    rng = np.random.default_rng(seed)
    alarms = sum(bool(detect(series(rng, samples, None))) for _ in range(trials))
    hits = 0
    for _ in range(trials):
        at = int(rng.integers(10, 51))
        hits += any(abs(cp.index - at) <= 1 for cp in detect(series(rng, samples, at)))
    return {
        "points": POINTS,
        "noise_pct": 100 * NOISE,
        "step_pct": 100 * STEP,
        "samples_per_point": samples,
        "trials": trials,
        "false_alarm_rate": alarms / trials,
        "power": hits / trials,
    }


def run_cli(doc: str, simulate_fn, line, trials: int) -> int:
    """The simulation tools' command line: --trials, --seed, --samples (several: one row each),
    --json; `line(row)` prints a row as text."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--trials", type=int, default=trials)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--samples", type=int, nargs="+", default=[5, 1])
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rows = [simulate_fn(args.trials, args.seed, s) for s in args.samples]
    print(json.dumps(rows, indent=2) if args.json else "\n".join(line(r) for r in rows))
    return 0


def _line(r: dict) -> str:
    return (
        f"{r['samples_per_point']} samples a point, {r['trials']} trials: false alarms "
        f"{100 * r['false_alarm_rate']:.1f}% (noise only), power {100 * r['power']:.1f}% "
        f"({r['step_pct']:g}% step found at its commit +-1)"
    )


if __name__ == "__main__":
    raise SystemExit(run_cli(__doc__, simulate, _line, 1000))
