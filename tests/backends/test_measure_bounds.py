"""Issue 16 item 8: `measure` refuses negative, zero and non-finite numbers always, and the physics
check bounds what it can even without --profile/--model."""

import json
import shlex
import sys
from pathlib import Path

import pytest

from harmony_ref.cli import main

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "device_outputs" / "llama_bench.json"


def _bench(tmp_path, **avg_ts):
    rows = json.loads(FIXTURE.read_text())
    for r in rows:
        kind = "prefill" if r.get("n_prompt", 0) and not r.get("n_gen", 0) else "decode"
        if kind in avg_ts:
            r["avg_ts"] = avg_ts[kind]
    out = tmp_path / "out.json"
    out.write_text(json.dumps(rows))
    cat = "'import sys; sys.stdout.write(open(sys.argv[1]).read())'"
    return f"{shlex.quote(sys.executable)} -c {cat} {out}"


@pytest.mark.parametrize("value", [-5.0, 0.0])
def test_negative_or_zero_tokens_per_s_is_an_error(tmp_path, capsys, value):
    rc = main(["measure", "--command", _bench(tmp_path, decode=value), "--format", "llama-bench"])
    err = capsys.readouterr().err
    assert rc == 2 and "decode_tokens_per_s" in err and "Traceback" not in err


def test_absurd_prefill_is_flagged_without_profile_or_model(tmp_path, capsys):
    rc = main(
        ["measure", "--command", _bench(tmp_path, prefill=9e7), "--format", "llama-bench", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert "implausible" in out["metrics"]["prefill_tokens_per_s"].get("flags", [])
    assert any("prefill_tokens_per_s" in f for f in out["implausible"])


def test_a_plausible_output_is_not_flagged_without_profile(tmp_path, capsys):
    rc = main(["measure", "--command", _bench(tmp_path), "--format", "llama-bench", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["implausible"] == []
