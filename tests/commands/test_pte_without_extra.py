"""A .pte handed to `run`, `accuracy` or `check-runtime` where the executorch extra is missing:
one line naming the --model file and what is missing, exit 2, nothing run. The extra's absence
is real here (torch's import fails, as in the default install); where the extra is installed
the test hides it (sys.modules["torch"] = None), so it runs in both environments."""

from __future__ import annotations

import hashlib
import json
import sys

import pytest

from harmony_ref.cli import main
from harmony_ref.runtime.pte import MANIFEST_SUFFIX, PTE_FORMAT_VERSION, PTE_MAGIC
from tests.fixtures.errors import shows_path


@pytest.fixture
def program(tmp_path, monkeypatch):
    """A file with an ExecuTorch program's identifier and a manifest that matches it."""
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    path = tmp_path / "m.pte"
    path.write_bytes(b"\0\0\0\0" + PTE_MAGIC + bytes(64))
    manifest = {
        "format_version": PTE_FORMAT_VERSION,
        "file_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "versions": {"executorch": "1.5.1", "torch": "2.13.0+cpu", "torchao": "0.18.0"},
    }
    (tmp_path / ("m.pte" + MANIFEST_SUFFIX)).write_text(json.dumps(manifest))
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--backend", "executorch", "--skip", "host,accuracy,coldstart,thermal,fidelity"],
        ["accuracy", "--chunks", "1"],
        ["check-runtime", "--chunks", "1"],
    ],
    ids=["run", "accuracy", "check-runtime"],
)
def test_a_pte_without_the_extra_is_refused_naming_the_file(program, argv, capsys):
    extra = ["--no-record"] if argv[0] == "run" else []
    assert main([*argv, "--model", str(program), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "--model " in err and shows_path(err, program)
    assert "m.pte: ExecuTorch is not installed (torch missing)" in err and len(err) < 201
