"""The run history (track/history.py) and `harmony-ref history`: every metric kind round-trips
through SQLite and a real PostgreSQL server, two processes appending at once lose nothing, `run`,
`sweep` and `history import` append, the change point of a repository the tests make is found at
its commit (and none in its noise-only twin), `--check` is the nightly verdict, and bad input is
exit 2 in one line with nothing written.

PostgreSQL: a throwaway cluster (initdb in a temp dir, a free port, as `nobody` when run as
root), skipped with the reason where no server can start; .ci/run sets
HARMONY_REF_POSTGRES_TESTS=required, where it must start."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from harmony_ref.cli import main
from harmony_ref.track.history import SCHEMA_VERSION, History, is_url, sut_info
from tests.track.history_demo import (
    METRIC,
    STEP_AT,
    demo_records,
    make_demo,
    make_repo,
    record,
)

ROOT = Path(__file__).resolve().parents[2]
PG_REQUIRED = os.environ.get("HARMONY_REF_POSTGRES_TESTS") == "required"
HOWTO = ROOT / "docs" / "how-to" / "find-the-commit.md"


# --- a PostgreSQL server ----------------------------------------------------------------------


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (d / name).is_file():
            return str(d / name)
    return None


def _unavailable(reason: str):
    if PG_REQUIRED:
        pytest.fail(f"PostgreSQL: {reason} (HARMONY_REF_POSTGRES_TESTS=required)")
    pytest.skip(f"PostgreSQL: {reason} (Debian: apt-get install postgresql)")


@pytest.fixture(scope="module")
def postgres():
    """A URL of a throwaway PostgreSQL server (the `postgres` database of a fresh cluster)."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        _unavailable("initdb/pg_ctl not found")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("the psycopg driver is not installed (the `postgres` extra)")
    root = Path(tempfile.mkdtemp(prefix="harmony-pg-"))
    as_root = os.geteuid() == 0
    if as_root:  # postgres refuses to run as root
        os.chmod(root, 0o755)
        shutil.chown(root, "nobody")

    def sh(cmd: str) -> subprocess.CompletedProcess:
        argv = ["su", "nobody", "-s", "/bin/sh", "-c", cmd] if as_root else ["sh", "-c", cmd]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = root / "data"
    r = sh(f"{initdb} -D {data} -U harmony --auth=trust -E UTF8 --no-locale")
    if r.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        _unavailable(f"initdb failed: {(r.stderr or r.stdout).strip()[-200:]}")
    opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    r = sh(f"{pg_ctl} -D {data} -o '{opts}' -l {root}/log -w -t 60 start")
    if r.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        _unavailable(f"the server did not start: {(r.stderr or r.stdout).strip()[-200:]}")
    try:
        yield f"postgresql://harmony@127.0.0.1:{port}"
    finally:
        sh(f"{pg_ctl} -D {data} -m immediate stop")
        shutil.rmtree(root, ignore_errors=True)


def _new_database(server: str) -> str:
    import psycopg

    name = f"h_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as con:
        con.execute(f"CREATE DATABASE {name}")
    return f"{server}/{name}"


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request, tmp_path):
    """A fresh history target of each kind."""
    if request.param == "sqlite":
        return str(tmp_path / "h.sqlite")
    return _new_database(request.getfixturevalue("postgres"))


# --- the store --------------------------------------------------------------------------------


def _every_kind() -> dict:
    rec = record("a" * 40, [20.0, 21.0, 19.5])
    rec["metrics"].update(
        {
            "ttft_ms": {
                "value": 123.5,
                "unit": "ms",
                "direction": "lower",
                "kind": "exact",
                "samples": [],
                "flags": [],
            },
            "cosine_min": {
                "value": 0.8909,
                "unit": "ratio",
                "direction": "higher",
                "kind": "numerical",
                "samples": [],
                "flags": [],
            },
            "device_temp_peak_c": {
                "value": 41.5,
                "unit": "C",
                "direction": "none",
                "kind": "measured",
                "samples": [40.0, 41.5],
                "flags": ["implausible"],
            },
        }
    )
    return rec


def test_every_metric_kind_round_trips(where):
    rec = _every_kind()
    h = History(where)
    assert h.append(rec, "r.json") is True
    assert h.append(rec, "r.json") is False  # the same record twice is one row
    assert h.count() == 1
    assert h.metric_names() == sorted(rec["metrics"])
    for name, m in rec["metrics"].items():
        (row,) = h.series(name)
        got = (row.value, row.unit, row.direction, row.kind, list(row.samples))
        assert got == (m["value"], m["unit"], m["direction"], m["kind"], m["samples"]), name
        assert row.sut_commit == "a" * 40 and row.machine == "ci-runner"
    assert h.series(METRIC, config="no such config") == []
    assert len(h.series(METRIC, device="demo CPU")) == 1
    h.close()
    assert History(where, create=False).count() == 1  # reopened: the schema is checked, kept


