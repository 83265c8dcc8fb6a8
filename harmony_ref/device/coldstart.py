"""Cold-start model: time from "user taps" to the first token, and where it goes.

Steps the app must go through before a first token (each a pure function of profile and config):
- storage_read: the model file (weights at their stored size, `device.memory.weights_bytes`) at the
  profile's `storage_read_gbps`.
- heap_copy (read loading only): `read()` copies page cache -> app buffer, one DRAM read + one
  write per byte at the profile's effective DRAM bandwidth.
- page_fault (mmap loading only): mmap costs nothing at open; the first touch of each readahead
  window takes a major fault, so the same storage read moves into the first inference, plus
  `MAJOR_FAULT_US` of kernel work per `READAHEAD_KIB` window.
- graph_parse: `graph_parse_ms_per_mb` x file MB (runtime builds / validates its graph).
- npu_init: `npu_init_ms` (open the NPU device, create the runtime context).
- first_touch: the first inference allocates its KV cache, activations and workspace; every page
  faults once and is zeroed (`ANON_FAULT_US` per page plus a DRAM write per byte).
- kernel_load: each distinct kernel of the prefill and decode graphs is loaded to the NPU on its
  first launch (`KERNEL_FIRST_LOAD_MS`).
- first_token: the warm time to first token (prefill + first decode step, `device.cost`).

Strategies, i.e. which steps are still on the user's clock after the tap:
- cold: all of them.
- preload: the app loaded the model at start (storage read or mapping, parse, NPU init) in the
  background; the first inference still pays first_touch, kernel_load and, with mmap, the page
  faults (mapping is not reading).
- preload_warmup: a dummy inference at start touched every page and kernel: only first_token.
So cold >= preload >= preload_warmup for any inputs (each is a sub-sum of non-negative steps).
"""

from __future__ import annotations

from dataclasses import dataclass

from harmony_ref.config import RunConfig
from harmony_ref.device.soc import DeviceProfile
from harmony_ref.metrics import Metrics
from harmony_ref.units import GB, KIB, MB, MS_PER_S, US_PER_S

PAGE_BYTES = 4096  # 4 KiB pages: the Android arm64 kernel default (CONFIG_ARM64_4K_PAGES)
READAHEAD_KIB = 128  # Linux default read_ahead_kb for a block device
MAJOR_FAULT_US = 10.0  # assumption: fault entry, page-cache insert and the synchronous wait not hidden by readahead
ANON_FAULT_US = 0.5  # assumption: anonymous page fault on an arm64 big core, excluding zeroing
KERNEL_FIRST_LOAD_MS = 1.0  # assumption: loading one kernel binary + descriptors to the NPU
LOADERS = ("read", "mmap")
STRATEGIES = ("cold", "preload", "preload_warmup")
STEPS = (
    "storage_read",
    "heap_copy",
    "page_fault",
    "graph_parse",
    "npu_init",
    "first_touch",
    "kernel_load",
    "first_token",
)
# Steps left on the user's clock, per strategy and loader.
_PAID = {
    ("cold", "read"): STEPS,
    ("cold", "mmap"): STEPS,
    ("preload", "read"): ("first_touch", "kernel_load", "first_token"),
    ("preload", "mmap"): (
        "storage_read",
        "page_fault",
        "first_touch",
        "kernel_load",
        "first_token",
    ),
    ("preload_warmup", "read"): ("first_token",),
    ("preload_warmup", "mmap"): ("first_token",),
}


@dataclass(frozen=True)
class ColdStartInputs:
    """What the model needs from the device and model layers (all exact)."""

    file_bytes: float  # stored weights
    alloc_bytes: float  # KV cache + activations + workspace, first touched by the first inference
    kernel_types: int  # distinct kernels in the prefill and decode graphs
    first_token_s: float  # warm TTFT


