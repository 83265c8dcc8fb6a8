"""Timing and host-environment helpers shared by HostDevice and the calibration microbenchmarks:
the one timing harness (`interleaved_times_s`: functions timed in turn, block by block, on the
clock a caller names; the main job's host part, the asv suite's relative tracks, the perf tests
and the host calibration all time through it), warm-up + repeats with the median kept beside the
raw samples (`time_call`, and `pick` of the statistic a fit uses), an empty kernel's launch time and a streaming-read bandwidth (the host's
launch overhead and memory roofline), the L2 size and CPU flags, peak RSS, CPU frequency and
temperatures where psutil exposes them, and a bounded wait for the CPU to cool down."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import numba
import numpy as np
import psutil

from harmony_ref._cpus import cpu_model, cpuinfo
from harmony_ref.units import GB, KIB, MB

STATS = ("min", "median")
STREAM_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Timing:
    median_s: float
    samples_s: tuple[float, ...]


def interleaved_times_s(
    fns,
    rounds: int,
    *,
    calls=1,
    warmup: int = 0,
    clock=time.perf_counter,
    before=None,
    each_call: bool = False,
    stop=None,
) -> list[list[float]]:
    """Seconds per call of each of `fns`, timed in turn so that all see the same load: after
    `warmup` untimed calls of each, every round runs, for each fn i in order, `before(i)` (untimed:
    a pause, a warm call) and then a block of `calls` back-to-back calls of it (`calls`: one
    count, or one per fn). Returns, per fn, the time of each block over its calls, or with
    `each_call` the time of each call, timed one by one. `stop(rounds_done, out)`, asked after
    every round, ends the rounds early when it returns True."""
    counts = [calls] * len(fns) if isinstance(calls, int) else list(calls)
    if rounds < 1 or warmup < 0 or len(counts) != len(fns) or min(counts, default=1) < 1:
        raise ValueError(
            f"rounds must be >= 1, warmup >= 0 and one calls count >= 1 per fn, got rounds "
            f"{rounds}, warmup {warmup}, calls {calls!r} for {len(fns)} fns"
        )
    for fn in fns:
        for _ in range(warmup):
            fn()
    out: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        for i, (fn, n) in enumerate(zip(fns, counts)):
            if before is not None:
                before(i)
            if each_call:
                for _ in range(n):
                    t0 = clock()
                    fn()
                    out[i].append(clock() - t0)
            else:
                t0 = clock()
                for _ in range(n):
                    fn()
                out[i].append((clock() - t0) / n)
        if stop is not None and stop(r + 1, out):
            break
    return out


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
    samples = interleaved_times_s([fn], repeats, calls=inner)[0]
    return Timing(statistics.median(samples), tuple(samples))


def pick(t, stat: str) -> float:
    """The time a calibration uses of a Timing (or anything with samples_s and median_s, such as
    HostDevice's OpTime): the median, or the fastest sample ("min": on a shared machine other
    processes only ever add time, so the fastest repeat is the least disturbed)."""
    if stat not in STATS:
        raise ValueError(f"stat must be one of {STATS}, got {stat!r}")
    return min(t.samples_s) if stat == "min" else t.median_s


@numba.njit(cache=True)
def _empty_kernel(x):
    return x[0]


@numba.njit(cache=True)
def _stream_read(a):
    s = 0
    for i in range(a.size):
        s += a[i]
    return s


def launch_timing(warmup: int = 3, repeats: int = 7) -> Timing:
    """One call of an empty Numba kernel: the bare dispatch cost of a kernel launch."""
    x = np.zeros(1, np.float32)
    _empty_kernel(x)
    return time_call(lambda: _empty_kernel(x), warmup, repeats, min_sample_s=2e-3)


def stream_read_gbps(warmup: int = 1, repeats: int = 5) -> float:
    """Single-thread streaming read of a 64 MiB array, bytes / fastest repeat (GB/s): a peak, so
    the least disturbed repeat is the one that counts."""
    a = np.ones(STREAM_BYTES // 8, dtype=np.int64)
    _stream_read(a[:8])
    t = time_call(lambda: _stream_read(a), warmup, repeats)
    return a.nbytes / min(t.samples_s) / GB


def onchip_buffer_bytes() -> int:
    """L2 size of cpu0 from sysfs (the host's "on-chip buffer"); 1 MiB when not readable."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index2/size") as f:
            text = f.read().strip()
        return (
            int(text[:-1]) * (KIB if text.endswith("K") else KIB * KIB)
            if text[-1] in "KM"
            else int(text)
        )
    except (OSError, ValueError, IndexError):
        return KIB * KIB


def cpu_id() -> str:
    """This CPU as the fidelity fixtures name theirs (harmony_ref/data/fidelity/*.toml cpu_id):
    its model name with /proc/cpuinfo's family and model, "Intel(R) Xeon(R) Processor (family 6
    model 167)". A virtual machine's model name can be generic; the family and model tell two
    such CPUs apart. The model name alone where /proc/cpuinfo has no family (Arm, not Linux)."""
    family, model = cpuinfo("cpu family"), cpuinfo("model")
    name = cpu_model()
    return f"{name} (family {family} model {model})" if family and model else name


def cpu_flags() -> set[str]:
    return set((cpuinfo("flags") or "").split())


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
                self.outcome = (
                    f"timeout: still {t:.1f} C >= {self.threshold_c:.1f} C after "
                    f"{self.timeout_s:g} s; measured anyway"
                )
                break
            sleep(self.poll_s)
        self.waited_s = clock() - t0
        return self.outcome


def add_host_memory_metrics(m, prov: dict, profile, config) -> None:
    """The memory model's metrics for a host run: against the calibrated host profile's budget
    when one is given, else against this host's total RAM (psutil), with the budget's source in
    `prov["memory_budget"]` (HostDevice's op-graph run and a checkpoint's real generation)."""
    import types

    from harmony_ref.device.memory import add_memory_metrics, memory_estimate

    if profile is not None:
        mem_spec, budget = profile, f"{profile.name}: RAM x app_memory_share"
        workspace = f"{profile.name}'s runtime_workspace_mb"
    else:
        ram = psutil.virtual_memory().total
        mem_spec = types.SimpleNamespace(
            name="this host",
            memory=types.SimpleNamespace(workspace_bytes=0.0, app_budget_bytes=float(ram)),
        )
        budget = f"this host's total RAM (psutil, {ram / GB:.1f} GB): no host profile given"
        workspace = "0: NumPy/Numba scratch is in the measured peak RSS"
    prov["memory_budget"] = budget
    add_memory_metrics(
        m, memory_estimate(mem_spec, config), budget_source=budget, workspace_source=workspace
    )
