"""The run history: every record `run`, `measure`, `gate` and `sweep` write, appended to one
database that `harmony-ref history` reads as a series over the commits of the system under test.

Where: `--history PATH_OR_URL` on those commands, else the `HARMONY_REF_HISTORY` variable, else
`history.sqlite` beside the records' folder (`results/history.sqlite` for the default
`results/runs`). A path is a SQLite file; a URL (`postgresql+psycopg://user@host/db`) a
PostgreSQL database a team's CI machines and device lab share (the `postgres` extra installs the
driver). Both through SQLAlchemy Core, one schema:

    schema_version  version                      one row: the schema this file holds
    records         id, uid (SHA-256 of the record JSON: importing twice adds nothing),
                    recorded_at, source (the record file), the system under test (sut_repository,
                    sut_commit, sut_describe, sut_dirty), the machine (machine, hostname,
                    cpu_model; a phone's device_serial, device_model, device_soc,
                    device_os_build), config_label, config (JSON)
    metrics         record_id, name, config_label, value, unit, direction, kind, samples (JSON),
                    flags; indexed on (name, config_label), which is what `history` asks

The system under test is what was measured: `--sut DIR` (a git checkout: its origin URL or path,
commit, `git describe`, dirty flag, kept in the record's provenance as `sut`), else harmony-ref's
own checkout (the provenance's git commit). A newer schema than this harmony-ref knows, a file
that is not SQLite, or a SQLite file of something else is a ValueError naming it, before anything
is written. `MIGRATIONS` holds the steps from each older version to the next.

Concurrent writers: SQLite in WAL mode, every write transaction `BEGIN IMMEDIATE` with a 60 s busy
timeout, so two CI jobs appending at once queue instead of failing; PostgreSQL serialises the
schema creation with an advisory lock.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

SCHEMA_VERSION = 1
ENV = "HARMONY_REF_HISTORY"
DEFAULT_NAME = "history.sqlite"
BUSY_TIMEOUT_S = 60.0
WAL_SWITCH_TIMEOUT_S = 5.0  # then a busy new file keeps its rollback journal (see _sqlite_wal)
SQLITE_HEADER = b"SQLite format 3\x00"
PG_SCHEMA_LOCK = 0x4841524D  # pg_advisory_xact_lock key while creating or migrating ("HARM")

# version -> the step that takes a database at that version to the next one
MIGRATIONS: dict[int, Callable[[sa.Connection], None]] = {}

meta = sa.MetaData()
schema_version = sa.Table("schema_version", meta, sa.Column("version", sa.Integer, nullable=False))
records = sa.Table(
    "records",
    meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uid", sa.String(64), nullable=False, unique=True),
    sa.Column("recorded_at", sa.String(40)),
    sa.Column("source", sa.Text),
    sa.Column("sut_repository", sa.Text),
    sa.Column("sut_commit", sa.String(64), index=True),
    sa.Column("sut_describe", sa.Text),
    sa.Column("sut_dirty", sa.Boolean),
    sa.Column("machine", sa.Text),
    sa.Column("hostname", sa.Text),
    sa.Column("cpu_model", sa.Text),
    sa.Column("device_serial", sa.Text),
    sa.Column("device_model", sa.Text),
    sa.Column("device_soc", sa.Text),
    sa.Column("device_os_build", sa.Text),
    sa.Column("config_label", sa.Text, nullable=False),
    sa.Column("config", sa.JSON, nullable=False),
)
metrics = sa.Table(
    "metrics",
    meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "record_id", sa.Integer, sa.ForeignKey("records.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("config_label", sa.Text, nullable=False),
    sa.Column("value", sa.Double, nullable=False),
    sa.Column("unit", sa.Text, nullable=False),
    sa.Column("direction", sa.String(8), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("samples", sa.JSON, nullable=False),
    sa.Column("flags", sa.JSON, nullable=False),
    sa.Index("ix_metrics_name_config", "name", "config_label"),
)
TABLES = {t.name for t in meta.sorted_tables}


# --- what a row knows -------------------------------------------------------------------------


def git_out(args: list[str], cwd: Path, timeout_s: float = 30) -> str | None:
    """A git command's stdout in `cwd`, stripped; None when git fails or is missing."""
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def sut_info(directory: str | Path, flag: str = "--sut") -> dict:
    """The system under test in a git checkout: repository (origin URL, else the checkout's
    path), commit, `git describe --always --tags`, dirty flag. Not a checkout: ValueError."""
    d = Path(directory)
    if not d.is_dir():
        raise ValueError(f"{flag} {directory}: not a directory")
    top = git_out(["rev-parse", "--show-toplevel"], d)
    commit = git_out(["rev-parse", "HEAD"], d) if top else None
    if not top or not commit:
        raise ValueError(f"{flag} {directory}: not a git checkout with a commit")
    status = git_out(["status", "--porcelain", "--untracked-files=no"], d)
    return {
        "repository": git_out(["remote", "get-url", "origin"], d) or top,
        "commit": commit,
        "describe": git_out(["describe", "--always", "--tags"], d),
        "dirty": None if status is None else bool(status),
    }


