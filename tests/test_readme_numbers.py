"""The MiniLM accuracy table (docs/explanations/accuracy.md, moved there from the README)
matches what `harmony-ref accuracy` prints now: sizes exactly (they are counted), cosines,
recall and drop as the gate would judge them (within the limit of each metric's class: the
table may have been made on another x86-64 CPU, and float kernels move a near-tie sentence's
nearest neighbour between CPUs). The rows come from tools/readme_tables.py."""

import json
import re
import sys
from pathlib import Path

import pytest

from harmony_ref.cli import main
from harmony_ref.metrics import NUMERICAL, Metric, name_unit
from harmony_ref.track.gate import load_tolerances

ROOT = Path(__file__).resolve().parents[1]
PAGE = "docs/explanations/accuracy.md"  # where the table lives
sys.path.insert(0, str(ROOT / "tools"))
from readme_tables import accuracy_rows  # noqa: E402

ROW = re.compile(
    r"^\| (?P<policy>[\w.-]+) \| (?P<mb>[\d.]+) \| (?P<mean>[\d.]+) / "
    r"(?P<min>[\d.]+) \| (?P<recall>[\d.]+)% \| (?P<drop>[\d.]+) \|$"
)


def _rows(lines):
    return {m["policy"]: m.groupdict() for m in map(ROW.match, lines) if m}


@pytest.fixture(scope="module")
def printed():
    pytest.importorskip("tokenizers")
    readme = _rows((ROOT / PAGE).read_text().splitlines())
    assert set(readme) >= {"fp32", "int8", "int4-g128", "int4-g32", "minilm-mixed"}
    argv = ["accuracy", "--model", "all-minilm-l6", "--json"] + [
        a for p in readme for a in ("--policy", p)
    ]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return readme, _rows(accuracy_rows(json.loads(out.getvalue())))


# table column -> the record metric it prints (the gate's limit for that metric applies)
COLUMN_METRICS = {
    "mean": "cosine_mean",
    "min": "cosine_min",
    "recall": "recall_at_1",
    "drop": "accuracy_drop_pct",
}
PRINTED_DIGITS = 1e-4  # cosines are printed to 4 decimals


def test_readme_accuracy_table_matches_the_command(printed):
    readme, now = printed
    tol = load_tolerances()
    for policy, row in readme.items():
        got = now[policy]
        assert row["mb"] == got["mb"], policy
        for col, name in COLUMN_METRICS.items():
            metric = Metric(name, float(got[col]), name_unit(name), kind=NUMERICAL)
            a, b = float(row[col]), float(got[col])
            assert tol.agrees(metric, a, b) or abs(a - b) <= PRINTED_DIGITS, (
                policy,
                col,
                row[col],
                got[col],
                tol.limit_pct(metric),
                tol.limit_abs(metric),
            )
