"""SoC profiles: a phone described as data (harmony_ref/device/profiles/*.toml), loaded into
frozen dataclasses with unit-suffixed fields. A new phone is a new TOML file, never a code change.
What a runtime makes of the SoC (its efficiencies, overheads, threads) is the runtime profile's
(device/runtime.py), and `load_profile` there merges the two for the cost model.

    soc = load_soc("harmony-flagship")        # a shipped profile as written, or a path to a .toml
    profile.compute.cube_int4_tops, profile.memory.dram_bandwidth_gbps, profile.thermal.freq_steps

Sections: [compute] (NPU Cube peaks per dtype, its vector unit, CPU fallback rates, efficiency),
[memory] (DRAM, on-chip buffer, RAM and the app's share, runtime workspace), [runtime] (kernel
launch overhead, storage read, NPU init, graph parse: the cold-start inputs) and [thermal]
(harmony_ref/device/thermal_config.py); optional [npu] (the op types the NPU runs and the ones the
CPU runtime implements for fallback, the NPU <-> CPU copy rate, the NPU memory models may hold:
device/ops.py, device/lifecycle.py) and [cpu] (its core clusters, `[[cpu.clusters]]`, per-op
dispatch and per-thread synchronisation costs: device/threads.py), an optional [gpu] (its peak, for a GPU
runtime), and an optional [calibration] section that only
`harmony-ref calibrate` writes (the fitted model's held-out error; shipped profiles have none).
Every number in a shipped file names its source or says
`assumption`. A Cube peak of 0 means "no NPU path for this dtype": the op falls back to the CPU
rate of the same dtype.

What a matmul computes in is decided in one place, `compute_dtype` (the cost model, the CPU
fallback, energy, breakdowns and the calibration fits all ask it): its weight dtype, whether the
policy gives it static int8 activations (`[activations]`, W8A8) and the profile's
`[compute] weight_only_compute`, what a weight-only quantized matmul (no `[activations]`)
computes in:
- `"fp16"`: the runtime dequantizes the weight on the fly and multiplies in float (FP16 on the
  NPU), as MindSpore Lite's weight quantization does ("float32 inference is still performed";
  full quantization, weights and activations, "the int operation is performed": MindSpore Lite
  docs, advanced/quantization). The phones.
- `"weight"`: at the rate of the weight's own dtype. Our host kernels (matmul_w8 / matmul_w4)
  quantize the activations to int8 per 32-block on the fly (llama.cpp's Q8 recipe), so an int8
  weight computes in int8 and an int4 one at the measured INT4 kernel rate: host.toml. So do a
  phone's SDOT CPU kernels: harmony-lowend (no NPU) and the CPU path of device/threads.py.
With int8 activations an int8 weight computes in int8 (the Cube's INT8 rate) on either kind of
profile, and so does an int4 weight (W4A8: nibbles widened to int8; the INT4 rate would need
int4 activations, which no policy has). The graph marks int8 activations where the runtime uses
them: `[activations]` covers a policy's int8 Linears (runtime/llama.py), so an int4 Linear of a
W8A8 policy is still weight-only. FP16/FP32 weights compute in fp16. Memory traffic is the
weight's stored bytes whatever it computes in.

Any defect (missing, unknown, negative or mistyped field, unreadable TOML) raises ValueError naming
the file, the field and the value.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

from harmony_ref._schema import fraction, from_table, nonneg
from harmony_ref._toml import read_toml, shipped_names
from harmony_ref.device.thermal_config import ThermalConfig
from harmony_ref.model.graph import OP_TYPES
from harmony_ref.units import GB, GIGA, KIB, MB, TERA

DTYPES = ("fp16", "int8", "int4")
# The NPU families a SoC's NPU belongs to, and the vendor / product words of a SoC profile's
# `soc` string that name it: an NPU runtime (qnn-npu, mslite-npu) is built for one family only
# (QNN drives Qualcomm's Hexagon, MindSpore Lite's NPU path HiSilicon's Da Vinci), so a runtime
# profile's `npu` must match the SoC's `npu_family` (apply_runtime). A SoC profile may set
# `npu_family`; one that leaves it out takes the family its `soc` string names (npu_family_of).
NPU_FAMILIES = {
    "hexagon": ("Qualcomm Hexagon NPU", ("qualcomm", "snapdragon")),
    "davinci": ("HiSilicon Da Vinci NPU", ("hisilicon", "kirin")),
    "mediatek-apu": ("MediaTek APU", ("mediatek", "dimensity")),
    "tensor-tpu": ("Google Tensor TPU", ("google", "tensor")),
    "samsung-npu": ("Samsung Exynos NPU", ("samsung", "exynos")),
}


def npu_family_of(soc: str) -> str:
    """The NPU family (NPU_FAMILIES) whose vendor or product word the `soc` string holds
    ("Qualcomm SM8650" -> "hexagon", "HiSilicon Kirin 9000E" -> "davinci"), "" when none does."""
    words = set(soc.lower().replace("-", " ").split())
    return next((f for f, (_, names) in NPU_FAMILIES.items() if words & set(names)), "")


# The 16-bit float formats a weight may be stored in (a policy's `float16`: both compute dtype
# "fp16" of DTYPES, 2 bytes a weight) and the paths a runtime runs them on (its [float16]):
# "native" at the unit's fp16 rate, "widened" converted to fp32 and multiplied at the fp32 rate.
FLOAT16_FORMATS = ("fp16", "bf16")
FLOAT16_PATHS = ("native", "widened")
KV_CACHES = ("dynamic", "static")
GRAPH_KINDS = ("ops", "compiled")
# The fp32 rate as a share of the fp16 one. A [cpu] cluster's fp16_flops_per_cycle counts a
# 128-bit NEON pipe as 8 fp16 lanes x 2 (FMA); an fp32 FMLA fills the same pipe with 4 lanes
# (Arm A64 ISA: FMLA .8H vs .4S), so a widened matmul runs at half of it. GPU and NPU units:
# the same half (assumption: Adreno and Mali issue fp32 at half their fp16 rate, and an NPU
# without an fp32 path is never "widened" by a runtime that ships).
WIDENED_SHARE = 0.5
WEIGHT_ONLY_COMPUTES = ("fp16", "weight")  # [compute] weight_only_compute (module docstring)
HOST_WEIGHT_ONLY_COMPUTE = "weight"  # our host kernels: dynamic int8 activations per 32-block
# The phone's CPU path (device/threads.py): its [cpu] clusters' int8 / int4 rates are SDOT kernels,
# which take int8 activations (llama.cpp-style CPU inference, what the thread source measured).
CPU_PATH_WEIGHT_ONLY_COMPUTE = "weight"


def compute_dtype(weight_dtype: str, act_dtype: str, weight_only_compute: str) -> str:
    """The dtype a matmul computes in (one of DTYPES): the only place this is decided.

    weight_dtype: its weight's operand dtype (fp16 | int8 | int4; fp32 weights run as fp16);
    act_dtype: "int8" when the policy gives it static int8 activations (W8A8), else "fp16";
    weight_only_compute: the profile's [compute] field (WEIGHT_ONLY_COMPUTES)."""
    if weight_dtype not in DTYPES or weight_only_compute not in WEIGHT_ONLY_COMPUTES:
        raise ValueError(
            f"compute_dtype: weight dtype {weight_dtype!r} / weight_only_compute "
            f"{weight_only_compute!r}: must be in {DTYPES} / {WEIGHT_ONLY_COMPUTES}"
        )
    if weight_dtype == "fp16":
        return "fp16"
    if act_dtype == "int8":  # W8A8 -> INT8; W4A8 -> INT8 too (INT4 needs int4 activations)
        return "int8"
    return "fp16" if weight_only_compute == "fp16" else weight_dtype


