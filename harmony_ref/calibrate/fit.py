"""Calibration: fit a roofline + launch-overhead model to measured op times, and say how far the
model is from measurements it was not fitted on.

The model, per op (the device cost model's own function, device/cost.py `op_time_s`):
    t = launches * L + max(sum over classes of ops[class] / R[class], bytes / BW)
with L the launch overhead, R[class] the achieved rate of a compute class (int4, int8, fp16
matmuls, vector ops) and BW the achieved memory bandwidth.

How it is fitted (non-negative least squares, linearised per regime):
1. every op is put in the regime (compute or memory) that the seed numbers say dominates
   (seed: bandwidth from a streaming read, rates from a first compute-regime guess);
2. inside a regime t is linear in the unknowns x = [L, 1/R[int4], 1/R[int8], 1/R[fp16],
   1/R[vector], 1/BW]: row = [launches, ops if the op's class, ..., bytes if memory-bound];
3. rows and targets are divided by the measured time, so the fit minimises relative error
   (a 10 us op counts as much as a 10 ms one), and solved with scipy.optimize.nnls (no negative
   overheads or rates);
4. ops are re-assigned to the regime the fitted numbers say dominates; 2-4 repeat until no op
   changes regime (or MAX_ITERATIONS). An unknown no row constrains (no op of that class, or no
   memory-bound op) keeps its seed value and is reported as not fitted.

On the host the fitted set is the microbenchmarks minus every third size (held out). Optionally
(`calibrate --launch-from-workloads`) the launch overhead is refitted on the phase totals of a few
whole-model "fit workloads" (`fit_launch_on_phases`), since per-call overhead differs by
implementation (a Numba kernel's wrapper ~5 us, a small NumPy op ~0.5-2 us) and the model has one
number for it. Measured on this host over repeated runs, the plain microbenchmark fit was as good
or better end to end (4.5-8.5% vs 6.5-10% e2e MAPE), so it is the default; adding the fit
workloads' per-op samples to the NNLS made it worse (8-15%): hundreds of tiny NumPy ops pull the
one launch overhead down and the rates with it.

Held-out error: MAPE per op on the held-out microbenchmark sizes, and end to end (prefill,
decode step, e2e) on whole-model workloads never fitted on (HELDOUT_WORKLOADS), measured by
HostDevice and predicted by SimulatedDevice with the written profile.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harmony_ref.backends.base import E2E_METRICS
from harmony_ref.device.cost import Roofline, dram_bytes, op_time_s
from harmony_ref.metrics import ape_pct, mape_pct
from harmony_ref.units import GB, GIGA, KIB, MEGA, MS_PER_S, US_PER_S

RATE_CLASSES = ("int4", "int8", "fp16", "vector")
MAX_ITERATIONS = 20
COMPUTE, MEMORY = "compute", "memory"


@dataclass(frozen=True)
class OpSample:
    """One measured op (or microbenchmark): what it does and how long it took."""

    name: str
    rate_class: str  # int4 | int8 | fp16 | vector: the compute rate of `ops`
    ops: float  # arithmetic ops (2*M*N*K for a matmul)
    nbytes: float  # bytes read + written
    launches: int  # kernel launches (1 fused, 3 for an unfused norm chain, ...)
    time_s: float  # median measured time
    samples: tuple[float, ...] = ()
    holdout: bool = False
    vector_ops: float = 0.0  # elementwise work riding on a matmul (a fused epilogue)

    def __post_init__(self):
        if self.rate_class not in RATE_CLASSES:
            raise ValueError(f"op {self.name}: rate_class {self.rate_class!r} not in {RATE_CLASSES}")
        if not self.time_s > 0:
            raise ValueError(f"op {self.name}: time_s must be > 0, got {self.time_s!r}")

    def class_ops(self) -> dict[str, float]:
        out = dict.fromkeys(RATE_CLASSES, 0.0)
        out[self.rate_class] += self.ops
        out["vector"] += self.vector_ops
        return out


@dataclass(frozen=True)
class HostFit:
    launch_s: float
    rates: dict[str, float]  # achieved ops/s per class
    bandwidth_bytes_per_s: float
    fitted: tuple[str, ...]  # which unknowns a row constrained ("launch", "int4", ..., "bandwidth")
    iterations: int
    regimes: dict[str, str] = field(default_factory=dict)

    def times_s(self, op: OpSample) -> tuple[float, float, float]:
        """(time, compute, memory) of `op` at the fitted rates, by the cost model's formula."""
        matmul, vector = (0.0, op.ops + op.vector_ops) if op.rate_class == "vector" else (op.ops, op.vector_ops)
        rate = self.rates[op.rate_class]
        t, c, m = op_time_s(matmul, vector, op.nbytes, rate, self.rates["vector"],
                            self.bandwidth_bytes_per_s, self.launch_s, op.launches)
        return float(t), float(c), float(m)

    def compute_s(self, op: OpSample) -> float:
        return self.times_s(op)[1]

    def memory_s(self, op: OpSample) -> float:
        return self.times_s(op)[2]

    def predict_s(self, op: OpSample) -> float:
        return self.times_s(op)[0]

    def regime(self, op: OpSample) -> str:
        return COMPUTE if self.compute_s(op) >= self.memory_s(op) else MEMORY


