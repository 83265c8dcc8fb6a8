"""Calibration: fit a roofline + launch-overhead model to measured op times, and say how far the
model is from measurements it was not fitted on.

The model, per op:  t = launches * L + max(ops / R[class], bytes / BW)
with L the launch overhead, R[class] the achieved rate of the op's compute class (int4, int8,
fp16 matmuls, vector ops) and BW the achieved memory bandwidth.

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

Held-out error: the fit uses the ops marked `holdout=False`; MAPE is reported per op on the
`holdout=True` ones, and end to end (whole-model TTFT / decode step) on runs never fitted on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

RATE_CLASSES = ("int4", "int8", "fp16", "vector")
MAX_ITERATIONS = 20
COMPUTE, MEMORY = "compute", "memory"


@dataclass(frozen=True)
class OpSample:
    """One measured op (or microbenchmark): what it does and how long it took."""

    name: str
    rate_class: str  # int4 | int8 | fp16 | vector: which compute rate it runs at
    ops: float  # arithmetic ops (2*M*N*K for a matmul)
    nbytes: float  # bytes read + written
    launches: int  # kernel launches (1 fused, 3 for an unfused norm chain, ...)
    time_s: float  # median measured time
    samples: tuple[float, ...] = ()
    holdout: bool = False

    def __post_init__(self):
        if self.rate_class not in RATE_CLASSES:
            raise ValueError(f"op {self.name}: rate_class {self.rate_class!r} not in {RATE_CLASSES}")
        if not self.time_s > 0:
            raise ValueError(f"op {self.name}: time_s must be > 0, got {self.time_s!r}")


@dataclass(frozen=True)
class HostFit:
    launch_s: float
    rates: dict[str, float]  # achieved ops/s per class
    bandwidth_bytes_per_s: float
    fitted: tuple[str, ...]  # which unknowns a row constrained ("launch", "int4", ..., "bandwidth")
    iterations: int
    regimes: dict[str, str] = field(default_factory=dict)

    def compute_s(self, op: OpSample) -> float:
        return op.ops / self.rates[op.rate_class]

    def memory_s(self, op: OpSample) -> float:
        return op.nbytes / self.bandwidth_bytes_per_s

    def predict_s(self, op: OpSample) -> float:
        return op.launches * self.launch_s + max(self.compute_s(op), self.memory_s(op))

    def regime(self, op: OpSample) -> str:
        return COMPUTE if self.compute_s(op) >= self.memory_s(op) else MEMORY


def _solve(ops: list[OpSample], regimes: list[str]):
    from scipy.optimize import nnls

    ncols = 2 + len(RATE_CLASSES)
    a = np.zeros((len(ops), ncols))
    for i, (op, reg) in enumerate(zip(ops, regimes)):
        a[i, 0] = op.launches
        if reg == COMPUTE:
            a[i, 1 + RATE_CLASSES.index(op.rate_class)] = op.ops
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


def fit(ops: list[OpSample], seed_bandwidth: float, seed_rates: dict[str, float]) -> HostFit:
    """Fit on the ops with holdout=False (see the module docstring for the method)."""
    train = [op for op in ops if not op.holdout]
    if len(train) < 3:
        raise ValueError(f"calibration: need at least 3 fitted ops, got {len(train)}")
    current = HostFit(0.0, dict(seed_rates), seed_bandwidth, (), 0)
    regimes = [current.regime(op) for op in train]
    names = ("launch",) + RATE_CLASSES + ("bandwidth",)
    for it in range(1, MAX_ITERATIONS + 1):
        x, used = _solve(train, regimes)
        fitted = tuple(n for n, u, v in zip(names, used, x) if u and v > 0)
        rates = {c: (1.0 / x[1 + i] if x[1 + i] > 0 else seed_rates[c]) for i, c in enumerate(RATE_CLASSES)}
        bw = 1.0 / x[-1] if x[-1] > 0 else seed_bandwidth
        current = HostFit(float(x[0]), rates, bw, fitted, it)
        new = [current.regime(op) for op in train]
        if new == regimes:
            break
        regimes = new
    return HostFit(current.launch_s, current.rates, current.bandwidth_bytes_per_s, current.fitted,
                   current.iterations, {op.name: current.regime(op) for op in ops})


def ape_pct(predicted: float, measured: float) -> float:
    return abs(predicted - measured) / measured * 100.0


def mape_pct(pairs) -> float:
    pairs = list(pairs)
    if not pairs:
        raise ValueError("MAPE of an empty set")
    return float(np.mean([ape_pct(p, m) for p, m in pairs]))
