"""Run records: schema round trip, validation errors naming file and field, atomic and
collision-free writes (a killed writer, two concurrent writers)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from multiprocessing import get_context
from pathlib import Path

import pytest

from harmony_ref.config import RunConfig
from harmony_ref.metrics import Metrics
from harmony_ref.track import record as rec
from harmony_ref.track.record import (
    SCHEMA_VERSION,
    Record,
    collect_provenance,
    load_record,
    write_json_atomic,
    write_record,
)

ROOT = Path(__file__).resolve().parents[2]


def _record(n_metrics: int = 3) -> Record:
    m = Metrics()
    m.add("ttft_ms", 123.5, "ms", "lower", "exact")
    m.add("gemv_speedup_vs_numpy_x", 1.4, "x", "higher", "measured", samples=[1.3, 1.4, 1.5])
    for i in range(n_metrics - 2):
        m.add(f"extra_{i}_ms", float(i), "ms")
    config = RunConfig.from_names("llama-3.2-3b", "int4-g128", profile="harmony-flagship")
    return Record(
        config=config.to_dict(),
        metrics=m,
        provenance=collect_provenance(),
        parts={"predicted": {"status": "ok", "detail": ""}},
    )


def test_round_trip(tmp_path):
    r = _record()
    path = write_record(r, tmp_path)
    back = load_record(path)
    assert back.to_dict() == json.loads(path.read_text())
    assert back.metrics["gemv_speedup_vs_numpy_x"].samples == (1.3, 1.4, 1.5)
    assert back.config["scenario"]["prompt_tokens"] == 512
    assert back.schema_version == SCHEMA_VERSION


def test_provenance_fields():
    p = collect_provenance()
    for key in rec.PROVENANCE_FIELDS:
        assert key in p
    assert p["cpu_cores"] >= 1
    assert p["utc_time"].endswith("+00:00")
    assert p["git_commit"] is None or len(p["git_commit"]) == 40


@pytest.mark.parametrize(
    "mutate, where",
    [
        (lambda d: d.pop("schema_version"), "schema_version"),
        (lambda d: d.update(schema_version=99), "schema_version"),
        (lambda d: d["config"].pop("policy"), "config.policy"),
        (lambda d: d["config"]["scenario"].update(batch=0), "config.scenario.batch"),
        (lambda d: d["metrics"]["ttft_ms"].update(value="fast"), "metrics.ttft_ms.value"),
        (lambda d: d["metrics"]["ttft_ms"].update(direction="up"), "metrics.ttft_ms.direction"),
        (
            lambda d: d["metrics"]["gemv_speedup_vs_numpy_x"].update(samples=[1.0, "x"]),
            "metrics.gemv_speedup_vs_numpy_x.samples",
        ),
        (lambda d: d["config"].update(backend_options={"command": 3}), "config.backend_options"),
        (lambda d: d["provenance"].pop("git_commit"), "provenance.git_commit"),
        (lambda d: d["parts"].update(host={"status": "maybe"}), "parts.host.status"),
    ],
)
def test_validation_names_file_and_field(tmp_path, mutate, where):
    d = _record().to_dict()
    mutate(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ValueError) as e:
        load_record(path)
    assert str(path) in str(e.value) and f"'{where}'" in str(e.value)


def test_corrupt_and_missing(tmp_path):
    good = write_record(_record(), tmp_path)
    cut = tmp_path / "cut.json"
    cut.write_text(good.read_text()[:50])
    with pytest.raises(ValueError, match="not valid JSON"):
        load_record(cut)
    with pytest.raises(ValueError, match="does not exist"):
        load_record(tmp_path / "nope.json")


def test_names_never_collide(tmp_path, monkeypatch):
    names = iter(["run-a.json", "run-a.json", "run-b.json"])
    monkeypatch.setattr(rec, "record_filename", lambda config: next(names))
    first = write_record(_record(), tmp_path)
    second = write_record(_record(), tmp_path)
    assert (first.name, second.name) == ("run-a.json", "run-b.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run-a.json", "run-b.json"]


def test_overwrite_false_refuses(tmp_path):
    write_json_atomic(tmp_path / "x.json", {"a": 1})
    with pytest.raises(FileExistsError):
        write_json_atomic(tmp_path / "x.json", {"a": 2}, overwrite=False)
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def _writer(out_dir: str, n: int) -> list[str]:
    return [write_record(_record(), out_dir).name for _ in range(n)]


def test_two_concurrent_writers(tmp_path):
    with get_context("spawn").Pool(2) as pool:
        results = pool.starmap(_writer, [(str(tmp_path), 15), (str(tmp_path), 15)])
    names = results[0] + results[1]
    assert len(set(names)) == 30
    files = sorted(tmp_path.glob("run-*.json"))
    assert len(files) == 30
    for f in files:
        load_record(f)


def test_killed_writer_leaves_no_half_file(tmp_path):
    """A writer killed mid-write (here: stuck in fsync of a large record) leaves no record file
    at all; a writer killed at a random point of a write loop leaves only complete records."""
    child = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from tests.track.test_record import _record
        from harmony_ref.track.record import write_record
        mode = sys.argv[1]
        if mode == "stuck":
            os.fsync = lambda fd: (print("writing", flush=True), time.sleep(60))
            write_record(_record(20000), {str(tmp_path / "stuck")!r})
        else:
            print("writing", flush=True)
            while True:
                write_record(_record(2000), {str(tmp_path / "loop")!r})
    """)
    for mode, delay in (("stuck", 0.0), ("loop", 1.0)):
        proc = subprocess.Popen(
            [sys.executable, "-c", child, mode], stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout.readline().strip() == "writing"
            time.sleep(delay)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        out = tmp_path / mode
        records = list(out.glob("run-*.json"))
        if mode == "stuck":
            assert records == []
            assert [p for p in out.iterdir() if p.name.startswith(".tmp-")]  # the orphan is hidden
        for f in records:
            load_record(f)