def _solve(ops: list[OpSample], regimes: list[str]):
    from scipy.optimize import nnls

    ncols = 2 + len(RATE_CLASSES)
    a = np.zeros((len(ops), ncols))
    for i, (op, reg) in enumerate(zip(ops, regimes)):
        a[i, 0] = op.launches
        if reg == COMPUTE:
            for c, v in op.class_ops().items():
                a[i, 1 + RATE_CLASSES.index(c)] = v
        else:
            a[i, -1] = op.nbytes
        a[i] /= op.time_s
    # Columns span 1 .. 1e10; scale them to unit norm so nnls is well conditioned.
    norms = np.linalg.norm(a, axis=0)
    used = norms > 0
    x = np.zeros(ncols)
    xs, _ = nnls(a[:, used] / norms[used], np.ones(len(ops)))
    x[used] = xs / norms[used]
    return x, used


def _rel_sse(f: HostFit, ops: list[OpSample]) -> float:
    return float(sum(((f.predict_s(op) - op.time_s) / op.time_s) ** 2 for op in ops))


def fit(ops: list[OpSample], seed_bandwidth: float, seed_rates: dict[str, float]) -> HostFit:
    """Fit on the ops with holdout=False (see the module docstring for the method). Two starting
    regime assignments are tried (from the seeds, and everything compute-bound); the iterate with
    the lowest relative squared error wins, so an oscillating assignment cannot end on a bad one."""
    train = [op for op in ops if not op.holdout]
    if len(train) < 3:
        raise ValueError(f"calibration: need at least 3 fitted ops, got {len(train)}")
    names = ("launch",) + RATE_CLASSES + ("bandwidth",)
    seed = HostFit(0.0, dict(seed_rates), seed_bandwidth, (), 0)
    best, best_err = None, float("inf")
    for regimes in ([seed.regime(op) for op in train], [COMPUTE] * len(train)):
        for it in range(1, MAX_ITERATIONS + 1):
            x, used = _solve(train, regimes)
            fitted = tuple(n for n, u, v in zip(names, used, x) if u and v > 0)
            rates = {c: (1.0 / x[1 + i] if x[1 + i] > 0 else seed_rates[c]) for i, c in enumerate(RATE_CLASSES)}
            bw = 1.0 / x[-1] if x[-1] > 0 else seed_bandwidth
            current = HostFit(float(x[0]), rates, bw, fitted, it)
            err = _rel_sse(current, train)
            if err < best_err:
                best, best_err = current, err
            new = [current.regime(op) for op in train]
            if new == regimes:
                break
            regimes = new
    return HostFit(best.launch_s, best.rates, best.bandwidth_bytes_per_s, best.fitted, best.iterations,
                   {op.name: best.regime(op) for op in ops})


# --- host profile ------------------------------------------------------------------------------

