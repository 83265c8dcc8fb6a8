"""Automatic bisection of a regression between two commits of the system under test, on this host.

Each commit is checked out in its own git worktree (cached by commit under the cache folder, so
a second bisection over the same range builds nothing twice), built with the build command run
in the worktree (a commit that fails to build is skipped, as `git bisect skip`, and reported),
and measured by running the command there and parsing its output with the same parsers
`harmony-ref measure` uses (lab/parsers.py). Every run is appended to the run history
(track/history.py) with the commit as its system under test, and a bisection started again
(after a crash or Ctrl-C) takes the runs already there for the same command and metric.

The verdict between two commits follows Pinpoint's (Chromium): a two-sided Mann-Whitney U test
on the raw samples, "different" when p <= `P_DIFFERENT`, "same" when p >= `P_SAME`, otherwise
"unknown" and one more run, up to `RUNS_CAP` runs of a commit (`ENDS_CAP` for the ends); at
the cap a commit goes to the side whose median it is nearer (in logs), and the result says so:
the first bad commit is then probable, not found (`placed_by_nearness`, exit 1 in the command),
as Pinpoint reports an "unknown" rather than a culprit it guessed. The good and bad ends
must differ, bad being worse in the metric's direction; every commit between is compared with
both ends and goes to the side it does not differ from. `max_runs` caps the whole bisection.
tools/bisect_sim.py measures the search on simulated 64-commit ranges (the figures are in
docs/how-to/find-the-commit.md).

On a phone (`session`, a device session loaded with its relative [[push]] files deferred,
lab/session_spec.py): each commit's build must make the session's relative [[push]]
files in its worktree (a commit whose build does not is skipped, an end is bad input); one run
is one session run on the device: those files pushed by SHA-256 (a commit's artifact replaces
the previous commit's only where the bytes differ), cooldown before every measured repeat,
warm-up, and the samples of the unthrottled repeats only (throttled ones stay out, as in
`measure --session`; a run with none counts towards max_runs and is run again). max_runs counts
the session's measured repeats.
"""

from __future__ import annotations

import hashlib
import math
import statistics
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harmony_ref.track.changepoints import change_interval
from harmony_ref.track.history import History, git_out

P_DIFFERENT = 0.01
P_SAME = 0.3  # assumption: above this two samples read as the same level (Pinpoint sets its own
# high threshold by simulation; tests/track/test_bisect.py holds the culprit found)
MIN_RUNS = 3  # runs of a commit before its first verdict
RUNS_CAP = 10  # runs of one commit between the ends at most
ENDS_CAP = 20  # runs of each end at most before "good and bad do not differ"
BUILD_MARK = ".harmony-ref-build"


@dataclass
class CommitRuns:
    commit: str
    samples: list[float] = field(default_factory=list)
    runs: int = 0
    build: str = "not built"  # ok | failed | not built
    detail: str = ""

    @property
    def median(self) -> float:
        return float(statistics.median(self.samples)) if self.samples else math.nan


@dataclass
class BisectResult:
    metric: str
    unit: str
    direction: str
    good: str
    bad: str
    first_bad: str | None  # None: the range could not be narrowed to one commit (skips, budget)
    parent: str | None
    range: tuple[str, str]  # the first bad commit is in the git range range[0]..range[1]
    change_pct: float
    ci_pct: tuple[float, float]
    p_value: float
    measured: list[CommitRuns]
    skipped: list[CommitRuns]
    total_runs: int
    budget_exhausted: bool
    # commits between the ends still "unknown" against them at RUNS_CAP runs, placed on the side
    # whose median they are nearer ("good" / "bad"): the first bad commit then rests on a guess
    placed_by_nearness: list[tuple[str, str]] = field(default_factory=list)

    @property
    def certain(self) -> bool:
        """The first bad commit found: named, and no step of the search was a guess."""
        return self.first_bad is not None and not self.placed_by_nearness

    def to_dict(self) -> dict:
        def finite(x):
            return x if math.isfinite(x) else None

        return {
            "metric": self.metric,
            "unit": self.unit,
            "direction": self.direction,
            "good": self.good,
            "bad": self.bad,
            "first_bad": self.first_bad,
            "parent": self.parent,
            "range": f"{self.range[0]}..{self.range[1]}",
            "change_pct": finite(self.change_pct),
            "ci_pct": [finite(self.ci_pct[0]), finite(self.ci_pct[1])],
            "p_value": self.p_value,
            "measured": [
                {"commit": c.commit, "runs": c.runs, "median": finite(c.median)}
                for c in self.measured
            ],
            "skipped": [{"commit": c.commit, "reason": c.detail} for c in self.skipped],
            "total_runs": self.total_runs,
            "budget_exhausted": self.budget_exhausted,
            "placed_by_nearness": [
                {"commit": c, "side": side} for c, side in self.placed_by_nearness
            ],
            "certain": self.certain,
        }


