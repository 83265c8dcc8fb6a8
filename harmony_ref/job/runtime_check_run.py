"""Running `harmony-ref check-runtime`'s checks: each RuntimeCheck (job/runtime_check.py) run
in turn in one scratch folder, its run record written, a template that does not run (a
BackendError) kept as an error row while the others still run, and the table rows of both.
The command parses its flags into checks, shows progress and prints; the work is here.

    runs = run_checks(checks, ref, "results/runs")   # records written, errors collected
    rows = runs.rows()                                # speed beside accuracy, errors last

A device that leaves mid-session (DeviceGone) stops the whole run: nothing more can run on it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harmony_ref.job.runtime_check import Reference, RuntimeCheck
from harmony_ref.job.runtime_check_judge import CheckResult, result_record, run_check, table_row
from harmony_ref.metrics import Metrics


def check_device(session, device: str) -> str:
    """The device a check names in its record: `device` (--device, "host" by default), or with a
    session on "host", the session's transport and serial."""
    if session is not None and device == "host":
        return f"{session.transport}:{session.device.serial or 'host'}"
    return device


@dataclass
class CheckRuns:
    done: list[tuple[RuntimeCheck, CheckResult, Path]] = field(default_factory=list)
    errors: list[tuple[RuntimeCheck, str]] = field(default_factory=list)  # ran no result

    def rows(self) -> list[dict]:
        """One table row per check: the judged ones, then the errors."""
        rows = [table_row(c.label, r.metrics) for c, r, _ in self.done]
        return rows + [
            dict(table_row(c.label, Metrics()), verdict="error (no result)") for c, _ in self.errors
        ]

    def all_accurate(self) -> bool:
        return all(r.accurate for _, r, _ in self.done)


def run_checks(
    checks: list[RuntimeCheck],
    ref: Reference | None,
    out_dir: str | Path,
    progress=None,
    on_start: Callable[[RuntimeCheck], None] | None = None,
    on_error: Callable[[RuntimeCheck, str], None] | None = None,
) -> CheckRuns:
    """Run every check against `ref` (None for MindSpore Lite's), writing each result's run
    record under `out_dir`; `on_start` / `on_error` are told as each check starts or fails to
    run. `progress`: a device session's progress callback."""
    from harmony_ref.lab.errors import BackendError
    from harmony_ref.track.record import write_record

    runs = CheckRuns()
    with tempfile.TemporaryDirectory(prefix="harmony-ref-check-") as work:
        for check in checks:
            if on_start is not None:
                on_start(check)
            try:
                result = run_check(check, ref, work, progress)
            except BackendError as e:  # no result, no record; the others still run
                if on_error is not None:
                    on_error(check, str(e))
                runs.errors.append((check, str(e)))
                continue
            path = write_record(result_record(check, result, ref), out_dir)
            runs.done.append((check, result, path))
    return runs
