"""A device session file: one TOML per phone (or this host), read into a validated dataclass.

    spec = load_session("sessions/mate60.toml")     # errors name file, field and value (exit 2)

    [device]
    transport = "hdc"                       # local | hdc | adb
    serial = "23E0223C13000649"             # from `harmony-ref devices`; not for local
    work_dir = "/data/local/tmp/harmony-ref"  # on the device (local: relative to this file)
    profile = "harmony-flagship"            # the device profile it corresponds to (physics check)
    executable = ""                         # the hdc / adb binary (default: found on PATH)
    command_timeout_s = 60.0                # every push, telemetry read and probe

    [benchmark]
    command = "{work_dir}/llama-bench -m {work_dir}/model.gguf -p {prompt_tokens} -n {new_tokens} -o json"
    format = "llama-bench"
    timeout_s = 600.0                       # one run; its process group is killed after it
    warmup_runs = 1
    repeats = 5
    min_valid_repeats = 0                   # 0: every repeat must run unthrottled
    model = "llama-3.2-1b"                  # what it runs (records, physics); --model overrides
    policy = "int4-g32"

    [[push]]                                # skipped when the device holds the same SHA-256
    local = "models/model.gguf"             # relative to this file
    remote = "model.gguf"                   # relative to work_dir
    executable = false

    [cooldown]
    enabled = true
    threshold_c = 40.0                      # wait until the watched zone is at or below this
    max_wait_s = 600.0                      # ... or fail, in one line
    check_interval_s = 10.0

    [telemetry]
    thermal_zones = [0, 1]                  # /sys/class/thermal/thermal_zone<N>/temp
    watch_zone = 0                          # the zone cooldown and the throttle threshold watch
    cpus = [0, 4, 7]                        # /sys/devices/system/cpu/cpu<N>/cpufreq/...
    big_cpus = [7]                          # whose frequency marks a repeat throttled
    battery_dir = "/sys/class/power_supply/battery"   # capacity, status ("" for none)
    memory = "auto"                         # hidumper (hdc), proc_status (VmHWM), none, auto
    thermal_status = "auto"                 # dumpsys (Android's thermal status), none, auto (adb)
    poll_interval_s = 1.0                   # telemetry while the benchmark runs

    [power]                                 # energy per token from the battery (module telemetry.py)
    enabled = true                          # reads <battery_dir>/current_now, voltage_now
    source = "battery"                      # or "odpm": Pixel's rail energy counters (iio)
    current_sign = "auto"                   # current_now's sign while discharging: negative (the
                                            # kernel ABI), positive (some vendors), auto (idle's)
    idle_samples = 5                        # idle power before the run: this many reads ...
    idle_interval_s = 1.0                   # ... this far apart (device-side sleep)
    stop_charging = ""                      # a device command that stops charging before the
                                            # idle reads, e.g. Qualcomm's `echo 1 >
                                            # /sys/class/power_supply/battery/input_suspend`
    restore_charging = ""                   # and the one that restores it (run even on failure)

    [sut]                                   # what is measured (the record's system under test)
    dir = "../llama.cpp"                    # a git checkout (relative to this file) ...
    repository = ""                         # ... or its repository URL and commit, given
    commit = ""
    describe = ""                           # optional with repository/commit

    [throttle]
    temp_c = 45.0                           # watched zone at or above: throttled
    min_big_freq_fraction = 0.85            # a big core capped, or loaded and running, below this
    sustain_s = 5.0                         # ... running low while loaded this long: throttled
    loaded_share = 0.5                      # a core busier than this share (/proc/stat) is loaded
    max_thermal_status = 0                  # Android thermal status above this: throttled (NONE)
    keep_throttled = false                  # true: throttled repeats count (still marked)

Every table but [device] may be left out (the defaults above). Checked at load, before any work:
the transport, a serial for hdc/adb, the benchmark format, that the watched zone is read, that
big cores are among the cores read, min_valid_repeats <= repeats, every [[push]] local file
exists and its remote name stays inside work_dir, [sut] either a dir or a repository and a
commit, and that the profile loads. `load_session(path, push_root=DIR)` resolves relative
[[push]] files against DIR instead and leaves their existence to the caller: bisect pushes what
it built in each commit's worktree (with_push_root), which does not exist at load.
"""

from __future__ import annotations

import dataclasses
import string
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from harmony_ref._schema import from_table
from harmony_ref._toml import loads
from harmony_ref.lab.process import brief

