"""Device telemetry: one read of the phone's temperatures, CPU frequencies, battery and the
benchmark process's memory, and the rule that marks a repeat throttled.

One sample is one shell call (so polling disturbs the benchmark as little as a read can):

    echo @@uptime; cat /proc/uptime; echo @@sysfs; grep -sH . <files>; echo @@mem; <memory>

- files: /sys/class/thermal/thermal_zone<N>/temp (millidegrees C), for each cpu
  /sys/devices/system/cpu/cpu<N>/cpufreq/scaling_cur_freq (the running frequency) and
  scaling_max_freq (the cap thermal cooling imposes), <battery_dir>/capacity and /status. The
  cores' cpuinfo_max_freq (their hardware maximum) is read once, by `probe`.
- memory, while the benchmark runs: `hidumper --mem <pid>` (HarmonyOS; the Total row's Pss) or
  `grep -sH VmHWM /proc/<pid>/status` (Linux, Android; the peak resident set), the pid from the
  file the benchmark launcher wrote. A local run also has the exact peak from wait4.
- /proc/stat's per-core lines (busy and total ticks: how loaded each core was between reads) and,
  on Android, `dumpsys thermalservice`'s `Thermal Status:` line.
- the time is the device's own uptime, so cooldown waits and sample times are in the phone's
  seconds (a host clock only where /proc/uptime cannot be read, and the notes say so).

Throttling is the phone capping its cores, not a core that is idle. A repeat is throttled when,
during or right after the run:
1. Android's thermal status (`dumpsys thermalservice`, API 29+; the value of
   PowerManager.getCurrentThermalStatus) is above `max_thermal_status` (0, NONE): the platform's
   own verdict, the first signal where it exists;
2. a big core's scaling_max_freq (the cap thermal cooling or a power mode imposes) is below
   `min_big_freq_fraction` of its cpuinfo_max_freq;
3. the watched zone is at or above `temp_c`;
4. a big core ran below `min_big_freq_fraction` of its maximum *while loaded*, in consecutive
   samples spanning at least `sustain_s` of device time. Loaded: its busy share of /proc/stat
   time since the previous sample is at least `loaded_share` (where /proc/stat cannot be read:
   the benchmark's process is alive, `test -f /proc/<pid>/status` in the same read).
A benchmark's start window (the process alive, loading its model, the big cores still parked at
a low frequency) is therefore not throttling: the cores are not loaded and nothing caps them. One
low sample never marks a repeat (rule 4 needs a sustained window; 0 makes it one sample again).
A benchmark that leaves the listed big cores idle (one thread on a little core) is never judged
by rule 4 on them: list as big_cpus the cores it runs on; rules 1-3 do not depend on load.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field

from harmony_ref.lab._parse import ParseError
from harmony_ref.lab.device_parsers import (
    THERMAL_STATUS_NAMES,
    millidegrees_c,
    parse_grep_h,
    parse_hidumper_mem,
    parse_proc_stat_cpus,
    parse_thermal_status,
    parse_uptime_s,
    parse_vmhwm_kb,
)
from harmony_ref.units import KIB, MB

PID_FILE = ".harmony-ref-bench.pid"
PROC_STAT = "/proc/stat"
POWER_FILES = ("current_now", "voltage_now")  # sysfs-class-power: microamps, microvolts
THERMALSERVICE = "thermalservice"
KHZ_PER_GHZ = 1e6


def zone_path(n: int) -> str:
    return f"/sys/class/thermal/thermal_zone{n}/temp"


def cpufreq_path(cpu: int, name: str) -> str:
    return f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/{name}"


@dataclass
class Sample:
    phase: str  # before (the last cooldown reading, or one taken) | during | after
    t_s: float  # device uptime (or the host clock, see Telemetry.clock)
    temps_c: dict[int, float] = field(default_factory=dict)
    cur_khz: dict[int, int] = field(default_factory=dict)
    cap_khz: dict[int, int] = field(default_factory=dict)
    battery_pct: float | None = None
    battery_status: str | None = None
    mem_kb: int | None = None  # hidumper Pss or VmHWM, kB
    running: bool | None = None  # during a run: was the benchmark process alive at this read
    ticks: dict[int, tuple[int, int]] = field(default_factory=dict)  # /proc/stat (busy, total)
    thermal_status: int | None = None  # Android's `Thermal Status:` (dumpsys thermalservice)
    current_ua: int | None = None  # <battery_dir>/current_now, microamps as the driver signs it
    voltage_uv: int | None = None  # <battery_dir>/voltage_now, microvolts


@dataclass(frozen=True)
class Verdict:
    throttled: bool
    reasons: tuple[str, ...]


class Telemetry:
    """Reads samples over a transport for a session's [telemetry] and [throttle] sections."""

    def __init__(
        self,
        transport,
        telemetry,
        throttle,
        work_dir: str,
        memory_source: str,
        thermal_status_source: str = "none",
        power: bool = False,
    ):
        self.transport, self.cfg, self.throttle = transport, telemetry, throttle
        self.work_dir = work_dir
        self.memory_source = memory_source
        self.thermal_status_source = thermal_status_source
        self.power = power  # read current_now and voltage_now (the [power] section is on)
        self.max_khz: dict[int, int] = {}
        self.unreadable: list[str] = []
        self.notes: list[str] = []
        self.clock = "device uptime (/proc/uptime)"
        self._host_t0: float | None = None

    # --- the files -----------------------------------------------------------------------------
    def sysfs_files(self) -> list[str]:
        files = [zone_path(z) for z in self.cfg.thermal_zones]
        for c in self.cfg.cpus:
            files += [cpufreq_path(c, "scaling_cur_freq"), cpufreq_path(c, "scaling_max_freq")]
        if self.cfg.battery_dir:
            files += [f"{self.cfg.battery_dir}/capacity", f"{self.cfg.battery_dir}/status"]
            if self.power:
                files += [f"{self.cfg.battery_dir}/{n}" for n in POWER_FILES]
        return files

    def _pid(self) -> str:
        return f"$(cat {shlex.quote(self.work_dir + '/' + PID_FILE)} 2>/dev/null)"

    def _memory_script(self) -> str:
        pid = self._pid()
        if self.memory_source == "hidumper":
            return f"hidumper --mem {pid}"
        if self.memory_source == "proc_status":
            return f"grep -sH VmHWM /proc/{pid}/status"
        return ""

    def _load_and_status_parts(self) -> list[str]:
        """The /proc/stat and thermal-status reads (those the probe found readable)."""
        parts = []
        if self.cfg.cpus and PROC_STAT not in self.unreadable:
            parts += ["echo @@stat", f"grep -s '^cpu[0-9]' {PROC_STAT}"]
        if self.thermal_status_source == "dumpsys" and THERMALSERVICE not in self.unreadable:
            parts += ["echo @@thermal", f"dumpsys {THERMALSERVICE}"]
        return parts

    def script(self, with_memory: bool) -> str:
        files = " ".join(shlex.quote(f) for f in self.sysfs_files())
        parts = ["echo @@uptime", "cat /proc/uptime", "echo @@sysfs"]
        if files:
            parts.append(f"grep -sH . {files}")
        parts += self._load_and_status_parts()
        if with_memory:
            parts.append(f"test -f /proc/{self._pid()}/status && echo @@alive")
            if self._memory_script():
                parts += ["echo @@mem", self._memory_script()]
        return "; ".join(parts)

    # --- reading -------------------------------------------------------------------------------
    def probe(self) -> None:
        """Read every file once (one call): the cores' cpuinfo_max_freq, which files this device
        lacks (kept in `unreadable` and said in `notes`), and whether it has a clock."""
        maxima = [cpufreq_path(c, "cpuinfo_max_freq") for c in self.cfg.cpus]
        wanted = self.sysfs_files() + maxima
        script = "echo @@uptime; cat /proc/uptime"
        if wanted:
            script += "; echo @@sysfs; grep -sH . " + " ".join(shlex.quote(f) for f in wanted)
        script = "; ".join([script, *self._load_and_status_parts()])
        sections = _sections(self.transport.shell(script, what="telemetry probe").out)
        got = parse_grep_h(sections.get("sysfs", ""))
        extra = []
        if self.cfg.cpus and not parse_proc_stat_cpus(sections.get("stat", "")):
            extra.append(PROC_STAT)
        if self.thermal_status_source == "dumpsys":
            try:
                parse_thermal_status(sections.get("thermal", ""))
            except ParseError:
                extra.append(THERMALSERVICE)
        for c, path in zip(self.cfg.cpus, maxima):
            if path in got:
                try:
                    self.max_khz[c] = int(got[path])
                except ValueError:
                    pass
        self.unreadable = [f for f in wanted if f not in got] + extra
        if self.unreadable:
            self.notes.append("could not read on this device: " + ", ".join(self.unreadable))
        if self.cfg.thermal_zones and zone_path(self.cfg.watch_zone) in self.unreadable:
            self.notes.append(
                f"thermal zone {self.cfg.watch_zone} (the watched zone) is not "
                "readable: no cooldown and no temperature throttle check"
            )
        if PROC_STAT in extra:
            self.notes.append(
                "/proc/stat is not readable: a core counts as loaded while the benchmark's "
                "process is alive"
            )
        if THERMALSERVICE in extra:
            self.notes.append(
                "`dumpsys thermalservice` gave no 'Thermal Status:' line (API < 29?): no "
                "Android thermal status check"
            )
        big = [c for c in self.cfg.big_cpus if c in self.max_khz]
        if self.cfg.big_cpus and not big:
            self.notes.append("no big core's cpufreq is readable: no frequency throttle check")
        try:
            parse_uptime_s(sections.get("uptime", ""))
        except ParseError:
            self.clock = "host monotonic clock (/proc/uptime not readable)"
            self._host_t0 = time.monotonic()
            self.notes.append("the device's /proc/uptime is not readable: times are the host's")

    @property
    def can_watch(self) -> bool:
        return (
            bool(self.cfg.thermal_zones) and zone_path(self.cfg.watch_zone) not in self.unreadable
        )

    def read(self, phase: str, with_memory: bool = False) -> Sample:
        r = self.transport.shell(self.script(with_memory), what="telemetry read")
        sections = _sections(r.out)
        t = None
        if self._host_t0 is None:
            try:
                t = parse_uptime_s(sections.get("uptime", ""))
            except ParseError:
                t = None
        if t is None:
            t = time.monotonic() - (self._host_t0 or 0.0)
        s = Sample(phase, t)
        if with_memory:
            s.running = "alive" in sections
        values = parse_grep_h(sections.get("sysfs", ""))
        for z in self.cfg.thermal_zones:
            v = values.get(zone_path(z))
            if v is not None:
                try:
                    s.temps_c[z] = millidegrees_c(v)
                except ValueError:
                    pass
        for c in self.cfg.cpus:
            for name, target in (("scaling_cur_freq", s.cur_khz), ("scaling_max_freq", s.cap_khz)):
                v = values.get(cpufreq_path(c, name))
                if v is not None and v.isdigit():
                    target[c] = int(v)
        if self.cfg.battery_dir:
            cap = values.get(f"{self.cfg.battery_dir}/capacity")
            if cap is not None:
                try:
                    s.battery_pct = float(cap)
                except ValueError:
                    pass
            s.battery_status = values.get(f"{self.cfg.battery_dir}/status")
            for name, attr in zip(POWER_FILES, ("current_ua", "voltage_uv")):
                v = values.get(f"{self.cfg.battery_dir}/{name}")
                if v is not None and v.lstrip("-").isdigit():
                    setattr(s, attr, int(v))
        if "stat" in sections:
            s.ticks = parse_proc_stat_cpus(sections["stat"])
        if "thermal" in sections:
            try:
                s.thermal_status = parse_thermal_status(sections["thermal"])
            except ParseError:
                s.thermal_status = None
        mem = sections.get("mem")
        if mem:
            try:
                s.mem_kb = (
                    parse_hidumper_mem(mem)["pss_total_kb"]
                    if self.memory_source == "hidumper"
                    else parse_vmhwm_kb(mem)
                )
            except ParseError:
                s.mem_kb = None  # the process had exited, or has not started yet
        return s

    def watched_c(self, s: Sample) -> float | None:
        return s.temps_c.get(self.cfg.watch_zone)

    # --- the throttle rule ---------------------------------------------------------------------
    def verdict(self, samples: list[Sample]) -> Verdict:
        """Throttled or not by the module docstring's rules, with one reason per rule and core
        (or zone): its worst reading."""
        th = self.throttle
        worst: dict[tuple, tuple[float, str]] = {}  # (rule, cpu or zone) -> (badness, reason)

        def note(key, badness, text):
            if key not in worst or badness > worst[key][0]:
                worst[key] = (badness, text)

        late = [s for s in samples if s.phase in ("during", "after")]
        for s in late:
            st = s.thermal_status
            if st is not None and st > th.max_thermal_status:
                name = THERMAL_STATUS_NAMES[st] if 0 <= st < len(THERMAL_STATUS_NAMES) else "?"
                note(
                    ("status", 0),
                    st,
                    f"Android thermal status {st} ({name}) > {th.max_thermal_status} at "
                    f"t={s.t_s:.1f} s ({s.phase})",
                )
            for c in self.cfg.big_cpus:
                top, cap = self.max_khz.get(c), s.cap_khz.get(c)
                if top and cap is not None and cap < th.min_big_freq_fraction * top:
                    note(
                        ("cap", c),
                        -cap / top,
                        f"cpu{c} capped at {cap / KHZ_PER_GHZ:.2f} of {top / KHZ_PER_GHZ:.2f} "
                        f"GHz ({cap / top:.0%}) at t={s.t_s:.1f} s ({s.phase})",
                    )
            temp = self.watched_c(s)
            if temp is not None and temp >= th.temp_c:
                note(
                    ("temp", self.cfg.watch_zone),
                    temp,
                    f"zone {self.cfg.watch_zone} at {temp:.1f} C >= {th.temp_c:g} C at "
                    f"t={s.t_s:.1f} s ({s.phase})",
                )
        for c in self.cfg.big_cpus:
            top = self.max_khz.get(c)
            for streak in self.low_while_loaded(samples, c) if top else ():
                span = streak[-1].t_s - streak[0].t_s
                if span < th.sustain_s:
                    continue
                low = min(s.cur_khz[c] for s in streak)
                note(
                    ("ran", c),
                    span,
                    f"cpu{c} stayed at or below {low / KHZ_PER_GHZ:.2f} of "
                    f"{top / KHZ_PER_GHZ:.2f} GHz ({low / top:.0%} < "
                    f"{th.min_big_freq_fraction:.0%}) while loaded for {span:.1f} s "
                    f"(t={streak[0].t_s:.1f}-{streak[-1].t_s:.1f} s)",
                )
        reasons = tuple(text for _, text in worst.values())
        return Verdict(bool(reasons), reasons)

    def low_while_loaded(self, samples: list[Sample], cpu: int) -> list[list[Sample]]:
        """The runs of consecutive during-the-run samples in which `cpu` ran below
        min_big_freq_fraction of its maximum while loaded (module docstring, rule 4)."""
        th, top = self.throttle, self.max_khz[cpu]
        streaks: list[list[Sample]] = [[]]
        prev = None
        for s in samples:
            cur = s.cur_khz.get(cpu)
            low = (
                s.phase == "during"
                and bool(s.running)
                and cur is not None
                and cur < th.min_big_freq_fraction * top
                and self.loaded(prev, s, cpu)
            )
            if low:
                streaks[-1].append(s)
            elif streaks[-1]:
                streaks.append([])
            prev = s
        return [x for x in streaks if x]

    def loaded(self, prev: Sample | None, s: Sample, cpu: int) -> bool:
        """Was `cpu` loaded between two reads: its /proc/stat busy share at least
        loaded_share; without both reads of /proc/stat, whether the benchmark was alive."""
        share = busy_share(prev, s, cpu)
        if share is None:
            return bool(s.running)
        return share >= self.throttle.loaded_share


