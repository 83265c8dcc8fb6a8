"""Shared output helpers: a readable table by default, JSON for machines."""

from __future__ import annotations

import json
import math
import sys

from harmony_ref._format import fmt_number


def print_table(df, title: str | None = None, file=None) -> None:
    """Print a pandas DataFrame as a rich table (plain text when not a terminal)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file or sys.stdout, width=max(100, min(200, len(df.columns) * 18)))
    table = Table(title=title, show_lines=False)
    for col in df.columns:
        table.add_column(str(col), justify="right" if df[col].dtype.kind in "if" else "left")
    for row in df.itertuples(index=False):
        table.add_row(*(fmt_number(v) for v in row))
    console.print(table)


def add_json_flag(parser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print machine-readable JSON instead of a table"
    )


def _no_nan(obj):
    """`obj` with every non-finite float as None (JSON null): an unset optional number (a
    profile's NaN "not given") must not print as NaN, which is not JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _no_nan(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_no_nan(v) for v in obj]
    return obj


def print_json(obj) -> None:
    json.dump(_no_nan(obj), sys.stdout, indent=2, sort_keys=False, default=float, allow_nan=False)
    sys.stdout.write("\n")
