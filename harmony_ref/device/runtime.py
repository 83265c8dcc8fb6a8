"""Runtime profiles: what runs on a SoC (llama.cpp on its CPU, ExecuTorch XNNPACK, Qualcomm's
QNN/Genie on the NPU, MLC on the GPU, MindSpore Lite on the NPU, this project's host runtime),
as data beside the SoC profiles (harmony_ref/device/runtimes/*.toml).

    rt = load_runtime("llama.cpp-cpu")
    profile = load_profile("dimensity-9300", runtime="llama.cpp-cpu", threads=6)   # for cost.py

A SoC profile (device/profile.py) says what the silicon has: DRAM and what each unit reads of
it, the CPU clusters, GPU and NPU peaks. A runtime profile says what a runtime makes of it:
- `unit`: where its matmuls run: "cpu" (the fastest `threads` cores of the SoC's [cpu]
  clusters), "gpu" (the SoC's [gpu] peak) or "npu" (the SoC's NPU Cube peaks);
- `weight_only_compute`: what a weight-only quantized matmul computes in ("fp16": dequantized
  to float; "weight": at its weight's dtype, int8 activations made on the fly, as llama.cpp's
  Q8 activations and XNNPACK's QD8 kernels do); device/profile.py `compute_dtype`;
- `thread_split`: how a CPU runtime splits an op over threads: "even" (each thread a fixed
  share, the op waits for its slowest core: device/threads.py) or "dynamic" (work-stealing
  chunks: the op runs at the sum of its cores' rates);
- [efficiency]: achieved / peak, on matmuls, per compute dtype, for attention and vector ops,
  on DRAM reads and on cache reads; [overhead]: per kernel launch and per forward pass;
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

from harmony_ref._schema import from_table
from harmony_ref._toml import read_toml, shipped_names
from harmony_ref.device.profile import (DTYPES, EFFICIENCY_CLASSES, WEIGHT_ONLY_COMPUTES,
                                        CalibrationInfo, CpuSpec, DeviceProfile)
from harmony_ref.units import GIGA, TERA

UNITS = ("cpu", "gpu", "npu")
THREAD_SPLITS = ("even", "dynamic")
RUNTIMES_FOLDER = "device/runtimes"


def _fraction(default=None):
    meta = {"min": 1e-6, "max": 1.0}
    return field(metadata=meta) if default is None else field(default=default, metadata=meta)


@dataclass(frozen=True)
class RuntimeEfficiency:
    matmul: float = _fraction()  # achieved / the unit's peak on matmuls of every dtype
    memory: float = _fraction()  # achieved / the unit's DRAM read bandwidth
    # per efficiency class (device/profile.py FALLBACK: an unset one takes the next in its
    # chain, then matmul's): a prompt's matmuls per compute dtype; one-row matmuls (a decode
    # step's GEMVs), all or per dtype; attention over a prompt and for one decode row; vector ops
    int4: float = _fraction(math.nan)
    int8: float = _fraction(math.nan)
    fp16: float = _fraction(math.nan)
    gemv: float = _fraction(math.nan)
    gemv_int4: float = _fraction(math.nan)
    gemv_int8: float = _fraction(math.nan)
    gemv_fp16: float = _fraction(math.nan)
    attention: float = _fraction(math.nan)
    attention_decode: float = _fraction(math.nan)
    vector: float = _fraction(math.nan)
    cache: float = _fraction(math.nan)  # achieved / the SoC's cache bandwidth (NaN: memory's)


@dataclass(frozen=True)
class RuntimeOverhead:
    launch_us: float = field(metadata={"min": 0.0})  # per kernel (one op of the graph)
    forward_us: float = field(default=0.0, metadata={"min": 0.0})  # per forward pass


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
class RuntimeProfile:
    name: str
    description: str
    unit: str = field(metadata={"choices": UNITS})
    weight_only_compute: str = field(metadata={"choices": WEIGHT_ONLY_COMPUTES})
    efficiency: RuntimeEfficiency
    overhead: RuntimeOverhead
    threads: int = field(default=0, metadata={"min": 0})  # cpu: threads (0: performant_cores)
    thread_split: str = field(default="even", metadata={"choices": THREAD_SPLITS})
    workspace_mb: float = field(default=0.0, metadata={"min": 0.0})  # runtime + scratch memory
    calibration: RuntimeCalibration | None = field(default=None, compare=False)
    source: str = field(default="<memory>", compare=False, init=False)


def runtime_from_dict(data: dict, source: str) -> RuntimeProfile:
    rt = from_table(RuntimeProfile, data, source)
    object.__setattr__(rt, "source", source)
    return rt


def shipped_runtimes() -> list[str]:
    return shipped_names(RUNTIMES_FOLDER)


@functools.lru_cache(maxsize=None)
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


def cpu_rates(cpu: CpuSpec, threads: int, split: str) -> dict[str, float]:
    """Ops/s of `threads` threads on the fastest cores, per dtype: the sum of their rates
    (dynamic split) or threads x the slowest one's (even split)."""
    from harmony_ref.device.threads import cores_used, thread_rates

    if split == "even":
        return thread_rates(cpu, threads)
    used = cores_used(cpu, threads)
    return {d: sum(c.core_ops_per_s(d) for c in used) for d in DTYPES}


