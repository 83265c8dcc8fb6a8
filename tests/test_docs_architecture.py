"""The architecture page's package map is the code's: docs/explanations/architecture.md holds
exactly what tools/docs_architecture.py writes from tools/layers.py and the docstrings (so a new
package, module or docstring fails here until the page is regenerated), every package on disk is
on it, and the generator, on a synthetic package, picks up a package it was never told about and
refuses one in no layer or a module without a docstring."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_layers import _package  # a synthetic package written under tmp_path
from tools import docs_architecture as arch
from tools.layers import LAYERS

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "explanations" / "architecture.md"


def _map_on_page() -> str:
    page = PAGE.read_text()
    return page[page.index(arch.BEGIN) + len(arch.BEGIN) : page.index(arch.END)]


def test_the_page_holds_the_map_the_code_gives():
    page = PAGE.read_text()
    assert arch.with_map(page, arch.package_map()) == page, (
        "docs/explanations/architecture.md: the package map is stale; run "
        "python tools/docs_architecture.py"
    )


def test_every_package_and_layer_on_disk_is_on_the_page():
    shown = _map_on_page()
    packages = [p.name for p in (ROOT / "harmony_ref").iterdir() if (p / "__init__.py").is_file()]
    missing = [p for p in packages if f"`harmony_ref/{p}/`" not in shown]
    assert packages and missing == [], missing
    modules = [
        p.relative_to(ROOT / "harmony_ref").as_posix()
        for p in (ROOT / "harmony_ref").rglob("*.py")
        if p.parent != ROOT / "harmony_ref" and p.name != "__init__.py"
    ]
    assert [m for m in modules if f"`{m}`" not in shown] == []
    present = [
        name
        for name, tops in LAYERS
        if any(
            (ROOT / "harmony_ref" / t).is_dir() or (ROOT / "harmony_ref" / f"{t}.py").is_file()
            for t in tops
        )
    ]
    assert [n for n in present if f". {n}\n" not in shown] == []


FAKE = {
    "__init__.py": '"""The package."""\n',
    "low/__init__.py": '"""Low things: the bottom layer, which imports nothing of ours."""\n',
    "low/a.py": '"""Module a: what it holds, said once."""\n',
}


def test_a_new_package_joins_the_map_from_the_layers_and_the_disk(tmp_path):
    layers = [("base", ("__init__", "low")), ("lab", ("lab",)), ("later", ("later",))]
    files = dict(FAKE)
    files["lab/__init__.py"] = '"""The device lab: transports, sessions and telemetry."""\n'
    files["lab/transport.py"] = '"""Transports: how we reach a phone (hdc, adb)."""\n'
    text = arch.package_map(_package(tmp_path, files), "pkg", layers)
    assert "### 1. lab\n" in text and "| `pkg/lab/` | The device lab" in text
    assert "| `lab/transport.py` | Transports: how we reach a phone (hdc, adb). |" in text
    assert "later" not in text  # declared, not written yet: no empty section
    assert text.index("### 0. base") < text.index("### 1. lab")


def test_a_package_in_no_layer_or_a_module_without_a_docstring_is_refused(tmp_path):
    root = _package(tmp_path, {**FAKE, "stray/__init__.py": '"""Stray."""\n'})
    with pytest.raises(ValueError, match=r"pkg/stray: in no layer of tools/layers.py"):
        arch.package_map(root, "pkg", [("base", ("__init__", "low"))])
    root = _package(tmp_path / "b", {**FAKE, "low/b.py": "x = 1\n"})
    with pytest.raises(ValueError, match=r"low/b.py: no module docstring"):
        arch.package_map(root, "pkg", [("base", ("__init__", "low"))])


def test_the_map_is_written_between_the_markers_and_only_there():
    page = f"# Title\n\nprose before\n\n{arch.BEGIN}\nold map\n{arch.END}\n\nprose after\n"
    out = arch.with_map(page, "new map\n")
    assert (
        out == f"# Title\n\nprose before\n\n{arch.BEGIN}\n\nnew map\n\n{arch.END}\n\nprose after\n"
    )
    with pytest.raises(ValueError, match="markers"):
        arch.with_map("# no markers\n", "new map\n")


@pytest.mark.parametrize(
    "doc, expected",
    [
        (
            "AWQ (Lin et al. 2023): activation-aware per-input-channel scales.\n\nMore.",
            "AWQ (Lin et al. 2023): activation-aware per-input-channel scales.",
        ),
        (
            "`harmony-ref plan --budget-mb X`: per-layer formats that minimise the measured loss\n"
            "within a budget: the rest.",
            "`harmony-ref plan --budget-mb X`: per-layer formats that "
            "minimise the measured loss within a budget",
        ),
        (
            'Input checks shared by the quantizers, because "ValueError: bad input" helps nobody.',
            'Input checks shared by the quantizers, because "ValueError: bad input" helps nobody.',
        ),
        (
            "Short. The first sentence is too short to stand alone here, so it runs on.",
            "Short. The first sentence is too short to stand alone here, so it runs on.",
        ),
        (
            "No full stop at the end of this first paragraph at all\n\nNext.",
            "No full stop at the end of this first paragraph at all",
        ),
    ],
)
def test_a_summary_is_the_opening_sentence_or_clause(doc, expected):
    assert arch.summary(doc) == expected
