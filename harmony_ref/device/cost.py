"""Roofline + launch-overhead cost of the op graph on a device profile.

Per op:  time = max(compute, memory) + launches x launch_overhead, where
    compute = flops / (peak[dtype] x compute_efficiency x f_c) + vector_flops / (vector peak x ...)
    memory  = dram_bytes / (dram_bandwidth x memory_efficiency x f_m)
`peak[dtype]` is the NPU Cube's peak for the op's compute dtype, or the CPU's when the profile has
no Cube path for it (`ComputeSpec.matmul_ops_per_s`). The compute dtype is device/soc.py's
`compute_dtype` of the op's weight dtype, its activations (W8A8: int8) and the profile's
`weight_only_compute`: on a phone a weight-only int8/int4 matmul computes in FP16 and a W8A8
one at the Cube's INT8 rate; on the host both run at their weight dtype's kernel rate. Its DRAM
bytes are the weight's stored bytes either way. To read its weights (or K/V) from DRAM
once, a matmul keeps its whole activation block resident on chip while the weights stream past in
small tiles; a block larger than the on-chip buffer is split, and the weights are streamed once
per piece: streamed bytes x ceil(tile_bytes / onchip_buffer). Decode (one row) always fits;
long prefills do not, which is why they can be memory-bound. Launch overhead is CPU-side and does
not scale with the NPU/DDR frequency.

That formula is written once, as `dram_bytes` and `op_time_s` over the rates of a `Roofline`
(a profile's peaks x efficiencies x frequency scales). The graph costing below, the per-op
roofline HostDevice classifies ops by (`op_roofline_s`), the calibration fit (`HostFit`, which
fits the rates themselves) and the phase calibration (`phase_terms`) all call it; they work on
NumPy arrays and on plain numbers alike. The per-op-kind tables of `predict --breakdown`, each
op costed alone by `graph_cost`, are device/cost_breakdown.py.

A runtime whose decode attention walks its cache position by position (runtime profile
`[overhead] attention_ns_per_position`: ExecuTorch's custom_sdpa) pays that much more per cached
position on each layer's one-row attention op, added to its roofline time (unset 0).

A runtime that runs the forward as one compiled graph (runtime profile `[overhead] graph =
"compiled"`: QNN/HTP) pays no per-op launch, its `graph_us` once per forward instead (merged into
the forward overhead by device/runtime.py apply_runtime). A 16-bit float matmul (and attention)
runs at the share of the fp16 peak its policy's 16-bit format takes on the runtime
(`ComputeSpec.float16_share`: 0.5 where the runtime widens that format to fp32).

Decode cost depends on the context length (attention reads the whole KV cache). A scenario's
decode is *integrated exactly*: step j (j = 0..new_tokens-1) attends to prompt + j + 1 positions
(on a runtime with a static KV cache, `kv_cache = "static"`, to the whole cache, masked:
`static_kv_positions`, the runtime's kv_context, else the configuration's context_tokens; the
prompt's prefill still attends over the prompt only), every step is costed (op quantities are
affine in the context, so two graphs give them all; a sliding-window layer's attention is
affine until its window is full and flat after), and the decode `PhaseCost` reports the
per-step mean; e2e = prefill + the sum of all steps.
TTFT = prefill(prompt) + the first decode step; with a cached prefix of
`prefix_tokens`, prefill runs the prompt's new rows only, attending over the whole prompt.

An op whose type the profile's NPU does not run (device/ops.py) runs on the CPU as a fallback:
    time = max(compute at the CPU rates, memory) + (inputs + outputs) / npu.transfer_gbps
           + cpu.launch_us + launch_overhead (the extra NPU launch after the cut)
and is never fused with its neighbours (build_graph's `cpu_ops`). `PhaseCost.fallback_s` and
`fallback_runs` say what that costs; both are 0 on a profile whose NPU runs every op.

For the thermal model:

    phase_cost(profile, config, phase, compute_freq_scale=1.0, memory_freq_scale=1.0, context=None)
        -> PhaseCost(time_s, compute_s, memory_s, launch_s, memory_bound_s, flops, fp16_ops, int8_ops, int4_ops,
                     vector_ops, int8_equiv_ops, dram_bytes, kernel_launches, tokens, steps)

`phase` is "prefill" (the whole prompt) or "decode" (per-step mean over the scenario's generated
tokens, or the single step at `context` when given). `compute_freq_scale` / `memory_freq_scale`
(0 < f <= 1) scale the compute peaks and the DRAM bandwidth, as a DVFS step would.
`fp16_ops` / `int8_ops` / `int4_ops` count matrix ops by the dtype they compute in (above), and
`int8_equiv_ops` weighs them by the Cube's cost per op relative to INT8 (fp16 x2, int4 x0.5,
vector fp16 x2, an assumption): a weight-only int8 matmul on a phone costs FP16 energy, a W8A8
one INT8: multiply by `thermal.energy_per_int8_op_pj` for dynamic energy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harmony_ref.config import RunConfig
from harmony_ref.device.ops import fallback_ops, placement
from harmony_ref.device.soc import DTYPES, EFFICIENCY_CLASSES, DeviceProfile, compute_dtype
from harmony_ref.model.graph import Graph, build_graph, window_steps
from harmony_ref.units import GB, GIGA, US_PER_S

# Energy weight of one op relative to one INT8 Cube op (assumption: energy tracks the MAC-array
# area-time an op occupies, so half the throughput costs twice the energy).
INT8_EQUIV = {"fp16": 2.0, "int8": 1.0, "int4": 0.5}
VECTOR_INT8_EQUIV = 2.0


@dataclass(frozen=True)
class PhaseCost:
    phase: str
    time_s: float  # sum over ops of max(compute, memory) + launch
    compute_s: float  # sum of per-op compute times
    memory_s: float  # sum of per-op memory times
    launch_s: float  # sum of launch overheads
    memory_bound_s: float  # time (launch included) of the ops whose memory time >= compute time
    flops: float  # matrix + vector ops
    fp16_ops: float
    int8_ops: float
    int4_ops: float
    vector_ops: float
    int8_equiv_ops: float
    dram_bytes: float
    kernel_launches: int
    tokens: int  # tokens processed (prefill: prompt x batch) or produced per step (batch)
    steps: int = 1  # decode: how many steps the means are taken over
    fallback_s: float = 0.0  # time (transfers and launches included) of ops run on the CPU
    fallback_runs: int = 0  # how many op runs fell back to the CPU

    @property
    def bound_s(self) -> float:
        return self.time_s - self.launch_s


@dataclass(frozen=True)
class Roofline:
    """The achieved rates an op's work is divided by (peaks x efficiencies x frequency scales)."""

    matmul_ops_per_s: dict[str, float]  # per compute dtype (DTYPES)
    vector_ops_per_s: float
    bandwidth_bytes_per_s: float
    onchip_bytes: float  # the buffer a matmul keeps its activation block in
    launch_s: float
    # A fallback op on the CPU: its rates, the NPU <-> CPU copy, its dispatch.
    cpu_matmul_ops_per_s: dict[str, float] | None = None
    cpu_vector_ops_per_s: float = 1.0
    transfer_bytes_per_s: float = 1.0
    cpu_launch_s: float = 0.0
    cache_bytes: float = 0.0  # a cache streamed bytes can stay in (0: none)
    cache_bytes_per_s: float = 0.0
    forward_s: float = 0.0  # once per forward pass
    class_ops_per_s: dict[str, float] | None = None  # per efficiency class (soc.py FALLBACK)
    widen_s_per_weight: float = 0.0  # per fp16 weight per call, before its matmul
    prompt_launch_s: float = 0.0  # more per launch of a multi-row op (RuntimeSpec)
    attention_s_per_position: float = 0.0  # more per cached position of a one-row attention

    @classmethod
    def of(
        cls,
        profile: DeviceProfile,
        compute_freq_scale: float = 1.0,
        memory_freq_scale: float = 1.0,
        efficiencies: bool = True,
    ) -> Roofline:
        """`profile`'s rates at the given DVFS scales; `efficiencies=False` uses the bare peaks."""
        c, m = profile.compute, profile.memory
        eff = (lambda cls_: c.efficiency(cls_)) if efficiencies else (lambda cls_: 1.0)  # noqa: E731
        me = m.memory_efficiency if efficiencies else 1.0
        ce = c.compute_efficiency if efficiencies else 1.0
        fc, fm = compute_freq_scale, memory_freq_scale
        cpu = {"fp16": c.cpu_fp16_gflops, "int8": c.cpu_int8_gops, "int4": c.cpu_int4_gops}
        npu, rt = profile.npu, profile.runtime
        cache_eff = (
            (me if math.isnan(m.cache_efficiency) else m.cache_efficiency) if efficiencies else 1.0
        )
        return cls(
            {d: c.matmul_ops_per_s(d) * eff(d) * fc for d in DTYPES},
            c.vector_fp16_gflops * GIGA * eff("vector") * fc,
            m.dram_bandwidth_gbps * GB * me * fm,
            m.onchip_buffer_bytes,
            rt.launch_overhead_us / US_PER_S,
            {d: cpu[d] * GIGA * ce * fc for d in DTYPES},
            c.cpu_fp16_gflops * GIGA * ce * fc,
            (npu.transfer_gbps if npu else m.dram_bandwidth_gbps) * GB,
            (profile.cpu.launch_us if profile.cpu else rt.launch_overhead_us) / US_PER_S,
            m.cache_bytes,
            m.cache_bandwidth_gbps * GB * cache_eff * fm,
            rt.forward_overhead_us / US_PER_S,
            {k: c.class_peak_ops_per_s(k) * eff(k) * fc for k in EFFICIENCY_CLASSES},
            rt.fp16_widen_ns_per_weight * 1e-9 / fc,
            rt.prompt_launch_us / US_PER_S,
            rt.attention_ns_per_position * 1e-9 / fc,
        )

    def memory_bytes_per_s(self, streamed_per_step):
        """The bandwidth a phase reads at when it streams `streamed_per_step` bytes (weights,
        K/V) per forward: the cache's for the share that stays in it (all of it when it fits,
        cache / streamed when not: a cyclic read larger than the cache keeps that much), DRAM's
        for the rest. Works on arrays."""
        if not self.cache_bytes or not self.cache_bytes_per_s:
            return self.bandwidth_bytes_per_s + 0.0 * np.asarray(streamed_per_step, dtype=float)
        hit = np.minimum(
            1.0, self.cache_bytes / np.maximum(np.asarray(streamed_per_step, dtype=float), 1.0)
        )
        return 1.0 / (hit / self.cache_bytes_per_s + (1.0 - hit) / self.bandwidth_bytes_per_s)