THERMAL_TEMPLATE = "harmony-midrange"  # the host's thermal behaviour is not calibrated: borrowed


def nominal_host_peaks(freq_mhz: float, cores: int, flags: set[str]) -> dict[str, float]:
    """Nominal SIMD peaks of this CPU (ops/s). Assumption: 2 FMA pipes per core; fp32 lanes from
    the widest vector ISA (AVX-512: 16, AVX2: 8, else 4); int8 dot products (VNNI) do 4 MACs per
    32-bit lane (else 2, via pmaddubsw); int4 runs at the int8 rate (nibbles unpacked to int8)."""
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    hz = freq_mhz * MEGA * cores
    fp32 = 2 * 2 * lanes * hz  # 2 pipes x FMA (2 ops) x lanes
    int8 = 2 * 2 * lanes * (4 if ("avx512_vnni" in flags or "avx_vnni" in flags) else 2) * hz
    return {"fp16": fp32, "int8": int8, "int4": int8, "vector": fp32}


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(float(v)) if isinstance(v, float) else str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_table(name: str, rows: list[tuple[str, object, str]]) -> str:
    lines = [f"[{name}]"] if name else []
    for key, value, comment in rows:
        lines.append(f"{key} = {_toml_value(value)}" + (f"  # {comment}" if comment else ""))
    return "\n".join(lines)


def host_profile_toml(f: HostFit, stream_gbps: float, nominal: dict[str, float], onchip_bytes: int,
                      ram_bytes: float, description: str, name: str = "host") -> str:
    """A device profile (harmony_ref.device.profile schema) for this host from a fit.

    The cost model multiplies a class's peak by `compute_efficiency`; the fit gives the products
    (achieved rates). compute_efficiency is the INT4 matmul's achieved / nominal peak, and each
    class's peak field is its achieved rate / compute_efficiency, so peak x efficiency = fitted."""
    from harmony_ref._toml import read_toml
    from harmony_ref.device.profile import PROFILES_FOLDER

    ce = min(1.0, f.rates["int4"] / nominal["int4"])
    eff = {c: f.rates[c] / nominal[c] for c in RATE_CLASSES}
    bw = f.bandwidth_bytes_per_s
    dram = max(stream_gbps * GB, bw)
    thermal = read_toml("profile", PROFILES_FOLDER, THERMAL_TEMPLATE)[0]["thermal"]
    fitted = lambda c: "fitted" if c in f.fitted else "NOT fitted (seed)"  # noqa: E731
    head = "\n".join([
        f"# Host profile written by `harmony-ref calibrate`: {description}",
        "# Fitted by NNLS per regime on relative error (harmony_ref/calibrate/fit.py); every number",
        "# says whether it was measured, fitted or is an assumption.",
        f'name = "{name}"',
        f"description = {_toml_value(description)}",
        'soc = "this host CPU (no NPU: every matmul runs at the CPU rate of its dtype)"',
    ])
    compute = _toml_table("compute", [
        ("cube_fp16_tops", 0.0, "no NPU on the host"),
        ("cube_int8_tops", 0.0, "no NPU on the host"),
        ("cube_int4_tops", 0.0, "no NPU on the host"),
        ("vector_fp16_gflops", f.rates["vector"] / ce / GIGA,
         f"{fitted('vector')}: achieved {f.rates['vector'] / GIGA:.3g} GFLOP/s / compute_efficiency"),
        ("cpu_fp16_gflops", f.rates["fp16"] / ce / GIGA,
         f"{fitted('fp16')}: achieved {f.rates['fp16'] / GIGA:.3g} (float32 NumPy) / compute_efficiency; "
         f"efficiency vs nominal {eff['fp16']:.2f}"),
        ("cpu_int8_gops", f.rates["int8"] / ce / GIGA,
         f"{fitted('int8')}: achieved {f.rates['int8'] / GIGA:.3g} / compute_efficiency; efficiency vs nominal {eff['int8']:.2f}"),
        ("cpu_int4_gops", nominal["int4"] / GIGA, "assumption: nominal SIMD peak (nominal_host_peaks)"),
        ("compute_efficiency", ce, f"{fitted('int4')}: achieved INT4 {f.rates['int4'] / GIGA:.3g} GOP/s / nominal"),
    ])
    memory = _toml_table("memory", [
        ("dram_type", "host DRAM", ""),
        ("dram_bandwidth_gbps", dram / GB, "measured: single-thread streaming read of 64 MiB"
         + ("" if dram == stream_gbps * GB else " (raised to the fitted bandwidth, which exceeded it)")),
        ("memory_efficiency", min(1.0, bw / dram), f"{fitted('bandwidth')}: achieved {bw / GB:.3g} GB/s / dram_bandwidth"),
        ("onchip_buffer_kib", onchip_bytes / KIB, "measured: L2 size of cpu0 (sysfs)"),
        ("ram_gb", ram_bytes / GB, "measured: psutil total memory"),
        ("app_memory_share", 0.5, "assumption"),
        ("runtime_workspace_mb", 0.0, "assumption: NumPy/Numba scratch is counted in the measured RSS"),
    ])
    runtime = _toml_table("runtime", [
        ("launch_overhead_us", f.launch_s * US_PER_S, f"{fitted('launch')}: per kernel call"),
        ("storage_read_gbps", 1.0, "assumption: not calibrated"),
        ("npu_init_ms", 0.0, "no NPU"),
        ("graph_parse_ms_per_mb", 0.0, "assumption: no graph compile on the host"),
    ])
    thermal_t = _toml_table("thermal", [(k, v, "") for k, v in thermal.items()])
    return "\n\n".join([head, compute, memory, runtime,
                        f"# not calibrated: copied from {THERMAL_TEMPLATE}\n" + thermal_t]) + "\n"


