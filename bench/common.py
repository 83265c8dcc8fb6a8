"""Seeded, cached inputs shared by the asv benchmarks (numpy's benchmarks/common.py pattern).

Must not be changed -- only appended: asv compares a benchmark across commits, and changing an
input silently breaks that history. New inputs get new names.
"""

from __future__ import annotations

import functools
import time

import numpy as np

SEED = 20240601

# The sweep every predicted-metric benchmark runs over (shipped profiles and policies).
PROFILES = ["harmony-flagship", "harmony-midrange", "harmony-lowend"]
POLICIES = ["fp16", "int8", "int4-g32", "int4-g128", "mixed"]
MODEL = "llama-3.2-3b"

# Decode GEMV shapes: (N outputs, K inputs) of real projections.
GEMV_SHAPES = [(3072, 3072), (8192, 3072), (4096, 14336)]


@functools.lru_cache(maxsize=None)
def weights(n: int, k: int, seed: int = SEED) -> np.ndarray:
    """(N, K) float32 weights shaped like an LLM projection (std 0.02). Cached: treat as read-only."""
    w = (np.random.default_rng(seed).standard_normal((n, k)) * 0.02).astype(np.float32)
    w.setflags(write=False)
    return w


@functools.lru_cache(maxsize=None)
def activations(k: int, rows: int = 1, seed: int = SEED + 1) -> np.ndarray:
    """(rows, K) float32 activations (unit variance). Cached: treat as read-only."""
    x = np.random.default_rng(seed).standard_normal((rows, k)).astype(np.float32)
    x.setflags(write=False)
    return x


def shape_id(n: int, k: int) -> str:
    return f"n{n:05}_k{k:05}"


# --- Directions. asv takes every benchmark as lower-is-better (its compare and its Regressions
# page have no notion of "higher is better"; `unit` only labels the axis), so every track_ returns
# a record metric in its lower-is-better form, checked against the metric's own direction (the
# one the gate uses) each time it runs. tests/test_bench_metrics.py checks every track_ too.

LOWER_FORMS = {
    "same": lambda v: v,  # a lower-is-better metric, as recorded
    "reciprocal": lambda v: 1.0 / v,  # a speed-up (x) -> the slowdown (x)
    "missing_pct": lambda v: 100.0 - v,  # a % of an ideal 100 (recall@1) -> the % short of it
    "one_minus": lambda v: 1.0 - v,  # a fraction of an ideal 1 (cosine) -> the loss
    "lost_pct": lambda v: 100.0 * (1.0 - v),  # a kept fraction (sustained/peak) -> % lost
}


def tracks(metric: str | None, form: str = "same", unit: str = "", direction: str = ""):
    """Declare what a track_ method follows: the record metric `metric` (whose direction the gate
    knows) drawn in lower-is-better `form`. A quantity no record holds passes metric=None and
    says its `direction` ("lower") itself."""
    if form not in LOWER_FORMS:
        raise ValueError(f"form {form!r}: one of {sorted(LOWER_FORMS)}")
    if metric is None and direction != "lower":
        raise ValueError("a track_ that follows no record metric must be lower-is-better")

    def mark(fn):
        fn.metric, fn.form, fn.unit, fn.direction = metric, form, unit, direction
        return fn

    return mark


def lower_is_better(metric, form: str) -> float:
    """A Metric's value in lower-is-better `form`; ValueError when its recorded direction does
    not fit the form (a direction that changed must not be drawn upside down)."""
    want = "lower" if form == "same" else "higher"
    if metric.direction != want:
        raise ValueError(f"{metric.name} is recorded {metric.direction}-is-better; form {form!r} "
                         f"is for {want}-is-better metrics")
    return float(LOWER_FORMS[form](metric.value))


# --- Stable timings on a shared 2-core machine. A parallel Numba kernel whose worker thread is
# preempted waits a scheduler slice (1 ms kernels measured at 12 ms), so kernel time_ benchmarks
# run on THREADS = 1 thread (Numba and OpenBLAS) and are timed in CPU time (Timed); thread
# scaling is measured apart, in tests/perf (test_perf_thread_scaling). Inputs are cached per process: asv re-runs setup before every sample, which must
# not rebuild a quantized matrix each time.

THREADS = 1



class Timed:
    """asv timing attributes for kernel benchmarks (a base class: asv reads them through the
    subclass). asv re-runs setup before each sample and times one call per sample when a class
    has a setup; at least 10 samples a round, up to 50 or 20 s, over asv's 2 interleaved rounds,
    after 0.2 s of warm-up; asv reports their median and keeps their spread for `asv compare`."""

    repeat = (10, 50, 20.0)
    min_run_count = 10
    warmup_time = 0.2
    # CPU time of this one-threaded process, not wall time: a call preempted by a neighbour on a
    # shared 2-core machine does not count the wait (asv documents process_time for this).
    timer = staticmethod(time.process_time)


def pin_threads(n: int = THREADS) -> None:
    """Numba and OpenBLAS on `n` threads for the rest of this benchmark process."""
    import numba

    from harmony_ref.hil._timing import set_blas_threads

    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    set_blas_threads(n)


@functools.lru_cache(maxsize=None)
def int4_weights(n: int, k: int, group_size: int, scheme: str = "asym"):
    """quantize_int4(weights(n, k)), cached (read-only by convention)."""
    from harmony_ref.quant.int4 import quantize_int4

    return quantize_int4(weights(n, k), group_size, scheme)


@functools.lru_cache(maxsize=None)
def int8_weights(n: int, k: int):
    from harmony_ref.quant.int8 import quantize_int8

    return quantize_int8(weights(n, k))