def _positive():
    return field(metadata={"min": 1e-9})


def _optional_fraction():
    """An efficiency a profile may leave out (NaN: the field it defaults to, see its comment)."""
    return field(default=math.nan, metadata={"min": 1e-6, "max": 1.0})


def _or(value: float, fallback: float) -> float:
    return fallback if math.isnan(value) else value


@dataclass(frozen=True)
class ComputeSpec:
    cube_fp16_tops: float = nonneg()  # NPU matrix unit peaks; 0 = no NPU path for the dtype
    cube_int8_tops: float = nonneg()
    cube_int4_tops: float = nonneg()
    vector_fp16_gflops: float = _positive()  # norms, softmax, activations, rope
    cpu_fp16_gflops: float = _positive()  # CPU fallback matmul rates (NEON)
    cpu_int8_gops: float = _positive()
    cpu_int4_gops: float = _positive()
    # achieved / peak on large matmuls; a SoC profile that names its `runtime` leaves it (and
    # weight_only_compute) out: the runtime profile gives them (device/runtime.py)
    compute_efficiency: float = _optional_fraction()
    # what a weight-only quantized matmul computes in: "fp16" (dequantized, float) or "weight"
    # (its weight's dtype: our host kernels' dynamic int8 activations); see `compute_dtype`
    weight_only_compute: str = field(default="", metadata={"choices": WEIGHT_ONLY_COMPUTES})
    # Optional per-class efficiencies (NaN: the next in its chain, FALLBACK; at the end
    # compute_efficiency): the prompt's matmuls (GEMMs) per compute dtype; one-row matmuls (a
    # decode step's GEMVs, batch 1: runtimes run other kernels for them) per dtype; attention's
    # QK^T and P.V over a prompt and for one decode row; the vector ops.
    int4_efficiency: float = _optional_fraction()
    int8_efficiency: float = _optional_fraction()
    fp16_efficiency: float = _optional_fraction()
    gemv_efficiency: float = _optional_fraction()
    gemv_int4_efficiency: float = _optional_fraction()
    gemv_int8_efficiency: float = _optional_fraction()
    gemv_fp16_efficiency: float = _optional_fraction()
    attention_efficiency: float = _optional_fraction()
    attention_decode_efficiency: float = _optional_fraction()
    vector_efficiency: float = _optional_fraction()
    # What a 16-bit float matmul (and attention) computes at, per 16-bit format (a policy's
    # `float16`), as a share of the fp16 matmul peak above: 1.0 native (fp16 FMLA, bf16
    # BFMMLA/BFDOT), 0.5 widened to fp32 (FLOAT16_PATHS); a runtime profile's [float16] sets them
    fp16_rate_share: float = field(default=1.0, metadata={"min": 1e-6, "max": 1.0})
    bf16_rate_share: float = field(default=1.0, metadata={"min": 1e-6, "max": 1.0})

    def float16_share(self, fmt: str) -> float:
        """The share of the fp16 matmul peak a 16-bit matmul in format `fmt` (FLOAT16_FORMATS)
        runs at on this profile."""
        if fmt not in FLOAT16_FORMATS:
            raise ValueError(f"16-bit format {fmt!r}: must be one of {list(FLOAT16_FORMATS)}")
        return self.fp16_rate_share if fmt == "fp16" else self.bf16_rate_share

    def efficiency(self, cls: str) -> float:
        """Achieved / peak of a class (EFFICIENCY_CLASSES), through its FALLBACK chain."""
        for c in (cls,) + FALLBACK[cls]:
            v = getattr(self, f"{c}_efficiency")
            if not math.isnan(v):
                return v
        return self.compute_efficiency

    @staticmethod
    def op_class(op, compute_dtype: str) -> str:
        """The efficiency class of graph op `op` computing in `compute_dtype`."""
        one_row = op.m == 1
        if op.kind in ("attn_qk", "attn_pv", "attention"):
            return "attention_decode" if one_row else "attention"
        if op.flops and one_row:
            return f"gemv_{compute_dtype}"
        return compute_dtype if op.flops else "vector"

    def class_peak_ops_per_s(self, cls: str) -> float:
        """The peak a class's work runs against: its dtype's matmul peak (attention: fp16's)."""
        if cls == "vector":
            return self.vector_fp16_gflops * GIGA
        if cls.startswith("attention"):
            return self.matmul_ops_per_s("fp16")
        return self.matmul_ops_per_s(cls.rpartition("_")[2])

    def op_compute_dtype(self, op, cpu_path: bool = False) -> str:
        """The dtype graph op `op` computes in on this profile (`compute_dtype`); `cpu_path`: on
        the phone's CPU path of device/threads.py (CPU_PATH_WEIGHT_ONLY_COMPUTE)."""
        mode = CPU_PATH_WEIGHT_ONLY_COMPUTE if cpu_path else self.weight_only_compute
        return compute_dtype(op.dtype, op.act_dtype, mode)

    def matmul_ops_per_s(self, dtype: str) -> float:
        """Peak matmul ops/s for a compute dtype: the Cube's when it has one, else the CPU's."""
        cube = {
            "fp16": self.cube_fp16_tops,
            "int8": self.cube_int8_tops,
            "int4": self.cube_int4_tops,
        }[dtype]
        if cube > 0:
            return cube * TERA
        return {
            "fp16": self.cpu_fp16_gflops,
            "int8": self.cpu_int8_gops,
            "int4": self.cpu_int4_gops,
        }[dtype] * GIGA

    def on_npu(self, dtype: str) -> bool:
        return {
            "fp16": self.cube_fp16_tops,
            "int8": self.cube_int8_tops,
            "int4": self.cube_int4_tops,
        }[dtype] > 0


