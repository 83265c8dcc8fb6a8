"""Timing and host-environment helpers shared by HostDevice and the calibration microbenchmarks:
warm-up + repeats with the median kept beside the raw samples, peak RSS, CPU frequency and
temperatures where psutil exposes them, and a bounded wait for the CPU to cool down."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import psutil

from harmony_ref.units import KIB, MB


@dataclass(frozen=True)
class Timing:
    median_s: float
    samples_s: tuple[float, ...]


def time_call(fn, warmup: int = 2, repeats: int = 5, min_sample_s: float = 0.0) -> Timing:
    """Median of `repeats` timed calls after `warmup` untimed ones. When one call is shorter than
    `min_sample_s`, each sample times a loop of calls and divides (the timer's resolution and
    the Python loop stay below 1% of a sample)."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}")
    for _ in range(warmup):
        fn()
    inner = 1
    if min_sample_s > 0:
        t0 = time.perf_counter()
        fn()
        one = time.perf_counter() - t0
        inner = max(1, int(min_sample_s / max(one, 1e-9)))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t0) / inner)
    return Timing(statistics.median(samples), tuple(samples))


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (Linux: write 5 to /proc/self/clear_refs), so the next
    `peak_rss_mb` covers only what ran since. False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """Peak resident set size of this process: VmHWM on Linux (resettable), else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * KIB / MB
    except OSError:
        pass
    import resource
    import sys

    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return ru / MB if sys.platform == "darwin" else ru * KIB / MB


def cpu_freq_mhz() -> float | None:
    try:
        f = psutil.cpu_freq()
    except (AttributeError, NotImplementedError, OSError):
        return None
    return float(f.current) if f and f.current else None


def cpu_temps_c() -> dict[str, float]:
    """Temperature sensors psutil exposes ({} on hosts and VMs without any)."""
    read = getattr(psutil, "sensors_temperatures", None)
    if read is None:
        return {}
    try:
        sensors = read() or {}
    except (OSError, RuntimeError):
        return {}
    out = {}
    for chip, entries in sensors.items():
        for i, e in enumerate(entries):
            if e.current is not None:
                out[f"{chip}/{e.label or i}"] = float(e.current)
    return out


def max_temp_c() -> float | None:
    temps = cpu_temps_c()
    return max(temps.values()) if temps else None


@dataclass
class ThermalGate:
    """Wait, at most `timeout_s`, until the hottest CPU sensor reads below `threshold_c`."""

    threshold_c: float
    timeout_s: float = 60.0
    poll_s: float = 1.0
    seen_c: list[float] = field(default_factory=list)
    waited_s: float = 0.0
    outcome: str = ""

    def wait(self, sleep=time.sleep, read=max_temp_c, clock=time.monotonic) -> str:
        t0 = clock()
        while True:
            t = read()
            if t is None:
                self.outcome = "no temperature sensor exposed by psutil: not gated"
                break
            self.seen_c.append(t)
            if t < self.threshold_c:
                self.outcome = f"cool: {t:.1f} C < {self.threshold_c:.1f} C"
                break
            if clock() - t0 >= self.timeout_s:
                self.outcome = (f"timeout: still {t:.1f} C >= {self.threshold_c:.1f} C after "
                                f"{self.timeout_s:g} s; measured anyway")
                break
            sleep(self.poll_s)
        self.waited_s = clock() - t0
        return self.outcome
