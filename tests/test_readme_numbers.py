"""Issue 16 item 11: the README's accuracy table matches what `harmony-ref accuracy` prints now
(sizes and recall exactly as printed; cosines within the gate's numerical tolerance, since the
README may have been made on another x86-64 CPU). The rows come from bench/readme_tables.py."""

import json
import re
import sys
from pathlib import Path

import pytest

from harmony_ref.cli import main
from harmony_ref.track.gate import load_tolerances

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from readme_tables import accuracy_rows  # noqa: E402

ROW = re.compile(r"^\| (?P<policy>[\w.-]+) \| (?P<mb>[\d.]+) \| (?P<mean>[\d.]+) / "
                 r"(?P<min>[\d.]+) \| (?P<recall>[\d.]+)% \| (?P<drop>[\d.]+) \|$")


def _rows(lines):
    return {m["policy"]: m.groupdict() for m in map(ROW.match, lines) if m}


@pytest.fixture(scope="module")
def printed():
    pytest.importorskip("tokenizers")
    readme = _rows((ROOT / "README.md").read_text().splitlines())
    assert set(readme) >= {"fp32", "int8", "int4-g128", "int4-g32", "minilm-mixed"}
    argv = ["accuracy", "--model", "all-minilm-l6", "--json"] + [a for p in readme for a in ("--policy", p)]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return readme, _rows(accuracy_rows(json.loads(out.getvalue())))


def test_readme_accuracy_table_matches_the_command(printed):
    readme, now = printed
    tol = load_tolerances().numerical_pct / 100.0
    for policy, row in readme.items():
        got = now[policy]
        assert row["mb"] == got["mb"], policy
        assert row["recall"] == got["recall"] and row["drop"] == got["drop"], policy
        for col in ("mean", "min"):
            assert float(row[col]) == pytest.approx(float(got[col]), rel=tol, abs=1e-4), \
                (policy, col, row[col], got[col])
