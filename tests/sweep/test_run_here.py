"""run_sweep in this process (--workers 0): Ctrl-C leaves a consistent, resumable sweep; the
accuracy part is computed once per phone-independent key (through the job's own part, here
replaced by a counting stand-in) and reaches every phone's record; batching of cheap points."""

from __future__ import annotations

import pytest

from harmony_ref.metrics import Metrics
from harmony_ref.sweep.grid import Grid
from harmony_ref.sweep.run import points_per_task, run_sweep
from harmony_ref.sweep.store import SweepStore

GRID = dict(
    models=("qwen2.5-0.5b", "llama-3.2-1b"),
    policies=("int8", "int4-g128", "mixed"),
    profiles=("harmony-flagship", "harmony-lowend"),
)


def test_ctrl_c_leaves_a_consistent_sweep_that_a_rerun_completes(tmp_path):
    grid = Grid(**GRID)

    def interrupt(done, _client):
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(
            grid,
            SweepStore("c", tmp_path),
            workers=0,
            show_progress=False,
            on_result=interrupt,
            batch_size=2,
        )
    store = SweepStore("c", tmp_path)
    assert store.points_path.exists() and not list(store.pending.glob("*.parquet"))
    assert len(store.read()) == 6  # three batches of two
    s = run_sweep(grid, store, workers=0, show_progress=False)  # the lock was released
    assert (s.reused, s.computed) == (6, 6) and len(store.read()) == 12


def test_accuracy_once_per_policy_not_per_phone_or_preset_model(tmp_path, monkeypatch):
    from harmony_ref.job import main as job

    calls = []

    def fake_accuracy(config):
        calls.append((config.spec.name, config.policy.name, config.profile))
        m = Metrics()
        m.add("accuracy_drop_pct", float(len(config.policy.name)), "pct_points", "lower")
        return m

    parts = [
        job.Part(p.name, p.title, fake_accuracy) if p.name == "accuracy" else p for p in job.PARTS
    ]
    monkeypatch.setattr(job, "PARTS", parts)
    grid = Grid(**GRID, parts=("predicted", "accuracy"))
    s = run_sweep(grid, SweepStore("a", tmp_path), workers=0, show_progress=False)
    assert s.failed == 0 and s.computed == 12
    # The accuracy part scores SmolLM2 (a preset model's accuracy_model) under the policy: once
    # per policy for 2 preset models x 3 policies x 2 phones (job/main.py accuracy_inputs).
    assert len(calls) == 3 and len({c[1] for c in calls}) == 3
    df = SweepStore("a", tmp_path).read()
    assert (df["accuracy_drop_pct"] == df["policy"].str.len()).all()
    from harmony_ref.track.record import load_record

    rec = load_record(tmp_path / "a" / df["record"][0])
    assert rec.parts["accuracy"]["status"] == "ok" and "shared_key" in rec.parts["accuracy"]
    assert rec.metrics.value("accuracy_drop_pct") == df["accuracy_drop_pct"][0]


def test_a_failing_part_fails_its_points_only(tmp_path, monkeypatch):
    from harmony_ref.job import main as job

    def broken(config):
        if config.policy.name == "mixed":
            raise RuntimeError("out of memory (simulated)")
        return Metrics()

    parts = [job.Part(p.name, p.title, broken) if p.name == "coldstart" else p for p in job.PARTS]
    monkeypatch.setattr(job, "PARTS", parts)
    s = run_sweep(
        Grid(**GRID, parts=("predicted", "coldstart")),
        SweepStore("f", tmp_path),
        workers=0,
        show_progress=False,
    )
    df = SweepStore("f", tmp_path).read()
    assert s.failed == 4 and set(df[df["status"] == "failed"]["policy"]) == {"mixed"}
    assert set(df[df["status"] == "failed"]["error"]) == {
        "coldstart: RuntimeError: out of memory (simulated)"
    }


def test_cheap_points_are_batched_expensive_ones_are_not():
    g = Grid(**GRID)
    pts = g.points()
    assert points_per_task(pts, g, 2) == 2  # 12 points, 4 tasks per worker
    many = pts * 1000
    assert points_per_task(many, g, 2) == 500
    host = Grid(**GRID, parts=("predicted", "host"))
    assert points_per_task(host.points(), host, 2) == 1