def dram_bytes(streamed, other, tile, onchip_bytes):
    """Bytes an op moves through DRAM: its streamed bytes (weights, K/V) once per on-chip piece of
    its activation block of `tile` bytes, plus everything else once."""
    passes = np.maximum(1.0, np.ceil(tile / onchip_bytes))
    return streamed * passes + other


def op_time_s(
    flops,
    vector_flops,
    nbytes,
    matmul_ops_per_s,
    vector_ops_per_s,
    bandwidth_bytes_per_s,
    launch_s,
    launches=1,
):
    """(time_s, compute_s, memory_s) of an op: time = max(compute, memory) + launches x launch_s."""
    compute = flops / matmul_ops_per_s + vector_flops / vector_ops_per_s
    memory = nbytes / bandwidth_bytes_per_s
    return np.maximum(compute, memory) + launches * launch_s, compute, memory


def _check_scale(name: str, v: float) -> float:
    if not (0.0 < v <= 1.0):
        raise ValueError(f"{name} = {v!r}: must be in (0, 1]")
    return float(v)


def _op_arrays(graph: Graph) -> dict[str, np.ndarray]:
    """Per-op columns of a graph, computed once per graph object (graphs are immutable and
    build_graph hands out the same object for the same arguments)."""
    cached = graph.__dict__.get("_op_arrays")
    if cached is None:
        cached = _make_op_arrays(graph)
        object.__setattr__(graph, "_op_arrays", cached)  # a memo, not a field: eq/hash unaffected
    return cached