def coldstart_inputs(profile: DeviceProfile, config: RunConfig) -> ColdStartInputs:
    from harmony_ref.device.cost import config_graph, scenario_timing
    from harmony_ref.device.memory import memory_estimate

    mem = memory_estimate(profile, config)
    s = config.scenario
    # as the profile runs them: CPU-fallback ops are kernels of their own
    graphs = [config_graph(profile, config, "prefill", tokens=s.prompt_tokens)]
    if config.spec.is_decoder:
        graphs.append(config_graph(profile, config, "decode", context=s.prompt_tokens + 1))
    kernel_types = sum(len(g.unique_ops()) for g in graphs)
    return ColdStartInputs(
        file_bytes=mem.weights_bytes,
        alloc_bytes=mem.kv_cache_bytes + mem.activations_bytes + mem.workspace_bytes,
        kernel_types=kernel_types,
        first_token_s=scenario_timing(profile, config).ttft_s,
    )


def step_times_ms(profile: DeviceProfile, inputs: ColdStartInputs) -> dict[str, float]:
    """Each step's time (ms) on `profile`; see the module docstring."""
    rt, mem = profile.runtime, profile.memory
    dram_bps = mem.dram_bandwidth_gbps * GB * mem.memory_efficiency
    file_mb = inputs.file_bytes / MB
    return {
        "storage_read": inputs.file_bytes / (rt.storage_read_gbps * GB) * MS_PER_S,
        "heap_copy": 2 * inputs.file_bytes / dram_bps * MS_PER_S,
        "page_fault": inputs.file_bytes
        / (READAHEAD_KIB * KIB)
        * MAJOR_FAULT_US
        / US_PER_S
        * MS_PER_S,
        "graph_parse": rt.graph_parse_ms_per_mb * file_mb,
        "npu_init": rt.npu_init_ms,
        "first_touch": (
            inputs.alloc_bytes / PAGE_BYTES * ANON_FAULT_US / US_PER_S
            + inputs.alloc_bytes / dram_bps
        )
        * MS_PER_S,
        "kernel_load": inputs.kernel_types * KERNEL_FIRST_LOAD_MS,
        "first_token": inputs.first_token_s * MS_PER_S,
    }


def _applicable(step: str, loader: str) -> bool:
    return not (
        (step == "heap_copy" and loader == "mmap") or (step == "page_fault" and loader == "read")
    )


def breakdown(profile: DeviceProfile, config: RunConfig) -> list[dict]:
    """One row per (strategy, loader): every step's ms on the user's clock and the total.
    `profile`: a DeviceProfile, a shipped profile name or a .toml path."""
    from harmony_ref.device.runtime import load_profile

    profile = load_profile(profile)
    times = step_times_ms(profile, coldstart_inputs(profile, config))
    rows = []
    for strategy in STRATEGIES:
        for loader in LOADERS:
            paid = _PAID[(strategy, loader)]
            row = {"strategy": strategy, "loader": loader}
            for step in STEPS:
                row[f"{step}_ms"] = (
                    times[step] if step in paid and _applicable(step, loader) else 0.0
                )
            row["total_ms"] = sum(row[f"{s}_ms"] for s in STEPS)
            rows.append(row)
    return rows


def coldstart_metrics(profile: DeviceProfile, config: RunConfig, loader: str = "read") -> Metrics:
    """coldstart_cold_ms, coldstart_preload_ms, coldstart_preload_warmup_ms (exact)."""
    if loader not in LOADERS:
        raise ValueError(f"loader = {loader!r}: must be one of {list(LOADERS)}")
    rows = {r["strategy"]: r for r in breakdown(profile, config) if r["loader"] == loader}
    m = Metrics()
    for strategy in STRATEGIES:
        m.add(
            f"coldstart_{strategy}_ms",
            rows[strategy]["total_ms"],
            "ms",
            "lower",
            "exact",
            description=f"tap to first token, {strategy.replace('_', ' + ')}, {loader} loading",
        )
    return m