_WRITER = """
import sys
from harmony_ref.track.history import History
from tests.track.history_demo import record
where, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
h = History(where)
for i in range(n):
    h.append(record(f"{tag}{i:039d}", [20.0 + i, 21.0]), None)
"""


def test_two_writers_at_once_lose_nothing(where):
    n = 40
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, where, tag, str(n)], env=env, cwd=ROOT, text=True
        )
        for tag in "abc"
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0]
    h = History(where, create=False)
    assert h.count() == 3 * n
    assert len(h.series(METRIC)) == 3 * n
    if not is_url(where):  # the new file's switch to WAL survived the race (it once raised)
        assert sqlite3.connect(where).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_write_record_appends_with_the_sut(tmp_path):
    from harmony_ref.metrics import Metrics
    from harmony_ref.track.record import Record, collect_provenance, load_record, write_record

    repo = tmp_path / "sut"
    hashes = make_repo(repo, 2)
    m = Metrics()
    m.add("decode_ms", 20.0, "ms", "lower", "measured", samples=[19.0, 20.0, 21.0])
    cfg = {**record("x", [1.0])["config"]}
    rec = Record(cfg, m, collect_provenance(), {"predicted": {"status": "ok", "detail": ""}})
    path = write_record(rec, tmp_path / "runs", sut=sut_info(repo))
    assert load_record(path).provenance["sut"]["commit"] == hashes[-1]
    (row,) = History(tmp_path / "history.sqlite", create=False).series("decode_ms")
    assert row.sut_commit == hashes[-1] and row.sut_describe == "v1.0-1-g" + hashes[-1][:7]
    assert row.samples == (19.0, 20.0, 21.0)


def test_run_and_sweep_append(tmp_path, capsys):
    repo = tmp_path / "sut"
    hashes = make_repo(repo, 1)
    db = tmp_path / "shared.sqlite"
    skip = "host,accuracy,coldstart,thermal"
    args = ["--out-dir", str(tmp_path / "runs"), "--history", str(db), "--sut", str(repo)]
    assert main(["run", "--skip", skip, *args]) == 0
    assert (tmp_path / "runs").is_dir()
    h = History(db, create=False)
    assert h.count() == 1
    assert {r.sut_commit for r in h.series("ttft_ms")} == {hashes[0]}
    sweep = ["sweep", "--name", "s", "--models", "qwen2.5-0.5b", "--policies", "int8,int4-g128"]
    sweep += ["--profiles", "harmony-flagship", "--workers", "0", "--out-dir", str(tmp_path)]
    assert main([*sweep, "--history", str(db), "--json"]) == 0
    capsys.readouterr()
    assert h.count() == 3  # the run and the two sweep points


