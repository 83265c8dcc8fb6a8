"""The thermal, coldstart and serve commands: tables, --json, --plot, bad input."""

import json

from harmony_ref.cli import main


def test_thermal_json_and_plot(capsys, tmp_path):
    png = tmp_path / "t.png"
    assert main(["thermal", "--minutes", "12", "--json", "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    s = out["summary"]
    assert 0 < s["sustained_peak_ratio_10min"] <= 1
    assert len(out["series"]) == 12 and out["series"][0]["tokens_per_s"] > 0
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_thermal_table(capsys):
    assert main(["thermal", "--profile", "harmony-midrange", "--minutes", "5", "--governor", "step_wise"]) == 0
    out = capsys.readouterr().out
    assert "time_to_first_throttle_s" in out and "step_wise" in out


def test_thermal_bad_input(capsys):
    assert main(["thermal", "--minutes", "0"]) == 2
    assert main(["thermal", "--profile", "no-such-phone"]) == 2
    assert "error" in capsys.readouterr().err


def test_coldstart_json_every_profile(capsys):
    assert main(["coldstart", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    profiles = {r["profile"] for r in out["modelled"]}
    assert len(profiles) >= 3 and len(out["modelled"]) == 6 * len(profiles)


def test_serve_json_and_trace(capsys, tmp_path):
    assert main(["serve", "--rate", "0.2", "--minutes", "10", "--json"]) == 0
    a = json.loads(capsys.readouterr().out)["summary"]
    assert a["completed"] + a["busy"] + a["timed_out"] == a["arrived"] > 0
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,new_tokens\n0,128,16\n1.5,64,8\n")
    assert main(["serve", "--trace", str(trace), "--json"]) == 0
    b = json.loads(capsys.readouterr().out)["summary"]
    assert b["arrived"] == 2
    trace.write_text("0,128,16\nzero,1,1\n")
    assert main(["serve", "--trace", str(trace)]) == 2
    assert "line 2" in capsys.readouterr().err


def test_thermal_short_run_has_no_ten_minute_ratio(capsys):
    assert main(["thermal", "--minutes", "3", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)["summary"]
    assert s["sustained_peak_ratio_10min"] is None and s["final_tokens_per_s"] > 0
