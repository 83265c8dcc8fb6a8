"""Physics sanity: a measurement faster than the device's roofline bound is flagged `implausible`.

Bounds are lower bounds on time (upper on throughput), computed from a device profile's PEAK
numbers, not its efficiency-scaled ones: beating an efficiency-scaled prediction is a surprise,
beating the peak is a broken measurement (wrong model loaded, timer misread, a cache hit that
skipped the work, a parser reading the wrong line).

- decode: every generated token reads every matmul weight once, so
  `decode_tokens_per_s <= batch * dram_bandwidth / weight_bytes` (KV cache and activations
  ignored: leaving bytes out only loosens the bound); weights that fit the profile's cache
  (`cache_mb`) may be read at its `cache_bandwidth_gbps` instead, when that is faster;
- prefill / TTFT: at least `2 * linear_params * prompt_tokens` matmul ops at the profile's best
  matmul peak, and at least one read of the weights;
- one op: `max(ops / peak(dtype), bytes / bandwidth)`.

A metric beyond its bound by more than ROOFLINE_TOLERANCE is returned with the flag
"implausible" and a description saying which bound it broke; nothing is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from harmony_ref.metrics import Metrics
from harmony_ref.units import GB, MS_PER_S

# Allowance for timer granularity and datasheet rounding before a beat is called implausible.
ROOFLINE_TOLERANCE = 1.05
IMPLAUSIBLE = "implausible"
MATMUL_DTYPES = ("fp16", "int8", "int4")


@dataclass(frozen=True)
class Bounds:
    weight_bytes: float  # matmul weights read per decode step
    bandwidth_bytes_per_s: float  # profile peak
    peak_ops_per_s: float  # best matmul peak of the profile
    decode_tokens_per_s_max: float
    decode_step_ms_min: float
    prefill_ms_min: float
    e2e_ms_min: float


def weight_bytes(config) -> int:
    """Stored bytes of every matmul weight under the config's policy (scales included)."""
    return sum(
        config.policy.format_for(lin.name).nbytes(lin.n_out, lin.k_in)
        for lin in config.spec.linears()
    )


def linear_params(config) -> int:
    return sum(lin.n_out * lin.k_in for lin in config.spec.linears())


def bandwidth_bytes_per_s(profile) -> float:
    return profile.memory.dram_bandwidth_gbps * GB


def peak_ops_per_s(profile, dtype: str | None = None) -> float:
    c = profile.compute
    if dtype is not None:
        return c.matmul_ops_per_s(dtype)
    return max(c.matmul_ops_per_s(d) for d in MATMUL_DTYPES)


def bounds(profile, config) -> Bounds:
    s = config.scenario
    wb = float(weight_bytes(config))
    bw = bandwidth_bytes_per_s(profile)
    m = profile.memory
    if m.cache_mb and wb <= m.cache_bytes:
        bw = max(bw, m.cache_bandwidth_gbps * GB)
    peak = peak_ops_per_s(profile)
    step_s = wb / bw
    prefill_s = max(2.0 * linear_params(config) * s.prompt_tokens * s.batch / peak, step_s)
    return Bounds(
        weight_bytes=wb,
        bandwidth_bytes_per_s=bw,
        peak_ops_per_s=peak,
        decode_tokens_per_s_max=s.batch / step_s,
        decode_step_ms_min=step_s * MS_PER_S,
        prefill_ms_min=prefill_s * MS_PER_S,
        e2e_ms_min=(prefill_s + max(s.new_tokens - 1, 0) * step_s) * MS_PER_S,
    )


def op_floor_s(ops: float, nbytes: float, dtype: str, profile) -> float:
    """Fastest physically possible time of one op on `profile` (no launch overhead)."""
    dtype = dtype if dtype in MATMUL_DTYPES else "fp16"
    return max(ops / peak_ops_per_s(profile, dtype), nbytes / bandwidth_bytes_per_s(profile))


def op_is_implausible(
    measured_s: float,
    ops: float,
    nbytes: float,
    dtype: str,
    profile,
    tolerance: float = ROOFLINE_TOLERANCE,
) -> bool:
    return measured_s * tolerance < op_floor_s(ops, nbytes, dtype, profile)


def check(
    metrics: Metrics, profile, config, tolerance: float = ROOFLINE_TOLERANCE
) -> tuple[Metrics, list[str]]:
    """Return (metrics with implausible ones flagged, one finding per flag)."""
    b = bounds(profile, config)
    profile_name = profile.name
    # (metric, bound, True when the metric must stay <= bound, what the bound is)
    rules = [
        (
            "decode_tokens_per_s",
            b.decode_tokens_per_s_max,
            True,
            f"bandwidth {b.bandwidth_bytes_per_s / GB:g} GB/s / {b.weight_bytes / GB:.3f} GB of weights per token",
        ),
        (
            "decode_step_ms",
            b.decode_step_ms_min,
            False,
            "one read of the weights at peak bandwidth",
        ),
        (
            "prefill_ms",
            b.prefill_ms_min,
            False,
            "prompt matmul ops at peak compute, or one weight read",
        ),
        (
            "prefill_tokens_per_s",
            config.scenario.prompt_tokens * config.scenario.batch / (b.prefill_ms_min / 1000.0),
            True,
            "prompt tokens over the prefill floor (prompt matmul ops at peak compute)",
        ),
        (
            "ttft_ms",
            b.prefill_ms_min,
            False,
            "prompt matmul ops at peak compute, or one weight read",
        ),
        ("e2e_ms", b.e2e_ms_min, False, "prefill floor + (new_tokens - 1) decode floors"),
    ]
    out = Metrics(dict(metrics.items))
    findings = []
    for name, bound, is_max, why in rules:
        if name not in metrics:
            continue
        m = metrics[name]
        broken = m.value > bound * tolerance if is_max else m.value * tolerance < bound
        if not broken:
            continue
        rel = "above the maximum" if is_max else "below the minimum"
        msg = (
            f"{name} = {m.value:.4g} {m.unit} is {rel} {bound:.4g} {m.unit} possible on "
            f"{profile_name} for {config.label} ({why})"
        )
        flagged = m.flagged(IMPLAUSIBLE)
        out.put(replace(flagged, description=(m.description + "; " if m.description else "") + msg))
        findings.append(msg)
    return out, findings
