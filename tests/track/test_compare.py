"""`harmony-ref compare`: profiles as columns, best value marked direction-aware, every format,
and the grouped bar plot."""

import json

import pandas as pd
import pytest

from harmony_ref.cli import main
from harmony_ref.job.compare_run import compare_profiles
from harmony_ref.track.compare import best_profiles, to_markdown

PROFILES = ["harmony-flagship", "harmony-midrange", "harmony-lowend"]
LABELS = [f"{p} · own" for p in PROFILES]  # the columns: each profile on its own runtime


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
    assert list(frame.columns) == ["unit", "better", *LABELS, "best"]
    assert frame.loc["decode_tokens_per_s", "better"] == "higher"
    tps = frame.loc["decode_tokens_per_s", LABELS].astype(float)
    assert frame.loc["decode_tokens_per_s", "best"] == tps.idxmax()
    ttft = frame.loc["ttft_ms", LABELS].astype(float)
    assert frame.loc["ttft_ms", "best"] == ttft.idxmin()
    # the flagship (fastest DRAM) decodes fastest: the comparison is not a shuffle
    assert frame.loc["decode_tokens_per_s", "best"] == "harmony-flagship · own"


def test_markdown_bolds_best(frame):
    md = to_markdown(frame)
    row = next(line for line in md.splitlines() if line.startswith("| decode_tokens_per_s"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3].startswith("**") and not cells[4].startswith("**")


def test_cli_formats_and_plot(tmp_path, capsys):
    plot = tmp_path / "profiles.png"
    assert main(["compare", "--format", "json", "--plot", str(plot)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["profiles"] == PROFILES and data["runtime_note"] is None
    assert [c["label"] for c in data["columns"]] == LABELS
    row = next(m for m in data["metrics"] if m["metric"] == "ttft_ms")
    assert set(LABELS) <= set(row) and row["best"] in LABELS
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["compare", "--format", "csv"]) == 0
    csv = capsys.readouterr().out
    assert csv.splitlines()[0] == "metric,unit,better," + ",".join(LABELS) + ",best"
    assert main(["compare", "--profiles", "harmony-flagship,harmony-lowend"]) == 0
    assert "*" in capsys.readouterr().out


def test_cli_bad_profile_exit_2(capsys):
    assert main(["compare", "--profiles", "harmony-flagship,no-such-phone"]) == 2
    assert "no-such-phone" in capsys.readouterr().err


def test_large_values_print_whole_not_in_e_notation(frame):
    """The low-end phone's TTFT is tens of seconds: the tables show 26,522, not 2.652e+04."""
    ttft_lowend = float(frame.loc["ttft_ms", "harmony-lowend · own"])
    assert 1e4 <= ttft_lowend < 1e6
    md = to_markdown(frame)
    row = next(line for line in md.splitlines() if line.startswith("| ttft_ms"))
    assert f"{ttft_lowend:,.0f}" in row and "e+0" not in row


# --- runtimes: every column names the one it ran, and a comparison can hold it fixed ----------

PHONES = ["snapdragon-8-gen-3", "dimensity-9300", "kirin-9000e", "snapdragon-8-elite"]
ARGS = ["--model", "llama-3.2-1b", "--policy", "int4-g32", "--prompt", "128", "--new", "16"]


def test_each_profile_runs_its_own_runtime_and_the_table_says_so(capsys):
    assert main(["compare", "--profiles", ",".join(PHONES), *ARGS]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    # one line above the table: the columns ran three runtimes
    assert first.startswith("note: the columns run 3 different runtimes (qnn-npu, llama.cpp-cpu,")
    assert "--runtime R runs every profile on one" in first
    flat = " ".join(out.split())  # the table wraps long headers
    for label in ("qnn-npu", "llama.cpp-cpu", "mslite-npu"):
        assert label in flat


def test_runtime_holds_every_column_on_one(capsys):
    assert (
        main(
            [
                "compare",
                "--profiles",
                ",".join(PHONES),
                "--runtime",
                "llama.cpp-cpu",
                *ARGS,
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["runtime_note"] is None
    assert [c["runtime"] for c in data["columns"]] == ["llama.cpp-cpu"] * 4
    assert [c["label"] for c in data["columns"]] == [f"{p} · llama.cpp-cpu" for p in PHONES]
    row = next(m for m in data["metrics"] if m["metric"] == "prefill_tokens_per_s")
    on_cpu = [row[c["label"]] for c in data["columns"]]
    # on one runtime the phones are within a few x of each other, not the 86x of NPU vs CPU
    assert max(on_cpu) / min(on_cpu) < 6


def test_one_phone_across_runtimes_in_every_format(capsys):
    pairs = "snapdragon-8-gen-3:llama.cpp-cpu,snapdragon-8-gen-3:qnn-npu"
    assert main(["compare", "--profiles", pairs, *ARGS, "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("> note: one phone on 2 runtimes (llama.cpp-cpu, qnn-npu)")
    assert "| snapdragon-8-gen-3 · llama.cpp-cpu | snapdragon-8-gen-3 · qnn-npu |" in md
    assert main(["compare", "--profiles", pairs, *ARGS, "--format", "csv"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[0].endswith(
        "snapdragon-8-gen-3 · llama.cpp-cpu,snapdragon-8-gen-3 · qnn-npu,best"
    )
    assert "note: one phone on 2 runtimes" in out.err  # stdout stays one CSV table
    frame, _ = compare_profiles(
        pairs.split(","), "llama-3.2-1b", "int4-g32", 128, 16, parts=("predicted",)
    )
    npu, cpu = "snapdragon-8-gen-3 · qnn-npu", "snapdragon-8-gen-3 · llama.cpp-cpu"
    assert frame.loc["prefill_tokens_per_s", npu] > 10 * frame.loc["prefill_tokens_per_s", cpu]


@pytest.mark.parametrize(
    "argv, fragments",
    [
        (["--profiles", "dimensity-9300:qnn-npu"], ["qnn-npu", "dimensity-9300", "MediaTek APU"]),
        (["--profiles", "kirin-9000e", "--runtime", "qnn-npu"], ["--runtime 'qnn-npu' on kirin"]),
        (["--profiles", "snapdragon-8-elite:mslite-npu"], ["mslite-npu", "Hexagon NPU"]),
        (
            ["--profiles", "dimensity-9300:llama.cpp-cpu", "--runtime", "llama.cpp-cpu"],
            ["give one or the other"],
        ),
        (["--profiles", "dimensity-9300:"], ["give PROFILE or PROFILE:RUNTIME"]),
        (
            ["--profiles", "dimensity-9300,dimensity-9300:llama.cpp-cpu"],
            ["listed twice: dimensity-9300 · llama.cpp-cpu"],
        ),
    ],
)
def test_refused_runtimes_are_one_line_exit_2_before_work(argv, fragments, capsys, tmp_path):
    plot = tmp_path / "c.png"
    assert main(["compare", *argv, *ARGS, "--plot", str(plot)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and len(err) < 200 and "Traceback" not in err
    assert all(f in err for f in fragments), err
    assert not plot.exists()
