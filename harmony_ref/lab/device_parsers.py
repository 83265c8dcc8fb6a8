"""Parsers for what the device tools print about the device itself (not the benchmark): the
attached-device lists, system properties, the benchmark process's memory, sysfs reads.

Formats, as the tools' own sources print them (each fixture in tests/fixtures/device_outputs/
says where from):
- `hdc list targets` (OpenHarmony developtools_hdc, src/host/server.cpp BuildDaemonVisableLine):
  one connect key per connected device (`<key>\\n`, `<key>\\tUnauthorized\\n` when not yet
  trusted); with `-v` `<key>\\t\\t<USB|TCP|UART|BT>\\t<Connected|Offline|...>\\t<name>\\n`; no device at
  all is the line `[Empty]` (define.h EMPTY_ECHO). Failures are lines starting `[Fail]`
  (define.h MESSAGE_FAIL), e.g. `[Fail][E001005] Device not found or connected`, and the client
  exits 0 whatever happened (src/host/main.cpp `_exit(0)`), so the output is all there is.
- `adb devices [-l]` (AOSP adb transport.cpp append_transport): after `List of devices attached`,
  `<serial>\\t<state>` or, with -l, `%-22s %s` (serial, state) followed by ` <devpath>`,
  ` product:<p>`, ` model:<m>`, ` device:<d>`, ` transport_id:<n>`; the state is `device` when
  usable (`offline`, `unauthorized`, `no permissions ...` otherwise). A missing serial is
  `device '<serial>' not found` (acquire_one_transport), printed by the client as `adb: ...` or
  `error: ...`.
- `getprop` (AOSP toolbox getprop): `[<name>]: [<value>]` per property.
- `param get` (OpenHarmony startup_init, services/begetctl/param_cmd.c BShellParamCmdGet): with no
  name every parameter as `    <name> = <value>`; with a name its value followed by a space.
- `hidumper --mem <pid>` (OpenHarmony hiviewdfx_hidumper, memory_info.cpp): a table whose columns
  are memory_filter.h TITLE_HAS_PID_ split at `_` over two header lines (Pss/Total,
  Shared/Clean, Shared/Dirty, Private/Clean, Private/Dirty, Swap/Total, SwapPss/Total,
  Heap/Size, Heap/Alloc, Heap/Free), a `( kB )` unit line, a dashed line, one row per memory
  class and a `Total` row (UpdateTotalDetail); values in kB, each right-aligned to 14 columns.
  Pss Total already includes SwapPss (`totalAllPss`).
- `/proc/<pid>/status` (Linux, Documentation/filesystems/proc.rst): `VmHWM:\\t<n> kB`, the peak
  resident set size.
- sysfs reads are done with `grep -sH . FILE...` (one `<path>:<value>` line per readable file,
  unreadable ones left out): thermal zones in millidegrees Celsius
  (Documentation/ABI/testing/sysfs-class-thermal), cpufreq in kHz (sysfs-devices-system-cpu),
  battery capacity in percent and status as a word (sysfs-class-power).
- `/proc/uptime` (proc.rst): seconds since boot, then idle seconds.
- `/proc/stat` (proc.rst, "1.7 Miscellaneous kernel statistics"): per core
  `cpu<N> user nice system idle iowait irq softirq steal [guest guest_nice]`, cumulative time in
  USER_HZ ticks; guest time is already inside user, so it is not added again.
- `dumpsys thermalservice` (AOSP frameworks/base services/core/java/com/android/server/power/
  ThermalManagerService.java, dump): a line `Thermal Status: <n>`, the PowerManager
  THERMAL_STATUS_* value (0 NONE, 1 LIGHT, 2 MODERATE, 3 SEVERE, 4 CRITICAL, 5 EMERGENCY,
  6 SHUTDOWN; API 29+).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from harmony_ref.lab._parse import ParseError

HDC_EMPTY = "[Empty]"
HDC_FAIL = "[Fail]"
ADB_HEADER = "List of devices attached"
ADB_STATES = (
    "device",
    "offline",
    "unauthorized",
    "bootloader",
    "recovery",
    "sideload",
    "host",
    "rescue",
    "authorizing",
    "connecting",
    "unknown",
    "no permissions",
)
USABLE_STATES = ("device", "Connected")
MILLI = 1e3


@dataclass(frozen=True)
class AttachedDevice:
    serial: str
    state: str  # adb's connection state, or hdc's status ("Connected" without -v)
    info: dict = field(default_factory=dict)  # adb -l: usb, product, model, device, transport_id

    @property
    def usable(self) -> bool:
        return self.state in USABLE_STATES


def hdc_failure(text: str) -> str | None:
    """The first `[Fail]...` line of an hdc client's output, if any (hdc exits 0 regardless)."""
    for line in text.splitlines():
        if line.strip().startswith(HDC_FAIL):
            return line.strip()
    return None


