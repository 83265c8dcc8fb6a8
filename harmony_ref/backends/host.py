"""HostDevice: run a model's op graph on this CPU with the Numba kernels, and measure it.

    m = HostDevice().run(RunConfig.from_names(model="qwen2.5-0.5b", ...))   # -> Measurement
    HostDevice(auto_scale=True).run(RunConfig.from_names("llama-3.2-3b"))   # a scaled-down copy
    m.metrics, m.ops (an OpTime per graph op), m.config (the config measured), m.findings

What it does, per config:
1. optional thermal gate: wait (bounded) until the hottest CPU sensor is under a threshold;
2. builds the graphs the cost model uses (harmony_ref.model.graph): prefill over the prompt, and
   one decode step at the middle of the generation (context = prompt + new_tokens // 2 + 1):
   decode cost is linear in context, so the middle step times new_tokens is the total;
3. runs every op of both graphs with real inputs (random weights quantized to the layer's
   format), each timed with warm-up and repeats: the median is kept, and the raw samples;
4. sums the op medians into `prefill_ms` and `decode_step_ms`; `ttft_ms = prefill + one decode
   step` (SimulatedDevice's definition), `decode_tokens_per_s = batch / decode_step`,
   `e2e_ms = prefill + new_tokens * decode_step`. Phase samples: the sum of each op's i-th sample.
5. records peak RSS (`peak_memory_mb`); CPU frequency and temperatures where psutil exposes them
   go to the provenance (environment, not performance; it says so when they are not exposed).
6. the breakdown SimulatedDevice reports, for the model measured here, by the same code:
   - exact, from the graph and memory model (model/graph.py, device/memory.py's
     add_memory_metrics): weights_mb, kv_cache_mb, activations_mb, workspace_mb, app_budget_mb,
     memory_headroom_mb, fits_memory (budget: the host profile's RAM x app share when one is given,
     else this machine's total RAM from psutil, workspace 0; the provenance says which),
     prefill_kernel_launches (prefill graph ops), decode_dram_mb_per_token (DRAM bytes of the
     measured decode-step graph / batch);
   - measured: prefill_tokens_per_s; decode_bandwidth_gbps = counted decode-step DRAM bytes /
     measured decode step; launch_overhead_pct = host calls (prefill + new_tokens x decode step)
     x launch overhead / measured e2e, the overhead being the host profile's launch_overhead_us
     or, without one, a timed empty Numba kernel call; decode_memory_bound_pct = share of the
     measured decode time spent in ops the host profile's roofline (the cost model's per-op
     compute vs memory time) classifies memory-bound; without a profile the roofline is built from
     this run: a measured streaming-read bandwidth and, per dtype, the best op rate achieved (a
     lower bound of the peak, so it leans towards compute-bound). SimulatedDevice predicts the
     same quantity: the share of decode step time (launches included) in memory-bound ops.
7. with `model_profile` (a calibrated host profile), adds `host_model_mape_pct`: the mean error
   of SimulatedDevice(model_profile) against this measurement over prefill, decode step and e2e,
   and checks the measurement against that profile's roofline (physics: `findings`).

Threads default to 1 (Numba and OpenBLAS): on a machine shared with other jobs, a parallel kernel
whose worker thread is preempted waits a whole scheduler slice (measured here: a 4096 x 4096 INT4
GEMV went from 0.2 ms to 16 ms); pass threads=N to measure N-thread scaling on a quiet machine.

A model too large for this machine (weights above `max_weight_mb`) is refused, or with
`auto_scale=True` replaced by a copy with hidden, FFN, heads and vocab divided by a power of two
(same depth, head_dim and structure) until it fits; the provenance names the model measured.
"""

from __future__ import annotations

import dataclasses
import platform
from dataclasses import dataclass

import numpy as np

from harmony_ref._threads import set_threads
from harmony_ref.backends.base import E2E_METRICS, Measurement, physics_checked
from harmony_ref.backends.host_timing import (
    ThermalGate,
    cpu_freq_mhz,
    cpu_temps_c,
    peak_rss_mb,
    reset_peak_rss,
    time_call,
)
from harmony_ref.device.soc import HOST_WEIGHT_ONLY_COMPUTE, compute_dtype
from harmony_ref.metrics import Metrics
from harmony_ref.units import MB, MS_PER_S