def test_history_import(tmp_path, capsys):
    files = []
    for i, rec in enumerate(demo_records(["c" * 40, "d" * 40])):
        f = tmp_path / f"run-{i}.json"
        f.write_text(json.dumps(rec))
        files.append(str(f))
    db = str(tmp_path / "h.sqlite")
    assert main(["history", "import", *files, "--history", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["added"] == 2
    assert main(["history", "import", *files, "--history", db]) == 0
    assert "0 of 2 records added" in capsys.readouterr().out
    # the options first, the files after them (argparse left the files over: exit 2)
    assert main(["history", "import", "--history", db, "--json", *files]) == 0
    assert json.loads(capsys.readouterr().out)["added"] == 0
    assert main(["history", "import", "--history", db, *files, "--bogus"]) == 2
    assert "history: error: unrecognized arguments: --bogus" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1}')
    db2 = tmp_path / "h2.sqlite"
    assert main(["history", "import", files[0], str(bad), "--history", str(db2)]) == 2
    assert not db2.exists()  # every file is checked before the database is touched


# --- the series and its change points ---------------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return make_demo(tmp_path_factory.mktemp("demo"))


def _history_json(capsys, *args) -> tuple[int, dict]:
    code = main(["history", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_the_step_is_found_at_its_commit(demo, capsys, tmp_path):
    repo, db, hashes = demo
    png = tmp_path / "h.png"
    base = ["--metric", METRIC, "--sut", str(repo), "--history", str(db)]
    code, out = _history_json(capsys, *base, "--plot", str(png))
    assert code == 0  # no --check: a report, not a verdict
    assert [p["commit"] for p in out["points"]] == hashes
    (cp,) = out["change_points"]
    assert cp["first_commit"] == hashes[STEP_AT]
    lo, hi = cp["range"].split("..")
    assert hashes.index(lo) < STEP_AT <= hashes.index(hi)
    assert cp["ci_pct"][0] < 15.0 < cp["ci_pct"][1] and cp["p_value"] < 1e-3
    assert cp["worse"] and cp["regression"] and out["check_exit_code"] == 1
    assert main(["history", *base, "--check"]) == 1
    assert "REGRESSION beyond the 10% tolerance" in capsys.readouterr().out
    from PIL import Image

    assert Image.open(png).size[0] >= 1200


def test_a_noise_only_twin_has_no_change_point(tmp_path, capsys):
    repo = tmp_path / "demo"
    hashes = make_repo(repo)
    db = str(tmp_path / "h.sqlite")
    History(db).append_many((r, None) for r in demo_records(hashes, step=0.0))
    code, out = _history_json(
        capsys, "--metric", METRIC, "--sut", str(repo), "--history", db, "--check"
    )
    assert code == 0 and out["change_points"] == [] and len(out["points"]) == len(hashes)


def test_commits_outside_the_sut_are_listed_apart(tmp_path, capsys):
    repo = tmp_path / "demo"
    hashes = make_repo(repo, 5)
    db = str(tmp_path / "h.sqlite")
    recs = demo_records(hashes) + [record("f" * 40, [20.0, 20.5])]
    History(db).append_many((r, None) for r in recs)
    code, out = _history_json(capsys, "--metric", METRIC, "--sut", str(repo), "--history", db)
    assert code == 0 and out["not_in_sut"] == {"f" * 40: 1} and len(out["points"]) == 5


def test_the_howto_pastes_a_real_history_output(demo, capsys):
    """docs/how-to/find-the-commit.md shows the output of `history --check` on the demo repository
    (tests/track/history_demo.py): it must be what the command prints."""
    repo, db, _ = demo
    text = HOWTO.read_text()
    start = text.index("<!-- history-output -->")
    block = text[start:].split("```text\n", 1)[1].split("```", 1)[0]
    assert main(["history", "--metric", METRIC, "--sut", str(repo), "--history", str(db)]) == 0
    assert capsys.readouterr().out == block


# --- bad input ---------------------------------------------------------------------------------


def _bad(tmp_path, name: str) -> tuple[list[str], Path | None]:
    """(extra arguments, the file that must stay untouched) of a bad-input case."""
    db = tmp_path / "h.sqlite"
    History(db).append(record("a" * 40, [1.0, 2.0]), None)
    if name == "unknown metric":
        return ["--metric", "no_such_ms", "--history", str(db)], db
    if name == "corrupt file":
        bad = tmp_path / "corrupt.sqlite"
        bad.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
        return ["--metric", METRIC, "--history", str(bad)], bad
    if name == "foreign file":
        bad = tmp_path / "notes.txt"
        bad.write_text("not a database\n")
        return ["--metric", METRIC, "--history", str(bad)], bad
    if name == "foreign database":
        import sqlite3

        bad = tmp_path / "other.sqlite"
        con = sqlite3.connect(bad)
        con.execute("CREATE TABLE users (name TEXT)")
        con.commit()
        con.close()
        return ["--metric", METRIC, "--history", str(bad)], bad
    if name == "newer schema":
        import sqlite3

        con = sqlite3.connect(db)
        con.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
        con.commit()
        con.close()
        return ["--metric", METRIC, "--history", str(db)], db
    if name == "unreachable URL":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        return ["--metric", METRIC, "--history", f"postgresql://u:pw@127.0.0.1:{port}/h"], None
    if name == "missing history":
        return ["--metric", METRIC, "--history", str(tmp_path / "none.sqlite")], None
    if name == "sut not a checkout":
        return ["--metric", METRIC, "--history", str(db), "--sut", str(tmp_path)], db
    raise AssertionError(name)


@pytest.mark.parametrize(
    "name",
    [
        "unknown metric",
        "corrupt file",
        "foreign file",
        "foreign database",
        "newer schema",
        "unreachable URL",
        "missing history",
        "sut not a checkout",
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, name):
    args, kept = _bad(tmp_path, name)
    before = kept.read_bytes() if kept else None
    files = sorted(tmp_path.iterdir())
    repo = tmp_path / "repo"
    if "--sut" not in args:
        make_repo(repo, 1)
        args += ["--sut", str(repo)]
        files = sorted(tmp_path.iterdir())
    capsys.readouterr()
    assert main(["history", *args, "--plot", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and len(err) < 200 and "Traceback" not in err, err
    assert "pw@" not in err  # a URL's password is never printed
    assert sorted(tmp_path.iterdir()) == files  # no plot, no new database, no -wal file
    if kept:
        assert kept.read_bytes() == before


def test_run_with_an_unreachable_history_writes_no_record(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://u@127.0.0.1:{port}/h"
    out = tmp_path / "runs"
    assert main(["run", "--skip", "host,accuracy,coldstart,thermal", "--out-dir", str(out),
                 "--history", url]) == 2  # fmt: skip
    assert "cannot open" in capsys.readouterr().err
    assert not list(out.glob("*.json")) if out.exists() else True


def test_measure_with_a_session_appends_the_machine_and_sut(tmp_path, capsys):
    """A `measure --session` record (the local transport here) lands in the history with the
    session's serial and device identity as its machine, and --sut's commit."""
    from tests.lab.test_session_local import fake, local_session

    path = local_session(
        tmp_path,
        fake("benchmark.py", "--format", "llama-bench"),
        benchmark={"repeats": 1, "model": "smollm2-135m", "policy": "int4-g32"},
    )
    repo = tmp_path / "sut"
    hashes = make_repo(repo, 1)
    db = tmp_path / "h.sqlite"
    argv = ["measure", "--session", str(path), "--out-dir", str(tmp_path / "runs")]
    assert main([*argv, "--history", str(db), "--sut", str(repo), "--json"]) == 0
    capsys.readouterr()
    h = History(db, create=False)
    assert h.count() == 1
    (name, *_) = h.metric_names()
    (row,) = h.series(name)
    assert row.sut_commit == hashes[0] and row.machine  # the session's serial
    import sqlalchemy as sa

    from harmony_ref.track.history import records

    with h.engine.connect() as con:
        soc, serial = con.execute(sa.select(records.c.device_soc, records.c.device_serial)).one()
    assert soc and serial == row.machine


def test_an_older_schema_is_migrated_in_place(tmp_path, monkeypatch):
    """The migration path: a version-1 file opened by a harmony-ref whose schema is version 2
    runs MIGRATIONS[1] once, in the opening transaction, and keeps its rows."""
    import sqlalchemy as sa

    from harmony_ref.track import history

    db = tmp_path / "h.sqlite"
    History(db).append(record("a" * 40, [1.0, 2.0]), None)
    ran = []

    def add_note_column(con):
        ran.append(1)
        con.execute(sa.text("ALTER TABLE records ADD COLUMN note TEXT"))

    monkeypatch.setattr(history, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(history, "MIGRATIONS", {1: add_note_column})
    h = History(db)
    assert ran == [1] and h.count() == 1
    with h.engine.connect() as con:
        assert con.execute(sa.text("SELECT version FROM schema_version")).scalar_one() == 2
        assert "note" in {c["name"] for c in sa.inspect(con).get_columns("records")}
    History(db)  # opened again: nothing left to migrate
    assert ran == [1]


def test_a_metric_with_zero_values_is_bad_input(tmp_path, capsys):
    repo = tmp_path / "demo"
    hashes = make_repo(repo, 4)
    db = str(tmp_path / "h.sqlite")
    History(db).append_many(
        (record(h, [0.0, 1.0], metric="throttled_repeats"), None) for h in hashes
    )
    args = ["history", "--metric", "throttled_repeats", "--sut", str(repo), "--history", db]
    assert main(args) == 2
    assert "throttled_repeats: has values <= 0" in capsys.readouterr().err


def test_a_step_at_the_newest_commit_alone_is_unconfirmed(tmp_path, capsys):
    # 30% slower at the newest commit only: a change point needs two commits after it, so the
    # detector used to pull the newest commit into an older one and print a made-up "+5.7%,
    # within the tolerance" change point. Now: no change point, the newest commit is named as
    # unconfirmed (worse beyond the tolerance), and --check does not fail on it yet.
    repo = tmp_path / "demo"
    hashes = make_repo(repo)
    import numpy as np

    rng = np.random.default_rng(5)
    recs = [
        record(h, np.round((26.0 if i == len(hashes) - 1 else 20.0) * rng.lognormal(0, 0.03, 5), 3))
        for i, h in enumerate(hashes)
    ]
    db = str(tmp_path / "h.sqlite")
    History(db).append_many((r, None) for r in recs)
    base = ["--metric", METRIC, "--sut", str(repo), "--history", db, "--check"]
    code, out = _history_json(capsys, *base)
    assert code == 0 and out["change_points"] == []
    u = out["unconfirmed_newest"]
    assert u["commit"] == hashes[-1] and u["worse"] and u["beyond_tolerance"]
    assert 20 < u["change_pct"] < 40
    assert main(["history", *base]) == 0
    captured = capsys.readouterr()
    assert "the newest commit alone" in captured.out and "unconfirmed" in captured.err