# Efficiency classes and where an unset one takes its value from (then compute_efficiency).
FALLBACK = {
    "int4": (),
    "int8": (),
    "fp16": (),
    "vector": (),
    "gemv_int4": ("gemv", "int4"),
    "gemv_int8": ("gemv", "int8"),
    "gemv_fp16": ("gemv", "fp16"),
    "attention": ("fp16",),
    "attention_decode": ("attention", "fp16"),
}
EFFICIENCY_CLASSES = tuple(FALLBACK)


@dataclass(frozen=True)
class MemorySpec:
    dram_type: str
    dram_bandwidth_gbps: float = _positive()  # peak, GB/s (decimal)
    onchip_buffer_kib: float = _positive()  # NPU local buffer a matmul tiles its activations into
    ram_gb: float = _positive()
    app_memory_share: float = fraction()  # fraction of RAM one foreground app may hold
    runtime_workspace_mb: float = nonneg()  # runtime + graph + scratch, outside weights and KV
    memory_efficiency: float = _optional_fraction()  # achieved / peak on streaming reads
    # The last-level (or system-level) cache that weights re-read every step can stay in: 0 = none.
    # A phase whose streamed bytes (weights, K/V) per step fit it reads them at the cache's
    # bandwidth; a larger one hits in it a share cache / streamed (device/cost.py).
    cache_mb: float = field(default=0.0, metadata={"min": 0.0})
    cache_bandwidth_gbps: float = field(default=0.0, metadata={"min": 0.0})  # peak or measured
    cache_efficiency: float = _optional_fraction()  # achieved / cache bandwidth (NaN: memory's)
    # Read bandwidth of each unit (a CPU cluster, the GPU, the NPU rarely reach the DRAM peak
    # alone), and of one CPU core: measured, or an assumption the profile's comment names (the
    # real SoCs without a measurement take the Snapdragon 8 Gen 3's measured shares of its
    # peak); 0 = unknown (the DRAM peak applies). A runtime's memory efficiency is a share of it.
    cpu_read_gbps: float = field(default=0.0, metadata={"min": 0.0})
    gpu_read_gbps: float = field(default=0.0, metadata={"min": 0.0})
    npu_read_gbps: float = field(default=0.0, metadata={"min": 0.0})
    core_read_gbps: float = field(default=0.0, metadata={"min": 0.0})
    core_cache_gbps: float = field(default=0.0, metadata={"min": 0.0})  # one core from the cache

    @property
    def cache_bytes(self) -> float:
        return self.cache_mb * MB

    @property
    def app_budget_bytes(self) -> float:
        return self.ram_gb * GB * self.app_memory_share

    @property
    def onchip_buffer_bytes(self) -> float:
        return self.onchip_buffer_kib * KIB

    @property
    def workspace_bytes(self) -> float:
        return self.runtime_workspace_mb * MB


