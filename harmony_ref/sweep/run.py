"""Running a sweep: the points a store does not have yet, on a Dask cluster or in this process.

    summary = run_sweep(grid, SweepStore("phones"), workers=2)          # a LocalCluster
    summary = run_sweep(grid, store, scheduler="tcp://10.0.0.5:8786")   # a running cluster
    summary = run_sweep(grid, store, workers=0)                         # this process, no Dask

Without a scheduler a `distributed.LocalCluster` starts here: `workers` processes (default one
per core), one thread each, with Numba and BLAS on one thread (NUMBA_NUM_THREADS,
OMP_NUM_THREADS, OPENBLAS_NUM_THREADS in each worker's environment), so points never share a
core's threads with each other. On a cluster started by hand the workers should be started the
same way (README: `NUMBA_NUM_THREADS=1 dask worker ... --nthreads 1`).

How the work is cut. Cheap points (simulated backend, no host part) go in batches, a few tasks
per worker, so a 10,000-point sweep is some tens of tasks rather than 10,000 round trips; points
with a host part or a measured backend go one per task (each timed on one worker, whose machine
the record names). The shared parts (execute.SHARED_PARTS) are tasks of their own, once per
shared key, at a higher priority; the batches that need them depend on them, and the first
shared task of each model goes before the others of that model (execute.warm_key).

Faults. Every part's error is caught where it runs and recorded (execute.run_point); a task that
raises anyway, or whose worker died more often than Dask's `distributed.scheduler.allowed-failures`
(3 by default; a worker killed once just has its tasks recomputed elsewhere), makes all of its
points failed rows carrying the message. Only the driver writes (store.SweepStore), once per
point key, so a task finished twice is one row. Ctrl-C cancels what is left, folds what was
written into points.parquet and re-raises.

A lab (sweep/lab.py: the grid on phones, `--sessions`) runs each point as a task asking for its
phone's resource; without a scheduler its cluster is the local lab (one worker thread per
phone). Points of a phone no worker declares fail at once; a phone's worker gone for longer than
lab.LOST_WORKER_S fails what that phone had left; the summary counts each phone's points.

This module is the only one that imports `distributed`, inside the functions that use it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass

from harmony_ref.sweep.execute import SHARED_PARTS, run_batch, run_shared, shared_key, warm_key
from harmony_ref.sweep.grid import Grid, Point
from harmony_ref.sweep.lab import Lab, no_worker_message, resource_name
from harmony_ref.sweep.store import SweepStore

WORKER_ENV = {
    "NUMBA_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
CONNECT_TIMEOUT_S = 5
POLL_S = 0.1  # how often running tasks are checked against --timeout-s
TASKS_PER_WORKER = 4
MAX_POINTS_PER_TASK = 500
CHEAP_PARTS = ("predicted", "coldstart", "thermal", *SHARED_PARTS)


@dataclass
class SweepSummary:
    name: str
    points: int
    computed: int  # evaluated in this run and ok (or unavailable)
    reused: int  # found in the store
    failed: int  # evaluated in this run and failed
    tasks: int
    workers: int
    seconds: float
    where: str  # "in-process", "LocalCluster(2 workers)", or the scheduler's address
    points_path: str
    # a lab: serial -> {"points", "ok", "failed", "unavailable", "reused", "error": first failure}
    phones: dict = dataclasses.field(default_factory=dict)

    def line(self) -> str:
        return (
            f"sweep {self.name}: {self.points} points: {self.computed} computed, "
            f"{self.reused} reused, {self.failed} failed in {self.seconds:.1f} s "
            f"({self.tasks} tasks on {self.where}) -> {self.points_path}"
        )

    def phone_lines(self) -> list[str]:
        """A lab's: one line per phone, its counts and its first failure."""
        out = []
        for serial, c in self.phones.items():
            line = (
                f"  phone {serial}: {c['points']} points: {c['ok'] + c['unavailable']} "
                f"computed, {c['reused']} reused, {c['failed']} failed"
            )
            out.append(line + (f" (first: {c['error']})" if c["error"] else ""))
        return out

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def points_per_task(points: list[Point], grid: Grid, workers: int) -> int:
    cheap = grid.backend == "simulated" and set(grid.parts) <= set(CHEAP_PARTS)
    if not cheap or not points:
        return 1
    n = math.ceil(len(points) / (max(1, workers) * TASKS_PER_WORKER))
    return max(1, min(MAX_POINTS_PER_TASK, n))


