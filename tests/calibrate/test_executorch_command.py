"""`harmony-ref calibrate --backend executorch` end to end on tiny programs (a tiny llama exported
at int8 and 8da4w: the session's shared programs, tests/fixtures/executorch.py), timed for real by the executorch backend: the runtime profile written and
loading back, one row per phase of every workload with its split, the held-out error reported
for prefill and decode; bad workloads refused in one line before any run. The accuracy of the
fit is tested on synthetic and committed rows (test_executorch_fit.py): a tiny program's times
on a shared machine are mostly noise.

Needs the `executorch` extra: skipped, with that reason, where it is absent.
"""

from __future__ import annotations

import json

import pytest

from tests.fixtures.executorch import PTE_CONTEXT, needs_extra

needs_extra(module_level=True)

from harmony_ref.cli import main  # noqa: E402
from harmony_ref.device.runtime import load_runtime  # noqa: E402


@pytest.fixture(scope="module")
def programs(tiny_programs):
    """Two programs of one tiny Llama, int8 (weight-only) and w4a8-g32 (8da4w), each of
    PTE_CONTEXT positions: the session's shared exports (an export costs 10-30 s)."""
    return {policy: str(tiny_programs.path("llama", policy)) for policy in ("int8", "w4a8-g32")}


def test_fits_and_scores_the_held_out_workloads(programs, tmp_path, capsys):
    i8, w4 = programs["int8"], programs["w4a8-g32"]
    workloads = f"{i8}:8:4:1;{w4}:16:4:1;{i8}:24:8:2;{w4}:8:8:2"
    out = tmp_path / "et.toml"
    argv = ["calibrate", "--backend", "executorch", "--workloads", workloads]
    argv += ["--profile", "xeon-2core-kvm", "--params", "matmul,launch_us", "--repeats", "1"]
    assert main([*argv, "--out", str(out), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    rt = load_runtime(out)
    assert rt.name == "executorch-xnnpack" and rt.calibration is not None
    assert [r["split"] for r in s["rows"]] == ["fit"] * 4 + ["score"] * 2 + ["fit"] * 2
    assert {r["policy"] for r in s["rows"]} == {"int8", "w4a8-g32"}
    assert all(r["measured"] > 0 for r in s["rows"])
    held = {r["id"] for r in s["phases"] if r["split"] == "score"}
    assert held == set(rt.calibration.scored_on) and len(held) == 2
    assert s["held_out_prefill_mape_pct"] >= 0 and s["held_out_decode_mape_pct"] >= 0


def test_a_held_out_file_runs_beside_the_fit_workloads_and_is_only_scored(
    programs, tmp_path, capsys
):
    """--held-out FILE: its workloads (written down before they run) are timed in the same
    session as --workloads, every --workloads item is fitted and only the file's are scored."""
    i8, w4 = programs["int8"], programs["w4a8-g32"]
    held = tmp_path / "held.workloads"
    held.write_text(f"# written down before it ran\n{w4}:12:6:1\n")
    out = tmp_path / "et.toml"
    argv = ["calibrate", "--backend", "executorch", "--workloads", f"{i8}:8:4:1;{w4}:16:4:2"]
    argv += ["--held-out", str(held), "--profile", "xeon-2core-kvm", "--params", "matmul"]
    assert main([*argv, "--repeats", "1", "--out", str(out), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    splits = [(r["prompt_tokens"], r["split"]) for r in s["rows"]]
    assert {p for p, split in splits if split == "score"} == {12}, splits
    assert {p for p, split in splits if split == "fit"} == {8, 16}, splits
    held_ids = {r["id"] for r in s["phases"] if r["split"] == "score"}
    assert held_ids == set(load_runtime(out).calibration.scored_on) and len(held_ids) == 2


@pytest.mark.parametrize(
    "item, words",
    [
        ("x.gguf:8:4", "expected PROGRAM.pte:PROMPT:NEW[:THREADS]"),
        ("{int8}:8:x", "invalid literal"),
        ("{int8}:30:9", f"exceed the program's {PTE_CONTEXT} positions"),
        ("{int8}:8:4:-1", "threads -1 must be >= 0"),
        ("missing.pte:8:4", "no such file"),
    ],
)
def test_bad_workloads_are_refused_before_any_run(programs, tmp_path, capsys, item, words):
    good = f"{programs['int8']}:8:4"
    workloads = ";".join([item.format(**programs), good, good, good])
    argv = ["calibrate", "--backend", "executorch", "--workloads", workloads]
    assert main([*argv, "--out", str(tmp_path / "et.toml")]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "et.toml").exists()


def test_flags_of_other_backends_are_refused(programs, tmp_path, capsys):
    good = ";".join([f"{programs['int8']}:8:4"] * 4)
    argv = ["calibrate", "--backend", "executorch", "--workloads", good, "--parser", "llama-bench"]
    assert main([*argv, "--out", str(tmp_path / "et.toml")]) == 2
    assert "--parser does not apply to --backend executorch" in capsys.readouterr().err
