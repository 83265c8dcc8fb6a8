"""The CPU path on the phone's real core clusters: how tokens/s changes with the thread count.

A profile's [cpu] lists its clusters (e.g. Kirin 9000: 1 prime + 3 big Cortex-A77 + 4 little
Cortex-A55), each with a frequency and per-core ops per cycle. With N threads:
- threads take the fastest cores first (prime, then big, then little: what the scheduler gives
  a busy thread pool);
- every op's work is split evenly, so each op waits for its slowest thread:
      compute_N = (flops / N) / (slowest core's rate[dtype] x compute_efficiency)
  where dtype is what the op computes in on the CPU path: SDOT kernels with int8 activations,
  so a weight-only int8 / int4 matmul runs at its weight's rate (device/soc.py
  `compute_dtype`, CPU_PATH_WEIGHT_ONLY_COMPUTE)
                + (vector_flops / N) / (slowest core's fp16 rate x compute_efficiency)
- memory still bounds: memory = DRAM bytes / (dram_bandwidth x memory_efficiency), not split
  (the cores share one memory system);
- per op: time_N = max(compute_N, memory) + cpu.launch_us + cpu.sync_us_per_thread x (N - 1)
  (the barrier that ends every op costs one handoff per thread beyond the first).
The graph is the config's (fused as configured), every op on the CPU; decode is integrated over
every generated token as in device/cost.py. `thread_sweep` gives N = 1..cores and the best N (the
most decode tokens/s; fewer threads on a tie).

A little core gets 1/N of the work like everyone else, so adding it can make a compute-bound op
slower: N threads beat N - 1 only while N x slowest(N) grows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harmony_ref.config import RunConfig
from harmony_ref.device.soc import DTYPES, CpuCluster, CpuSpec, DeviceProfile
from harmony_ref.model.graph import Graph, build_graph, window_steps
from harmony_ref.units import GB, MS_PER_S, US_PER_S


class NoThreadModel(ValueError):
    """The profile has no [cpu] section."""


def require_cpu(profile: DeviceProfile) -> CpuSpec:
    if profile.cpu is None:
        raise NoThreadModel(
            f"{profile.source}: no [cpu] section (clusters): the thread model "
            f"needs one; the shipped profiles have it"
        )
    return profile.cpu


def cores_used(cpu: CpuSpec, threads: int) -> list[CpuCluster]:
    """The cluster of each of `threads` threads, fastest cores first (CpuSpec.cores_used)."""
    return cpu.cores_used(threads)


def thread_rates(cpu: CpuSpec, threads: int) -> dict[str, float]:
    """Ops/s of `threads` threads on an evenly split op, per dtype: threads x the slowest core."""
    used = cores_used(cpu, threads)
    return {d: threads * min(c.core_ops_per_s(d) for c in used) for d in DTYPES}


def op_time_threads_s(
    flops, vector_flops, nbytes, dtype: str, profile: DeviceProfile, threads: int, launches: int = 1
):
    """(time_s, compute_s, memory_s, sync_s) of an op run by `threads` threads (the module
    docstring); works on NumPy arrays as on numbers."""
    cpu = require_cpu(profile)
    rates = thread_rates(cpu, threads)
    ce, m = profile.compute.compute_efficiency, profile.memory
    compute = flops / (rates[dtype] * ce) + vector_flops / (rates["fp16"] * ce)
    memory = nbytes / (m.dram_bandwidth_gbps * GB * m.memory_efficiency)
    sync = launches * cpu.sync_us_per_thread * (threads - 1) / US_PER_S
    launch = launches * cpu.launch_us / US_PER_S
    return np.maximum(compute, memory) + launch + sync, compute, memory, sync


def _quantities(graph: Graph, profile: DeviceProfile) -> list[tuple[str, int, int, np.ndarray]]:
    """(compute dtype, count, window, [flops, vector_flops, DRAM bytes]) per unique op. The CPU's
    caches hold the activation block as the NPU buffer does (device/cost.py's tiling passes)."""
    onchip_bytes = profile.memory.onchip_buffer_bytes
    out = []
    for op, count in graph.unique_ops():
        passes = max(1.0, float(np.ceil(op.tile_bytes / onchip_bytes)))
        dtype = profile.compute.op_compute_dtype(op, cpu_path=True)
        out.append(
            (
                dtype,
                count,
                op.window,
                np.array([op.flops, op.vector_flops, op.streamed_bytes * passes + op.other_bytes]),
            )
        )
    return out


def _graphs_time_s(
    profile: DeviceProfile, g0: Graph, g1: Graph | None, steps: np.ndarray, threads: int
) -> np.ndarray:
    """Time of each step s of graphs affine in the step: quantities g0 + s x (g1 - g0), a
    sliding-window layer's attention flat once its window is full (device/cost.py _evaluate)."""
    q0 = _quantities(g0, profile)
    q1 = q0 if g1 is None else _quantities(g1, profile)
    total = np.zeros(len(steps))
    for (dtype, count, window, a), (_, _, _, b) in zip(q0, q1):
        v = a[:, None] + (b - a)[:, None] * window_steps(steps, window)[None, :]
        t, *_ = op_time_threads_s(v[0], v[1], v[2], dtype, profile, threads)
        total += count * t
    return total


@dataclass(frozen=True)
class ThreadPoint:
    threads: int
    cores: str  # e.g. "1 prime + 3 big"
    prefill_ms: float
    prefill_tokens_per_s: float
    decode_step_ms: float  # mean over the scenario's generated tokens (0 for an encoder)
    decode_tokens_per_s: float
    sync_ms_per_token: float  # the barriers' share of one decode step


def _cores_label(cpu: CpuSpec, threads: int) -> str:
    used = cores_used(cpu, threads)
    counts: dict[str, int] = {}
    for c in used:
        counts[c.name] = counts.get(c.name, 0) + 1
    return " + ".join(f"{n} {name}" for name, n in counts.items())


def cpu_path(profile: DeviceProfile, config: RunConfig, threads: int) -> ThreadPoint:
    """The config's prefill and decode on `threads` CPU threads of `profile`."""
    cpu = require_cpu(profile)
    s = config.scenario
    kw = dict(fused=config.fused, kv_dtype=config.kv_dtype, batch=s.batch)
    prefill = build_graph(
        config.spec,
        config.policy,
        "prefill",
        tokens=s.new_prompt_tokens,
        context=s.prompt_tokens,
        **kw,
    )
    prefill_s = float(_graphs_time_s(profile, prefill, None, np.zeros(1), threads)[0])
    step_s, sync_s = 0.0, 0.0
    if config.spec.is_decoder:  # every generated token, exactly (as device/cost.py integrates it)
        g1, g2 = (
            build_graph(config.spec, config.policy, "decode", context=c, **kw) for c in (1, 2)
        )
        contexts = s.prompt_tokens + 1 + np.arange(max(s.new_tokens, 1))
        step_s = float(_graphs_time_s(profile, g1, g2, contexts - 1, threads).mean())
        sync_s = g1.kernel_launches * cpu.sync_us_per_thread * (threads - 1) / US_PER_S
    tokens = s.new_prompt_tokens * s.batch
    return ThreadPoint(
        threads,
        _cores_label(cpu, threads),
        prefill_s * MS_PER_S,
        tokens / prefill_s,
        step_s * MS_PER_S,
        s.batch / step_s if step_s else 0.0,
        sync_s * MS_PER_S,
    )


def thread_sweep(
    profile: DeviceProfile, config: RunConfig
) -> tuple[list[ThreadPoint], ThreadPoint]:
    """Every thread count 1..cores and the best one (most decode tokens/s, or prefill tokens/s
    for an encoder; fewer threads on a tie)."""
    cpu = require_cpu(profile)
    points = [cpu_path(profile, config, n) for n in range(1, cpu.cores + 1)]

    def key(p: ThreadPoint) -> float:
        return p.decode_tokens_per_s if config.spec.is_decoder else p.prefill_tokens_per_s

    best = max(points, key=lambda p: (round(key(p), 9), -p.threads))
    return points, best
