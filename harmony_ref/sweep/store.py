"""Where a sweep keeps its points: `results/sweeps/<name>/`.

    points.parquet     one row per point (pyarrow): its key, status and error, the config's
                       fields as columns (`runtime`: the config's, else the profile's
                       default_runtime), every metric as a column, machine, worker, record path;
                       a lab's (sweep/lab.py) also the `serial` of the phone that measured it
    records/KEY.json   the point's run record (track/record.py's schema: the gate, compare and
                       `harmony-ref run`'s readers take it as it is)
    pending/*.parquet  rows written during a sweep, folded into points.parquet at its end
    grid.json          the grid of the last run
    .lock              held while a sweep runs (a second run of the same name is refused)

Consistency. Rows reach disk in small parquet files, each written to a temporary name and
renamed into place, every couple of seconds and when the sweep ends or is interrupted; at the
end they are folded into points.parquet (again a temporary file and a rename) and deleted.
A reader takes points.parquet plus any pending files and keeps the newest row per point
(`config_key`), so a run killed at any moment leaves a readable sweep, and a point computed
twice (its worker died after finishing it, or it was rerun) is one row. Records are renamed into
place the same way, without an fsync each (10,000 of them would take a minute); the directory
is fsynced once per flush.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from pathlib import Path

# The policy's compression (config.compression, quant/compress.py): ratios 0 and the rest None
# for a policy without [prune] / [activations]; prune_blocks is the per-block table as JSON.
PRUNE_FIELDS = ("ffn", "heads", "head_unit", "score", "samples", "sample_tokens", "seed")
ACTIVATION_FIELDS = ("granularity", "calibration", "samples", "sample_tokens", "seed", "alpha")
COMPRESSION_FIELDS = (
    *(f"prune_{f}" for f in PRUNE_FIELDS),
    "prune_blocks",
    *(f"activations_{f}" for f in ACTIVATION_FIELDS),
)
ROW_FIELDS = (
    "key",
    "config_key",
    "code_version",
    "status",
    "error",
    "model",
    "policy",
    "profile",
    "runtime",
    "backend",
    "prompt_tokens",
    "new_tokens",
    "context_tokens",
    "batch",
    "kv_dtype",
    *COMPRESSION_FIELDS,
    "parts",
    "machine",
    "cpu_model",
    "worker",
    "seconds",
    "utc_time",
    "measured_metrics",
    "record",
)
FLUSH_EVERY_S = 2.0


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_into(path: Path, data: bytes) -> None:
    """Write to a temporary name beside `path`, then rename over it (no fsync)."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_name(name: str) -> str:
    ok = name and all(c.isalnum() or c in "-_." for c in name) and not name.startswith(".")
    if not ok:
        raise ValueError(f"--name: {name!r}: use letters, digits, '-', '_' and '.' only")
    return name