def calibration_toml(result: "Calibration") -> str:
    """The profile's [calibration] section (harmony_ref.device.profile.CalibrationInfo): the
    held-out error of the model this profile is, so a SimulatedDevice on it can report it."""
    import datetime

    rows = [
        ("held_out_per_op_mape_pct", float(result.per_op_mape_pct), "measured: held-out microbenchmark ops"),
        ("n_fit", sum(not o.holdout for o in result.ops), "ops fitted on"),
        ("n_held_out", sum(o.holdout for o in result.ops), "ops held out"),
        ("fitted_at", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), ""),
    ]
    e2e = result.e2e_mape_pct
    if e2e is not None:
        n = len({r["workload"] for r in result.e2e if r["metric"] == "e2e_ms" and not r["fused"]})
        rows += [("held_out_e2e_mape_pct", float(e2e), "measured: held-out whole-model runs, unfused"),
                 ("n_held_out_e2e", n, "whole-model runs scored")]
    return "# the model's error on host measurements it was not fitted on\n" + _toml_table("calibration", rows)


# --- op times from a file (`--backend command`) ---------------------------------------------------

OP_FILE_COLUMNS = ("name", "rate_class", "ops", "bytes", "launches", "time_us")


def load_op_times(path) -> list[OpSample]:
    """Measured op times from a CSV with columns name, rate_class (int4|int8|fp16|vector), ops,
    bytes, launches, time_us [, holdout (0/1), vector_ops] (e.g. exported from a device profiler:
    MindSpore Lite `--timeProfiling`, the ExecuTorch ETDump inspector) . Errors name the row."""
    import csv
    from pathlib import Path


    path = Path(path)
    if not path.is_file():
        raise ValueError(f"op times file {path} does not exist")
    out = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in OP_FILE_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; need {list(OP_FILE_COLUMNS)}")
        for i, row in enumerate(reader, start=2):
            try:
                out.append(OpSample(
                    row["name"], row["rate_class"], float(row["ops"]), float(row["bytes"]),
                    int(row["launches"]), float(row["time_us"]) / US_PER_S,
                    holdout=row.get("holdout", "0").strip() in ("1", "true", "yes"),
                    vector_ops=float(row.get("vector_ops") or 0.0)))
            except (ValueError, TypeError) as e:
                raise ValueError(f"{path}: line {i}: {e}") from e
    return out


