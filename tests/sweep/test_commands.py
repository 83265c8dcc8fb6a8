"""The sweep and pick commands: bad input is one line and exit 2 before any work, --json on both,
pick's formats and plot files (the sweep here runs in this process, --workers 0)."""

from __future__ import annotations

import json

import pytest

from harmony_ref.cli import main

SWEEP = [
    "sweep",
    "--name",
    "s",
    "--models",
    "qwen2.5-0.5b,llama-3.2-1b",
    "--policies",
    "int8,int4-g128",
    "--profiles",
    "harmony-flagship,harmony-lowend",
    "--workers",
    "0",
]


@pytest.fixture
def swept(tmp_path, capsys):
    assert main(SWEEP + ["--out-dir", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["points"], out["computed"], out["where"]) == (8, 8, "in-process")
    return tmp_path


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--models", "nope"], "--models 'nope': unknown model"),
        (["--prompt", "a"], "--prompt 'a': must be comma-separated integers"),
        (["--grid", "x.toml"], "give the grid in the file or as flags, not both"),
        (["--workers", "-1"], "--workers -1: must be >= 0"),
        (["--scheduler", "tcp://h:1", "--workers", "2"], "--workers applies to the LocalCluster"),
        (["--points-per-task", "0"], "--points-per-task 0: must be >= 1"),
    ],
)
def test_bad_sweep_input_is_one_line_exit_2(tmp_path, capsys, extra, message):
    argv = SWEEP[:2] + ["x"] + SWEEP[3:]
    # later flags win in argparse: the bad value replaces the good one
    assert main(argv + extra + ["--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x" / "points.parquet").exists()


def test_a_missing_grid_file_is_named(tmp_path, capsys):
    assert main(["sweep", "--name", "x", "--grid", str(tmp_path / "no.toml")]) == 2
    assert "no.toml: sweep grid file does not exist" in capsys.readouterr().err


def test_pick_json_md_csv_and_plots(swept, capsys):
    argv = ["pick", "--sweep", "s", "--out-dir", str(swept), "--min-decode-tps", "20"]
    assert main(argv + ["--json", "--plot", str(swept / "p.png")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [a["profile"] for a in out["answers"]] == ["harmony-flagship", "harmony-lowend"]
    lowend = out["answers"][1]
    assert lowend["best"]["model"] == "qwen2.5-0.5b"
    assert {c["verdict"] for c in lowend["candidates"]} >= {"best", "infeasible"}
    from pathlib import Path

    assert len(out["plots"]) == 2 and all(Path(p).stat().st_size > 10_000 for p in out["plots"])
    assert main(argv + ["--format", "md", "--profile", "harmony-lowend"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("**harmony-lowend") and "| model | policy |" in md
    assert main(argv + ["--format", "csv"]) == 0
    assert capsys.readouterr().out.startswith("model,policy,kv_dtype,runtime,decode_tokens_per_s")


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--max-kld", "0.1"], "--max-kld 0.1: the sweep has no KL divergence metric"),
        (["--profile", "moon"], "--profile 'moon': not in the sweep"),
        (["--plot", "x.jpg"], "--plot x.jpg: must be a .png path"),
        (["--models", "nope"], "--models 'nope': not in the sweep"),
    ],
)
def test_bad_pick_input_is_exit_2(swept, capsys, extra, message):
    assert main(["pick", "--sweep", "s", "--out-dir", str(swept)] + extra) == 2
    assert message in capsys.readouterr().err


def test_pick_on_a_missing_sweep(tmp_path, capsys):
    assert main(["pick", "--sweep", "none", "--out-dir", str(tmp_path)]) == 2
    assert "--sweep none: no sweep at" in capsys.readouterr().err


def test_the_sweep_pages_pick_table_has_picks_columns_and_numbers(swept, capsys):
    """docs/how-to/sweep.md's low-end table: the header `pick --style md` prints, its heading
    lines as pick words them, and (for the points this small sweep shares with the page's) the
    predicted decode speed and peak memory as printed (exact metrics)."""
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "how-to" / "sweep.md").read_text()
    argv = ["pick", "--sweep", "s", "--out-dir", str(swept), "--style", "md"]
    assert main(argv + ["--profile", "harmony-lowend"]) == 0
    md = capsys.readouterr().out
    heading = md.splitlines()[0].strip("*")
    assert f"- {heading.split(': best')[0]}: best" in page, heading
    lines = [line for line in md.splitlines() if line.startswith("| ")]
    assert lines[0] in page, lines[0]  # the header row
    cols = [c.strip() for c in lines[0].strip("|").split("|")]
    shown = {}
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == len(cols) and cells[0] != "model":
            shown[tuple(cells[:2])] = dict(zip(cols, cells))
    compared = 0
    for line in lines[1:]:
        row = dict(zip(cols, (c.strip() for c in line.strip("|").split("|"))))
        want = shown.get((row["model"], row["policy"]))
        if want:
            compared += 1
            for col in ("decode_tokens_per_s", "peak_memory_mb", "kv_dtype", "runtime"):
                assert row[col] == want[col], (row["model"], row["policy"], col)
    assert compared == 4
