"""The thermal, coldstart and serve commands: tables, --json, --plot, bad input."""

import json

import pytest

from harmony_ref.cli import main
from tests.fixtures.errors import shows_path


def test_thermal_json_and_plot(capsys, tmp_path):
    png = tmp_path / "t.png"
    assert main(["thermal", "--minutes", "12", "--json", "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    s = out["summary"]
    assert 0 < s["sustained_peak_ratio_10min"] <= 1
    assert len(out["series"]) == 12 and out["series"][0]["tokens_per_s"] > 0
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_thermal_table(capsys):
    assert (
        main(
            [
                "thermal",
                "--profile",
                "harmony-midrange",
                "--minutes",
                "5",
                "--governor",
                "step_wise",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "time_to_first_throttle_s" in out and "step_wise" in out


def test_thermal_bad_input(capsys, tmp_path):
    assert main(["thermal", "--minutes", "0"]) == 2
    assert main(["thermal", "--profile", "no-such-phone"]) == 2
    assert "error" in capsys.readouterr().err
    # An absurd run is refused up front (it used to die in a MemoryError traceback).
    assert main(["thermal", "--minutes", "1e9"]) == 2
    assert "steps: must be 1..8640000" in capsys.readouterr().err
    # An unwritable plot names the path the user gave, before any work, and leaves nothing.
    (tmp_path / "a-file").write_text("")
    png = tmp_path / "a-file" / "t.png"
    assert main(["thermal", "--minutes", "1", "--plot", str(png)]) == 2
    err = capsys.readouterr().err
    assert "--plot " in err and shows_path(err, png) and ".tmp" not in err


def test_a_plot_that_fails_at_write_time_names_the_users_path(tmp_path):
    import matplotlib.pyplot as plt

    from harmony_ref.track.plot_style import save_png

    (tmp_path / "a-file").write_text("")
    png = tmp_path / "a-file" / "t.png"
    fig = plt.figure()
    try:
        with pytest.raises(ValueError, match=f"--plot {png}: cannot write") as e:
            save_png(fig, png)
    finally:
        plt.close(fig)
    assert ".tmp" not in str(e.value) and list(tmp_path.iterdir()) == [tmp_path / "a-file"]


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
    # The horizon is the trace's own span (not a default 10 minutes of idle phone).
    assert b["horizon_s"] < 60 and b["utilisation"] > 0.5
    trace.write_text("0,128,16\nzero,1,1\n")
    assert main(["serve", "--trace", str(trace)]) == 2
    assert "line 2" in capsys.readouterr().err


def test_thermal_short_run_has_no_ten_minute_ratio(capsys):
    assert main(["thermal", "--minutes", "3", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)["summary"]
    assert s["sustained_peak_ratio_10min"] is None and s["final_tokens_per_s"] > 0


def _table_cells(text: str) -> dict[str, str]:
    """First two cells of every body row of the rich tables in `text`: {name: printed value}."""
    out = {}
    for line in text.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            out[cells[0]] = cells[1]
    return out


def _assert_table_matches_json(table: dict[str, str], numbers: dict) -> None:
    from harmony_ref._format import fmt_number

    compared = 0
    for name, value in numbers.items():
        if name in table and isinstance(value, (int, float)):
            assert table[name] == fmt_number(float(value)), (name, table[name], value)
            compared += 1
    assert compared >= 5, compared


def test_table_and_json_give_the_same_numbers(capsys):
    """--json prints the numbers the table shows (the table rounds them to 4 digits)."""
    predict = ["predict", "--prompt", "256", "--new", "32", "--context", "1024"]
    serve = ["serve", "--rate", "0.3", "--minutes", "5"]
    thermal = ["thermal", "--minutes", "11"]
    for args, numbers_of in (
        (predict, lambda j: {k: m["value"] for k, m in j["metrics"].items()}),
        (serve, lambda j: j["summary"]),
        (thermal, lambda j: j["summary"]),
    ):
        assert main(args) == 0
        table = _table_cells(capsys.readouterr().out)
        assert main(args + ["--json"]) == 0
        _assert_table_matches_json(table, numbers_of(json.loads(capsys.readouterr().out)))