@dataclass(frozen=True)
class RuntimeSpec:
    storage_read_gbps: float = _positive()  # sequential read of the model file
    npu_init_ms: float = nonneg()  # opening the NPU device and runtime context
    graph_parse_ms_per_mb: float = nonneg()  # model graph parse/compile per MB of model file
    # per kernel launch, on top of its compute/memory time (NaN: given by the named runtime)
    launch_overhead_us: float = field(default=math.nan, metadata={"min": 0.0})
    # more per launch of a multi-row op (a prompt's), on top of launch_overhead_us: a runtime's
    # threading cost one-row ops do not pay (runtime.py [overhead] prompt_sync_us_per_thread)
    prompt_launch_us: float = field(default=0.0, metadata={"min": 0.0})
    # ns per cached position of a one-row attention op (a decode step's, per layer), on top of
    # its roofline time, at the thread count in use (runtime.py [overhead]
    # attention_ns_per_position)
    attention_ns_per_position: float = field(default=0.0, metadata={"min": 0.0})
    # once per forward pass (the prefill, each decode step): the runtime's own loop, sampling
    forward_overhead_us: float = field(default=0.0, metadata={"min": 0.0})
    # ns per fp16 weight on every matmul call before it (a runtime profile's [overhead]
    # fp16_widen_ns_per_weight)
    fp16_widen_ns_per_weight: float = field(default=0.0, metadata={"min": 0.0})
    # the KV cache a decode step reads: "dynamic" (the positions filled so far) or "static"
    # (a runtime that allocates the cache at a fixed length and attends over all of it, masked:
    # a compiled NPU graph); kv_context: that length (0: the configuration's context_tokens)
    kv_cache: str = field(default="dynamic", metadata={"choices": KV_CACHES})
    kv_context: int = field(default=0, metadata={"min": 0})