def seed_rates(ops: list[OpSample]) -> dict[str, float]:
    """First guess per class: the best achieved ops/s among that class's samples."""
    out = {}
    for c in RATE_CLASSES:
        r = [op.ops / op.time_s for op in ops if op.rate_class == c and op.ops > 0]
        out[c] = max(r) if r else GIGA  # no sample of the class: 1 Gop/s, only a seed
    return out


# --- the whole calibration -------------------------------------------------------------------------

# Whole-model runs the fit never sees: (model, width divisor, policy, prompt, new tokens, context,
# fused). The end-to-end MAPE is taken on unfused graphs: there the host makes exactly one kernel
# call per graph op, as the model charges. On a fused graph the model assumes epilogue fusion
# (matmul + bias, rope + KV write, ...) that the host has no kernels for: those rows are shown,
# and scored apart, as the cost of the missing fusion, not as model error.
HELDOUT_WORKLOADS = [
    ("qwen2.5-0.5b", 2, "int4-g128", 64, 16, 128, False),
    ("llama-3.2-1b", 4, "int8", 32, 16, 64, False),
    ("all-minilm-l6", 1, "int8", 128, 0, 128, False),
    ("qwen2.5-0.5b", 2, "int4-g128", 64, 16, 128, True),
]
# Whole-model runs whose per-op times join the fit (the host's own op implementations: numpy
# elementwise ops, KV-cache writes, attention, at the shapes real layers have).
FIT_WORKLOADS = [
    ("qwen2.5-0.5b", 4, "int4-g32", 32, 8, 64, False),
    ("llama-3.2-1b", 8, "int8", 16, 8, 32, False),
    ("all-minilm-l6", 2, "int4-g32", 64, 0, 64, False),
]
QUICK_FIT_WORKLOADS = [("qwen2.5-0.5b", 8, "int4-g32", 32, 8, 64, False), ("llama-3.2-1b", 8, "int8", 16, 8, 32, False)]
QUICK_WORKLOADS = [("qwen2.5-0.5b", 4, "int4-g128", 16, 8, 32, False),
                   ("qwen2.5-0.5b", 4, "int4-g128", 16, 8, 32, True)]


@dataclass
class Calibration:
    fit: HostFit
    ops: list[OpSample]
    profile_toml: str
    per_op_mape_pct: float
    fit_mape_pct: float
    e2e: list[dict] = field(default_factory=list)  # one row per held-out workload and metric
    launch_floor_s: float | None = None
    notes: dict[str, str] = field(default_factory=dict)

    def _e2e_mape(self, fused: bool, quiet_only: bool = False) -> float | None:
        rows = [r for r in self.e2e if r["metric"] == "e2e_ms" and r["fused"] == fused
                and not (quiet_only and r.get("contended"))]
        return mape_pct((r["model"], r["measured"]) for r in rows) if rows else None

    @property
    def e2e_quiet_mape_pct(self) -> float | None:
        """As e2e_mape_pct, over the workloads measured while the load canary was quiet."""
        return self._e2e_mape(False, quiet_only=True)

    @property
    def e2e_mape_pct(self) -> float | None:
        """Held-out whole-model e2e MAPE on unfused graphs (see HELDOUT_WORKLOADS)."""
        return self._e2e_mape(False)

    @property
    def e2e_fused_mape_pct(self) -> float | None:
        return self._e2e_mape(True)

    def op_table(self):
        import pandas as pd

        return pd.DataFrame([{
            "op": op.name, "set": "held-out" if op.holdout else "fit", "regime": self.fit.regimes[op.name],
            "measured_us": op.time_s * US_PER_S, "model_us": self.fit.predict_s(op) * US_PER_S,
            "ape_pct": ape_pct(self.fit.predict_s(op), op.time_s)} for op in self.ops])


def op_time(t, stat: str = "min") -> float:
    return min(t.samples_s) if stat == "min" else t.median_s