def session_sut(spec) -> dict | None:
    """A device session's [sut] (lab/session_spec.py) as a system under test: its `dir`
    read as `--sut DIR` reads a checkout, or its repository and commit as given (dirty: not
    known); None when the session has no [sut]."""
    from harmony_ref.lab.session_spec import short_path

    u = spec.sut
    if u.dir:
        return sut_info(spec.sut_dir(), f"{short_path(Path(spec.path))}: field 'sut.dir' =")
    if not u.given:
        return None
    return {
        "repository": u.repository,
        "commit": u.commit,
        "describe": u.describe or u.commit[:12],
        "dirty": None,
    }


def config_label(config: dict) -> str:
    """One line naming a record's config: model/policy/profile/backend/scenario."""
    s = config.get("scenario", {})
    return "/".join(
        [
            str(config.get("model")),
            str(config.get("policy")),
            str(config.get("profile")),
            str(config.get("backend")),
            f"p{s.get('prompt_tokens')}-n{s.get('new_tokens')}-c{s.get('context_tokens')}"
            f"-b{s.get('batch')}",
        ]
    )


def session_block(data: dict) -> dict | None:
    """The device session block of a record dict (the part that ran through a session)."""
    for part in data.get("parts", {}).values():
        if isinstance(part, dict) and isinstance(part.get("session"), dict):
            return part["session"]
    return None


def record_row(data: dict, source: str | None = None) -> dict:
    """The `records` row of a record dict (track/record.py's schema, validated by the caller)."""
    prov = data["provenance"]
    sut = prov.get("sut") or {
        "repository": "harmony-ref",
        "commit": prov.get("git_commit"),
        "describe": None,
        "dirty": prov.get("git_dirty"),
    }
    session = session_block(data)
    ident = (session or {}).get("identity", {})
    serial = (session or {}).get("serial") or None
    uid = hashlib.sha256(json.dumps(data, sort_keys=True, default=float).encode()).hexdigest()
    return {
        "uid": uid,
        "recorded_at": prov.get("utc_time"),
        "source": source,
        "sut_repository": sut.get("repository"),
        "sut_commit": sut.get("commit"),
        "sut_describe": sut.get("describe"),
        "sut_dirty": sut.get("dirty"),
        "machine": serial or prov.get("hostname"),
        "hostname": prov.get("hostname"),
        "cpu_model": prov.get("cpu_model"),
        "device_serial": serial,
        "device_model": ident.get("device_model"),
        "device_soc": ident.get("soc"),
        "device_os_build": ident.get("os_build"),
        "config_label": config_label(data["config"]),
        "config": data["config"],
    }


def metric_rows(data: dict, label: str) -> list[dict]:
    return [
        {
            "name": name,
            "config_label": label,
            "value": float(m["value"]),
            "unit": m["unit"],
            "direction": m["direction"],
            "kind": m["kind"],
            "samples": [float(s) for s in m.get("samples", [])],
            "flags": list(m.get("flags", [])),
        }
        for name, m in data["metrics"].items()
    ]


# --- where ------------------------------------------------------------------------------------


def target(flag: str | None, out_dir: str | Path | None = None) -> str:
    """The history a command uses: its --history, else $HARMONY_REF_HISTORY, else
    history.sqlite beside `out_dir` (results/history.sqlite for results/runs)."""
    if flag:
        return flag
    if os.environ.get(ENV):
        return os.environ[ENV]
    base = Path(out_dir).parent if out_dir is not None else Path("results")
    return str(base / DEFAULT_NAME)


def is_url(text: str) -> bool:
    return "://" in text


def _shown(where: str) -> str:
    """The name an error gives: a URL without its password."""
    if not is_url(where):
        return where
    try:
        return sa.make_url(where).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return where


# --- the store --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeriesRow:
    record_id: int
    recorded_at: str | None
    sut_commit: str | None
    sut_describe: str | None
    sut_dirty: bool | None
    machine: str | None
    config_label: str
    value: float
    unit: str
    direction: str
    kind: str
    samples: tuple[float, ...]


