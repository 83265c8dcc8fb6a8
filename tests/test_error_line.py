"""`_format.error_line`: every bad-input error the CLI prints is one line under 200 characters,
whatever the message's paths, lists and line breaks, shortened a step at a time so that the file,
the field and the verdict stay; and a real one (predict on a truncated GGUF under a deep
temporary folder, which once printed 207 characters) keeps its file and its verdict."""

import os

from harmony_ref._format import ERROR_LINE_MAX_CHARS, error_line
from harmony_ref.cli import main

DEEP = "/tmp/pytest-of-root/pytest-37/popen-gw0/predict0/"


def test_a_line_that_fits_is_unchanged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    msg = f"{tmp_path}/x.json: field 'metric' = 'y': unknown"
    assert error_line("gate", msg) == f"harmony-ref gate: error: {msg}"


def test_line_breaks_become_one_line():
    line = error_line("run", "first\n\n  second  \nthird")
    assert line == "harmony-ref run: error: first; second; third"


def test_too_long_paths_under_the_working_directory_become_relative(tmp_path, monkeypatch):
    deep = tmp_path.joinpath(*["folder"] * 20)
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep.parent)
    line = error_line("run", f"{deep}/m.gguf: no such GGUF file")
    assert line == "harmony-ref run: error: folder/m.gguf: no such GGUF file"


def test_a_deep_path_keeps_its_first_folder_and_last_two_parts():
    path = DEEP + "d" * 60 + "/m.gguf"
    detail = "y" * 40
    line = error_line("predict", f"{path}: not a readable GGUF file (truncated?): {detail}")
    assert line == (
        f"harmony-ref predict: error: /tmp/.../{'d' * 60}/m.gguf: not a readable GGUF file "
        f"(truncated?): {detail}"
    )


def test_then_paths_keep_their_name_then_lists_their_first_items():
    msg = f"{DEEP}{'d' * 60}/p.toml: unknown field 'bogus' (did you mean 'bogs'?); allowed: "
    line = error_line("predict", msg + str([f"field_{i}" for i in range(30)]))
    assert line == (
        "harmony-ref predict: error: .../p.toml: unknown field 'bogus' (did you mean 'bogs'?); "
        "allowed: ['field_0', 'field_1', 'field_2', ...]"
    )


def test_what_is_still_too_long_is_cut_at_the_end():
    line = error_line(
        "measure", "llama-perplexity: expected 'Final estimate'; output: " + "z" * 300
    )
    assert len(line) == ERROR_LINE_MAX_CHARS < 200 and line.endswith("zzz...")
    assert line.startswith("harmony-ref measure: error: llama-perplexity: expected 'Final")


def test_a_truncated_gguf_under_a_deep_directory_is_one_short_line(tmp_path, capsys):
    deep = tmp_path.joinpath(*["a-rather-long-directory-name"] * 4)
    deep.mkdir(parents=True)
    bad = deep / "truncated.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(60))
    assert main(["predict", "--model", str(bad), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and len(err.rstrip("\n")) < 200, err
    assert err.startswith("harmony-ref predict: error: ")
    assert "/truncated.gguf: not a readable GGUF file" in err
