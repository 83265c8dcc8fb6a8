"""`harmony-ref bisect --session` through the fake phone (tests/fake_device): a repository whose
build makes the phone's `llama-bench` (its `speed=` line: 15% slower from a known commit on),
pushed by SHA-256 from each commit's worktree, one repeat throttled (capped and slow) in the
middle of the bisection and left out; bisect names the culprit. A commit whose build makes no
artifact is skipped. And a session file's [sut] section names the system under test of the
records `measure --session` writes (a checkout, or a repository and a commit); a bad one is one
line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harmony_ref.cli import main
from harmony_ref.track.history import open_history
from tests.fake_device.fakephone import toml_dumps
from tests.lab.test_session import hdc_phone, phones  # noqa: F401
from tests.track.history_demo import commit_series

COMMITS = 10
STEP_AT = 6  # the first commit whose llama-bench runs at 0.85 of the phone's speed
NO_ARTIFACT = 4  # its build makes no build/llama-bench (the first midpoint tried)
BUILD = "mkdir -p build && sh build.sh"
CAP_ON_RUN = 14  # the phone's 14th benchmark run: capped at 0.6 and that slow
HOWTO = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "find-the-commit.md"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("phone-bisect") / "bench"

    def files(i):
        target = "build/other" if i == NO_ARTIFACT else "build/llama-bench"
        speed = 0.85 if i >= STEP_AT else 1.0
        return {
            "llama-bench.src": f"#!fake llama-bench {i}\nspeed={speed}\n",
            "build.sh": f"cp llama-bench.src {target}\n",
        }

    hashes = commit_series(root, COMMITS, files)
    return root, hashes


def session_file(phone, tmp_path, **sections):
    """A session pushing the worktree's build/llama-bench and a fixed model (absolute path)."""
    doc = phone.session_doc(tmp_path / "files", **sections)
    model = doc["push"][1]["local"]
    doc["push"] = [
        {"local": "build/llama-bench", "remote": "llama-bench", "executable": True},
        {"local": model, "remote": "model.gguf"},
    ]
    doc["device"]["work_dir"] = f"/data/local/tmp/{tmp_path.name}"
    doc["benchmark"] = {
        "command": "{work_dir}/llama-bench -m {work_dir}/model.gguf -p 16 -n 128 -r 1 -o json",
        "format": "llama-bench",
        "timeout_s": 30.0,
        "warmup_runs": 0,
        "repeats": 2,
        "min_valid_repeats": 1,
    }
    path = tmp_path / "phone.toml"
    path.write_text(toml_dumps(doc))
    return path


def test_bisect_through_a_phone_names_the_culprit_past_a_throttled_repeat(
    repo,
    hdc_phone,  # noqa: F811
    tmp_path,
    capsys,
):
    root, hashes = repo
    hdc_phone.reconfigure(faults={"cap_on_run": CAP_ON_RUN}, die_c=30.0, skin_c=30.0)
    runs0 = hdc_phone.state()["runs"]
    assert runs0 == 0  # the fault counts from the reload
    session = session_file(hdc_phone, tmp_path)
    history = tmp_path / "history.sqlite"
    argv = ["bisect", "--repo", str(root), "--good", hashes[0], "--bad", hashes[-1]]
    argv += ["--build", BUILD, "--session", str(session), "--metric", "decode_tokens_per_s"]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--history", str(history)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    # docs/how-to/find-the-commit.md pastes this output (fixed commit dates, a simulated phone)
    text = HOWTO.read_text()
    block = text[text.index("<!-- bisect-session-output -->") :].split("```text\n", 1)[1]
    assert captured.out == block.split("```", 1)[0]
    assert "1 of 2 repeats throttled, left out" in captured.err
    # again as JSON: every run is in the history, so nothing runs and the answer is the same
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total_runs"] == 0
    assert out["first_bad"] == hashes[STEP_AT] and out["parent"] == hashes[STEP_AT - 1]
    assert -17 < out["change_pct"] < -13  # 0.85 of the speed
    assert [s["commit"] for s in out["skipped"]] == [hashes[NO_ARTIFACT]]
    assert (
        "the build made no build/llama-bench (session push[0].local)"
        in (out["skipped"][0]["reason"])
    )
    assert hdc_phone.state()["runs"] >= CAP_ON_RUN  # the throttled repeat happened
    # every commit's level is the good or the bad one: the slow, throttled repeat is in none
    good = next(m["median"] for m in out["measured"] if m["commit"] == hashes[0])
    for m in out["measured"]:
        ratio = m["median"] / good
        assert abs(ratio - 1) < 0.02 or abs(ratio - 0.85) < 0.02, m
    # each commit's artifact pushed by SHA-256: the phone holds the last one measured
    h = open_history(str(history))
    try:
        rows = h.series("decode_tokens_per_s")
    finally:
        h.close()
    assert {r.sut_commit for r in rows} <= set(hashes) and len(rows) == sum(
        m["runs"] for m in out["measured"]
    )