def _make_op_arrays(graph: Graph) -> dict[str, np.ndarray]:
    rows = graph.unique_ops()
    cols = {
        "count": [c for _, c in rows],
        "flops": [op.flops for op, _ in rows],
        "vflops": [op.vector_flops for op, _ in rows],
        "streamed": [op.streamed_bytes for op, _ in rows],
        "other": [op.other_bytes for op, _ in rows],
        "tile": [op.tile_bytes for op, _ in rows],
        "act_in": [op.act_in_bytes for op, _ in rows],
        "act_out": [op.act_out_bytes for op, _ in rows],
        # the cached positions a layer's attention reads: counted once per layer, on its QK^T
        # (or the fused attention op), not again on its P.V
        "positions": [op.n if op.kind in POSITION_KINDS else 0 for op, _ in rows],
        # weights a runtime that widens fp16 per call passes over (fp16-stored matmul weights)
        "fp16_weights": [
            op.n * op.k
            if op.projection and op.dtype == "fp16" and op.weight_bytes == 2 * op.n * op.k
            else 0
            for op, _ in rows
        ],
    }
    out = {k: np.asarray(v, dtype=np.float64) for k, v in cols.items()}
    out["dtype"] = np.asarray([DTYPES.index(op.dtype) for op, _ in rows])  # the weight's
    out["act_dtype"] = np.asarray([op.act_dtype for op, _ in rows], dtype=object)
    out["op_type"] = np.asarray([op.op_type for op, _ in rows], dtype=object)
    out["attention"] = np.asarray([op.kind in ATTENTION_KINDS for op, _ in rows], dtype=bool)
    out["one_row"] = np.asarray([op.m == 1 for op, _ in rows], dtype=bool)
    out["window"] = np.asarray([op.window for op, _ in rows], dtype=np.int64)
    return out