@dataclass(frozen=True)
class NpuSpec:
    """What the NPU runtime runs, and what it costs to hand an op to the CPU instead."""

    ops: tuple[str, ...] = field(metadata={"choices": OP_TYPES})  # op types the NPU runs
    cpu_ops: tuple[str, ...] = field(metadata={"choices": OP_TYPES})  # the CPU runtime's (fallback)
    transfer_gbps: float = _positive()  # NPU <-> CPU memory copy of a fallback op's ins and outs
    memory_mb: float = _positive()  # NPU memory the driver lets loaded models hold


@dataclass(frozen=True)
class CpuCluster:
    """Identical cores at one frequency; per-core rate = freq_ghz x ops per cycle."""

    name: str
    cores: int = field(metadata={"min": 1})
    freq_ghz: float = _positive()
    fp16_flops_per_cycle: float = _positive()  # NEON FMA lanes x 2
    int8_ops_per_cycle: float = _positive()  # SDOT
    int4_ops_per_cycle: float = _positive()  # nibbles unpacked to int8, then SDOT

    def core_ops_per_s(self, dtype: str) -> float:
        per_cycle = {
            "fp16": self.fp16_flops_per_cycle,
            "int8": self.int8_ops_per_cycle,
            "int4": self.int4_ops_per_cycle,
        }[dtype]
        return self.freq_ghz * GIGA * per_cycle


@dataclass(frozen=True)
class CpuSpec:
    """The phone's CPU as the CPU path (and a fallback op) sees it."""

    clusters: tuple[CpuCluster, ...]
    launch_us: float = nonneg()  # dispatching one op to the CPU thread pool
    sync_us_per_thread: float = nonneg()  # per op: the barrier's cost per thread beyond the first
    # the share of one core's compute rate each thread beyond the first adds (1: cores scale
    # perfectly, the phones' assumption; a host's is measured: calibrate/host_measure.py)
    thread_share: float = field(default=1.0, metadata={"min": 0.0, "max": 1.0})

    @property
    def cores(self) -> int:
        return sum(c.cores for c in self.clusters)

    def cores_used(self, threads: int) -> list[CpuCluster]:
        """The cluster of each of `threads` threads, fastest cores first (what the scheduler
        gives a busy thread pool)."""
        if (
            not isinstance(threads, int)
            or isinstance(threads, bool)
            or not 1 <= threads <= self.cores
        ):
            raise ValueError(
                f"threads = {threads!r}: must be an int in 1..{self.cores} (the profile's cores)"
            )
        order = sorted(self.clusters, key=lambda c: -c.core_ops_per_s("fp16"))
        return [c for c in order for _ in range(c.cores)][:threads]