def parse_hdc_targets(text: str) -> list[AttachedDevice]:
    """`hdc list targets` or `hdc list targets -v`; ParseError on a `[Fail]` line."""
    failure = hdc_failure(text)
    if failure:
        raise ParseError(f"hdc list targets: {failure}")
    out = []
    for line in text.splitlines():
        if not line.strip() or line.strip() == HDC_EMPTY:
            continue
        parts = [p for p in line.rstrip("\r\n").split("\t") if p != ""]
        serial = parts[0].strip()
        if len(parts) >= 3:  # -v: key, connection type, status, name
            info = {"connection": parts[1].strip()}
            if len(parts) >= 4:
                info["name"] = parts[3].strip()
            out.append(AttachedDevice(serial, parts[2].strip(), info))
        else:
            state = (
                "Unauthorized"
                if len(parts) == 2 and parts[1].strip() == "Unauthorized"
                else "Connected"
            )
            out.append(AttachedDevice(serial, state))
    return out


def parse_adb_devices(text: str) -> list[AttachedDevice]:
    """`adb devices` or `adb devices -l` (the header and daemon start-up lines skipped)."""
    out = []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith(ADB_HEADER) or s.startswith("*"):
            continue
        if "\t" in line and " " not in line.split("\t", 1)[0]:  # short form: serial<TAB>state
            serial, state = line.split("\t", 1)
            out.append(AttachedDevice(serial.strip(), state.strip()))
            continue
        serial, _, rest = s.partition(" ")
        rest = rest.strip()
        state = next((st for st in ADB_STATES if rest.startswith(st)), rest.split(" ", 1)[0])
        rest = rest[len(state) :]
        info = {}
        for token in rest.split():
            key, sep, value = token.partition(":")
            if sep and key in ("usb", "product", "model", "device", "transport_id"):
                info[key] = value
            elif not sep and "usb" not in info:
                info["devpath"] = token
        out.append(AttachedDevice(serial, state, info))
    return out


_ADB_NOT_FOUND = re.compile(
    r"device '([^']*)' not found|no devices/emulators found|"
    r"no devices found|device offline|error: closed|"
    r"device unauthorized|device still authorizing"
)


def adb_failure(text: str) -> str | None:
    """The line in which adb says the device is not there (or not usable), if any."""
    for line in text.splitlines():
        if _ADB_NOT_FOUND.search(line):
            return line.strip()
    return None


_GETPROP_LINE = re.compile(r"^\[([^\]]+)\]: \[(.*)\]\s*$", re.M)


def parse_getprop(text: str) -> dict[str, str]:
    """Every `[name]: [value]` line of `getprop`."""
    return dict(_GETPROP_LINE.findall(text))


_PARAM_LINE = re.compile(r"^\s*([A-Za-z0-9_.\-]+) = (.*?)\s*$", re.M)


def parse_param_get(text: str) -> dict[str, str]:
    """Every `    name = value` line of `param get` (all parameters)."""
    return dict(_PARAM_LINE.findall(text))


