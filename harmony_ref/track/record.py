"""Run records: the JSON result of measuring one config, with a versioned schema.

A record holds
- `config`: the run config's dict form (`RunConfig.to_dict`, harmony_ref/config.py): model,
  policy, profile, scenario (prompt/new/context tokens, batch) and backend (plus
  `backend_options`, e.g. a command backend's command and output format);
- `metrics`: `Metrics.to_dict()` (value, unit, direction, kind exact|measured, raw samples of
  measured metrics where the backend has them, flags);
- `parts`: which parts of the job ran, were skipped, or were not available (and why);
- `provenance`: git commit and dirty flag, harmony-ref/Python/numpy/numba versions, CPU model,
  cores, Numba threads, hostname, UTC time; with `--sut DIR`, `sut`: the system under test's
  repository, commit, `git describe` and dirty flag (track/history.py).

Every record written is also appended to the run history (track/history.py).

Records are written atomically (a temporary file in the target directory, fsync, then a hard link
or rename into place), so a killed writer never leaves a half file, and record names carry a UTC
timestamp, the pid and a random suffix and are claimed exclusively, so two runs finishing in the
same second never overwrite each other.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import socket
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from harmony_ref._io import write_text_atomic
from harmony_ref.config import check_config_dict
from harmony_ref.metrics import DIRECTIONS, KINDS, Metrics, domain_error, unit_error

if TYPE_CHECKING:
    from harmony_ref.track.history import History

SCHEMA_VERSION = 1
PART_STATUSES = ("ok", "skipped", "unavailable", "failed")
PROVENANCE_FIELDS = (
    "git_commit",
    "git_dirty",
    "harmony_ref_version",
    "python_version",
    "numpy_version",
    "numba_version",
    "cpu_model",
    "cpu_cores",
    "numba_threads",
    "hostname",
    "utc_time",
)


@dataclass
class Record:
    config: dict  # RunConfig.to_dict(): the record is data; RunConfig.from_dict reads it back
    metrics: Metrics
    provenance: dict
    parts: dict = field(default_factory=dict)  # part name -> {"status": ..., "detail": ...}
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict:
        return {
            "schema_version": self.schema_version,
            "config": self.config,
            "metrics": self.metrics.to_dict(),
            "parts": self.parts,
            "provenance": self.provenance,
        }


# --- provenance -------------------------------------------------------------------------------


def collect_provenance() -> dict:
    """Where and with what a record was made. Git fields are None outside a git checkout."""
    import numpy

    import harmony_ref
    from harmony_ref._cpus import cpu_model
    from harmony_ref.track.history import git_out

    repo = Path(harmony_ref.__file__).resolve().parent.parent
    if "site-packages" in repo.parts:  # an installed copy (tox, asv): the checkout is where we run
        repo = Path.cwd()
    commit = git_out(["rev-parse", "HEAD"], repo, timeout_s=10)
    status = git_out(["status", "--porcelain", "--untracked-files=no"], repo, timeout_s=10)
    try:
        import numba

        numba_version, numba_threads = numba.__version__, int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - numba is a dependency
        numba_version, numba_threads = None, None
    return {
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
        "harmony_ref_version": harmony_ref.__version__,
        "python_version": platform.python_version(),
        "numpy_version": numpy.__version__,
        "numba_version": numba_version,
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "numba_threads": numba_threads,
        "hostname": socket.gethostname(),
        "utc_time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "argv": list(sys.argv),
    }


# --- validation -------------------------------------------------------------------------------


def _require(cond: bool, source: str, where: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{source}: field '{where}': {msg}")


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def validate_record_dict(data, source: str) -> None:
    """Raise ValueError naming the file and the field when `data` is not a valid record."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: a run record must be a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    _require("schema_version" in data, source, "schema_version", "missing")
    _require(
        version == SCHEMA_VERSION,
        source,
        "schema_version",
        f"is {version!r}, this harmony-ref reads version {SCHEMA_VERSION} "
        "(re-create the record with `harmony-ref run`)",
    )
    for key in ("config", "metrics", "provenance"):
        _require(
            isinstance(data.get(key), dict),
            source,
            key,
            f"missing or not an object: {data.get(key)!r}",
        )
    check_config_dict(data["config"], source)
    for name, m in data["metrics"].items():
        where = f"metrics.{name}"
        _require(isinstance(m, dict), source, where, f"must be an object, got {m!r}")
        _require(
            _is_number(m.get("value")),
            source,
            f"{where}.value",
            f"must be a number, got {m.get('value')!r}",
        )
        _require(
            isinstance(m.get("unit"), str),
            source,
            f"{where}.unit",
            f"must be a string, got {m.get('unit')!r}",
        )
        _require(
            m.get("direction") in DIRECTIONS,
            source,
            f"{where}.direction",
            f"must be one of {DIRECTIONS}, got {m.get('direction')!r}",
        )
        _require(
            m.get("kind") in KINDS,
            source,
            f"{where}.kind",
            f"must be one of {KINDS}, got {m.get('kind')!r}",
        )
        unit = m["unit"]
        problem = unit_error(name, unit)
        if problem:
            raise ValueError(f"{source}: field '{where}.unit' = {problem}")
        problem = domain_error(name, unit, m["value"])
        if problem:
            raise ValueError(f"{source}: field '{where}.value' = {problem}")
        samples = m.get("samples", [])
        _require(
            isinstance(samples, list) and all(_is_number(s) for s in samples),
            source,
            f"{where}.samples",
            "must be a list of numbers",
        )
        bad = [domain_error(name, unit, s) for s in samples if domain_error(name, unit, s)]
        if bad:
            raise ValueError(f"{source}: field '{where}.samples': a sample = {bad[0]}")
        flags = m.get("flags", [])
        _require(
            isinstance(flags, list) and all(isinstance(f, str) for f in flags),
            source,
            f"{where}.flags",
            "must be a list of strings",
        )
    for key in PROVENANCE_FIELDS:
        _require(key in data["provenance"], source, f"provenance.{key}", "missing")
    parts = data.get("parts", {})
    _require(isinstance(parts, dict), source, "parts", "must be an object")
    for name, p in parts.items():
        _require(
            isinstance(p, dict) and p.get("status") in PART_STATUSES,
            source,
            f"parts.{name}.status",
            f"must be one of {PART_STATUSES}, got {p!r}",
        )


