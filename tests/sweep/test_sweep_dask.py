"""Sweeps on a real 2-worker distributed.LocalCluster: one row per point; a worker killed with
SIGKILL mid-sweep still ends with every point exactly once; a second run computes nothing
(evaluations counted through HARMONY_REF_SWEEP_TRACE, which the workers inherit); a bad point
is a recorded failure with its message; an unreachable --scheduler is exit 2; shared parts run
once per shared key on the workers; the cluster and this process give the same records."""

from __future__ import annotations

import os
import signal

import pandas as pd
import pytest

from harmony_ref.cli import main
from harmony_ref.sweep.grid import Grid
from harmony_ref.sweep.run import open_client, run_sweep
from harmony_ref.sweep.store import SweepStore

pytestmark = pytest.mark.slow


def trace_lines(path, kind="point"):
    if not path.exists():
        return []
    return [ln.split()[1] for ln in path.read_text().splitlines() if ln.startswith(kind + " ")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    trace = tmp_path_factory.mktemp("trace") / "trace.txt"
    # The worker processes inherit it, also a worker the nanny restarts after a SIGKILL.
    os.environ["HARMONY_REF_SWEEP_TRACE"] = str(trace)
    try:
        client, _ = open_client(None, 2)
        yield client, trace
        cluster = client.cluster
        client.close()
        cluster.close()
    finally:
        del os.environ["HARMONY_REF_SWEEP_TRACE"]


GRID = dict(
    models=("qwen2.5-0.5b", "llama-3.2-1b", "llama-3.2-3b"),
    policies=("int8", "int4-g128"),
    profiles=("harmony-flagship", "harmony-midrange", "harmony-lowend"),
)


def test_cli_sweep_on_its_own_local_cluster_then_a_rerun_computes_nothing(
    tmp_path, monkeypatch, capsys
):
    trace = tmp_path / "trace.txt"
    monkeypatch.setenv("HARMONY_REF_SWEEP_TRACE", str(trace))
    argv = [
        "sweep",
        "--name",
        "cli",
        "--models",
        "qwen2.5-0.5b,llama-3.2-1b",
        "--policies",
        "int8,int4-g128",
        "--profiles",
        "harmony-flagship,harmony-lowend",
        "--workers",
        "2",
        "--out-dir",
        str(tmp_path),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "sweep cli: 8 points: 8 computed, 0 reused, 0 failed" in out
    assert "LocalCluster(2 workers)" in out
    df = pd.read_parquet(tmp_path / "cli" / "points.parquet")
    assert len(df) == 8 and df["key"].is_unique and set(df["status"]) == {"ok"}
    assert len(set(df["worker"])) == 2  # both worker processes took points
    assert sorted(trace_lines(trace)) == sorted(df["key"])
    assert main(argv + ["--json"]) == 0
    import json

    summary = json.loads(capsys.readouterr().out)
    assert (summary["computed"], summary["reused"], summary["tasks"]) == (0, 8, 0)
    assert len(trace_lines(trace)) == 8  # no evaluation on the second run


def test_a_worker_killed_mid_sweep_loses_nothing_and_duplicates_nothing(cluster, tmp_path):
    client, trace = cluster
    grid = Grid(
        **GRID,
        parts=("predicted", "thermal"),
        scenario={
            "prompt_tokens": (128, 512),
            "new_tokens": (128,),
            "context_tokens": (2048,),
            "batch": (1,),
            "kv_dtype": ("fp16",),
        },
    )
    killed = {}

    def kill_one(done, client):
        if killed:
            return
        busy = [addr for addr, keys in client.processing().items() if keys]
        pids = client.run(os.getpid)
        victim = busy[0] if busy else next(iter(pids))
        killed.update(pid=pids[victim], done=done)
        os.kill(pids[victim], signal.SIGKILL)

    before = len(trace_lines(trace))
    s = run_sweep(
        grid,
        SweepStore("kill", tmp_path),
        client=client,
        show_progress=False,
        on_result=kill_one,
        batch_size=2,
    )
    assert killed and killed["done"] < s.tasks  # killed while tasks were left
    with pytest.raises(ProcessLookupError):
        os.kill(killed["pid"], 0)
    df = SweepStore("kill", tmp_path).read()
    keys = {p.key for p in grid.points()}
    assert len(df) == grid.size == 36 and set(df["key"]) == keys and df["key"].is_unique
    assert set(df["status"]) == {"ok"} and (s.computed, s.failed) == (36, 0)
    evaluated = trace_lines(trace)[before:]
    assert set(evaluated) == keys and len(evaluated) >= 36  # some perhaps twice, written once
    records = list((tmp_path / "kill" / "records").glob("*.json"))
    assert len(records) == 36


def test_a_bad_point_is_a_recorded_failure_and_the_rest_go_on(cluster, tmp_path):
    client, _ = cluster
    grid = Grid(
        **GRID,
        scenario={
            "prompt_tokens": (512, 2000),
            "new_tokens": (128,),
            "context_tokens": (2048,),
            "batch": (1,),
            "kv_dtype": ("fp16",),
        },
    )
    s = run_sweep(grid, SweepStore("bad", tmp_path), client=client, show_progress=False)
    df = SweepStore("bad", tmp_path).read()
    assert (s.computed, s.failed, len(df)) == (18, 18, 36)
    bad = df[df["status"] == "failed"]
    assert set(bad["prompt_tokens"]) == {2000}
    assert all("exceeds context_tokens = 2048" in e for e in bad["error"])
    assert df[df["status"] == "ok"]["decode_tokens_per_s"].notna().all()
    from harmony_ref.track.record import load_record

    rec = load_record(tmp_path / "bad" / bad["record"].iloc[0])
    assert rec.parts["predicted"]["status"] == "failed"


def test_shared_parts_run_once_per_key_on_the_workers(cluster, tmp_path):
    """coldstart stands in for the accuracy part here (cheap): treated as shared, it runs once
    per (model, policy), not once per phone, and every phone's record carries its result."""
    client, trace = cluster
    grid = Grid(
        models=("qwen2.5-0.5b", "llama-3.2-1b"),
        policies=("int8", "int4-g128"),
        profiles=("harmony-flagship", "harmony-lowend"),
        parts=("predicted", "coldstart"),
    )
    before = len(trace_lines(trace, "shared"))
    s = run_sweep(
        grid,
        SweepStore("shared", tmp_path),
        client=client,
        show_progress=False,
        shared_parts=("coldstart",),
    )
    assert s.failed == 0
    ran = trace_lines(trace, "shared")[before:]
    assert len(ran) == 4  # 2 models x 2 policies
    from harmony_ref.sweep.run import shared_tasks

    groups = {}
    for key, (_part, _config, warm) in shared_tasks(grid.points(), ("coldstart",)).items():
        groups.setdefault(warm, []).append(key)
    for first, *rest in groups.values():  # the model's first shared task ran before the others
        assert all(ran.index(first) < ran.index(k) for k in rest)
    df = SweepStore("shared", tmp_path).read()
    for _, g in df.groupby(["model", "policy"]):
        cold = [c for c in g.columns if c.startswith("coldstart_") and c.endswith("_ms")]
        assert cold and all(g[c].nunique() == 1 for c in cold) and len(g) == 2


def test_the_cluster_and_this_process_give_the_same_metrics(cluster, tmp_path):
    client, _ = cluster
    grid = Grid(
        models=("qwen2.5-0.5b",),
        policies=("int8", "mixed"),
        profiles=("harmony-midrange",),
        parts=("predicted", "coldstart"),
    )
    run_sweep(grid, SweepStore("a", tmp_path), client=client, show_progress=False)
    run_sweep(grid, SweepStore("b", tmp_path), workers=0, show_progress=False)
    a = SweepStore("a", tmp_path).read().sort_values("key").reset_index(drop=True)
    b = SweepStore("b", tmp_path).read().sort_values("key").reset_index(drop=True)
    cols = [c for c in a.columns if c.endswith(("_ms", "_mb", "_per_s"))]
    assert cols and a[cols].equals(b[cols])


def test_an_unreachable_scheduler_is_exit_2_before_any_work(tmp_path, capsys):
    rc = main(
        [
            "sweep",
            "--name",
            "x",
            "--models",
            "qwen2.5-0.5b",
            "--policies",
            "int8",
            "--scheduler",
            "tcp://127.0.0.1:9",
            "--out-dir",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "--scheduler tcp://127.0.0.1:9: no Dask scheduler answered" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "x").exists()
    assert (
        main(
            [
                "sweep",
                "--name",
                "x",
                "--models",
                "qwen2.5-0.5b",
                "--policies",
                "int8",
                "--scheduler",
                "localhost",
                "--out-dir",
                str(tmp_path),
            ]
        )
        == 2
    )


def test_points_whose_worker_dies_past_allowed_failures_are_failed_rows(tmp_path):
    """Dask gives up on a task whose workers died more often than allowed-failures (an out of
    memory kill looks the same): its points are failed rows naming KilledWorker; the rest go on."""
    import dask
    import distributed  # noqa: F401 - loads its config defaults

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        client, _ = open_client(None, 1)
    grid = Grid(**GRID, parts=("predicted", "thermal"))
    killed = []

    def kill(done, client):
        if not killed:
            pid = next(iter(client.run(os.getpid).values()))
            killed.append(pid)
            os.kill(pid, signal.SIGKILL)

    try:
        s = run_sweep(
            grid,
            SweepStore("oom", tmp_path),
            client=client,
            show_progress=False,
            on_result=kill,
            batch_size=1,
        )
    finally:
        cluster = client.cluster
        client.close()
        cluster.close()
    df = SweepStore("oom", tmp_path).read()
    assert len(df) == grid.size and df["key"].is_unique
    failed = df[df["status"] == "failed"]
    assert s.failed == len(failed) >= 1
    assert all("KilledWorker" in e for e in failed["error"])
    assert (df["status"] == "ok").sum() == grid.size - len(failed) > 0


def test_a_task_past_its_timeout_fails_its_points_and_the_worker_is_restarted(cluster, tmp_path):
    client, _ = cluster
    grid = Grid(**GRID, parts=("predicted", "thermal"))  # 18 points, ~0.5 s as one task
    s = run_sweep(
        grid,
        SweepStore("slow", tmp_path),
        client=client,
        show_progress=False,
        batch_size=grid.size,
        timeout_s=0.05,
    )
    df = SweepStore("slow", tmp_path).read()
    assert s.failed == len(df) == 18
    assert all(e.startswith("timed out: the task ran longer than 0.05 s") for e in df["error"])
    client.wait_for_workers(1, timeout=120)  # the restarted one may still be starting
    again = run_sweep(
        Grid(**GRID), SweepStore("after", tmp_path), client=client, show_progress=False
    )
    assert (again.computed, again.failed) == (18, 0)
    with pytest.raises(ValueError, match="--timeout-s 1: .* needs Dask workers"):
        run_sweep(grid, SweepStore("x", tmp_path), workers=0, timeout_s=1)