class History:
    """A history database, checked (and created when `create`) on opening."""

    def __init__(self, where: str | Path, create: bool = True, flag: str = "--history"):
        self.where = str(where)
        self.flag = flag
        self.name = _shown(self.where)
        self.sqlite = not is_url(self.where)
        self._created = False  # a SQLite file made by this opening: removed if it fails
        if self.sqlite:
            self._check_sqlite_file(Path(self.where), create)
            self.engine = self._sqlite_engine(Path(self.where), "BEGIN")
            self.writer = self._sqlite_engine(Path(self.where), "BEGIN IMMEDIATE")
        else:
            self.engine = self.writer = self._url_engine()
        self._prepare(create)

    # opening
    def _bad(self, what: str) -> ValueError:
        return ValueError(f"{self.flag} {self.name}: {what}")

    def _check_sqlite_file(self, path: Path, create: bool) -> None:
        """Read-only look at an existing file, before anything may write to it."""
        if path.is_dir():
            raise self._bad("is a directory; a SQLite file or a database URL is needed")
        if not path.exists():
            if not create:
                raise self._bad("no history database there (nothing has been recorded yet)")
            from harmony_ref._io import check_output_file

            check_output_file(path, self.flag)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._created = True
            return
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
        if head and head != SQLITE_HEADER:
            raise self._bad("not a SQLite database (a foreign or corrupt file)")
        try:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
            try:
                con.execute("PRAGMA schema_version").fetchone()
                con.execute("SELECT name FROM sqlite_master").fetchall()
            finally:
                con.close()
        except sqlite3.DatabaseError as e:
            raise self._bad(f"unreadable SQLite database ({e})") from None

    def _sqlite_engine(self, path: Path, begin: str) -> sa.Engine:
        """An engine whose transactions start with `begin`: BEGIN IMMEDIATE for writers (the
        write lock up front, so two writers queue instead of one failing on upgrade), a plain
        BEGIN for readers (WAL readers never wait)."""
        engine = sa.create_engine(
            f"sqlite:///{path}",
            connect_args={"timeout": BUSY_TIMEOUT_S},
            poolclass=sa.pool.NullPool,
        )

        @sa.event.listens_for(engine, "connect")
        def _connect(dbapi_con, _record):
            dbapi_con.isolation_level = None  # transactions are ours (`begin` below)
            dbapi_con.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            dbapi_con.execute("PRAGMA foreign_keys = ON")

        @sa.event.listens_for(engine, "begin")
        def _begin(con):
            con.exec_driver_sql(begin)

        return engine

    def _url_engine(self) -> sa.Engine:
        try:
            url = sa.make_url(self.where)
        except sa.exc.ArgumentError as e:
            raise self._bad(f"not a database URL ({e})") from None
        if url.get_backend_name() != "postgresql":
            raise self._bad("only SQLite files and postgresql:// URLs are supported")
        if url.drivername == "postgresql":
            url = url.set(drivername="postgresql+psycopg")
        try:
            return sa.create_engine(
                url, poolclass=sa.pool.NullPool, connect_args={"connect_timeout": 10}
            )
        except ImportError as e:
            raise self._bad(
                f"no PostgreSQL driver ({e}); pip install 'harmony-ref[postgres]'"
            ) from None

    def _version(self, con: sa.Connection) -> int | None:
        """The schema version, None for an empty database; ValueError for a foreign one."""
        names = set(sa.inspect(con).get_table_names())
        if not names:
            return None
        if "schema_version" not in names:
            shown = ", ".join(sorted(names)[:5])
            raise self._bad(f"not a harmony-ref history (its tables: {shown})")
        rows = con.execute(sa.select(schema_version.c.version)).scalars().all()
        if len(rows) != 1:
            raise self._bad(f"schema_version holds {len(rows)} rows, not 1 (a corrupt history)")
        version = int(rows[0])
        if version > SCHEMA_VERSION:
            raise self._bad(
                f"history schema version {version}, this harmony-ref reads up to "
                f"{SCHEMA_VERSION} (upgrade harmony-ref)"
            )
        missing = TABLES - names
        if version == SCHEMA_VERSION and missing:
            raise self._bad(f"schema version {version} but missing tables {sorted(missing)}")
        return version

    def _prepare(self, create: bool) -> None:
        try:
            self._prepare_schema(create)
        except ValueError:
            if self._created:  # nothing half-made left behind
                self.engine.dispose()
                self.writer.dispose()
                for suffix in ("", "-wal", "-shm", "-journal"):
                    Path(self.where + suffix).unlink(missing_ok=True)
            raise

    def _prepare_schema(self, create: bool) -> None:
        try:
            with self.engine.connect() as con:  # read first: nothing written to a bad database
                version = self._version(con)
            if version == SCHEMA_VERSION:
                return
            if version is None and not create:
                raise self._bad("an empty database, not a harmony-ref history yet")
            with self.writer.begin() as con:
                if not self.sqlite:
                    con.execute(sa.select(sa.func.pg_advisory_xact_lock(PG_SCHEMA_LOCK)))
                version = self._version(con)  # again, under the lock: another writer may have
                if version is None:
                    meta.create_all(con)
                    con.execute(schema_version.insert().values(version=SCHEMA_VERSION))
                else:
                    for v in range(version, SCHEMA_VERSION):
                        MIGRATIONS[v](con)
                    con.execute(schema_version.update().values(version=SCHEMA_VERSION))
            if self.sqlite:
                self._sqlite_wal()
        except sa.exc.OperationalError as e:
            why = _first_line(e.orig or e)
            if "disk is full" in why:
                why = f"No space left on device ({why})"
            raise self._bad(f"cannot open ({why})") from None
        except sa.exc.DatabaseError as e:
            raise self._bad(f"unreadable database ({_first_line(e.orig or e)})") from None

    def _sqlite_wal(self) -> None:
        """Switch a new SQLite history to WAL (readers never wait on the writer). The switch
        needs the file to itself; a second process opening the same new file at that moment
        makes SQLite answer "locked" without waiting, so the switch is retried, and left to a
        later opening if the file stays busy: the rollback journal is slower, never wrong."""
        with self.engine.connect() as con:
            dbapi = con.connection.dbapi_connection
            deadline = time.monotonic() + WAL_SWITCH_TIMEOUT_S
            while True:
                try:
                    dbapi.execute("PRAGMA journal_mode = WAL").fetchone()
                    return
                except sqlite3.OperationalError as e:
                    if "locked" not in str(e) and "busy" not in str(e):
                        raise sa.exc.OperationalError("PRAGMA journal_mode", None, e) from None
                    if time.monotonic() > deadline:
                        return
                    time.sleep(0.05)

    # writing
    def append(self, data: dict, source: str | None = None) -> bool:
        """Add one record dict; False when the same record is already there."""
        return self.append_many([(data, source)]) == 1

    def append_many(self, items: Iterable[tuple[dict, str | None]]) -> int:
        """Add records in one transaction; returns how many were new. Another writer adding
        one of the same records at the same moment (a unique-uid clash on PostgreSQL) makes it
        try once more, when that record is seen as already there."""
        items = list(items)
        rows = [record_row(d, s) for d, s in items]
        try:
            return self._insert(items, rows)
        except sa.exc.IntegrityError:
            return self._insert(items, rows)

    def _insert(self, items: list[tuple[dict, str | None]], rows: list[dict]) -> int:
        added = 0
        with self.writer.begin() as con:
            uids = [r["uid"] for r in rows]
            have = set(
                con.execute(sa.select(records.c.uid).where(records.c.uid.in_(uids))).scalars()
            )
            for (data, _), row in zip(items, rows):
                if row["uid"] in have:
                    continue
                have.add(row["uid"])
                rid = con.execute(records.insert().values(**row)).inserted_primary_key[0]
                ms = metric_rows(data, row["config_label"])
                if ms:
                    con.execute(metrics.insert(), [{**m, "record_id": rid} for m in ms])
                added += 1
        return added

    # reading
    def metric_names(self) -> list[str]:
        with self.engine.connect() as con:
            return sorted(con.execute(sa.select(metrics.c.name).distinct()).scalars())

    def count(self) -> int:
        with self.engine.connect() as con:
            return int(con.execute(sa.select(sa.func.count()).select_from(records)).scalar_one())

    def series(
        self, metric: str, config: str | None = None, device: str | None = None
    ) -> list[SeriesRow]:
        """Every stored value of `metric` (for one config label / machine when given)."""
        q = (
            sa.select(
                records.c.id,
                records.c.recorded_at,
                records.c.sut_commit,
                records.c.sut_describe,
                records.c.sut_dirty,
                records.c.machine,
                metrics.c.config_label,
                metrics.c.value,
                metrics.c.unit,
                metrics.c.direction,
                metrics.c.kind,
                metrics.c.samples,
            )
            .join(records, records.c.id == metrics.c.record_id)
            .where(metrics.c.name == metric)
            .order_by(records.c.id)
        )
        if config is not None:
            q = q.where(metrics.c.config_label == config)
        if device is not None:
            q = q.where(
                sa.or_(
                    records.c.machine == device,
                    records.c.device_model == device,
                    records.c.cpu_model == device,
                )
            )
        with self.engine.connect() as con:
            return [
                SeriesRow(*r[:11], tuple(float(s) for s in (r[11] or ())))
                for r in con.execute(q).all()
            ]

    def close(self) -> None:
        self.engine.dispose()
        self.writer.dispose()


def _first_line(e) -> str:
    text = str(e).strip().splitlines()
    return text[0][:120] if text else type(e).__name__


def open_history(
    flag: str | None, out_dir: str | Path | None = None, create: bool = True
) -> History:
    """The history a command writes to or reads (see `target`), checked now."""
    return History(target(flag, out_dir), create=create)
