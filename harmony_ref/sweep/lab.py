"""The device lab: a sweep's grid measured on several phones at once, each phone a Dask worker
resource, each point through that phone's device session (lab/session.py).

    phones = load_phones(["phones/mate60.toml", "phones/pixel8.toml"])
    lab = Lab(grid, phones)                  # grid x phones: a point per config per phone
    summary = run_sweep(lab, SweepStore("lab"))                # run.py: a local lab here, or
    summary = run_sweep(lab, store, scheduler="tcp://10.0.0.5:8786")  # phones on other hosts

A phone is a session file (lab/session_spec.py) of transport hdc or adb: its serial names
the Dask resource `phone-SERIAL`, and a point that runs on it asks for one unit of it, so one
benchmark runs on a phone at a time whatever the number of worker threads; the cooldown,
warm-up, repeats and throttle rules are the session's own, per phone. A config goes to the
phones whose `device.profile` it names (the grid's profiles: by default the phones'). The local
lab (no --scheduler) is one in-process worker thread per phone: the phone does the work, this
host only drives hdc/adb. Phones on other hosts join a running scheduler through a worker
started next to them, `dask worker tcp://HOST:8786 --nthreads 1 --resources phone-SERIAL=1`,
with the session files and their [[push]] files at the same paths there (a shared checkout).

A point's key is its config's (grid.py), the phone's serial and the SHA-256 of its session file
and pushed files, so a rerun finds what it has (resumable like any sweep) and a new benchmark
binary or model measures again. A phone that vanishes fails its own points with the session's
one-line reason, which names its serial (execute.run_point); a phone no worker declares fails
its points at once, and one whose worker leaves mid-sweep fails what it had left after
LOST_WORKER_S; the other phones go on. The Dask side (the local lab's cluster, the resources)
is in run.py, the sweep's one module that imports `distributed`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from harmony_ref.sweep.grid import Grid, Point, _digest, _fail, code_version

LAB_TRANSPORTS = ("hdc", "adb")
# How long a phone's resource may be missing from the cluster before its pending points fail:
# a worker's nanny restarts it within seconds (assumption: long enough for a restart, short
# enough that a sweep does not wait on a host that left).
LOST_WORKER_S = 10.0


@dataclass(frozen=True)
class Phone:
    path: str  # the session file, absolute
    serial: str
    profile: str
    transport: str
    command: str  # the session's benchmark command template and output format
    format: str
    digest: str  # SHA-256 of the session file and its [[push]] files

    @property
    def resource(self) -> str:
        return resource_name(self.serial)

    @property
    def options(self) -> dict[str, str]:
        """The backend options a point on this phone runs with (job/main.py's command part)."""
        return {"command": self.command, "format": self.format, "session": self.path}

    def to_dict(self) -> dict:
        return {
            "session": self.path,
            "serial": self.serial,
            "profile": self.profile,
            "transport": self.transport,
            "sha256": self.digest,
        }


def resource_name(serial: str) -> str:
    return f"phone-{serial}"


def load_phones(paths) -> tuple[Phone, ...]:
    """The lab's phones from session files; bad input is a ValueError naming file and field."""
    from harmony_ref.lab.session_spec import load_session, short_path

    if not paths:
        raise ValueError("--sessions: give one session file per phone")
    out: dict[str, Phone] = {}
    for path in paths:
        spec = load_session(path)  # its own errors name the file, field and value
        src, d, b = short_path(Path(path)), spec.device, spec.benchmark
        for field, value, why in (
            ("device.transport", d.transport, "a lab phone is hdc or adb"),
            ("device.profile", d.profile, "a lab phone needs one: configs go to their profile's"),
            ("benchmark.command", b.command, "a lab phone needs one (what each point runs)"),
            ("benchmark.format", b.format, "a lab phone needs one (how its output is read)"),
        ):
            if not value or (field == "device.transport" and value not in LAB_TRANSPORTS):
                raise ValueError(f"{src}: field '{field}' = {value!r}: {why}")
        if d.serial in out:
            raise ValueError(
                f"{src}: field 'device.serial' = {d.serial!r}: also the phone of "
                f"{short_path(Path(out[d.serial].path))} (one session file per phone)"
            )
        out[d.serial] = Phone(
            str(Path(path).resolve()),
            d.serial,
            d.profile,
            d.transport,
            b.command,
            b.format,
            session_digest(spec),
        )
    return tuple(out.values())


def session_digest(spec) -> str:
    """SHA-256 of the session file's bytes and of each [[push]] file's (what a point measures
    besides its config)."""
    h = hashlib.sha256(Path(spec.path).read_bytes())
    for item in spec.push:
        with spec.local_path(item).open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class Lab:
    """A grid measured on phones: each of the grid's points on every phone of its profile."""

    grid: Grid
    phones: tuple[Phone, ...]

    def __post_init__(self):
        src, have = self.grid.source, {p.profile for p in self.phones}
        for profile in self.grid.profiles:
            if profile not in have:
                _fail(
                    src,
                    "profiles",
                    profile,
                    f"no phone has it (theirs: {', '.join(sorted(have))})",
                )
        if self.grid.backend != "simulated":
            _fail(src, "backend", self.grid.backend, "with sessions the phones measure")

    backend = "command"

    @property
    def parts(self) -> tuple[str, ...]:
        return self.grid.parts

    @property
    def size(self) -> int:
        return len(self.points())

    def points(self) -> list[Point]:
        """One Point per grid point per phone of its profile, phones in the given order."""
        code = code_version()
        out = []
        for p in self.grid.points():
            for phone in self.phones:
                if phone.profile == p.config["profile"]:
                    out.append(lab_point(p, phone, code))
        return out

    def points_per_phone(self) -> dict[str, int]:
        counts = {phone.serial: 0 for phone in self.phones}
        for p in self.points():
            counts[p.phone] += 1
        return counts

    def to_dict(self) -> dict:
        return {
            **self.grid.to_dict(),
            "backend": self.backend,
            "sessions": [p.to_dict() for p in self.phones],
        }


def lab_point(p: Point, phone: Phone, code: str) -> Point:
    """Grid point `p` measured on `phone`: the command backend through its session."""
    config = {**p.config, "backend": "command"}
    if not p.error:
        config["backend_options"] = phone.options
    ident = {"config_key": p.config_key, "phone": phone.serial, "session": phone.digest}
    return Point(
        _digest({**ident, "code": code}), _digest(ident), config, p.parts, p.error, phone.serial
    )


# --- what a lab's failures say (run.py) --------------------------------------------------------


def no_worker_message(serial: str, scheduler: str) -> str:
    r = resource_name(serial)
    return (
        f"phone {serial}: no Dask worker declares resource {r} (start one next to it: "
        f"dask worker {scheduler} --nthreads 1 --resources {r}=1)"
    )


def lost_worker_message(serial: str) -> str:
    return (
        f"phone {serial}: its Dask worker (resource {resource_name(serial)}) left the "
        f"cluster for over {LOST_WORKER_S:g} s; its remaining points not measured"
    )
