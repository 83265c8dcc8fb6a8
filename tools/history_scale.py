"""How long `harmony-ref history` takes over a large history (issue 47's target: 10,000 records
answered in under 2 s).

    python tools/history_scale.py [--records 10000] [--commits 500] [--repeats 5] [--json]

Makes, in a temporary folder, a git repository of `--commits` commits (fixed authors and dates)
and a SQLite history of `--records` run records spread evenly over them (5 lognormal samples a
record, decode time 8% slower from the last quarter of the commits on), then times the user's
command as a user runs it, a fresh process each time: `harmony-ref history --metric decode_ms
--sut REPO --history DB --json`, `--repeats` times, and prints the median and the range with the
CPU it ran on and the change point the command found (it must be the seeded one). Building the
history is not timed. Run it on a quiet machine: the number is a wall-clock time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.track.history_demo import METRIC, record  # noqa: E402  (the history tests' record)

SEED = 4710
NOISE = 0.03
STEP = 0.08
SAMPLES = 5


def git(repo: Path, *args: str, env: dict) -> str:
    out = subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    return out.stdout.decode().strip()


def make_repo(repo: Path, commits: int) -> list[str]:
    """`commits` commits made with git fast-import (one process: seconds, not minutes)."""
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_SYSTEM": os.devnull,
    }
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main", env=env)
    stream = []
    for i in range(commits):
        body = f"/* change {i} */\n"
        msg = f"change {i}\n"
        stream.append(
            f"commit refs/heads/main\nmark :{i + 1}\n"
            f"author demo <demo@example.com> {1767225600 + 60 * i} +0000\n"
            f"committer demo <demo@example.com> {1767225600 + 60 * i} +0000\n"
            f"data {len(msg)}\n{msg}"
            + (f"from :{i}\n" if i else "")
            + f"M 644 inline decode.c\ndata {len(body)}\n{body}\n"
        )
    subprocess.run(
        ["git", "fast-import", "--quiet"],
        cwd=repo,
        env=env,
        input="".join(stream).encode(),
        check=True,
    )
    git(repo, "checkout", "-q", "main", env=env)
    return git(repo, "rev-list", "--reverse", "main", env=env).split()


def build(root: Path, n_records: int, n_commits: int) -> tuple[Path, Path, str]:
    from harmony_ref.track.history import History

    repo = root / "repo"
    hashes = make_repo(repo, n_commits)
    step_at = 3 * n_commits // 4
    rng = np.random.default_rng(SEED)
    db = root / "history.sqlite"
    h = History(db)
    batch = []
    for i in range(n_records):
        c = i * n_commits // n_records
        level = 20.0 * (1 + STEP if c >= step_at else 1.0)
        batch.append((record(hashes[c], level * rng.lognormal(0.0, NOISE, SAMPLES)), None))
        if len(batch) == 1000:
            h.append_many(batch)
            batch = []
    if batch:
        h.append_many(batch)
    h.close()
    return repo, db, hashes[step_at]


def main(argv=None) -> int:
    from harmony_ref.backends.host_timing import cpu_id

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--commits", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        repo, db, culprit = build(Path(tmp), args.records, args.commits)
        build_s = time.perf_counter() - t0
        cmd = [sys.executable, "-m", "harmony_ref", "history", "--metric", METRIC]
        cmd += ["--sut", str(repo), "--history", str(db), "--json"]
        times, out = [], None
        for _ in range(args.repeats):
            t = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True)
            times.append(time.perf_counter() - t)
            if done.returncode not in (0, 1):
                sys.exit(f"history failed: {done.stderr.strip()[:300]}")
            out = json.loads(done.stdout)
        found = [c["first_commit"] for c in out["change_points"]]
    result = {
        "cpu": cpu_id(),
        "records": args.records,
        "commits": args.commits,
        "build_s": round(build_s, 1),
        "history_s_median": round(statistics.median(times), 3),
        "history_s_min": round(min(times), 3),
        "history_s_max": round(max(times), 3),
        "seeded_change_at": culprit,
        "changes_found_at": found,
        "found_seeded": culprit in found,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{result['cpu']}: `harmony-ref history` over {args.records} records on "
            f"{args.commits} commits: median {result['history_s_median']} s "
            f"(min {result['history_s_min']}, max {result['history_s_max']}, "
            f"{args.repeats} fresh processes); seeded change "
            f"{'found' if result['found_seeded'] else 'NOT found'} at {culprit[:10]}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