_STRUCTURE = ("count", "dtype", "act_dtype", "op_type", "attention", "one_row", "window")
ATTENTION_KINDS = frozenset({"attn_qk", "attn_pv", "attention"})
POSITION_KINDS = frozenset({"attn_qk", "attention"})


def _compute_dtypes(profile: DeviceProfile, a: dict[str, np.ndarray]) -> np.ndarray:
    """Index into DTYPES of the dtype each op of op columns `a` computes in on `profile`."""
    mode = profile.compute.weight_only_compute
    return np.asarray(
        [
            DTYPES.index(compute_dtype(DTYPES[w], x, mode))
            for w, x in zip(a["dtype"], a["act_dtype"])
        ],
        dtype=np.int64,
    )


def _evaluate(
    profile: DeviceProfile, g0: Graph, g1: Graph | None, steps: np.ndarray, fc: float, fm: float
) -> dict[str, np.ndarray]:
    """Per-step totals for graphs whose op quantities are affine in the step index: the value at
    step s is g0's + s x (g1's - g0's). With g1 None, one step: g0 itself. Ops the profile's NPU
    does not run are costed as CPU fallbacks (the module docstring)."""
    a0 = _op_arrays(g0)
    if g1 is None:
        slope = {k: np.zeros_like(v) for k, v in a0.items() if k not in _STRUCTURE}
    else:
        a1 = _op_arrays(g1)
        if not all(np.array_equal(a0[k], a1[k]) for k in ("count", "dtype", "act_dtype", "window")):
            raise AssertionError("decode graphs at neighbouring contexts differ in structure")
        slope = {k: a1[k] - a0[k] for k in a0 if k not in _STRUCTURE}
    # (ops, S): a sliding-window op's quantities stop growing once its window is full
    s = window_steps(np.asarray(steps, dtype=np.float64)[None, :], a0["window"][:, None])
    q = {k: a0[k][:, None] + slope[k][:, None] * s for k in slope}  # (ops, S)
    r = Roofline.of(profile, fc, fm)
    cd = _compute_dtypes(profile, a0)  # (ops,) what each op computes in on this profile
    # each op's matrix work at its efficiency class's rate (a prompt's GEMM, a decode GEMV,
    # attention over a prompt or for one row); vector work at the vector rate
    k = r.class_ops_per_s
    # a 16-bit float matmul (and attention, in the same format) at its format's path: native,
    # or widened to fp32 (soc.py ComputeSpec.float16_share)
    f16 = profile.compute.float16_share(g0.float16)
    share = np.array([f16 if d == "fp16" else 1.0 for d in DTYPES])
    gemm = (np.array([k[d] for d in DTYPES]) * share)[cd]
    gemv = (np.array([k[f"gemv_{d}"] for d in DTYPES]) * share)[cd]
    attention = f16 * np.where(a0["one_row"], k["attention_decode"], k["attention"])
    rates = np.where(a0["attention"], attention, np.where(a0["one_row"], gemv, gemm))[:, None]
    n = a0["count"][:, None]
    dram = dram_bytes(q["streamed"], q["other"], q["tile"], r.onchip_bytes)
    bandwidth = r.memory_bytes_per_s((q["streamed"] * n).sum(axis=0))[None, :]  # (1, S)
    # a multi-row op's launch: the runtime's threading cost one-row ops do not pay
    launch = r.launch_s + np.where(a0["one_row"], 0.0, r.prompt_launch_s)[:, None]
    time, compute, memory = op_time_s(
        q["flops"], q["vflops"], dram, rates, r.vector_ops_per_s, bandwidth, launch
    )
    if r.widen_s_per_weight:  # a conversion pass before the matmul: added, not overlapped
        time = time + q["fp16_weights"] * r.widen_s_per_weight
    if r.attention_s_per_position:  # a decode attention's walk over its cached positions
        walk = (a0["attention"] & a0["one_row"])[:, None]
        time = time + walk * q["positions"] * r.attention_s_per_position
    cpu = np.asarray([placement(profile, t) == "fallback" for t in a0["op_type"]], dtype=bool)[
        :, None
    ]
    if cpu.any():  # fallback ops: CPU rates, the NPU <-> CPU copy, a launch on each side
        cpu_rates = np.array([r.cpu_matmul_ops_per_s[d] for d in DTYPES])
        c_time, c_compute, _ = op_time_s(
            q["flops"],
            q["vflops"],
            dram,
            cpu_rates[cd][:, None],
            r.cpu_vector_ops_per_s,
            bandwidth,
            r.launch_s + r.cpu_launch_s,
        )
        c_time = c_time + (q["act_in"] + q["act_out"]) / r.transfer_bytes_per_s
        time, compute = np.where(cpu, c_time, time), np.where(cpu, c_compute, compute)
    fallback_runs = float((n * cpu).sum())
    per_dtype = {d: ((cd == i)[:, None] * q["flops"] * n).sum(axis=0) for i, d in enumerate(DTYPES)}
    vector = (q["vflops"] * n).sum(axis=0)
    return {
        "time_s": (time * n).sum(axis=0) + r.forward_s,
        "compute_s": (compute * n).sum(axis=0),
        "memory_s": (memory * n).sum(axis=0),
        "launch_s": np.full(
            steps.shape,
            (launch[:, 0] * a0["count"]).sum() + r.cpu_launch_s * fallback_runs + r.forward_s,
        ),
        "memory_bound_s": (((memory >= compute) * time) * n).sum(axis=0),
        "flops": sum(per_dtype.values()) + vector,
        "fp16_ops": per_dtype["fp16"],
        "int8_ops": per_dtype["int8"],
        "int4_ops": per_dtype["int4"],
        "vector_ops": vector,
        "int8_equiv_ops": sum(INT8_EQUIV[d] * v for d, v in per_dtype.items())
        + VECTOR_INT8_EQUIV * vector,
        "dram_bytes": (dram * n).sum(axis=0),
        "fallback_s": (time * n * cpu).sum(axis=0),
        "fallback_runs": np.full(steps.shape, fallback_runs),
    }


