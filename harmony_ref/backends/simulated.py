"""`SimulatedDevice(profile)`: the analytical phone. `predict(config)` returns Metrics from the op
graph, the roofline + launch cost model and the memory model (`run(config)` the same as a
Measurement, the backend interface); every metric is `kind="exact"`: a pure, deterministic
function of (profile, config), bit-identical across calls.

    dev = SimulatedDevice("harmony-flagship")
    m = dev.predict(RunConfig.from_names(model="llama-3.2-3b", policy="int4-g128"))
    m.value("decode_tokens_per_s")

Standard names (shared with HostDevice/CommandDevice where they overlap): ttft_ms, prefill_ms,
decode_step_ms, decode_tokens_per_s, e2e_ms, peak_memory_mb, weights_mb, kv_cache_mb,
kernel_launches_per_token, launch_overhead_pct. Extras explain the prediction: prefill
tokens/s, DRAM bytes per generated token and the bandwidth that implies, the compute / memory
share of decode, activations, workspace, the app budget and whether the model fits it
(device/memory.py, shared with HostDevice). A calibrated profile (one with a [calibration]
section, written by `harmony-ref calibrate`) adds `host_model_mape_pct`: the held-out error of the
model it is, as the calibration measured it (end to end when whole-model runs were held out).
decode_tokens_per_s counts the tokens of every request in the batch.

What the phone does besides the NPU graph, also exact:
- `npu_fallback_ops`, `npu_fallback_ms_per_token`: op runs per generated token (per forward for an
  encoder) that the profile's NPU does not run and the CPU does instead, and their time
  (device/ops.py; 0 when the NPU runs every op; only with [npu]);
- `cpu_best_threads`, `cpu_decode_tokens_per_s` (`cpu_prefill_tokens_per_s` for an encoder): the
  CPU path on the profile's clusters at its best thread count (device/threads.py; only with [cpu]);
- with a cached prefix (scenario `prefix_tokens` > 0): `ttft_without_reuse_ms` and
  `prefix_ttft_saved_ms` (ttft_ms is then the TTFT with the prefix reused);
- `lifecycle_*`: the open/close scenario of device/lifecycle.py (decoders, with [npu]). Encoders (all-minilm-l6)
have no decode: their metrics are the forward pass and memory.
"""

from __future__ import annotations

import dataclasses

from harmony_ref.backends.base import Measurement
from harmony_ref.config import DEFAULT_PROFILE, RunConfig
from harmony_ref.device.cost import scenario_timing
from harmony_ref.device.memory import add_memory_metrics, memory_estimate
from harmony_ref.device.runtime import load_profile
from harmony_ref.device.soc import DeviceProfile
from harmony_ref.metrics import Metrics
from harmony_ref.units import GB, MB, MS_PER_S

# Metrics about the phone itself (NPU op support, its CPU clusters, prefix reuse, the model
# lifecycle): a measuring backend has no counterpart, so they are the simulated backend's alone.
PHONE_ONLY_PREFIXES = ("npu_fallback_", "cpu_", "lifecycle_", "prefix_ttft_", "ttft_without_reuse")


def phone_only(name: str) -> bool:
    return name.startswith(PHONE_ONLY_PREFIXES)


