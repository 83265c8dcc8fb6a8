"""A repository the history tests make: a tiny program with one commit per change and run records
of each commit whose decode time steps up by a known amount at a known commit, under lognormal
noise. Commits have fixed authors and dates, so their hashes (and the docs' pasted output) are
the same on every machine."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np

COMMITS = 16
STEP_AT = 10  # the first slow commit (0-based, oldest first)
STEP = 0.15  # +15% decode time from STEP_AT on
NOISE = 0.03  # lognormal sigma of a sample
SAMPLES = 5
SEED = 47
METRIC = "decode_ms"


def git(repo: Path, *args: str, date: int = 0) -> str:
    stamp = f"2026-01-01T00:{date // 60:02d}:{date % 60:02d}+00:00"
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "demo",
        "GIT_AUTHOR_EMAIL": "demo@example.com",
        "GIT_COMMITTER_NAME": "demo",
        "GIT_COMMITTER_EMAIL": "demo@example.com",
        "GIT_AUTHOR_DATE": stamp,
        "GIT_COMMITTER_DATE": stamp,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_SYSTEM": os.devnull,
    }
    out = subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def commit_series(root: Path, n: int, files) -> list[str]:
    """A new repository at `root` with `n` commits, oldest first: commit i writes
    `files(i)` ({name: text}); fixed dates, so fixed hashes. Returns the hashes."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    hashes = []
    for i in range(n):
        for name, text in files(i).items():
            (root / name).write_text(text)
        git(root, "add", *files(i))
        git(root, "commit", "-q", "-m", f"change {i}", date=i)
        hashes.append(git(root, "rev-parse", "HEAD"))
    return hashes


def make_repo(repo: Path, commits: int = COMMITS) -> list[str]:
    """A git repository of `commits` commits; their hashes, oldest first."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    hashes = []
    for i in range(commits):
        (repo / "decode.c").write_text(f"/* change {i} */\nint decode(void) {{ return {i}; }}\n")
        git(repo, "add", "decode.c")
        git(repo, "commit", "-q", "-m", f"change {i}", date=i)
        if i == 0:
            git(repo, "tag", "v1.0")
        hashes.append(git(repo, "rev-parse", "HEAD"))
    return hashes


def record(commit: str, samples, metric: str = METRIC, describe: str | None = None) -> dict:
    """A run record (track/record.py's schema) of `commit` with one measured metric."""
    return {
        "schema_version": 1,
        "config": {
            "model": "smollm2-135m",
            "policy": "q4_0",
            "profile": "host",
            "backend": "command",
            "scenario": {"prompt_tokens": 64, "new_tokens": 32, "context_tokens": 512, "batch": 1},
        },
        "metrics": {
            metric: {
                "value": float(np.median(samples)),
                "unit": "ms",
                "direction": "lower",
                "kind": "measured",
                "samples": [float(s) for s in samples],
                "flags": [],
            }
        },
        "parts": {"predicted": {"status": "ok", "detail": "", "metrics": [metric]}},
        "provenance": {
            "git_commit": "0" * 40,
            "git_dirty": False,
            "harmony_ref_version": "0.1.0",
            "python_version": "3.11",
            "numpy_version": "2",
            "numba_version": "0.60",
            "cpu_model": "demo CPU",
            "cpu_cores": 2,
            "numba_threads": 2,
            "hostname": "ci-runner",
            "utc_time": "2026-01-02T00:00:00+00:00",
            "sut": {"repository": "demo", "commit": commit, "describe": describe, "dirty": False},
        },
    }


def demo_records(hashes: list[str], seed: int = SEED, step: float = STEP) -> list[dict]:
    """One record a commit, SAMPLES samples each, decode time x (1 + step) from STEP_AT on."""
    rng = np.random.default_rng(seed)
    out = []
    for i, h in enumerate(hashes):
        level = 20.0 * (1 + step if i >= STEP_AT else 1.0)
        samples = np.round(level * rng.lognormal(0.0, NOISE, SAMPLES), 3)
        out.append(record(h, samples, describe=f"v1.0-{i}-g{h[:7]}" if i else "v1.0"))
    return out


def make_demo(root: Path) -> tuple[Path, Path, list[str]]:
    """(repository, history file, commit hashes) of the demo, under root."""
    from harmony_ref.track.history import History

    repo = root / "demo"
    hashes = make_repo(repo)
    db = root / "history.sqlite"
    h = History(db)
    h.append_many((r, None) for r in demo_records(hashes))
    h.close()
    return repo, db, hashes