def _phase(name: str, per_step: dict[str, np.ndarray], launches: int, tokens: int) -> PhaseCost:
    steps = len(per_step["time_s"])
    means = {k: float(v.mean()) for k, v in per_step.items()}
    means["fallback_runs"] = int(round(means["fallback_runs"]))
    return PhaseCost(phase=name, kernel_launches=launches, tokens=tokens, steps=steps, **means)


def static_kv_positions(profile: DeviceProfile, config: RunConfig) -> int:
    """The positions a static KV cache holds (profile.runtime.kv_cache "static": its
    kv_context, else the configuration's context_tokens), 0 for a dynamic one. Raises
    ValueError when the scenario does not fit in it."""
    rt = profile.runtime
    if rt.kv_cache != "static":
        return 0
    s = config.scenario
    n = rt.kv_context or s.context_tokens
    if s.prompt_tokens + max(s.new_tokens, 1) > n:
        raise ValueError(
            f"{profile.source}: kv_context = {n}: the runtime's static KV cache holds fewer "
            f"positions than prompt {s.prompt_tokens} + new {s.new_tokens}"
        )
    return n


def decode_contexts(config: RunConfig, profile: DeviceProfile | None = None) -> np.ndarray:
    """Positions attended to by each generated token: prompt + 1 ... prompt + new_tokens; on
    a runtime with a static KV cache, all of it at every step (the graph attends over the
    whole cache, masked)."""
    s = config.scenario
    n = max(s.new_tokens, 1)
    static = static_kv_positions(profile, config) if profile is not None else 0
    if static:
        return np.full(n, static)
    return s.prompt_tokens + 1 + np.arange(n)


