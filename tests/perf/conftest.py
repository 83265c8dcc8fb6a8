"""Shared fixtures for the pytest-benchmark microbenchmarks in tests/perf (`tox -e perf`).

- `copy_bandwidth_gbps` (session): measured memory bandwidth of this machine, numpy `copyto`
  of a buffer far larger than the last-level cache, counting bytes read plus written. Benchmarks
  divide their achieved GB/s by it to say how far they are from the memory limit.
- `perf_summary` (session): benchmarks append one row each (a dict of printable columns); when
  benchmarks are enabled, the rows are printed at the end of the run as tables no wider than
  SUMMARY_WIDTH (format_summary: rows grouped by their columns, a column that is the same on
  every row of a group said once in its title). Rows with a "table" key are printed as tables
  of their own, one per value (test_perf_matmul.py).
- `relative_samples(target, reference)`: what `tox -e perf` gates on. This 2-core VM's speed
  drifts by up to 1.7x over minutes (neighbours, the host), in CPU time too, so a time compared
  with last hour's says little; a time relative to a reference measured in the same seconds
  does. Per round, a block of target calls and a block of reference calls run back to back,
  and the round's sample is the ratio of their mean CPU times (lower is better); the blocks run
  target, reference, reference, target, so a linear drift within the round cancels. Kernels are
  relative to their NumPy baseline, compiled code without one (the thermal stepper) to
  numba_probe, a fixed compiled loop, and pure-Python code (predictions) to reference_probe, a
  fixed pure-Python workload: compiled code and the interpreter drift apart on this machine, so
  each is timed against its own kind (bench/common.py, which the asv suite uses the same way).
  benchmark.extra_info keeps the samples; harmony_ref/track/perf.py reads them.
- `one_thread` (session, autouse): Numba and OpenBLAS on one thread. On a shared 2-core machine a
  parallel kernel whose worker is preempted waits a scheduler slice (a 1 ms kernel timed at
  12 ms); test_perf_thread_scaling measures two threads apart.
"""

from __future__ import annotations

import numpy as np
import pytest

# one copy, shared with asv
from bench.common import numba_probe, reference_probe, relative_samples  # noqa: F401
from harmony_ref.backends.host_timing import interleaved_times_s
from harmony_ref.units import GB, MB

COPY_BUFFER_BYTES = 256 * MB  # well past any L3 on the machines we run on
COPY_REPEATS = 5
THREADS = 1
SUMMARY_WIDTH = 100


_summary_rows: list[dict] = []


def gate_relative(benchmark, target, reference, against: str) -> None:
    """Store what `tox -e perf` gates on in benchmark.extra_info (when timing is on)."""
    if not benchmark.enabled:
        return
    samples = relative_samples(target, reference)
    benchmark.extra_info.update(
        gate_samples=samples, gate_value=float(np.median(samples)), gate_unit=f"x {against}"
    )


def measure_copy_bandwidth_gbps(
    nbytes: int = COPY_BUFFER_BYTES, repeats: int = COPY_REPEATS
) -> float:
    """Best-of-`repeats` numpy copyto bandwidth in GB/s (read + write bytes)."""
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in outside the timing
    best = min(interleaved_times_s([lambda: np.copyto(dst, src)], repeats)[0])
    return 2 * src.nbytes / best / GB


@pytest.fixture(scope="session")
def copy_bandwidth_gbps() -> float:
    return measure_copy_bandwidth_gbps()


@pytest.fixture(scope="session")
def perf_summary() -> list[dict]:
    return _summary_rows


@pytest.fixture(scope="session")
def timing_enabled(request) -> bool:
    """Whether this run times (--benchmark-enable), for tests that time without the fixture."""
    session = getattr(request.config, "_benchmarksession", None)
    return session is not None and not session.disabled


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    from harmony_ref._threads import pinned_threads

    with pinned_threads(THREADS):
        yield


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    session = getattr(
        config, "_benchmarksession", None
    )  # pytest-benchmark's; honours --benchmark-enable
    if not _summary_rows or session is None or session.disabled:
        return
    plain = [row for row in _summary_rows if "table" not in row]
    if plain:
        terminalreporter.write_sep("-", "perf summary (ratios and GB/s measured in this run)")
        for line in format_summary(plain):
            terminalreporter.write_line(line)
    for name in dict.fromkeys(row["table"] for row in _summary_rows if "table" in row):
        rows = [
            {k: v for k, v in row.items() if k != "table"}
            for row in _summary_rows
            if row.get("table") == name
        ]
        columns = list(dict.fromkeys(k for row in rows for k in row))
        rows = [{k: row.get(k, "") for k in columns} for row in rows]  # one table, blanks kept
        terminalreporter.write_sep("-", f"{name} (measured in this run)")
        for line in format_summary(rows):
            terminalreporter.write_line(line)


# Column headers, shortened so a table fits SUMMARY_WIDTH.
SHORT = {
    "kernel_ms": "ms",
    "numpy_ms": "numpy_ms",
    "speedup_vs_numpy": "vs_numpy",
    "achieved_gbps": "GB/s",
    "fraction_of_copy_bw": "of_copy_bw",
    "copy_bandwidth_gbps": "copy_GB/s",
    "separate_kernels_ms": "separate_ms",
    "speedup_vs_separate": "vs_separate",
    "median_ms": "ms",
    "predictions_per_s": "pred/s",
    "hour_at_10ms_ms": "hour_ms",
    "steps_per_s": "steps/s",
    "vs_python_ref": "vs_py_ref",
}
NAME_WIDTH = 44
NAME_KEYS = ("benchmark", "contender")  # the row's name: a benchmark, or a matmul table's contender


def format_summary(rows: list[dict], width: int = SUMMARY_WIDTH) -> list[str]:
    """The rows as plain-text tables, every line at most `width` characters: rows with the same
    columns form a table; a column with one value over its whole table goes into the title;
    columns that still do not fit continue in a further table with the same benchmark names."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(tuple(k for k in row if k not in NAME_KEYS), []).append(row)
    lines = []
    for keys, group in groups.items():
        same = [k for k in keys if len(group) > 1 and len({_fmt(r[k]) for r in group}) == 1]
        cols = [k for k in keys if k not in same]
        title = ", ".join(f"{SHORT.get(k, k)} {_fmt(group[0][k])}" for k in same)
        names = [
            _fit(str(next((r[k] for k in NAME_KEYS if k in r), "")), NAME_WIDTH) for r in group
        ]
        name_w = max(len("benchmark"), *(len(n) for n in names))
        chunks, chunk, used = [], [], name_w
        for k in cols:
            w = max(len(SHORT.get(k, k)), *(len(_fmt(r[k])) for r in group))
            if chunk and used + 2 + w > width:
                chunks.append(chunk)
                chunk, used = [], name_w
            chunk.append((k, w))
            used += 2 + w
        chunks.append(chunk)
        if lines:
            lines.append("")
        if title:
            lines.append(_fit(title, width))
        for chunk in chunks:
            lines.append(
                "  ".join(
                    ["benchmark".ljust(name_w)] + [SHORT.get(k, k).rjust(w) for k, w in chunk]
                ).rstrip()
            )
            for n, r in zip(names, group):
                lines.append(
                    "  ".join([n.ljust(name_w)] + [_fmt(r[k]).rjust(w) for k, w in chunk]).rstrip()
                )
    return lines


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)
