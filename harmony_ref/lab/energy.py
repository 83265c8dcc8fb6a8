"""Energy per token measured from a phone's battery: its current and voltage sampled with the
rest of the telemetry (telemetry.py), the idle power read before the run subtracted.

Units and signs, from the kernel's power_supply ABI (Documentation/ABI/testing/
sysfs-class-power): `current_now` is an instant, unsmoothed battery current in microamps and
`voltage_now` an instant battery voltage in microvolts, so one read's power is
current x voltage x 1e-12 W. The ABI says current_now is negative while a battery discharges and
positive while it charges; drivers differ (several phone fuel gauges report discharge as
positive), so the session says which with `[power] current_sign`: "negative" (the ABI),
"positive", or "auto", the sign of the idle reads taken while the battery status is
"Discharging" (a discharging phone's current flows out, whichever way its driver signs it).

- idle power: `idle_samples` reads `idle_interval_s` apart before the first run, their mean;
- a run's power: the reads taken while the benchmark's process was alive, integrated over the
  device's clock (trapezoids; one read: its value) and divided by that span: the average power
  while it ran (`device_avg_power_w`);
- energy per token: (average power - idle power) / the run's decode tokens per second, in mJ:
  the energy the model's decoding adds per generated token, as the cost model's
  energy_per_token_mj counts it (power / tokens per second). A run whose time is mostly
  prefill or loading dilutes it (its reads are averaged in): measure energy with a benchmark
  that mostly decodes.
- charging: while the battery status is anything but "Discharging" (Charging, Full, Not
  charging: the phone runs from its charger) the battery current is not the load's, so the
  metric is absent and the record says why.

Pixel's on-device power monitor (ODPM, `[power] source = "odpm"`): the power rails' energy
counters in `/sys/bus/iio/devices/iio:device*/energy_value`, one block per monitor chip, as
AOSP's Pixel power-stats HAL parses them (hardware/google/pixel, powerstats
IioEnergyMeterDataProvider.cpp parseEnergyContents):

    t=<milliseconds since boot>
    CH<n>(T=<milliseconds the channel accumulated>)[<rail name>], <energy in microwatt-seconds>

The counters accumulate, so a span's average power is the rails' summed energy difference over
the `t=` difference, per chip (uWs / ms = mW); no integration of reads, and a charger does not
enter it (the rails are the SoC's and memory's, not the battery's). The idle power is the same
over the idle window before the run; a run's power over a read right before the benchmark
starts and one right after this host sees it end (the start window is in it, as in the
battery's reads while its process is alive, and so is a telemetry read in progress at its end,
at near-idle power: fewer reads, less of it). The rails cover what the monitor chips measure, not the
whole phone (no display or battery losses): ODPM and battery figures are not the same
quantity. A counter updates at the chip's own refresh rate, so spans much shorter than it are
coarse.
"""

from __future__ import annotations

import re
import statistics

DISCHARGING = "Discharging"
MICRO2 = 1e-12  # microamps x microvolts -> watts
MJ_PER_J = 1e3
ODPM_FILES = "/sys/bus/iio/devices/iio:device*/energy_value"
UWS_PER_MS_W = 1e-3  # microwatt-seconds per millisecond -> watts
_ODPM_TIME = re.compile(r"t=(\d+)")
_ODPM_RAIL = re.compile(r"CH\d+\(T=\d+\)\[([^\]]+)\],\s*(\d+)")


def discharge_sign(current_sign: str, idle) -> tuple[int, str]:
    """(+1 or -1: what makes a discharging current positive, how it was decided)."""
    if current_sign == "negative":
        return -1, "negative while discharging (session file; the kernel ABI's convention)"
    if current_sign == "positive":
        return 1, "positive while discharging (session file)"
    reads = [s.current_ua for s in idle if s.current_ua and s.battery_status == DISCHARGING]
    if not reads:
        return -1, "the kernel ABI's (negative while discharging): no idle read to tell"
    sign = -1 if statistics.median(reads) < 0 else 1
    word = "negative" if sign < 0 else "positive"
    return sign, f"{word} while discharging (from the idle reads)"


def power_w(sample, sign: int) -> float | None:
    if sample.current_ua is None or sample.voltage_uv is None:
        return None
    return sign * sample.current_ua * sample.voltage_uv * MICRO2


def not_discharging(samples) -> str:
    """Why these reads cannot give the load's power ('' when they can)."""
    for s in samples:
        if s.battery_status is not None and s.battery_status != DISCHARGING:
            return (
                f"battery status {s.battery_status!r} at t={s.t_s:.1f} s: on its charger the "
                "battery current is not the load's"
            )
    return ""


def idle_power_w(idle, sign: int) -> tuple[float | None, str]:
    """The mean power of the idle reads (None and why when there is none)."""
    why = not_discharging(idle)
    if why:
        return None, why
    ps = [p for s in idle if (p := power_w(s, sign)) is not None]
    if not ps:
        return None, "no current_now / voltage_now read while idle"
    return statistics.fmean(ps), ""


def run_power_w(samples, sign: int) -> tuple[float | None, str]:
    """The average power while the benchmark's process was alive (None and why otherwise)."""
    alive = [s for s in samples if s.phase == "during" and s.running]
    why = not_discharging(alive)
    if why:
        return None, why
    pts = [(s.t_s, p) for s in alive if (p := power_w(s, sign)) is not None]
    if not pts:
        return None, "no current_now / voltage_now read while the benchmark ran"
    if len(pts) == 1 or pts[-1][0] <= pts[0][0]:
        return statistics.fmean(p for _, p in pts), ""
    joules = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(pts, pts[1:]))
    return joules / (pts[-1][0] - pts[0][0]), ""


def energy_per_token_mj(avg_w: float, idle_w: float, tokens_per_s: float) -> float:
    """The energy the run adds above idle per generated token, in mJ."""
    return (avg_w - idle_w) / tokens_per_s * MJ_PER_J


def parse_odpm(text: str) -> list[tuple[float, dict[str, float]]]:
    """The blocks of `cat .../energy_value` (one per monitor chip): (t ms, {rail: uWs}).
    A line of neither form is a ValueError naming it."""
    blocks: list[tuple[float, dict[str, float]]] = []
    for line in (ln.strip() for ln in text.splitlines()):
        if not line:
            continue
        if m := _ODPM_TIME.fullmatch(line):
            blocks.append((float(m.group(1)), {}))
        elif (m := _ODPM_RAIL.fullmatch(line)) and blocks:
            blocks[-1][1][m.group(1)] = float(m.group(2))
        else:
            raise ValueError(f"ODPM energy_value: unexpected line {line[:60]!r}")
    return blocks


def odpm_power_w(before: str | None, after: str | None) -> tuple[float | None, str]:
    """The rails' average power between two reads of the energy counters (None and why)."""
    if not before or not after:
        return None, f"no ODPM energy counters read ({ODPM_FILES})"
    try:
        a, b = parse_odpm(before), parse_odpm(after)
    except ValueError as e:
        return None, str(e)
    if not a or len(a) != len(b):
        return None, f"the ODPM reads hold {len(a)} and {len(b)} monitor blocks"
    watts = 0.0
    for (t0, r0), (t1, r1) in zip(a, b):
        if t1 <= t0:
            return None, f"the ODPM counters did not advance (t={t0:.0f} -> {t1:.0f} ms)"
        if set(r0) != set(r1):
            return None, "the ODPM rails changed between two reads"
        watts += sum(r1[k] - r0[k] for k in r0) / (t1 - t0) * UWS_PER_MS_W
    return watts, ""
