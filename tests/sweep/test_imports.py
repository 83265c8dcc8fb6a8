"""Only the sweep package and the sweep/pick commands import Dask's `distributed`, so every other
command starts as fast as before: checked on the source (every import statement, via ast) and
by importing the CLI in a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "harmony_ref"
ALLOWED = {"sweep", "commands/sweep.py", "commands/pick.py"}


def imports_distributed(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        if any(n == "distributed" or n.startswith(("distributed.", "dask")) for n in names):
            return True
    return False


def test_only_the_sweep_imports_distributed():
    found = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if imports_distributed(p)}
    assert found, "the checker found no import at all: it is broken"
    outside = {f for f in found if f.split("/")[0] != "sweep" and f not in ALLOWED}
    assert not outside, f"distributed imported outside the sweep: {sorted(outside)}"
    in_sweep = {f for f in found if f.startswith("sweep/")}
    assert in_sweep == {"sweep/run.py"}, f"within the sweep only run.py imports it: {in_sweep}"


def test_the_cli_and_the_sweep_commands_modules_do_not_load_distributed():
    code = (
        "import sys, harmony_ref.cli as c; c.build_parser(); "
        "import harmony_ref.commands.sweep, harmony_ref.commands.pick, "
        "harmony_ref.sweep.grid, harmony_ref.sweep.pick, harmony_ref.sweep.store; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('distributed', 'dask')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
