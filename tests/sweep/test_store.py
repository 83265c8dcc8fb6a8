"""The sweep store: rows reach disk in pending parquet files and fold into points.parquet; a
reader keeps the newest row per point, so a run cut short at any moment leaves a readable sweep
and a point written twice is one row; the lock refuses a second run of the same sweep."""

from __future__ import annotations

import pytest

from harmony_ref.sweep.execute import run_batch
from harmony_ref.sweep.grid import Grid
from harmony_ref.sweep.store import SweepStore, check_name


def points(n_models=2):
    g = Grid(("qwen2.5-0.5b", "llama-3.2-1b")[:n_models], ("int8",), ("harmony-lowend",))
    return g.points()


def results(pts):
    import dataclasses

    return run_batch([dataclasses.asdict(p) for p in pts])


def test_rows_and_records_survive_an_interrupted_run_and_fold_into_points(tmp_path):
    from harmony_ref.track.record import load_record

    store = SweepStore("s", tmp_path)
    store.lock()
    pts = points()
    for r, p in zip(results(pts), pts):
        store.add(r, p)
    store.flush()  # what an interrupted run leaves: pending files, no points.parquet
    assert not store.points_path.exists()
    df = SweepStore("s", tmp_path).read()
    assert sorted(df["key"]) == sorted(p.key for p in pts)
    rec = load_record(store.dir / df["record"][0])  # a run record the gate's reader accepts
    assert rec.metrics.value("decode_tokens_per_s") == pytest.approx(df["decode_tokens_per_s"][0])
    store.compact()
    store.unlock()
    assert store.points_path.exists() and not list(store.pending.glob("*.parquet"))
    assert len(store.read()) == 2


def test_a_point_written_twice_is_one_row_the_newest(tmp_path):
    store = SweepStore("s", tmp_path)
    store.lock()
    pts = points(1)
    first = results(pts)[0]
    store.add(first, pts[0])
    store.flush()
    second = {**results(pts)[0], "worker": "elsewhere:1"}
    store.add(second, pts[0])
    store.compact()
    df = store.read()
    assert len(df) == 1 and df["worker"][0] == "elsewhere:1"
    store.unlock()


def test_reusable_keeps_failed_points_unless_asked(tmp_path):
    store = SweepStore("s", tmp_path)
    store.lock()
    pts = points()
    rs = results(pts)
    rs[1] = {**rs[1], "status": "failed", "error": "boom"}
    for r, p in zip(rs, pts):
        store.add(r, p)
    store.compact()
    assert set(store.reusable()) == {p.key for p in pts}
    assert set(store.reusable(retry_failed=True)) == {pts[0].key}
    store.unlock()


def test_the_lock_refuses_a_second_run(tmp_path):
    a, b = SweepStore("s", tmp_path), SweepStore("s", tmp_path)
    a.lock()
    with pytest.raises(ValueError, match="running in another process"):
        b.lock()
    a.unlock()
    b.lock()
    b.unlock()


def test_a_corrupt_points_file_is_named(tmp_path):
    store = SweepStore("s", tmp_path)
    store.dir.mkdir(parents=True)
    store.points_path.write_bytes(b"not parquet")
    with pytest.raises(ValueError, match=r"points.parquet: not a readable parquet file"):
        store.read()


@pytest.mark.parametrize("name", ["", "../x", ".hidden", "a b", "a/b"])
def test_bad_names(name):
    with pytest.raises(ValueError, match="--name"):
        check_name(name)


def test_records_and_rows_carry_the_compression(tmp_path):
    """A policy with [prune] and [activations]: the record's config holds every field of both
    (config.compression), not only the policy's name, and so do the sweep's rows; a weight-only
    policy's row has ratios 0 and no activation spec."""
    import pandas as pd

    from harmony_ref.config import RunConfig
    from harmony_ref.track.record import load_record

    pol = tmp_path / "w8a8-pruned.toml"
    pol.write_text(
        'name = "w8a8-pruned"\ndefault = "int8"\n[prune]\nffn = 0.25\nheads = 0.34\n'
        'score = "activation"\nsamples = 4\n[activations]\n'
        'granularity = "per-channel"\nsample_tokens = 64\n'
    )
    g = Grid(("qwen2.5-0.5b",), ("int8", str(pol)), ("harmony-lowend",))
    pts = g.points()
    store = SweepStore("s", tmp_path / "sweeps")
    store.lock()
    for r, p in zip(results(pts), pts):
        store.add(r, p)
    store.compact()
    store.unlock()
    df = store.read().set_index("policy")
    row, plain = df.loc[str(pol)], df.loc["int8"]
    assert (row["prune_ffn"], row["prune_heads"], row["prune_score"]) == (0.25, 0.34, "activation")
    assert (row["prune_samples"], row["prune_sample_tokens"], row["prune_head_unit"]) == (
        4,
        128,
        "query",
    )
    assert (
        row["activations_granularity"],
        row["activations_sample_tokens"],
        row["activations_calibration"],
    ) == ("per-channel", 64, "corpus")
    assert (plain["prune_ffn"], plain["prune_heads"]) == (0.0, 0.0)
    assert pd.isna(plain["prune_score"]) and pd.isna(plain["activations_granularity"])
    cfg = load_record(store.dir / row["record"]).config
    assert cfg["compression"]["prune"] == {
        "ffn": 0.25,
        "heads": 0.34,
        "head_unit": "query",
        "score": "activation",
        "samples": 4,
        "sample_tokens": 128,
        "seed": 0,
    }
    assert cfg["compression"]["activations"]["granularity"] == "per-channel"
    assert RunConfig.from_dict(cfg).policy.prune.ffn == 0.25  # reads back
    pol.write_text('name = "w8a8-pruned"\ndefault = "int8"\n[prune]\nffn = 0.5\n')
    with pytest.raises(ValueError, match="compression"):
        RunConfig.from_dict(cfg)  # the file no longer says what the record was measured with