TRANSPORTS = ("local", "hdc", "adb")
MEMORY_SOURCES = ("auto", "hidumper", "proc_status", "none")
THERMAL_STATUS_SOURCES = ("auto", "dumpsys", "none")
CURRENT_SIGNS = ("auto", "negative", "positive")
POWER_SOURCES = ("battery", "odpm")
DEFAULT_WORK_DIR = "/data/local/tmp/harmony-ref"


@dataclass(frozen=True)
class DeviceSection:
    transport: str = field(metadata={"choices": TRANSPORTS})
    serial: str = ""
    work_dir: str = DEFAULT_WORK_DIR
    profile: str = ""
    executable: str = ""
    command_timeout_s: float = field(default=60.0, metadata={"min": 0.01})


@dataclass(frozen=True)
class BenchmarkSection:
    command: str = ""
    format: str = ""
    timeout_s: float = field(default=600.0, metadata={"min": 0.01})
    warmup_runs: int = field(default=1, metadata={"min": 0})
    repeats: int = field(default=3, metadata={"min": 1, "max": 10_000})
    min_valid_repeats: int = field(default=0, metadata={"min": 0})
    model: str = ""  # what the command runs (a spec preset or checkpoint), for records and physics
    policy: str = ""  # its quantization policy (default int4-g128 where one is needed)

    @property
    def required_valid(self) -> int:
        return self.min_valid_repeats or self.repeats


@dataclass(frozen=True)
class PushItem:
    local: str
    remote: str
    executable: bool = False


@dataclass(frozen=True)
class CooldownSection:
    enabled: bool = True
    threshold_c: float = field(default=40.0, metadata={"min": -40.0, "max": 150.0})
    max_wait_s: float = field(default=600.0, metadata={"min": 0})
    check_interval_s: float = field(default=10.0, metadata={"min": 0.001})


@dataclass(frozen=True)
class TelemetrySection:
    thermal_zones: tuple[int, ...] = field(default=(0,), metadata={"min": 0})
    watch_zone: int = field(default=0, metadata={"min": 0})
    cpus: tuple[int, ...] = field(default=(), metadata={"min": 0})
    big_cpus: tuple[int, ...] = field(default=(), metadata={"min": 0})
    battery_dir: str = "/sys/class/power_supply/battery"
    memory: str = field(default="auto", metadata={"choices": MEMORY_SOURCES})
    thermal_status: str = field(default="auto", metadata={"choices": THERMAL_STATUS_SOURCES})
    poll_interval_s: float = field(default=1.0, metadata={"min": 0.001})


@dataclass(frozen=True)
class ThrottleSection:
    temp_c: float = field(default=45.0, metadata={"min": -40.0, "max": 150.0})
    min_big_freq_fraction: float = field(default=0.85, metadata={"min": 0.0, "max": 1.0})
    sustain_s: float = field(default=5.0, metadata={"min": 0.0})  # assumption: see telemetry.py
    loaded_share: float = field(default=0.5, metadata={"min": 0.0, "max": 1.0})  # assumption
    max_thermal_status: int = field(default=0, metadata={"min": 0, "max": 6})
    keep_throttled: bool = False


@dataclass(frozen=True)
class PowerSection:
    enabled: bool = True
    # battery: current_now x voltage_now; odpm: Pixel's power-rail energy counters (energy.py)
    source: str = field(default="battery", metadata={"choices": POWER_SOURCES})
    current_sign: str = field(default="auto", metadata={"choices": CURRENT_SIGNS})
    idle_samples: int = field(default=5, metadata={"min": 2, "max": 1000})
    idle_interval_s: float = field(default=1.0, metadata={"min": 0.001})
    stop_charging: str = ""  # device shell command run before the idle reads: stops charging
    restore_charging: str = ""  # and after the run, also when it fails: restores charging


@dataclass(frozen=True)
class SutSection:
    """What the session measures, the system under test its records name when no --sut is given:
    a checkout (`dir`), or a repository and commit given as they are."""

    dir: str = ""  # a git checkout, relative to this file: read as --sut DIR reads one
    repository: str = ""  # with commit: a repository URL, for a build not checked out here
    commit: str = ""  # the commit measured (7-40 hex digits)
    describe: str = ""  # optional: its `git describe` (default the commit's first 12 digits)

    @property
    def given(self) -> bool:
        return bool(self.dir or self.repository or self.commit)


