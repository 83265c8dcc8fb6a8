"""docs/how-to/benchmark-phone.md's "Without a phone" commands, run as the page gives them (the
fake phone's folder moved into a temporary one): `fakephone.py` writes the session the page
describes (warm-up 1, repeats 5, the fake's workload as model and policy), `devices` lists the
phone, and `measure` prints the page's runs line and rows: run, throttled and decode speed as
shown, temperatures and cooldown within 2% (the fake's polls follow this host's timing)."""

import contextlib
import io
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harmony_ref.cli import main
from tests.fake_device.fakephone import FakePhone

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "how-to" / "benchmark-phone.md"


def _section() -> tuple[list[list[str]], str]:
    """(the commands, without comments; the output block after them)."""
    text = PAGE.read_text().split("**Without a phone.**", 1)[1]
    commands, after = text.split("```sh\n", 1)[1].split("```\n", 1)
    argvs = [shlex.split(line, comments=True) for line in commands.splitlines() if line.strip()]
    output = after.split("```\n", 1)[1].split("```", 1)[0]  # the next block
    return argvs, output


def _cells(line: str) -> list[str]:
    """A table row's cells (body rows between │, rich's header row between ┃)."""
    line = line.strip().replace("┃", "│")
    return [c.strip() for c in line.strip("│").split("│")]


def _number(cell: str) -> float | None:
    try:
        return float(cell.replace(",", "").rstrip("%"))
    except ValueError:
        return None


def test_the_pages_fake_phone_commands_print_what_it_shows(tmp_path, monkeypatch):
    argvs, shown = _section()
    assert [a[0] for a in argvs] == ["python", "harmony-ref", "harmony-ref"]
    folder = tmp_path / "fake"
    argvs = [[a.replace("/tmp/fake", str(folder)) for a in argv] for argv in argvs]
    monkeypatch.chdir(tmp_path)
    make = argvs[0]
    assert make[1] == "tests/fake_device/fakephone.py"
    subprocess.run([sys.executable, str(ROOT / make[1]), *make[2:]], check=True, timeout=60)
    phone = FakePhone(folder / "phone", "hdc", "FMR0223C13000649")
    try:
        printed = ""
        for argv in argvs[1:]:
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                assert main(argv[1:]) == 0, argv
            printed += out.getvalue()
    finally:
        phone.stop()
    session = (folder / "hdc-phone.toml").read_text()
    for line in ("warmup_runs = 1", "repeats = 5", 'model = "llama-3.2-1b"'):
        assert line in session, line
    lines = shown.splitlines()
    assert _cells(lines[0])[:5] == [
        "hdc",
        "FMR0223C13000649",
        "Connected",
        "ALN-AL00",
        "kirin9000s",
    ]
    assert "│ hdc " in printed and "FMR0223C13000649" in printed
    runs_line = next(line for line in lines if line.startswith("runs:"))
    assert runs_line in printed
    header = _cells(next(line for line in lines if line.startswith("│ run ")))
    rows = {
        _cells(line)[0]: _cells(line)
        for line in printed.splitlines()
        if line.startswith(("│", "┃"))
    }
    printed_header = rows["run"]
    for line in lines:
        if not line.startswith("│ ") or line.startswith(("│ run ", "│ hdc ")):
            continue
        cells = _cells(line)
        got = rows[cells[0]]
        for name, want in zip(header, cells):
            have = got[printed_header.index(name)]
            a, b = _number(want), _number(have)
            if a is None or name in ("decode_tokens_per_s",):
                assert have == want, (cells[0], name, want, have)
            else:
                assert b == pytest.approx(a, rel=0.02, abs=0.5), (cells[0], name, want, have)