def check_scheduler_address(address: str) -> str:
    host = address.split("://", 1)[-1]
    if "://" not in address or ":" not in host or not host.rsplit(":", 1)[1].isdigit():
        raise ValueError(
            f"--scheduler {address!r}: give a Dask scheduler address such as tcp://HOST:8786"
        )
    return address


def open_client(scheduler: str | None, workers: int):
    """(client, description). A scheduler that does not answer is a ValueError (exit 2)."""
    import logging

    from distributed import Client, LocalCluster

    if scheduler:
        check_scheduler_address(scheduler)
        try:
            client = Client(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s")
        except (OSError, TimeoutError) as e:
            raise ValueError(
                f"--scheduler {scheduler}: no Dask scheduler answered within "
                f"{CONNECT_TIMEOUT_S} s ({type(e).__name__}: {e})"
            ) from None
        n = len(client.scheduler_info().get("workers", {}))
        return client, f"{scheduler} ({n} workers)"
    cluster = LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        silence_logs=logging.ERROR,
        env=WORKER_ENV,
    )
    return Client(cluster), f"LocalCluster({workers} workers)"


def open_lab_cluster(phones):
    """(client, description): a local lab, one in-process worker thread per phone, each
    declaring that phone's resource."""
    import logging

    from distributed import Client, Scheduler, SpecCluster, Worker

    workers = {
        phone.resource: {
            "cls": Worker,
            "options": {"nthreads": 1, "resources": {phone.resource: 1}},
        }
        for phone in phones
    }
    cluster = SpecCluster(
        workers=workers,
        scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}},
        silence_logs=logging.ERROR,
    )
    return Client(cluster), f"a local lab ({len(phones)} phones)"


def cluster_resources(client) -> set[str]:
    """The resource names the cluster's workers declare now."""
    return {
        name
        for w in client.scheduler_info()["workers"].values()
        for name in (w.get("resources") or {})
    }


def run_sweep(
    grid: Grid | Lab,
    store: SweepStore,
    workers: int | None = None,
    scheduler: str | None = None,
    retry_failed: bool = False,
    console=None,
    show_progress: bool = True,
    client=None,
    on_result=None,
    batch_size: int | None = None,
    shared_parts: tuple[str, ...] = SHARED_PARTS,
    timeout_s: float | None = None,
) -> SweepSummary:
    """Compute the grid's (or lab's) points that `store` lacks and write them (see the module doc).
    `client`: an open distributed.Client to use (not closed here); `on_result(n_done, client)`
    is called in the driver after each finished task (client None in this process; the tests
    kill a worker from it). `shared_parts`: the parts computed once per shared key.
    `timeout_s`: a task running longer fails its points (Dask only; one task is one point
    unless the points are cheap simulated ones, batched)."""
    t0 = time.perf_counter()
    if workers is None:
        workers = os.cpu_count() or 1
    if workers < 0:
        raise ValueError(f"--workers {workers}: must be >= 0 (0: in this process, no Dask)")
    if timeout_s is not None and (
        not timeout_s > 0 or (workers == 0 and client is None and scheduler is None)
    ):
        raise ValueError(
            f"--timeout-s {timeout_s}: must be > 0, and needs Dask workers (a "
            "point running in this process cannot be stopped)"
        )
    points = grid.points()
    own_client, where = None, "in-process"
    if scheduler is not None and client is None:  # unreachable: an error before anything
        own_client, where = open_client(scheduler, workers)
    elif client is not None:
        where = f"a given client ({client.scheduler.address})"
    counts = {"ok": 0, "failed": 0, "unavailable": 0}
    try:
        store.lock()
    except BaseException:
        if own_client is not None:
            _close(own_client)
        raise
    try:
        store.write_grid({"name": store.name, **grid.to_dict()})
        have = store.reusable(retry_failed)
        todo = [p for p in points if p.key not in have]
        by_key = {p.key: p for p in todo}
        if own_client is None and client is None and workers > 0 and todo:
            if isinstance(grid, Lab):
                own_client, where = open_lab_cluster(grid.phones)
            else:
                own_client, where = open_client(None, workers)
        dask_client = client or own_client
        n_workers = (len(dask_client.scheduler_info()["workers"]) or 1) if dask_client else 1
        if not todo:
            where = "nothing to compute"
        size = batch_size or points_per_task(todo, grid, n_workers)
        batches = [todo[i : i + size] for i in range(0, len(todo), size)]
        shared = shared_tasks(todo, shared_parts)
        phones = _phone_counts(grid, points, todo)
        with _progress(console, show_progress, len(points), len(points) - len(todo)) as bar:
            task = bar.tasks[0].id

            def record(results: list[dict]) -> None:
                for r in results:
                    point = by_key.pop(r["key"], None)
                    if point is None:  # computed twice (a retried task): already written
                        continue
                    store.add(r, point)
                    counts[r["status"]] += 1
                    if point.phone:
                        c = phones[point.phone]
                        c[r["status"]] += 1
                        if r["status"] == "failed" and not c["error"]:
                            c["error"] = r["error"]
                    bar.update(task, advance=1, failed=counts["failed"])

            if dask_client is None:
                _run_here(batches, shared, shared_parts, record, on_result)
            else:
                _run_dask(dask_client, batches, shared, shared_parts, record, on_result, timeout_s)
    finally:
        try:
            if own_client is not None:
                _close(own_client)
            store.compact()
        finally:
            store.unlock()
    return SweepSummary(
        store.name,
        len(points),
        counts["ok"] + counts["unavailable"],
        len(points) - len(todo),
        counts["failed"],
        len(batches) + len(shared),
        n_workers,
        time.perf_counter() - t0,
        where,
        str(store.points_path),
        phones,
    )