@dataclass(frozen=True)
class GpuSpec:
    """The SoC's GPU as a runtime that runs the matmuls on it sees it (MLC, OpenCL)."""

    name: str
    fp16_gflops: float = _positive()  # peak FP16 (spec sheet: ALUs x 2 x clock)
    int8_gops: float = field(default=0.0, metadata={"min": 0.0})  # 0: no int8 path (runs fp16)


@dataclass(frozen=True)
class CalibrationInfo:
    """How well this (calibrated) profile's model predicted measurements it was not fitted on."""

    held_out_per_op_mape_pct: float = nonneg()  # held-out microbenchmark ops
    n_fit: int = nonneg()  # ops the fit used
    n_held_out: int = nonneg()  # ops held out and scored
    fitted_at: str = ""  # ISO 8601 UTC
    # held-out whole-model runs (prefill, decode step, e2e); NaN (or absent) when not run
    held_out_e2e_mape_pct: float = field(default=math.nan, metadata={"min": 0.0})
    n_held_out_e2e: int = field(default=0, metadata={"min": 0})

    @property
    def e2e_mape_pct(self) -> float | None:
        return None if math.isnan(self.held_out_e2e_mape_pct) else self.held_out_e2e_mape_pct

    @property
    def model_mape_pct(self) -> tuple[float, str]:
        """(the model's held-out error, what it was measured on): end to end when whole-model runs
        were held out, else per op."""
        if self.e2e_mape_pct is not None:
            return (
                self.e2e_mape_pct,
                f"held-out end-to-end MAPE over {self.n_held_out_e2e} whole-model runs",
            )
        return (
            self.held_out_per_op_mape_pct,
            f"held-out per-op MAPE over {self.n_held_out} ops (no e2e runs)",
        )


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    description: str
    compute: ComputeSpec
    memory: MemorySpec
    runtime: RuntimeSpec
    thermal: ThermalConfig
    soc: str = ""
    # The family of its NPU (NPU_FAMILIES); "" derives it from `soc` (npu_family_of) when the
    # profile has an NPU; a profile without one has none
    npu_family: str = field(default="", metadata={"choices": tuple(NPU_FAMILIES)})
    # A SoC profile names the runtime that runs on it by default (device/runtimes/*.toml); its
    # efficiencies, weight-only compute and launch overhead then come from that runtime
    default_runtime: str = ""
    gpu: GpuSpec | None = None  # [gpu]: for a runtime whose unit is "gpu"
    npu: NpuSpec | None = None  # [npu]: op support and NPU memory; None = every op on the NPU
    cpu: CpuSpec | None = None  # [cpu]: clusters for the thread model; None = no thread model
    calibration: CalibrationInfo | None = field(
        default=None, compare=False
    )  # [calibration], optional
    source: str = field(default="<memory>", compare=False, init=False)  # file it was read from

    def summary(self) -> dict:
        """Key numbers, one flat row (the `profiles` command prints these)."""
        c, m, r = self.compute, self.memory, self.runtime
        return {
            "profile": self.name,
            "int4_tops": c.matmul_ops_per_s("int4") / TERA,
            "int8_tops": c.matmul_ops_per_s("int8") / TERA,
            "fp16_tops": c.matmul_ops_per_s("fp16") / TERA,
            "npu": c.on_npu("int8"),
            "weight_only": c.weight_only_compute,
            "dram": m.dram_type,
            "dram_gbps": m.dram_bandwidth_gbps,
            "launch_us": r.launch_overhead_us,
            "ram_gb": m.ram_gb,
            "app_budget_gb": m.app_budget_bytes / GB,
            "storage_gbps": r.storage_read_gbps,
            "sustain_w": self.thermal.sustainable_power_w,
        }


