"""Every command's `--json` is JSON a strict parser reads: no NaN, Infinity or -Infinity (which
Python's json writes by default and no other parser accepts), one document on stdout, nothing
else there. One cheap real invocation per command; a command added to the CLI without a case
here fails `test_every_command_is_covered`."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import pytest

from harmony_ref.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
FAKE = FIXTURES.parent / "fake_device"


def strict_loads(text: str):
    """json.loads that refuses the non-standard constants NaN, Infinity and -Infinity."""

    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def _cat(path: Path) -> str:
    """A shell command that prints `path` (a benchmark's recorded output)."""
    code = "'import sys; sys.stdout.write(open(sys.argv[1]).read())'"
    return f"{shlex.quote(sys.executable)} -c {code} {shlex.quote(str(path))}"


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    """A run record with no parts run (for gate)."""
    from harmony_ref.job import main as job

    out = tmp_path_factory.mktemp("runs")
    assert main(["run", "--skip", ",".join(job.part_names()), "--out-dir", str(out)]) == 0
    return next(out.glob("run-*.json"))


def _sweep_dir(tmp: Path) -> Path:
    out = tmp / "sweeps"
    assert (
        main(
            [
                "sweep",
                "--name",
                "s",
                "--models",
                "qwen2.5-0.5b",
                "--policies",
                "int8",
                "--profiles",
                "harmony-midrange",
                "--parts",
                "predicted",
                "--workers",
                "0",
                "--out-dir",
                str(out),
            ]
        )
        == 0
    )
    return out


def _exported(tmp: Path) -> str:
    path = tmp / "a.safetensors"
    assert main(["export", "--policy", "int8", str(path)]) == 0
    return str(path)


# command -> (argv after the command, given tmp_path, tiny_gguf and a record; exit codes allowed)
def _bisect_args(t: Path) -> list[str]:
    """A two-commit repository whose second commit is 20% slower (a noisy program)."""
    from tests.track.history_demo import git

    repo = t / "prog"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i, level in enumerate((50.0, 60.0)):
        (repo / "prog.py").write_text(
            "import json, os, random\n"
            "n = int(open('.n').read()) if os.path.exists('.n') else 0\n"
            "open('.n', 'w').write(str(n + 1))\n"
            f"v = {level} * (1 + 0.02 * random.Random(n).uniform(-1, 1))\n"
            "print(json.dumps({'prompt_tokens': 8, 'new_tokens': 0, 'ttft_ms': v,\n"
            "    'prefill_tokens_per_s': 1000.0, 'decode_tokens_per_s': 1.0, 'decode_steps': 0}))\n"
        )
        git(repo, "add", "prog.py")
        git(repo, "commit", "-q", "-m", f"c{i}", date=i)
    return [
        "--repo", str(repo), "--good", "HEAD~1", "--bad", "HEAD",
        "--command", f"{sys.executable} prog.py", "--format", "harmony-ref-generate",
        "--metric", "ttft_ms", "--cache-dir", str(t / "cache"), "--history", str(t / "h.sqlite"),
    ]  # fmt: skip


CASES = {
    "accuracy": (
        lambda t, g, r: ["--model", str(g), "--policy", "int8", "--context", "32", "--chunks", "1"],
        {0},
    ),
    "calibrate": (
        lambda t, g, r: [
            "--backend",
            "host",
            "--method",
            "microbench",
            "--quick",
            "--repeats",
            "2",
            "--no-e2e",
            "--out",
            str(t / "host.toml"),
        ],
        {0},
    ),
    "check-ops": (lambda t, g, r: ["--profile", "harmony-lowend"], {0, 1}),
    "check-runtime": (
        lambda t, g, r: [
            "--format",
            "mslite",
            "--model",
            "m.ms",
            "--command",
            _cat(FIXTURES / "device_outputs" / "mslite_cosine.txt"),
            "--out-dir",
            str(t / "runs"),
        ],
        {0},
    ),
    "coldstart": (lambda t, g, r: [], {0}),
    "compare": (lambda t, g, r: [], {0}),
    "devices": (lambda t, g, r: ["--transport", "local"], {0}),
    "export": (lambda t, g, r: ["--policy", "int8", str(t / "a.safetensors")], {0}),
    "fidelity": (lambda t, g, r: ["--sets", "phones"], {0}),
    "gate": (lambda t, g, r: ["--baseline", str(r), "--current", str(r)], {0}),
    "generate": (
        lambda t, g, r: ["--model", str(g), "--policy", "int8", "--prompt", "hi", "--max-new", "2"],
        {0},
    ),
    "bisect": (lambda t, g, r: _bisect_args(t), {0}),
    "history": (lambda t, g, r: ["import", str(r), "--history", str(t / "h.sqlite")], {0}),
    "lifecycle": (lambda t, g, r: ["--model", "qwen2.5-0.5b", "--entries", "4"], {0, 1}),
    "measure": (
        lambda t, g, r: [
            "--command",
            _cat(FIXTURES / "device_outputs" / "llama_bench.json"),
            "--format",
            "llama-bench",
        ],
        {0},
    ),
    "pick": (lambda t, g, r: ["--sweep", "s", "--out-dir", str(_sweep_dir(t))], {0}),
    "plan": (
        lambda t, g, r: [
            "--model",
            str(g),
            "--budget-mb",
            "1",
            "--context",
            "32",
            "--chunks",
            "1",
            "--out",
            str(t / "plan.toml"),
        ],
        {0},
    ),
    "predict": (lambda t, g, r: ["--breakdown"], {0}),
    "profiles": (lambda t, g, r: [], {0}),
    "quantize-report": (lambda t, g, r: ["--rows", "8", "--cols", "256"], {0}),
    "run": (lambda t, g, r: ["--skip", "host,accuracy,fidelity", "--out-dir", str(t)], {0}),
    "sensitivity": (lambda t, g, r: ["--model", str(g), "--context", "32", "--chunks", "1"], {0}),
    "serve": (lambda t, g, r: ["--rate", "0.2", "--minutes", "2"], {0}),
    "sweep": (
        lambda t, g, r: [
            "--name",
            "x",
            "--models",
            "qwen2.5-0.5b",
            "--policies",
            "int8",
            "--profiles",
            "harmony-midrange",
            "--parts",
            "predicted,coldstart",
            "--workers",
            "0",
            "--out-dir",
            str(t),
        ],
        {0},
    ),
    "thermal": (lambda t, g, r: ["--minutes", "3"], {0}),
    "tokenize": (lambda t, g, r: ["--model", str(g), "--text", "the 12"], {0}),
    "verify": (lambda t, g, r: [_exported(t)], {0}),
}


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_command_is_covered_and_has_json():
    commands = _commands()
    assert sorted(commands) == sorted(CASES)
    for name, sub in commands.items():
        assert "--json" in sub._option_string_actions, f"{name} has no --json"


def test_the_strict_parser_refuses_what_python_writes_by_default():
    with pytest.raises(ValueError, match="NaN"):
        strict_loads(json.dumps({"x": float("nan")}))
    with pytest.raises(ValueError, match="Infinity"):
        strict_loads(json.dumps([float("-inf")]))


@pytest.mark.parametrize("command", sorted(CASES))
def test_json_output_is_strict_json(command, tmp_path, tiny_gguf, record, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv, codes = CASES[command]
    args = [command, *argv(tmp_path, tiny_gguf, record), "--json"]
    capsys.readouterr()
    code = main(args)
    out = capsys.readouterr().out
    assert code in codes, (args, out[-2000:])
    doc = strict_loads(out)
    assert isinstance(doc, (dict, list)) and doc, args
