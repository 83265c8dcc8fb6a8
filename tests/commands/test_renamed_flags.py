"""Issue 46 item 3: `--format` named four things; where it did not name a file format it has a
name of its own (`--style`, `--parser`, `--weight-format`), and the old spelling is still
accepted for one release with one deprecation line on stderr after the command has run. Both
spellings parse to the same value; a bad-input error stays one line and names the spelling given;
`export --format` (a file format) is not renamed."""

import json
import shlex
import sys
from pathlib import Path

import pytest

from harmony_ref.cli import build_parser, main
from harmony_ref.commands._args import spelled

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "device_outputs" / "llama_bench.json"
CAT = f"{shlex.quote(sys.executable)} -c 'import sys; sys.stdout.write(open(sys.argv[1]).read())'"

# command, new flag, its dest, a value, the other arguments the command requires
RENAMED = [
    ("compare", "--style", "style", "md", []),
    ("pick", "--style", "style", "csv", ["--sweep", "s"]),
    (
        "bisect",
        "--parser",
        "parser",
        "llama-bench",
        ["--repo", ".", "--good", "a", "--bad", "b", "--build", "x", "--command", "y"]
        + ["--metric", "ttft_ms"],
    ),
    ("calibrate", "--parser", "parser", "llama-bench", []),
    ("check-runtime", "--parser", "parser", "mslite", []),
    ("measure", "--parser", "parser", "tflite", []),
    ("sensitivity", "--weight-format", "weight_format", "int8", []),
]


def _parse(command, argv):
    return build_parser(commands=[command]).parse_args([command, *argv])


@pytest.mark.parametrize("command,new,dest,value,rest", RENAMED)
def test_both_spellings_parse_to_the_same_value_and_only_the_old_one_is_noted(
    command, new, dest, value, rest
):
    by_new = _parse(command, [*rest, new, value])
    by_old = _parse(command, [*rest, "--format", value])
    assert getattr(by_new, dest) == getattr(by_old, dest) == value
    assert getattr(by_new, "_deprecated", []) == []
    assert by_old._deprecated == [f"--format is deprecated here: use {new}"]
    assert spelled(by_new, dest, new) == new and spelled(by_old, dest, new) == "--format"
    if command != "bisect":  # bisect requires its parser
        assert spelled(_parse(command, rest), dest, new) == new  # not given: the new name


def test_export_keeps_format_a_file_format():
    args = _parse("export", ["--policy", "q8_0", "--format", "gguf"])
    assert args.format == "gguf" and getattr(args, "_deprecated", []) == []


def _bench(tmp_path):
    out = tmp_path / "out.json"
    out.write_text(FIXTURE.read_text())
    return f"{CAT} {out}"


def test_measure_parser_and_its_old_spelling_measure_the_same(tmp_path, capsys):
    argv = ["measure", "--command", _bench(tmp_path), "--json"]
    assert main([*argv, "--parser", "llama-bench"]) == 0
    new = capsys.readouterr()
    assert main([*argv, "--format", "llama-bench"]) == 0
    old = capsys.readouterr()
    values = [{k: v["value"] for k, v in json.loads(o.out)["metrics"].items()} for o in (new, old)]
    assert values[0] == values[1] and "decode_tokens_per_s" in values[0]
    assert "deprecated" not in new.err
    assert old.err.strip().splitlines()[-1] == (
        "harmony-ref measure: --format is deprecated here: use --parser"
    )


def test_compare_style_and_its_old_spelling_print_the_same_table(capsys):
    argv = ["compare", "--profiles", "harmony-flagship,harmony-lowend", "--model", "llama-3.2-1b"]
    assert main([*argv, "--style", "csv"]) == 0
    new = capsys.readouterr()
    assert main([*argv, "--format", "csv"]) == 0
    old = capsys.readouterr()
    assert new.out == old.out and "ttft_ms" in new.out
    assert "deprecated" not in new.err
    assert "harmony-ref compare: --format is deprecated here: use --style" in old.err


@pytest.mark.parametrize("flag", ["--weight-format", "--format"])
def test_a_bad_weight_format_is_one_line_naming_the_spelling_given(capsys, flag):
    assert main(["sensitivity", flag, "int3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err and "int3" in err, err
    assert "deprecated" not in err  # the bad input is the one line


@pytest.mark.parametrize("flag", ["--parser", "--format"])
def test_check_runtime_names_the_parser_flag_as_given(tmp_path, capsys, flag):
    corpus = tmp_path / "c.txt"
    corpus.write_text("some text\n")
    argv = ["check-runtime", flag, "mslite", "--command", "true", "--corpus", str(corpus)]
    assert main([*argv, "--out-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"applies to {flag} llama-perplexity only (got {flag} mslite)" in err
    assert len(err.splitlines()) == 1
