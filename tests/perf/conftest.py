"""Shared fixtures for the pytest-benchmark microbenchmarks in tests/perf (`tox -e perf`).

- `copy_bandwidth_gbps` (session): measured memory bandwidth of this machine, numpy `copyto`
  of a buffer far larger than the last-level cache, counting bytes read plus written. Benchmarks
  divide their achieved GB/s by it to say how far they are from the memory limit.
- `perf_summary` (session): benchmarks append one row each (a dict of printable columns); when
  benchmarks are enabled, the rows are printed as a table at the end of the run. Rows with a
  "table" key are printed as tables of their own, one per value (test_perf_matmul.py).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from harmony_ref.units import GB, MB

COPY_BUFFER_BYTES = 256 * MB  # well past any L3 on the machines we run on
COPY_REPEATS = 5

_summary_rows: list[dict] = []


def measure_copy_bandwidth_gbps(nbytes: int = COPY_BUFFER_BYTES, repeats: int = COPY_REPEATS) -> float:
    """Best-of-`repeats` numpy copyto bandwidth in GB/s (read + write bytes)."""
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in outside the timing
    best = min(_timed(np.copyto, dst, src) for _ in range(repeats))
    return 2 * src.nbytes / best / GB


def _timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


@pytest.fixture(scope="session")
def copy_bandwidth_gbps() -> float:
    return measure_copy_bandwidth_gbps()


@pytest.fixture(scope="session")
def perf_summary() -> list[dict]:
    return _summary_rows


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    session = getattr(config, "_benchmarksession", None)  # pytest-benchmark's; honours --benchmark-enable
    if not _summary_rows or session is None or session.disabled:
        return
    plain = [row for row in _summary_rows if "table" not in row]
    if plain:
        _write_table(terminalreporter, "perf summary (ratios and GB/s measured in this run)", plain)
    tables = dict.fromkeys(row["table"] for row in _summary_rows if "table" in row)
    for name in tables:
        rows = [{k: v for k, v in row.items() if k != "table"}
                for row in _summary_rows if row.get("table") == name]
        _write_table(terminalreporter, f"{name} (measured in this run)", rows)


def _write_table(terminalreporter, title: str, rows: list[dict]) -> None:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    cells = [[_fmt(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    terminalreporter.write_sep("-", title)
    terminalreporter.write_line("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    for r in cells:
        terminalreporter.write_line("  ".join(v.ljust(w) for v, w in zip(r, widths)))


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)

