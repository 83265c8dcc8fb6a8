"""A session record's config names the session by what it measured (the device, the command,
the pushed files' SHA-256, model, policy, scenario), never by the session file's name: the same
phone measured through `phone.toml` and a renamed copy gates cleanly, a different pushed model
does not."""

import json
import os
import shutil

from harmony_ref.cli import main
from tests.lab.test_session import fresh, hdc_phone, phones  # noqa: F401

MODEL = ["--model", "llama-3.2-1b", "--policy", "int4-g32"]


def measure(path, runs, capsys):
    rc = main(["measure", "--session", str(path), "--out-dir", str(runs), *MODEL])
    err = capsys.readouterr().err
    assert rc == 0, err
    (record,) = runs.glob("run-*.json")
    return record


def test_a_renamed_session_file_gates_cleanly(hdc_phone, tmp_path, capsys):  # noqa: F811
    fresh(hdc_phone, tmp_path, benchmark={"repeats": 2})
    first = measure(tmp_path / "phone.toml", tmp_path / "a", capsys)
    renamed = tmp_path / "pixel-bench-copy.toml"
    shutil.copy(tmp_path / "phone.toml", renamed)
    second = measure(renamed, tmp_path / "b", capsys)
    configs = [json.loads(r.read_text())["config"] for r in (first, second)]
    assert configs[0] == configs[1]
    opts = configs[0]["backend_options"]
    assert len(opts["session_id"]) == 16 and opts["device"] == f"hdc:{hdc_phone.serial}"
    assert "phone.toml" not in json.dumps(configs[0])  # the file is in the session block only
    files = [
        json.loads(r.read_text())["parts"]["session"]["session"]["file"] for r in (first, second)
    ]
    assert files == [str(tmp_path / "phone.toml"), str(renamed)]
    assert main(["gate", "--baseline", str(first), "--current", str(second)]) == 0


def test_a_different_pushed_model_is_a_different_config(hdc_phone, tmp_path, capsys):  # noqa: F811
    spec = fresh(hdc_phone, tmp_path, benchmark={"repeats": 1})
    first = measure(tmp_path / "phone.toml", tmp_path / "a", capsys)
    spec.local_path(spec.push[1]).write_bytes(os.urandom(64 * 1024))  # another model file
    second = measure(tmp_path / "phone.toml", tmp_path / "b", capsys)
    assert main(["gate", "--baseline", str(first), "--current", str(second)]) == 2
    err = capsys.readouterr().err
    assert "measures a different config" in err and "session_id" in err
