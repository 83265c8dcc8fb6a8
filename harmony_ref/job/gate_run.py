"""The gate's workflow around `compare` (track/gate.py): read the baseline, get the record to
judge (a file, the newest in a folder, or a fresh run of the baseline's config), decide whether
a failing timing can be re-measured here, and replace the baseline.

    baseline = read_baseline(path, updating=False)
    current, current_path, fresh = current_record(None, "results/runs", baseline, path, default)
    remeasure, reason = remeasure_policy(current, fresh, no_rerun=False)
    report = compare(baseline, current, tolerances, remeasure, reason, ...)

Refusals are ValueErrors naming the file (exit 2 in the CLI). The baseline is only written by
`replace_baseline`, which first keeps the old file as <baseline>.prev.json and refuses a record
whose parts failed or whose runtime was flagged inaccurate.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

from harmony_ref._io import StagedOutputs
from harmony_ref.config import RunConfig
from harmony_ref.job.main import ran_parts, remeasure_fn, run_job
from harmony_ref.metrics import Metric
from harmony_ref.track.gate import too_few_valid_repeats
from harmony_ref.track.record import (
    Record,
    latest_record,
    load_record,
    write_record,
)


def prev_path(baseline: Path) -> Path:
    return baseline.with_name(baseline.stem + ".prev.json")


def read_baseline(path: Path, updating: bool, note=print) -> Record | None:
    """The baseline record, or None when `updating` and it is missing or not a valid record
    (`note` says so). Without `updating` a missing or corrupt baseline is bad input."""
    if not path.exists():
        if updating:
            return None
        raise ValueError(
            f"{path}: baseline does not exist; make one with `harmony-ref run` "
            f"then `harmony-ref gate --baseline {path} --current <record> "
            "--update-baseline`"
        )
    try:
        return load_record(path)
    except ValueError:
        if not updating:
            raise
        note(
            f"note: the existing baseline {path} is not a valid record; it is kept as "
            f"{prev_path(path)}"
        )
        return None


def current_record(
    current: str | None,
    out_dir: str,
    baseline: Record | None,
    baseline_path: Path,
    default_config: RunConfig,
    note=print,
    history=None,
    sut: dict | None = None,
) -> tuple[Record, Path, bool]:
    """(record, its path, made fresh here?). `current`: a record file, "latest" (the newest in
    `out_dir`), or None: a fresh run of the baseline's config and parts (the default config
    without a baseline), written to `out_dir` and appended to `history` (track/history.py) with
    the system under test `sut`."""
    if current == "latest":
        found = latest_record(out_dir)
        if found is None:
            raise ValueError(
                f"--current latest: no run record in {out_dir}; run `harmony-ref run` first"
            )
        current = str(found)
    if current:
        return load_record(current), Path(current), False
    config = (
        RunConfig.from_dict(baseline.config, str(baseline_path)) if baseline else default_config
    )
    record = run_job(config, only=ran_parts(baseline) if baseline else None)
    path = write_record(record, out_dir, history, sut)
    note(f"fresh run record: {path}")
    return record, path, True


def failed_parts(record: Record) -> dict[str, str]:
    return {n: p["detail"] for n, p in record.parts.items() if p["status"] == "failed"}


def remeasure_policy(
    current: Record, fresh: bool, no_rerun: bool
) -> tuple[Callable[[str], Metric] | None, str]:
    """How a failing measured metric is re-measured (confirm-on-rerun), or None and why not:
    only on the machine that made the record, never for a check-runtime record."""
    if no_rerun:
        return None, "--no-rerun given"
    if current.config.get("backend_options", {}).get("check") == "runtime":
        return None, "a check-runtime record (re-run `harmony-ref check-runtime`)"
    if "session" in current.parts:
        return None, "a `measure --session` record (re-run `harmony-ref measure --session`)"
    if fresh or current.provenance.get("hostname") == socket.gethostname():
        return remeasure_fn(current), ""
    return None, (
        f"the record was made on {current.provenance.get('hostname')!r}, "
        f"this is {socket.gethostname()!r}"
    )


def replace_baseline(baseline_path: Path, current: Record, current_path: Path) -> Path | None:
    """Write `current` as the baseline; the previous file (if any) is kept first as
    <baseline>.prev.json, whose path is returned. Refuses a failed or inaccurate record."""
    failed = failed_parts(current)
    if failed:
        raise ValueError(
            f"{current_path}: parts failed ({failed}); refusing to make it the baseline"
        )
    why = too_few_valid_repeats(current)
    if why:
        raise ValueError(f"{current_path}: {why}; refusing to make it the baseline")
    inaccurate = current.metrics.items.get("runtime_accurate")
    if inaccurate is not None and "inaccurate" in inaccurate.flags:
        raise ValueError(
            f"{current_path}: the runtime was flagged inaccurate "
            f"({inaccurate.description}); refusing to make it the baseline"
        )
    kept = None
    with StagedOutputs() as staged:  # the new baseline and the kept one land together
        if baseline_path.exists():
            kept = prev_path(baseline_path)
            staged.stage_bytes(kept, baseline_path.read_bytes())
        text = json.dumps(current.to_dict(), indent=2, default=float, allow_nan=False) + "\n"
        staged.stage_text(baseline_path, text)
        staged.commit()
    return kept


__all__ = [
    "current_record",
    "failed_parts",
    "prev_path",
    "read_baseline",
    "remeasure_policy",
    "replace_baseline",
]
