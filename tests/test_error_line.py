"""`_format.error_line`: every bad-input error the CLI prints is one line under 200 characters,
whatever the message's paths and line breaks; and a real one (predict on a truncated GGUF under a
deep temporary directory, which once printed 207 characters) keeps its file and its verdict."""

import os

from harmony_ref._format import ERROR_LINE_MAX_CHARS, error_line
from harmony_ref.cli import main


def test_short_message_is_unchanged():
    assert error_line("gate", "x.json: field 'metric' = 'y': unknown") == (
        "harmony-ref gate: error: x.json: field 'metric' = 'y': unknown"
    )


def test_line_breaks_become_one_line(tmp_path):
    line = error_line("run", "first\n\n  second  \nthird")
    assert line == "harmony-ref run: error: first; second; third"


def test_a_deep_path_keeps_its_first_folder_and_last_two_parts():
    path = "/tmp/pytest-of-root/pytest-37/popen-gw0/predict0/" + "d" * 60 + "/m.gguf"
    line = error_line(
        "predict", f"{path}: not a readable GGUF file (truncated or corrupt?): {'y' * 40}"
    )
    assert line == (
        "harmony-ref predict: error: /tmp/.../" + "d" * 60 + "/m.gguf: not a readable GGUF file "
        "(truncated or corrupt?): " + "y" * 40
    )


def test_paths_under_the_working_directory_are_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = error_line("run", f"{tmp_path}/sub/m.gguf: no such GGUF file")
    assert line == "harmony-ref run: error: sub/m.gguf: no such GGUF file"


def test_long_message_keeps_both_ends_under_200():
    path = "/tmp/" + "/".join(["deep-directory"] * 12) + "/m.gguf"
    msg = f"{path}: not a readable GGUF file: ValueError: {'x' * 150} (is it a GGUF?)"
    line = error_line("predict", msg)
    assert len(line) == ERROR_LINE_MAX_CHARS < 200
    assert line.startswith("harmony-ref predict: error: /tmp/.../deep-directory/m.gguf: not a")
    assert line.endswith("(is it a GGUF?)") and "x..." in line


def test_a_truncated_gguf_under_a_deep_directory_is_one_short_line(tmp_path, capsys):
    deep = tmp_path.joinpath(*["a-rather-long-directory-name"] * 4)
    deep.mkdir(parents=True)
    bad = deep / "truncated.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(60))
    assert main(["predict", "--model", str(bad), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and len(err.rstrip("\n")) < 200, err
    assert err.startswith("harmony-ref predict: error: /tmp/.../a-rather-long-directory-name/")
    assert "truncated.gguf: not a readable GGUF file" in err