def phase_times_ms(run, new_tokens: int, stat: str = "min") -> dict[str, float]:
    """prefill_ms, decode_step_ms, e2e_ms of a host Measurement from its per-op times (min or median),
    summed the way HostDevice sums them."""
    out = {}
    pre = sum(op_time(t, stat) for t in run.ops if t.phase == "prefill")
    out["prefill_ms"] = pre * MS_PER_S
    dec = [t for t in run.ops if t.phase == "decode"]
    e2e = pre
    if dec:
        step = sum(op_time(t, stat) for t in dec)
        out["decode_step_ms"] = step * MS_PER_S
        e2e += new_tokens * step
    out["e2e_ms"] = e2e * MS_PER_S
    return out


def samples_from_op_times(op_times, onchip_bytes: int, holdout: bool = False, tag: str = "",
                          dedupe: bool = True, stat: str = "min") -> list[OpSample]:
    """OpSamples from a host Measurement's `ops`: the graph ops the host executed, counted as the cost model counts
    them (matrix flops at the op's dtype, vector flops, streamed bytes x on-chip passes + other
    bytes). Ops repeated across layers are merged into one sample at their median time."""
    import re
    import statistics
    from collections import defaultdict

    groups: dict[tuple, list] = defaultdict(list)
    for i, t in enumerate(op_times):
        key = (t.phase, re.sub(r"\.\d+\.", ".N.", t.name) if dedupe else f"{i}:{t.name}")
        groups[key].append(t)
    out = []
    for (phase, name), ts in groups.items():
        op = ts[0].op
        nbytes = dram_bytes(op.streamed_bytes, op.other_bytes, op.tile_bytes, onchip_bytes)
        cls = op.dtype if op.flops else "vector"
        times = tuple(op_time(t, stat) for t in ts)
        if op.flops:
            out.append(OpSample(f"{tag}{phase}:{name}", cls, float(op.flops), float(nbytes), 1,
                                statistics.median(times), times, holdout, float(op.vector_flops)))
        else:
            out.append(OpSample(f"{tag}{phase}:{name}", "vector", float(op.vector_flops), float(nbytes), 1,
                                statistics.median(times), times, holdout))
    return out


def fit_launch_on_phases(f: HostFit, runs, onchip_bytes: int, stat: str = "min") -> HostFit:
    """Refit the launch overhead on whole-model phase totals (least squares through the origin):
    L = sum_p n_p (T_p - B_p) / sum_p n_p^2, with T_p a phase's measured time, B_p its modelled
    time without launches and n_p its kernel calls. Per-call overhead on the host differs by
    implementation (a Numba kernel's Python wrapper ~6 us, a small NumPy op ~1-2 us); the model
    has one number, and this makes it the one the real op mix pays."""
    num = den = 0.0
    for run in runs:
        for phase in ("prefill", "decode"):
            ts = [t for t in run.ops if t.phase == phase]
            if not ts:
                continue
            n = sum(t.launches for t in ts)
            measured = sum(op_time(t, stat) for t in ts)
            bound = sum(max(f.compute_s(s), f.memory_s(s))
                        for s in samples_from_op_times(ts, onchip_bytes, dedupe=False, stat=stat))
            num += n * (measured - bound)
            den += n * n
    if den == 0:
        return f
    launch = max(0.0, num / den)
    fitted = tuple(x for x in f.fitted if x != "launch") + ("launch",)
    return HostFit(launch, f.rates, f.bandwidth_bytes_per_s, fitted, f.iterations, f.regimes)


def calibrate_ops(ops: list[OpSample], stream_gbps: float, nominal: dict[str, float], onchip_bytes: int,
                  ram_bytes: float, description: str, name: str = "host", phase_runs=(),
                  stat: str = "min") -> Calibration:
    """Fit on the non-held-out ops, score on the held-out ones, write the profile text. With
    `phase_runs` (host Measurements of fit workloads) the launch overhead is refitted on their phases."""
    f = fit(ops, seed_bandwidth=stream_gbps * GB, seed_rates=seed_rates(ops))
    if phase_runs:
        f = fit_launch_on_phases(f, phase_runs, onchip_bytes, stat)
    held = [(f.predict_s(op), op.time_s) for op in ops if op.holdout]
    train = [(f.predict_s(op), op.time_s) for op in ops if not op.holdout]
    if not held:
        raise ValueError("calibration: no held-out ops to score the model on (mark some holdout=1)")
    text = host_profile_toml(f, stream_gbps, nominal, onchip_bytes, ram_bytes, description, name)
    return Calibration(f, ops, text, mape_pct(held), mape_pct(train))


