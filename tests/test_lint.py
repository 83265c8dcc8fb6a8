"""The tree passes the linter and the type checker as pyproject.toml configures them: `ruff check`
(rules in [tool.ruff.lint]) and `ruff format --check` on the whole tree, `mypy` on the typed packages ([tool.mypy] files).
Both come with the dev extra, so CI runs them; without them installed the tests skip."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(module: str) -> list[str]:
    pytest.importorskip(module, reason=f"{module} is not installed (the dev extra has it)")
    return [sys.executable, "-m", module]


def test_ruff_check_passes():
    proc = subprocess.run(
        [*_tool("ruff"), "check", "--no-cache", "--output-format", "concise", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_ruff_format_check_passes():
    """The tree is as `ruff format` writes it (the version pinned in the dev extra)."""
    proc = subprocess.run(
        [*_tool("ruff"), "format", "--check", "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_mypy_passes_on_the_typed_packages(tmp_path):
    proc = subprocess.run(
        [*_tool("mypy"), "--cache-dir", str(tmp_path / "mypy-cache")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