def config_graph(
    profile: DeviceProfile,
    config: RunConfig,
    phase: str,
    tokens: int = 1,
    context: int | None = None,
) -> Graph:
    """`config`'s graph of one phase as it runs on `profile`: its fallback ops left unfused."""
    return build_graph(
        config.spec,
        config.policy,
        phase,
        tokens=tokens,
        context=context,
        fused=config.fused,
        kv_dtype=config.kv_dtype,
        batch=config.scenario.batch,
        cpu_ops=fallback_ops(profile, config),
    )


def _decode_graphs(profile: DeviceProfile, config: RunConfig):
    """Decode graphs at contexts 1 and 2: every other context follows from them (op quantities
    are affine in the context, tests/model/test_graph.py holds that), so all scenarios share
    them."""
    return (
        config_graph(profile, config, "decode", context=1),
        config_graph(profile, config, "decode", context=2),
    )


def decode_step_times(
    profile: DeviceProfile,
    config: RunConfig,
    compute_freq_scale: float = 1.0,
    memory_freq_scale: float = 1.0,
) -> dict[str, np.ndarray]:
    """Per-step arrays (time_s, dram_bytes, ...) for every generated token of the scenario."""
    if not config.spec.is_decoder:
        raise ValueError(f"model {config.spec.name!r} is an encoder: it has no decode phase")
    g1, g2 = _decode_graphs(profile, config)
    return _evaluate(
        profile, g1, g2, decode_contexts(config, profile) - 1, compute_freq_scale, memory_freq_scale
    )


def graph_cost(
    profile: DeviceProfile,
    graph: Graph,
    compute_freq_scale: float = 1.0,
    memory_freq_scale: float = 1.0,
) -> PhaseCost:
    """Cost of one graph as it stands."""
    per = _evaluate(
        profile,
        graph,
        None,
        np.zeros(1),
        _check_scale("compute_freq_scale", compute_freq_scale),
        _check_scale("memory_freq_scale", memory_freq_scale),
    )
    return _phase(graph.phase, per, graph.kernel_launches, graph.tokens * graph.batch)