def busy_share(prev: Sample | None, s: Sample, cpu: int) -> float | None:
    """`cpu`'s busy share of the /proc/stat time between two reads (None without both)."""
    if prev is None or cpu not in prev.ticks or cpu not in s.ticks:
        return None
    busy = s.ticks[cpu][0] - prev.ticks[cpu][0]
    total = s.ticks[cpu][1] - prev.ticks[cpu][1]
    return None if total <= 0 else busy / total


def _sections(text: str) -> dict[str, str]:
    """The `echo @@name` sections of a sample's output."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("@@"):
            current = line[2:].strip()
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def kb_to_mb(kb: float) -> float:
    """hidumper's and /proc's "kB" are KiB (1024 bytes); metrics are in MB (1e6 bytes)."""
    return kb * KIB / MB


def sample_table(samples: list[Sample]) -> dict[str, list]:
    """A repeat's samples as columns (compact in a JSON record): t_s, phase, zone<N>_c,
    cpu<N>_mhz, cpu<N>_cap_mhz, alive (the benchmark's process, during the run), cpu<N>_busy
    (share since the previous read), thermal_status,
    battery_pct, mem_mb; a value not read is null."""
    zones = sorted({z for s in samples for z in s.temps_c})
    cpus = sorted({c for s in samples for c in s.cur_khz} | {c for s in samples for c in s.cap_khz})
    cols: dict[str, list] = {
        "t_s": [round(s.t_s, 3) for s in samples],
        "phase": [s.phase for s in samples],
    }
    for z in zones:
        cols[f"zone{z}_c"] = [s.temps_c.get(z) for s in samples]
    for c in cpus:
        cols[f"cpu{c}_mhz"] = [
            None if s.cur_khz.get(c) is None else s.cur_khz[c] / 1e3 for s in samples
        ]
        cols[f"cpu{c}_cap_mhz"] = [
            None if s.cap_khz.get(c) is None else s.cap_khz[c] / 1e3 for s in samples
        ]
    if any(s.running is not None for s in samples):
        cols["alive"] = [s.running for s in samples]
    for c in sorted({c for s in samples for c in s.ticks}):
        shares = [busy_share(p, s, c) for p, s in zip([None, *samples[:-1]], samples)]
        cols[f"cpu{c}_busy"] = [None if x is None else round(x, 3) for x in shares]
    if any(s.thermal_status is not None for s in samples):
        cols["thermal_status"] = [s.thermal_status for s in samples]
    if any(s.battery_pct is not None for s in samples):
        cols["battery_pct"] = [s.battery_pct for s in samples]
        cols["battery_status"] = [s.battery_status for s in samples]
    if any(s.current_ua is not None for s in samples):
        cols["current_ua"] = [s.current_ua for s in samples]
        cols["voltage_uv"] = [s.voltage_uv for s in samples]
    if any(s.mem_kb is not None for s in samples):
        cols["mem_mb"] = [
            None if s.mem_kb is None else round(kb_to_mb(s.mem_kb), 3) for s in samples
        ]
    return cols