PERFORMANT_SHARE = 0.4  # a core this far below the fastest one is not a "performant" core


def performant_cores(cpu: CpuSpec) -> int:
    """The cores a runtime takes by default (threads = 0): every core whose FP16 rate is at least
    PERFORMANT_SHARE of the fastest core's, i.e. not the little cluster (as ExecuTorch and
    cpuinfo count "performant cores"; llama.cpp users pass the big cores' count: assumption)."""
    best = max(c.core_ops_per_s("fp16") for c in cpu.clusters)
    return sum(c.cores for c in cpu.clusters if c.core_ops_per_s("fp16") >= PERFORMANT_SHARE * best)


def _threads(soc: DeviceProfile, rt: RuntimeProfile, threads: int | None) -> int:
    if soc.cpu is None:
        raise ValueError(f"{soc.source}: runtime {rt.name!r} runs on the CPU, and this profile "
                         "has no [cpu] clusters")
    n = threads or rt.threads or performant_cores(soc.cpu)
    if not 1 <= n <= soc.cpu.cores:
        raise ValueError(f"runtime {rt.name!r}: threads = {n}: must be in 1..{soc.cpu.cores} "
                         f"({soc.name}'s cores)")
    return n


def apply_runtime(soc: DeviceProfile, rt: RuntimeProfile, threads: int | None = None) -> DeviceProfile:
    """`rt` on `soc` as one DeviceProfile (see the module docstring). Raises ValueError when
    the SoC lacks the unit the runtime needs (a GPU runtime on a profile without [gpu])."""
    e, c, m = rt.efficiency, soc.compute, soc.memory
    compute = dict(compute_efficiency=e.matmul, weight_only_compute=rt.weight_only_compute,
                   **{f"{k}_efficiency": getattr(e, k) for k in EFFICIENCY_CLASSES + ("gemv",)})
    launch_us, read_gbps, npu = rt.overhead.launch_us, m.dram_bandwidth_gbps, None
    cache_gbps = m.cache_bandwidth_gbps
    label = rt.name
    if rt.unit == "cpu":
        n = _threads(soc, rt, threads)
        rates = cpu_rates(soc.cpu, n, rt.thread_split)
        compute.update(cube_fp16_tops=0.0, cube_int8_tops=0.0, cube_int4_tops=0.0,
                       cpu_fp16_gflops=rates["fp16"] / GIGA, cpu_int8_gops=rates["int8"] / GIGA,
                       cpu_int4_gops=rates["int4"] / GIGA, vector_fp16_gflops=rates["fp16"] / GIGA)
        read_gbps = m.cpu_read_gbps or read_gbps
        if m.core_read_gbps:
            read_gbps = min(read_gbps, n * m.core_read_gbps)
        if m.core_cache_gbps:  # n threads read the cache at most n cores' worth
            cache_gbps = min(cache_gbps, n * m.core_cache_gbps)
        launch_us += soc.cpu.sync_us_per_thread * (n - 1)  # every op's barrier
        label = f"{rt.name} x{n}"
    elif rt.unit == "gpu":
        if soc.gpu is None:
            raise ValueError(f"{soc.source}: runtime {rt.name!r} runs on the GPU, and this "
                             "profile has no [gpu] section")
        fp16 = soc.gpu.fp16_gflops * GIGA / TERA
        int8 = (soc.gpu.int8_gops * GIGA / TERA) or fp16  # no int8 path: at the fp16 rate
        compute.update(cube_fp16_tops=fp16, cube_int8_tops=int8, cube_int4_tops=int8,
                       vector_fp16_gflops=soc.gpu.fp16_gflops)
        read_gbps = m.gpu_read_gbps or read_gbps
    else:
        if not any(c.on_npu(d) for d in DTYPES):
            raise ValueError(f"{soc.source}: runtime {rt.name!r} runs on the NPU, and this "
                             "profile has no NPU (every cube_*_tops is 0)")
        read_gbps = m.npu_read_gbps or read_gbps
        npu = soc.npu
    memory = dataclasses.replace(m, dram_bandwidth_gbps=read_gbps, memory_efficiency=e.memory,
                                 cache_bandwidth_gbps=cache_gbps,
                                 cache_efficiency=e.cache, runtime_workspace_mb=rt.workspace_mb)
    runtime = dataclasses.replace(soc.runtime, launch_overhead_us=launch_us,
                                  forward_overhead_us=rt.overhead.forward_us)
    cal = soc.calibration
    rc = rt.calibration
    if rc is not None and not math.isnan(rc.held_out_mape_pct):
        # the runtime's held-out error is this merged profile's model error (SimulatedDevice
        # reports it as host_model_mape_pct); no per-op microbenchmarks: the same number
        cal = CalibrationInfo(rc.held_out_mape_pct, len(rc.fitted_on), len(rc.scored_on),
                              rc.fitted_at, rc.held_out_mape_pct, len(rc.scored_on))
    out = dataclasses.replace(soc, name=f"{soc.name}+{label}", compute=dataclasses.replace(c, **compute),
                              memory=memory, runtime=runtime, npu=npu, default_runtime="",
                              calibration=cal)
    object.__setattr__(out, "source", soc.source)
    return out