HIDUMPER_COLUMNS = (
    "pss_total_kb",
    "shared_clean_kb",
    "shared_dirty_kb",
    "private_clean_kb",
    "private_dirty_kb",
    "swap_total_kb",
    "swappss_total_kb",
    "heap_size_kb",
    "heap_alloc_kb",
    "heap_free_kb",
)
_INT_ROW = re.compile(r"^\s*(.*?)\s+((?:\d+\s+){" + str(len(HIDUMPER_COLUMNS) - 1) + r"}\d+)\s*$")


def parse_hidumper_mem(text: str) -> dict[str, int]:
    """The `Total` row of `hidumper --mem PID`, by column (kB); ParseError without one."""
    if "Pss" not in text or "Shared" not in text:
        raise ParseError(
            "hidumper --mem: expected the 'Pss / Total ... Heap / Free' table; "
            f"output was: {text.strip()[:200]!r}"
        )
    for line in text.splitlines():
        m = _INT_ROW.match(line)
        if m and m.group(1).strip() == "Total":
            values = [int(v) for v in m.group(2).split()]
            return dict(zip(HIDUMPER_COLUMNS, values))
    raise ParseError(
        "hidumper --mem: no 'Total' row with 10 values in kB "
        f"(columns {', '.join(HIDUMPER_COLUMNS)})"
    )


_VMHWM = re.compile(r"VmHWM:\s*(\d+)\s*kB")


def parse_vmhwm_kb(text: str) -> int:
    """The `VmHWM:` line of /proc/PID/status (kB); ParseError without one."""
    m = _VMHWM.search(text)
    if not m:
        raise ParseError(
            "/proc/PID/status: no 'VmHWM: <n> kB' line (the process has exited, or "
            "the kernel does not report it)"
        )
    return int(m.group(1))


def parse_grep_h(text: str) -> dict[str, str]:
    """`grep -sH . FILE...` output: {path: first line}. A path the grep could not read is absent."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        path, sep, value = line.partition(":")
        if sep and path.startswith("/") and path not in out:
            out[path] = value.strip()
    return out


def parse_uptime_s(text: str) -> float:
    """Seconds since boot from /proc/uptime; ParseError when it is not there."""
    parts = text.split()
    try:
        value = float(parts[0])
    except (IndexError, ValueError):
        raise ParseError(
            f"/proc/uptime: expected '<seconds> <idle seconds>', got {text!r}"
        ) from None
    if not value >= 0 or value == float("inf"):
        raise ParseError(f"/proc/uptime: {value!r} is not a time")
    return value


def millidegrees_c(value: str) -> float:
    """A thermal zone's `temp` (millidegrees Celsius by the sysfs ABI) in degrees."""
    return float(value) / MILLI


_CPU_STAT = re.compile(r"^cpu(\d+)\s+(\d+(?:\s+\d+){3,})\s*$", re.M)


def parse_proc_stat_cpus(text: str) -> dict[int, tuple[int, int]]:
    """Each core's (busy ticks, total ticks) from the `cpu<N>` lines of /proc/stat: busy is
    user + nice + system + irq + softirq + steal, total adds idle and iowait."""
    out = {}
    for m in _CPU_STAT.finditer(text):
        v = [int(x) for x in m.group(2).split()][:8]
        v += [0] * (8 - len(v))
        user, nice, system, idle, iowait, irq, softirq, steal = v
        busy = user + nice + system + irq + softirq + steal
        out[int(m.group(1))] = (busy, busy + idle + iowait)
    return out


THERMAL_STATUS_NAMES = (
    "NONE",
    "LIGHT",
    "MODERATE",
    "SEVERE",
    "CRITICAL",
    "EMERGENCY",
    "SHUTDOWN",
)
_THERMAL_STATUS = re.compile(r"^\s*Thermal Status:\s*(-?\d+)\s*$", re.M)


def parse_thermal_status(text: str) -> int:
    """The `Thermal Status: <n>` line of `dumpsys thermalservice`; ParseError without one."""
    m = _THERMAL_STATUS.search(text)
    if not m:
        raise ParseError("dumpsys thermalservice: no 'Thermal Status: <n>' line")
    return int(m.group(1))
