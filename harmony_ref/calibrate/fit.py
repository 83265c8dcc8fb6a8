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

For a phone, which rarely reports per-op times, `fit_phase_efficiencies` fits a profile's
compute and memory efficiencies and launch overhead to measured phase times the same way.

How good a fit is on what it was not fitted on: calibrate/error.py; the profile it writes:
calibrate/write.py; the whole calibration, step by step: calibrate/run.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harmony_ref.backends.host_timing import pick
from harmony_ref.device.cost import Roofline, dram_bytes, op_roofline_s, op_time_s
from harmony_ref.device.soc import HOST_WEIGHT_ONLY_COMPUTE, compute_dtype
from harmony_ref.units import GIGA, US_PER_S

RATE_CLASSES = (
    "int4",
    "int8",
    "fp16",
    "vector",
    "attention",
    "attention_decode",
    "gemv_int4",
    "gemv_int8",
    "gemv_fp16",
)
BASIC_CLASSES = ("int4", "int8", "fp16", "vector")  # what the microbenchmarks measure


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
            raise ValueError(
                f"op {self.name}: rate_class {self.rate_class!r} not in {RATE_CLASSES}"
            )
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
        matmul, vector = (
            (0.0, op.ops + op.vector_ops) if op.rate_class == "vector" else (op.ops, op.vector_ops)
        )
        rate = self.rates[op.rate_class]
        t, c, m = op_time_s(
            matmul,
            vector,
            op.nbytes,
            rate,
            self.rates["vector"],
            self.bandwidth_bytes_per_s,
            self.launch_s,
            op.launches,
        )
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
            rates = {
                c: (1.0 / x[1 + i] if x[1 + i] > 0 else seed_rates.get(c, GIGA))
                for i, c in enumerate(RATE_CLASSES)
            }
            bw = 1.0 / x[-1] if x[-1] > 0 else seed_bandwidth
            current = HostFit(float(x[0]), rates, bw, fitted, it)
            err = _rel_sse(current, train)
            if err < best_err:
                best, best_err = current, err
            new = [current.regime(op) for op in train]
            if new == regimes:
                break
            regimes = new
    return HostFit(
        best.launch_s,
        best.rates,
        best.bandwidth_bytes_per_s,
        best.fitted,
        best.iterations,
        {op.name: best.regime(op) for op in ops},
    )


def seed_rates(ops: list[OpSample]) -> dict[str, float]:
    """First guess per class: the best achieved ops/s among that class's samples."""
    out = {}
    for c in RATE_CLASSES:
        r = [op.ops / op.time_s for op in ops if op.rate_class == c and op.ops > 0]
        out[c] = max(r) if r else GIGA  # no sample of the class: 1 Gop/s, only a seed
    return out


# --- op times from a file (`--backend command`) and from whole-model host runs ----------------------

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
                out.append(
                    OpSample(
                        row["name"],
                        row["rate_class"],
                        float(row["ops"]),
                        float(row["bytes"]),
                        int(row["launches"]),
                        float(row["time_us"]) / US_PER_S,
                        holdout=row.get("holdout", "0").strip() in ("1", "true", "yes"),
                        vector_ops=float(row.get("vector_ops") or 0.0),
                    )
                )
            except (ValueError, TypeError) as e:
                raise ValueError(f"{path}: line {i}: {e}") from e
    _check_op_rows(out, path)
    return out


def _check_op_rows(ops: list[OpSample], path) -> None:
    """A name given twice (the fit's regimes and the table are keyed by it), or a held-out row
    that is the same op as a fitted one (same class, ops, bytes, launches and vector ops: the
    model predicts both the same, so its error there is the fit's own), is bad input: one line
    naming both rows (line numbers as in the file, header = line 1)."""
    names: dict[str, int] = {}
    fitted: dict[tuple, int] = {}
    for i, op in enumerate(ops, start=2):
        if op.name in names:
            raise ValueError(f"{path}: line {i}: name {op.name!r} is also line {names[op.name]}'s")
        names[op.name] = i
        if not op.holdout:
            fitted.setdefault((op.rate_class, op.ops, op.nbytes, op.launches, op.vector_ops), i)
    for i, op in enumerate(ops, start=2):
        twin = fitted.get((op.rate_class, op.ops, op.nbytes, op.launches, op.vector_ops))
        if op.holdout and twin is not None:
            raise ValueError(
                f"{path}: line {i}: held-out op {op.name!r} is the same op as fitted line "
                f"{twin} (held out means held out)"
            )


def samples_from_op_times(
    op_times,
    onchip_bytes: int,
    holdout: bool = False,
    tag: str = "",
    dedupe: bool = True,
    stat: str = "min",
) -> list[OpSample]:
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
        cls = (
            compute_dtype(op.dtype, op.act_dtype, HOST_WEIGHT_ONLY_COMPUTE)
            if op.flops
            else "vector"
        )
        times = tuple(pick(t, stat) for t in ts)
        if op.flops:
            out.append(
                OpSample(
                    f"{tag}{phase}:{name}",
                    cls,
                    float(op.flops),
                    float(nbytes),
                    1,
                    statistics.median(times),
                    times,
                    holdout,
                    float(op.vector_flops),
                )
            )
        else:
            out.append(
                OpSample(
                    f"{tag}{phase}:{name}",
                    "vector",
                    float(op.vector_flops),
                    float(nbytes),
                    1,
                    statistics.median(times),
                    times,
                    holdout,
                )
            )
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
            measured = sum(pick(t, stat) for t in ts)
            bound = sum(
                max(f.compute_s(s), f.memory_s(s))
                for s in samples_from_op_times(ts, onchip_bytes, dedupe=False, stat=stat)
            )
            num += n * (measured - bound)
            den += n * n
    if den == 0:
        return f
    launch = max(0.0, num / den)
    fitted = tuple(x for x in f.fitted if x != "launch") + ("launch",)
    return HostFit(launch, f.rates, f.bandwidth_bytes_per_s, fitted, f.iterations, f.regimes)


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
        g = build_graph(
            config.spec,
            config.policy,
            "decode",
            context=s.prompt_tokens + s.new_tokens // 2 + 1,
            **kw,
        )
    r = Roofline.of(profile, efficiencies=False)
    comp, memt, count = [], [], []
    for op, n in g.unique_ops():
        c, m = op_roofline_s(profile, op, r)
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
        return n * self.launch_s + float(
            (
                np.maximum(comp / self.compute_efficiency, memt / self.memory_efficiency) * count
            ).sum()
        )


def fit_phase_efficiencies(rows, start: PhaseFit) -> PhaseFit:
    """rows: (terms, measured_s). NNLS on x = [L, 1/ce, 1/me], relative error, regimes iterated."""
    from scipy.optimize import nnls

    if len(rows) < 3:
        raise ValueError(
            f"calibration: need at least 3 measured phases to fit 3 numbers, got {len(rows)}"
        )
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
        new = PhaseFit(
            1.0 / x[1] if x[1] > 0 else cur.compute_efficiency,
            1.0 / x[2] if x[2] > 0 else cur.memory_efficiency,
            float(x[0]),
            it,
        )
        err = sum(((new.predict_s(terms) - t) / t) ** 2 for terms, t in rows)
        if err < best_err:
            best, best_err = new, err
        if np.isclose(new.compute_efficiency, cur.compute_efficiency, rtol=1e-9) and np.isclose(
            new.memory_efficiency, cur.memory_efficiency, rtol=1e-9
        ):
            break
        cur = new
    return best
