"""What a sweep's workers run: batches of points, each through the main job itself (job/main.py
run_job), so a sweep point measures and records exactly what `harmony-ref run` does for the same
config, and the shared parts once per group of points, handed to run_job as given. Plain Python
and picklable arguments: the same functions
run in this process (`--workers 0`) or on a Dask worker anywhere; nothing here imports Dask.

    rows = run_batch(points, shared)             # one result per point: record dict, timings
    shared[key] = run_shared("accuracy", config)  # once per shared key, before the points

Shared work. A part listed in SHARED_PARTS does not depend on the phone: the accuracy part runs
real weights on this CPU (today MiniLM-L6 under the policy; the decoder's LM accuracy, with its
disk cache of FP32 reference logits, when it lands), so the profile, the device backend and its
options do not enter it. Its result is computed once per `shared_key` (the config without those
fields) and given to every point with that key, not once per phone. Within one model the first
shared task of the sweep runs before the others (`warm_key`: the model; the Dask driver makes
the rest depend on it), so whatever the part caches on disk for a model (its FP32 reference,
the downloaded weights) is computed once, not by several workers at once.

A lab point (sweep/lab.py) runs the command backend through its phone's session; a phone that
left mid-session (DeviceGone) fails the point's part that ran on it with the session's one-line
reason (run_job's `gone_fails`), where `harmony-ref run` would stop: the other phones' points
go on.

`HARMONY_REF_SWEEP_TRACE=FILE` appends one line per evaluation ("point KEY PID" or "shared KEY
PID"): an audit of what was computed, which the tests count.
"""

from __future__ import annotations

import json
import os
import socket
import time

from harmony_ref.metrics import Metrics
from harmony_ref.track.record import Record

SHARED_PARTS = ("accuracy",)
# what a shared part does not read
PHONE_FIELDS = ("profile", "runtime", "backend", "backend_options")


def shared_key(part: str, config: dict) -> str:
    """The group of points whose `part` result is the same: the config minus the phone (for the
    accuracy part, only what it reads: job/main.py accuracy_inputs)."""
    import hashlib

    if part == "accuracy":  # it reads only the decoder it scores, the policy and the KV dtype
        from harmony_ref.job.main import accuracy_inputs

        rest = accuracy_inputs(config)
    else:
        rest = {k: v for k, v in config.items() if k not in PHONE_FIELDS}
    text = json.dumps({"part": part, "config": rest}, sort_keys=True)
    return f"{part}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def warm_key(part: str, config: dict) -> str:
    """Shared tasks with the same warm key reuse one on-disk cache: the first runs alone."""
    if part == "accuracy":
        from harmony_ref.job.main import accuracy_inputs

        return f"{part}:{accuracy_inputs(config)['accuracy_model']}"
    return f"{part}:{config['model']}"


def _trace(kind: str, key: str) -> None:
    path = os.environ.get("HARMONY_REF_SWEEP_TRACE")
    if path:
        with open(path, "a") as f:  # O_APPEND: one short line per write, never interleaved
            f.write(f"{kind} {key} {os.getpid()}\n")


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_shared(part: str, config: dict, key: str, after=None) -> dict:
    """Run one shared part for `config` (any point of its group): {"metrics", "entry"}.
    `after` is ignored: passing another task's result orders this one after it."""
    from harmony_ref.config import RunConfig
    from harmony_ref.job.main import PARTS, run_part_entry

    _trace("shared", key)
    by_name = {p.name: p for p in PARTS}
    got, entry = run_part_entry(by_name[part], RunConfig.from_dict(config, "sweep point"))
    entry = {k: v for k, v in entry.items() if k != "traceback"} | {
        "shared_key": key,
        "worker": worker_name(),
    }
    return {"metrics": got.to_dict(), "entry": entry}


def run_batch(
    points: list[dict], shared: dict | None = None, shared_parts: tuple[str, ...] = SHARED_PARTS
) -> list[dict]:
    """Evaluate points (Point fields as dicts) and return one result each:
    {"key", "record": Record.to_dict(), "status", "error", "seconds", "worker"}.
    `shared`: shared_key -> run_shared result, for the points' `shared_parts`."""
    from harmony_ref.track.record import collect_provenance

    provenance = collect_provenance()  # once per batch: the git calls cost ~18 ms
    return [run_point(p, provenance, shared or {}, shared_parts) for p in points]


def run_point(
    point: dict, provenance: dict, shared: dict, shared_parts: tuple[str, ...] = SHARED_PARTS
) -> dict:
    """One point through the main job (job/main.py run_job), its shared parts taken from
    `shared` instead of run again; a point whose config is bad is a record of failed parts."""
    from harmony_ref.config import RunConfig
    from harmony_ref.job.main import part_names, run_job, skipped_entry

    _trace("point", point["key"])
    t0 = time.perf_counter()
    config = None
    if not point["error"]:
        try:
            config = RunConfig.from_dict(point["config"], "sweep point")
        except ValueError as e:
            point = {**point, "error": f"bad config: {e}"}
    if config is None:
        parts = {
            n: {"status": "failed", "detail": point["error"], "metrics": []}
            if n in point["parts"]
            else skipped_entry()
            for n in part_names()
        }
        record = Record(point["config"], Metrics(), provenance, parts)
    else:
        given = {}
        for name in shared_parts:
            if name in point["parts"]:
                got = shared.get(shared_key(name, point["config"]))
                given[name] = (
                    (Metrics.from_dict(got["metrics"]), got["entry"])
                    if got is not None
                    else (
                        Metrics(),
                        {
                            "status": "failed",
                            "metrics": [],
                            "detail": "its shared task did not run",
                        },
                    )
                )
        record = run_job(
            config,
            only=tuple(point["parts"]),
            show_progress=False,
            provenance=provenance,
            given=given,
            gone_fails=True,  # a lab phone that left fails its point; the sweep goes on
        )
    status, error = point_status(record.parts, point["parts"])
    return {
        "key": point["key"],
        "record": record.to_dict(),
        "status": status,
        "error": error,
        "seconds": time.perf_counter() - t0,
        "worker": worker_name(),
    }


def point_status(parts: dict, requested) -> tuple[str, str]:
    """ok when every requested part is; else failed (any failed) or unavailable, with the
    first such part's detail."""
    bad = [(n, parts[n]) for n in requested if parts[n]["status"] != "ok"]
    if not bad:
        return "ok", ""
    failed = [(n, p) for n, p in bad if p["status"] == "failed"]
    name, p = (failed or bad)[0]
    return ("failed" if failed else "unavailable"), f"{name}: {p['detail']}"
