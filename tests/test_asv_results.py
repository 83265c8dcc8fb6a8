"""Committed asv results (results/asv/<machine>/) are results asv can draw.

asv publish plots each branch of asv.conf.json along `git rev-list --first-parent <branch>`; a
result for a commit off that line (a merge's second parent, a topic branch) is stored but never
drawn, and the machine's graphs stay empty. So every committed result file must name a commit on
main's first-parent history, sit in a directory with its machine.json, and describe that
machine. README "asv" says how to add a machine's results.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONF = json.loads((ROOT / "asv.conf.json").read_text())
RESULTS = ROOT / CONF["results_dir"]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def first_parent_commits() -> set[str]:
    if _git("rev-parse", "--is-shallow-repository") == "true":
        pytest.fail("shallow clone: asv needs the whole history (git fetch --unshallow)")
    out = set()
    for branch in CONF["branches"]:
        if subprocess.run(["git", "rev-parse", "--verify", "-q", branch], cwd=ROOT,
                          capture_output=True).returncode != 0:
            pytest.fail(f"asv.conf.json branch {branch!r} is not in this clone")
        out |= set(_git("rev-list", "--first-parent", branch).split())
    return out


def result_files() -> list[Path]:
    return sorted(p for p in RESULTS.glob("*/*.json") if p.name != "machine.json")


def test_there_are_committed_results():
    assert result_files(), f"no asv results under {RESULTS}"


@pytest.mark.parametrize("path", result_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_result_names_a_commit_on_mains_first_parent_history(path):
    data = json.loads(path.read_text())
    commit = data["commit_hash"]
    assert path.name.startswith(commit[:8] + "-"), f"{path.name} holds a result of {commit}"
    on_line = first_parent_commits()
    assert commit in on_line, (
        f"{path.relative_to(ROOT)}: {commit[:8]} is not on the first-parent history of "
        f"{', '.join(CONF['branches'])}, so asv never draws it; run `asv run` on commits of "
        "`git rev-list --first-parent main` (README, asv)")
    machine = json.loads((path.parent / "machine.json").read_text())
    assert machine["machine"] == path.parent.name == data["params"]["machine"]
    for key in ("arch", "cpu", "num_cpu", "os", "ram"):
        assert machine.get(key) == data["params"].get(key), f"{path.name}: {key} differs from machine.json"


def test_the_check_knows_an_off_line_commit():
    """e42c01f7 (once committed here) is the second parent of merge e2d8df0: never drawn."""
    assert "e42c01f7fb55581bb5eae76c7f9fa367e0d14b23" not in first_parent_commits()