def profile_from_dict(data: dict, source: str) -> DeviceProfile:
    """Validate a parsed profile table; errors name `source`, the field and its value."""
    try:
        profile = from_table(DeviceProfile, data, source)
    except ValueError as e:
        # Cross-field checks (ThermalConfig.__post_init__) do not know the file; add it.
        raise e if str(e).startswith(source) else ValueError(f"{source}: {e}") from e
    _check_cross_fields(profile, source)
    if not profile.npu_family and has_npu_cube(profile.compute):
        object.__setattr__(profile, "npu_family", npu_family_of(profile.soc))
    object.__setattr__(profile, "source", source)
    rt = profile.default_runtime
    if rt.endswith(".toml") and not Path(rt).is_absolute():
        # a relative runtime path is read beside the profile's file (`calibrate --backend host`
        # writes host.toml naming host.runtime.toml), wherever the user runs from
        beside = Path(source).parent / rt
        if beside.is_file():
            object.__setattr__(profile, "default_runtime", str(beside))
    return profile


def has_npu_cube(c: ComputeSpec) -> bool:
    """Whether the SoC has an NPU: a Cube peak above 0 for some dtype."""
    return any(c.on_npu(d) for d in DTYPES)


RUNTIME_FIELDS = (
    ("compute", "compute_efficiency"),
    ("compute", "weight_only_compute"),
    ("memory", "memory_efficiency"),
    ("runtime", "launch_overhead_us"),
)


def _check_cross_fields(p: DeviceProfile, source: str) -> None:
    """Checks across fields that from_table cannot make: named like its errors."""
    if not p.default_runtime:
        for sec, key in RUNTIME_FIELDS:
            v = getattr(getattr(p, sec), key)
            if v == "" or (isinstance(v, float) and math.isnan(v)):
                raise ValueError(
                    f"{source}: missing field '{sec}.{key}': a profile that names no "
                    "`default_runtime` must give it"
                )
    if p.cpu is not None:
        names = [c.name for c in p.cpu.clusters]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            i = len(names) - 1 - names[::-1].index(dup)
            raise ValueError(
                f"{source}: field 'cpu.clusters[{i}].name' = {dup!r}: another cluster has that name"
            )
    if p.npu_family and not has_npu_cube(p.compute):
        raise ValueError(
            f"{source}: field 'npu_family' = {p.npu_family!r}: this profile has no "
            "NPU (every cube_*_tops is 0)"
        )
    if p.npu is not None and not has_npu_cube(p.compute) and p.npu.ops:
        raise ValueError(
            f"{source}: field 'npu.ops' = {list(p.npu.ops)!r}: this profile has no "
            "NPU (every cube_*_tops is 0): list no NPU ops"
        )


PROFILES_FOLDER = "device/profiles"


def shipped_profiles() -> list[str]:
    return shipped_names(PROFILES_FOLDER)


@functools.cache
def _shipped_profile(name: str) -> DeviceProfile:
    """Shipped profiles are package data: parsed once per process (a sweep loads one per point;
    DeviceProfile is frozen, so sharing one is safe)."""
    data, source = read_toml("profile", PROFILES_FOLDER, name)
    return profile_from_dict(data, source)


def load_soc(name_or_path: str | Path | DeviceProfile) -> DeviceProfile:
    """A profile as written: a SoC profile that names a runtime keeps its runtime fields unset."""
    if isinstance(name_or_path, DeviceProfile):
        return name_or_path
    text = str(name_or_path)
    if not (text.endswith(".toml") or Path(text).exists()):
        return _shipped_profile(text)
    try:
        st = Path(text).stat()
    except OSError:  # read_toml says what is wrong with the path
        data, source = read_toml("profile", PROFILES_FOLDER, name_or_path)
        return profile_from_dict(data, source)
    return _profile_file(text, str(Path(text).resolve()), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _profile_file(text: str, resolved: str, mtime_ns: int, size: int) -> DeviceProfile:
    """A profile TOML parsed once per version of the file (a fit prices its points thousands of
    times on one SoC profile: re-reading it was 70 % of a prediction); a rewritten file (new
    mtime or size) is read again. DeviceProfile is frozen, so sharing one is safe."""
    data, source = read_toml("profile", PROFILES_FOLDER, text)
    return profile_from_dict(data, source)


def runtime_name(profile: str | Path | DeviceProfile, runtime: str = "") -> str:
    """The runtime a profile runs on: `runtime` when given, else the SoC's default_runtime;
    "" for a profile that names none (its own efficiencies: harmony-flagship)."""
    return str(runtime) if runtime else load_soc(profile).default_runtime
