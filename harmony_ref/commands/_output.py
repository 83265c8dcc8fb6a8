"""Shared output helpers: a readable table by default, JSON for machines."""

from __future__ import annotations

import json
import math
import sys


def _fmt(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.4g}"
        # .4g would switch to 1.265e+04 from 10,000 up: print whole numbers there instead.
        if abs(v) >= 10_000:
            return f"{v:,.0f}"
        return f"{v:,.4g}" if abs(v) >= 1000 else f"{v:.4g}"
    return str(v)


def print_table(df, title: str | None = None, file=None) -> None:
    """Print a pandas DataFrame as a rich table (plain text when not a terminal)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file or sys.stdout, width=max(100, min(200, len(df.columns) * 18)))
    table = Table(title=title, show_lines=False)
    for col in df.columns:
        table.add_column(str(col), justify="right" if df[col].dtype.kind in "if" else "left")
    for row in df.itertuples(index=False):
        table.add_row(*(_fmt(v) for v in row))
    console.print(table)


def add_json_flag(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=float)
    sys.stdout.write("\n")