def phase_cost(
    profile: DeviceProfile,
    config: RunConfig,
    phase: str,
    compute_freq_scale: float = 1.0,
    memory_freq_scale: float = 1.0,
    context: int | None = None,
) -> PhaseCost:
    """The cost of one phase of `config` on `profile` (see the module docstring)."""
    fc = _check_scale("compute_freq_scale", compute_freq_scale)
    fm = _check_scale("memory_freq_scale", memory_freq_scale)
    s = config.scenario
    if phase == "prefill":
        # A cached prefix (s.prefix_tokens) leaves only the new rows, attending over the prompt.
        g = config_graph(
            profile, config, "prefill", tokens=s.new_prompt_tokens, context=s.prompt_tokens
        )
        return graph_cost(profile, g, fc, fm)
    if phase != "decode":
        raise ValueError(f"phase {phase!r}: must be 'prefill' or 'decode'")
    if context is not None:
        g = config_graph(profile, config, "decode", context=context)
        return graph_cost(profile, g, fc, fm)
    per = decode_step_times(profile, config, fc, fm)
    return _phase("decode", per, _decode_graphs(profile, config)[0].kernel_launches, s.batch)


@dataclass(frozen=True)
class Timing:
    """A scenario's predicted timeline."""

    prefill: PhaseCost
    decode: PhaseCost | None  # per-step means; None for an encoder
    first_step_s: float  # the decode step that emits the first token
    decode_total_s: float  # all generated tokens

    @property
    def ttft_s(self) -> float:
        return self.prefill.time_s + self.first_step_s

    @property
    def e2e_s(self) -> float:
        return self.prefill.time_s + self.decode_total_s

    @property
    def decode_tokens_per_s(self) -> float:
        if self.decode is None:
            return 0.0
        return self.decode.tokens / self.decode.time_s

    @property
    def launch_s(self) -> float:
        d = self.decode.launch_s * self.decode.steps if self.decode and self.decode_total_s else 0.0
        return self.prefill.launch_s + d

    @property
    def launch_overhead_pct(self) -> float:
        return 100.0 * self.launch_s / self.e2e_s


def scenario_timing(
    profile: DeviceProfile,
    config: RunConfig,
    compute_freq_scale: float = 1.0,
    memory_freq_scale: float = 1.0,
) -> Timing:
    prefill = phase_cost(profile, config, "prefill", compute_freq_scale, memory_freq_scale)
    if not config.spec.is_decoder:
        return Timing(prefill, None, 0.0, 0.0)
    per = decode_step_times(profile, config, compute_freq_scale, memory_freq_scale)
    decode = _phase(
        "decode", per, _decode_graphs(profile, config)[0].kernel_launches, config.scenario.batch
    )
    total = float(per["time_s"].sum()) if config.scenario.new_tokens else 0.0
    return Timing(prefill, decode, float(per["time_s"][0]), total)


def op_roofline_s(
    profile: DeviceProfile, op, roofline: Roofline | None = None
) -> tuple[float, float]:
    """(compute_s, memory_s) of one run of graph op `op` on `profile`, as the cost model charges it
    (efficiencies, per-dtype peaks, on-chip tiling passes; launch overhead not included), at
    `roofline`'s rates when given (the calibration's: Roofline.of(profile, efficiencies=False))."""
    r = roofline or Roofline.of(profile)
    nbytes = dram_bytes(op.streamed_bytes, op.other_bytes, op.tile_bytes, r.onchip_bytes)
    cd = profile.compute.op_compute_dtype(op)
    rate = r.class_ops_per_s[profile.compute.op_class(op, cd)] if op.flops else 1.0
    _, compute, memory = op_time_s(
        op.flops,
        op.vector_flops,
        nbytes,
        rate,
        r.vector_ops_per_s,
        r.bandwidth_bytes_per_s,
        r.launch_s,
    )
    return float(compute), float(memory)