@dataclass(frozen=True)
class SessionSpec:
    device: DeviceSection
    benchmark: BenchmarkSection = field(default_factory=BenchmarkSection)
    push: tuple[PushItem, ...] = ()
    cooldown: CooldownSection = field(default_factory=CooldownSection)
    telemetry: TelemetrySection = field(default_factory=TelemetrySection)
    throttle: ThrottleSection = field(default_factory=ThrottleSection)
    power: PowerSection = field(default_factory=PowerSection)
    sut: SutSection = field(default_factory=SutSection)
    path: str = field(default="<session>", init=False)  # the file it was read from
    push_root: str = field(default="", init=False)  # relative [[push]] files' folder ("" = path's)

    @property
    def transport(self) -> str:
        return self.device.transport

    @property
    def memory_source(self) -> str:
        """hidumper (HarmonyOS), proc_status (VmHWM) or none; auto: by the transport."""
        auto = "hidumper" if self.transport == "hdc" else "proc_status"
        return auto if self.telemetry.memory == "auto" else self.telemetry.memory

    @property
    def thermal_status_source(self) -> str:
        """dumpsys (Android's `dumpsys thermalservice`, API 29+) or none; auto: adb's."""
        auto = "dumpsys" if self.transport == "adb" else "none"
        return auto if self.telemetry.thermal_status == "auto" else self.telemetry.thermal_status

    def local_path(self, item: PushItem) -> Path:
        """A [[push]] item's local file (relative paths are relative to the session file, or to
        push_root when set)."""
        p = Path(item.local).expanduser()
        if p.is_absolute():
            return p
        return (Path(self.push_root) if self.push_root else Path(self.path).resolve().parent) / p

    def sut_dir(self) -> Path | None:
        """[sut] dir, resolved against the session file (None when not given)."""
        if not self.sut.dir:
            return None
        p = Path(self.sut.dir).expanduser()
        return p if p.is_absolute() else Path(self.path).resolve().parent / p


def replaced(spec: SessionSpec, **changes) -> SessionSpec:
    """dataclasses.replace for a spec: the fields set at load (path, push_root) kept."""
    out = dataclasses.replace(spec, **changes)
    object.__setattr__(out, "path", spec.path)
    object.__setattr__(out, "push_root", spec.push_root)
    return out


def with_push_root(spec: SessionSpec, root: str | Path) -> SessionSpec:
    """`spec` with its relative [[push]] files read from `root` (bisect: a commit's worktree)."""
    out = replaced(spec)
    object.__setattr__(out, "push_root", str(root))
    return out


def short_path(p: Path, limit: int = 40) -> str:
    """A path as an error line names it: relative to the working directory where it is inside,
    else as given when short, else `.../<folder>/<name>` (or `.../<name>`)."""
    try:
        rel = str(p.resolve().relative_to(Path.cwd()))
        if len(rel) <= limit:
            return rel
    except ValueError:
        pass
    if len(str(p)) <= limit:
        return str(p)
    tail = f".../{p.parent.name}/{p.name}"
    return tail if len(tail) <= limit else f".../{p.name}"


def _bad(source: str, where: str, value, why: str) -> ValueError:
    """One line naming file, field and value (a long value cut short)."""
    return ValueError(f"{source}: field '{where}' = {brief(repr(value), 50)}: {why}")


def resolve_work_dir(spec: SessionSpec) -> SessionSpec:
    """A local session's relative work_dir, made absolute against the session file."""
    if spec.transport != "local":
        return spec
    p = Path(spec.device.work_dir).expanduser()
    if not p.is_absolute():
        p = Path(spec.path).resolve().parent / p
    return replaced(spec, device=dataclasses.replace(spec.device, work_dir=str(p)))