class SimulatedDevice:
    name = "simulated"

    def __init__(self, profile: DeviceProfile | str = DEFAULT_PROFILE):
        self.profile = load_profile(profile)

    def __repr__(self) -> str:
        return f"SimulatedDevice({self.profile.name!r})"

    def predict(self, config: RunConfig) -> Metrics:
        t = scenario_timing(self.profile, config)
        mem = memory_estimate(self.profile, config)
        m = Metrics()
        ms = MS_PER_S
        s = config.scenario
        m.add(
            "ttft_ms",
            t.ttft_s * ms,
            "ms",
            "lower",
            description="prefill of the prompt + the first decode step",
        )
        m.add("prefill_ms", t.prefill.time_s * ms, "ms", "lower")
        m.add("prefill_tokens_per_s", t.prefill.tokens / t.prefill.time_s, "tokens/s", "higher")
        if t.decode is not None:
            d = t.decode
            m.add(
                "decode_step_ms",
                d.time_s * ms,
                "ms",
                "lower",
                description=f"mean over {d.steps} steps at contexts {s.prompt_tokens + 1}..{s.prompt_tokens + d.steps}",
            )
            m.add("decode_tokens_per_s", t.decode_tokens_per_s, "tokens/s", "higher")
            m.add("decode_dram_mb_per_token", d.dram_bytes / d.tokens / MB, "MB", "lower")
            m.add(
                "decode_bandwidth_gbps",
                d.dram_bytes / d.time_s / GB,
                "GB/s",
                "none",
                description=f"of {self.profile.memory.dram_bandwidth_gbps} GB/s peak",
            )
            # Defined as HostDevice measures it, so the two records mean the same thing.
            m.add(
                "decode_memory_bound_pct",
                100.0 * d.memory_bound_s / d.time_s,
                "%",
                "none",
                description="share of decode step time (launches included) in memory-bound ops",
            )
            m.add("kernel_launches_per_token", d.kernel_launches / d.tokens, "launches", "lower")
        m.add("e2e_ms", t.e2e_s * ms, "ms", "lower", description="prefill + every decode step")
        m.add(
            "launch_overhead_pct",
            t.launch_overhead_pct,
            "%",
            "lower",
            description="kernel-launch time as a share of e2e",
        )
        m.add("prefill_kernel_launches", t.prefill.kernel_launches, "launches", "lower")
        m.add("peak_memory_mb", mem.peak_bytes / MB, "MB", "lower")
        add_memory_metrics(m, mem, workspace_source="the profile's runtime_workspace_mb")
        self._phone_metrics(m, config, t)
        cal = self.profile.calibration
        if cal is not None:
            mape, basis = cal.model_mape_pct
            m.add(
                "host_model_mape_pct",
                mape,
                "%",
                "lower",
                description=f"error of this profile's model on held-out host measurements: {basis}, "
                f"calibrated {cal.fitted_at or 'at an unrecorded time'}",
            )
        return m

    def _phone_metrics(self, m: Metrics, config: RunConfig, t) -> None:
        from harmony_ref.device.lifecycle import lifecycle_metrics
        from harmony_ref.device.threads import thread_sweep

        ms, s = MS_PER_S, config.scenario
        per = t.decode if t.decode is not None else t.prefill
        where = "per generated token" if t.decode is not None else "per forward"
        if self.profile.npu is not None:  # a profile that lists its NPU's op types
            m.add(
                "npu_fallback_ops",
                per.fallback_runs / per.tokens if t.decode is not None else per.fallback_runs,
                "ops",
                "lower",
                description=f"op runs {where} the NPU does not support, run on the CPU",
            )
            m.add(
                "npu_fallback_ms_per_token",
                per.fallback_s / per.tokens * ms,
                "ms",
                "lower",
                description="their time (CPU compute, NPU <-> CPU copy, both launches) per token",
            )
        if self.profile.cpu is not None:
            _, best = thread_sweep(self.profile, config)
            m.add(
                "cpu_best_threads",
                best.threads,
                "threads",
                "none",
                description=f"CPU path: the thread count with the most tokens/s ({best.cores})",
            )
            if config.spec.is_decoder:
                m.add(
                    "cpu_decode_tokens_per_s",
                    best.decode_tokens_per_s,
                    "tokens/s",
                    "higher",
                    description=f"CPU path at {best.threads} threads ({best.cores})",
                )
            else:
                m.add(
                    "cpu_prefill_tokens_per_s",
                    best.prefill_tokens_per_s,
                    "tokens/s",
                    "higher",
                    description=f"CPU path at {best.threads} threads ({best.cores})",
                )
        if s.prefix_tokens:
            whole = scenario_timing(
                self.profile,
                dataclasses.replace(config, scenario=dataclasses.replace(s, prefix_tokens=0)),
            )
            m.add(
                "ttft_without_reuse_ms",
                whole.ttft_s * ms,
                "ms",
                "none",
                description="the same prompt with nothing cached",
            )
            m.add(
                "prefix_ttft_saved_ms",
                (whole.ttft_s - t.ttft_s) * ms,
                "ms",
                "higher",
                description=f"TTFT saved by {s.prefix_tokens} cached prefix tokens",
            )
        if config.spec.is_decoder and self.profile.npu is not None:
            m.update(lifecycle_metrics(self.profile, config))

    def run(self, config: RunConfig) -> Measurement:
        """The prediction as a Measurement: nothing to physics-check in the model itself."""
        return Measurement(self.predict(config), {"profile": self.profile.name}, config=config)