DEFAULT_MAX_WEIGHT_MB = 400.0


@dataclass(frozen=True)
class OpTime:
    phase: str
    name: str
    kind: str
    dtype: str  # what its matrix work computes in on the host (device/soc.py compute_dtype)
    flops: float
    vector_flops: float
    dram_bytes: float
    launches: int  # host calls this graph op took
    median_s: float
    samples_s: tuple[float, ...]
    op: object = None  # the graph Op (harmony_ref.model.graph.Op) that ran


ALIGN = 128  # scaled widths stay multiples of the largest INT4 group the policies use


def _align(v: float) -> int:
    return max(ALIGN, int(v) // ALIGN * ALIGN)


def scaled_spec(spec, divisor: int):
    """`spec` with hidden, FFN, heads, KV heads and vocab divided by `divisor`, widths kept
    multiples of ALIGN (so every INT4 group size still divides K), head_dim and depth kept."""
    if divisor == 1:
        return spec
    kv = max(1, spec.n_kv_heads // divisor)
    heads = max(kv, spec.n_heads // divisor)
    while heads % kv or (heads * spec.head_dim) % ALIGN:
        heads += 1
    return dataclasses.replace(
        spec,
        name=f"{spec.name}/w{divisor}",
        hidden=_align(spec.hidden / divisor),
        n_heads=heads,
        n_kv_heads=kv,
        intermediate=_align(spec.intermediate / divisor),
        vocab=_align(spec.vocab / divisor),
        published_params=0,
        source=f"{spec.name} scaled down by {divisor} in width for the host",
    )


def weight_mb(config) -> float:
    from harmony_ref.device.physics import weight_bytes

    return weight_bytes(config) / MB


def fit_to_host(config, max_weight_mb: float):
    """The config itself if it fits, else the same config on a power-of-two narrower model."""
    divisor = 1
    scaled = config
    while weight_mb(scaled) > max_weight_mb:
        divisor *= 2
        if divisor > 1024:
            raise ValueError(
                f"host: {config.spec.name} does not fit {max_weight_mb} MB even scaled"
            )
        scaled = config.with_spec(scaled_spec(config.spec, divisor))
    return scaled


class HostDevice:
    name = "host"

    def __init__(
        self,
        warmup: int = 1,
        repeats: int = 5,
        threads: int | None = 1,
        thermal_gate_c: float | None = None,
        thermal_timeout_s: float = 60.0,
        max_weight_mb: float = DEFAULT_MAX_WEIGHT_MB,
        auto_scale: bool = False,
        seed: int = 0,
        model_profile=None,
    ):
        if repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats}")
        self.warmup, self.repeats, self.threads = warmup, repeats, threads
        self.thermal_gate_c, self.thermal_timeout_s = thermal_gate_c, thermal_timeout_s
        self.max_weight_mb, self.auto_scale, self.seed = max_weight_mb, auto_scale, seed
        # A calibrated host profile: each run then also reports how far the model is from it.
        self.model_profile = model_profile

    def __repr__(self) -> str:
        return f"HostDevice(repeats={self.repeats}, threads={self.threads})"

    def _graphs(self, config):
        from harmony_ref.model.graph import build_graph

        s = config.scenario
        common = dict(fused=config.fused, kv_dtype=config.kv_dtype, batch=s.batch)
        phases = [("prefill", dict(tokens=s.prompt_tokens))]
        if config.spec.is_decoder and s.new_tokens > 0:
            phases.append(("decode", dict(context=s.prompt_tokens + s.new_tokens // 2 + 1)))
        out = []
        for phase, kw in phases:
            g = build_graph(config.spec, config.policy, phase, **kw, **common)
            unfused = build_graph(
                config.spec, config.policy, phase, **kw, **{**common, "fused": False}
            )
            out.append((phase, g, {op.name: op for op in unfused.ops}))
        return out

    def run(self, config) -> Measurement:
        from harmony_ref.backends.host_graph import HostContext, build_op

        if config.checkpoint:
            return self._run_checkpoint(config)
        if weight_mb(config) > self.max_weight_mb:
            if not self.auto_scale:
                raise ValueError(
                    f"host: {config.spec.name} under {config.policy.name} holds {weight_mb(config):.0f} MB of "
                    f"weights, above max_weight_mb={self.max_weight_mb:g}; use a smaller model or auto_scale=True"
                )
            config = fit_to_host(config, self.max_weight_mb)  # the Measurement's config says so
        prov = {
            "host_model": config.spec.name,
            "machine": platform.machine(),
            "processor": platform.processor() or platform.machine(),
            "decode_context": "prompt_tokens + new_tokens // 2 + 1 (middle step, times new_tokens)",
        }
        gate = None
        if self.thermal_gate_c is not None:
            gate = ThermalGate(self.thermal_gate_c, self.thermal_timeout_s)
            prov["thermal_gate"] = gate.wait()
        import numba

        if self.threads:
            prov["blas"] = set_threads(self.threads)

        prov["threads"] = str(numba.get_num_threads())
        freq_before, temps_before = cpu_freq_mhz(), cpu_temps_c()
        if not reset_peak_rss():
            prov["peak_memory"] = "peak RSS could not be reset: covers the whole process lifetime"
        ctx = HostContext(
            config.spec, config.policy, config.scenario.context_tokens, self.seed, config.kv_dtype
        )
        times: list[OpTime] = []
        graphs = self._graphs(config)
        for phase, graph, prims in graphs:
            for op in graph.ops:
                chain = [prims[op.name]] + [prims[n] for n in op.fused]
                fn = build_op(op, chain, ctx, graph)
                t = time_call(fn, self.warmup, self.repeats)
                cd = compute_dtype(op.dtype, op.act_dtype, HOST_WEIGHT_ONLY_COMPUTE)
                times.append(
                    OpTime(
                        phase,
                        op.name,
                        op.kind,
                        cd,
                        op.flops,
                        op.vector_flops,
                        op.dram_bytes,
                        len(chain),
                        t.median_s,
                        t.samples_s,
                        op,
                    )
                )
        freq_after, temps_after = cpu_freq_mhz(), cpu_temps_c()
        m = self._metrics(config, times)
        # environment, not performance: the provenance keeps what psutil saw
        freqs = [f for f in (freq_before, freq_after) if f]
        if freqs:
            prov["cpu_freq_mhz"] = (
                f"{np.mean(freqs):.0f} (psutil, before/after: {', '.join(f'{f:.0f}' for f in freqs)})"
            )
        else:
            prov["cpu_freq"] = "not exposed by psutil on this host"
        temps = (
            list(temps_before.values()) + list(temps_after.values()) + (gate.seen_c if gate else [])
        )
        if temps:
            prov["cpu_temp_max_c"] = f"{max(temps):.1f} (psutil sensors, {len(temps)} readings)"
        else:
            prov["cpu_temperature"] = "not exposed by psutil on this host (no sensors)"
        self._add_breakdown(m, config, times, {phase: g for phase, g, _ in graphs}, prov)
        prov["kernels"] = "; ".join(
            f"{k}: {' + '.join(sorted(v))}" for k, v in sorted(ctx.kernel_use.items())
        )
        if self.model_profile is not None:
            self._add_model_error(m, config, prov)
        m, findings, physics = physics_checked(m, self.model_profile, config)
        return Measurement(m, prov, findings, physics, config, tuple(times))

    def _run_checkpoint(self, config) -> Measurement:
        """A real decoder checkpoint: its generation timed end to end (backends/host_llm.py)."""
        import numba

        from harmony_ref.backends.host_llm import add_counted_metrics, measure_checkpoint

        prov = {
            "machine": platform.machine(),
            "processor": platform.processor() or platform.machine(),
        }
        if self.threads:
            prov["blas"] = set_threads(self.threads)
        prov["threads"] = str(numba.get_num_threads())
        if not reset_peak_rss():
            prov["peak_memory"] = "peak RSS could not be reset: covers the whole process lifetime"
        freq_before = cpu_freq_mhz()
        m, more = measure_checkpoint(config, self.warmup, min(self.repeats, 3))
        prov.update(more)
        freqs = [f for f in (freq_before, cpu_freq_mhz()) if f]
        if freqs:
            prov["cpu_freq_mhz"] = f"{np.mean(freqs):.0f} (psutil, before/after)"
        else:
            prov["cpu_freq"] = "not exposed by psutil on this host"
        add_counted_metrics(m, config, self._profile(), prov)
        if self.model_profile is not None:
            self._add_model_error(m, config, prov)
        m, findings, physics = physics_checked(m, self.model_profile, config)
        return Measurement(m, prov, findings, physics, config, ())

    def _profile(self):
        from harmony_ref.device.runtime import load_profile

        return None if self.model_profile is None else load_profile(self.model_profile)

    def _add_breakdown(
        self, m: Metrics, config, times: list[OpTime], graphs: dict, prov: dict
    ) -> None:
        """The metrics SimulatedDevice adds beyond the standard names, for the model measured here
        (see the module docstring for each definition)."""
        from harmony_ref.backends.host_timing import add_host_memory_metrics
        from harmony_ref.device.cost import op_roofline_s
        from harmony_ref.units import GB, US_PER_S

        s = config.scenario
        prof = self._profile()
        add_host_memory_metrics(m, prov, prof, config)

        pre = [t for t in times if t.phase == "prefill"]
        dec = [t for t in times if t.phase == "decode"]
        m.add(
            "prefill_kernel_launches",
            graphs["prefill"].kernel_launches,
            "launches",
            "lower",
            "exact",
            description="ops of the prefill graph (model/graph.py)",
        )
        # launch overhead: every host call (a graph op the host has no fused kernel for takes more)
        if prof is not None:
            launch_s = prof.runtime.launch_overhead_us / US_PER_S
            src = f"launch_overhead_us of {prof.name} ({launch_s * US_PER_S:.2f} us)"
        else:
            from harmony_ref.backends.host_timing import launch_timing

            launch_s = launch_timing().median_s
            src = f"measured: an empty Numba kernel call ({launch_s * US_PER_S:.2f} us)"
        calls = sum(t.launches for t in pre) + s.new_tokens * sum(t.launches for t in dec)
        pct = lambda e2e_ms: 100.0 * calls * launch_s / (e2e_ms / MS_PER_S)  # noqa: E731
        m.add(
            "launch_overhead_pct",
            pct(m.value("e2e_ms")),
            "%",
            "lower",
            "measured",
            [pct(x) for x in m["e2e_ms"].samples],
            description=f"host calls x launch overhead / measured e2e; overhead: {src}",
        )
        if not dec:
            return
        step_s = m.value("decode_step_ms") / MS_PER_S
        dram = graphs["decode"].dram_bytes
        m.add(
            "decode_dram_mb_per_token",
            dram / s.batch / MB,
            "MB",
            "lower",
            "exact",
            description="DRAM bytes of the measured decode-step graph (model/graph.py) / batch",
        )
        m.add(
            "decode_bandwidth_gbps",
            dram / step_s / GB,
            "GB/s",
            "none",
            "measured",
            [dram / (x / MS_PER_S) / GB for x in m["decode_step_ms"].samples],
            description="counted DRAM bytes of the decode step / measured decode step",
        )
        if prof is not None:
            bounds = [op_roofline_s(prof, t.op) for t in dec]
            how = f"the roofline of {prof.name}"
        else:
            bounds, how = self._measured_roofline(times, dec)
        mem_s = sum(t.median_s for t, (c, mm) in zip(dec, bounds) if mm > c)
        m.add(
            "decode_memory_bound_pct",
            100.0 * mem_s / sum(t.median_s for t in dec),
            "%",
            "none",
            "measured",
            description=f"share of measured decode time in ops {how} classifies memory-bound",
        )

    @staticmethod
    def _measured_roofline(times: list[OpTime], dec: list[OpTime]):
        """Without a host profile: a roofline from this run. Bandwidth: a measured single-thread
        streaming read; compute: per dtype (and for vector work) the best rate any op of this run
        achieved, a lower bound of the peak, which leans the split towards compute-bound."""
        from harmony_ref.backends.host_timing import stream_read_gbps
        from harmony_ref.units import GB

        bw = stream_read_gbps() * GB
        rate: dict[str, float] = {}
        vrate = 0.0
        for t in times:
            if t.flops > 0:
                rate[t.dtype] = max(rate.get(t.dtype, 0.0), t.flops / t.median_s)
            elif t.vector_flops > 0:
                vrate = max(vrate, t.vector_flops / t.median_s)
        out = []
        for t in dec:
            c = (t.flops / rate[t.dtype] if t.flops else 0.0) + (
                t.vector_flops / vrate if vrate else 0.0
            )
            out.append((c, t.dram_bytes / bw))
        how = (
            f"a roofline from this run (no host profile given: streaming read {bw / GB:.1f} GB/s, "
            "best achieved op rates)"
        )
        return out, how

    def _add_model_error(self, m: Metrics, config, prov: dict) -> None:
        from harmony_ref.backends.simulated import SimulatedDevice
        from harmony_ref.metrics import mape_pct

        sim = SimulatedDevice(self.model_profile)
        pred = sim.predict(config)
        pairs = [(pred.value(k), m.value(k)) for k in E2E_METRICS if k in m and k in pred]
        m.add(
            "host_model_mape_pct",
            mape_pct(pairs),
            "%",
            "lower",
            "measured",
            description=f"mean |model - measured| / measured over {', '.join(k for k in E2E_METRICS if k in m)}, "
            f"model = SimulatedDevice({sim.profile.name})",
        )
        prov["model_profile"] = sim.profile.source

    def _metrics(self, config, times: list[OpTime]) -> Metrics:
        s = config.scenario
        m = Metrics()

        def phase_total(phase):
            ops = [t for t in times if t.phase == phase]
            med = sum(t.median_s for t in ops)
            samples = [sum(t.samples_s[i] for t in ops) for i in range(self.repeats)]
            return med, samples, ops

        pre, pre_samples, _ = phase_total("prefill")
        m.add(
            "prefill_ms",
            pre * MS_PER_S,
            "ms",
            "lower",
            "measured",
            [x * MS_PER_S for x in pre_samples],
        )
        prompt = s.prompt_tokens * s.batch  # as SimulatedDevice counts them
        m.add(
            "prefill_tokens_per_s",
            prompt / pre,
            "tokens/s",
            "higher",
            "measured",
            [prompt / x for x in pre_samples],
        )
        e2e_s, e2e_samples = pre, list(pre_samples)
        if any(t.phase == "decode" for t in times):
            step, step_samples, dec_ops = phase_total("decode")
            # as SimulatedDevice defines it: the prompt's prefill, then the step that emits a token
            m.add(
                "ttft_ms",
                (pre + step) * MS_PER_S,
                "ms",
                "lower",
                "measured",
                [(p + d) * MS_PER_S for p, d in zip(pre_samples, step_samples)],
                description="prefill + one decode step (the middle one)",
            )
            m.add(
                "decode_step_ms",
                step * MS_PER_S,
                "ms",
                "lower",
                "measured",
                [x * MS_PER_S for x in step_samples],
            )
            m.add(
                "decode_tokens_per_s",
                s.batch / step,
                "tokens/s",
                "higher",
                "measured",
                [s.batch / x for x in step_samples],
            )
            m.add(
                "kernel_launches_per_token",
                len(dec_ops) / s.batch,
                "launches",
                "lower",
                "exact",
                description="graph ops per decode step / batch (the host may split a fused op into calls)",
            )
            e2e_s = pre + s.new_tokens * step
            e2e_samples = [p + s.new_tokens * d for p, d in zip(pre_samples, step_samples)]
        else:
            m.add(
                "ttft_ms",
                pre * MS_PER_S,
                "ms",
                "lower",
                "measured",
                [x * MS_PER_S for x in pre_samples],
                description="the forward pass (no decode)",
            )
        m.add(
            "e2e_ms",
            e2e_s * MS_PER_S,
            "ms",
            "lower",
            "measured",
            [x * MS_PER_S for x in e2e_samples],
        )
        m.add(
            "peak_memory_mb",
            peak_rss_mb(),
            "MB",
            "lower",
            "measured",
            description="peak RSS of this process (psutil/getrusage), weights, KV caches and all",
        )
        return m