def check_session(spec: SessionSpec, source: str) -> None:
    """The checks the schema cannot express (see the module docstring); ValueError on the first."""
    from harmony_ref.lab.parsers import OUTPUT_FORMATS

    d, b, t = spec.device, spec.benchmark, spec.telemetry
    if d.transport in ("hdc", "adb") and not d.serial.strip():
        raise _bad(
            source,
            "device.serial",
            d.serial,
            f"a {d.transport} session needs one (`harmony-ref devices` lists them)",
        )
    if d.transport != "local" and not PurePosixPath(d.work_dir).is_absolute():
        raise _bad(source, "device.work_dir", d.work_dir, "must be an absolute path on the device")
    if b.format and b.format not in OUTPUT_FORMATS:
        raise _bad(
            source, "benchmark.format", b.format, f"must be one of {', '.join(OUTPUT_FORMATS)}"
        )
    if b.command:
        try:
            list(string.Formatter().parse(b.command))
        except ValueError as e:
            raise _bad(
                source,
                "benchmark.command",
                b.command,
                f"malformed template ({e}); literal braces are written {{{{ and }}}}",
            ) from None
    if b.min_valid_repeats > b.repeats:
        raise _bad(
            source,
            "benchmark.min_valid_repeats",
            b.min_valid_repeats,
            f"must be <= benchmark.repeats = {b.repeats}",
        )
    if spec.cooldown.enabled and not t.thermal_zones:
        raise _bad(
            source,
            "telemetry.thermal_zones",
            [],
            "cooldown needs a thermal zone to watch (or set cooldown.enabled = false)",
        )
    if t.thermal_zones and t.watch_zone not in t.thermal_zones:
        raise _bad(
            source,
            "telemetry.watch_zone",
            t.watch_zone,
            f"must be one of telemetry.thermal_zones = {list(t.thermal_zones)}",
        )
    for name in ("thermal_zones", "cpus", "big_cpus"):
        values = getattr(t, name)
        if len(set(values)) != len(values):
            raise _bad(source, f"telemetry.{name}", list(values), "lists a number twice")
    missing = [c for c in t.big_cpus if c not in t.cpus]
    if missing:
        raise _bad(
            source,
            "telemetry.big_cpus",
            list(t.big_cpus),
            f"cpu {missing[0]} is not in telemetry.cpus = {list(t.cpus)}",
        )
    for name, tool, only, instead in (  # tools one OS has
        ("thermal_status", "dumpsys", "adb", "none over hdc or locally"),
        ("memory", "hidumper", "hdc", "proc_status over adb or locally"),
    ):
        if getattr(t, name) == tool and d.transport != only:
            os_name = "Android" if only == "adb" else "HarmonyOS"
            raise _bad(source, f"telemetry.{name}", tool, f"{tool} is {os_name}'s: use {instead}")
    remotes = set()
    for i, item in enumerate(spec.push):
        where = f"push[{i}]"
        local = spec.local_path(item)
        deferred = spec.push_root and not Path(item.local).expanduser().is_absolute()
        if not deferred and not local.is_file():
            raise _bad(source, f"{where}.local", item.local, f"no such file ({short_path(local)})")
        r = PurePosixPath(item.remote)
        if not item.remote or r.is_absolute() or ".." in r.parts:
            raise _bad(
                source,
                f"{where}.remote",
                item.remote,
                "must be a relative name inside device.work_dir",
            )
        if item.remote in remotes:
            raise _bad(source, f"{where}.remote", item.remote, "is pushed twice")
        remotes.add(item.remote)
    pw = spec.power
    if bool(pw.stop_charging.strip()) != bool(pw.restore_charging.strip()):
        where = "power.restore_charging" if pw.stop_charging.strip() else "power.stop_charging"
        raise _bad(source, where, "", "power.stop_charging and power.restore_charging go together")
    u = spec.sut
    if u.dir and (u.repository or u.commit):
        raise _bad(source, "sut.dir", u.dir, "give a dir or a repository and a commit, not both")
    if bool(u.repository) != bool(u.commit):
        where = "sut.commit" if u.repository else "sut.repository"
        raise _bad(source, where, "", "sut.repository and sut.commit go together")
    if u.commit and not (
        7 <= len(u.commit) <= 40 and all(c in "0123456789abcdef" for c in u.commit.lower())
    ):
        raise _bad(source, "sut.commit", u.commit, "must be a git commit hash (7-40 hex digits)")
    if u.describe and not u.commit:
        raise _bad(source, "sut.describe", u.describe, "goes with sut.repository and sut.commit")
    if d.profile:
        from harmony_ref.device.runtime import load_profile

        try:
            load_profile(d.profile)
        except ValueError as e:
            raise _bad(source, "device.profile", d.profile, brief(str(e), 60)) from None


def load_session(path: str | Path, push_root: str | Path | None = None) -> SessionSpec:
    """Read, validate and resolve a session file (see the module docstring); `push_root`: the
    folder relative [[push]] files are read from, not checked here (bisect's worktrees)."""
    p = Path(path)
    source = short_path(p)
    if not p.is_file():
        raise ValueError(f"session file {source} does not exist")
    spec = from_table(SessionSpec, loads(p.read_text(), source), source)
    object.__setattr__(spec, "path", str(p))
    object.__setattr__(spec, "push_root", str(push_root) if push_root else "")
    check_session(spec, source)
    return resolve_work_dir(spec)
