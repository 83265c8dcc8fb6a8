"""Runtime profiles: what runs on a SoC (llama.cpp on its CPU, ExecuTorch XNNPACK, Qualcomm's
QNN/Genie on the NPU, MLC on the GPU, MindSpore Lite on the NPU, this project's host runtime),
as data beside the SoC profiles (harmony_ref/device/runtimes/*.toml).

    rt = load_runtime("llama.cpp-cpu")
    profile = load_profile("dimensity-9300", runtime="llama.cpp-cpu", threads=6)   # for cost.py

A SoC profile (device/soc.py) says what the silicon has: DRAM and what each unit reads of
it, the CPU clusters, GPU and NPU peaks. A runtime profile says what a runtime makes of it:
- `unit`: where its matmuls run: "cpu" (the fastest `threads` cores of the SoC's [cpu]
  clusters), "gpu" (the SoC's [gpu] peak) or "npu" (the SoC's NPU Cube peaks);
- `weight_only_compute`: what a weight-only quantized matmul computes in ("fp16": dequantized
  to float; "weight": at its weight's dtype, int8 activations made on the fly, as llama.cpp's
  Q8 activations and XNNPACK's QD8 kernels do); device/soc.py `compute_dtype`;
- `thread_split`: how a CPU runtime splits an op over threads: "even" (each thread a fixed
  share, the op waits for its slowest core: device/threads.py) or "dynamic" (work-stealing
  chunks: the op runs at the sum of its cores' rates);
- `thread_share`: what each thread beyond the first adds of its core's rate under this
  runtime's kernels, where they scale otherwise than the SoC profile's measured
  `cpu.thread_share` (unset: the SoC's); fitted on one machine's runs (calibrate --backend
  executorch: XNNPACK on this host's 2 vCPUs), a number of that machine, not of a phone;
- `gemv_thread_share`: the same for one-row matmuls (a decode step's GEMVs) where they scale
  otherwise than the prompt's GEMMs (unset: `thread_share`'s): applied as the gemv classes'
  efficiencies times (1 + (n - 1) gemv_thread_share) / (1 + (n - 1) thread_share) at n threads
  (`gemv_thread_scale`), capped at the peak; 1 thread is unchanged;
- [efficiency]: achieved / peak, on matmuls, per compute dtype, for attention and vector ops,
  on DRAM reads and on cache reads; [overhead]: per kernel launch and per forward pass (and
  `prompt_sync_us_per_thread`: more per launch of a prompt's multi-row op for each thread
  beyond the first, a threading cost one-row decode ops do not pay; unset 0;
  `attention_ns_per_position`: more per cached position of a decode step's attention in each
  layer, a runtime's attention kernel that walks the cache position by position; unset 0), or
  (`graph = "compiled"`: a compiled NPU graph, QNN/HTP) `graph_us` per forward and no per-op
  launch;
- [float16]: what a 16-bit float matmul computes in, per format (`fp16`, `bf16`: "native" at
  the unit's fp16 rate, "widened" to fp32 at half of it, a NEON pipe holding 4 fp32 lanes for
  8 fp16 ones), optionally per core kind (`[[float16.core]]` name = a [cpu] cluster's name);
  a policy's `float16` names the format;
- `kv_cache`: "dynamic" (a decode step reads the positions filled so far) or "static" (the
  cache allocated at `kv_context` positions, 0: the configuration's context_tokens, and read
  whole every step, masked);
- [[soc_efficiency]]: a SoC's own matmul efficiency, where that SoC's calibration figures pin
  one (`soc`, `matmul`, `fitted_on`); every other SoC takes [efficiency] matmul, the value
  pooled over all the SoCs the runtime was fitted on. A runtime's achieved share of a CPU's
  nominal peak is not one number across SoCs: the clocks cores hold with every thread busy, and
  how a kernel fills each core's pipes, differ, and no spec sheet gives either;
- [calibration]: which measurements the numbers were fitted on and which scored them
  (written by `harmony-ref calibrate`, read by `harmony-ref fidelity`).

`apply_runtime(soc, runtime, threads)` merges the two into one DeviceProfile whose peaks are the
unit's and whose efficiencies and overheads are the runtime's: device/cost.py's one per-op cost
function then prices every op, for every runtime, unchanged. Any defect raises ValueError naming
the file, the field and the value (harmony_ref/_schema.py from_table), as profiles do.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

from harmony_ref._schema import fraction, from_table
from harmony_ref._toml import read_toml, shipped_names
from harmony_ref.device.soc import (
    DTYPES,
    EFFICIENCY_CLASSES,
    FLOAT16_FORMATS,
    FLOAT16_PATHS,
    GRAPH_KINDS,
    KV_CACHES,
    NPU_FAMILIES,
    WEIGHT_ONLY_COMPUTES,
    WIDENED_SHARE,
    CalibrationInfo,
    CpuSpec,
    DeviceProfile,
    has_npu_cube,
    load_soc,
    shipped_profiles,
)
from harmony_ref.units import GIGA, TERA

UNITS = ("cpu", "gpu", "npu")
THREAD_SPLITS = ("even", "dynamic")
RUNTIMES_FOLDER = "device/runtimes"


@dataclass(frozen=True)
class RuntimeEfficiency:
    matmul: float = fraction()  # achieved / the unit's peak on matmuls of every dtype
    memory: float = fraction()  # achieved / the unit's DRAM read bandwidth
    # per efficiency class (device/soc.py FALLBACK: an unset one takes the next in its
    # chain, then matmul's): a prompt's matmuls per compute dtype; one-row matmuls (a decode
    # step's GEMVs), all or per dtype; attention over a prompt and for one decode row; vector ops
    int4: float = fraction(math.nan)
    int8: float = fraction(math.nan)
    fp16: float = fraction(math.nan)
    gemv: float = fraction(math.nan)
    gemv_int4: float = fraction(math.nan)
    gemv_int8: float = fraction(math.nan)
    gemv_fp16: float = fraction(math.nan)
    attention: float = fraction(math.nan)
    attention_decode: float = fraction(math.nan)
    vector: float = fraction(math.nan)
    cache: float = fraction(math.nan)  # achieved / the SoC's cache bandwidth (NaN: memory's)


@dataclass(frozen=True)
class RuntimeOverhead:
    launch_us: float = field(metadata={"min": 0.0})  # per kernel (one op of the graph)
    forward_us: float = field(default=0.0, metadata={"min": 0.0})  # per forward pass
    # ns per fp16 weight on every matmul call, before the matmul and not overlapped with it: a
    # runtime that widens float16 rows to float32 per call (harmony-ref's runtime/linear.py
    # _matmul_f16: a conversion pass, not a read at DRAM speed); 0 for kernels that read fp16
    fp16_widen_ns_per_weight: float = field(default=0.0, metadata={"min": 0.0})
    # "ops": the runtime launches each op of the graph (launch_us per op); "compiled": it runs
    # the forward as one compiled graph (QNN/HTP through Genie, ExecuTorch's Qualcomm backend):
    # no per-op launch, graph_us once per forward (a prefill chunk, a decode step) instead
    graph: str = field(default="ops", metadata={"choices": GRAPH_KINDS})
    graph_us: float = field(default=0.0, metadata={"min": 0.0})
    # us per op of a multi-row forward (a prompt's GEMMs, attention, norms), per thread beyond
    # the first, beside the barrier every op pays (the SoC's cpu.sync_us_per_thread): what a
    # prompt op costs in threading that a decode step's one-row op does not. 0: none (every
    # shipped profile); fitted on one machine's runs (calibrate --backend executorch: XNNPACK's
    # 2-thread prompts on this host's 2 vCPUs cost ~25 ms more than their work at any length)
    prompt_sync_us_per_thread: float = field(default=0.0, metadata={"min": 0.0})
    # ns per cached position a decode step's attention pays in each layer beyond its roofline
    # time, at one thread (n threads: divided by 1 + (n - 1) thread_share), on the cache as the
    # program stores it: ExecuTorch's custom_sdpa walks the filled positions of its fp32 cache
    # per query head (a 1-row gemm against K, a softmax, a 1-row gemm against V: portable C++,
    # not XNNPACK), ~270 ns per position per layer on this host, where the roofline prices the
    # position's 768 fp16 bytes and 2.3 kflop at ~1 ns. 0: none (every shipped profile); fitted
    # on one machine's runs (calibrate --backend executorch, attention_ns in --params)
    attention_ns_per_position: float = field(default=0.0, metadata={"min": 0.0})


@dataclass(frozen=True)
class Float16Core:
    """One core kind's own 16-bit paths: the SoC's [cpu] cluster of that `name` ("prime",
    "silver": the SoC profile's cluster names) takes these instead of the runtime's ("" keeps
    the runtime's); a SoC without such a cluster is unaffected."""

    name: str
    fp16: str = field(default="", metadata={"choices": ("",) + FLOAT16_PATHS})
    bf16: str = field(default="", metadata={"choices": ("",) + FLOAT16_PATHS})


@dataclass(frozen=True)
class RuntimeFloat16:
    """What a 16-bit float matmul computes in, per format (device/soc.py FLOAT16_PATHS):
    "native" (fp16 FMLA; bf16 BFMMLA/BFDOT) at the unit's fp16 rate, "widened" (converted to
    fp32 and multiplied there) at WIDENED_SHARE of it; `core`: per core kind, on a CPU unit."""

    fp16: str = field(default="native", metadata={"choices": FLOAT16_PATHS})
    bf16: str = field(default="native", metadata={"choices": FLOAT16_PATHS})
    core: tuple[Float16Core, ...] = ()

    def path(self, fmt: str, core: str = "") -> str:
        """The path format `fmt` takes on core kind `core` ("": the runtime's own)."""
        own = next((getattr(c, fmt) for c in self.core if c.name == core), "")
        return own or getattr(self, fmt)


@dataclass(frozen=True)
class RuntimeCalibration:
    """What the numbers were fitted on and what scored them (measurement ids, fidelity's)."""

    method: str
    fitted_on: tuple[str, ...]
    scored_on: tuple[str, ...] = ()
    fit_mape_pct: float = field(default=math.nan, metadata={"min": 0.0})
    held_out_mape_pct: float = field(default=math.nan, metadata={"min": 0.0})  # on scored_on
    fitted_at: str = ""


@dataclass(frozen=True)
class SocEfficiency:
    """One SoC's own matmul efficiency for a runtime: fitted where calibration figures of that
    SoC pin it (calibrate/run.py), used on that SoC in place of [efficiency] matmul (classes a
    runtime sets explicitly keep their own numbers). A SoC without an entry takes the shared
    one: the runtime's efficiency pooled over every SoC it was fitted on."""

    soc: str  # a SoC profile's `name` ("dimensity-9300")
    matmul: float = fraction()  # achieved / the unit's peak on matmuls, on this SoC
    fitted_on: tuple[str, ...] = ()  # the measurement ids of that SoC it was fitted on


@dataclass(frozen=True)
class RuntimeProfile:
    name: str
    description: str
    unit: str = field(metadata={"choices": UNITS})
    weight_only_compute: str = field(metadata={"choices": WEIGHT_ONLY_COMPUTES})
    efficiency: RuntimeEfficiency
    overhead: RuntimeOverhead
    # unit "npu": the NPU family it runs on (NPU_FAMILIES; required); other units: none
    npu: str = field(default="", metadata={"choices": tuple(NPU_FAMILIES)})
    threads: int = field(default=0, metadata={"min": 0})  # cpu: threads (0: performant_cores)
    thread_split: str = field(default="even", metadata={"choices": THREAD_SPLITS})
    # cpu: each thread beyond the first adds this share of its core's rate (NaN: the SoC's
    # cpu.thread_share)
    thread_share: float = field(default=math.nan, metadata={"min": 0.0, "max": 1.0})
    # cpu: the same for one-row matmuls, a decode step's GEMVs (NaN: thread_share's)
    gemv_thread_share: float = field(default=math.nan, metadata={"min": 0.0, "max": 1.0})
    workspace_mb: float = field(default=0.0, metadata={"min": 0.0})  # runtime + scratch memory
    # SoCs with a matmul efficiency of their own, fitted on their own calibration figures;
    # every other SoC takes [efficiency] matmul
    soc_efficiency: tuple[SocEfficiency, ...] = ()
    float16: RuntimeFloat16 = field(default_factory=RuntimeFloat16)  # [float16]
    # the KV cache a decode step reads (RuntimeSpec.kv_cache): "static" = allocated at
    # kv_context positions (0: the configuration's context_tokens) and read whole every step
    kv_cache: str = field(default="dynamic", metadata={"choices": KV_CACHES})
    kv_context: int = field(default=0, metadata={"min": 0})
    calibration: RuntimeCalibration | None = field(default=None, compare=False)
    source: str = field(default="<memory>", compare=False, init=False)

    def soc_entry(self, soc_name: str) -> SocEfficiency | None:
        """The [[soc_efficiency]] entry of SoC profile `soc_name`, or None."""
        return next((s for s in self.soc_efficiency if s.soc == soc_name), None)

    def matmul_on(self, soc_name: str) -> float:
        """The matmul efficiency on SoC `soc_name`: its own entry's, else the shared one."""
        entry = self.soc_entry(soc_name)
        return self.efficiency.matmul if entry is None else entry.matmul


def runtime_from_dict(data: dict, source: str) -> RuntimeProfile:
    rt = from_table(RuntimeProfile, data, source)
    if rt.unit == "npu" and not rt.npu:
        raise ValueError(
            f"{source}: missing field 'npu': a runtime on the NPU names the NPU family it "
            f"runs on, one of {list(NPU_FAMILIES)}"
        )
    if rt.unit != "npu" and rt.npu:
        raise ValueError(
            f"{source}: field 'npu' = {rt.npu!r}: only a runtime with unit = \"npu\" runs on "
            f"an NPU (this one's unit is {rt.unit!r})"
        )
    o = rt.overhead
    if o.graph_us and o.graph != "compiled":
        raise ValueError(
            f"{source}: field 'overhead.graph_us' = {o.graph_us!r}: only a compiled graph "
            '(overhead.graph = "compiled") pays a per-graph cost'
        )
    if rt.kv_context and rt.kv_cache != "static":
        raise ValueError(
            f"{source}: field 'kv_context' = {rt.kv_context!r}: only a static KV cache "
            '(kv_cache = "static") has a compiled length'
        )
    cores = [c.name for c in rt.float16.core]
    for i, name in enumerate(cores):
        if not name.strip() or name in cores[:i]:
            why = "empty" if not name.strip() else "another entry names that core kind"
            raise ValueError(f"{source}: field 'float16.core[{i}].name' = {name!r}: {why}")
    names = [s.soc for s in rt.soc_efficiency]
    for i, name in enumerate(names):
        if not name.strip():
            raise ValueError(f"{source}: field 'soc_efficiency[{i}].soc' = {name!r}: empty")
        if name in names[:i]:
            raise ValueError(
                f"{source}: field 'soc_efficiency[{i}].soc' = {name!r}: that SoC has an "
                "entry already (one matmul efficiency per SoC)"
            )
        if name not in shipped_profiles():  # a typo would leave the shared efficiency in force
            from harmony_ref._format import did_you_mean

            raise ValueError(
                f"{source}: field 'soc_efficiency[{i}].soc' = {name!r}: not a shipped SoC "
                f"profile{did_you_mean(name, shipped_profiles())}"
            )
    object.__setattr__(rt, "source", source)
    return rt


def shipped_runtimes() -> list[str]:
    return shipped_names(RUNTIMES_FOLDER)


@functools.cache
def _shipped_runtime(name: str) -> RuntimeProfile:
    data, source = read_toml("runtime profile", RUNTIMES_FOLDER, name)
    return runtime_from_dict(data, source)


def load_runtime(name_or_path: str | Path | RuntimeProfile) -> RuntimeProfile:
    """A shipped runtime profile by name ("llama.cpp-cpu") or a runtime TOML by path."""
    if isinstance(name_or_path, RuntimeProfile):
        return name_or_path
    text = str(name_or_path)
    if not (text.endswith(".toml") or Path(text).exists()):
        return _shipped_runtime(text)
    data, source = read_toml("runtime profile", RUNTIMES_FOLDER, name_or_path)
    return runtime_from_dict(data, source)


def _threads_rate(per_core: list[float], split: str) -> float:
    """Ops/s of threads whose cores run at `per_core` ops/s: each op waits for its slowest
    thread (even split: threads x the slowest, device/threads.py) or takes their sum."""
    return len(per_core) * min(per_core) if split == "even" else sum(per_core)


def cpu_rates(cpu: CpuSpec, threads: int, split: str) -> dict[str, float]:
    """Ops/s of `threads` threads on the fastest cores, per dtype (_threads_rate), each thread
    beyond the first adding `cpu.thread_share` of its core's rate."""
    used = cpu.cores_used(threads)
    scale = (1 + (threads - 1) * cpu.thread_share) / threads
    return {d: scale * _threads_rate([c.core_ops_per_s(d) for c in used], split) for d in DTYPES}


def gemv_thread_scale(thread_share: float, gemv_thread_share: float, threads: int) -> float:
    """What n threads' one-row matmuls run at relative to the rate cpu_rates gives them:
    (1 + (n - 1) gemv_thread_share) / (1 + (n - 1) thread_share); 1.0 when gemv_thread_share
    is unset (NaN) or at one thread."""
    if math.isnan(gemv_thread_share) or threads <= 1:
        return 1.0
    return (1 + (threads - 1) * gemv_thread_share) / (1 + (threads - 1) * thread_share)


def float16_shares(cpu: CpuSpec, threads: int, split: str, f16: RuntimeFloat16) -> dict:
    """Per 16-bit format, the share of the fp16 rate of `threads` threads (cpu_rates) a 16-bit
    matmul runs at when each core kind takes its path of `f16` (widened: WIDENED_SHARE of the
    core's fp16 rate)."""
    used = cpu.cores_used(threads)
    fp16 = _threads_rate([c.core_ops_per_s("fp16") for c in used], split)
    return {
        fmt: _threads_rate(
            [
                c.core_ops_per_s("fp16")
                * (WIDENED_SHARE if f16.path(fmt, c.name) == "widened" else 1.0)
                for c in used
            ],
            split,
        )
        / fp16
        for fmt in FLOAT16_FORMATS
    }


PERFORMANT_SHARE = 0.4  # a core this far below the fastest one is not a "performant" core


def performant_cores(cpu: CpuSpec) -> int:
    """The cores a runtime takes by default (threads = 0): every core whose FP16 rate is at least
    PERFORMANT_SHARE of the fastest core's, i.e. not the little cluster (as ExecuTorch and
    cpuinfo count "performant cores"; llama.cpp users pass the big cores' count: assumption)."""
    best = max(c.core_ops_per_s("fp16") for c in cpu.clusters)
    return sum(c.cores for c in cpu.clusters if c.core_ops_per_s("fp16") >= PERFORMANT_SHARE * best)


def _threads(soc: DeviceProfile, rt: RuntimeProfile, threads: int | None) -> int:
    if soc.cpu is None:
        raise ValueError(
            f"{soc.source}: runtime {rt.name!r} runs on the CPU, and this profile "
            "has no [cpu] clusters"
        )
    if threads is not None and threads < 1:  # 0 is not "the runtime's default"
        raise ValueError(f"runtime {rt.name!r}: threads = {threads}: must be >= 1")
    n = threads or rt.threads or performant_cores(soc.cpu)
    if not 1 <= n <= soc.cpu.cores:
        raise ValueError(
            f"runtime {rt.name!r}: threads = {n}: must be in 1..{soc.cpu.cores} "
            f"({soc.name}'s cores)"
        )
    return n


def _check_npu_family(soc: DeviceProfile, rt: RuntimeProfile) -> None:
    """An NPU runtime runs on its own family's NPU only (NPU_FAMILIES): QNN on a Snapdragon's
    Hexagon, not on a MediaTek APU or a Kirin's Da Vinci."""
    if not has_npu_cube(soc.compute):
        raise ValueError(
            f"{soc.source}: runtime {rt.name!r} runs on the NPU, and this "
            "profile has no NPU (every cube_*_tops is 0)"
        )
    want = NPU_FAMILIES[rt.npu][0]
    if not soc.npu_family:
        raise ValueError(
            f"{soc.source}: runtime {rt.name!r} runs on a {want}; {soc.name} names no NPU "
            f"family (set field 'npu_family', one of {list(NPU_FAMILIES)})"
        )
    if soc.npu_family != rt.npu:
        raise ValueError(
            f"runtime {rt.name!r} runs on a {want} only; {soc.name} has a "
            f"{NPU_FAMILIES[soc.npu_family][0]}"
        )


def apply_runtime(
    soc: DeviceProfile, rt: RuntimeProfile, threads: int | None = None
) -> DeviceProfile:
    """`rt` on `soc` as one DeviceProfile (see the module docstring). Raises ValueError when
    the SoC lacks the unit the runtime needs (a GPU runtime on a profile without [gpu], an NPU
    runtime on another family's NPU: QNN on a Dimensity)."""
    e, c, m = rt.efficiency, soc.compute, soc.memory
    compute = dict(
        compute_efficiency=rt.matmul_on(soc.name),
        weight_only_compute=rt.weight_only_compute,
        **{f"{k}_efficiency": getattr(e, k) for k in EFFICIENCY_CLASSES + ("gemv",)},
    )
    launch_us, read_gbps, npu = rt.overhead.launch_us, m.dram_bandwidth_gbps, None
    prompt_launch_us = attention_ns = 0.0
    cache_gbps = m.cache_bandwidth_gbps
    label = rt.name
    if rt.unit == "cpu":
        n = _threads(soc, rt, threads)
        assert soc.cpu is not None  # _threads refused a profile without [cpu]
        cpu = soc.cpu
        if not math.isnan(rt.thread_share):  # the runtime's kernels scale their own way
            cpu = dataclasses.replace(cpu, thread_share=rt.thread_share)
        rates = cpu_rates(cpu, n, rt.thread_split)
        scale = gemv_thread_scale(cpu.thread_share, rt.gemv_thread_share, n)
        if scale != 1.0:  # the decode GEMVs' own thread scaling, on their efficiencies
            own = dataclasses.replace(c, **compute)
            compute.update(
                {
                    f"gemv_{d}_efficiency": min(1.0, own.efficiency(f"gemv_{d}") * scale)
                    for d in DTYPES
                }
            )
        compute.update(
            cube_fp16_tops=0.0,
            cube_int8_tops=0.0,
            cube_int4_tops=0.0,
            cpu_fp16_gflops=rates["fp16"] / GIGA,
            cpu_int8_gops=rates["int8"] / GIGA,
            cpu_int4_gops=rates["int4"] / GIGA,
            vector_fp16_gflops=rates["fp16"] / GIGA,
        )
        read_gbps = m.cpu_read_gbps or read_gbps
        if m.core_read_gbps:
            read_gbps = min(read_gbps, n * m.core_read_gbps)
        if m.core_cache_gbps:  # n threads read the cache at most n cores' worth
            cache_gbps = min(cache_gbps, n * m.core_cache_gbps)
        launch_us += soc.cpu.sync_us_per_thread * (n - 1)  # every op's barrier
        prompt_launch_us = rt.overhead.prompt_sync_us_per_thread * (n - 1)  # a prompt op's
        # the decode attention's per-position walk, split over the threadpool like the rest
        attention_ns = rt.overhead.attention_ns_per_position / (1 + (n - 1) * cpu.thread_share)
        shares = float16_shares(soc.cpu, n, rt.thread_split, rt.float16)
        compute.update(fp16_rate_share=shares["fp16"], bf16_rate_share=shares["bf16"])
        label = f"{rt.name} x{n}"
    elif rt.unit == "gpu":
        if soc.gpu is None:
            raise ValueError(
                f"{soc.source}: runtime {rt.name!r} runs on the GPU, and this "
                "profile has no [gpu] section"
            )
        fp16 = soc.gpu.fp16_gflops * GIGA / TERA
        int8 = (soc.gpu.int8_gops * GIGA / TERA) or fp16  # no int8 path: at the fp16 rate
        compute.update(
            cube_fp16_tops=fp16,
            cube_int8_tops=int8,
            cube_int4_tops=int8,
            vector_fp16_gflops=soc.gpu.fp16_gflops,
        )
        read_gbps = m.gpu_read_gbps or read_gbps
    else:
        _check_npu_family(soc, rt)
        read_gbps = m.npu_read_gbps or read_gbps
        npu = soc.npu
    if rt.unit != "cpu":  # the whole unit takes the runtime's path (no core kinds)
        compute.update(
            {
                f"{fmt}_rate_share": WIDENED_SHARE if rt.float16.path(fmt) == "widened" else 1.0
                for fmt in FLOAT16_FORMATS
            }
        )
    memory = dataclasses.replace(
        m,
        dram_bandwidth_gbps=read_gbps,
        memory_efficiency=e.memory,
        cache_bandwidth_gbps=cache_gbps,
        cache_efficiency=e.cache,
        runtime_workspace_mb=rt.workspace_mb,
    )
    forward_us = rt.overhead.forward_us
    if rt.overhead.graph == "compiled":  # one graph per forward, no launch (or barrier) per op
        launch_us, forward_us = 0.0, forward_us + rt.overhead.graph_us
        prompt_launch_us = 0.0
    runtime = dataclasses.replace(
        soc.runtime,
        launch_overhead_us=launch_us,
        prompt_launch_us=prompt_launch_us,
        attention_ns_per_position=attention_ns,
        forward_overhead_us=forward_us,
        fp16_widen_ns_per_weight=rt.overhead.fp16_widen_ns_per_weight,
        kv_cache=rt.kv_cache,
        kv_context=rt.kv_context,
    )
    cal = soc.calibration
    rc = rt.calibration
    if rc is not None and not math.isnan(rc.held_out_mape_pct):
        # the runtime's held-out error is this merged profile's model error (SimulatedDevice
        # reports it as host_model_mape_pct); no per-op microbenchmarks: the same number
        cal = CalibrationInfo(
            rc.held_out_mape_pct,
            len(rc.fitted_on),
            len(rc.scored_on),
            rc.fitted_at,
            rc.held_out_mape_pct,
            len(rc.scored_on),
        )
    out = dataclasses.replace(
        soc,
        name=f"{soc.name}+{label}",
        compute=dataclasses.replace(c, **compute),
        memory=memory,
        runtime=runtime,
        npu=npu,
        default_runtime="",
        calibration=cal,
    )
    object.__setattr__(out, "source", soc.source)
    return out


def load_profile(
    name_or_path: str | Path | DeviceProfile, runtime=None, threads: int | None = None
) -> DeviceProfile:
    """A shipped profile by name ("harmony-flagship") or a profile TOML by path, ready for the
    cost model: with `runtime` (a runtime profile name, path or RuntimeProfile) that runtime on
    the SoC, else the profile's own `runtime` when it names one, else the profile as written.
    `threads`: a CPU runtime's thread count (default: the runtime's)."""
    soc = load_soc(name_or_path)
    runtime = runtime or soc.default_runtime or None
    if runtime is None:
        return soc
    return apply_runtime(soc, load_runtime(runtime), threads)


def config_profile(config) -> DeviceProfile:
    """The device a RunConfig runs on: its `profile` with its `runtime` (load_profile)."""
    return load_profile(config.profile, config.runtime or None)