def workload_config(model, div, policy, prompt, new, ctx, fused):
    import dataclasses

    from harmony_ref.config import RunConfig
    from harmony_ref.backends.host import scaled_spec

    cfg = RunConfig.from_names(model=model, policy=policy, prompt_tokens=prompt, new_tokens=new,
                            context_tokens=ctx, fused=fused)
    return dataclasses.replace(cfg, spec=scaled_spec(cfg.spec, div))


CONTENDED_RATIO = 1.2  # load canary this much slower than at calibration: the row is "contended"


def heldout_e2e(profile, workloads, host_device, stat: str = "min", canary=None) -> list[dict]:
    """Measure each held-out workload on the host and predict it with SimulatedDevice(profile).
    `measured` sums each op's `stat` time (as the fit used); `measured_median` the medians.
    With a LoadCanary: wait (bounded) for a quiet moment first, and record the canary's slowdown
    before and after (`load_ratio`, the larger): rows above CONTENDED_RATIO are marked."""
    from harmony_ref.backends.simulated import SimulatedDevice

    sim = SimulatedDevice(profile)
    rows = []
    for w in workloads:
        cfg, fused = workload_config(*w), w[-1]
        before = canary.wait_quiet(CONTENDED_RATIO) if canary else None
        run = host_device.run(cfg)
        load = max(before, canary.ratio()) if canary else None
        measured = phase_times_ms(run, cfg.scenario.new_tokens, stat)
        predicted = sim.predict(cfg)
        for metric in E2E_METRICS:
            if metric in measured and metric in predicted:
                mv, pv = measured[metric], predicted.value(metric)
                rows.append({"workload": cfg.label, "fused": fused, "metric": metric, "measured": mv,
                             "measured_median": run.metrics.value(metric), "model": pv,
                             "ape_pct": ape_pct(pv, mv), "load_ratio": load,
                             "contended": bool(load is not None and load > CONTENDED_RATIO)})
    return rows


# --- phase-level calibration of a device profile from command runs --------------------------------
#
# A phone rarely reports per-op times; a benchmark command reports phases (prefill, decode step).
# `fit_phase_efficiencies` keeps a profile's peaks and fits its compute_efficiency,
# memory_efficiency and launch_overhead_us to measured phase times, by the same NNLS per regime:
#   T_phase = n_launches * L + sum_ops count * max(c_op / ce, m_op / me)
# with c_op, m_op the op's compute and memory time at efficiency 1 (the cost model's formulas).

PHASE_METRICS = {"prefill": "prefill_ms", "decode": "decode_step_ms"}


