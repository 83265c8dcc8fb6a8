"""`harmony-ref compare`: profiles as columns, best value marked direction-aware, every format,
and the grouped bar plot."""

import json

import pandas as pd
import pytest

from harmony_ref.cli import main
from harmony_ref.track.compare import best_profiles, compare_profiles, to_markdown

PROFILES = ["harmony-flagship", "harmony-midrange", "harmony-lowend"]


@pytest.fixture(scope="module")
def frame():
    f, _notes = compare_profiles(PROFILES, "llama-3.2-3b", "int4-g128", parts=("predicted",))
    return f


def test_best_is_direction_aware():
    s = pd.Series({"a": 1.0, "b": 3.0, "c": 3.0})
    assert best_profiles(s, "lower") == "a"
    assert best_profiles(s, "higher") == "b,c"
    assert best_profiles(s, "none") == ""
    assert (
        best_profiles(pd.Series({"a": 2.0, "b": 2.0}), "lower") == ""
    )  # a tie everywhere marks nothing


def test_frame_shape_and_best(frame):
    assert list(frame.columns) == ["unit", "better", *PROFILES, "best"]
    assert frame.loc["decode_tokens_per_s", "better"] == "higher"
    tps = frame.loc["decode_tokens_per_s", PROFILES].astype(float)
    assert frame.loc["decode_tokens_per_s", "best"] == tps.idxmax()
    ttft = frame.loc["ttft_ms", PROFILES].astype(float)
    assert frame.loc["ttft_ms", "best"] == ttft.idxmin()
    # the flagship (fastest DRAM) decodes fastest: the comparison is not a shuffle
    assert frame.loc["decode_tokens_per_s", "best"] == "harmony-flagship"


def test_markdown_bolds_best(frame):
    md = to_markdown(frame)
    row = next(line for line in md.splitlines() if line.startswith("| decode_tokens_per_s"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3].startswith("**") and not cells[4].startswith("**")


def test_cli_formats_and_plot(tmp_path, capsys):
    plot = tmp_path / "profiles.png"
    assert main(["compare", "--format", "json", "--plot", str(plot)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["profiles"] == PROFILES
    row = next(m for m in data["metrics"] if m["metric"] == "ttft_ms")
    assert set(PROFILES) <= set(row) and row["best"] in PROFILES
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["compare", "--format", "csv"]) == 0
    csv = capsys.readouterr().out
    assert csv.splitlines()[0] == "metric,unit,better," + ",".join(PROFILES) + ",best"
    assert main(["compare", "--profiles", "harmony-flagship,harmony-lowend"]) == 0
    assert "*" in capsys.readouterr().out


def test_cli_bad_profile_exit_2(capsys):
    assert main(["compare", "--profiles", "harmony-flagship,no-such-phone"]) == 2
    assert "no-such-phone" in capsys.readouterr().err


def test_large_values_print_whole_not_in_e_notation(frame):
    """The low-end phone's TTFT is tens of seconds: the tables show 26,522, not 2.652e+04."""
    ttft_lowend = float(frame.loc["ttft_ms", "harmony-lowend"])
    assert 1e4 <= ttft_lowend < 1e6
    md = to_markdown(frame)
    row = next(line for line in md.splitlines() if line.startswith("| ttft_ms"))
    assert f"{ttft_lowend:,.0f}" in row and "e+0" not in row
