"""Committed asv results (results/asv/<machine>/) are results asv can draw.

asv publish plots each branch of asv.conf.json along `git rev-list --first-parent <branch>`; a
result for a commit off that line (a merge's second parent, a topic branch) is stored but never
drawn, and the machine's graphs stay empty. So every committed result file must name a commit on
main's first-parent history, sit in a directory with its machine.json, and describe that
machine. README "asv" says how to add a machine's results.

asv also draws a result only where its benchmark version (asv_runner: the SHA-256 of the source
text of the benchmark, its setup and setup_cache) equals the version in
results/asv/benchmarks.json, which every `asv run` rewrites from the benchmark suite of the
working tree: results of two suites do not mix (a result of an older suite is stored, but its
points vanish from every graph).
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
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def first_parent_commits() -> set[str]:
    if _git("rev-parse", "--is-shallow-repository") == "true":
        pytest.fail("shallow clone: asv needs the whole history (git fetch --unshallow)")
    out = set()
    for branch in CONF["branches"]:
        if (
            subprocess.run(
                ["git", "rev-parse", "--verify", "-q", branch], cwd=ROOT, capture_output=True
            ).returncode
            != 0
        ):
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
        "`git rev-list --first-parent main` (README, asv)"
    )
    machine = json.loads((path.parent / "machine.json").read_text())
    assert machine["machine"] == path.parent.name == data["params"]["machine"]
    for key in ("arch", "cpu", "num_cpu", "os", "ram"):
        assert machine.get(key) == data["params"].get(key), (
            f"{path.name}: {key} differs from machine.json"
        )


@pytest.mark.parametrize(
    "machine", sorted(RESULTS.glob("*/machine.json")), ids=lambda p: p.parent.name
)
def test_each_machine_json_describes_its_hardware(machine):
    """A machine made by `asv machine --machine NAME --yes` holds its name alone (asv 0.6 keeps
    only the fields that differ from what it detects), and the report then says nothing of the
    hardware; docs/how-to/asv.md says to run `asv machine` at a console instead."""
    data = json.loads(machine.read_text())
    for key in ("arch", "cpu", "num_cpu", "os", "ram"):
        assert data.get(key), f"{machine.relative_to(ROOT)} has no {key}: see docs/how-to/asv.md"


def test_the_check_knows_an_off_line_commit():
    """e42c01f7 (once committed here) is the second parent of merge e2d8df0: never drawn."""
    assert "e42c01f7fb55581bb5eae76c7f9fa367e0d14b23" not in first_parent_commits()


def hidden_results(results_dir: Path) -> dict[str, list[str]]:
    """Result file -> the benchmarks asv publish skips in it because their version differs from
    the one in results_dir/benchmarks.json (asv.results.Results.get_result_keys)."""
    suite = json.loads((results_dir / "benchmarks.json").read_text())
    out = {}
    for path in sorted(p for p in results_dir.glob("*/*.json") if p.name != "machine.json"):
        data = json.loads(path.read_text())
        column = data["result_columns"].index("version")
        versions = {k: row[column] for k, row in data["results"].items()}
        stale = sorted(
            k
            for k, v in versions.items()
            if k in suite and v is not None and v != suite[k].get("version")
        )
        if stale:
            out[f"{path.parent.name}/{path.name}"] = stale
    return out


def test_every_committed_result_has_the_benchmark_versions_asv_draws():
    hidden = hidden_results(RESULTS)
    assert not hidden, (
        "results of another benchmark suite than results/asv/benchmarks.json (asv draws none of "
        f"these points): {', '.join(f'{f}: {len(ks)} benchmarks' for f, ks in hidden.items())}; "
        "re-run those commits with the current suite (README, asv)"
    )


def test_the_version_check_sees_a_result_of_another_suite(tmp_path):
    """A result whose version of a benchmark differs from benchmarks.json is reported."""
    (tmp_path / "m").mkdir()
    (tmp_path / "benchmarks.json").write_text(
        json.dumps(
            {"b.C.track_x": {"version": "new"}, "b.C.track_y": {"version": "same"}, "version": 2}
        )
    )
    (tmp_path / "m" / "machine.json").write_text("{}")
    (tmp_path / "m" / "abcd1234-env.json").write_text(
        json.dumps(
            {
                "result_columns": ["result", "version"],
                "results": {"b.C.track_x": [[1.0], "old"], "b.C.track_y": [[1.0], "same"]},
            }
        )
    )
    assert hidden_results(tmp_path) == {"m/abcd1234-env.json": ["b.C.track_x"]}
