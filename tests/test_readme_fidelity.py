"""The "How far to trust a prediction" tables (docs/explanations/fidelity.md, moved there from the
README) are `harmony-ref fidelity --markdown`'s:
each row of the three tables (host, llama.cpp, published phones) is there with the same labels,
and each number within its class tolerance: measured values are the committed fixtures'
(exact as printed), predictions and errors are exact model outputs (the gate's exact limit,
plus the rounding of three printed digits)."""

import contextlib
import io
import re
from pathlib import Path

from harmony_ref.cli import main
from harmony_ref.track.gate import load_tolerances

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"[-+]?\d[\d,]*\.?\d*")
PAGE = ROOT / "docs" / "explanations" / "fidelity.md"
SECTION = "# How far to trust a prediction"


def _table_rows(text: str) -> dict[str, list[str]]:
    """First cell -> the row's cells, for every Markdown table row of `text` (not the header
    or its rule)."""
    out = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            out[cells[0]] = cells
    return out


def _numbers(cell: str) -> list[float]:
    return [float(m.replace(",", "")) for m in NUMBER.findall(cell)]


def test_readme_tables_are_the_fidelity_commands():
    page = PAGE.read_text()
    assert page.startswith(SECTION)
    section = page
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["fidelity", "--markdown"]) == 0
    printed = _table_rows(out.getvalue())
    shown = _table_rows(section)
    headers = {"run", "llama-bench run", "published figure"}
    assert set(printed) - headers, "the command printed no rows"
    missing = sorted(set(printed) - set(shown))
    assert not missing, f"{PAGE.name} lacks rows {missing}"
    rel = load_tolerances().exact_pct / 100
    for key, cells in printed.items():
        if key in headers:
            continue
        got = shown[key]
        assert len(got) == len(cells), key
        for a, b in zip(cells, got):
            na, nb = _numbers(a), _numbers(b)
            assert len(na) == len(nb), (key, a, b)
            for x, y in zip(na, nb):
                # three significant digits printed: half a unit of the third digit, or 0.05
                # of a percentage point, beyond the exact class's limit
                slack = max(abs(x) * (rel + 5e-3), 0.051)
                assert abs(x - y) <= slack, f"{key}: {PAGE.name} {b!r} vs fidelity {a!r}"