def record_from_dict(data: dict, source: str = "<record>") -> Record:
    validate_record_dict(data, source)
    return Record(
        config=data["config"],
        metrics=Metrics.from_dict(data["metrics"]),
        provenance=data["provenance"],
        parts=data.get("parts", {}),
        schema_version=data["schema_version"],
    )


def load_record(path: str | Path) -> Record:
    """Read and validate a record; every problem is a ValueError naming the file and field."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: run record does not exist")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e}); the file is corrupt or truncated") from e
    return record_from_dict(data, str(path))


# --- atomic writing (harmony_ref/_io.py) -----------------------------------------------------


def write_json_atomic(path: str | Path, data, overwrite: bool = True) -> Path:
    """Write `data` as JSON to `path` atomically (see write_text_atomic)."""
    return write_text_atomic(
        path, json.dumps(data, indent=2, default=float, allow_nan=False) + "\n", overwrite
    )


def record_filename(config: dict) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    safe = "-".join(str(config.get(k, "x")) for k in ("model", "policy", "profile"))
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in safe)
    return f"run-{stamp}-{safe}-p{os.getpid()}-{secrets.token_hex(4)}.json"


FAILED_DIR = "failed"  # under out_dir: records of runs in which nothing but failures happened


def nothing_succeeded(record: Record) -> bool:
    """No part ran ok and at least one failed: not a result anyone should gate on."""
    statuses = [p.get("status") for p in record.parts.values()]
    return "ok" not in statuses and "failed" in statuses


def write_record(
    record: Record, out_dir: str | Path, history: History | None = None, sut: dict | None = None
) -> Path:
    """Write a new record file under out_dir and return its path; never overwrites one. A record
    in which no part succeeded goes to out_dir/failed/, where `latest_record` does not look.
    Every record written is also appended to the run history (track/history.py): `history`, or
    the default one for `out_dir`; `sut` (history.sut_info) goes into its provenance first."""
    if sut is not None:
        record.provenance["sut"] = dict(sut)
    data = record.to_dict()
    validate_record_dict(data, "<record being written>")
    if history is None:
        from harmony_ref.track.history import open_history

        history = open_history(None, out_dir)
    out_dir = Path(out_dir)
    if nothing_succeeded(record):
        out_dir = out_dir / FAILED_DIR
    for _attempt in range(100):
        try:
            path = write_json_atomic(
                out_dir / record_filename(record.config), data, overwrite=False
            )
        except FileExistsError:
            continue
        history.append(data, str(path))
        return path
    raise RuntimeError(f"could not find a free record name in {out_dir}")  # pragma: no cover


def latest_record(out_dir: str | Path) -> Path | None:
    files = sorted(Path(out_dir).glob("run-*.json"))
    return files[-1] if files else None