def test_bisect_session_without_a_command_or_with_a_bad_one_is_exit_2(
    repo,
    hdc_phone,  # noqa: F811
    tmp_path,
    capsys,
):
    root, hashes = repo
    session = session_file(hdc_phone, tmp_path)
    base = ["bisect", "--repo", str(root), "--good", hashes[0], "--bad", hashes[-1]]
    base += ["--metric", "decode_tokens_per_s", "--cache-dir", str(tmp_path / "cache")]
    assert main([*base, "--parser", "llama-bench"]) == 2
    assert "--command: missing" in capsys.readouterr().err
    assert main([*base, "--session", str(session), "--command", "{nothing} -x"]) == 2
    line = capsys.readouterr().err.strip()
    assert "{nothing}" in line and len(line) < 200 and "\n" not in line
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("kind", ["dir", "explicit"])
def test_a_session_sut_section_names_the_system_under_test(
    repo,
    hdc_phone,  # noqa: F811
    tmp_path,
    capsys,
    kind,
):
    root, hashes = repo
    hdc_phone.reconfigure(faults={}, die_c=30.0, skin_c=30.0)
    sut = (
        {"dir": str(root)}
        if kind == "dir"
        else {"repository": "https://example.com/fork.git", "commit": hashes[2]}
    )
    doc = hdc_phone.session_doc(
        tmp_path / "files",
        benchmark={"repeats": 1, "warmup_runs": 0},
        device={"work_dir": f"/data/local/tmp/{tmp_path.name}"},
        sut=sut,
    )
    (tmp_path / "phone.toml").write_text(toml_dumps(doc))
    runs = tmp_path / "runs"
    argv = ["measure", "--session", str(tmp_path / "phone.toml"), "--out-dir", str(runs)]
    assert main(argv) == 0, capsys.readouterr().err
    (record,) = runs.glob("run-*.json")
    got = json.loads(record.read_text())["provenance"]["sut"]
    if kind == "dir":
        assert got["commit"] == hashes[-1] and got["repository"] == str(root)
        assert got["dirty"] is False
    else:
        assert got == {
            "repository": "https://example.com/fork.git",
            "commit": hashes[2],
            "describe": hashes[2][:12],
            "dirty": None,
        }


@pytest.mark.parametrize(
    "sut, message",
    [
        ({"dir": ".", "commit": "abcdef1"}, "field 'sut.dir' = '.': give a dir or a repository"),
        ({"repository": "x"}, "field 'sut.commit' = '': sut.repository and sut.commit go"),
        ({"repository": "x", "commit": "main"}, "field 'sut.commit' = 'main': must be a git"),
        ({"dir": "no-such-dir"}, "field 'sut.dir' ="),
    ],
)
def test_a_bad_sut_section_is_one_line_exit_2(hdc_phone, tmp_path, capsys, sut, message):  # noqa: F811
    doc = hdc_phone.session_doc(tmp_path / "files", sut=sut)
    (tmp_path / "phone.toml").write_text(toml_dumps(doc))
    runs = tmp_path / "runs"
    argv = ["measure", "--session", str(tmp_path / "phone.toml"), "--out-dir", str(runs)]
    assert main(argv) == 2
    line = capsys.readouterr().err.strip()
    assert message in line and "\n" not in line and len(line) < 200, line
    assert not runs.exists()
