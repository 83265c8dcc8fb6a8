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
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def _nonfinite_path(obj, path: str = "") -> str | None:
    """The path ('rows[2].ttft_ms') of the first NaN or infinity in `obj`, else None."""
    if isinstance(obj, float):
        return None if math.isfinite(obj) else (path or "<top level>")
    if isinstance(obj, dict):
        items = ((f"{path}.{k}" if path else str(k), v) for k, v in obj.items())
    elif isinstance(obj, (list, tuple)):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(obj))
    else:
        return None
    return next((p for p in (_nonfinite_path(v, k) for k, v in items) if p), None)


def json_text(obj) -> str:
    """Strict JSON (RFC 8259: no NaN or Infinity, which Python's json would write and most
    parsers refuse); a non-finite number is a ValueError naming where it is."""
    obj = json.loads(json.dumps(obj, default=float))  # numpy scalars -> floats, tuples -> lists
    bad = _nonfinite_path(obj)
    if bad is not None:
        raise ValueError(f"--json output: field '{bad}' is not a finite number")
    return json.dumps(obj, indent=2, sort_keys=False, allow_nan=False)


def print_json(obj) -> None:
    sys.stdout.write(json_text(obj) + "\n")