def phase_terms(profile, config, phase: str) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """(launches, per-op compute s, memory s at efficiency 1, per-op counts) of one phase. Decode
    uses the step at context prompt + new_tokens // 2 + 1 (costs are affine in the context)."""
    from harmony_ref.model.graph import build_graph

    s = config.scenario
    kw = dict(fused=config.fused, kv_dtype=config.kv_dtype, batch=s.batch)
    if phase == "prefill":
        g = build_graph(config.spec, config.policy, "prefill", tokens=s.prompt_tokens, **kw)
    else:
        g = build_graph(config.spec, config.policy, "decode", context=s.prompt_tokens + s.new_tokens // 2 + 1, **kw)
    r = Roofline.of(profile, efficiencies=False)
    comp, memt, count = [], [], []
    for op, n in g.unique_ops():
        nbytes = dram_bytes(op.streamed_bytes, op.other_bytes, op.tile_bytes, r.onchip_bytes)
        _, c, m = op_time_s(op.flops, op.vector_flops, nbytes, r.matmul_ops_per_s[op.dtype],
                            r.vector_ops_per_s, r.bandwidth_bytes_per_s, r.launch_s)
        comp.append(c)
        memt.append(m)
        count.append(n)
    return g.kernel_launches, np.array(comp), np.array(memt), np.array(count, dtype=float)


@dataclass(frozen=True)
class PhaseFit:
    compute_efficiency: float
    memory_efficiency: float
    launch_s: float
    iterations: int

    def predict_s(self, terms) -> float:
        n, comp, memt, count = terms
        return n * self.launch_s + float((np.maximum(comp / self.compute_efficiency,
                                                     memt / self.memory_efficiency) * count).sum())


def fit_phase_efficiencies(rows, start: PhaseFit) -> PhaseFit:
    """rows: (terms, measured_s). NNLS on x = [L, 1/ce, 1/me], relative error, regimes iterated."""
    from scipy.optimize import nnls

    if len(rows) < 3:
        raise ValueError(f"calibration: need at least 3 measured phases to fit 3 numbers, got {len(rows)}")
    cur, best, best_err = start, None, float("inf")
    for it in range(1, MAX_ITERATIONS + 1):
        a = np.zeros((len(rows), 3))
        for i, ((n, comp, memt, count), t) in enumerate(rows):
            compute_bound = comp / cur.compute_efficiency >= memt / cur.memory_efficiency
            a[i] = [n, (comp * count)[compute_bound].sum(), (memt * count)[~compute_bound].sum()]
            a[i] /= t
        norms = np.linalg.norm(a, axis=0)
        used = norms > 0
        x = np.zeros(3)
        xs, _ = nnls(a[:, used] / norms[used], np.ones(len(rows)))
        x[used] = xs / norms[used]
        new = PhaseFit(1.0 / x[1] if x[1] > 0 else cur.compute_efficiency,
                       1.0 / x[2] if x[2] > 0 else cur.memory_efficiency, float(x[0]), it)
        err = sum(((new.predict_s(terms) - t) / t) ** 2 for terms, t in rows)
        if err < best_err:
            best, best_err = new, err
        if np.isclose(new.compute_efficiency, cur.compute_efficiency, rtol=1e-9) and \
                np.isclose(new.memory_efficiency, cur.memory_efficiency, rtol=1e-9):
            break
        cur = new
    return best


def profile_with_efficiencies(base: str, f: PhaseFit, name: str, description: str) -> tuple[str, list[str]]:
    """The TOML of the base profile (a shipped name or a path, as `load_profile` takes it) with the
    three fitted numbers replaced, and notes on any fitted efficiency above 1 (measurements faster
    than the profile's peak: implausible, capped at 1)."""
    from harmony_ref._toml import read_toml
    from harmony_ref.device.profile import PROFILES_FOLDER, profile_from_dict

    data, source = read_toml("profile", PROFILES_FOLDER, base)
    profile = profile_from_dict(data, source)  # the same checks load_profile makes
    notes = []
    ce, me = f.compute_efficiency, f.memory_efficiency
    for label, v in (("compute_efficiency", ce), ("memory_efficiency", me)):
        if v > 1.0:
            notes.append(f"implausible: fitted {label} = {v:.3f} > 1 (faster than {profile.name}'s peak); capped at 1")
    fitted = {("compute", "compute_efficiency"): min(ce, 1.0), ("memory", "memory_efficiency"): min(me, 1.0),
              ("runtime", "launch_overhead_us"): f.launch_s * US_PER_S}
    data["name"], data["description"] = name, description
    head = [f"# Profile written by `harmony-ref calibrate --backend command` from {profile.name}: the three",
            "# numbers marked `fitted` come from measured phase times; the rest is the base profile's."]
    head += [f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    tables = []
    for sec, table in data.items():
        if isinstance(table, dict):
            tables.append(_toml_table(sec, [(k, fitted.get((sec, k), v), "fitted" if (sec, k) in fitted else "")
                                            for k, v in table.items()]))
    return "\n".join(head) + "\n\n" + "\n\n".join(tables) + "\n", notes