def _phone_counts(grid, points: list[Point], todo: list[Point]) -> dict:
    """A lab's per-phone counts, zero but for the points already in the store."""
    if not isinstance(grid, Lab):
        return {}
    out = {
        p.serial: {"points": 0, "ok": 0, "failed": 0, "unavailable": 0, "reused": 0, "error": ""}
        for p in grid.phones
    }
    left = {p.key for p in todo}
    for p in points:
        out[p.phone]["points"] += 1
        out[p.phone]["reused"] += p.key not in left
    return out


def shared_tasks(points: list[Point], shared_parts=SHARED_PARTS) -> dict:
    """shared_key -> (part, config of its first point, warm key), in first-seen order."""
    out = {}
    for p in points:
        if p.error:
            continue
        for part in shared_parts:
            if part in p.parts:
                key = shared_key(part, p.config)
                out.setdefault(key, (part, p.config, warm_key(part, p.config)))
    return out


def _needed(batch: list[Point], shared_parts) -> set[str]:
    return {
        shared_key(part, p.config)
        for p in batch
        if not p.error
        for part in shared_parts
        if part in p.parts
    }


def _failed_results(batch: list[Point], message: str) -> list[dict]:
    """A task that never returned: each of its points a failed row with the message."""
    from harmony_ref.sweep.execute import run_point

    out = []
    for p in batch:
        r = run_point({**dataclasses.asdict(p), "error": message}, _provenance(), {})
        out.append({**r, "status": "failed", "error": message, "worker": "-"})
    return out


_PROV = {}


def _provenance() -> dict:
    if not _PROV:
        from harmony_ref.track.record import collect_provenance

        _PROV.update(collect_provenance())
    return _PROV


def _run_here(batches, shared, shared_parts, record, on_result) -> None:
    results = {}
    for key, (part, config, _warm) in shared.items():
        results[key] = run_shared(part, config, key)
    for i, batch in enumerate(batches):
        need = _needed(batch, shared_parts)
        record(
            run_batch(
                [dataclasses.asdict(p) for p in batch], {k: results[k] for k in need}, shared_parts
            )
        )
        if on_result:
            on_result(i + 1, None)


