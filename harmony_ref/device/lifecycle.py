"""Model lifecycle: a user opening and closing an AI feature many times, and what each way of
managing the model instance costs in latency and NPU memory.

Loading a model allocates NPU memory (one instance: weights + KV cache + activations + runtime
workspace, device/memory.py's peak) that only an explicit release returns. The profile's
`npu.memory_mb` is what the NPU driver lets loaded models hold. Strategies, per entry k = 1..N:
- `destroy`: load on enter, release on exit: every entry is a cold start (device/coldstart.py,
  `cold`, read loading); memory goes back to 0 after each exit.
- `resident`: load once on the first entry (cold) and keep the instance: later entries pay only
  the warm first token (`preload_warmup`); one instance is held all the time.
- `leak`: create on every enter and never release (the bug the source describes): every entry is
  a cold start and adds one instance; entry k needs k instances, so it fails (NPU out of memory)
  at the first k with k x instance > npu.memory_mb, i.e. k = floor(memory_mb / instance) + 1, and
  every entry after it fails too (the leaked instances are never returned).
Any strategy fails at entry 1 when one instance alone exceeds the budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harmony_ref.config import RunConfig
from harmony_ref.device.coldstart import breakdown
from harmony_ref.device.memory import memory_estimate
from harmony_ref.device.soc import DeviceProfile
from harmony_ref.metrics import Metrics
from harmony_ref.units import MB

STRATEGIES = ("destroy", "resident", "leak")
DEFAULT_ENTRIES = 20
MAX_ENTRIES = 10_000  # a timeline row each: bounded work and memory


def npu_budget_mb(profile: DeviceProfile) -> float:
    if profile.npu is None:
        raise ValueError(f"{profile.source}: no [npu] section: the lifecycle needs npu.memory_mb")
    return profile.npu.memory_mb


def instance_mb(profile: DeviceProfile, config: RunConfig) -> float:
    """NPU memory one loaded instance holds: weights + KV cache + activations + workspace."""
    return memory_estimate(profile, config).peak_bytes / MB


def leak_fail_entry(budget_mb: float, one_mb: float) -> int:
    """The first entry whose k leaked instances exceed the budget: floor(budget / one) + 1."""
    return math.floor(budget_mb / one_mb) + 1


def _start_ms(profile: DeviceProfile, config: RunConfig) -> dict[str, float]:
    """Tap to first token per coldstart strategy, read loading."""
    return {
        r["strategy"]: r["total_ms"] for r in breakdown(profile, config) if r["loader"] == "read"
    }


@dataclass(frozen=True)
class Entry:
    entry: int  # 1-based
    status: str  # "ok" or "failed" (out of NPU memory)
    enter_ms: float  # tap to first token (0 when it failed: nothing was produced)
    npu_mb_open: float  # held while the feature is open
    npu_mb_closed: float  # held after the user closes it


@dataclass(frozen=True)
class Lifecycle:
    strategy: str
    entries: list[Entry]
    budget_mb: float
    instance_mb: float
    fail_entry: int | None  # first failed entry, None if all N succeeded

    def summary(self) -> dict:
        ok = [e for e in self.entries if e.status == "ok"]
        return {
            "strategy": self.strategy,
            "entries": len(self.entries),
            "succeeded": len(ok),
            "fail_entry": self.fail_entry,
            "total_enter_ms": sum(e.enter_ms for e in ok),
            "first_enter_ms": ok[0].enter_ms if ok else None,
            "later_enter_ms": ok[1].enter_ms if len(ok) > 1 else None,
            "peak_npu_mb": max(e.npu_mb_open for e in self.entries),
            "held_after_last_mb": self.entries[-1].npu_mb_closed,
            "instance_mb": self.instance_mb,
            "budget_mb": self.budget_mb,
        }


def simulate_lifecycle(
    profile: DeviceProfile, config: RunConfig, strategy: str, entries: int = DEFAULT_ENTRIES
) -> Lifecycle:
    """The timeline of `entries` open/close cycles under `strategy` (the module docstring)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy = {strategy!r}: must be one of {list(STRATEGIES)}")
    if not isinstance(entries, int) or isinstance(entries, bool) or entries < 1:
        raise ValueError(f"entries = {entries!r}: must be an int >= 1")
    if entries > MAX_ENTRIES:
        raise ValueError(f"entries = {entries:,}: at most {MAX_ENTRIES:,}")
    budget, one = npu_budget_mb(profile), instance_mb(profile, config)
    rows = _start_ms(profile, config)
    cold, warm = rows["cold"], rows["preload_warmup"]
    out: list[Entry] = []
    held, failed_at = 0.0, None
    for k in range(1, entries + 1):
        need = held + one if (strategy != "resident" or k == 1) else held
        if failed_at is not None or need > budget:
            failed_at = failed_at or k
            out.append(Entry(k, "failed", 0.0, held, held))
            continue
        enter = cold if (strategy != "resident" or k == 1) else warm
        closed = 0.0 if strategy == "destroy" else need
        out.append(Entry(k, "ok", enter, need, closed))
        held = closed
    return Lifecycle(strategy, out, budget, one, failed_at)


def lifecycle_metrics(profile: DeviceProfile, config: RunConfig) -> Metrics:
    """The scenario as exact record metrics: one instance's NPU memory, the entry at which the
    leak fails, each strategy's tap-to-first-token per entry."""
    budget, one = npu_budget_mb(profile), instance_mb(profile, config)
    rows = _start_ms(profile, config)
    m = Metrics()
    m.add(
        "lifecycle_instance_npu_mb",
        one,
        "MB",
        "lower",
        description=f"NPU memory one loaded instance holds, of npu.memory_mb = {budget:g}",
    )
    m.add(
        "lifecycle_leak_fail_entry",
        leak_fail_entry(budget, one),
        "entries",
        "higher",
        description="create-without-destroy: the entry at which NPU memory runs out",
    )
    m.add(
        "lifecycle_destroy_enter_ms",
        rows["cold"],
        "ms",
        "lower",
        description="load on enter, destroy on exit: a cold start on every entry",
    )
    m.add(
        "lifecycle_resident_reenter_ms",
        rows["preload_warmup"],
        "ms",
        "lower",
        description="one resident instance: every entry after the first (warm first token)",
    )
    return m