def resolve(repo: Path, rev: str, flag: str) -> str:
    sha = git_out(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], repo)
    if not sha:
        raise ValueError(f"{flag} {rev}: not a revision of {repo}")
    return sha


def commit_range(repo: Path, good: str, bad: str) -> list[str]:
    """good, then the commits after it up to bad on the ancestry path, oldest first."""
    r = subprocess.run(
        ["git", "merge-base", "--is-ancestor", good, bad], cwd=repo, capture_output=True
    )
    if r.returncode != 0 or good == bad:
        raise ValueError(f"--good {good[:10]}: not an ancestor of --bad {bad[:10]}")
    out = git_out(
        ["rev-list", "--reverse", "--topo-order", "--ancestry-path", f"{good}..{bad}"], repo
    )
    return [good, *(out or "").split()]


def _u_p(a: list[float], b: list[float]) -> float:
    from scipy.stats import mannwhitneyu

    if min(len(a), len(b)) < 2:
        return 1.0
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def verdict(a: list[float], b: list[float]) -> str:
    p = _u_p(a, b)
    return "different" if p <= P_DIFFERENT else "same" if p >= P_SAME else "unknown"


class Bisection:
    """One bisection; `run()` returns its BisectResult."""

    def __init__(
        self,
        repo: str | Path,
        good: str,
        bad: str,
        command: str,
        fmt: str,
        metric: str,
        build: str | None = None,
        max_runs: int = 150,
        cache: str | Path = "results/bisect",
        history: History | None = None,
        timeout_s: float = 600.0,
        note: Callable[[str], None] = print,
        session=None,
    ):
        self.repo = Path(repo).resolve()
        if not (self.repo / ".git").exists() and not git_out(["rev-parse", "HEAD"], self.repo):
            raise ValueError(f"--repo {repo}: not a git checkout")
        self.good, self.bad = resolve(self.repo, good, "--good"), resolve(self.repo, bad, "--bad")
        self.commits = commit_range(self.repo, self.good, self.bad)
        self.command, self.fmt, self.metric, self.build_cmd = command, fmt, metric, build
        self.max_runs, self.timeout_s, self.note = max_runs, timeout_s, note
        self.cache = Path(cache)
        self.history = history
        self.session = session
        self.runs: dict[str, CommitRuns] = {c: CommitRuns(c) for c in self.commits}
        self.total = 0
        self.placed: list[tuple[str, str]] = []  # (commit, side) placed at RUNS_CAP by nearness
        self.unit, self.direction = "", "lower"
        # the history's config of this bisection's runs: the command and format (and the phone),
        # hashed (a bisection resumes only from runs of the same command on the same device)
        device = f"{session.transport}:{session.device.serial}" if session else ""
        digest = hashlib.sha256(f"{command}\0{fmt}\0{device}".encode()).hexdigest()[:10]
        self.model = f"bisect-{digest}"

    # --- one commit ----------------------------------------------------------------------------
    def worktree(self, commit: str) -> Path:
        path = (self.cache / "worktrees" / commit).resolve()
        if not (path / ".git").exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            r = subprocess.run(
                ["git", "worktree", "add", "--detach", "--force", str(path), commit],
                cwd=self.repo,
                capture_output=True,
                text=True,
            )
            if r.returncode != 0:
                raise RuntimeError(f"git worktree add {commit[:10]}: {r.stderr.strip()}")
        return path

    def built(self, c: CommitRuns) -> bool:
        if c.build != "not built":
            return c.build == "ok"
        wt = self.worktree(c.commit)
        # the build's outcome, kept per build command: another --build builds again
        key = hashlib.sha256((self.build_cmd or "").encode()).hexdigest()[:10]
        mark = wt / f"{BUILD_MARK}-{key}"
        if mark.exists():  # built before (by an earlier bisection): its outcome
            c.build, _, c.detail = mark.read_text().partition("\n")
        else:
            c.build, c.detail = "ok", ""
            if self.build_cmd:
                r = subprocess.run(
                    self.build_cmd, shell=True, cwd=wt, capture_output=True, text=True
                )  # the user's own build command, in the worktree
                if r.returncode != 0:
                    tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
                    c.build, c.detail = "failed", f"build exit {r.returncode}: {tail[0][:120]}"
            mark.write_text(f"{c.build}\n{c.detail}")
        if c.build == "ok" and self.session is not None:
            c.build, c.detail = self._artifacts(wt)
        if c.build != "ok":
            self.note(f"skip {c.commit[:10]}: {c.detail}")
        return c.build == "ok"

    def _artifacts(self, wt: Path) -> tuple[str, str]:
        """(ok | failed, detail): the session's [[push]] files are in the built worktree."""
        from harmony_ref.lab.session_spec import with_push_root

        spec = with_push_root(self.session, wt)
        for i, item in enumerate(spec.push):
            if not spec.local_path(item).is_file():
                return "failed", f"the build made no {item.local} (session push[{i}].local)"
        return "ok", ""

    def measure(self, c: CommitRuns) -> None:
        """One run of the command on commit `c`: its samples of the metric added."""
        from harmony_ref.lab.parsers import parse

        if self.total >= self.max_runs:
            raise _Budget()
        wt = self.worktree(c.commit)
        if self.session is not None:
            self._measure_session(c, wt)
            return
        r = subprocess.run(
            self.command, shell=True, cwd=wt, capture_output=True, text=True, timeout=self.timeout_s
        )
        self.total += 1
        if r.returncode != 0:
            raise RuntimeError(
                f"--command on {c.commit[:10]} exited {r.returncode}: "
                f"{(r.stderr or r.stdout).strip()[-200:]}"
            )
        self._add(c, parse(self.fmt, r.stdout).metrics)

    def _measure_session(self, c: CommitRuns, wt: Path) -> None:
        """One session run on the device with commit `c`'s artifacts (module docstring)."""
        from harmony_ref.backends.command import fill_template
        from harmony_ref.lab.parsers import parse
        from harmony_ref.lab.session import DeviceSession, session_values
        from harmony_ref.lab.session_spec import with_push_root

        spec = with_push_root(self.session, wt)
        cmd = fill_template(self.command, session_values(spec))
        result = DeviceSession(spec).run(cmd, lambda text: parse(self.fmt, text).metrics)
        self.total += len(result.measured)
        throttled = sum(r.verdict.throttled for r in result.measured)
        if throttled:
            self.note(
                f"{c.commit[:10]}: {throttled} of {len(result.measured)} repeats throttled, "
                "left out"
            )
        if not result.valid:  # every repeat throttled: nothing measured, run again
            return
        self._add(c, result.metrics(), result.to_record())

    def _add(self, c: CommitRuns, metrics, session: dict | None = None) -> None:
        """A run's metrics: the bisected metric's samples to commit `c`, the run to the history."""
        if self.metric not in metrics:
            raise ValueError(
                f"--metric {self.metric}: the command's {self.fmt} output has no such metric "
                f"(it has: {', '.join(metrics.names()[:8])})"
            )
        m = metrics[self.metric]
        self.unit, self.direction = m.unit, m.direction
        got = list(m.samples) or [m.value]
        c.samples += got
        c.runs += 1
        if self.history is not None:
            self.history.append(self._record(c.commit, metrics, session), None)

    def _record(self, commit: str, metrics, session: dict | None = None) -> dict:
        from harmony_ref.track.record import Record, collect_provenance

        prov = collect_provenance()
        prov["sut"] = {
            "repository": git_out(["remote", "get-url", "origin"], self.repo) or str(self.repo),
            "commit": commit,
            "describe": git_out(["describe", "--always", "--tags", commit], self.repo),
            "dirty": False,
        }
        cfg = {
            "model": self.model,
            "policy": "unspecified",
            "profile": (self.session.device.profile or "unspecified") if self.session else "host",
            "backend": "command",
            "scenario": {"prompt_tokens": 1, "new_tokens": 0, "context_tokens": 1, "batch": 1},
            "backend_options": {"command": self.command, "format": self.fmt, "bisect": True},
        }
        part = {"status": "ok", "detail": "bisect run", "metrics": metrics.names()}
        if session is not None:  # the device, pushes and per-repeat telemetry of the run
            part["session"] = session
        return Record(cfg, metrics, prov, {"bisect": part}).to_dict()

    def resume(self) -> int:
        """Take the runs the history already holds of these commits (same command and format)."""
        if self.history is None:
            return 0
        from harmony_ref.track.history import config_label

        label = config_label(self._record(self.good, _empty())["config"])
        n = 0
        for row in self.history.series(self.metric, config=label):
            c = self.runs.get(row.sut_commit or "")
            if c is not None:
                c.samples += list(row.samples) or [row.value]
                c.runs += 1
                self.unit, self.direction = row.unit, row.direction
                n += 1
        return n

    def at_least(self, c: CommitRuns, runs: int) -> None:
        while c.runs < runs:
            self.measure(c)

    # --- the search ----------------------------------------------------------------------------
    def _nearer_bad(self, c: CommitRuns, good: CommitRuns, bad: CommitRuns) -> bool:
        lg, lb, lc = (math.log(x.median) for x in (good, bad, c))
        return abs(lc - lb) < abs(lc - lg)

    def classify(self, c: CommitRuns, good: CommitRuns, bad: CommitRuns) -> bool:
        """True when commit `c` is on the bad side."""
        self.at_least(c, MIN_RUNS)
        while True:
            vg, vb = verdict(c.samples, good.samples), verdict(c.samples, bad.samples)
            if vg == "different" and vb == "same":
                return True
            if vb == "different" and vg == "same":
                return False
            if c.runs >= RUNS_CAP:  # still unknown: a guess, which the result names
                bad_side = self._nearer_bad(c, good, bad)
                self.placed.append((c.commit, "bad" if bad_side else "good"))
                return bad_side
            self.measure(c)
            for end in (good, bad):  # keep the ends at least as well measured
                if end.runs < c.runs:
                    self.measure(end)

    def _ends(self, good: CommitRuns, bad: CommitRuns) -> None:
        for end in (good, bad):
            if not self.built(end):
                raise ValueError(f"--{'good' if end is good else 'bad'}: {end.detail}")
            self.at_least(end, MIN_RUNS)
        # the ends are expected to differ: more runs until they do, or the cap says they do not
        while verdict(good.samples, bad.samples) != "different" and good.runs < ENDS_CAP:
            self.measure(good)
            self.measure(bad)
        p = _u_p(good.samples, bad.samples)
        worse = (bad.median > good.median) == (self.direction == "lower")
        if p > P_DIFFERENT or not worse or self.direction == "none":
            raise ValueError(
                f"--good/--bad: {self.metric} is not worse at --bad ({good.median:.4g} -> "
                f"{bad.median:.4g} {self.unit}, p = {p:.2g}): nothing to bisect"
            )

    def run(self) -> BisectResult:
        resumed = self.resume()
        if resumed:
            self.note(f"resumed {resumed} runs from the history")
        good, bad = self.runs[self.good], self.runs[self.bad]
        lo, hi = 0, len(self.commits) - 1
        skipped: list[CommitRuns] = []
        budget = False
        try:
            self._ends(good, bad)
            while hi - lo > 1:
                mid_f = (lo + hi) / 2
                left = [i for i in range(lo + 1, hi) if self.runs[self.commits[i]] not in skipped]
                if not left:
                    break
                mid = min(left, key=lambda i: (abs(i - mid_f), i))
                c = self.runs[self.commits[mid]]
                if not self.built(c):
                    skipped.append(c)
                    continue
                if self.classify(c, good, bad):
                    hi = mid
                else:
                    lo = mid
        except _Budget:
            budget = True
        p = _u_p(good.samples, bad.samples)  # over every run the ends got, not the first ones
        change, ci_lo, ci_hi = change_interval(good.samples, bad.samples)
        exact = hi - lo == 1 and not budget
        return BisectResult(
            self.metric,
            self.unit,
            self.direction,
            self.good,
            self.bad,
            self.commits[hi] if exact else None,
            self.commits[lo] if exact else None,
            (self.commits[lo], self.commits[hi]),
            change,
            (ci_lo, ci_hi),
            p,
            [c for c in self.runs.values() if c.runs],
            skipped,
            self.total,
            budget,
            list(self.placed),
        )


class _Budget(Exception):
    """--max-runs reached."""


def _empty():
    from harmony_ref.metrics import Metrics

    return Metrics()