def _run_dask(
    client, batches, shared, shared_parts, record, on_result, timeout_s: float | None = None
) -> None:
    from distributed import wait

    shared_futures, first_of = {}, {}
    for key, (part, config, warm) in shared.items():
        after = first_of.get(warm)
        fut = client.submit(run_shared, part, config, key, after, pure=False, priority=10)
        first_of.setdefault(warm, fut)
        shared_futures[key] = fut
    futures = {}
    lab = any(batch[0].phone for batch in batches)
    present = cluster_resources(client) if lab else set()
    for batch in batches:
        phone = batch[0].phone
        if phone and resource_name(phone) not in present:
            record(_failed_results(batch, no_worker_message(phone, client.scheduler.address)))
            continue
        need = {k: shared_futures[k] for k in _needed(batch, shared_parts)}
        fut = client.submit(
            run_batch,
            [dataclasses.asdict(p) for p in batch],
            need,
            shared_parts,
            pure=False,
            resources={resource_name(phone): 1} if phone else None,
        )
        futures[fut] = batch
    done = 0
    bound = POLL_S if timeout_s or lab else None  # every wait and fetch polls in these runs
    started: dict[str, tuple[float, str]] = {}  # task key -> (first seen processing, worker)
    missing: dict[str, float] = {}  # a lab phone's resource -> when it was first seen gone
    try:
        while futures:
            try:
                finished, _ = wait(list(futures), timeout=bound, return_when="FIRST_COMPLETED")
            except TimeoutError:
                finished = set()
            for fut in finished:
                batch = futures.pop(fut)
                # Both fetches bounded: a finished task's result may sit on a worker that just
                # left, and then the future is pending again (status neither finished nor
                # error) until a recompute that may need that phone: the task goes back to the
                # wait set, to run again or be failed by _lost_phones.
                try:
                    if fut.status == "finished":
                        results = fut.result(timeout=bound)
                    else:
                        exc = fut.exception(timeout=bound)
                        if exc is None:  # finished since its status was read
                            results = fut.result(timeout=bound)
                        else:
                            msg = f"task failed: {type(exc).__name__}: {exc}"
                            results = _failed_results(batch, msg)
                except TimeoutError:
                    futures[fut] = batch
                    continue
                record(results)
                done += 1
                if on_result:
                    on_result(done, client)
            if timeout_s:
                done += _time_out(client, futures, started, timeout_s, record)
            if lab:
                done += _lost_phones(client, futures, missing, record)
    except BaseException:
        client.cancel(list(futures) + list(shared_futures.values()))
        raise


def _time_out(client, futures, started, timeout_s, record) -> int:
    """Tasks processing on a worker for longer than timeout_s: their points become failed rows,
    the task is cancelled and its worker restarted (a Python thread cannot be stopped; its nanny
    starts a fresh worker process). Returns how many tasks were given up."""
    now = time.monotonic()
    for addr, keys in client.processing().items():
        for key in keys:
            started.setdefault(key, (now, addr))
    late = [f for f in futures if f.key in started and now - started[f.key][0] > timeout_s]
    for fut in late:
        batch = futures.pop(fut)
        record(
            _failed_results(
                batch,
                f"timed out: the task ran longer than {timeout_s:g} s "
                f"(--timeout-s) on {started[fut.key][1]}",
            )
        )
        client.cancel([fut])
        client.restart_workers([started[fut.key][1]], raise_for_error=False)
    return len(late)


def _lost_phones(client, futures, missing: dict[str, float], record) -> int:
    """Lab points whose phone's worker has been gone from the cluster for LOST_WORKER_S: failed
    rows, their tasks cancelled. Returns how many tasks were given up."""
    from harmony_ref.sweep.lab import LOST_WORKER_S, lost_worker_message

    now = time.monotonic()
    present = cluster_resources(client)
    for name in list(missing):
        if name in present:
            del missing[name]
    lost = []
    for fut, batch in futures.items():
        name = resource_name(batch[0].phone) if batch[0].phone else None
        if name and name not in present and now - missing.setdefault(name, now) > LOST_WORKER_S:
            lost.append(fut)
    for fut in lost:
        batch = futures.pop(fut)
        record(_failed_results(batch, lost_worker_message(batch[0].phone)))
        client.cancel([fut])
    return len(lost)


def _close(client) -> None:
    cluster = client.cluster
    client.close()
    if cluster is not None:
        cluster.close()


def _progress(console, show: bool, total: int, already: int):
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("points, {task.fields[failed]} failed"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console or Console(stderr=True),
        disable=not show,
    )
    bar.add_task("sweep", total=total, completed=already, failed=0)
    return bar