class SweepStore:
    def __init__(
        self, name: str, root: str | Path = "results/sweeps", history=None, sut: dict | None = None
    ):
        """`history` (track/history.py's History): where every point's record is also appended,
        with `sut` (the system under test) in its provenance; None: no history."""
        self.name = check_name(name)
        self.history, self.sut = history, sut
        self.dir = Path(root) / name
        self.records = self.dir / "records"
        self.pending = self.dir / "pending"
        self.points_path = self.dir / "points.parquet"
        self._rows: list[dict] = []
        self._last_flush = time.monotonic()
        self._lock_fd = None

    def check_outputs(self) -> None:
        """Before the work: the sweep's folders and files can be written (a ValueError naming
        --out-dir and the path otherwise)."""
        from harmony_ref._io import check_output_dir, check_output_file

        for d in (self.dir, self.records, self.pending):
            check_output_dir(d, "--out-dir")
        for f in (self.points_path, self.dir / "grid.json"):
            check_output_file(f, "--out-dir")

    # --- the lock ------------------------------------------------------------------------------
    def lock(self) -> None:
        import fcntl

        for d in (self.records, self.pending):
            d.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ValueError(
                f"{self.dir}: sweep {self.name!r} is running in another process (its .lock is held)"
            ) from None
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- reading -------------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.points_path.is_file() or any(self.pending.glob("*.parquet"))

    def read(self):
        """All rows, the newest per config_key (pandas DataFrame; empty when there are none)."""
        import pandas as pd

        files = [self.points_path] if self.points_path.is_file() else []
        if self.pending.is_dir():
            files += sorted(self.pending.glob("*.parquet"))  # named by time: oldest first
        frames = []
        for f in files:
            try:
                frames.append(pd.read_parquet(f))
            except Exception as e:  # noqa: BLE001 - pyarrow raises several types
                raise ValueError(f"{f}: not a readable parquet file ({e})") from e
        if not frames:
            return pd.DataFrame(columns=list(ROW_FIELDS))
        df = pd.concat(frames, ignore_index=True)
        return df.drop_duplicates("config_key", keep="last").reset_index(drop=True)

    def reusable(self, retry_failed: bool = False) -> dict[str, str]:
        """key -> status of the points a rerun need not compute: ok ones, and failed ones
        unless `retry_failed` (unavailable ones, an input out of reach, are always retried)."""
        df = self.read()
        keep = {"ok"} if retry_failed else {"ok", "failed"}
        return {k: s for k, s in zip(df["key"], df["status"]) if s in keep}

    # --- writing -------------------------------------------------------------------------------
    def write_grid(self, grid: dict) -> None:
        _replace_into(self.dir / "grid.json", (json.dumps(grid, indent=2) + "\n").encode())

    def add(self, result: dict, point) -> dict:
        """Write a point's record and queue its row; returns the row."""
        key = result["key"]
        record = result["record"]
        if self.sut is not None:
            record["provenance"]["sut"] = dict(self.sut)
        path = self.records / f"{key}.json"
        # One line, not indented: json's C encoder (indent= takes the pure-Python one, 10x slower)
        _replace_into(path, (json.dumps(record, default=float, allow_nan=False) + "\n").encode())
        if self.history is not None:
            self.history.append(record, str(path))
        row = make_row(point, result, str(path.relative_to(self.dir)))
        self._rows.append(row)
        if time.monotonic() - self._last_flush > FLUSH_EVERY_S:
            self.flush()
        return row

    def flush(self) -> None:
        """Queued rows to a new pending parquet file."""
        if not self._rows:
            return
        import pandas as pd

        name = f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(3)}.parquet"
        tmp = self.pending / f".tmp-{name}"
        pd.DataFrame(self._rows).to_parquet(tmp, index=False)
        os.replace(tmp, self.pending / name)
        _fsync_dir(self.records)
        _fsync_dir(self.pending)
        self._rows = []
        self._last_flush = time.monotonic()

    def compact(self) -> None:
        """Fold pending files into points.parquet (newest row per point), then delete them."""
        self.flush()
        pending = sorted(self.pending.glob("*.parquet"))
        if not pending:
            return
        df = self.read()
        tmp = self.dir / f".tmp-points-{os.getpid()}.parquet"
        df.to_parquet(tmp, index=False)
        os.replace(tmp, self.points_path)
        _fsync_dir(self.dir)
        for f in pending:
            f.unlink(missing_ok=True)


def compression_columns(comp: dict) -> dict:
    """points.parquet's compression columns of a config's `compression` table."""
    prune, act = comp.get("prune") or {}, comp.get("activations") or {}
    out = {f"prune_{f}": prune.get(f) for f in PRUNE_FIELDS}
    out["prune_ffn"], out["prune_heads"] = prune.get("ffn", 0.0), prune.get("heads", 0.0)
    out["prune_blocks"] = json.dumps(prune["blocks"]) if prune.get("blocks") else None
    out.update({f"activations_{f}": act.get(f) for f in ACTIVATION_FIELDS})
    return out


def row_runtime(cfg: dict) -> str:
    """The runtime a point ran on: its config's, else its profile's default_runtime ("" for a
    profile that names none, or one that no longer loads)."""
    from harmony_ref.device.soc import runtime_name

    try:
        return runtime_name(cfg["profile"], cfg.get("runtime", ""))
    except ValueError:
        return cfg.get("runtime", "")


def make_row(point, result: dict, record_path: str) -> dict:
    from harmony_ref.sweep.grid import SCENARIO_AXES, code_version

    rec = result["record"]
    cfg = rec["config"]
    prov = rec["provenance"]
    row = {
        "key": point.key,
        "config_key": point.config_key,
        "code_version": code_version(),
        "status": result["status"],
        "error": result["error"],
        "model": cfg["model"],
        "policy": cfg["policy"],
        "profile": cfg["profile"],
        "runtime": row_runtime(cfg),
        "backend": cfg["backend"],
    }
    if point.phone:  # a lab point (sweep/lab.py): the phone that measured it
        row["serial"] = point.phone
    for axis in SCENARIO_AXES:
        row[axis] = cfg.get(axis, "fp16") if axis == "kv_dtype" else cfg["scenario"][axis]
    row.update(compression_columns(cfg.get("compression", {})))
    measured = [n for n, m in rec["metrics"].items() if m["kind"] == "measured"]
    row.update(
        {
            "parts": ",".join(point.parts),
            "machine": prov["hostname"],
            "cpu_model": prov["cpu_model"],
            "worker": result["worker"],
            "seconds": float(result["seconds"]),
            "utc_time": prov["utc_time"],
            "measured_metrics": ",".join(measured),
            "record": record_path,
        }
    )
    for name, m in rec["metrics"].items():
        if name in row:
            raise RuntimeError(f"metric {name!r} has the name of a points.parquet column")
        row[name] = float(m["value"])
    return row
